"""Emulator test fixtures: e2e.fixtures plus typed clients and a sample CRD.

`k8s` bundles the official client APIs bound to a fresh emulator and a fresh
namespace; `widgets` installs the Widget CRD used across modules (its schema
exercises every structural-schema feature the emulator validates).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.fixtures import *  # noqa: F403
from e2e.fixtures import EmulatorHandle

GROUP, VERSION, PLURAL = "example.com", "v1", "widgets"

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "minLength": 2, "maxLength": 8, "pattern": "^[a-z]+$"},
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": 3,
                },
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "limits": {
                    "type": "object",
                    "default": {},
                    "properties": {"cpu": {"type": "string", "default": "1"}},
                },
                "params": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "observedGeneration": {"type": "integer"},
            },
        },
    },
}

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
            }
        ],
    },
}


@dataclass
class K8s:
    """Official-client APIs for one backend (an emulator unless a test says otherwise) and a
    namespace to work in; `scripted`: its scripted pods, where a test sets them."""

    emu: Any  # EmulatorHandle, or a RealClusterHandle in the backend-switched scenarios
    ns: str
    core: Any
    batch: Any
    custom: Any
    ext: Any
    coord: Any
    scripted: Any = None

    def widget(self, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": name, **meta},
            "spec": spec,
        }
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def get_widget(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)


def make_k8s(handle: Any) -> K8s:
    from kubernetes import client

    api = handle.api_client()
    return K8s(
        emu=handle,
        ns=handle.namespace(),
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
        custom=client.CustomObjectsApi(api),
        ext=client.ApiextensionsV1Api(api),
        coord=client.CoordinationV1Api(api),
    )


@pytest.fixture
def k8s(kube_emulator: EmulatorHandle) -> K8s:
    return make_k8s(kube_emulator)


@pytest.fixture
def k8s_factory(kube_emulator_factory: Any) -> Any:
    """K8s bundles on emulators with config overrides."""
    return lambda **overrides: make_k8s(kube_emulator_factory(**overrides))


@pytest.fixture
def widget_crd() -> dict[str, Any]:
    """The Widget CRD manifest (a copy, so tests may modify it)."""
    import copy

    return copy.deepcopy(WIDGET_CRD)


@pytest.fixture
def widgets(k8s: K8s) -> Iterator[K8s]:
    k8s.ext.create_custom_resource_definition(WIDGET_CRD)
    yield k8s
