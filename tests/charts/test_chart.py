"""The Helm chart, linted and rendered by the real Helm library (helm-python-sdk).

Real: Helm v4's lint and template engine, the chart's values.schema.json, the
official kubernetes client's models (every rendered field must be a known field of
the object's type). Faked: no cluster is contacted (offline render).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kubernetes.client
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "longrun"
NON_DEFAULT = {
    "replicaCount": 2,
    "controller": {
        "pollingInterval": "1m30s",
        "progressInterval": "45s",
        "maxReconcileRate": 8,
        "watchNamespaces": ["team-a", "team-b"],
        "logFormat": "text",
    },
    "runner": {"allowedImages": ["ghcr.io/acme/*"], "allowedServiceAccounts": ["gpu-runner"]},
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
    "podAnnotations": {"prometheus.io/scrape": "true"},
}


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def _render(chart: Any, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = chart.render(values or {}, name="lr", namespace="longrun-system")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def _model_class(obj: dict[str, Any]) -> type:
    version = obj["apiVersion"].split("/")[-1].capitalize()
    return getattr(kubernetes.client, f"{version}{obj['kind']}")  # type: ignore[no-any-return]


def _unknown_fields(value: Any, type_name: str, path: str) -> list[str]:
    """Fields the kubernetes client's model for `type_name` does not know, recursively."""
    if type_name.startswith("list["):
        inner = type_name[5:-1]
        return [e for i, v in enumerate(value) for e in _unknown_fields(v, inner, f"{path}[{i}]")]
    if type_name.startswith("dict("):
        inner = type_name[type_name.index(",") + 1 : -1].strip()
        return [e for k, v in value.items() for e in _unknown_fields(v, inner, f"{path}.{k}")]
    model = getattr(kubernetes.client, type_name, None)
    if model is None:
        return []  # a primitive (str, int, bool, object)
    if not isinstance(value, dict):
        return [f"{path}: expected an object of type {type_name}"]
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    errors = [f"{path}.{k}: unknown field of {type_name}" for k in value if k not in by_json]
    for key, sub in value.items():
        if key in by_json:
            errors += _unknown_fields(sub, model.openapi_types[by_json[key]], f"{path}.{key}")
    return errors


def _assert_valid(obj: dict[str, Any]) -> None:
    model = _model_class(obj)
    errors = _unknown_fields(obj, model.__name__, obj["kind"])
    assert errors == [], errors
    # Deserialising checks required fields and enum-free types the way the client would.
    api = kubernetes.client.ApiClient()
    api._ApiClient__deserialize(obj, model.__name__)  # type: ignore[attr-defined]


def test_lint_passes_in_strict_mode() -> None:
    report = helm_python.lint(str(CHART), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_lint_passes_with_non_default_values() -> None:
    report = helm_python.lint(str(CHART), NON_DEFAULT, strict=True)
    assert report["errors"] == []


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "non-default"])
def test_rendered_objects_are_valid_kubernetes_objects(chart: Any, values: Any) -> None:
    docs = _render(chart, values)
    assert {d["kind"] for d in docs} >= {"Deployment", "ServiceAccount", "Service"}
    for doc in docs:
        _assert_valid(doc)


def test_checker_rejects_a_misspelled_field() -> None:
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": []}}
    with pytest.raises(AssertionError, match=r"spec.prots: unknown field"):
        _assert_valid(bad)


def _rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "non-default"])
def test_rbac_is_least_privilege(chart: Any, values: Any) -> None:
    rules = _rules(_render(chart, values))
    assert rules
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if "secrets" in rule["resources"]:  # API-key Secrets: written, never read
            assert rule["resources"] == ["secrets"] and set(rule["verbs"]) == {"create", "patch"}
        if "pods" in rule["resources"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}


# ClusterRoles for people, aggregated into the built-in view/edit/admin (not the controller's).
PEOPLE_ROLES = ("longrun-view", "longrun-edit")
# Exactly what controller/kube/ sends; a new request needs a new grant, on purpose.
CONTROLLER_GRANTS = {
    ("longrun.dev", "inferenceruns"): {"get", "list", "watch", "delete"},
    ("longrun.dev", "inferenceconfigs"): {"get", "list", "watch"},
    ("longrun.dev", "inferenceruns/status"): {"patch"},
    ("longrun.dev", "inferenceconfigs/status"): {"patch"},
    # OwnerReferencesPermissionEnforcement: blockOwnerDeletion on a run's children needs this.
    ("longrun.dev", "inferenceruns/finalizers"): {"update"},
    # patch: spec.suspend only (suspend, resume, cancel a one-shot run).
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("batch", "cronjobs"): {"get", "list", "watch", "create", "patch"},
    # delete: a ModelDeployment's auth-proxy ConfigMap once keys are off.
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    # Live progress: the tail of a running runner's log (its pod holds no API token).
    ("", "pods/log"): {"get"},
    ("", "events"): {"create"},
    # Serving (controller/kube/serving.py): watched kinds, their status, their children.
    ("longrun.dev", "modeldeployments"): {"list", "watch"},
    # create (and get after AlreadyExists): a catalog entry's Model (lazy registration).
    ("longrun.dev", "models"): {"get", "list", "watch", "create"},
    ("longrun.dev", "modeldeployments/status"): {"patch"},
    ("longrun.dev", "models/status"): {"patch"},
    ("longrun.dev", "modeldeployments/finalizers"): {"update"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create", "patch", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "patch", "delete"},
    ("networking.k8s.io", "ingresses"): {"get", "list", "watch", "create", "patch", "delete"},
    ("autoscaling", "horizontalpodautoscalers"): {"get", "list", "watch", "create", "patch"}
    | {"delete"},
    ("cert-manager.io", "certificates"): {"get", "list", "watch", "create", "patch", "delete"},
    # The API-key Secrets are written, never read: no get, list or watch on Secrets.
    ("", "secrets"): {"create", "patch"},
    # External hosts (controller/kube/fleets.py): watched kinds, their status, the slices.
    ("longrun.dev", "inferencehosts"): {"list", "watch"},
    ("longrun.dev", "inferencemodels"): {"list", "watch"},
    ("longrun.dev", "inferencehosts/status"): {"patch"},
    ("longrun.dev", "inferencemodels/status"): {"patch"},
    ("longrun.dev", "inferencemodels/finalizers"): {"update"},
    ("discovery.k8s.io", "endpointslices"): {"get", "list", "watch", "create", "patch", "delete"},
    # Kueue's Workloads of queued runs: watched, and patched for a run's suspend and cancel.
    ("kueue.x-k8s.io", "workloads"): {"list", "watch", "patch"},
}


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "non-default"])
def test_controller_role_grants_exactly_the_requests_it_sends(chart: Any, values: Any) -> None:
    docs = _render(chart, values)
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    for role in roles:
        name = role["metadata"]["name"]
        # The catalog's Roles grant one ConfigMap (tests/charts/test_catalog_chart.py).
        if name.endswith(("-leader-election", "-catalog-reader")) or name in PEOPLE_ROLES:
            continue
        grants: dict[tuple[str, str], set[str]] = {}
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.setdefault((group, resource), set()).update(rule["verbs"])
        assert grants == CONTROLLER_GRANTS


@pytest.mark.parametrize(
    ("values", "account"),
    [(None, ""), (NON_DEFAULT, "longrun-runner")],
    ids=["all-namespaces", "watched-namespaces"],
)
def test_runner_service_account_is_named_only_where_it_exists(
    chart: Any, values: Any, account: str
) -> None:
    # Pods naming a ServiceAccount their namespace lacks are refused by the API server.
    deployment = next(d for d in _render(chart, values) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert env["RUNNER_SERVICE_ACCOUNT"] == account


def test_watch_namespaces_gives_namespaced_roles(chart: Any) -> None:
    docs = _render(chart, NON_DEFAULT)
    controller = [d for d in docs if d["metadata"]["name"] not in PEOPLE_ROLES]
    kinds = [d["kind"] for d in controller]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    roles = {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"}
    assert roles == {"team-a", "team-b", "longrun-system"}  # + leader election


def test_all_namespaces_gives_cluster_role(chart: Any) -> None:
    kinds = [d["kind"] for d in _render(chart)]
    assert "ClusterRole" in kinds and "ClusterRoleBinding" in kinds


def test_runner_service_account_has_no_token_in_every_run_namespace(chart: Any) -> None:
    docs = _render(chart, NON_DEFAULT)
    runner = [
        d for d in docs if d["kind"] == "ServiceAccount" and "runner" in d["metadata"]["name"]
    ]
    assert {d["metadata"]["namespace"] for d in runner} == {"longrun-system", "team-a", "team-b"}
    assert all(d["automountServiceAccountToken"] is False for d in runner)


def test_controller_pod_is_restricted(chart: Any) -> None:
    deployment = next(d for d in _render(chart) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["limits"]["memory"]


def test_settings_reach_the_controller_environment(chart: Any) -> None:
    deployment = next(d for d in _render(chart, NON_DEFAULT) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert env["POLLING_INTERVAL"] == "1m30s"
    assert env["PROGRESS_INTERVAL"] == "45s"
    assert env["MAX_RECONCILE_RATE"] == "8"
    assert env["WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["ALLOWED_IMAGES"] == "ghcr.io/acme/*"
    assert env["DEFAULT_RUNNER_IMAGE"] == "ghcr.io/longrun-dev/longrun-runner:0.1.0"


def test_progress_interval_defaults_to_15s(chart: Any) -> None:
    deployment = next(d for d in _render(chart, None) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert env["PROGRESS_INTERVAL"] == "15s"


def test_default_allow_lists_admit_only_the_shipped_runner_image_and_no_pod_knobs(
    chart: Any,
) -> None:
    deployment = next(d for d in _render(chart, None) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    runner = "ghcr.io/longrun-dev/longrun-runner"
    assert env["ALLOWED_IMAGES"] == f"{runner}:*,{runner}@*"
    assert env["ALLOWED_POD_LABELS"] == env["ALLOWED_POD_ANNOTATIONS"] == ""
    assert env["ALLOWED_TOLERATIONS"] == ""


def test_kueue_settings_reach_the_controller_environment(chart: Any) -> None:
    values = {
        "kueue": {
            "queueName": "team-a",
            "manageJobsWithoutQueueName": True,
            "allowedWorkloadPriorityClasses": ["batch-*", "urgent"],
        },
        "runner": {"allowedPriorityClasses": ["batch-high"]},
    }
    deployment = next(d for d in _render(chart, values) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert env["DEFAULT_QUEUE_NAME"] == "team-a"
    assert env["KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME"] == "true"
    assert env["ALLOWED_WORKLOAD_PRIORITY_CLASSES"] == "batch-*,urgent"
    assert env["ALLOWED_PRIORITY_CLASSES"] == "batch-high"


def test_kueue_defaults_queue_nothing_and_allow_no_priority(chart: Any) -> None:
    deployment = next(d for d in _render(chart, None) if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert env["DEFAULT_QUEUE_NAME"] == ""
    assert env["KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME"] == "false"
    assert env["ALLOWED_PRIORITY_CLASSES"] == env["ALLOWED_WORKLOAD_PRIORITY_CLASSES"] == ""


@pytest.mark.parametrize(
    "values",
    [
        {"controller": {"pollingInterval": "soon"}},
        {"controller": {"progressInterval": "often"}},
        {"controller": {"maxReconcileRate": 0}},
        {"controller": {"logFormat": "xml"}},
        {"contoller": {}},
        {"replicaCount": 2, "leaderElection": {"enabled": False}},
        {"metrics": {"bindAddress": "my-host"}},
        {"health": {"bindAddress": "127.0.0.1"}},
        {"metrics": {"bindAddress": "127.0.0.1"}},
        {"rbac": {"aggregateToDefaultRoles": "yes"}},
        {"kueue": {"queueName": "Team A"}},
        {"kueue": {"manageJobsWithoutQueueName": "yes"}},
    ],
    ids=[
        "bad-duration",
        "bad-progress-interval",
        "zero-workers",
        "bad-log-format",
        "misspelled-key",
        "replicas-no-leader",
        "bind-to-a-host-name",
        "probes-on-loopback",
        "metrics-service-to-loopback",
        "aggregation-not-a-bool",
        "queue-not-a-name",
        "kueue-manage-not-a-bool",
    ],
)
def test_values_schema_rejects_bad_values(chart: Any, values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        chart.render(values, name="lr", namespace="longrun-system")


@pytest.mark.parametrize("duration", ["30s", "1m", "1h30m", 300, "300"])
def test_values_schema_accepts_durations(chart: Any, duration: Any) -> None:
    chart.render({"controller": {"pollingInterval": duration}}, name="lr", namespace="x")


def test_chart_ships_the_generated_crds(chart: Any) -> None:
    names = sorted(Path(c["filename"]).name for c in chart.crds)
    assert names == [
        "inferenceconfigs.longrun.dev.yaml",
        "inferencehosts.longrun.dev.yaml",
        "inferencemodels.longrun.dev.yaml",
        "inferenceruns.longrun.dev.yaml",
        "modeldeployments.longrun.dev.yaml",
        "models.longrun.dev.yaml",
    ]


def _env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_endpoints_listen_on_the_pod_network_by_default(chart: Any) -> None:
    # The kubelet probes the pod IP and the metrics Service forwards to it: loopback would fail.
    env = _env(_render(chart))
    assert env["HEALTH_BIND_ADDRESS"] == env["METRICS_BIND_ADDRESS"] == "0.0.0.0"


def test_bind_addresses_reach_the_controller_environment(chart: Any) -> None:
    values = {
        "health": {"bindAddress": "::"},
        "metrics": {"bindAddress": "127.0.0.1", "service": {"enabled": False}},
    }
    env = _env(_render(chart, values))
    assert (env["HEALTH_BIND_ADDRESS"], env["METRICS_BIND_ADDRESS"]) == ("::", "127.0.0.1")


VIEW = {"get", "list", "watch"}
EDIT = VIEW | {"create", "update", "patch", "delete", "deletecollection"}
RESOURCES = (
    "inferenceconfigs", "inferenceruns", "models", "modeldeployments", "inferencehosts",
    "inferencemodels",
)  # fmt: skip


def _people_roles(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] in PEOPLE_ROLES
    }


def _grants(role: dict[str, Any]) -> dict[str, set[str]]:
    grants: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["longrun.dev"]
        for resource in rule["resources"]:
            grants.setdefault(resource, set()).update(rule["verbs"])
    return grants


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "non-default"])
def test_people_roles_aggregate_into_the_built_in_view_and_edit(chart: Any, values: Any) -> None:
    roles = _people_roles(_render(chart, values))
    assert sorted(roles) == sorted(PEOPLE_ROLES)

    def aggregates_to(name: str) -> set[str]:
        labels = roles[name]["metadata"]["labels"]
        prefix = "rbac.authorization.k8s.io/aggregate-to-"
        return {
            k.removeprefix(prefix)
            for k, v in labels.items()
            if k.startswith(prefix) and v == "true"
        }

    assert aggregates_to("longrun-view") >= {"view", "edit"}
    assert aggregates_to("longrun-edit") >= {"edit"} and "view" not in aggregates_to("longrun-edit")
    assert "aggregationRule" not in roles["longrun-view"]  # they feed roles, they aggregate none


def test_people_can_view_configs_runs_models_and_deployments_and_their_status(chart: Any) -> None:
    grants = _grants(_people_roles(_render(chart))["longrun-view"])
    assert grants == {r: VIEW for r in (*RESOURCES, *(f"{r}/status" for r in RESOURCES))}


def test_editors_manage_configs_runs_models_and_deployments_but_only_read_status(
    chart: Any,
) -> None:
    grants = _grants(_people_roles(_render(chart))["longrun-edit"])
    assert {r: grants[r] for r in RESOURCES} == {r: EDIT for r in RESOURCES}
    for resource in RESOURCES:
        assert grants[f"{resource}/status"] == VIEW  # the controller alone writes status
    assert set(grants) == {*RESOURCES, *(f"{r}/status" for r in RESOURCES)}


def test_people_roles_can_be_turned_off(chart: Any) -> None:
    docs = _render(chart, {"rbac": {"aggregateToDefaultRoles": False}})
    assert _people_roles(docs) == {}


def test_runner_deny_list_defaults_to_link_local_and_metadata_addresses(chart: Any) -> None:
    from controller.core.settings import settings_from_env

    denied = _env(_render(chart))["DENIED_CIDRS"]
    assert denied == "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"
    assert settings_from_env({"DENIED_CIDRS": denied}).denied_cidrs == tuple(denied.split(","))


def test_model_downloads_follow_the_deny_list_and_the_fetch_values(chart: Any) -> None:
    from controller.core.serving.settings import serving_settings_from_env

    env = _env(_render(chart))
    settings = serving_settings_from_env(env)
    assert settings.denied_cidrs == tuple(env["DENIED_CIDRS"].split(","))
    assert settings.fetch_redirect_hosts == ("*.hf.co", "*.huggingface.co")
    assert not settings.fetch_instance_metadata
    values = {"serving": {"fetch": {"redirectHosts": [], "allowInstanceMetadata": True}}}
    opened = serving_settings_from_env(_env(_render(chart, values)))
    assert opened.fetch_redirect_hosts == () and opened.fetch_instance_metadata


def test_runner_deny_list_can_be_turned_off(chart: Any) -> None:
    assert _env(_render(chart, {"runner": {"deniedCIDRs": []}}))["DENIED_CIDRS"] == ""


@pytest.mark.parametrize(
    "values",
    [
        {"runner": {"deniedCIDRs": ["metadata.internal"]}},
        {"runner": {"networkPolicy": {"cidrs": ["10.0.0.0"]}}},
        {"runner": {"networkPolicy": {"namespaces": ["Not_A_Namespace"]}}},
    ],
    ids=["deny-list-name", "cidr-without-prefix", "bad-namespace"],
)
def test_values_schema_rejects_bad_network_values(chart: Any, values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmError):
        chart.render(values, name="lr", namespace="longrun-system")


def _network_policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_runner_network_policy_is_off_by_default(chart: Any) -> None:
    assert _network_policies(_render(chart)) == []
    assert _network_policies(_render(chart, NON_DEFAULT)) == []


def test_runner_network_policy_limits_runner_egress_in_each_watched_namespace(chart: Any) -> None:
    network = {
        "enabled": True,
        "namespaces": ["models"],
        "cidrs": ["10.20.0.0/16", {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}],
    }
    values = {
        "controller": {"watchNamespaces": ["team-a", "team-b"]},
        "runner": {"networkPolicy": network},
    }
    policies = _network_policies(_render(chart, values))
    assert [p["metadata"]["namespace"] for p in policies] == ["team-a", "team-b"]
    for policy in policies:
        _assert_valid(policy)
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Egress"]  # ingress is left alone
        assert spec["podSelector"] == {  # runner pods only: ModelDeployment pods have no run label
            "matchLabels": {"app.kubernetes.io/managed-by": "longrun"},
            "matchExpressions": [{"key": "longrun.dev/run", "operator": "Exists"}],
        }
        dns, same, namespaces, cidrs = spec["egress"]
        assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
        assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
        assert same == {"to": [{"podSelector": {}}]}
        assert namespaces["to"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}}}
        ]
        assert cidrs["to"] == [
            {"ipBlock": {"cidr": "10.20.0.0/16"}},
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}},
        ]


def test_runner_network_policy_with_nothing_allowed_denies_all_egress(chart: Any) -> None:
    network = {"enabled": True, "dns": {"enabled": False}, "sameNamespace": False}
    values = {"controller": {"watchNamespaces": ["team-a"]}, "runner": {"networkPolicy": network}}
    (policy,) = _network_policies(_render(chart, values))
    assert policy["spec"]["egress"] in (None, [])


def test_runner_network_policy_needs_watched_namespaces(chart: Any) -> None:
    with pytest.raises(helm_python.HelmError, match=r"runner\.networkPolicy\.enabled needs"):
        chart.render({"runner": {"networkPolicy": {"enabled": True}}}, name="lr", namespace="x")


def test_serving_images_default_to_the_runtimes_public_images(chart: Any) -> None:
    # The chart's serving.images.* and the controller's own defaults are the same images.
    from controller.core.serving.runtimes import ServingImages
    from controller.core.serving.settings import serving_settings_from_env

    env = _env(_render(chart))
    settings = serving_settings_from_env({k: str(v) for k, v in env.items() if v is not None})
    assert settings.images == ServingImages()
    assert env["SERVING_IMAGE_LLAMACPP"] == "ghcr.io/ggml-org/llama.cpp:server"
    mirrored = _env(_render(chart, {"serving": {"images": {"authProxy": "mirror/nginx:1"}}}))
    assert mirrored["SERVING_IMAGE_AUTH_PROXY"] == "mirror/nginx:1"


def test_the_token_check_image_is_the_runner_image_unless_set(chart: Any) -> None:
    from controller.core.serving.settings import serving_settings_from_env

    def settings(values: dict[str, Any]) -> Any:
        env = _env(_render(chart, values))
        return serving_settings_from_env({k: v for k, v in env.items() if isinstance(v, str)})

    default = settings({})
    assert default.token_check_image == default.fetch_image  # the runner image
    own = settings({"serving": {"tokenCheckImage": "mirror/longrun:1"}})
    assert own.token_check_image == "mirror/longrun:1"


def test_fleet_settings_reach_the_controller_environment(chart: Any) -> None:
    from controller.core.fleets.settings import fleet_settings_from_env

    fleets = {"healthInterval": "5s", "failureThreshold": 2, "requestTimeout": "3s"}
    values = {"fleets": {**fleets, "loadTimeout": "30m", "allowedCIDRs": ["10.20.0.0/16"]}}
    env = _env(_render(chart, values))
    fleet = fleet_settings_from_env({k: v for k, v in env.items() if isinstance(v, str)})
    assert (fleet.health_interval, fleet.failure_threshold, fleet.request_timeout) == (5, 2, 3)
    assert (fleet.load_timeout, fleet.allowed_cidrs) == (1800, ("10.20.0.0/16",))
    assert fleet.host_credentials is False
    assert fleet.denied_cidrs == tuple(env["DENIED_CIDRS"].split(","))  # the runners' list


def test_host_credentials_grant_get_on_secrets_and_nothing_more(chart: Any) -> None:
    docs = _render(chart, {"fleets": {"hostCredentials": True}})
    (role,) = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "lr-longrun"
    ]
    verbs = {v for r in role["rules"] if "secrets" in r["resources"] for v in r["verbs"]}
    assert verbs == {"create", "patch", "get"}  # no list, no watch
    assert _env(docs)["FLEET_HOST_CREDENTIALS"] == "true"
