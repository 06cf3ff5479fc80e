"""InferenceHost and InferenceModel: what the models accept, what they refuse and why, and
that the CRDs carry the same rules (CEL) and printer columns.

Real: contracts.fleets (pydantic) and the CRDs controller/crds.py generates. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.fleets import InferenceHostSpec, InferenceModelSpec, is_local_host
from contracts.model import ModelBlock
from controller.crds import generate_crds


def refusal(model: Any, data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as failed:
        model.model_validate(data)
    return str(failed.value.errors()[0]["msg"]).removeprefix("Value error, ")


def crd(kind: str) -> dict[str, Any]:
    return next(c for c in generate_crds() if c["spec"]["names"]["kind"] == kind)


def test_a_host_defaults_to_the_openai_protocol_and_one_slot() -> None:
    spec = InferenceHostSpec.model_validate({"endpoint": "http://10.20.0.7:8080/"})
    assert (spec.endpoint, spec.admin_protocol, spec.capacity.slots) == (
        "http://10.20.0.7:8080", "openai", 1,
    )  # fmt: skip


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:8080", "http://localhost:11434", "http://[::1]:8080",
     "http://169.254.169.254", "http://0.0.0.0:80", "http://[fe80::1]:8080"],
)  # fmt: skip
def test_a_host_on_a_loopback_or_link_local_address_is_refused(endpoint: str) -> None:
    message = refusal(InferenceHostSpec, {"endpoint": endpoint})
    assert message.startswith("loopback, link-local and unspecified addresses are refused")


def test_a_host_endpoint_takes_no_path_and_no_credentials() -> None:
    assert refusal(InferenceHostSpec, {"endpoint": "http://h:8080/v1"}).startswith(
        "give scheme, host and port only"
    )
    assert "credentials" in refusal(InferenceHostSpec, {"endpoint": "http://u:p@h:8080"})


def test_capacity_needs_slots_or_memory() -> None:
    message = refusal(InferenceHostSpec, {"endpoint": "http://h:1", "capacity": {}})
    assert message == "set slots, memory or both"


def test_is_local_host_judges_names_and_literals() -> None:
    assert is_local_host("localhost") and is_local_host("::ffff:127.0.0.1")
    assert not is_local_host("gpu-box.lan") and not is_local_host("198.18.0.2")


def test_a_model_names_exactly_one_model() -> None:
    assert refusal(InferenceModelSpec, {}) == "set exactly one of model and modelRef"
    both = {"model": "x", "modelRef": {"name": "y"}}
    assert refusal(InferenceModelSpec, both) == "set exactly one of model and modelRef"


def test_selector_expressions_need_values_exactly_for_in_and_not_in() -> None:
    bad = {"model": "x", "hostSelector": {"matchExpressions": [{"key": "gpu", "operator": "In"}]}}
    assert refusal(InferenceModelSpec, bad).startswith("values: operators In and NotIn need")
    ok = {
        "model": "x",
        "hostSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
    }
    assert InferenceModelSpec.model_validate(ok).host_selector.match_expressions[0].key == "gpu"


def test_a_deployment_ref_may_name_an_inference_model() -> None:
    block = ModelBlock.model_validate({"deploymentRef": {"name": "qwen", "kind": "InferenceModel"}})
    assert block.deployment_ref is not None and block.deployment_ref.kind == "InferenceModel"


def test_the_crds_carry_the_rules_and_the_printer_columns() -> None:
    host, model = crd("InferenceHost"), crd("InferenceModel")
    assert host["spec"]["names"]["shortNames"] == ["ihost"]
    assert model["spec"]["names"]["shortNames"] == ["imodel"]
    for kind in (host, model):
        assert kind["spec"]["names"]["categories"] == ["longrun"]
        assert kind["spec"]["versions"][0]["subresources"] == {"status": {}}

    def columns(c: dict[str, Any]) -> list[str]:
        return [col["name"] for col in c["spec"]["versions"][0]["additionalPrinterColumns"]
                if not col.get("priority")]  # fmt: skip

    assert columns(host) == ["Endpoint", "Ready", "Models", "Age"]
    assert columns(model) == ["Model", "Replicas", "Ready", "Age"]
    spec = host["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    messages = {r["message"] for r in spec["x-kubernetes-validations"]}
    assert any(m.startswith("endpoint: loopback, link-local") for m in messages)
