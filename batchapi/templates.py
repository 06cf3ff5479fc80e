"""Which config or deployment serves a batch's model: the mapping a namespace declares.

An InferenceConfig or a ModelDeployment opts into the Batch API with the annotation
`longrun.dev/openai-model: <model id>`; the id is what batch lines name in `body.model`. A
batch for that model runs with the config's model, runner and pod settings (its storage
replaced by the batch's files), or with a config of its own naming the deployment
(`model.deploymentRef`), so an on-demand deployment comes up for the batch and goes down after.

The runner sends each line's body as it is and refuses a line naming another model than the
one it calls (docs/llm-batch.md), so the id must be that name: the config's `model.name`, or
the name the deployment serves (`status.modelName`). A mapping that breaks this is reported
when a batch asks for it, naming the object, instead of failing every line later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchapi.errors import ApiFailure, bad_request

MODEL_ANNOTATION = "longrun.dev/openai-model"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Template:
    """A config or deployment named by the annotation, and what is wrong with it, if anything."""

    kind: str  # InferenceConfig | ModelDeployment
    name: str
    model_id: str
    spec: Obj  # the config's spec; {} for a deployment
    problem: str | None = None

    @property
    def ref(self) -> str:
        """`Kind/name`, as recorded on the batch's run."""
        return f"{self.kind}/{self.name}"


def find_templates(configs: list[Obj], deployments: list[Obj]) -> dict[str, list[Template]]:
    """Model id -> the objects of the namespace annotated with it (in name order)."""
    served = {_name(d): (d.get("status") or {}) for d in deployments}
    found: dict[str, list[Template]] = {}
    for config in sorted(configs, key=_name):
        model_id = _annotation(config)
        if model_id:
            template = _config_template(config, model_id, served)
            found.setdefault(model_id, []).append(template)
    for deployment in sorted(deployments, key=_name):
        model_id = _annotation(deployment)
        if model_id:
            template = _deployment_template(deployment, model_id)
            found.setdefault(model_id, []).append(template)
    return found


def pick(model: str, found: dict[str, list[Template]]) -> Template:
    """The one template serving `model`, or a 400 naming the models there are."""
    candidates = found.get(model) or []
    if not candidates:
        known = ", ".join(sorted(found)) or "none"
        raise bad_request(
            f"The model '{model}' (body.model of the input file's lines) is not served here. "
            f"Models in this namespace: {known}. An InferenceConfig or ModelDeployment serves "
            f"a model once annotated {MODEL_ANNOTATION}: <model>.",
            param="model",
            code="model_not_found",
        )
    if len(candidates) > 1:
        named = " and ".join(t.ref for t in candidates)
        raise bad_request(
            f"The model '{model}' is named by {named} ({MODEL_ANNOTATION}); "
            "annotate only one of them.",
            param="model",
            code="model_ambiguous",
        )
    template = candidates[0]
    if template.problem:
        raise ApiFailure(400, template.problem, param="model", code="model_misconfigured")
    return template


def _config_template(config: Obj, model_id: str, served: dict[str, Obj]) -> Template:
    spec = config.get("spec") or {}
    model = spec.get("model") or {}
    where = f"InferenceConfig {_name(config)} ({MODEL_ANNOTATION}: {model_id})"
    ref = model.get("deploymentRef") or {}
    if ref and not ref.get("namespace"):
        status = served.get(str(ref.get("name")))
        problem = _deployment_problem(where, model_id, status) if status else None
    elif ref:
        problem = None  # another namespace's deployment: its name is checked by the runner
    elif not str(model.get("protocol") or "").startswith("openai-"):
        problem = f"{where} uses protocol {model.get('protocol')}, not an OpenAI protocol"
    elif model.get("name") != model_id:
        problem = (
            f"{where} calls model '{model.get('name')}' (spec.model.name), and its runner "
            f"refuses lines naming another model: annotate it with '{model.get('name')}' "
            f"or set spec.model.name to '{model_id}'"
        )
    else:
        problem = None
    return Template("InferenceConfig", _name(config), model_id, spec, problem)


def _deployment_template(deployment: Obj, model_id: str) -> Template:
    where = f"ModelDeployment {_name(deployment)} ({MODEL_ANNOTATION}: {model_id})"
    problem = _deployment_problem(where, model_id, deployment.get("status") or {})
    return Template("ModelDeployment", _name(deployment), model_id, {}, problem)


def _deployment_problem(where: str, model_id: str, status: Obj) -> str | None:
    protocol, name = status.get("protocol"), status.get("modelName")
    if protocol and not str(protocol).startswith("openai-"):
        return f"{where} serves protocol {protocol}, not an OpenAI protocol"
    if name and name != model_id:
        return (
            f"{where} serves model '{name}' (status.modelName), and the runner refuses lines "
            f"naming another model: annotate it with '{name}' or set spec.servedName "
            f"to '{model_id}'"
        )
    return None


def _annotation(obj: Obj) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(MODEL_ANNOTATION) or "")


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
