"""A ModelDeployment's HorizontalPodAutoscaler on a model server's own metric, at the API level:
the names vLLM and llama.cpp give their queue metrics (`vllm:num_requests_waiting`,
`llamacpp:requests_deferred`, with a colon) are metric names autoscaling/v2 takes.

Real: both backends, the HPA as the controller's builder renders it (`network.build_hpa`),
created over the wire with its owner reference left out (no ModelDeployment exists here).
Faked: nothing; no metrics adapter runs, so the HPA is only stored (docs/serving.md, "Metrics
and autoscaling on them", has the Prometheus Adapter rule that feeds it).
"""

from __future__ import annotations

import json

import pytest

from controller.core.serving import network
from tests.controller.unit.serving.objects import for_runtime, resolved
from tests.fidelity.conftest import Cluster


@pytest.mark.parametrize(
    ("runtime", "metric"),
    [("vllm", "vllm:num_requests_waiting"), ("llamacpp", "llamacpp:requests_deferred")],
)
def test_an_hpa_on_the_runtimes_queue_metric_is_accepted(
    kube: Cluster, runtime: str, metric: str
) -> None:
    scaling = {"maxReplicas": 4, "podsMetric": {"name": metric, "targetAverageValue": "4"}}
    hpa = network.build_hpa(resolved(for_runtime(runtime, autoscaling=scaling)))
    assert hpa is not None
    hpa["metadata"].pop("ownerReferences")
    hpa["metadata"]["namespace"] = kube.ns
    host = kube.api.configuration.host
    resp = kube.api.rest_client.pool_manager.request(
        "POST",
        f"{host}/apis/autoscaling/v2/namespaces/{kube.ns}/horizontalpodautoscalers",
        body=json.dumps(hpa),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 201, resp.data
    stored = json.loads(resp.data)["spec"]["metrics"][0]["pods"]
    assert stored["metric"]["name"] == metric
    assert stored["target"] == {"type": "AverageValue", "averageValue": "4"}
