"""The local pod executor: env, contract and Secret materialization, image mapping, deadlines.

Real: the controller's builders render the pod, `run_pod` starts a real subprocess (the
committed fake runner, `tests/local/fake_runner.py`) and the files it sees are real files.
Faked: the runner image (mapped to the fake runner script); ConfigMaps and Secrets come from
plain dicts instead of an API server.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.builders import ObjectIdentity, Resolved, build_pod_template
from controller.core.settings import Settings
from local.executor import run_pod
from local.podspec import (
    ImageMap,
    MappingSource,
    PodSetupError,
    image_repository,
    parse_image_map,
)

FAKE = Path(__file__).with_name("fake_runner.py")
IMAGE = "example.com/fake:1"


def resolved(tmp_path: Path, *, mode: str = "ok") -> Resolved:
    config = InferenceConfigSpec.model_validate(
        {
            "image": IMAGE,
            "model": {"protocol": "kserve-v1", "url": "http://127.0.0.1:9", "name": "m"},
            "storage": {
                "input": {"sql": {"urlSecretRef": {"name": "db", "key": "url"}, "table": "t"}},
                "output": {"file": {"path": str(tmp_path / "out")}},
            },
            "pod": {
                "env": [
                    {"name": "FAKE_MODE", "value": mode},
                    {"name": "FAKE_OUT", "value": str(tmp_path / "seen")},
                    {"name": "TOKEN", "secretKeyRef": {"name": "tok", "key": "t"}},
                ]
            },
        }
    )
    run = InferenceRunSpec.model_validate({"configRef": {"name": "c"}})
    return Resolved(ObjectIdentity("r", "ns", "uid-1", 1), run, ObjectIdentity("c", "ns"), config)


def pod(tmp_path: Path, *, mode: str = "ok") -> dict:
    template = build_pod_template(resolved(tmp_path, mode=mode), Settings())
    template["metadata"]["name"] = "r-abcde"
    template["metadata"]["namespace"] = "ns"
    template["metadata"]["uid"] = "pod-uid-1"
    template["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "r"
    return template


def source() -> MappingSource:
    return MappingSource(
        {"r-contract": {"contract.json": json.dumps({"secretsDir": "/var/run/longrun/secrets"})}},
        {"db": {"url": b"sqlite:///x.db"}, "tok": {"t": b"s3cret"}},
    )


def images() -> ImageMap:
    return ImageMap("ghcr.io/longrun/runner:latest", {IMAGE: (sys.executable, str(FAKE))})


def run(tmp_path: Path, *, mode: str = "ok", **kwargs: object):
    lines: list[tuple[str, str]] = []
    exit_ = run_pod(
        pod(tmp_path, mode=mode),
        source=source(),
        root=tmp_path / "root",
        images=images(),
        on_line=lambda s, line: lines.append((s, line)),
        **kwargs,  # type: ignore[arg-type]
    )
    return exit_, lines


def seen(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "seen" / "attempt-0.json").read_text())


def test_pod_env_resolves_values_secret_refs_and_downward_api(tmp_path: Path) -> None:
    run(tmp_path)
    env = seen(tmp_path)["env"]
    assert env["TOKEN"] == "s3cret"
    assert env["POD_UID"] == env["pod_uid"] == "pod-uid-1"
    assert env["JOB_NAME"] == "r"
    assert env["RUN_NAME"] == "r" and env["RUN_NAMESPACE"] == "ns" and env["JOB_ID"] == "uid-1"


def test_contract_is_mounted_under_the_pod_root_and_contract_path_points_there(
    tmp_path: Path,
) -> None:
    run(tmp_path)
    env = seen(tmp_path)["env"]
    assert env["CONTRACT_PATH"] == str(tmp_path / "root/etc/longrun/contract.json")
    assert env["TERMINATION_MESSAGE_PATH"] == str(tmp_path / "root/dev/termination-log")
    assert env["TMPDIR"] == str(tmp_path / "root/tmp")


def test_secret_volumes_are_files_readable_only_by_the_user(tmp_path: Path) -> None:
    run(tmp_path)
    secrets_dir = tmp_path / "root/var/run/longrun/secrets"
    assert (secrets_dir / "db/url").read_text() == "sqlite:///x.db"
    assert oct((secrets_dir / "db/url").stat().st_mode & 0o777) == "0o600"
    assert not (secrets_dir / "tok").exists()  # env-only Secrets are not mounted


def test_termination_message_and_exit_code_are_reported(tmp_path: Path) -> None:
    exit_, lines = run(tmp_path, mode="bad")
    assert exit_.exit_code == 2 and exit_.reason == "Error"
    assert json.loads(exit_.message) == {"reason": "fake failure 2"}
    assert ("stderr", "fake runner: hello from the pod") in lines


def test_missing_secret_fails_before_starting(tmp_path: Path) -> None:
    exit_ = run_pod(
        pod(tmp_path),
        source=MappingSource({"r-contract": {"contract.json": "{}"}}, {}),
        root=tmp_path / "root",
        images=images(),
        on_line=lambda *_: None,
    )
    assert exit_.reason == "CreateContainerConfigError"
    assert "Secret 'db' not found" in exit_.message
    assert not (tmp_path / "seen").exists()


def test_deadline_kills_the_pod_with_deadline_exceeded(tmp_path: Path) -> None:
    started = time.monotonic()
    exit_, _ = run(tmp_path, mode="sleep", deadline=time.monotonic() + 0.5)
    assert exit_.reason == "DeadlineExceeded"
    assert exit_.exit_code == 143  # SIGTERM, as a container reports it
    assert time.monotonic() - started < 10


def test_stop_event_sends_sigterm(tmp_path: Path) -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    exit_, _ = run(tmp_path, mode="sleep", stop=stop)
    assert (exit_.exit_code, exit_.reason) == (143, "Stopped")


def test_runner_image_any_tag_maps_to_this_python_runner() -> None:
    command = ImageMap("ghcr.io/longrun/runner:latest").command_for("ghcr.io/longrun/runner:0.3")
    assert command == (sys.executable, "-m", "runners")


def test_unmapped_image_names_the_image_map_flag() -> None:
    with pytest.raises(PodSetupError, match=r"--image-map quay\.io/krateo/runner:1=COMMAND"):
        ImageMap("ghcr.io/longrun/runner:latest").command_for("quay.io/krateo/runner:1")


def test_image_map_entries_match_exactly_or_by_repository() -> None:
    commands = parse_image_map(["quay.io/krateo/runner=python -m krateo_runner --x 'a b'"])
    mapped = ImageMap("r:latest", commands).command_for("quay.io/krateo/runner:2@sha256:ab")
    assert mapped == ("python", "-m", "krateo_runner", "--x", "a b")
    assert image_repository("localhost:5000/a/b:1") == "localhost:5000/a/b"
    with pytest.raises(ValueError, match="IMAGE=COMMAND"):
        parse_image_map(["no-command="])


def test_host_environment_reaches_the_pod_but_not_its_contract_path(tmp_path: Path) -> None:
    run(tmp_path, base_env={**os.environ, "CONTRACT_PATH": "/nope", "EXTRA": "1"})
    env = seen(tmp_path)["env"]
    assert env["EXTRA"] == "1" and env["CONTRACT_PATH"] != "/nope"
