"""The generated CRDs installed on the API emulator and driven with the real kubectl.

Real: kubectl, the CRD files from charts/longrun/crds, the examples in testdata/examples,
the emulator's schema validation, defaulting, pruning and its CEL subset. Faked: the API
server is our emulator (see e2e/README.md for its divergences from kube-apiserver).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from e2e.fixtures import EmulatorHandle, eventually

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "charts" / "longrun" / "crds"
EXAMPLES = ROOT / "testdata" / "examples"


def _install_crds(k8s: EmulatorHandle) -> None:
    done = k8s.kubectl("apply", "-f", str(CRD_DIR))
    assert done.returncode == 0, done.stderr
    eventually(lambda: k8s.kubectl("get", "inferenceruns").returncode == 0, timeout=10)


def _apply(k8s: EmulatorHandle, namespace: str, text: str) -> tuple[int, str]:
    done = k8s.kubectl("apply", "-n", namespace, "-f", "-", input=text)
    return done.returncode, done.stdout + done.stderr


def _without_namespace(path: Path) -> str:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc["metadata"].pop("namespace", None)
    return yaml.safe_dump_all(docs)


def test_every_example_is_accepted_by_the_api_server(kube_emulator: EmulatorHandle) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("examples")
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        code, output = _apply(kube_emulator, namespace, _without_namespace(path))
        assert code == 0, f"{path.name}: {output}"
    listed = kube_emulator.kubectl("get", "irun,icfg", "-n", namespace, "-o", "name")
    assert listed.stdout.count("inferencerun") >= 6


def test_api_server_fills_in_defaults(kube_emulator: EmulatorHandle) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("defaults")
    code, output = _apply(kube_emulator, namespace, _without_namespace(
        EXAMPLES / "krateo" / "krateo-custom.yaml"))  # fmt: skip
    assert code == 0, output
    got = kube_emulator.kubectl("get", "icfg", "krateo-custom", "-n", namespace, "-o", "json")
    spec = json.loads(got.stdout)["spec"]
    # batchSize has no schema default: the runner sizes it by protocol (docs/contract.md).
    assert "batchSize" not in spec["runner"] and spec["runner"]["concurrency"] == 8
    assert spec["backoffLimit"] == 3
    assert spec["storage"]["output"]["custom"]["s3"]["moreCustom"] == "data"  # passed through


def test_one_shot_run_spec_cannot_change(kube_emulator: EmulatorHandle) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("immutable")
    run = {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceRun",
           "metadata": {"name": "once"}, "spec": {"configRef": {"name": "iris"}}}  # fmt: skip
    assert _apply(kube_emulator, namespace, json.dumps(run))[0] == 0
    patch = kube_emulator.kubectl("patch", "irun", "once", "-n", namespace, "--type", "merge",
                                  "-p", '{"spec":{"parameters":{"day":"monday"}}}')  # fmt: skip
    assert patch.returncode != 0
    assert "immutable after creation" in patch.stderr


def test_scheduled_run_spec_can_change(kube_emulator: EmulatorHandle) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("mutable")
    run = {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceRun",
           "metadata": {"name": "nightly"},
           "spec": {"configRef": {"name": "iris"}, "schedule": "0 2 * * *"}}  # fmt: skip
    assert _apply(kube_emulator, namespace, json.dumps(run))[0] == 0
    patch = kube_emulator.kubectl("patch", "irun", "nightly", "-n", namespace, "--type", "merge",
                                  "-p", '{"spec":{"suspend":true}}')  # fmt: skip
    assert patch.returncode == 0, patch.stderr


def test_schema_rejects_bad_values_with_field_paths(kube_emulator: EmulatorHandle) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("invalid")
    run = {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceRun",
           "metadata": {"name": "bad"},
           "spec": {"configRef": {"name": "iris"}, "timeoutSeconds": 0,
                    "concurrencyPolicy": "Sometimes"}}  # fmt: skip
    code, output = _apply(kube_emulator, namespace, json.dumps(run))
    assert code != 0
    assert "spec.timeoutSeconds" in output and "spec.concurrencyPolicy" in output


def test_sql_url_with_a_password_never_reaches_the_api_server(
    kube_emulator: EmulatorHandle,
) -> None:
    _install_crds(kube_emulator)
    namespace = kube_emulator.namespace("password")
    storage = {
        "input": {"sql": {"url": "postgresql://scott:tiger@db/x", "table": "t"}},
        "output": {"file": {"path": "/out"}},
    }
    config = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": "leaky"},
        "spec": {
            "model": {"protocol": "kserve-v1", "url": "http://m", "name": "m"},
            "storage": storage,
        },
    }
    code, output = _apply(kube_emulator, namespace, json.dumps(config))
    assert code != 0
    assert "url must not contain a password" in output and "spec.storage.input.sql" in output
