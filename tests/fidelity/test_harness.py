"""The real-control-plane harness itself (e2e/real): finding binaries, starting, stopping.

Real: kube-apiserver and etcd from the assets directory (those tests skip without them,
with the one line naming KUBEBUILDER_ASSETS), `python -m e2e.cluster --real` as a
process. Faked: asset directories made of small shell scripts, to test discovery and
start-up failures without the binaries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.backends import KubeHandle, selected_backend, skip_real
from e2e.fixtures import require_kubectl
from e2e.real import Assets, AssetsNotFound, ControlPlane, ControlPlaneOptions, StartupError
from e2e.real.assets import find_assets
from e2e.real.controlplane import remove_stale_workdirs
from e2e.real.handle import RealClusterHandle

ROOT = Path(__file__).resolve().parents[2]


def fake_assets(directory: Path, scripts: dict[str, str]) -> Assets:
    """A directory of executables named like the binaries, each a shell script."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return Assets(directory)


def real_assets() -> Assets:
    try:
        return find_assets()
    except AssetsNotFound as exc:
        skip_real(str(exc))


def assets_without_controller_manager(tmp_path: Path) -> Assets:
    """The real etcd and kube-apiserver, linked into a directory lacking the rest."""
    real = real_assets()
    directory = tmp_path / "1.0.0-linux-amd64"
    directory.mkdir()
    for name in ("etcd", "kube-apiserver"):
        (directory / name).symlink_to(real.directory / name)
    return Assets(directory)


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(fn: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


# -- finding the binaries -----------------------------------------------------------------
def test_kubebuilder_assets_names_the_directory(tmp_path: Path) -> None:
    named = fake_assets(tmp_path / "mine", {"etcd": "", "kube-apiserver": ""})
    assert find_assets({"KUBEBUILDER_ASSETS": str(named.directory)}) == named
    assert named.missing == ["kube-controller-manager", "kubectl"]


def test_a_named_directory_without_the_binaries_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(AssetsNotFound) as caught:
        find_assets({"KUBEBUILDER_ASSETS": str(tmp_path)}, root=tmp_path)
    assert str(caught.value) == (
        f"real control plane: no kube-apiserver/etcd in $KUBEBUILDER_ASSETS={tmp_path}; "
        "set KUBEBUILDER_ASSETS to a directory holding them to run"
    )


def test_the_newest_complete_version_is_chosen_numerically(tmp_path: Path) -> None:
    both = {"etcd": "", "kube-apiserver": ""}
    fake_assets(tmp_path / "1.9.0-linux-amd64", both)
    newest = fake_assets(tmp_path / "1.10.1-linux-amd64", both)
    fake_assets(tmp_path / "1.11.0-linux-amd64", {"etcd": ""})  # incomplete: passed over
    assert find_assets({}, root=tmp_path) == newest
    assert newest.version == "1.10.1"


def test_nothing_found_names_kubebuilder_assets(tmp_path: Path) -> None:
    with pytest.raises(AssetsNotFound, match=r"KUBEBUILDER_ASSETS \(unset\) or "):
        find_assets({}, root=tmp_path)


# -- the switch ----------------------------------------------------------------------------
def test_the_switch_names_the_backend() -> None:
    assert selected_backend({}) == "emulator"
    assert selected_backend({"LONGRUN_KUBE_BACKEND": "real"}) == "real"
    with pytest.raises(ValueError, match="expected one of emulator, real"):
        selected_backend({"LONGRUN_KUBE_BACKEND": "kind"})


def test_kube_backend_is_the_selected_one(kube_backend: KubeHandle) -> None:
    assert kube_backend.backend == selected_backend()
    assert kube_backend.namespace("switch").startswith("switch-")


# -- start-up failures ----------------------------------------------------------------------
def test_a_process_that_exits_is_named_with_its_log(tmp_path: Path) -> None:
    assets = fake_assets(
        tmp_path / "bin", {"etcd": "echo 'etcd: cannot listen' >&2; exit 3", "kube-apiserver": ""}
    )
    plane = ControlPlane(assets, workdir=tmp_path / "plane")
    with pytest.raises(StartupError) as caught:
        plane.start()
    assert str(caught.value).startswith("etcd exited with code 3 before it was ready;")
    assert "etcd: cannot listen" in str(caught.value)


def test_a_process_that_never_gets_ready_is_stopped(tmp_path: Path) -> None:
    assets = fake_assets(tmp_path / "bin", {"etcd": "exec sleep 60", "kube-apiserver": ""})
    plane = ControlPlane(assets, ControlPlaneOptions(start_timeout=0.5), workdir=tmp_path / "p")
    with pytest.raises(StartupError, match=r"^etcd not ready after 0.5s"):
        plane.start()
    pid = plane.processes[0].pid
    assert pid is not None and not is_alive(pid)


# -- the real binaries ------------------------------------------------------------------------
def test_without_kube_controller_manager_only_the_api_runs(tmp_path: Path) -> None:
    with ControlPlane(assets_without_controller_manager(tmp_path)) as plane:
        handle = RealClusterHandle(plane)
        assert [p.name for p in plane.processes] == ["etcd", "kube-apiserver"]
        assert plane.missing_controllers == (
            f"kube-controller-manager is missing from {plane.assets.directory}"
        )
        namespace = handle.namespace("api-only")  # no ServiceAccount controller to wait for
        assert namespace.startswith("api-only-")
        with pytest.raises(pytest.skip.Exception, match="kube-controller-manager is missing"):
            handle.require_controllers()
        pids = [p.pid for p in plane.processes]
        handle.close()
    assert not plane.workdir.exists()
    assert not any(is_alive(pid) for pid in pids if pid)


def test_the_cluster_command_serves_until_interrupted(tmp_path: Path) -> None:
    real_assets()
    command = [sys.executable, "-m", "e2e.cluster", "--real", "--crds"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        kubeconfig = Path(proc.stdout.readline().strip())
        try:
            kubectl = real_assets().binary("kubectl") or require_kubectl()  # kubectl is optional
            listed = subprocess.run(
                [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "crd", "-o", "name"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            assert "inferenceruns.longrun.dev" in listed.stdout
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped in" in err
    assert not kubeconfig.parent.exists()


def test_a_killed_session_leaves_no_process_behind(tmp_path: Path) -> None:
    assets = assets_without_controller_manager(tmp_path)
    script = (
        "import json, os, signal, sys\n"
        "from e2e.real import Assets, ControlPlane\n"
        f"plane = ControlPlane(Assets(__import__('pathlib').Path({str(assets.directory)!r})))\n"
        "plane.start()\n"
        "print(json.dumps({'pids': [p.pid for p in plane.processes],"
        " 'workdir': str(plane.workdir)}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = json.loads(done.stdout)
    assert wait_until(lambda: not any(is_alive(pid) for pid in left["pids"]))
    assert Path(left["workdir"]) in remove_stale_workdirs()


def test_service_account_tokens_are_signed_and_rbac_applies(
    kube_real_session: RealClusterHandle,
) -> None:
    namespace = kube_real_session.namespace("token")
    token = kube_real_session.kubectl("create", "token", "default", "-n", namespace)
    assert token.returncode == 0, token.stderr
    plane = kube_real_session.plane
    as_service_account = [  # the token alone: no client certificate from the kubeconfig
        kube_real_session.kubectl_binary(), "--kubeconfig=/dev/null", f"--server={plane.url}",
        f"--certificate-authority={plane.ca_cert_path}", f"--token={token.stdout.strip()}",
    ]  # fmt: skip
    denied = subprocess.run(
        [*as_service_account, "get", "pods", "-n", namespace],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert denied.returncode != 0
    assert (
        f'User "system:serviceaccount:{namespace}:default" cannot list resource "pods"'
        in denied.stderr
    )


def test_pod_security_admission_enforces_namespace_labels(
    kube_real_session: RealClusterHandle,
) -> None:
    namespace = kube_real_session.namespace("restricted")
    label = "pod-security.kubernetes.io/enforce=restricted"
    assert kube_real_session.kubectl("label", "ns", namespace, label).returncode == 0
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    refused = kube_real_session.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
