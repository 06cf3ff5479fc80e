"""Signed tokens (`auth.oidc`): the verifier container beside the nginx sidecar, and its files.

With `auth.oidc` the sidecar asks a small verifier in the same pod about every request that
does not carry a valid API key (nginx `auth_request`, auth.py). The verifier is
`longrun-token-check` from the runner image (runners/tokencheck): it fetches the issuer's JWKS
and checks each token's signature, expiry, issuer, audience and required claims. It listens on
127.0.0.1:TOKEN_CHECK_PORT only, so nothing outside the pod can ask it; nothing it holds is a
secret (the JWKS is public).

Its settings are `oidc.json` in the sidecar's ConfigMap (beside nginx.conf). The pod template
carries their digest (TOKENS_ANNOTATION), so a change of issuer, audiences or claims rolls the
pods instead of waiting for a ConfigMap volume to refresh.

The cluster's own ServiceAccount issuer publishes its keys on the API server
(`/openid/v1/jwks`), which answers ServiceAccounts only. When the issuer or `jwksUri` is the
in-cluster API server, the verifier container alone gets what an in-cluster client has: a
projected token of the pod's ServiceAccount and the cluster CA (`kube-root-ca.crt`). The
server container never does (`automountServiceAccountToken: false` stays).
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlsplit

from contracts.serving import CLUSTER_API_HOSTS, OidcSpec
from controller.core.builders import restricted_container_security
from controller.core.names import GROUP_DOMAIN
from controller.core.serving import names
from controller.core.serving.auth import (
    CONF_VOLUME,
    PROXY_CONF_MOUNT,
    TMP_VOLUME,
    TOKEN_CHECK_PORT,
)
from controller.core.serving.runtimes import LOOPBACK

Manifest = dict[str, object]
TOKEN_CHECK_COMMAND = "longrun-token-check"
API_ACCESS_VOLUME = "kube-api-access"
API_ACCESS_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CA_VOLUME = "oidc-ca"
CA_MOUNT = "/etc/longrun/oidc-ca"
CA_FILE = "ca.crt"
TOKENS_ANNOTATION = f"{GROUP_DOMAIN}/oidc-config"
API_TOKEN_SECONDS = 3607  # what the kubelet gives an automounted token


def config_json(oidc: OidcSpec) -> str:
    """`oidc.json`, the verifier's settings (runners/tokencheck reads exactly these keys)."""
    body = {
        "issuer": oidc.issuer,
        "audiences": list(oidc.audiences),
        "claims": {k: list(v) for k, v in sorted(oidc.claims.items())},
        "jwksUri": oidc.jwks_uri,
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def config_digest(oidc: OidcSpec) -> str:
    """The pod template's TOKENS_ANNOTATION: a change rolls the pods."""
    text = config_json(oidc) + json.dumps(
        oidc.ca_config_map_ref and oidc.ca_config_map_ref.model_dump()
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reads_cluster_api(oidc: OidcSpec) -> bool:
    """True when the keys are fetched from the in-cluster API server (the issuer's discovery
    document or `jwksUri` is there)."""
    where = oidc.jwks_uri or oidc.issuer
    return (urlsplit(where).hostname or "").lower() in CLUSTER_API_HOSTS


def verifier_container(image: str, oidc: OidcSpec) -> Manifest:
    """`longrun-token-check` on loopback, reading oidc.json from the sidecar's ConfigMap."""
    mounts: list[Manifest] = [
        {"name": CONF_VOLUME, "mountPath": PROXY_CONF_MOUNT, "readOnly": True},
        {"name": TMP_VOLUME, "mountPath": "/tmp"},
    ]
    args = [
        "--config",
        f"{PROXY_CONF_MOUNT}/{names.OIDC_CONFIG_KEY}",
        "--listen",
        f"{LOOPBACK}:{TOKEN_CHECK_PORT}",
    ]
    if reads_cluster_api(oidc):
        mounts.append({"name": API_ACCESS_VOLUME, "mountPath": API_ACCESS_MOUNT, "readOnly": True})
        args += ["--service-account-dir", API_ACCESS_MOUNT]
    if oidc.ca_config_map_ref is not None:
        mounts.append({"name": CA_VOLUME, "mountPath": CA_MOUNT, "readOnly": True})
        args += ["--ca-file", f"{CA_MOUNT}/{CA_FILE}"]
    return {
        "name": names.TOKEN_CHECK_CONTAINER,
        "image": image,
        "command": [TOKEN_CHECK_COMMAND],
        "args": args,
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": restricted_container_security(),
    }


def verifier_volumes(oidc: OidcSpec) -> list[Manifest]:
    """The API access volume (cluster issuer only) and the issuer's CA (when named)."""
    out: list[Manifest] = []
    if reads_cluster_api(oidc):
        sources = [
            {"serviceAccountToken": {"expirationSeconds": API_TOKEN_SECONDS, "path": "token"}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
        ]
        out.append(
            {"name": API_ACCESS_VOLUME, "projected": {"defaultMode": 0o444, "sources": sources}}
        )
    if (ref := oidc.ca_config_map_ref) is not None:
        items = [{"key": ref.key, "path": CA_FILE}]
        out.append({"name": CA_VOLUME, "configMap": {"name": ref.name, "items": items}})
    return out
