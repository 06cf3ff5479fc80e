"""Kueue's manager out of cluster, against a real control plane (e2e/real), for tests.

What a cluster install does with Kueue's manifests, done here by hand:
1. its CRDs, each awaited until Established;
2. its namespace `kueue-system`, and the Secret `kueue-webhook-server-cert` with a
   certificate covering IP 127.0.0.1 (pki.py), pre-created so the certificate rotator keeps it;
3. its webhook configurations, each webhook's `clientConfig.service` replaced by
   `url: https://127.0.0.1:<port><path>` and the CA bundle. Only the webhooks of Jobs and of
   Kueue's own kinds are kept: the others (Pods, Deployments, JobSets...) belong to
   integrations not enabled here, and each pod creation would wait on a no-op call;
4. its Configuration, a file: the webhook server on 127.0.0.1 with its certificates in the
   workdir, health probes on 127.0.0.1, no metrics server, no leader election, the
   `batch/job` integration only; and the `VisibilityOnDemand` feature off (its aggregated API
   server needs in-cluster configuration);
5. its own kubeconfig: a client certificate for user `kueue-manager` in `system:masters`;
6. the process, launched by the control plane (so stopped with it, by pid), ready when its
   `/readyz` answers 200: certificates in place, CA injected, webhook server started.

Why the rotator stays on (`internalCertManagement.enable`): with it off, Kueue v0.13 reads its
metrics certificate from the fixed path /etc/kueue/metrics/certs and exits without one;
writing under /etc would change the machine for everyone. With it on, the rotator finds the
pre-created Secret valid and uses it unchanged (pki.py), so the result is the same.
"""

from __future__ import annotations

import base64
import copy
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from e2e.kueue.assets import KueueAssets
from e2e.kueue.pki import webhook_pki

if TYPE_CHECKING:
    from e2e.real.controlplane import ControlPlane

NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
WEBHOOK_NAMES = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
KEPT_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
FEATURE_GATES = "VisibilityOnDemand=false"
Obj = dict[str, Any]


@dataclass(frozen=True)
class KueueOptions:
    """How the manager runs: Kueue's own settings that tests may change."""

    manage_jobs_without_queue_name: bool = False
    frameworks: tuple[str, ...] = ("batch/job",)
    extra_config: Obj = field(default_factory=dict)
    start_timeout: float = 120.0


class KueueManager:
    """Kueue's manager for one control plane; stopped with the plane."""

    def __init__(
        self, assets: KueueAssets, plane: ControlPlane, options: KueueOptions | None = None
    ) -> None:
        self.assets = assets
        self.plane = plane
        self.options = options or KueueOptions()
        self.workdir = plane.workdir / "kueue"
        self.cert_dir = self.workdir / "certs"
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.config_path = self.workdir / "config.yaml"
        self.log_path = plane.workdir / "kueue.log"
        self.started_in: float | None = None
        self._ports = (_free_port(), _free_port())  # webhook, health

    @property
    def version(self) -> str:
        return self.assets.version

    def start(self) -> KueueManager:
        """Install what Kueue needs and start it; StartupError (with its log) if not ready."""
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        api = self.plane.api_client()
        try:
            install_crds(api, self.assets.crd_files)
            ca = self._install_certificates(api)
            self._install_webhooks(api, ca)
        finally:
            api.close()  # type: ignore[no-untyped-call]
        self.plane.write_kubeconfig(
            self.kubeconfig_path, user="kueue-manager", groups=("system:masters",)
        )
        self.config_path.write_text(yaml.safe_dump(self.configuration(), sort_keys=False))
        argv = [
            str(self.assets.binary),
            f"--config={self.config_path}",
            f"--kubeconfig={self.kubeconfig_path}",
            f"--feature-gates={FEATURE_GATES}",
            "--zap-log-level=2",
        ]
        self.plane.launch("kueue", argv, ready=self._is_ready, timeout=self.options.start_timeout)
        self.started_in = time.monotonic() - started
        return self

    def configuration(self) -> Obj:
        """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1) for this manager."""
        webhook_port, health_port = self._ports
        config: Obj = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(self.cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": SERVICE,
                "webhookSecretName": SECRET,
            },
            "clientConnection": {"qps": 100, "burst": 200},
            "manageJobsWithoutQueueName": self.options.manage_jobs_without_queue_name,
            "integrations": {"frameworks": list(self.options.frameworks)},
        }
        config.update(copy.deepcopy(self.options.extra_config))
        return config

    # -- the steps ---------------------------------------------------------------------------
    def _install_certificates(self, api: Any) -> bytes:
        from kubernetes import client

        pki = webhook_pki(f"{SERVICE}.{NAMESPACE}.svc")
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        for name, data in pki.secret_data().items():
            (self.cert_dir / name).write_bytes(data)
            if name.endswith(".key"):
                (self.cert_dir / name).chmod(0o600)
        core: Any = client.CoreV1Api(api)
        _create(lambda: core.create_namespace({"metadata": {"name": NAMESPACE}}))
        secret = {
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v).decode() for k, v in pki.secret_data().items()},
        }
        _create(lambda: core.create_namespaced_secret(NAMESPACE, secret))
        return pki.ca_cert

    def _install_webhooks(self, api: Any, ca: bytes) -> None:
        from kubernetes import client

        admission: Any = client.AdmissionregistrationV1Api(api)
        create = {
            "MutatingWebhookConfiguration": admission.create_mutating_webhook_configuration,
            "ValidatingWebhookConfiguration": admission.create_validating_webhook_configuration,
        }
        for doc in _documents(self.assets.webhook_files):
            kind = doc.get("kind")
            if kind not in create:
                continue
            body = local_webhooks(doc, port=self._ports[0], ca=ca)
            _create(lambda body=body, kind=kind: create[kind](body))

    def _is_ready(self) -> bool:
        url = f"http://127.0.0.1:{self._ports[1]}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


def local_webhooks(doc: Obj, *, port: int, ca: bytes) -> Obj:
    """A webhook configuration of Kueue's manifests, served on 127.0.0.1:`port`: each kept
    webhook's service reference replaced by a URL and the CA bundle, under Kueue's name."""
    body = copy.deepcopy(doc)
    body["metadata"] = {"name": WEBHOOK_NAMES[body["kind"]]}
    kept = []
    for webhook in body.get("webhooks") or []:
        groups = {g for rule in webhook.get("rules") or [] for g in rule.get("apiGroups") or []}
        if not groups & KEPT_GROUPS:
            continue
        path = ((webhook.get("clientConfig") or {}).get("service") or {}).get("path", "/")
        webhook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca).decode(),
        }
        kept.append(webhook)
    body["webhooks"] = kept
    return body


def install_crds(api: Any, files: list[Path], *, timeout: float = 60.0) -> None:
    """Create the CRDs of `files` (unless present) and wait until each is Established."""
    from kubernetes import client

    ext: Any = client.ApiextensionsV1Api(api)
    crds = [d for d in _documents(files) if d.get("kind") == "CustomResourceDefinition"]
    for crd in crds:
        _create(lambda crd=crd: ext.create_custom_resource_definition(crd))
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not _established(ext.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established within {timeout}s")
            time.sleep(0.05)


def _established(crd: Any) -> bool:
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _documents(files: list[Path]) -> list[Obj]:
    return [d for path in files for d in yaml.safe_load_all(path.read_text()) if d]


def _create(send: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        send()
    except ApiException as exc:
        if exc.status != 409:
            raise


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
