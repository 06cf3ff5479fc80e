"""Projected volumes on the node agent: a ServiceAccount token bound to the pod, ConfigMap
and Secret items, downward-API fields, and what it refuses.

Real: the node agent running the pod as a local `python -c ...` process on either backend
(the API emulator with its kubelet off, or kube-apiserver + kube-controller-manager when
found), the TokenRequest it makes to that API server (`serviceaccounts/<sa>/token`, bound to
the pod), ConfigMaps and Secrets read from it. Faked: nothing; the token's payload is read
without verifying its signature (the claims are what is checked). The last tests call the
pod-tree builder directly, with ConfigMaps and Secrets from a dict and a recording source.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from e2e.nodeagent.containers import write_pod_volumes
from local.podspec import MappingSource, PodSetupError
from tests.nodeagent.conftest import Cluster, phase, terminated

Obj = dict[str, Any]
AUDIENCE = "models.example"
READ_ALL = """
import json, os, pathlib
root = pathlib.Path(os.environ['DIR'])
files = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob('*')) if p.is_file()}
pathlib.Path(os.environ['TERMINATION_MESSAGE_PATH']).write_text(json.dumps(files))
"""


def claims(token: str) -> Obj:
    """A JWT's payload, decoded without verifying it."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def projected(*sources: Obj) -> list[Obj]:
    return [{"name": "all", "projected": {"sources": list(sources)}}]


def test_a_projected_volume_holds_a_bound_token_and_the_items_asked_for(cluster: Cluster) -> None:
    cluster.core.create_namespaced_config_map(
        cluster.ns, {"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}}
    )
    cluster.core.create_namespaced_secret(
        cluster.ns, {"metadata": {"name": "sec"}, "stringData": {"key": "s3cr3t"}}
    )
    volumes = projected(
        {"serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": 600, "path": "token"}},
        {"configMap": {"name": "cm", "items": [{"key": "b", "path": "conf/b"}]}},
        {"secret": {"name": "sec"}},
        {"secret": {"name": "absent", "optional": True}},
        {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
    )
    container = {
        "env": [{"name": "DIR", "value": "/projected"}],
        "volumeMounts": [{"name": "all", "mountPath": "/projected", "readOnly": True}],
    }
    cluster.create_pod(
        "reader", READ_ALL, volumes=volumes, container=container, automountServiceAccountToken=False
    )
    pod = cluster.wait_phase("reader", "Succeeded", "Failed")
    assert phase(pod) == "Succeeded", pod.get("status")
    files = json.loads(terminated(pod)["message"])
    assert sorted(files) == ["conf/b", "key", "name", "token"]
    assert (files["conf/b"], files["key"], files["name"]) == ("2", "s3cr3t", "reader")
    said = claims(files["token"])
    assert said["aud"] == [AUDIENCE]
    assert said["sub"] == f"system:serviceaccount:{cluster.ns}:default"
    assert said["exp"] - said["iat"] >= 600
    bound = said["kubernetes.io"]["pod"]  # bound to the pod, as the kubelet asks
    assert bound == {"name": "reader", "uid": pod["metadata"]["uid"]}


class RecordingSource(MappingSource):
    """A MappingSource that issues made-up tokens and remembers what was asked."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.asked: list[tuple[str, str | None, int]] = []

    def service_account_token(self, pod: Obj, *, audience: str | None, seconds: int) -> str:
        self.asked.append((pod["metadata"]["name"], audience, seconds))
        return "header.payload.signature"


def pod_with(volumes: list[Obj]) -> Obj:
    mount = [{"name": "all", "mountPath": "/var/run/secrets/x"}]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"volumes": volumes, "containers": [{"name": "c", "volumeMounts": mount}]},
    }


def test_a_token_is_asked_for_with_the_audience_and_lifetime_and_written_private(
    tmp_path: Path,
) -> None:
    source = RecordingSource(config_maps={"cm": {"k": "v"}})
    volumes = projected(
        {"serviceAccountToken": {"audience": AUDIENCE, "path": "token"}},
        {"configMap": {"name": "cm"}},
    )
    write_pod_volumes(pod_with(volumes), source=source, root=tmp_path / "p", claims_root=tmp_path)
    folder = tmp_path / "p" / "var" / "run" / "secrets" / "x"
    assert (folder / "token").read_text() == "header.payload.signature"
    assert (folder / "token").stat().st_mode & 0o777 == 0o600
    assert (folder / "k").read_text() == "v"
    assert source.asked == [("p", AUDIENCE, 3600)]


NAMESPACE_FIELD = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}


def test_a_kube_api_access_volume_of_the_fork_starts_without_its_service_ca(
    tmp_path: Path,
) -> None:
    # As the OpenShift fork's ServiceAccount admission writes it (e2e/README.md): its
    # openshift-service-ca.crt is published by a controller the test plane does not run.
    volumes = projected(
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": NAMESPACE_FIELD}]}},
        {"configMap": {"name": "openshift-service-ca.crt",
                       "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}]}},
    )  # fmt: skip
    source = RecordingSource(config_maps={"kube-root-ca.crt": {"ca.crt": "PEM"}})
    write_pod_volumes(pod_with(volumes), source=source, root=tmp_path / "p", claims_root=tmp_path)
    folder = tmp_path / "p" / "var" / "run" / "secrets" / "x"
    assert sorted(p.name for p in folder.iterdir()) == ["ca.crt", "namespace", "token"]
    assert (folder / "namespace").read_text() == "ns"
    assert source.asked == [("p", None, 3607)]


@pytest.mark.parametrize(
    ("source_spec", "words"),
    [
        ({"clusterTrustBundle": {"name": "x", "path": "ca"}}, r"\['clusterTrustBundle'\]"),
        ({"secret": {"name": "absent"}}, "Secret 'absent' not found"),
        ({"configMap": {"name": "cm", "items": [{"key": "no", "path": "x"}]}}, "has no key 'no'"),
    ],
)
def test_what_cannot_be_projected_stops_the_pod_naming_it(
    tmp_path: Path, source_spec: Obj, words: str
) -> None:
    source = RecordingSource(config_maps={"cm": {"k": "v"}})
    with pytest.raises(PodSetupError, match=words):
        write_pod_volumes(
            pod_with(projected(source_spec)),
            source=source,
            root=tmp_path / "p",
            claims_root=tmp_path,
        )


def test_a_local_run_cannot_have_a_token(tmp_path: Path) -> None:
    volumes = projected({"serviceAccountToken": {"audience": AUDIENCE, "path": "token"}})
    with pytest.raises(PodSetupError, match=r"model\.auth\.secretRef"):
        write_pod_volumes(
            pod_with(volumes), source=MappingSource(), root=tmp_path / "p", claims_root=tmp_path
        )
