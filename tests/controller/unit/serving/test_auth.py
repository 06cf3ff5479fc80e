"""API keys: made from the random source passed in, once; rotated on the annotation or a new
key count; made again when the Secret is gone; every new set rolls the pods. The Secret is
only ever written: what the controller knows of the keys is in status.apiKeys.

Real: generate_keys, the Secret builder and decide_deployment on plain dicts. Faked: the
random source (pinned, or one that fails the test when called).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from contracts.serving import API_KEY_SECRET_KEY, ROTATE_KEYS_ANNOTATION
from controller.core.serving import auth, names
from controller.core.serving.decide import Create, Patch, ServingDecision
from tests.controller.unit.serving.objects import (
    children_of,
    counting_entropy,
    created,
    decide,
    deployment,
    pod,
    recorded,
    rolled_out,
)


def no_randomness(n: int) -> bytes:
    raise AssertionError("keys were generated although the Secret is current")


def settled(obj: dict[str, Any]) -> Any:
    first = decide(obj)
    recorded(obj, first)
    return children_of(first, deployment=rolled_out(created(first)["Deployment"], 1))


def secret_write(decision: ServingDecision) -> Any:
    (write,) = [w for w in decision.writes if w.kind == "Secret"]
    return write


def replaced_keys(decision: ServingDecision) -> list[str]:
    """The keys an owner-tested Secret patch writes."""
    write = secret_write(decision)
    assert isinstance(write, Patch) and isinstance(write.body, list)
    data = next(op["value"] for op in write.body if op["path"] == "/data")
    return base64.b64decode(data["api-keys"]).decode().split()


def template_keys_version(decision: ServingDecision) -> str:
    dep = next(w for w in decision.writes if w.kind == "Deployment")
    assert isinstance(dep, Patch) and isinstance(dep.body, list)
    template = next(op["value"] for op in dep.body if op["path"] == "/spec/template")
    return str(template["metadata"]["annotations"][names.KEYS_VERSION_ANNOTATION])


def test_keys_are_256_bit_url_safe_and_prefixed() -> None:
    keys = auth.generate_keys(2, counting_entropy())
    assert keys == (
        "lrk_" + base64.urlsafe_b64encode(b"\x01" * 32).decode().rstrip("="),
        "lrk_" + base64.urlsafe_b64encode(b"\x02" * 32).decode().rstrip("="),
    )
    assert all(len(k) == 47 for k in keys)


def test_a_random_source_that_gives_too_few_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="gave 8 bytes, not 32"):
        auth.generate_keys(1, lambda n: b"x" * 8)


def test_the_secret_holds_the_first_key_every_key_and_the_sidecar_map() -> None:
    body = created(decide(deployment(auth={"keyCount": 2})))["Secret"]
    plain = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
    first, second = plain["api-keys"].split()
    assert plain[API_KEY_SECRET_KEY] == first
    # One case-sensitive regex per key: a plain map string would match in any letter case.
    assert plain[names.NGINX_KEYS_KEY] == (
        f'"~^(?i:bearer) {first}$" 1;\n"~^(?i:bearer) {second}$" 1;\n'
    )
    assert body["type"] == "Opaque"
    assert body["metadata"]["annotations"][names.KEYS_ROTATED_FOR_ANNOTATION] == ""


def test_keys_are_made_once() -> None:
    obj = deployment()
    decision = decide(obj, children=settled(obj), entropy=no_randomness)
    assert decision.writes == ()


def test_the_status_records_what_it_made_but_no_key() -> None:
    decision = decide(deployment(auth={"keyCount": 2}))
    keys = decision.status.api_keys
    assert keys is not None and keys.count == 2 and keys.reason == "Created"
    assert keys.rotated_for == "" and len(keys.version) == 16
    template = created(decision)["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"][names.KEYS_VERSION_ANNOTATION] == keys.version
    secret = created(decision)["Secret"]
    for value in secret["data"].values():
        assert base64.b64decode(value).decode().split()[0].strip('"') not in str(
            decision.status.to_wire()
        )


def test_the_rotate_annotation_gets_new_keys_and_rolls_the_pods() -> None:
    obj = deployment()
    children = settled(obj)
    old = obj["status"]["apiKeys"]["version"]
    rotated = deployment(annotations={ROTATE_KEYS_ANNOTATION: "2026-03-01"})
    recorded(rotated, decide(obj))
    decision = decide(rotated, children=children, entropy=lambda n: b"\xaa" * n)
    assert replaced_keys(decision) == list(auth.generate_keys(1, lambda n: b"\xaa" * n))
    keys = decision.status.api_keys
    assert keys is not None and keys.rotated_for == "2026-03-01"
    assert keys.reason == "RotationRequested" and keys.version != old
    assert template_keys_version(decision) == keys.version
    assert decision.status.phase == "Updating"


def test_the_same_rotation_value_does_nothing_again() -> None:
    obj = deployment(annotations={ROTATE_KEYS_ANNOTATION: "1"})
    assert decide(obj, children=settled(obj), entropy=no_randomness).writes == ()


def test_a_new_key_count_makes_a_new_set_of_keys() -> None:
    # The old keys cannot be read back to be kept: a new count is a rotation.
    obj = deployment()
    children = settled(obj)
    more = deployment(auth={"keyCount": 3})
    more["status"] = obj["status"]
    decision = decide(more, children=children)
    assert len(replaced_keys(decision)) == 3
    keys = decision.status.api_keys
    assert keys is not None and keys.count == 3 and keys.reason == "KeyCountChanged"


def test_a_rotation_of_a_deleted_secret_creates_it() -> None:
    obj = deployment(annotations={ROTATE_KEYS_ANNOTATION: "2"})
    obj["status"] = settled_status()
    decision = decide(obj, secret_answer="missing")
    assert isinstance(secret_write(decision), Create)


def test_pods_that_cannot_start_make_it_try_to_create_the_secret() -> None:
    obj = deployment()
    children = settled(obj)
    waiting = {
        "name": "server",
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    stuck = children_of(
        decide(obj), deployment=children.deployment, pods=[pod(containers=[waiting])]
    )
    probe = decide(obj, children=stuck)
    assert isinstance(secret_write(probe), Create)
    keys = probe.status.api_keys
    assert keys is not None and keys.reason == "SecretMissing"
    # AlreadyExists: it is there, nothing changes.
    there = decide(obj, children=stuck, secret_answer="exists", entropy=no_randomness)
    assert there.writes == ()
    assert there.status.api_keys is not None and there.status.api_keys.reason == "Created"


def test_no_keys_without_auth() -> None:
    decision = decide(deployment(auth={"enabled": False}), entropy=no_randomness)
    assert "Secret" not in created(decision) and decision.status.api_keys is None


def settled_status() -> dict[str, Any]:
    obj = deployment()
    settled(obj)
    return dict(obj["status"])
