"""A ModelDeployment running on this machine: its pod rendered by the controller's core, its
containers run through the local executor (`longrun serve`, and `longrun run` for a
deployment it starts; docs/serving.md, "Locally").

Nothing is re-implemented: the deployment is resolved and its pod rendered by the pure core
(`controller.core.serving`), and the pod's containers run through `local.podspec` and
`local.executor`: the download init container as `longrun-fetch` in this Python, the server
as the same server installed from PyPI (`local.runtimes`, local-only), for the runtimes that
do not check keys themselves the nginx sidecar with the rendered nginx.conf (the `nginx`
binary must be installed; local/sidecars.py), and with `auth.oidc` the token verifier in
this Python. The keys are made as the controller makes them and kept in files only the
current user can read.

State lives in `<work dir>/serving/<namespace>/<name>/`: the model cache (a second start
downloads nothing), the keys, the logs, and `serving.json` while it serves.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.serving import API_KEY_SECRET_KEY, ModelDeploymentSpec
from controller.core.serving import auth, names, tokens
from controller.core.serving.builders import build_pod_template
from controller.core.serving.layout import CACHE_MOUNT, SOURCE_MOUNT
from controller.core.serving.resolve import ServingResolved, model_namespace, resolve_deployment
from controller.core.serving.runtimes import LOOPBACK
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem
from local.executor import PodProcess, run_pod
from local.generic import announcement, to_stderr
from local.generic import host_env as generic_env
from local.inputs import InputError, Inputs
from local.logfile import LogFile
from local.podspec import ImageMap, MappingSource, local_path, prepare_pod
from local.ports import free_port
from local.runtimes import local_server
from local.sidecars import ServeError, local_nginx_conf, nginx_binary

__all__ = ["LocalDeployment", "ServeError", "local_nginx_conf", "nginx_binary"]

Obj = dict[str, Any]
STATE_FILE = "serving.json"


@dataclass
class LocalDeployment:
    """One ModelDeployment running on this machine: fetch, server, optional auth sidecar."""

    resolved: ServingResolved
    settings: ServingSettings
    base: Path  # --work-dir/serving/<namespace>/<name>
    port: int = 0  # the public port (0: a free one)
    pythons: Mapping[str, str] = field(default_factory=dict)
    claims: Mapping[str, str] = field(default_factory=dict)  # pvc:// claim -> local directory
    processes: list[PodProcess] = field(default_factory=list)
    runtime_port: int = 0  # the server's own port (the sidecar's upstream, when there is one)
    metrics_port: int = 0  # the sidecar's metrics port (SERVING_METRICS), 0: none
    token_check_port: int | None = None  # the token verifier's (auth.oidc)
    # Secrets of the deployment's namespace (name -> data): the model credentials it names.
    secrets: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)
    announce: Callable[[str], None] = to_stderr  # a generic server's command line, before it runs

    @property
    def endpoint(self) -> str:
        """Where runs call it."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def key_file(self) -> Path:
        """The file holding the first API key (the Secret's `api-key`)."""
        return self.base / "keys" / API_KEY_SECRET_KEY

    def start(self, *, timeout: float | None = None) -> None:
        """Fetch the model, start the server (and sidecar), wait until it answers."""
        self.base.mkdir(parents=True, exist_ok=True)
        secret = self._keys()
        template = build_pod_template(self.resolved, self.settings, keys_version="local")
        spec = template["spec"]
        for init in spec.get("initContainers") or []:
            self._fetch(init, spec["volumes"])
        self.port = self.port or free_port()
        self.runtime_port = runtime_port = (
            free_port() if self.resolved.uses_auth_proxy else self.port
        )
        source = MappingSource({}, {names.api_key_secret_name(self.resolved.owner.name): secret})
        server = local_server(
            self.resolved.plan.kind,
            self._localized(spec["containers"][0]),
            volumes=spec["volumes"],
            host=LOOPBACK,
            port=runtime_port,
            pythons=self.pythons,
            served_name=self.resolved.served_name,
        )
        self._run("server", server.container, spec["volumes"], server.prefix, source, server.env)
        if self.resolved.oidc is not None:
            self._token_check(spec, source)
        if self.resolved.has_sidecar:
            self._sidecar(spec, runtime_port, source)
        self._wait_ready(server.ready_path, timeout or self.resolved.spec.startup_timeout_seconds)
        self._record()

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after the grace period)."""
        (self.base / STATE_FILE).unlink(missing_ok=True)
        for process in reversed(self.processes):
            process.stop(reason="Stopped")
        for process in reversed(self.processes):
            process.wait()
        self.processes.clear()

    # -- keys ----------------------------------------------------------------------------------

    def _keys(self) -> dict[str, bytes]:
        """The key Secret's data, made once (as the controller makes it) and kept in files."""
        folder = self.base / "keys"
        if not self.resolved.spec.auth.keys:
            return {}
        count = self.resolved.spec.auth.key_count
        files = {k: folder / k for k in (API_KEY_SECRET_KEY, "api-keys", names.NGINX_KEYS_KEY)}
        kept = files["api-keys"].read_text().split() if files["api-keys"].exists() else []
        # Kept keys are written again too: the nginx map of an older longrun compared them
        # without regard to letter case (issue 26), this one compares them exactly.
        keys = tuple(kept) if len(kept) == count else auth.generate_keys(count, secrets.token_bytes)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        for key, value in auth.secret_data(keys).items():
            path = folder / key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(base64.b64decode(value))
        return {key: path.read_bytes() for key, path in files.items()}

    # -- containers ----------------------------------------------------------------------------

    def _mounts(self) -> dict[str, Path]:
        """Pod paths that live outside a container's root: the cache and pvc:// claims."""
        mounts = {CACHE_MOUNT: self.base / "cache"}
        claim = self.resolved.layout.source_claim
        if claim is not None:
            if claim not in self.claims:
                raise ServeError(
                    f"the model is on PersistentVolumeClaim {claim!r}: say where it is here with "
                    f"--pvc {claim}=DIR"
                )
            mounts[f"{SOURCE_MOUNT}/{claim}"] = Path(self.claims[claim]).resolve()
        return mounts

    def _localized(self, container: Obj) -> Obj:
        """The container with the cache and claim paths in its args and env made local, and
        those volumes left out (they are not the container's own files)."""
        mounts = self._mounts()
        for path in mounts.values():
            path.mkdir(parents=True, exist_ok=True)

        def local(value: str) -> str:
            for pod_path, here in sorted(mounts.items(), key=lambda m: -len(m[0])):
                if value == pod_path or value.startswith(pod_path + "/"):
                    return str(here) + value[len(pod_path) :]
                value = value.replace(f"={pod_path}/", f"={here}/")
            return value

        out = dict(container)
        out["args"] = [local(str(a)) for a in container.get("args") or []]
        out["command"] = [local(str(a)) for a in container.get("command") or []]
        out["env"] = [
            {**var, "value": local(str(var["value"]))} if "value" in var else var
            for var in container.get("env") or []
        ]
        out["volumeMounts"] = [
            m for m in container.get("volumeMounts") or [] if m["mountPath"] not in mounts
        ]
        return out

    def _fetch(self, init: Obj, volumes: list[Obj]) -> None:
        """Run the download init container to its end (longrun-fetch in this Python)."""
        container = self._localized(init)
        pvc_root = self.base / "pvc"
        pvc_root.mkdir(parents=True, exist_ok=True)
        for claim, directory in self.claims.items():
            link = pvc_root / claim
            if not link.exists():
                link.symlink_to(Path(directory).resolve())
        pod = {
            "metadata": {"name": "fetch-model"},
            "spec": {"containers": [container], "volumes": volumes},
        }
        images = ImageMap(
            self.settings.fetch_image,
            {self.settings.fetch_image: (sys.executable, "-m", "runners.fetch")},
        )
        log = LogFile(self.base / "fetch.log")
        done = run_pod(
            pod,
            source=MappingSource({}, {k: dict(v) for k, v in self.secrets.items()}),
            root=self.base / "fetch",
            images=images,
            on_line=log.write,
            base_env={**os.environ, "LONGRUN_PVC_ROOT": str(pvc_root)},
        )
        log.close()
        if done.exit_code != 0:
            raise ServeError(
                f"downloading the model failed (exit code {done.exit_code}): {done.message}"
            )

    def _run(
        self,
        name: str,
        container: Obj,
        volumes: list[Obj],
        prefix: tuple[str, ...],
        source: MappingSource,
        env: Mapping[str, str],
    ) -> Path:
        image = str(container.get("image"))
        pod = {
            "metadata": {"name": f"{self.resolved.owner.name}-{name}"},
            "spec": {"containers": [container], "volumes": volumes},
        }
        root = self.base / name
        generic = self.resolved.plan.kind == "generic" and name == "server"
        prepared = prepare_pod(
            pod,
            source=source,
            root=root,
            images=ImageMap(image, {image: prefix}),
            base_env={**(generic_env() if generic else _host_env()), **env},  # local/generic.py
        )
        if generic:
            who = f"{self.resolved.owner.namespace}/{self.resolved.owner.name}"
            self.announce(announcement(who, prepared.argv, prepared.env))
        log = LogFile(self.base / f"{name}.log")
        self.processes.append(PodProcess(prepared, on_line=log.write, cwd=root))
        return root

    def _sidecar(self, spec: Obj, runtime_port: int, source: MappingSource) -> None:
        """nginx with the rendered nginx.conf: the public port, keys checked, then the server."""
        sidecar = next(c for c in spec["containers"] if c["name"] == names.AUTH_CONTAINER)
        root = self.base / names.AUTH_CONTAINER
        plan = self.resolved.plan
        ports = {auth.PROXY_HTTP_PORT: self.port, plan.http_port or 0: runtime_port}
        if self.resolved.metrics:
            self.metrics_port = free_port()
            ports[auth.PROXY_METRICS_PORT] = self.metrics_port
        if self.token_check_port is not None:
            ports[auth.TOKEN_CHECK_PORT] = self.token_check_port
        text = auth.nginx_conf(
            plan,
            keys=self.resolved.proxy_checks_keys,
            tokens=self.resolved.oidc is not None,
            metrics=self.resolved.metrics,
        )
        conf = local_nginx_conf(text, root=root, ports=ports)
        config_name = names.auth_config_name(self.resolved.owner.name)
        source.config_maps.setdefault(config_name, {})[names.NGINX_CONF_KEY] = conf
        conf_path = local_path(root, f"{auth.PROXY_CONF_MOUNT}/{names.NGINX_CONF_KEY}")
        container = {**sidecar, "args": ["-c", str(conf_path), "-g", "daemon off;"]}
        prefix = (nginx_binary(), "-e", "stderr")
        self._run(names.AUTH_CONTAINER, container, spec["volumes"], prefix, source, {})

    def _token_check(self, spec: Obj, source: MappingSource) -> None:
        """The token verifier (`auth.oidc`) on a free loopback port, as in the pod."""
        oidc = self.resolved.oidc
        assert oidc is not None
        if tokens.reads_cluster_api(oidc):
            raise ServeError(
                "auth.oidc: the keys of the cluster's ServiceAccount issuer are on the cluster's "
                "API server, which `longrun serve` does not reach; serve it in the cluster, or "
                "name an issuer reachable from here"
            )
        if oidc.ca_config_map_ref is not None:
            raise ServeError(
                "auth.oidc.caConfigMapRef: `longrun serve` reads no ConfigMaps; drop it here and "
                "trust the issuer's CA through SSL_CERT_FILE instead"
            )
        container = next(c for c in spec["containers"] if c["name"] == names.TOKEN_CHECK_CONTAINER)
        self.token_check_port = free_port()
        args = [str(a) for a in container.get("args") or []]
        args[args.index("--listen") + 1] = f"{LOOPBACK}:{self.token_check_port}"
        config_name = names.auth_config_name(self.resolved.owner.name)
        source.config_maps.setdefault(config_name, {})[names.OIDC_CONFIG_KEY] = tokens.config_json(
            oidc
        )
        prefix = (sys.executable, "-m", "runners.tokencheck")
        self._run(
            names.TOKEN_CHECK_CONTAINER,
            {**container, "args": args},
            spec["volumes"],
            prefix,
            source,
            {},
        )

    def _wait_ready(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        headers = {}
        if self.resolved.spec.auth.keys:
            headers["Authorization"] = f"Bearer {self.key_file.read_text().strip()}"
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    self.stop()
                    raise ServeError(f"the server stopped while starting; see {self.base}/*.log")
            if _answers(f"{self.endpoint}{path}", headers):
                return
            time.sleep(0.2)
        self.stop()
        raise ServeError(f"the server did not answer within {timeout:.0f}s; see {self.base}/*.log")

    def _record(self) -> None:
        r = self.resolved
        state = {
            "name": r.owner.name,
            "namespace": r.owner.namespace,
            "endpoint": self.endpoint,
            "protocol": r.plan.protocol,
            "modelName": r.served_name,
            "runtime": r.plan.kind,
            "apiKeyFile": str(self.key_file) if r.spec.auth.keys else None,
            "metricsEndpoint": (
                f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None
            ),
            "pid": os.getpid(),
        }
        (self.base / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def _host_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLSERVER_", "API_KEY"))}


def _answers(url: str, headers: Mapping[str, str]) -> bool:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


# -- from files -----------------------------------------------------------------------------


def resolve_local(obj: Obj, inputs: Inputs, settings: ServingSettings) -> ServingResolved:
    """The deployment with its Model from the files, checked as the controller checks it."""
    meta = obj["metadata"]
    try:
        spec = ModelDeploymentSpec.model_validate(obj.get("spec") or {})
    except ValueError as exc:
        raise InputError(f"ModelDeployment/{meta['name']}: {exc}") from None
    model = None
    if spec.named_model is not None:  # a modelRef, or a catalog entry's Model
        model = inputs.models.get((model_namespace(obj, spec), spec.named_model.name))
    found = resolve_deployment(obj, spec, model, settings)
    if isinstance(found, Problem):
        raise InputError(
            f"ModelDeployment/{meta['name']}: {found.field}: {found.message} ({found.reason})"
        )
    return found


def deployment_dir(work_dir: str | Path, namespace: str, name: str) -> Path:
    """Where a deployment's local state lives."""
    return Path(work_dir).resolve() / "serving" / namespace / name


def local_deployment(
    obj: Obj,
    inputs: Inputs,
    settings: ServingSettings,
    *,
    work_dir: str | Path,
    port: int = 0,
    pythons: Mapping[str, str] | None = None,
    claims: Mapping[str, str] | None = None,
) -> LocalDeployment:
    """A deployment of the files, ready to `start()`."""
    resolved = resolve_local(obj, inputs, settings)
    base = deployment_dir(work_dir, resolved.owner.namespace, resolved.owner.name)
    return LocalDeployment(resolved, settings, base, port, pythons or {}, claims or {})
