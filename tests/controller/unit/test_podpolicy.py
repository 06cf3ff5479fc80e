"""What a config may put into the runner pod (controller.core.podpolicy): each attack of the
security review as plain data. Nothing is faked: specs in, problems out."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.config import InferenceConfigSpec
from controller.core.podpolicy import PodPolicy, pod_problems
from tests.controller.unit.objects import CONFIG_SPEC


def spec(**pod: Any) -> InferenceConfigSpec:
    return InferenceConfigSpec.model_validate({**CONFIG_SPEC, "pod": pod})


def reasons(config: InferenceConfigSpec, policy: PodPolicy | None = None) -> list[str]:
    return [p.reason for p in pod_problems(config, policy or PodPolicy())]


@pytest.mark.parametrize(
    "name",
    ["PYTHONPATH", "PYTHONWARNINGS", "PYTHONSTARTUP", "BROWSER", "LD_PRELOAD", "CONTRACT_PATH",
     "PATH", "GLIBC_TUNABLES", "LONGRUN_RUNNER_PLUGINS", "JOB_NAME", "pythonpath"],
)  # fmt: skip
def test_env_names_the_runtime_or_longrun_interprets_are_refused(name: str) -> None:
    problems = pod_problems(spec(env=[{"name": name, "value": "x"}]), PodPolicy())
    assert [(p.field, p.reason) for p in problems] == [("spec.pod.env[0].name", "EnvNotAllowed")]
    assert name in problems[0].message


@pytest.mark.parametrize("name", ["contract_path", "Job_Name", "path", "Bash_Env", "kubeconfig"])
def test_env_names_are_compared_without_regard_to_case(name: str) -> None:
    # The same rule as for model servers (MLServer reads its settings in any case): one
    # comparison for every pod longrun makes, whatever each reader does.
    problems = pod_problems(spec(env=[{"name": name, "value": "x"}]), PodPolicy())
    assert [(p.field, p.reason) for p in problems] == [("spec.pod.env[0].name", "EnvNotAllowed")]


def test_ordinary_env_and_secret_env_pass() -> None:
    env = [{"name": "MODEL_HINT", "value": "x"},
           {"name": "API_TOKEN", "secretKeyRef": {"name": "s", "key": "k"}}]  # fmt: skip
    assert reasons(spec(env=env)) == []


def test_labels_and_annotations_need_the_allow_list_which_names_its_setting() -> None:
    problems = pod_problems(spec(labels={"app": "database"}), PodPolicy())
    assert [(p.field, p.reason) for p in problems] == [
        ("spec.pod.labels.app", "PodLabelNotAllowed")
    ]
    assert "ALLOWED_POD_LABELS" in problems[0].message
    assert reasons(spec(labels={"team": "a"}), PodPolicy(label_keys=("team",))) == []


def test_security_relevant_annotations_are_refused_even_when_allowed_by_a_glob() -> None:
    apparmor = {"container.apparmor.security.beta.kubernetes.io/runner": "unconfined"}
    everything = PodPolicy(annotation_keys=("*",))
    assert reasons(spec(annotations=apparmor), everything) == ["PodAnnotationNotAllowed"]
    ours = {"longrun.dev/run": "other"}
    assert reasons(spec(labels=ours), PodPolicy(label_keys=("*",))) == ["PodLabelNotAllowed"]


def test_tolerations_come_from_the_allow_list_and_match_all_needs_star() -> None:
    match_all = spec(tolerations=[{"operator": "Exists"}])
    gpu = spec(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert reasons(match_all, PodPolicy(toleration_keys=("nvidia.com/gpu",))) == [
        "TolerationNotAllowed"
    ]
    assert reasons(gpu, PodPolicy()) == ["TolerationNotAllowed"]
    assert reasons(gpu, PodPolicy(toleration_keys=("nvidia.com/*",))) == []
    assert reasons(match_all, PodPolicy(toleration_keys=("*",))) == []


@pytest.mark.parametrize(
    ("path", "mount"),
    [("/opt/longrun/in.jsonl", None), ("/etc/in.jsonl", None), ("/data/in.jsonl", "/"),
     ("/tmp/in.jsonl", "/tmp"), ("/var/run/longrun/in.jsonl", "/var/run/longrun"),
     ("/var/in.jsonl", "/var"), ("/usr/lib/x.jsonl", "/usr/lib")],
)  # fmt: skip
def test_volume_may_not_cover_the_runner_code_contract_secrets_or_system(
    path: str, mount: str | None
) -> None:
    storage = {"file": {"path": path, "volume": "data", **({"mountPath": mount} if mount else {})}}
    config = InferenceConfigSpec.model_validate(
        {**CONFIG_SPEC, "storage": {"input": storage, "output": {"file": {"path": "/out"}}}}
    )
    problems = pod_problems(config, PodPolicy())
    assert [(p.field, p.reason) for p in problems] == [
        ("spec.storage.input.file.mountPath", "MountPathNotAllowed")
    ]


def test_volume_under_data_or_inside_tmp_is_fine() -> None:
    for path, mount in (("/data/in.jsonl", None), ("/tmp/data/in.jsonl", "/tmp/data")):
        storage = {"file": {"path": path, "volume": "d", **({"mountPath": mount} if mount else {})}}
        config = InferenceConfigSpec.model_validate(
            {**CONFIG_SPEC, "storage": {"input": storage, "output": {"file": {"path": "/out"}}}}
        )
        assert reasons(config) == []
