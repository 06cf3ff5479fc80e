"""The serving reconciler's settings: images, allow-lists and defaults (chart values).

Kept apart from the run controller's `Settings` so the two reconcilers can be wired and
tested independently; `serving_settings_from_env` reads the same environment (the chart
sets `SERVING_*` from `serving.*` values; tolerations and DENIED_CIDRS are shared with runs).

The defaults are the safe ones (docs/security.md, "Serving"): only the runtime images the
chart ships, no custom command line, no env from Secrets, no Ingress host, no ClusterIssuer,
ClusterIP Services only. Each refusal names the setting that would allow it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import get_args

from contracts.base import DNS_LABEL, DNS_SUBDOMAIN
from contracts.serving import EndpointSpec
from contracts.serving.placement import RESOURCE_NAME
from controller.core.podpolicy import PodPolicy
from controller.core.serving.catalog import CatalogSettings
from controller.core.serving.egress import EgressAllowList, EgressSettingError, parse_egress
from controller.core.serving.runtimes import ServingImages
from controller.core.settings import (
    DEFAULT_IMAGE,
    SettingsError,
    parse_bool,
    parse_cidrs,
    parse_list,
)

NAMESPACE_PLACEHOLDER = "{namespace}"
HOST_LABEL = re.compile(r"^\*$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SERVICE_TYPES: tuple[str, ...] = get_args(EndpointSpec.model_fields["service_type"].annotation)
# Where Hugging Face sends downloads of large files (its CDN, Xet storage): the hosts an
# https redirect of a download may go to by default (chart serving.fetch.redirectHosts).
DEFAULT_REDIRECT_HOSTS = ("*.hf.co", "*.huggingface.co")
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class ServingSettings:
    """What the serving reconciler reads from its environment."""

    images: ServingImages = field(default_factory=ServingImages)  # SERVING_IMAGE_<RUNTIME>
    fetch_image: str = DEFAULT_IMAGE  # SERVING_FETCH_IMAGE: has `longrun-fetch` on its PATH
    # SERVING_TOKEN_CHECK_IMAGE: has `longrun-token-check` (auth.oidc); default: the fetch image
    token_check_image: str = DEFAULT_IMAGE
    # ALLOWED_SERVING_IMAGES: globs of more server images; the images above (any tag or
    # digest of their repositories) are always allowed. "*": any image.
    allowed_images: tuple[str, ...] = ()
    allow_custom_commands: bool = False  # SERVING_ALLOW_CUSTOM_COMMANDS: generic command/args
    allowed_env_secrets: tuple[str, ...] = ()  # ALLOWED_SERVING_ENV_SECRETS (globs; empty: none)
    pod_policy: PodPolicy = field(default_factory=PodPolicy)  # ALLOWED_TOLERATIONS, ...
    # DENIED_CIDRS: closed to server pods by NetworkPolicy, and refused by the model download
    # itself (longrun-fetch --denied-cidrs, runners/fetch_net.py)
    denied_cidrs: tuple[str, ...] = ()
    egress: EgressAllowList | None = None  # SERVING_EGRESS_POLICY (JSON): allow-list mode
    # ALLOWED_SERVING_HOSTS: Ingress host patterns; a label `*` is any one label, and
    # `{namespace}` is the deployment's namespace. Empty: no Ingress.
    allowed_hosts: tuple[str, ...] = ()
    allowed_cluster_issuers: tuple[str, ...] = ()  # ALLOWED_SERVING_CLUSTER_ISSUERS (globs)
    allowed_service_types: tuple[str, ...] = ("ClusterIP",)  # ALLOWED_SERVING_SERVICE_TYPES
    cluster_domain: str = "cluster.local"  # CLUSTER_DOMAIN
    hf_endpoint: str | None = None  # HF_ENDPOINT for the download (a mirror, or tests)
    default_cache_size: str = "20Gi"  # SERVING_CACHE_SIZE
    download_deadline_seconds: int = 3600  # added to startupTimeoutSeconds: the rollout deadline
    # The model download (longrun-fetch, runners/fetch_net.py): hosts an https redirect may go
    # to (SERVING_FETCH_REDIRECT_HOSTS), and whether s3:// may use the node's instance role
    # (SERVING_FETCH_INSTANCE_METADATA).
    fetch_redirect_hosts: tuple[str, ...] = DEFAULT_REDIRECT_HOSTS
    fetch_instance_metadata: bool = False
    # Placement (placement.py): the accelerator resource `resources.gpu` counts by default
    # (SERVING_GPU_RESOURCE) and the others a deployment may name (ALLOWED_SERVING_GPU_RESOURCES);
    # PriorityClasses (ALLOWED_PRIORITY_CLASSES, shared with runs), RuntimeClasses
    # (ALLOWED_RUNTIME_CLASSES) and the node label and topology keys of affinity and spread
    # constraints (ALLOWED_AFFINITY_KEYS), all globs; empty: none.
    gpu_resource: str = GPU_RESOURCE
    allowed_gpu_resources: tuple[str, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()
    allowed_runtime_classes: tuple[str, ...] = ()
    allowed_affinity_keys: tuple[str, ...] = ()
    # Model-server metrics (SERVING_METRICS, chart metrics.modelServers.enabled): every server
    # pod gets a `metrics` port that answers only the runtime's metrics path, without a key,
    # to the namespaces of SERVING_METRICS_NAMESPACES (empty: any pod). docs/serving.md.
    metrics: bool = False
    metrics_namespaces: tuple[str, ...] = ()
    # The model catalog (catalog.py): its ConfigMap, `namespace/name` (SERVING_CATALOG; empty:
    # none), and whether a missing Model is made from it (SERVING_CATALOG_LAZY, default on).
    catalog: CatalogSettings = field(default_factory=CatalogSettings)


def serving_settings_from_env(env: Mapping[str, str] | None = None) -> ServingSettings:
    """Settings from environment variables (unset or empty: the default)."""
    env = os.environ if env is None else env
    defaults = ServingImages()
    images = ServingImages(
        **{
            f.name: env.get(f"SERVING_IMAGE_{f.name.upper()}") or getattr(defaults, f.name)
            for f in fields(ServingImages)
        }
    )
    get = env.get
    try:
        egress = parse_egress(get("SERVING_EGRESS_POLICY", ""))
    except EgressSettingError as exc:
        raise SettingsError(str(exc)) from None
    fetch_image = get("SERVING_FETCH_IMAGE") or get("DEFAULT_RUNNER_IMAGE") or DEFAULT_IMAGE
    return ServingSettings(
        images=images,
        fetch_image=fetch_image,
        token_check_image=get("SERVING_TOKEN_CHECK_IMAGE") or fetch_image,
        allowed_images=parse_list(get("ALLOWED_SERVING_IMAGES", "")),
        allow_custom_commands=parse_bool(
            get("SERVING_ALLOW_CUSTOM_COMMANDS", ""), name="SERVING_ALLOW_CUSTOM_COMMANDS"
        ),
        allowed_env_secrets=parse_list(get("ALLOWED_SERVING_ENV_SECRETS", "")),
        pod_policy=PodPolicy(toleration_keys=parse_list(get("ALLOWED_TOLERATIONS", ""))),
        denied_cidrs=parse_cidrs(get("DENIED_CIDRS", ""), name="DENIED_CIDRS"),
        egress=egress,
        allowed_hosts=parse_host_patterns(get("ALLOWED_SERVING_HOSTS", "")),
        allowed_cluster_issuers=parse_list(get("ALLOWED_SERVING_CLUSTER_ISSUERS", "")),
        allowed_service_types=parse_service_types(get("ALLOWED_SERVING_SERVICE_TYPES", "")),
        cluster_domain=get("CLUSTER_DOMAIN") or "cluster.local",
        hf_endpoint=get("HF_ENDPOINT") or None,
        default_cache_size=get("SERVING_CACHE_SIZE") or "20Gi",
        fetch_redirect_hosts=parse_list(
            get("SERVING_FETCH_REDIRECT_HOSTS", ",".join(DEFAULT_REDIRECT_HOSTS))
        ),
        fetch_instance_metadata=parse_bool(
            get("SERVING_FETCH_INSTANCE_METADATA", "") or "false",
            name="SERVING_FETCH_INSTANCE_METADATA",
        ),
        gpu_resource=parse_resource_name(get("SERVING_GPU_RESOURCE", "") or GPU_RESOURCE),
        allowed_gpu_resources=parse_list(get("ALLOWED_SERVING_GPU_RESOURCES", "")),
        allowed_priority_classes=parse_list(get("ALLOWED_PRIORITY_CLASSES", "")),
        allowed_runtime_classes=parse_list(get("ALLOWED_RUNTIME_CLASSES", "")),
        allowed_affinity_keys=parse_list(get("ALLOWED_AFFINITY_KEYS", "")),
        metrics=parse_bool(get("SERVING_METRICS", ""), name="SERVING_METRICS"),
        metrics_namespaces=parse_namespaces(get("SERVING_METRICS_NAMESPACES", "")),
        catalog=parse_catalog_settings(get("SERVING_CATALOG", ""), get("SERVING_CATALOG_LAZY", "")),
    )


def parse_catalog_settings(where: str, lazy: str) -> CatalogSettings:
    """The catalog's ConfigMap (`namespace/name`) and lazy registration; SettingsError
    naming a malformed value."""
    where = where.strip()
    namespace, _, name = where.partition("/")
    if where and not (re.fullmatch(DNS_LABEL, namespace) and re.fullmatch(DNS_SUBDOMAIN, name)):
        raise SettingsError(
            f"SERVING_CATALOG={where!r} is not namespace/name of the catalog ConfigMap"
        )
    return CatalogSettings(where, parse_bool(lazy or "true", name="SERVING_CATALOG_LAZY"))


def parse_resource_name(text: str) -> str:
    """An extended resource name (SERVING_GPU_RESOURCE); SettingsError otherwise."""
    value = text.strip()
    if not re.fullmatch(RESOURCE_NAME, value):
        raise SettingsError(
            f"SERVING_GPU_RESOURCE={text!r} is not an extended resource name such as "
            "nvidia.com/gpu, amd.com/gpu or gpu.intel.com/i915"
        )
    return value


def parse_namespaces(text: str) -> tuple[str, ...]:
    """Namespace names (SERVING_METRICS_NAMESPACES); SettingsError naming a bad one."""
    names = parse_list(text)
    for name in names:
        if not re.fullmatch(DNS_LABEL, name) or len(name) > 63:
            raise SettingsError(f"SERVING_METRICS_NAMESPACES: {name!r} is not a namespace name")
    return names


def parse_host_patterns(text: str) -> tuple[str, ...]:
    """Ingress host patterns, lowercased; SettingsError for one that is not a host name whose
    labels are names, `*` (any one label) or hold `{namespace}`."""
    patterns = tuple(p.lower() for p in parse_list(text))
    for pattern in patterns:
        if pattern == "*":  # any host: every namespace may claim every host
            continue
        labels = pattern.split(".")
        plain = [label.replace(NAMESPACE_PLACEHOLDER, "x") for label in labels]
        fixed = [label for label in labels[-2:] if label != "*" and "{" not in label]
        if len(fixed) < 2 or not all(HOST_LABEL.match(label) for label in plain):
            raise SettingsError(
                f"ALLOWED_SERVING_HOSTS: {pattern!r} is not a host pattern: dot-separated "
                "labels, each a DNS label, `*` (any one label) or holding {namespace}, under a "
                "domain of at least two fixed labels (e.g. *.{namespace}.apps.example.com)"
            )
    return patterns


def parse_service_types(text: str) -> tuple[str, ...]:
    """Service types deployments may ask for (ClusterIP always); SettingsError naming an
    unknown one."""
    listed = parse_list(text)
    for kind in listed:
        if kind not in SERVICE_TYPES:
            raise SettingsError(
                f"ALLOWED_SERVING_SERVICE_TYPES: {kind!r} is not a Service type "
                f"({', '.join(SERVICE_TYPES)})"
            )
    return tuple(dict.fromkeys(("ClusterIP", *listed)))


def local_serving_settings(env: Mapping[str, str] | None = None) -> ServingSettings:
    """The settings of `longrun serve` and `longrun run` (local mode): the environment's,
    with the cluster-only allow-lists open. Locally there is no other tenant, no image is
    pulled (each runtime maps to a local server), no Ingress, Certificate, Service or
    NetworkPolicy is made, and what a `generic` deployment runs on the host is the local
    command's own concern; the rules that protect the server itself (reserved env names, key
    Secrets) stay."""
    settings = serving_settings_from_env(env)
    return replace(
        settings,
        allowed_images=("*",),
        allow_custom_commands=True,
        allowed_env_secrets=("*",),
        allowed_hosts=("*",),
        allowed_cluster_issuers=("*",),
        allowed_service_types=SERVICE_TYPES,
        allowed_gpu_resources=("*",),
        allowed_priority_classes=("*",),
        allowed_runtime_classes=("*",),
        allowed_affinity_keys=("*",),
    )
