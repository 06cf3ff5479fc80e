"""The chart's serving allow-lists reach the controller: images, command lines, env Secrets,
Ingress hosts, ClusterIssuers, Service types and the egress of model-server pods.

Real: Helm v4's template engine and the chart's values.schema.json (helm-python-sdk), the
controller's own parser of its environment (serving_settings_from_env), so what the chart
renders is what the controller runs with. Faked: no cluster is contacted (offline render).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from controller.core.serving.settings import ServingSettings, serving_settings_from_env

CHART = Path(__file__).resolve().parents[2] / "charts" / "longrun"


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def settings_of(chart: Any, values: dict[str, Any] | None = None) -> ServingSettings:
    """The controller's serving settings from the environment the chart renders."""
    out = chart.render(values or {}, name="lr", namespace="longrun-system")
    docs = [d for path, text in out.items() if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]  # fmt: skip
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return serving_settings_from_env({e["name"]: str(e["value"]) for e in env if "value" in e})


def test_the_defaults_are_the_safe_ones(chart: Any) -> None:
    settings = settings_of(chart)
    assert settings.allowed_images == ()  # the shipped runtime images only
    assert settings.allow_custom_commands is False
    assert settings.allowed_env_secrets == ()
    assert settings.allowed_hosts == ()
    assert settings.allowed_cluster_issuers == ()
    assert settings.allowed_service_types == ("ClusterIP",)
    assert settings.egress is None  # every address but the denied networks
    assert settings.denied_cidrs == (
        "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32",
    )  # fmt: skip


def test_each_allow_list_reaches_the_controller(chart: Any) -> None:
    serving = {
        "allowedImages": ["vllm/vllm-openai:*"],
        "allowCustomCommands": True,
        "allowedEnvSecrets": ["hf-token"],
        "allowedServiceTypes": ["ClusterIP", "LoadBalancer"],
        "ingress": {"allowedHosts": ["*.{namespace}.apps.example.com"]},
        "tls": {"allowedClusterIssuers": ["letsencrypt"]},
    }
    settings = settings_of(chart, {"serving": serving})
    assert settings.allowed_images == ("vllm/vllm-openai:*",)
    assert settings.allow_custom_commands is True
    assert settings.allowed_env_secrets == ("hf-token",)
    assert settings.allowed_service_types == ("ClusterIP", "LoadBalancer")
    assert settings.allowed_hosts == ("*.{namespace}.apps.example.com",)
    assert settings.allowed_cluster_issuers == ("letsencrypt",)


def test_the_egress_allow_list_reaches_the_controller(chart: Any) -> None:
    from controller.core.serving.egress import CidrRule, EgressAllowList

    policy = {
        "enabled": True,
        "sameNamespace": False,
        "namespaces": ["storage"],
        "cidrs": ["10.20.0.0/16", {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}],
    }
    settings = settings_of(chart, {"serving": {"networkPolicy": policy}})
    assert settings.egress == EgressAllowList(
        dns_namespace="kube-system",
        dns_pod_labels={"k8s-app": "kube-dns"},
        same_namespace=False,
        namespaces=("storage",),
        cidrs=(CidrRule("10.20.0.0/16"), CidrRule("0.0.0.0/0", ("10.0.0.0/8",))),
    )
    # Built by the controller in each deployment's namespace: no watchNamespaces needed.
    off = settings_of(chart, {"serving": {"networkPolicy": {**policy, "enabled": False}}})
    assert off.egress is None


@pytest.mark.parametrize(
    "serving",
    [
        {"allowedServiceTypes": ["ExternalName"]},
        {"allowCustomCommands": "yes"},
        {"ingress": {"allowedHosts": ["https://apps.example.com"]}},
        {"networkPolicy": {"cidrs": ["everything"]}},
        {"tls": {"allowedIssuers": []}},
    ],
    ids=["service-type", "not-a-bool", "host-is-a-url", "bad-cidr", "misspelled-key"],
)
def test_values_schema_rejects_bad_serving_values(chart: Any, serving: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        chart.render({"serving": serving}, name="lr", namespace="longrun-system")
