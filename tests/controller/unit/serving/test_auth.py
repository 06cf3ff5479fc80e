"""API keys: made from the random source passed in, once; rotated on the annotation; a new
key count keeps the keys already handed out; a rotation rolls the pods.

Real: generate_keys, the Secret builder and decide_deployment on plain dicts. Faked: the
random source (pinned, or one that fails the test when called).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from contracts.serving import API_KEY_SECRET_KEY, ROTATE_KEYS_ANNOTATION
from controller.core.serving import auth, names
from controller.core.serving.decide import Patch
from tests.controller.unit.serving.objects import (
    children_of,
    counting_entropy,
    created,
    decide,
    deployment,
    keys_in,
    rolled_out,
)


def no_randomness(n: int) -> bytes:
    raise AssertionError("keys were generated although the Secret is current")


def settled(obj: dict[str, Any]) -> Any:
    first = decide(obj)
    return children_of(first, deployment=rolled_out(created(first)["Deployment"], 1))


def secret_patch(writes: tuple[Any, ...]) -> dict[str, Any]:
    (patch,) = [w for w in writes if w.kind == "Secret"]
    assert isinstance(patch, Patch) and isinstance(patch.body, dict)
    return patch.body


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
    assert plain[names.NGINX_KEYS_KEY] == f'"Bearer {first}" 1;\n"Bearer {second}" 1;\n'
    assert body["type"] == "Opaque"
    assert body["metadata"]["annotations"][names.KEYS_ROTATED_FOR_ANNOTATION] == ""


def test_keys_are_made_once() -> None:
    obj = deployment()
    decision = decide(obj, children=settled(obj), entropy=no_randomness)
    assert decision.writes == ()


def test_the_rotate_annotation_gets_new_keys_and_rolls_the_pods() -> None:
    obj = deployment()
    children = settled(obj)
    old = keys_in(children.secret)
    rotated = deployment(annotations={ROTATE_KEYS_ANNOTATION: "2026-03-01"})
    decision = decide(rotated, children=children, entropy=lambda n: b"\xaa" * n)
    body = secret_patch(decision.writes)
    assert body["metadata"]["annotations"][names.KEYS_ROTATED_FOR_ANNOTATION] == "2026-03-01"
    new = base64.b64decode(body["data"]["api-keys"]).decode().split()
    assert new != old and new == list(auth.generate_keys(1, lambda n: b"\xaa" * n))
    dep = next(w for w in decision.writes if w.kind == "Deployment")
    template = next(op["value"] for op in dep.body if op["path"] == "/spec/template")  # type: ignore[union-attr]
    assert template["metadata"]["annotations"][names.KEYS_VERSION_ANNOTATION] == auth.keys_version(
        "2026-03-01"
    )
    assert decision.status.phase == "Updating"


def test_the_same_rotation_value_does_nothing_again() -> None:
    obj = deployment(annotations={ROTATE_KEYS_ANNOTATION: "1"})
    assert decide(obj, children=settled(obj), entropy=no_randomness).writes == ()


def test_more_keys_keep_the_ones_handed_out() -> None:
    obj = deployment()
    children = settled(obj)
    (first,) = keys_in(children.secret)
    body = secret_patch(decide(deployment(auth={"keyCount": 3}), children=children).writes)
    keys = base64.b64decode(body["data"]["api-keys"]).decode().split()
    assert len(keys) == 3 and keys[0] == first
    assert base64.b64decode(body["data"][API_KEY_SECRET_KEY]).decode() == first


def test_an_emptied_secret_gets_new_keys() -> None:
    obj = deployment()
    children = settled(obj)
    emptied = copy.deepcopy(children.secret)
    emptied["data"] = {}
    decision = decide(
        obj, children=children_of(decide(obj), deployment=children.deployment, secret=emptied)
    )
    assert keys_in({"data": secret_patch(decision.writes)["data"]})


def test_decode_keys_ignores_what_it_cannot_read() -> None:
    assert auth.decode_keys(None) == ()
    assert auth.decode_keys({"api-keys": "%%%"}) == ()
