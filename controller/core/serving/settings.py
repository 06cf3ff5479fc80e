"""The serving reconciler's settings: images, allow-lists and defaults (chart values).

Kept apart from the run controller's `Settings` so the two reconcilers can be wired and
tested independently; `settings_from_env` for these is the wiring engineer's, next to
the existing one (the variable names are in each field's comment).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.core.podpolicy import PodPolicy
from controller.core.serving.runtimes import ServingImages
from controller.core.settings import DEFAULT_IMAGE


@dataclass(frozen=True)
class ServingSettings:
    """What the serving reconciler reads from its environment."""

    images: ServingImages = field(default_factory=ServingImages)  # SERVING_IMAGE_<RUNTIME>
    fetch_image: str = DEFAULT_IMAGE  # SERVING_FETCH_IMAGE: has `longrun-fetch` on its PATH
    allowed_images: tuple[str, ...] = ()  # ALLOWED_SERVING_IMAGES (globs; empty: any image)
    pod_policy: PodPolicy = field(default_factory=PodPolicy)  # ALLOWED_TOLERATIONS, ...
    cluster_domain: str = "cluster.local"  # CLUSTER_DOMAIN
    hf_endpoint: str | None = None  # HF_ENDPOINT for the download (a mirror, or tests)
    default_cache_size: str = "20Gi"  # SERVING_CACHE_SIZE
    download_deadline_seconds: int = 3600  # added to startupTimeoutSeconds: the rollout deadline
