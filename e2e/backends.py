"""The one switch between the API emulator and a real control plane, and what both share.

`LONGRUN_KUBE_BACKEND=emulator|real` picks the backend of the `kube_backend`
fixture (default: emulator). Both backends start a session with longrun's CRDs
installed, and both handles answer the `KubeHandle` protocol below.

Why the real backend's absence is a plain skip, even in CI: CI machines do not
carry kube-apiserver (no package registry we install from has it), so a missing
binary is the expected state there, unlike PostgreSQL or kubectl, whose absence
in CI means a broken setup (tests/support.py). Every such skip starts with
`REAL_SKIP_PREFIX`, the mark tests/conftest.py reports in the summary.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import yaml

if TYPE_CHECKING:
    import subprocess

    from kubernetes.client import ApiClient

ENV_VAR = "LONGRUN_KUBE_BACKEND"
BACKENDS = ("emulator", "real")
REAL_SKIP_PREFIX = "real control plane:"
CRD_DIR = Path(__file__).resolve().parents[1] / "charts" / "longrun" / "crds"


class KubeHandle(Protocol):
    """What suites that run on either backend may use."""

    backend: str

    @property
    def url(self) -> str: ...
    @property
    def kubeconfig_path(self) -> Path: ...
    @property
    def has_controllers(self) -> bool: ...
    def require_controllers(self) -> None: ...
    def api_client(self) -> ApiClient: ...
    def namespace(self, prefix: str = "test") -> str: ...
    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 20.0
    ) -> subprocess.CompletedProcess[str]: ...
    def close(self) -> None: ...


class HandleBase:
    """What both handles share: the clients they hand out (closed with the handle) and kubectl
    run with only `--kubeconfig`, its discovery cache in the backend's workdir."""

    def __init__(self) -> None:
        self._clients: list[ApiClient] = []

    @property
    def kubeconfig_path(self) -> Path:
        raise NotImplementedError

    def _new_client(self) -> ApiClient:
        raise NotImplementedError

    def kubectl_binary(self) -> str:
        """The kubectl this backend's tests run."""
        raise NotImplementedError

    def _workdir(self) -> Path:
        raise NotImplementedError

    def api_client(self) -> ApiClient:
        """A configured official-client ApiClient, closed with the handle."""
        client = self._new_client()
        self._clients.append(client)
        return client

    def kubectl_command(self, *args: str) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of `kubectl ARGS` against this backend (for Popen)."""
        env = {**os.environ, "KUBECACHEDIR": str(self._workdir() / "kubectl-cache")}
        return [self.kubectl_binary(), "--kubeconfig", str(self.kubeconfig_path), *args], env

    def kubectl(
        self, *args: str, input: str | None = None, timeout: float = 20.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this backend (no flags but --kubeconfig)."""
        import subprocess

        argv, env = self.kubectl_command(*args)
        return subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )

    def close(self) -> None:
        """Close the clients handed out (the backend itself is stopped by its owner)."""
        for client in self._clients:
            client.close()  # type: ignore[no-untyped-call]
        self._clients.clear()


def selected_backend(environ: dict[str, str] | None = None) -> str:
    """The backend `$LONGRUN_KUBE_BACKEND` names; `emulator` when unset."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "").strip() or "emulator"
    if value not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={value!r}: expected one of {', '.join(BACKENDS)}")
    return value


@dataclass
class RealStatus:
    """What happened to the real backend in this process, for the end-of-session summary."""

    outcome: str = ""  # "", "ran" or "skipped"
    detail: str = ""


REAL_STATUS = RealStatus()


def skip_real(reason: str) -> NoReturn:
    """Skip (also in CI) because the real control plane cannot run here."""
    import pytest

    message = reason if reason.startswith(REAL_SKIP_PREFIX) else f"{REAL_SKIP_PREFIX} {reason}"
    REAL_STATUS.outcome, REAL_STATUS.detail = "skipped", message
    pytest.skip(message)


def crd_manifests(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """longrun's CRDs as shipped in the chart."""
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def install_crds(api: ApiClient, *, timeout: float = 30.0) -> None:
    """Create longrun's CRDs (unless present) and wait until each is Established."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext: Any = client.ApiextensionsV1Api(api)  # dict bodies: the client sends them as they are
    for crd in crd_manifests():
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
        _wait_established(ext, crd["metadata"]["name"], timeout=timeout)


def _wait_established(ext: Any, name: str, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.05)
    raise TimeoutError(f"CRD {name} not Established within {timeout}s")
