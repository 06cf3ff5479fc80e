"""One scenario suite, two real clients (the official Python client and the kubectl binary),
on the backend LONGRUN_KUBE_BACKEND names (the emulator by default, or a real control plane).

Each scenario is written once against a small Driver interface and runs through
both drivers. Real: both clients, the backend, HTTP, discovery, OpenAPI negotiation,
watch streams, the node agent running pods. Faked: what pods do (scripted containers,
e2e/nodeagent/scripted.py). kubectl scenarios skip without /usr/bin/kubectl, and fail
instead when CI is set.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from e2e.backends import KubeHandle, selected_backend
from e2e.fixtures import EmulatorHandle, eventually, require_kubectl, scripted_pods_for
from tests.emulator.conftest import K8s, make_k8s

Obj = dict[str, Any]
G, V = "example.com", "v1"


class ClientError(Exception):
    """A request the server refused; carries the HTTP status when known."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


# On a real control plane nothing says when kubectl's watch is open: it gets this long.
REAL_WATCH_OPENS = 2.0


@pytest.fixture
def k8s(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[K8s]:
    """Clients, a fresh namespace and scripted pods on the selected backend (a fresh emulator
    on the default one, the session's control plane on the real one)."""
    if selected_backend() == "real":
        handle: KubeHandle = request.getfixturevalue("kube_real_session")
        handle.require_controllers()
    else:
        handle = request.getfixturevalue("kube_emulator")
    bundle = make_k8s(handle)
    scripted, stop = scripted_pods_for(handle, bundle.ns, tmp_path / "node")
    bundle.scripted = scripted
    try:
        yield bundle
    finally:
        stop()


class Driver(Protocol):
    def apply(self, obj: Obj) -> None: ...
    def get(self, plural: str, name: str) -> Obj: ...
    def names(self, plural: str, selector: str | None = None) -> list[str]: ...
    def patch(self, plural: str, name: str, patch: Any, kind: str) -> None: ...
    def delete(self, plural: str, name: str, cascade: str) -> None: ...
    def watch(
        self, plural: str, action: Callable[[], None], expect: int
    ) -> list[tuple[str, str]]: ...


class PythonDriver:
    """Official client: typed APIs for built-ins, CustomObjectsApi for CRs."""

    def __init__(self, k8s: Any) -> None:
        self.k = k8s

    def _typed(self, plural: str) -> tuple[Any, str]:
        return {
            "configmaps": (self.k.core, "config_map"),
            "jobs": (self.k.batch, "job"),
            "pods": (self.k.core, "pod"),
            "cronjobs": (self.k.batch, "cron_job"),
        }[plural]

    def apply(self, obj: Obj) -> None:
        try:
            if obj["kind"] == "CustomResourceDefinition":
                self._create_crd(obj)
            elif obj["kind"] == "Widget":
                self.k.custom.create_namespaced_custom_object(G, V, self.k.ns, "widgets", obj)
            else:
                api, kind = self._typed(obj["kind"].lower() + "s")
                getattr(api, f"create_namespaced_{kind}")(self.k.ns, obj)
        except ApiException as exc:
            raise ClientError(exc.status, exc.body) from None

    def _create_crd(self, obj: Obj) -> None:
        """Create, or keep the one there (as `kubectl apply` would; a real control plane is
        shared by the session)."""
        try:
            self.k.ext.create_custom_resource_definition(obj)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def get(self, plural: str, name: str) -> Obj:
        if plural == "widgets":
            return self.k.get_widget(name)
        api, kind = self._typed(plural)
        obj = getattr(api, f"read_namespaced_{kind}")(name, self.k.ns)
        return api.api_client.sanitize_for_serialization(obj)

    def names(self, plural: str, selector: str | None = None) -> list[str]:
        if plural == "widgets":
            items = self.k.custom.list_namespaced_custom_object(
                G, V, self.k.ns, plural, label_selector=selector
            )
            return [i["metadata"]["name"] for i in items["items"]]
        api, kind = self._typed(plural)
        return [
            i.metadata.name
            for i in getattr(api, f"list_namespaced_{kind}")(
                self.k.ns, label_selector=selector
            ).items
        ]

    def patch(self, plural: str, name: str, patch: Any, kind: str) -> None:
        ctype = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        group = (
            "/api/v1"
            if plural in ("configmaps", "pods")
            else ("/apis/batch/v1" if plural in ("jobs", "cronjobs") else f"/apis/{G}/{V}")
        )
        api = self.k.core.api_client
        resp = api.call_api(
            "PATCH",
            f"{self.k.emu.url}{group}/namespaces/{self.k.ns}/{plural}/{name}",
            header_params={"Content-Type": ctype},
            body=patch,
        )
        resp.read()
        if resp.status >= 400:
            raise ClientError(resp.status, resp.data.decode())

    def delete(self, plural: str, name: str, cascade: str) -> None:
        policy = cascade.capitalize()
        if plural == "widgets":
            self.k.custom.delete_namespaced_custom_object(
                G, V, self.k.ns, plural, name, propagation_policy=policy
            )
        else:
            api, kind = self._typed(plural)
            getattr(api, f"delete_namespaced_{kind}")(
                name, self.k.ns, body={"propagationPolicy": policy}
            )

    def watch(self, plural: str, action: Callable[[], None], expect: int) -> list[tuple[str, str]]:
        rv = self.k.custom.list_namespaced_custom_object(G, V, self.k.ns, plural)["metadata"][
            "resourceVersion"
        ]
        action()
        w = watch.Watch()
        out = []
        for e in w.stream(
            self.k.custom.list_namespaced_custom_object,
            G,
            V,
            self.k.ns,
            plural,
            resource_version=rv,
            timeout_seconds=3,
        ):
            out.append((e["type"], e["object"]["metadata"]["name"]))
            if len(out) == expect:
                w.stop()
        return out


class KubectlDriver:
    """The real kubectl binary, with no flags beyond --kubeconfig (and -n)."""

    def __init__(self, k8s: Any) -> None:
        self.k = k8s
        require_kubectl()  # skip (fail in CI) before anything runs without it

    def run(self, *args: str, input: str | None = None) -> str:
        out = self.k.emu.kubectl(*args, input=input)
        if out.returncode != 0:
            status = 404 if "NotFound" in out.stderr else 422 if "is invalid" in out.stderr else 1
            raise ClientError(status, out.stderr)
        return out.stdout

    def apply(self, obj: Obj) -> None:
        self.run("apply", "-n", self.k.ns, "-f", "-", input=json.dumps(obj))

    def get(self, plural: str, name: str) -> Obj:
        return json.loads(self.run("get", plural, name, "-n", self.k.ns, "-o", "json"))

    def names(self, plural: str, selector: str | None = None) -> list[str]:
        args = ["get", plural, "-n", self.k.ns, "-o", "json"] + (
            ["-l", selector] if selector else []
        )
        return [i["metadata"]["name"] for i in json.loads(self.run(*args))["items"]]

    def patch(self, plural: str, name: str, patch: Any, kind: str) -> None:
        self.run("patch", plural, name, "-n", self.k.ns, "--type", kind, "-p", json.dumps(patch))

    def delete(self, plural: str, name: str, cascade: str) -> None:
        self.run("delete", plural, name, "-n", self.k.ns, f"--cascade={cascade}", "--timeout=20s")

    def watch(self, plural: str, action: Callable[[], None], expect: int) -> list[tuple[str, str]]:
        argv, env = self.k.emu.kubectl_command(
            "get",
            plural,
            "-n",
            self.k.ns,
            "-w",
            "--output-watch-events",
            "-o",
            'jsonpath={.type} {.object.metadata.name}{"\\n"}',
        )
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []])
        reader.start()
        try:
            self._await_watch(plural)
            action()
            out: list[tuple[str, str]] = []
            deadline = time.monotonic() + 10
            while len(out) < expect and time.monotonic() < deadline:
                try:
                    typ, _, name = lines.get(timeout=0.2).strip().partition(" ")
                    out.append((typ, name))
                except queue.Empty:
                    pass
            return out
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
            reader.join(5)

    def _await_watch(self, plural: str) -> None:
        """Until kubectl has opened its watch: the emulator can tell, a real server cannot."""
        handle = self.k.emu
        if not isinstance(handle, EmulatorHandle):
            time.sleep(REAL_WATCH_OPENS)
            return
        key = f"{plural}.{G}"
        eventually(lambda: any(w.key == key for w in handle.emulator.open_watches()), timeout=5)


@pytest.fixture(params=["python", pytest.param("kubectl", marks=pytest.mark.requires_service)])
def driver(request, k8s) -> Driver:
    return PythonDriver(k8s) if request.param == "python" else KubectlDriver(k8s)


def widget(name: str, size: int = 1, **labels: str) -> Obj:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"size": size},
    }


@pytest.fixture
def with_crd(driver: Driver, widget_crd: Obj, k8s: K8s) -> Driver:
    driver.apply(widget_crd)
    name = widget_crd["metadata"]["name"]
    eventually(  # instant on the emulator; a real server first checks names and schema
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in k8s.ext.read_custom_resource_definition(name).status.conditions or []
        )
    )
    return driver


def test_apply_crd_then_custom_objects_and_get_defaults(with_crd):
    with_crd.apply(widget("a", app="x"))
    got = with_crd.get("widgets", "a")
    assert got["spec"] == {"size": 1, "color": "red", "limits": {"cpu": "1"}}
    assert got["metadata"]["generation"] == 1


def test_list_with_label_selector(with_crd):
    for name, app in (("a", "x"), ("b", "y"), ("c", "x")):
        with_crd.apply(widget(name, app=app))
    assert with_crd.names("widgets", "app=x") == ["a", "c"]
    assert with_crd.names("widgets", "app notin (x)") == ["b"]


def test_merge_and_json_patches_on_custom_objects(with_crd):
    with_crd.apply(widget("a"))
    with_crd.patch("widgets", "a", {"spec": {"size": 4}}, "merge")
    with_crd.patch(
        "widgets", "a", [{"op": "replace", "path": "/spec/color", "value": "blue"}], "json"
    )
    got = with_crd.get("widgets", "a")
    assert (got["spec"]["size"], got["spec"]["color"], got["metadata"]["generation"]) == (
        4,
        "blue",
        3,
    )


def test_invalid_patch_is_rejected_with_422(with_crd):
    with_crd.apply(widget("a"))
    with pytest.raises(ClientError) as err:
        with_crd.patch("widgets", "a", {"spec": {"size": 99}}, "merge")
    assert err.value.status == 422


def test_strategic_patch_on_builtin(driver):
    driver.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    driver.patch("configmaps", "c", {"data": {"b": "2"}}, "strategic")
    assert driver.get("configmaps", "c")["data"] == {"a": "1", "b": "2"}


def test_watch_reports_added_modified_deleted(with_crd):
    def act() -> None:
        with_crd.apply(widget("w"))
        with_crd.patch("widgets", "w", {"spec": {"size": 2}}, "merge")
        with_crd.delete("widgets", "w", "background")

    events = with_crd.watch("widgets", act, expect=3)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def job(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }


@pytest.mark.parametrize(
    ("cascade", "pods_left"), [("background", 0), ("foreground", 0), ("orphan", 1)]
)
def test_delete_job_with_cascade(driver, k8s, cascade, pods_left):
    k8s.scripted.script(job="j", hold=True)
    driver.apply(job("j"))
    eventually(lambda: driver.names("pods"))
    driver.delete("jobs", "j", cascade)
    eventually(lambda: driver.names("jobs") == [])
    # A pod's deletion waits for its node agent to stop a real process.
    eventually(lambda: len(driver.names("pods")) == pods_left, timeout=30)
