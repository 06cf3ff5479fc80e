"""Deterministic names, labels and annotations of what a ModelDeployment owns.

As for runs (controller/core/names.py), "the name is the lock": a crash between two
writes never makes a second Secret (and so a second set of keys) or a second PVC,
because the next reconcile computes the same names and finds the objects. Long
deployment names are cut and suffixed with a hash of the full name.
"""

from __future__ import annotations

from controller.core.names import GROUP_DOMAIN, MANAGED_BY, MANAGER, fit

DEPLOYMENT_LABEL = f"{GROUP_DOMAIN}/model-deployment"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "model-server"
DEPLOYMENT_ANNOTATION = f"{GROUP_DOMAIN}/model-deployment"
SPEC_HASH_ANNOTATION = f"{GROUP_DOMAIN}/spec-hash"
# On the API-key Secret: the rotate annotation's value its keys were made for.
KEYS_ROTATED_FOR_ANNOTATION = f"{GROUP_DOMAIN}/keys-rotated-for"
# On the pod template: a digest of that value, so a rotation rolls the pods (the runtime and
# nginx read the key file at start).
KEYS_VERSION_ANNOTATION = f"{GROUP_DOMAIN}/api-keys-version"
NAME_MAX = 253
LABEL_MAX = 63
SERVICE_NAME_MAX = 63  # Service names are DNS labels
RUNTIME_CONTAINER = "server"
AUTH_CONTAINER = "auth-proxy"
FETCH_CONTAINER = "fetch-model"
TOKEN_CHECK_CONTAINER = "token-check"
OIDC_CONFIG_KEY = "oidc.json"
NGINX_CONF_KEY = "nginx.conf"
NGINX_KEYS_KEY = "nginx-keys.map"


def _child(name: str, suffix: str = "", limit: int = NAME_MAX) -> str:
    return fit(f"{name}{suffix}", limit)


def deployment_name(name: str) -> str:
    """The apps/v1 Deployment (its pods are named after it)."""
    return _child(name, limit=LABEL_MAX)


def service_name(name: str) -> str:
    """The Service; its DNS name is the deployment's in-cluster endpoint."""
    return _child(name, limit=SERVICE_NAME_MAX)


def api_key_secret_name(name: str) -> str:
    """The Secret holding the generated API keys."""
    return _child(name, "-api-keys")


def auth_config_name(name: str) -> str:
    """The ConfigMap holding the nginx auth sidecar's config (no keys in it)."""
    return _child(name, "-auth-proxy")


def cache_claim_name(name: str) -> str:
    """The PersistentVolumeClaim of the model cache."""
    return _child(name, "-model-cache")


def hpa_name(name: str) -> str:
    """The HorizontalPodAutoscaler."""
    return _child(name)


def ingress_name(name: str) -> str:
    """The Ingress."""
    return _child(name)


def certificate_name(name: str) -> str:
    """The cert-manager Certificate."""
    return _child(name)


def tls_secret_name(name: str) -> str:
    """The Secret cert-manager writes the certificate into (default)."""
    return _child(name, "-tls")


def network_policy_name(name: str) -> str:
    """The NetworkPolicy: traffic in reaches the auth sidecar only, traffic out avoids the
    denied networks (named when it held only the first; names never change)."""
    return _child(name, "-auth")


def label_value(name: str) -> str:
    """The `longrun.dev/model-deployment` label value (at most 63 characters)."""
    return fit(name, LABEL_MAX)


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select a deployment's pods (immutable in a Deployment: never add to them)."""
    return {DEPLOYMENT_LABEL: label_value(name), COMPONENT_LABEL: COMPONENT}


def labels(name: str) -> dict[str, str]:
    """Labels on every object and pod a deployment owns (the informers select on them)."""
    return {MANAGED_BY: MANAGER, **selector_labels(name)}


# Work-queue keys: runs are `namespace/name`; the serving kinds carry their kind in front
# (names never hold a slash, so the forms stay distinct).
DEPLOYMENT_KEY_PREFIX = "ModelDeployment/"
MODEL_KEY_PREFIX = "Model/"


def deployment_key(key: str) -> str:
    """The work-queue key of the ModelDeployment `namespace/name`."""
    return f"{DEPLOYMENT_KEY_PREFIX}{key}"


def model_key(key: str) -> str:
    """The work-queue key of the Model `namespace/name`."""
    return f"{MODEL_KEY_PREFIX}{key}"


def split_serving_key(key: str) -> tuple[str, str] | None:
    """(kind, `namespace/name`) of a serving work-queue key; None for any other key."""
    for kind, prefix in (("ModelDeployment", DEPLOYMENT_KEY_PREFIX), ("Model", MODEL_KEY_PREFIX)):
        if key.startswith(prefix):
            return kind, key.removeprefix(prefix)
    return None
