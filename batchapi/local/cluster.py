"""The Batch API on one machine: batches run by `longrun run`, state in a directory.

`longrun batch-api --local -f FILES` is for a developer without a cluster, as `longrun run`
is. The cluster port (batchapi/ports.py) is served from files: each run and its config are
JSON files under `<work>/batch-api/<namespace>/<run>/`, the templates (annotated
InferenceConfigs and ModelDeployments) come from the `-f` files, and a run starts once its
config exists: a detached process (`python -m batchapi.local.job`) runs `longrun run` on the
run, its config and the `-f` files, so a ModelDeployment comes up for the batch and goes down
after it, exactly as `longrun run` does. The job outlives the server; the status is read back
from what it leaves: its result (the status `longrun run -o json` prints, the controller's own
status function) once finished, else its pod log's last progress report. A job found dead
without a result (the machine restarted) is started again, and `longrun run` resumes after the
committed chunks. Cancel is Ctrl-C to the job: the pod stops, committed chunks stay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from batchapi.local.job import JOB_FILE, RESULT_FILE, job_alive
from controller.core.ports import ApiError
from controller.core.progress import parse_report

Obj = dict[str, Any]
RUN_FILE, CONFIG_FILE = "run.json", "config.json"


class LocalCluster:
    """`batchapi.ports.Cluster` on this machine (module docstring)."""

    def __init__(
        self, work_dir: Path, *, templates: list[Obj], files: list[str], run_args: list[str]
    ) -> None:
        self.work_dir = work_dir.resolve()
        self.root = self.work_dir / "batch-api"
        self.templates = templates  # InferenceConfigs and ModelDeployments from -f
        self.files = files  # the -f paths, given to every `longrun run`
        self.run_args = run_args  # --pvc, --runtime-python, --image-map, --env-file
        self._lock = threading.Lock()

    # -- runs -------------------------------------------------------------------------------
    def create_run(self, namespace: str, run: Obj) -> Obj:
        folder = self._folder(namespace, run["metadata"]["name"])
        with self._lock:
            if folder.exists():
                raise ApiError(409, f'inferenceruns "{folder.name}" already exists')
            folder.mkdir(parents=True)
            meta = run["metadata"]
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), namespace=namespace)
            _write(folder / RUN_FILE, run)
        return self._observed(folder)

    def get_run(self, namespace: str, name: str) -> Obj | None:
        folder = self._folder(namespace, name)
        return self._observed(folder) if (folder / RUN_FILE).exists() else None

    def list_runs(self, namespace: str, *, label_selector: str) -> list[Obj]:
        key, _, value = label_selector.partition("=")
        base = self.root / namespace
        runs = [self._observed(f) for f in sorted(base.iterdir())] if base.is_dir() else []
        return [r for r in runs if (r["metadata"].get("labels") or {}).get(key) == value]

    def patch_run(self, namespace: str, name: str, patch: Obj) -> Obj:
        folder = self._folder(namespace, name)
        with self._lock:
            run = _read(folder / RUN_FILE)
            if run is None:
                raise ApiError(404, f'inferenceruns "{name}" not found')
            _merge(run, patch)
            _write(folder / RUN_FILE, run)
        if (run.get("spec") or {}).get("cancel"):
            job = _read(folder / JOB_FILE)
            if job is not None and job_alive(job):
                os.kill(int(job["pid"]), signal.SIGINT)  # longrun run: stop, keep the chunks
        return self._observed(folder)

    # -- configs and templates --------------------------------------------------------------
    def create_config(self, namespace: str, config: Obj) -> None:
        folder = self._folder(namespace, config["metadata"]["name"])
        with self._lock:
            if (folder / CONFIG_FILE).exists():
                raise ApiError(409, f'inferenceconfigs "{folder.name}" already exists')
            _write(folder / CONFIG_FILE, config)
        self._start(folder)

    def get_config(self, namespace: str, name: str) -> Obj | None:
        config: Obj | None = _read(self._folder(namespace, name) / CONFIG_FILE)
        return config

    def list_configs(self, namespace: str) -> list[Obj]:
        return self._templates("InferenceConfig", namespace)

    def list_deployments(self, namespace: str) -> list[Obj]:
        return self._templates("ModelDeployment", namespace)

    def _templates(self, kind: str, namespace: str) -> list[Obj]:
        return [
            t
            for t in self.templates
            if t["kind"] == kind and (t["metadata"].get("namespace") or "default") == namespace
        ]

    # -- jobs -------------------------------------------------------------------------------
    def _start(self, folder: Path) -> None:
        """Start (or start again) the job of a run that has its config."""
        run = _read(folder / RUN_FILE) or {}
        name, namespace = run["metadata"]["name"], run["metadata"]["namespace"]
        objects = folder / "objects.yaml"
        docs = [_clean(run), _clean(_read(folder / CONFIG_FILE) or {})]
        objects.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        argv = [
            name,
            "-n",
            namespace,
            "-f",
            str(objects),
            *[a for f in self.files for a in ("-f", f)],
        ]
        argv += ["--work-dir", str(self.work_dir), "-o", "json", *self.run_args]
        _write(folder / "args.json", argv)
        with open(folder / "job.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "batchapi.local.job", str(folder)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # the job outlives this server
            )
        _write(folder / JOB_FILE, {"pid": process.pid, "started": _now()})
        threading.Thread(target=process.wait, daemon=True).start()  # reap it if we live on

    def _observed(self, folder: Path) -> Obj:
        """The run with the status its job shows now (module docstring)."""
        run = _read(folder / RUN_FILE) or {}
        spec, config = run.get("spec") or {}, folder / CONFIG_FILE
        result, job = _read(folder / RESULT_FILE), _read(folder / JOB_FILE)
        if result is not None:
            run["status"] = _final(result, cancelled=bool(spec.get("cancel")))
        elif spec.get("cancel") and job is None:
            run["status"] = {"phase": "Cancelled", "completionTime": _now()}
        elif not config.exists():
            reason = {"type": "Accepted", "status": "False", "reason": "ConfigNotFound"}
            run["status"] = {"phase": "Pending", "conditions": [reason]}
        elif job is None or not job_alive(job):
            self._start(folder)  # a job that died without a result: resume it
            run["status"] = {"phase": "Running"}
        else:
            run["status"] = {
                "phase": "Running",
                "startTime": job.get("started"),
                "progress": _progress(self.work_dir, run),
            }
        return run

    def _folder(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name


def _final(result: Obj, *, cancelled: bool) -> Obj:
    """The status `longrun run` printed; a run stopped by a cancel is Cancelled."""
    status = dict(result.get("status") or {})
    if cancelled and result.get("exitCode") == 130:
        status["phase"] = "Cancelled"
        status.setdefault("completionTime", result.get("finished") or _now())
        if status.get("result") is None and status.get("progress"):
            status["result"] = status["progress"]
    return status


def _progress(work_dir: Path, run: Obj) -> Obj | None:
    meta = run["metadata"]
    logs = work_dir / "runs" / meta["namespace"] / meta["name"] / "logs"
    texts = (
        [p.read_text(errors="replace") for p in sorted(logs.glob("*.log"))] if logs.is_dir() else []
    )
    report = parse_report("\n".join(texts[-1:]))
    if report is None:
        return None
    return {
        "recordsRead": report.read,
        "recordsWritten": report.written,
        "recordsFailed": report.failed,
    }


def _clean(obj: Obj) -> Obj:
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": meta,
        "spec": obj.get("spec") or {},
    }


def _merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = value


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _write(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
