"""The emulator's shortcuts for speed give exactly the answers of the long way.

Admission, request parsing and timestamps have fast paths (compiled schemas,
copy-on-write defaulting, a check that skips rebuilding clean built-ins, a request
head parser without the email package). Each is compared here with the
straightforward implementation it replaces, on many generated inputs, valid and
not: same result, same errors, same exceptions. Faked: nothing; these are unit
tests of e2e.emulator modules.
"""

from __future__ import annotations

import copy
import io
import json
import random
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from controller.crds import generate_crds
from e2e.emulator import builtin_schema, cel, codec, schema
from e2e.emulator.clock import rfc3339
from e2e.emulator.errors import ApiError
from e2e.emulator.wire import FastHeadersHandler, response_head

# -- custom resource schemas ----------------------------------------------------------------
COMBINATORS: dict[str, Any] = {
    "type": "object",
    "required": ["mode"],
    "properties": {
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "port": {"x-kubernetes-int-or-string": True, "default": 80},
        "note": {"type": "string", "nullable": True, "default": "n"},
        "when": {"type": "string", "format": "date-time"},
        "ratio": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "exclusiveMaximum": True,
            "multipleOf": 0.25,
        },
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "set": {
            "type": "array",
            "x-kubernetes-list-type": "set",
            "maxItems": 2,
            "items": {"type": "integer"},
        },
        "labels": {
            "type": "object",
            "maxProperties": 2,
            "minProperties": 1,
            "additionalProperties": {"type": "string", "default": "x", "maxLength": 3},
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2},
                    "size": {"type": "integer", "default": 1},
                },
            },
        },
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "one": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "string", "minLength": 1}]},
        "all": {"allOf": [{"type": "integer", "minimum": 1}, {"maximum": 5}]},
        "never": {"not": {"type": "boolean"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "rules": {
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.a <= self.b", "message": "a after b"}],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        },
    },
}
# Keywords of shapes no CRD should have: the fast paths must fail the same way, or not at all.
ODD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "noLimit": {"type": "string", "maxLength": None},
        "badPattern": {"type": "string", "pattern": "("},
        "floatLimit": {"type": "string", "minLength": 1.0},
        "listType": {"type": ["string", "null"]},
        "oddProps": {"type": "object", "properties": ["x"]},
        "noneEnum": {"enum": None},
        "untyped": {"additionalProperties": {"type": "string", "default": "d"}},
    },
}


def longrun_schemas() -> dict[str, dict[str, Any]]:
    return {
        f"{crd['spec']['names']['kind']}-{version['name']}": version["schema"]["openAPIV3Schema"]
        for crd in generate_crds()
        for version in crd["spec"]["versions"]
    }


SCHEMAS = {"combinators": COMBINATORS, "odd": ODD, **longrun_schemas()}


@pytest.fixture(params=["widget", *SCHEMAS])
def named_schema(request, widget_crd):
    """(name, schema): the Widget CRD's (every structural feature), ours, and odd ones."""
    if request.param == "widget":
        return request.param, widget_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return request.param, SCHEMAS[request.param]


ODD_VALUES: list[Any] = [None, 0, 1, -3, 2.5, 0.5, True, "", "x", "abc", "ABC", "a" * 40, [], {}]
STRINGS = ["", "a", "ab", "run", "Run", "2024-01-01T00:00:00Z", "2024-01-01", "a" * 300]


def sample(node: Any, rng: random.Random, depth: int = 0, wrong: float = 0.06) -> Any:
    """A value for the schema node, of the wrong shape on purpose with odds `wrong`."""
    if not isinstance(node, dict) or depth > 8:
        return copy.deepcopy(rng.choice(ODD_VALUES))  # JSON never shares a value
    roll = rng.random()
    if roll < wrong:
        return None
    if roll < 2 * wrong:
        return copy.deepcopy(rng.choice(ODD_VALUES))
    if isinstance(node.get("enum"), list) and node["enum"] and rng.random() > wrong:
        return rng.choice(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return rng.choice([3, "3", "80%", 2.0])
    typ = node.get("type")
    props = node.get("properties")
    if typ == "object" or isinstance(props, dict):
        out: dict[str, Any] = {}
        required = node.get("required") if isinstance(node.get("required"), list) else []
        for key, sub in (props if isinstance(props, dict) else {}).items():
            if rng.random() < (0.95 if key in required else 0.6) - wrong:
                out[key] = sample(sub, rng, depth + 1, wrong)
        extra = node.get("additionalProperties")
        for i in range(rng.randint(0, 2)):
            if isinstance(extra, dict) or rng.random() < 5 * wrong:
                out[f"extra{i}"] = sample(extra, rng, depth + 1, wrong)
        if depth == 0 and rng.random() < 0.3:
            out["metadata"] = {"name": "x"}
        return out
    if typ == "array":
        return [sample(node.get("items"), rng, depth + 1, wrong) for _ in range(rng.randint(0, 3))]
    if typ == "string":
        return rng.choice(STRINGS)
    if typ == "integer":
        return rng.choice([0, 1, 5, 11, -1, 2.0, 10**6])
    if typ == "number":
        return rng.choice([0, 0.25, 0.5, 1, -2.5, 100])
    if typ == "boolean":
        return rng.choice([True, False])
    return copy.deepcopy(rng.choice(ODD_VALUES))


def outcome(fn: Any, *args: Any) -> Any:
    """What a call returns, or the type and text of what it raises."""
    try:
        result = fn(*args)
    except Exception as exc:  # the comparison includes failures
        return ("raised", type(exc).__name__, str(exc))
    if isinstance(result, list) and all(hasattr(e, "as_cause") for e in result):
        return [e.as_cause() for e in result]
    return result


def test_compiled_validation_reports_what_the_schema_walk_reports(named_schema):
    name, node = named_schema
    rng = random.Random(name)
    for i in range(400):
        value = sample(node, rng, wrong=0.06 if i % 2 else 0.002)
        fast = outcome(schema.validate, value, node)
        slow = outcome(schema._interpret, value, node, "")
        assert fast == slow, json.dumps(value)


def old_apply_defaults(obj: Any, node: Any) -> Any:
    """apply_defaults as it was: in place."""
    if node is None:
        return obj
    if isinstance(obj, dict):
        props = node.get("properties") or {}
        for key, sub in props.items():
            if (
                obj.get(key, None) is None
                and "default" in sub
                and not (key in obj and sub.get("nullable"))
            ):
                obj[key] = copy.deepcopy(sub["default"])
        for key, value in obj.items():
            sub = props.get(key)
            if sub is None and isinstance(node.get("additionalProperties"), dict):
                sub = node["additionalProperties"]
            if sub is not None:
                obj[key] = old_apply_defaults(value, sub)
    elif isinstance(obj, list) and isinstance(node.get("items"), dict):
        return [old_apply_defaults(v, node["items"]) for v in obj]
    return obj


def old_drop_nulls(obj: Any, node: Any) -> Any:
    """drop_nulls as it was: in place."""
    if node is None or not isinstance(obj, dict):
        return obj
    props = node.get("properties") or {}
    for key in list(obj):
        sub = props.get(key)
        if sub is None and isinstance(node.get("additionalProperties"), dict):
            sub = node["additionalProperties"]
        if sub is None:
            continue
        if obj[key] is None and not sub.get("nullable"):
            del obj[key]
        else:
            obj[key] = old_drop_nulls(obj[key], sub)
    return obj


def test_copy_on_write_defaulting_gives_what_in_place_defaulting_gave(named_schema):
    name, node = named_schema
    rng = random.Random(f"defaults-{name}")
    for i in range(300):
        value = sample(node, rng, wrong=0.06 if i % 2 else 0.002)
        before = copy.deepcopy(value)
        for new, old in (
            (schema.drop_nulls, old_drop_nulls),
            (schema.apply_defaults, old_apply_defaults),
        ):
            expected = outcome(old, copy.deepcopy(value), node)
            assert outcome(new, value, node) == expected, json.dumps(before)
            assert value == before  # never changed in place


def test_defaulting_shares_untouched_values_and_never_alters_its_input(widget_crd):
    widget_schema = widget_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    value = {"spec": {"size": 2, "limits": {"cpu": "2"}, "tags": ["a"]}}
    defaulted = schema.apply_defaults(value, widget_schema)
    assert defaulted["spec"]["color"] == "red"
    assert defaulted["spec"]["tags"] is value["spec"]["tags"]
    assert value == {"spec": {"size": 2, "limits": {"cpu": "2"}, "tags": ["a"]}}


# -- built-in kinds -------------------------------------------------------------------------
def pod() -> dict[str, Any]:
    container = {
        "name": "runner",
        "image": "img:1",
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
        ],
        "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "100m"}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp", "readOnly": True}],
        "securityContext": {"capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True},
        "ports": [{"containerPort": 80, "protocol": "TCP"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "labels": {"app": "x", "a.b/sizeLimit": "2000m"},
            "annotations": {"note": "n"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Job", "name": "j", "uid": "u"}],
            "finalizers": ["f"],
        },
        "spec": {
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "overhead": {"cpu": "1"},
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}],
            "containerStatuses": [{"name": "runner", "ready": True, "restartCount": 0}],
        },
    }


def job() -> dict[str, Any]:
    template = pod()
    del template["status"], template["apiVersion"], template["kind"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "backoffLimit": 2,
            "template": template,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {"values": [1]}}]},
        },
        "status": {"active": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }


KINDS = {
    ("", "pods"): ("Pod", pod),
    ("batch", "jobs"): ("Job", job),
    ("", "configmaps"): ("ConfigMap", lambda: {"metadata": {"name": "c"}, "data": {"a": "b"}}),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        "CustomResourceDefinition",
        lambda: copy.deepcopy(generate_crds()[0]),
    ),
}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, (*prefix, i))
    return out


def mutate(obj: Any, rng: random.Random) -> Any:
    """Change one place: an unknown field, a value of another type, a numeric quantity..."""
    obj = copy.deepcopy(obj)
    where = rng.choice(paths(obj)[1:])
    parent = obj
    for step in where[:-1]:
        parent = parent[step]
    key = where[-1]
    choice = rng.random()
    if choice < 0.3 and isinstance(parent[key], dict):
        parent[key][rng.choice(["bogus", "sizeLimit", "x.sizeLimit", "limits"])] = rng.choice(
            [1, "2000m", 0.5, {}, None]
        )
    else:
        parent[key] = rng.choice([*ODD_VALUES, 2, 1.5, "2000m", "1000m", {"x": 1}, ["y"]])
    return obj


def pruned(group: str, plural: str, kind: str, obj: Any, *, fast: bool, remember: bool) -> Any:
    unknown: list[str] = []
    try:
        if fast:
            out = builtin_schema.prune(
                group, plural, obj, kind=kind, unknown=unknown, remember=remember
            )
        else:
            root = builtin_schema.ROOTS[(group, plural)]
            out = builtin_schema._walk(obj, root, "", kind=kind, unknown=unknown)
    except ApiError as err:
        return ("error", err.code, err.message)
    return (out, unknown)


@pytest.mark.parametrize("where", list(KINDS))
def test_builtin_fast_check_accepts_only_what_the_full_walk_returns_unchanged(where):
    group, plural = where
    kind, make = KINDS[where]
    rng = random.Random(plural)
    for i in range(150):
        obj = make() if i == 0 else mutate(make(), rng)
        expected = pruned(group, plural, kind, copy.deepcopy(obj), fast=False, remember=False)
        for remember in (False, True, True):  # the last call may use what the second proved
            assert pruned(
                group, plural, kind, copy.deepcopy(obj), fast=True, remember=remember
            ) == (expected)


def test_a_clean_object_is_kept_as_is_and_an_unclean_one_is_rebuilt():
    clean = pod()
    del clean["metadata"]["labels"]["a.b/sizeLimit"]  # a key like that takes the long way
    assert builtin_schema.prune("", "pods", clean, kind="Pod", unknown=[]) is clean
    unclean = pod()
    unclean["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 1
    unknown: list[str] = []
    out = builtin_schema.prune("", "pods", unclean, kind="Pod", unknown=unknown)
    assert out is not unclean and out["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"
    assert unclean["spec"]["containers"][0]["resources"]["limits"]["cpu"] == 1


# -- CEL, copies, timestamps ---------------------------------------------------------------
def test_a_cel_rule_parsed_once_evaluates_each_object_on_its_own():
    rule = "self.a <= self.b && self.all(k, k != 'bad')"
    assert cel.evaluate(rule, {"a": 1, "b": 2}) is True
    assert cel.evaluate(rule, {"a": 3, "b": 2}) is False
    assert cel.evaluate(rule, {"a": 1, "b": 2, "bad": 0}) is False
    assert cel.evaluate(rule, {"a": 1}) is None  # a runtime error skips the rule
    assert cel.evaluate("self ==", {}) is None  # so does a rule the emulator cannot parse
    assert cel.evaluate("self == oldSelf", 1) is None  # transition rules wait for an update
    assert cel.evaluate("self == oldSelf", 1, 1) is True


def test_clone_copies_every_container_and_equals_deepcopy():
    value = {"a": [1, {"b": [2.5, None, True]}], "c": ("t", {"d": 1}), "e": "s"}
    copied = codec.clone(value)
    assert copied == copy.deepcopy(value)
    assert copied["a"] is not value["a"] and copied["a"][1] is not value["a"][1]
    assert copied["c"][1] is not value["c"][1]  # not JSON: deep-copied all the same


def test_compact_encoding_is_what_json_dumps_writes():
    value = {"é": "ü\u2028", "n": [1, 2.5, 1e16, -0.0, None, True], "s": "<&>"}
    assert codec.dumps(value) == json.dumps(value, separators=(",", ":"))
    assert codec.encode(value) == json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "when",
    [
        datetime(2024, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
        datetime(2024, 3, 1, 5, 6, 7, tzinfo=timezone(timedelta(hours=2))),
        datetime(2030, 6, 30, 23, 59, 59, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
    ],
)
def test_timestamps_are_formatted_as_strftime_formats_them(when):
    assert rfc3339(when) == when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- HTTP heads ---------------------------------------------------------------------------------
class Stdlib(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, raw: bytes) -> None:  # no socket: just the parsing
        self.rfile = io.BytesIO(raw)
        self.wfile = io.BytesIO()
        self.raw_requestline = self.rfile.readline(65537)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Fast(FastHeadersHandler, Stdlib):
    pass


HEADS = [
    b"POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n"
    b"Content-Type: application/json\r\nAccept: application/json\r\n\r\n{}",
    b"GET /x HTTP/1.1\r\nAccept: a\r\naccept: b\r\nACCEPT:c\r\nX-Trail: v \t\r\n\r\n",
    b"GET /x HTTP/1.1\r\nX-Folded: a\r\n  b\r\nAccept: j\r\n\r\n",
    b"GET /x HTTP/1.1\nAccept: bare-lf\n\n",
    b"GET /x HTTP/1.1\r\nX-Latin: caf\xe9\r\n\r\n",
    b"GET /x HTTP/1.1\r\n: empty name\r\nAccept: j\r\n\r\n",
    b"GET /x HTTP/1.1\r\nBad Name: x\r\nAccept: j\r\n\r\n",
    b"GET /x HTTP/1.1\r\nFrom x\r\nAccept: j\r\n\r\n",
    b"GET /x HTTP/1.1\r\nX-Cr: a\rb\r\n\r\n",
    b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"GET /x HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n",
    b"PUT /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
    b"GET //double//slash HTTP/1.1\r\n\r\n",
    b"GET /x HTTP/1.0\r\nAccept: j\r\n\r\n",
    b"GET /x HTTP/2.0\r\n\r\n",
    b"GET /x\r\n\r\n",
    b"GET /x HTTP/1.1\r\nX-Eof: no blank line",
    b"GET /x HTTP/1.1\r\n" + b"X-Many: y\r\n" * 101 + b"\r\n",
    b"GET /x HTTP/1.1\r\nX-Long: " + b"y" * 70000 + b"\r\n\r\n",
]


def parsed(cls: type[Stdlib], raw: bytes) -> Any:
    handler = cls(raw)
    ok = handler.parse_request()
    headers = getattr(handler, "headers", None)
    written = b"\r\n".join(
        line for line in handler.wfile.getvalue().split(b"\r\n") if not line.startswith(b"Date:")
    )
    return (
        ok,
        handler.command,
        getattr(handler, "path", None),
        handler.request_version,
        handler.close_connection,
        headers.items() if headers is not None else None,
        [headers.get(k) for k in ("accept", "Content-Type", "x-folded", "Missing")]
        if headers
        else None,
        written,
        handler.rfile.read(),
    )


@pytest.mark.parametrize("raw", HEADS, ids=range(len(HEADS)))
def test_request_heads_are_read_as_the_stdlib_reads_them(raw):
    assert parsed(Fast, raw) == parsed(Stdlib, raw)


def test_response_heads_are_what_send_response_writes():
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", "2"),
        ("Warning", '299 - "x"'),
    ]
    for _ in range(3):  # the Date header may cross a second between the two
        handler = Stdlib(b"GET / HTTP/1.1\r\n\r\n")
        handler.parse_request()
        handler.send_response(201)
        for key, value in headers:
            handler.send_header(key, value)
        handler.end_headers()
        if handler.wfile.getvalue() == response_head(handler, 201, headers):
            return
    raise AssertionError(handler.wfile.getvalue())
