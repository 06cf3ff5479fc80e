"""The serving reconciler's settings: images, allow-lists and defaults (chart values).

Kept apart from the run controller's `Settings` so the two reconcilers can be wired and
tested independently; `serving_settings_from_env` reads the same environment (the chart
sets `SERVING_*` from `serving.*` values, the allow-lists are shared with configs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from controller.core.podpolicy import PodPolicy
from controller.core.serving.runtimes import ServingImages
from controller.core.settings import DEFAULT_IMAGE, parse_bool, parse_cidrs, parse_list

# Where Hugging Face sends downloads of large files (its CDN, Xet storage): the hosts an
# https redirect of a download may go to by default (chart serving.fetch.redirectHosts).
DEFAULT_REDIRECT_HOSTS = ("*.hf.co", "*.huggingface.co")


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
    # The model download (longrun-fetch, runners/fetch_net.py): networks it never connects to
    # (DENIED_CIDRS, shared with runners), hosts an https redirect may go to
    # (SERVING_FETCH_REDIRECT_HOSTS), and whether s3:// may use the node's instance role
    # (SERVING_FETCH_INSTANCE_METADATA).
    denied_cidrs: tuple[str, ...] = ()
    fetch_redirect_hosts: tuple[str, ...] = DEFAULT_REDIRECT_HOSTS
    fetch_instance_metadata: bool = False


def serving_settings_from_env(env: Mapping[str, str] | None = None) -> ServingSettings:
    """Settings from environment variables (unset or empty: the default); SettingsError
    naming a bad one."""
    env = os.environ if env is None else env
    defaults = ServingImages()
    images = ServingImages(
        **{
            f.name: env.get(f"SERVING_IMAGE_{f.name.upper()}") or getattr(defaults, f.name)
            for f in fields(ServingImages)
        }
    )
    return ServingSettings(
        images=images,
        fetch_image=env.get("SERVING_FETCH_IMAGE")
        or env.get("DEFAULT_RUNNER_IMAGE")
        or DEFAULT_IMAGE,
        allowed_images=parse_list(env.get("ALLOWED_SERVING_IMAGES", "")),
        pod_policy=PodPolicy(toleration_keys=parse_list(env.get("ALLOWED_TOLERATIONS", ""))),
        cluster_domain=env.get("CLUSTER_DOMAIN") or "cluster.local",
        hf_endpoint=env.get("HF_ENDPOINT") or None,
        default_cache_size=env.get("SERVING_CACHE_SIZE") or "20Gi",
        denied_cidrs=parse_cidrs(env.get("DENIED_CIDRS", ""), name="DENIED_CIDRS"),
        fetch_redirect_hosts=parse_list(
            env.get("SERVING_FETCH_REDIRECT_HOSTS", ",".join(DEFAULT_REDIRECT_HOSTS))
        ),
        fetch_instance_metadata=parse_bool(
            env.get("SERVING_FETCH_INSTANCE_METADATA", "") or "false",
            name="SERVING_FETCH_INSTANCE_METADATA",
        ),
    )
