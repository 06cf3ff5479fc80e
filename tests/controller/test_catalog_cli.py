"""`longrun catalog list` and `longrun catalog sync`: the table, and a sync that writes only a
valid catalog.

Real: the CLI's main() in-process, the API emulator (its ConfigMaps, merge patches) reached
through a kubeconfig, a local HTTP server (http.server) serving the catalog to download, the
chart's starter catalog file. Faked: nothing; the emulator stands in for the cluster
(tests/controller/emulated/test_serving_catalog.py covers the controller on both backends).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.cli import main
from e2e.fixtures import EmulatorHandle, kube_emulator  # noqa: F401

STARTER = Path(__file__).resolve().parents[2] / "charts" / "longrun" / "catalog" / "catalog.yaml"
GOOD = """\
models:
  - name: iris
    task: predict
    size: 1Mi
    source: https://example.com/iris/model.joblib
    format: sklearn
    variants:
      cpu: {}
"""
BAD = GOOD.replace("format: sklearn", "format: pickle")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local HTTP server over a folder: (base URL, folder)."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(_Quiet, directory=str(tmp_path))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cluster(kube_emulator: EmulatorHandle) -> tuple[EmulatorHandle, str, Any]:  # noqa: F811
    """The emulator with the chart's starter catalog in a ConfigMap: (handle, ns, core API)."""
    ns = kube_emulator.namespace("catalog")
    core: Any = client.CoreV1Api(kube_emulator.api_client())
    body = {"metadata": {"name": "cat"}, "data": {"catalog.yaml": STARTER.read_text()}}
    core.create_namespaced_config_map(ns, body)
    return kube_emulator, ns, core


def kubeconfig(handle: EmulatorHandle) -> tuple[str, str]:
    return "--kubeconfig", str(handle.kubeconfig_path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["catalog", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_one_row_per_variant_from_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "catalog.yaml").write_text(GOOD)
    code, out, _ = run(capsys, "list", "-f", str(tmp_path / "catalog.yaml"))
    assert code == 0
    assert out.splitlines() == [
        "ALIAS   TASK      COMPUTE   FORMAT    SIZE   SOURCE",
        "iris    predict   cpu       sklearn   1Mi    https://example.com/iris/model.joblib",
    ]


def test_list_reads_a_config_map_manifest_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"catalog.yaml": GOOD}}
    (tmp_path / "cm.yaml").write_text(yaml.safe_dump(manifest))
    code, out, _ = run(capsys, "list", "-f", str(tmp_path / "cm.yaml"))
    assert code == 0 and out.splitlines()[1].startswith("iris ")


def test_list_reads_the_clusters_config_map(
    capsys: pytest.CaptureFixture[str], cluster: tuple[EmulatorHandle, str, Any]
) -> None:
    handle, ns, _ = cluster
    code, out, _ = run(
        capsys, "list", "--configmap", f"{ns}/cat", "--kubeconfig", str(handle.kubeconfig_path)
    )
    assert code == 0
    rows = [line.split()[:3] for line in out.splitlines()[1:]]
    assert ["qwen2.5-0.5b-instruct", "chat-completion", "gpu"] in rows
    assert ["sklearn-iris", "predict", "cpu"] in rows


def test_list_of_an_invalid_file_says_where_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    code, out, err = run(capsys, "list", "-f", str(tmp_path / "bad.yaml"))
    assert (code, out) == (1, "")
    assert err.startswith(f"longrun catalog list: {tmp_path / 'bad.yaml'} is not a valid catalog: ")
    assert 'models[0] "iris": format: Input should be' in err and err.count("\n") == 1


def test_sync_writes_the_catalog_and_the_time_of_the_sync(
    capsys: pytest.CaptureFixture[str],
    cluster: tuple[EmulatorHandle, str, Any],
    served: tuple[str, Path],
) -> None:
    handle, ns, core = cluster
    base, folder = served
    (folder / "catalog.yaml").write_text(GOOD)
    code, out, err = run(capsys, "sync", "--url", f"{base}/catalog.yaml",
                         "--configmap", f"{ns}/cat", *kubeconfig(handle))  # fmt: skip
    assert (code, err) == (0, "")
    assert out == f'synced 1 catalog entries from {base}/catalog.yaml into ConfigMap "{ns}/cat"\n'
    stored = core.read_namespaced_config_map("cat", ns)
    assert stored.data["catalog.yaml"] == GOOD
    annotations = stored.metadata.annotations
    assert annotations["longrun.dev/catalog-source"] == f"{base}/catalog.yaml"
    assert annotations["longrun.dev/catalog-synced-at"].endswith("Z")


@pytest.mark.parametrize(
    ("file", "said"),
    [
        ("missing.yaml", "downloading {base}/missing.yaml failed: HTTP 404 File not found"),
        ("bad.yaml", '{base}/bad.yaml is not a valid catalog: models[0] "iris": format:'),
        ("notyaml.yaml", "{base}/notyaml.yaml is not YAML:"),
    ],
)
def test_a_failed_sync_leaves_the_config_map_untouched_and_says_why_on_one_line(
    capsys: pytest.CaptureFixture[str],
    cluster: tuple[EmulatorHandle, str, Any],
    served: tuple[str, Path],
    file: str,
    said: str,
) -> None:
    handle, ns, core = cluster
    base, folder = served
    (folder / "bad.yaml").write_text(BAD)
    (folder / "notyaml.yaml").write_text("models: [\n")
    before = core.read_namespaced_config_map("cat", ns)
    code, out, err = run(capsys, "sync", "--url", f"{base}/{file}",
                         "--configmap", f"{ns}/cat", *kubeconfig(handle))  # fmt: skip
    assert (code, out) == (1, "")
    assert err.startswith("longrun catalog sync: " + said.format(base=base))
    assert err.count("\n") == 1
    after = core.read_namespaced_config_map("cat", ns)
    assert after.metadata.resource_version == before.metadata.resource_version


def test_bad_flags_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sync", "--url", "https://x/c.yaml", "--configmap", "cat")
    assert code == 2 and err == "longrun catalog: --configmap 'cat': write namespace/name\n"
    code, _, err = run(capsys, "list", "-f", "/nonexistent/catalog.yaml")
    assert code == 2 and "no such file" in err
