"""Model-server metrics (SERVING_METRICS): every runtime that exports Prometheus metrics gets
a `metrics` port on the nginx sidecar that answers the metrics path only, without a key, and
the NetworkPolicy admits it from the monitoring namespaces; llama.cpp, which would ask for a
key on /metrics, then has its keys checked by the sidecar too.

Real: resolve/decide, the runtime table, the builders and the nginx.conf renderer on plain
dicts; the real nginx serving that conf is tests/local/test_auth_sidecar.py's. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.core.serving import auth
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from tests.controller.unit.serving.objects import SETTINGS, created, decide, for_runtime, resolved
from tests.controller.unit.serving.test_runtimes import args_of

ON = serving_settings_from_env(
    {"SERVING_METRICS": "true", "SERVING_METRICS_NAMESPACES": "monitoring,observability"}
)
# Where each runtime answers /metrics: its HTTP port, or a port of its own.
METRICS_PORTS = {"llamacpp": 8080, "vllm": 8080, "kserve": 8080, "mlserver": 8082, "triton": 8002}


def children(obj: dict[str, Any], settings: ServingSettings) -> dict[str, dict[str, Any]]:
    merged = ServingSettings(**{**vars(settings), "allowed_images": SETTINGS.allowed_images})
    return created(decide(obj, settings=merged))


@pytest.mark.parametrize("runtime", sorted(METRICS_PORTS))
def test_each_runtime_exports_its_metrics_on_the_sidecars_metrics_port(runtime: str) -> None:
    made = children(for_runtime(runtime), ON)
    pod = made["Deployment"]["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "auth-proxy")
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in sidecar["ports"]
    conf = made["ConfigMap"]["data"]["nginx.conf"]
    assert "listen 9090;" in conf
    assert f"proxy_pass http://127.0.0.1:{METRICS_PORTS[runtime]};" in conf
    assert 'location = "/metrics"' in conf


def test_the_metrics_server_answers_the_metrics_path_only_and_never_checks_a_key() -> None:
    plan = resolved(for_runtime("vllm"), settings=ON).plan
    conf = auth.nginx_conf(plan, keys=False, metrics=True)
    assert "$longrun_key_ok" not in conf and "map " not in conf
    metrics = conf[conf.index("listen 9090;") :]
    assert "limit_except GET" in metrics and "location / { return 404; }" in metrics


def test_the_network_policy_admits_the_metrics_port_from_the_monitoring_namespaces() -> None:
    policy = children(for_runtime("vllm"), ON)["NetworkPolicy"]["spec"]
    public, scrape = policy["ingress"]
    assert public == {"ports": [{"port": 9080, "protocol": "TCP"}]}  # the keyed port, anyone
    assert scrape["ports"] == [{"port": 9090, "protocol": "TCP"}]
    (peer,) = scrape["from"]
    expression = peer["namespaceSelector"]["matchExpressions"][0]
    assert expression == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["monitoring", "observability"],
    }
    anyone = serving_settings_from_env({"SERVING_METRICS": "true"})
    assert (
        "from" not in children(for_runtime("vllm"), anyone)["NetworkPolicy"]["spec"]["ingress"][1]
    )


def test_llamacpp_moves_behind_the_sidecar_when_its_metrics_are_exported() -> None:
    # llama.cpp asks for the key on /metrics: with it exported the sidecar checks the keys.
    r = resolved(for_runtime("llamacpp"), settings=ON)
    assert r.uses_auth_proxy and r.plan.key_file is None
    flags = args_of(r)
    assert "--api-key-file" not in flags and flags["--host"] == "127.0.0.1"
    assert "--metrics" in flags
    plain = resolved(for_runtime("llamacpp"))
    assert not plain.has_sidecar and plain.plan.key_file is not None


def test_without_keys_the_sidecar_serves_metrics_only_and_the_runtime_keeps_its_port() -> None:
    obj = for_runtime("vllm", auth={"enabled": False})
    made = children(obj, ON)
    pod = made["Deployment"]["spec"]["template"]["spec"]
    server, sidecar = pod["containers"]
    assert [p["name"] for p in server["ports"]] == ["http"]  # the Service targets it directly
    assert [p["name"] for p in sidecar["ports"]] == ["metrics"]
    assert all(v["name"] != "api-keys" for v in pod["volumes"])
    assert made["NetworkPolicy"]["spec"]["ingress"][0]["ports"] == [
        {"port": 8080, "protocol": "TCP"}
    ]
    assert "listen 9080" not in made["ConfigMap"]["data"]["nginx.conf"]


def test_metrics_off_changes_nothing_and_generic_servers_export_none() -> None:
    pod = children(for_runtime("vllm"), ServingSettings())["Deployment"]["spec"]["template"]
    sidecar = pod["spec"]["containers"][1]
    assert all(p["name"] != "metrics" for p in sidecar["ports"])
    allowed = ServingSettings(
        **{**vars(ON), "allowed_images": SETTINGS.allowed_images, "allow_custom_commands": True}
    )
    generic = resolved(for_runtime("generic"), settings=allowed)
    assert not generic.metrics and generic.plan.metrics_port is None
