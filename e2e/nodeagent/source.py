"""Where a pod's ConfigMaps, Secrets and PersistentVolumeClaims come from on this machine.

ConfigMaps and Secrets are read from the API server when the pod starts (a
kubelet reads them through its own watch; a read per start is the same data).
One deviation from a cluster, the same as `longrun run` and the emulator's local
executor make: Secret volumes are materialized under the pod's own directory, so
a runner contract whose `secretsDir` is the default mount path is pointed there.

A projected `serviceAccountToken` is a TokenRequest for the pod's ServiceAccount, bound to
the pod (`boundObjectRef`), as the kubelet makes it; it is written once, at the pod's start.
The kubelet rewrites the file at 80 % of the token's lifetime; the agent does not (pods in
tests end well before the 10-minute minimum lifetime runs out).

A PersistentVolumeClaim is a host directory, `<pvc root>/<namespace>/<claimName>`,
that outlives the pod: the pod's mount is a symlink to it, so the next pod of the
same claim sees what the last one wrote (no binding to a PersistentVolume is
checked).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contracts.contract import DEFAULT_SECRETS_DIR
from local.podspec import PodSetupError, local_path

from .kube import ApiError, Kube

Obj = dict[str, Any]
CONTRACT_KEY = "contract.json"
# The OpenShift fork's ServiceAccount admission adds this ConfigMap to every pod's
# kube-api-access volume, and the controller that would publish it is off (e2e/README.md,
# "OpenShift-fork quirks"): the agent reads that source as optional.
FORK_CONFIG_MAPS = frozenset({"openshift-service-ca.crt"})


class ApiSource:
    """`local.podspec.VolumeSource` over the API server, for one pod (namespace + root)."""

    def __init__(self, kube: Kube, *, namespace: str, root: Path) -> None:
        self._kube = kube
        self._namespace = namespace
        self._root = root

    def config_map(self, name: str) -> Mapping[str, str] | None:
        obj = self._kube.config_map(self._namespace, name)
        if obj is None:
            return None
        data = dict(obj.get("data") or {})
        if CONTRACT_KEY in data:
            data[CONTRACT_KEY] = localize_contract(data[CONTRACT_KEY], root=self._root)
        return data

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        obj = self._kube.secret(self._namespace, name)
        if obj is None:
            return None
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}

    def service_account_token(self, pod: Obj, *, audience: str | None, seconds: int) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec: Obj = {
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if audience:
            spec["audiences"] = [audience]
        try:
            answer = self._kube.request_token(self._namespace, account, spec)
        except ApiError as exc:
            raise PodSetupError(
                f"projected serviceAccountToken: TokenRequest for ServiceAccount "
                f"{self._namespace}/{account} failed: {exc}"
            ) from None
        return str((answer.get("status") or {}).get("token") or "")


def tolerant(volume: Obj) -> Obj:
    """`volume` with the fork's ConfigMap sources of a projected volume made optional."""
    projected = volume.get("projected")
    if not isinstance(projected, dict):
        return volume
    sources = [
        {**s, "configMap": {**s["configMap"], "optional": True}}
        if (s.get("configMap") or {}).get("name") in FORK_CONFIG_MAPS
        else s
        for s in projected.get("sources") or []
    ]
    return {**volume, "projected": {**projected, "sources": sources}}


def localize_contract(text: str, *, root: Path) -> str:
    """The runner contract with a default `secretsDir` moved under the pod's root."""
    try:
        contract = json.loads(text)
    except ValueError:
        return text  # not ours to fix: the runner reports it (exit 2)
    if not isinstance(contract, dict):
        return text
    if contract.get("secretsDir", DEFAULT_SECRETS_DIR) == DEFAULT_SECRETS_DIR:
        contract["secretsDir"] = str(local_path(root, DEFAULT_SECRETS_DIR))
    return json.dumps(contract, sort_keys=True, indent=2) + "\n"


def claim_mounts(pod: Obj, container: Obj) -> dict[str, str]:
    """Mount path → claimName for the container's PersistentVolumeClaim mounts."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or []
        if v.get("persistentVolumeClaim")
    }
    return {
        m["mountPath"]: claims[m["name"]]
        for m in container.get("volumeMounts") or []
        if m.get("name") in claims and not m.get("subPath")
    }


def link_claims(pod: Obj, container: Obj, *, root: Path, claims_root: Path) -> None:
    """Replace each claim mount's fresh directory under `root` by a link to the claim's dir."""
    namespace = pod["metadata"]["namespace"]
    for mount_path, claim in claim_mounts(pod, container).items():
        target = claims_root / namespace / claim
        target.mkdir(parents=True, exist_ok=True)
        link = local_path(root, mount_path)
        if link.is_symlink():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
