"""A private, real Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager.

The envtest idea (controller-runtime `pkg/envtest`): start the real binaries on
loopback with free ports and a throw-away PKI, so tests meet the real API
server's semantics (RBAC, admission, CEL, watch cache, garbage collector) and
not an imitation. Everything lives in one temp dir, removed on stop; stop is
also registered with `atexit`, so an exception or Ctrl-C ending the session
still stops the processes (see processes.py for a session that is killed).

No kubelet and no scheduler run: pods stay Pending unless something binds and
runs them. `launch()` is the door for that something (a node agent): a process
started there is stopped with the control plane, before it, in reverse order.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import yaml

from .assets import Assets, find_assets
from .certs import SERVER_NAMES, SERVICE_IP, CertificateAuthority, write_service_account_keys
from .processes import ManagedProcess, StartupError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from .certs import KeyPair

TEMP_PREFIX = "longrun-envtest-"
OWNER_FILE = "owner.json"
# kcm of OpenShift's fork would publish an `openshift-service-ca.crt` ConfigMap in every
# namespace; upstream has no such controller, so a test must never see it.
CONTROLLERS = "*,-service-ca-certificate-publisher-controller"


@dataclass(frozen=True)
class ControlPlaneOptions:
    """Knobs; the defaults are what the test fixtures use."""

    start_timeout: float = 60.0
    stop_grace: float = 10.0
    # Start kube-controller-manager when the assets have it (GC, Job, CronJob, namespaces...).
    controllers: bool = True
    # How often the API server compacts etcd (its default is 5m): old resourceVersions then
    # answer 410 Gone from etcd, as on a long-running cluster.
    etcd_compaction_interval: str = "5m"
    apiserver_flags: tuple[str, ...] = ()
    controller_manager_flags: tuple[str, ...] = ()


@dataclass
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int


@dataclass
class Timings:
    """Seconds measured by the last start and stop, per process and in total."""

    start: dict[str, float] = field(default_factory=dict)
    stop: dict[str, float] = field(default_factory=dict)


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) from a directory of binaries."""

    def __init__(
        self,
        assets: Assets | None = None,
        options: ControlPlaneOptions | None = None,
        *,
        workdir: str | Path | None = None,
    ) -> None:
        self.assets = assets or find_assets()
        self.options = options or ControlPlaneOptions()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
        self.pki_dir = self.workdir / "pki"
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.processes: list[ManagedProcess] = []
        self.timings = Timings()
        self._cleanups: list[Callable[[], None]] = []
        self._ports = _free_ports()
        self._ca: CertificateAuthority | None = None
        self._stopped = False
        if self._own_workdir:
            self._record_owner()  # so a plane never started is swept up later

    # -- what clients need ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._ports.apiserver}"

    @property
    def ca_cert_path(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def has_controllers(self) -> bool:
        """True when kube-controller-manager runs (garbage collector, Job, CronJob...)."""
        return any(p.name == "kube-controller-manager" for p in self.processes)

    @property
    def missing_controllers(self) -> str | None:
        """Why kube-controller-manager does not run, or None when it does."""
        if self.has_controllers:
            return None
        if not self.assets.has_controller_manager:
            return f"kube-controller-manager is missing from {self.assets.directory}"
        return "kube-controller-manager was not started (ControlPlaneOptions.controllers=False)"

    def kubectl_binary(self) -> Path | None:
        """The kubectl of the same version, when the assets carry one."""
        return self.assets.binary("kubectl")

    def write_kubeconfig(
        self, path: Path, *, user: str, groups: tuple[str, ...] = (), namespace: str = "default"
    ) -> Path:
        """A kubeconfig authenticating as `user` in `groups` by a client certificate."""
        assert self._ca is not None, "start() first"
        pair = self._ca.issue_client(_stem(user), common_name=user, organizations=groups)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {
                "server": self.url, "certificate-authority-data": _b64(self.ca_cert_path)}}],
            "contexts": [{"name": "envtest", "context": {
                "cluster": "envtest", "user": user, "namespace": namespace}}],
            "current-context": "envtest",
            "users": [{"name": user, "user": {
                "client-certificate-data": _b64(pair.cert),
                "client-key-data": _b64(pair.key)}}],
            "preferences": {},
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def issue_kubelet_certificate(self, node_name: str, *, hostname: str) -> KeyPair:
        """A serving certificate for a node agent's log server that this API server trusts
        (`--kubelet-certificate-authority` is the cluster CA); its clients' CA is the same."""
        assert self._ca is not None, "start() first"
        return self._ca.issue_kubelet(node_name, hostname=hostname)

    def api_client(self) -> ApiClient:
        """An official-client ApiClient as cluster admin; the caller closes it."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = str(self.ca_cert_path)
        cfg.cert_file = str(self.pki_dir / "admin.crt")
        cfg.key_file = str(self.pki_dir / "admin.key")
        return client.ApiClient(cfg)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        """Start and wait for every process; on failure stop what started and raise."""
        started = time.monotonic()
        atexit.register(self.stop)
        try:
            self._prepare()
            self._start_etcd()
            self._start_apiserver()
            if self.options.controllers and self.assets.has_controller_manager:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        self.timings.start["total"] = time.monotonic() - started
        return self

    def launch(
        self,
        name: str,
        argv: list[str],
        *,
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ManagedProcess:
        """Start another process that lives and dies with this control plane (a node agent)."""
        process = ManagedProcess(name, argv, log_path=self.workdir / f"{name}.log")
        self.processes.append(process)
        process.start(env=env)
        self._record_owner()
        took = process.wait_ready(ready, timeout=timeout or self.options.start_timeout)
        self.timings.start[name] = took
        return process

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Run `fn` at stop, before any process is stopped (latest first)."""
        self._cleanups.append(fn)

    def stop(self) -> None:
        """Stop every process by pid, latest first, then remove the temp dir. Safe to repeat."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        started = time.monotonic()
        for cleanup in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        for process in reversed(self.processes):
            self.timings.stop[process.name] = process.stop(grace=self.options.stop_grace)
        self.timings.stop["total"] = time.monotonic() - started
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the steps ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        remove_stale_workdirs()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki_dir.mkdir(exist_ok=True)
        self._record_owner()
        self._ca = CertificateAuthority(self.pki_dir)
        self._ca.issue_server("apiserver", ips=("127.0.0.1", SERVICE_IP), names=SERVER_NAMES)
        self._ca.issue_kubelet_client()
        write_service_account_keys(self.pki_dir)
        self.write_kubeconfig(self.kubeconfig_path, user="admin", groups=("system:masters",))

    def _start_etcd(self) -> None:
        etcd, p = self._binary("etcd"), self._ports
        client, peer = f"http://127.0.0.1:{p.etcd}", f"http://127.0.0.1:{p.etcd_peer}"
        argv = [
            etcd, "--name=default", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true", "--log-level=warn",
        ]  # fmt: skip
        self.launch("etcd", argv, ready=lambda: _etcd_healthy(client))

    def _start_apiserver(self) -> None:
        pki, p = self.pki_dir, self._ports
        argv = [
            self._binary("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{p.etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={p.apiserver}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,"
            "DefaultStorageClass,ResourceQuota,PodSecurity",
            "--allow-privileged=true",
            f"--etcd-compaction-interval={self.options.etcd_compaction_interval}",
            # pods/log goes to the node's kubelet (a node agent's log server) over HTTPS.
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            *self.options.apiserver_flags,
        ]  # fmt: skip
        context = self._admin_ssl_context()
        self.launch("kube-apiserver", argv, ready=lambda: _https_ok(f"{self.url}/readyz", context))

    def _start_controller_manager(self) -> None:
        kubeconfig = self.write_kubeconfig(
            self.workdir / "kcm.kubeconfig", user="system:kube-controller-manager"
        )
        port = self._ports.controller_manager
        argv = [
            self._binary("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={CONTROLLERS}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
            f"--root-ca-file={self.ca_cert_path}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kcm-certs'}",
            *self.options.controller_manager_flags,
        ]  # fmt: skip
        unverified = ssl._create_unverified_context()  # kcm serves a self-signed certificate
        url = f"https://127.0.0.1:{port}/healthz"
        kcm = self.launch("kube-controller-manager", argv, ready=lambda: _https_ok(url, unverified))
        # Healthy is not working: its controllers start seconds later. The first thing they
        # do that a test can see is the `default` ServiceAccount of namespace `default`.
        sa = f"{self.url}/api/v1/namespaces/default/serviceaccounts/default"
        context = self._admin_ssl_context()
        took = kcm.wait_ready(lambda: _https_ok(sa, context), timeout=self.options.start_timeout)
        self.timings.start["controllers working"] = took

    def _binary(self, name: str) -> str:
        path = self.assets.binary(name)
        if path is None:
            raise StartupError(f"{name} is missing from {self.assets.directory}")
        return str(path)

    def _admin_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert_path))
        context.load_cert_chain(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")
        return context

    def _record_owner(self) -> None:
        """Who owns the temp dir: our pid and the children's, for remove_stale_workdirs."""
        pids = [p.pid for p in self.processes if p.pid]
        owner = {"pid": os.getpid(), "children": pids}
        (self.workdir / OWNER_FILE).write_text(json.dumps(owner))


def remove_stale_workdirs(root: Path | None = None) -> list[Path]:
    """Remove temp dirs of control planes whose owner and processes are all gone."""
    removed = []
    for workdir in (root or Path(tempfile.gettempdir())).glob(f"{TEMP_PREFIX}*"):
        try:
            owner = json.loads((workdir / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        if not any(_is_alive(pid) for pid in [owner.get("pid"), *owner.get("children", [])]):
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(workdir)
    return removed


def _is_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_ports() -> Ports:
    """Four distinct ports free on 127.0.0.1 (held together while chosen, then released)."""
    sockets = [socket.socket() for _ in range(4)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return Ports(*(int(s.getsockname()[1]) for s in sockets))
    finally:
        for sock in sockets:
            sock.close()


def _etcd_healthy(client_url: str) -> bool:
    with urllib.request.urlopen(f"{client_url}/health", timeout=2) as answer:
        return bool(json.loads(answer.read()).get("health") == "true")


def _https_ok(url: str, context: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as answer:
        return bool(answer.status == 200)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _stem(user: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in user)
