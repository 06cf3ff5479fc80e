"""What tests hold for a real control plane: the EmulatorHandle interface where it makes sense.

Same names as `e2e.fixtures.EmulatorHandle` (`url`, `kubeconfig_path`,
`api_client()`, `namespace()`, `kubectl()`, `close()`), so a suite written
against one runs on the other; `backend` says which it is. What only the
emulator has (a fake clock, fault injection, `restart()`, a node agent of its own)
is absent here on purpose: a test that needs it is an emulator test.
"""

from __future__ import annotations

import itertools
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.backends import HandleBase

from .controlplane import ControlPlane

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SA_WAIT_SECONDS = 10.0


class RealClusterHandle(HandleBase):
    """A running ControlPlane plus client helpers."""

    backend = "real"

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__()
        self.plane = plane
        self._admin: ApiClient | None = None
        self._ns = itertools.count(1)

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.plane.kubeconfig_path

    @property
    def has_controllers(self) -> bool:
        return self.plane.has_controllers

    def require_controllers(self) -> None:
        """Skip the calling test when kube-controller-manager does not run, saying why."""
        reason = self.plane.missing_controllers
        if reason:
            import pytest

            pytest.skip(f"real control plane: {reason}; this test needs its controllers")

    def _new_client(self) -> ApiClient:
        return self.plane.api_client()

    def kubectl_binary(self) -> str:
        """The assets' own kubectl when present, else the machine's."""
        binary = self.plane.kubectl_binary()
        if binary is None:
            from e2e.fixtures import require_kubectl

            return require_kubectl()
        return str(binary)

    def _workdir(self) -> Path:
        return self.plane.workdir

    def namespace(self, prefix: str = "test") -> str:
        """Create a fresh namespace and return its name (once its `default` SA exists)."""
        from kubernetes import client

        core: Any = client.CoreV1Api(self._admin_client())
        name = f"{prefix}-{next(self._ns)}-{secrets.token_hex(2)}"
        core.create_namespace({"metadata": {"name": name}})
        if self.has_controllers:  # the ServiceAccount controller is in kube-controller-manager
            _wait_for_default_service_account(core, name)
        return name

    def close(self) -> None:
        """Close the clients handed out; the control plane itself is stopped by its owner."""
        super().close()
        self._admin = None

    def _admin_client(self) -> ApiClient:
        if self._admin is None:
            self._admin = self.api_client()
        return self._admin


def _wait_for_default_service_account(core: Any, namespace: str) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + SA_WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.02)
    raise TimeoutError(f"no default ServiceAccount in namespace {namespace}")
