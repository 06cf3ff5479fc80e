"""A ModelDeployment that names a catalog model creates its Model and reaches Running, on a
real control plane, with a real llama.cpp server (issue 31, "Done when").

Real: etcd, kube-apiserver and kube-controller-manager (e2e/real), `longrun controller` as a
process with the catalog settings the chart gives it (SERVING_CATALOG, lazy registration on),
`longrun catalog sync` filling the catalog ConfigMap from a local HTTP server, the node agent
(e2e/nodeagent) running the pod's containers as local processes: `longrun-fetch` downloading
the GGUF file the catalog names (checked against the catalog's sha256) from that server, and
llama-cpp-python's server answering a chat request with the deployment's API key;
`kubectl` for every user action. Faked: nothing; the model is a tiny random GGUF
(write_tiny_gguf). Skips with `real control plane:` when its binaries are absent, and when
the llama peer env or nginx is missing (fails in CI).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from controller.cli import main
from e2e.system import System
from tests.e2e.test_serving_real import (
    _file_server,
    api_key,
    assert_pod_ran,
    digest,
    endpoint,
    running,
)
from tests.local.test_serving import status_of, write_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
CATALOG_NS, CATALOG = "catalog-e2e", "model-catalog"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A plain HTTP server for the catalog and the model file."""
    with _file_server(tmp_path_factory.mktemp("served"), "127.0.0.1") as found:
        yield found


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A control plane, the controller reading the catalog ConfigMap, and the node agent."""
    from e2e.peers.fixtures import skip_or_fail
    from local.deployment import ServeError, nginx_binary

    try:
        nginx_binary()
    except ServeError as exc:
        skip_or_fail(str(exc))
    began = time.monotonic()
    started = System(tmp_path_factory.mktemp("system"), backend="real")
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("SERVING_CATALOG", f"{CATALOG_NS}/{CATALOG}")
            started.start()
        yield started
    finally:
        started.stop()
        print(f"\ncatalog e2e on the real control plane: {time.monotonic() - began:.0f} s")


def test_a_deployment_naming_a_catalog_model_creates_it_and_reaches_running(
    system: System, served: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, folder = served
    write_tiny_gguf(folder / "tiny.gguf")
    entry = {"name": "tiny-chat", "task": "chat-completion", "size": "1Mi",
             "source": f"{base}/tiny.gguf", "sha256": digest(folder / "tiny.gguf"),
             "format": "gguf", "variants": {"cpu": {}, "gpu": {}}}  # fmt: skip
    (folder / "catalog.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    system.namespace(CATALOG_NS)
    assert system.handle is not None
    target = ["--configmap", f"{CATALOG_NS}/{CATALOG}"]
    kubeconfig = ["--kubeconfig", str(system.handle.kubeconfig_path)]
    synced = main(["catalog", "sync", "--url", f"{base}/catalog.yaml", *target, *kubeconfig])
    assert synced == 0, capsys.readouterr().err
    ns = system.namespace("catalog-llama")
    deployment = """\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: chat
spec:
  model:
    catalog:
      name: tiny-chat
  runtime:
    llamacpp: {contextSize: 512}
"""
    system.kubectl("apply", "-n", ns, "-f", "-", input=deployment)

    obj = running(system, ns, "chat")

    model = system.get("model", "tiny-chat", ns)
    assert model is not None
    assert model["spec"]["source"] == f"{base}/tiny.gguf"
    assert model["metadata"]["annotations"]["longrun.dev/catalog-compute"] == "cpu"
    events = system.items("events", ns)
    (registered,) = [e for e in events if e.get("reason") == "ModelRegistered"]
    assert registered["message"].startswith('created Model "tiny-chat" from the cpu variant')
    config_map = system.get("configmap", CATALOG, CATALOG_NS)
    assert config_map is not None
    assert "longrun.dev/catalog-synced-at" in config_map["metadata"]["annotations"]
    assert obj["status"]["modelName"] == "tiny-chat"
    assert_pod_ran(system, ns, "chat", containers={"server"})
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    url = f"{endpoint(system, ns, 'chat')}/v1/chat/completions"
    assert status_of(url, chat) == 401
    assert status_of(url, chat, api_key(system, ns, "chat")) == 200
