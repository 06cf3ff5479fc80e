"""An in-memory cluster for the Batch API's unit tests: runs, configs, deployments, reviews.

It stores what the server writes and answers what a Kubernetes API server would for the
calls the server makes (batchapi/ports.py): a uid and creation time on create, 409 for a
name taken, merge patches, label selection. Tokens and permissions are a table the test
fills. `finish_run` plays the controller and the runner: it writes the run's part files into
its output locations and the final status.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller.core.ports import ApiError

Obj = dict[str, Any]


@dataclass
class FakeCluster:
    """`Cluster` and `Reviews` in memory."""

    runs: dict[tuple[str, str], Obj] = field(default_factory=dict)
    configs: dict[tuple[str, str], Obj] = field(default_factory=dict)
    deployments: dict[tuple[str, str], Obj] = field(default_factory=dict)
    tokens: dict[str, Obj] = field(default_factory=dict)  # token -> user
    grants: set[tuple[str, str, str]] = field(default_factory=set)  # (user, namespace, verb)
    calls: list[str] = field(default_factory=list)

    def create_run(self, namespace: str, run: Obj) -> Obj:
        self.calls.append("create_run")
        key = (namespace, run["metadata"]["name"])
        if key in self.runs:
            raise ApiError(409, "exists")
        stored = copy.deepcopy(run)
        created = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        stored["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=created)
        self.runs[key] = stored
        return copy.deepcopy(stored)

    def get_run(self, namespace: str, name: str) -> Obj | None:
        run = self.runs.get((namespace, name))
        return copy.deepcopy(run) if run else None

    def list_runs(self, namespace: str, *, label_selector: str) -> list[Obj]:
        key, _, value = label_selector.partition("=")
        return [
            copy.deepcopy(r)
            for (ns, _), r in sorted(self.runs.items())
            if ns == namespace and r["metadata"].get("labels", {}).get(key) == value
        ]

    def patch_run(self, namespace: str, name: str, patch: Obj) -> Obj:
        run = self.runs.get((namespace, name))
        if run is None:
            raise ApiError(404, "not found")
        _merge(run, patch)
        return copy.deepcopy(run)

    def create_config(self, namespace: str, config: Obj) -> None:
        self.calls.append("create_config")
        key = (namespace, config["metadata"]["name"])
        if key in self.configs:
            raise ApiError(409, "exists")
        self.configs[key] = copy.deepcopy(config)

    def get_config(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.configs.get((namespace, name)))

    def list_configs(self, namespace: str) -> list[Obj]:
        return [copy.deepcopy(c) for (ns, _), c in self.configs.items() if ns == namespace]

    def list_deployments(self, namespace: str) -> list[Obj]:
        return [copy.deepcopy(d) for (ns, _), d in self.deployments.items() if ns == namespace]

    def review_token(self, token: str) -> Obj | None:
        return copy.deepcopy(self.tokens.get(token))

    def review_access(self, user: Obj, *, namespace: str, verb: str, name: str) -> bool:
        return (user["username"], namespace, verb) in self.grants

    # -- what the test sets up ----------------------------------------------------------------
    def add_user(self, token: str, username: str, namespace: str, *verbs: str) -> None:
        """A token for `username`, allowed `verbs` (default: all) in `namespace`."""
        self.tokens[token] = {"username": username, "groups": ["system:authenticated"]}
        for verb in verbs or ("create", "get", "list", "patch", "delete"):
            self.grants.add((username, namespace, verb))

    def add_template(self, namespace: str, name: str, model: str) -> None:
        """An InferenceConfig serving `model` (annotated for the Batch API)."""
        self.configs[(namespace, name)] = {
            "apiVersion": "longrun.dev/v1alpha1",
            "kind": "InferenceConfig",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {"longrun.dev/openai-model": model},
            },
            "spec": {
                "model": {"protocol": "openai-chat", "url": "http://llm:8000/v1", "name": model},
                "storage": {"input": {"file": {"path": "/x"}}, "output": {"file": {"path": "/y"}}},
                "runner": {"concurrency": 4, "maxFailedRecords": 0},
            },
        }

    def finish_run(
        self,
        namespace: str,
        name: str,
        *,
        phase: str,
        root: Path,
        answers: list[Obj],
        errors: list[Obj],
        reason: str = "",
    ) -> None:
        """Play the runner and the controller: parts in the run's output locations (a
        directory store under `root`), then the final status."""
        config = self.configs[(namespace, name)]
        for role, lines in (("output", answers), ("errors", errors)):
            folder = Path(config["spec"]["storage"][role]["file"]["path"])
            folder.mkdir(parents=True, exist_ok=True)
            text = "".join(json.dumps(line) + "\n" for line in lines)
            (folder / "part-000000.jsonl").write_text(text)
            (folder / "_SUCCESS").write_text("{}")
        done = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        status: Obj = {
            "phase": phase,
            "startTime": done,
            "completionTime": done,
            "result": {
                "recordsRead": len(answers) + len(errors),
                "recordsWritten": len(answers),
                "recordsFailed": len(errors),
                "promptTokens": 10,
                "completionTokens": 5,
                "totalTokens": 15,
            },
        }
        if reason:
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason}]
            status["message"] = reason
        self.runs[(namespace, name)]["status"] = status


def _merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
