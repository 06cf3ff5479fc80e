"""PATCH formats: JSON merge, JSON patch, strategic merge (built-ins), and the refusals.

Real: HTTP, Content-Type negotiation, the official Python client.
Faked: strategic-merge metadata is a table of merge keys, not the Go types.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

POD = {
    "metadata": {"name": "p"},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "a",
                "image": "img:1",
                "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                "volumeMounts": [{"name": "v", "mountPath": "/data"}],
            },
            {"name": "b", "image": "img:1"},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    },
}


def raw_patch(k8s, path: str, body, content_type: str):
    """PATCH with an explicit Content-Type, straight over HTTP."""
    api = k8s.emu.api_client()
    resp = api.call_api(
        "PATCH",
        k8s.emu.url + path,
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
    )
    resp.read()
    return api.response_deserialize(resp, {"200": "object"}).data


def test_json_merge_patch_merges_maps_and_deletes_nulls(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    )
    path = f"/api/v1/namespaces/{k8s.ns}/configmaps/c"
    out = raw_patch(k8s, path, {"data": {"a": None, "c": "3"}}, "application/merge-patch+json")
    assert out["data"] == {"b": "2", "c": "3"}


def test_json_patch_applies_operations_and_tests(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    path = f"/api/v1/namespaces/{k8s.ns}/configmaps/c"
    ops = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "remove", "path": "/data/a"},
    ]
    assert raw_patch(k8s, path, ops, "application/json-patch+json")["data"] == {"b": "2"}
    with pytest.raises(ApiException) as err:
        raw_patch(
            k8s,
            path,
            [{"op": "test", "path": "/data/b", "value": "x"}],
            "application/json-patch+json",
        )
    assert err.value.status == 422


def cronjob(k8s) -> str:
    """A CronJob whose pod template (mutable, unlike a Pod's spec) holds POD's spec."""
    body = {
        "metadata": {"name": "cj"},
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": True,
            "jobTemplate": {"spec": {"template": {"spec": POD["spec"]}}},
        },
    }
    k8s.batch.create_namespaced_cron_job(k8s.ns, body)
    return f"/apis/batch/v1/namespaces/{k8s.ns}/cronjobs/cj"


def pod_spec_patch(spec: dict) -> dict:
    return {"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}


def test_strategic_merge_patch_merges_containers_env_and_mounts_by_key(k8s):
    path = cronjob(k8s)
    patch = pod_spec_patch(
        {
            "containers": [
                {
                    "name": "a",
                    "image": "img:2",
                    "env": [{"name": "Y", "value": "9"}],
                    "volumeMounts": [{"name": "v", "mountPath": "/data", "readOnly": True}],
                }
            ]
        }
    )
    out = raw_patch(k8s, path, patch, "application/strategic-merge-patch+json")
    containers = {
        c["name"]: c for c in out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    }
    assert set(containers) == {"a", "b"}
    assert containers["a"]["image"] == "img:2"
    assert containers["a"]["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "9"}]
    assert containers["a"]["volumeMounts"] == [
        {"name": "v", "mountPath": "/data", "readOnly": True}
    ]


def test_strategic_merge_patch_delete_directive_removes_list_item(k8s):
    path = cronjob(k8s)
    patch = pod_spec_patch(
        {
            "containers": [{"name": "b", "$patch": "delete"}],
            "volumes": [{"name": "w", "emptyDir": {}}],
        }
    )
    out = raw_patch(k8s, path, patch, "application/strategic-merge-patch+json")
    spec = out["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["a"]
    assert [v["name"] for v in spec["volumes"]] == ["v", "w"]


def test_pod_spec_is_immutable_except_images(k8s):
    k8s.core.create_namespaced_pod(k8s.ns, POD)
    with pytest.raises(ApiException) as err:
        k8s.core.patch_namespaced_pod(
            "p", k8s.ns, {"spec": {"containers": [{"name": "a", "workingDir": "/x"}]}}
        )
    assert err.value.status == 422 and "pod updates may not change fields" in err.value.body


def test_python_client_default_patch_is_strategic_for_builtins(k8s):
    k8s.core.create_namespaced_pod(k8s.ns, POD)
    out = k8s.core.patch_namespaced_pod(
        "p", k8s.ns, {"spec": {"containers": [{"name": "b", "image": "img:3"}]}}
    )
    assert [c.image for c in out.spec.containers] == ["img:1", "img:3"]


def test_strategic_merge_patch_on_custom_resource_is_unsupported_media_type(widgets):
    widgets.widget("w", {"size": 1})
    path = f"/apis/example.com/v1/namespaces/{widgets.ns}/widgets/w"
    with pytest.raises(ApiException) as err:
        raw_patch(widgets, path, {"spec": {"size": 2}}, "application/strategic-merge-patch+json")
    assert err.value.status == 415


def test_server_side_apply_is_unsupported_media_type(widgets):
    widgets.widget("w", {"size": 1})
    path = f"/apis/example.com/v1/namespaces/{widgets.ns}/widgets/w"
    with pytest.raises(ApiException) as err:
        raw_patch(widgets, path, {"spec": {"size": 2}}, "application/apply-patch+yaml")
    assert err.value.status == 415


def test_merge_patch_with_stale_resource_version_conflicts(widgets):
    w = widgets.widget("w", {"size": 1})
    widgets.custom.patch_namespaced_custom_object(
        "example.com", "v1", widgets.ns, "widgets", "w", {"spec": {"size": 2}}
    )
    stale = {"metadata": {"resourceVersion": w["metadata"]["resourceVersion"]}, "spec": {"size": 3}}
    with pytest.raises(ApiException) as err:
        widgets.custom.patch_namespaced_custom_object(
            "example.com", "v1", widgets.ns, "widgets", "w", stale
        )
    assert err.value.status == 409


def test_patch_of_missing_object_is_not_found(k8s):
    with pytest.raises(ApiException) as err:
        k8s.core.patch_namespaced_config_map("nope", k8s.ns, {"data": {"a": "b"}})
    assert err.value.status == 404
