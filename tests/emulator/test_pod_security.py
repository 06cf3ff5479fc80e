"""The emulator's PodSecurity admission where only the emulator can show it.

Real: the emulator's API and its Job controller, the official client, the emulator clock.
Faked: nothing. The wording of refusals is checked against kube-apiserver in
tests/security/test_pod_security.py (both backends); here: levels, warn labels, version
labels, and a Job that recovers once its namespace allows its pods.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.emulator import podsecurity
from e2e.fixtures import EmulatorHandle, eventually

PLAIN: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
LABEL = "pod-security.kubernetes.io/"


def _namespace(handle: EmulatorHandle, labels: dict[str, str]) -> tuple[str, Any]:
    ns = handle.namespace("psa")
    core: Any = client.CoreV1Api(handle.api_client())
    core.patch_namespace(ns, {"metadata": {"labels": labels}})
    return ns, core


def test_an_unlabelled_namespace_admits_any_pod(kube_emulator: EmulatorHandle) -> None:
    ns, core = _namespace(kube_emulator, {})
    privileged = {"hostNetwork": True, "containers": [
        {"name": "c", "image": "x", "securityContext": {"privileged": True}}]}  # fmt: skip
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": privileged})


def test_baseline_refuses_host_access_but_not_a_missing_security_context(
    kube_emulator: EmulatorHandle,
) -> None:
    ns, core = _namespace(kube_emulator, {LABEL + "enforce": "baseline"})
    core.create_namespaced_pod(ns, {"metadata": {"name": "plain"}, "spec": PLAIN})
    adds = {"capabilities": {"add": ["SYS_ADMIN"]}}
    spec = {"volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "containers": [{"name": "c", "image": "x", "securityContext": adds}]}  # fmt: skip
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, {"metadata": {"name": "host"}, "spec": spec})
    assert json.loads(caught.value.body or "{}")["message"] == (
        'pods "host" is forbidden: violates PodSecurity "baseline:latest": non-default '
        'capabilities (container "c" must not include "SYS_ADMIN" in '
        'securityContext.capabilities.add), hostPath volumes (volume "h")'
    )


def test_a_warn_label_warns_about_an_admitted_pod_and_versions_are_named(
    kube_emulator: EmulatorHandle,
) -> None:
    ns, core = _namespace(kube_emulator, {LABEL + "enforce": "privileged",
                                          LABEL + "warn": "restricted",
                                          LABEL + "warn-version": "v1.30"})  # fmt: skip
    _, status, headers = core.create_namespaced_pod_with_http_info(
        ns, {"metadata": {"name": "p"}, "spec": PLAIN}
    )
    assert status == 201
    assert (
        'would violate PodSecurity \\"restricted:v1.30\\": allowPrivilegeEscalation'
        in (headers["Warning"])
    )


def test_a_refused_job_gets_its_pod_once_the_namespace_allows_it(
    kube_emulator: EmulatorHandle,
) -> None:
    ns, core = _namespace(kube_emulator, {LABEL + "enforce": "restricted"})
    batch: Any = client.BatchV1Api(kube_emulator.api_client())
    template = {"spec": {"restartPolicy": "Never", **PLAIN}}
    batch.create_namespaced_job(ns, {"metadata": {"name": "j"}, "spec": {"template": template}})

    def failed_create() -> bool:
        return any(e.reason == "FailedCreate" for e in core.list_namespaced_event(ns).items)

    eventually(failed_create)
    assert core.list_namespaced_pod(ns).items == []
    core.patch_namespace(ns, {"metadata": {"labels": {LABEL + "enforce": "privileged"}}})
    kube_emulator.clock.advance(11)  # the Job controller tries again after its back-off
    eventually(lambda: core.list_namespaced_pod(ns).items)


def test_checks_report_in_the_real_order_baseline_first() -> None:
    spec = {"hostIPC": True, "containers": [
        {"name": "c", "image": "x", "securityContext": {"allowPrivilegeEscalation": False,
         "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
         "seccompProfile": {"type": "RuntimeDefault"}}}]}  # fmt: skip
    assert podsecurity.violations(spec, "restricted") == ["host namespaces (hostIPC=true)"]
    assert podsecurity.violations(spec, "privileged") == []
