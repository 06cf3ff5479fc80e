"""Structural-schema handling for custom resources: prune, default, validate.

The real server decodes a CR, drops fields its CRD schema does not declare
(unless `x-kubernetes-preserve-unknown-fields`), applies `default`s, then
validates. A controller that writes a field its CRD forgot will see it vanish on
a real cluster, so the emulator does the same, in the same order and with the
same error texts. CEL rules (`x-kubernetes-validations`) are evaluated by cel.py,
for the subset it understands, after the schema checks (validate_with_rules).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from . import cel
from .codec import clone
from .errors import (
    FieldError,
    invalid,
    not_supported,
    required,
    type_invalid,
)

Schema = dict[str, Any]
_META_KEYS = ("apiVersion", "kind", "metadata")


def prune(obj: Any, schema: Schema | None, *, path: str = "", unknown: list[str]) -> Any:
    """Drop fields the schema does not declare; record their paths in `unknown`."""
    if schema is None or (
        schema.get("x-kubernetes-preserve-unknown-fields")
        and not (schema.get("properties") or schema.get("additionalProperties"))
    ):
        return obj
    if isinstance(obj, dict) and (schema.get("type") == "object" or "properties" in schema):
        return _prune_map(obj, schema, path=path, unknown=unknown)
    if isinstance(obj, list) and schema.get("items"):
        return [
            prune(v, schema["items"], path=f"{path}[{i}]", unknown=unknown)
            for i, v in enumerate(obj)
        ]
    return obj


def _prune_map(obj: dict[str, Any], schema: Schema, *, path: str, unknown: list[str]) -> Any:
    props = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        child = f"{path}.{key}" if path else key
        if not path and key in _META_KEYS:
            # apiVersion/kind/metadata are ObjectMeta's business, never pruned by the CRD
            # schema, even when the schema declares `metadata: {type: object}`.
            out[key] = value
        elif key in props:
            out[key] = prune(value, props[key], path=child, unknown=unknown)
        elif isinstance(additional, dict):
            out[key] = prune(value, additional, path=child, unknown=unknown)
        elif additional is True or preserve:
            out[key] = value
        else:
            unknown.append(child)
    return out


# -- what a schema subtree contains, computed once per CRD schema -----------------------
# Defaulting and CEL rules only ever act where a schema says `default` or
# `x-kubernetes-validations`; most subtrees (a status, a list of conditions) have
# neither, and skipping them saves walking every value under them.
_ROOTS_KEPT = 256


class _Facts:
    """Per schema node (by identity, under one root that keeps them alive): does its
    subtree, as apply_defaults and _rules descend it, hold any default / any rule?
    (Yes, to be safe, when its properties are not all schemas.)

    `plans` says, for a node whose properties are all schemas, which properties
    have a default and which lead to defaults further down (the latter None when
    additionalProperties does too: then every key may need a visit)."""

    def __init__(self, root: Schema) -> None:
        self.root = root
        self.defaults: dict[int, bool] = {}
        self.rules: dict[int, bool] = {}
        self.plans: dict[int, tuple[list[tuple[str, Schema]], list[tuple[str, Schema]] | None]]
        self.plans = {}
        self._visit(root)
        self.any_rule = _mentions_rules(root)
        self._validators: dict[int, Validator] = {}

    def validator(self, node: Schema) -> Validator:
        """The compiled validator of a node under this root (compiled on first use)."""
        check = self._validators.get(id(node))
        if check is None:
            check = self._validators[id(node)] = _compile(node, self.validator)
        return check

    def _visit(self, node: Any) -> tuple[bool, bool]:
        if not isinstance(node, dict):
            return False, False
        props = node.get("properties") or {}
        additional = node.get("additionalProperties")
        items = node.get("items")
        regular = isinstance(props, dict) and all(isinstance(s, dict) for s in props.values())
        found = {id(sub): self._visit(sub) for sub in props.values()} if regular else {}
        extra = [self._visit(s) for s in (additional, items) if isinstance(s, dict)]
        defaults = not regular or any("default" in sub for sub in props.values())
        defaults = defaults or any(d for d, _ in [*found.values(), *extra])
        rules = (
            not regular
            or bool(node.get("x-kubernetes-validations"))
            or any(r for _, r in [*found.values(), *extra])
        )
        if regular:
            defaulted = [(key, sub) for key, sub in props.items() if "default" in sub]
            more = isinstance(additional, dict) and self.defaults[id(additional)]
            below = [(key, sub) for key, sub in props.items() if found[id(sub)][0]]
            self.plans[id(node)] = (defaulted, None if more else below)
        self.defaults[id(node)] = defaults
        self.rules[id(node)] = rules
        return defaults, rules


def _mentions_rules(node: Any) -> bool:
    """Whether any schema node under `node` carries `x-kubernetes-validations`."""
    if isinstance(node, dict):
        if node.get("x-kubernetes-validations"):
            return True
        return any(_mentions_rules(v) for v in node.values())
    return isinstance(node, list) and any(_mentions_rules(v) for v in node)


_facts_by_root: dict[int, _Facts] = {}
_facts_lock = threading.Lock()


def _facts(root: Schema) -> _Facts:
    facts = _facts_by_root.get(id(root))
    if facts is not None and facts.root is root:
        return facts
    facts = _Facts(root)
    with _facts_lock:
        _facts_by_root[id(root)] = facts
        if len(_facts_by_root) > _ROOTS_KEPT:
            del _facts_by_root[next(iter(_facts_by_root))]
    return facts


def apply_defaults(obj: Any, schema: Schema | None) -> Any:
    """Set `default` on missing properties, top-down, recursing into the results.

    Copy on write: `obj` is never changed; what changes is rebuilt, the rest shared.
    """
    if schema is None:
        return obj
    return _apply_defaults(obj, schema, _facts(schema))


def _apply_defaults(obj: Any, schema: Schema, facts: _Facts) -> Any:
    if not facts.defaults.get(id(schema), True):
        return obj  # nothing to default below here
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        defaulted, below = facts.plans.get(id(schema), (None, None))
        out = obj
        for key, sub in props.items() if defaulted is None else defaulted:
            if (
                out.get(key, None) is None
                and "default" in sub
                and not (key in out and sub.get("nullable"))
            ):
                out = out if out is not obj else dict(obj)
                out[key] = clone(sub["default"])
        if below is None:
            additional = schema.get("additionalProperties")
            below = []
            for key in out:
                sub = props.get(key)
                if sub is None and isinstance(additional, dict):
                    sub = additional
                if sub is not None:
                    below.append((key, sub))
        for key, sub in below:
            if key not in out:
                continue
            value = out[key]
            filled = _apply_defaults(value, sub, facts)
            if filled is not value:
                out = out if out is not obj else dict(obj)
                out[key] = filled
        return out
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        items = [_apply_defaults(v, schema["items"], facts) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    return obj


def drop_nulls(obj: Any, schema: Schema | None) -> Any:
    """Remove nulls on non-nullable fields before defaulting (real server since 1.20).

    Copy on write: `obj` is never changed; what changes is rebuilt, the rest shared.
    """
    if schema is None or not isinstance(obj, dict):
        return obj
    props = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    out = obj
    for key, value in obj.items():
        sub = props.get(key)
        if sub is None and isinstance(additional, dict):
            sub = additional
        if sub is None:
            continue
        if value is None and not sub.get("nullable"):
            out = out if out is not obj else dict(obj)
            del out[key]
        else:
            cleaned = drop_nulls(value, sub)
            if cleaned is not value:
                out = out if out is not obj else dict(obj)
                out[key] = cleaned
    return out


_DATE_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"
_TYPE_CHECK = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def validate(obj: Any, schema: Schema | None, *, path: str = "") -> list[FieldError]:
    """Validate a value against a structural schema; returns field errors.

    Runs the schema compiled once into one closure per node (see _compile): the same
    checks in the same order as `_check`, without looking the keywords up again
    for every value.
    """
    if schema is None:
        return []
    errors: list[FieldError] = []
    _facts(schema).validator(schema)(obj, path, errors)
    return errors


def _interpret(value: Any, schema: Schema | None, path: str) -> list[FieldError]:
    """The reference validator, reading the schema dict as it goes (see validate)."""
    if schema is None:
        return []
    errors: list[FieldError] = []
    _check(value, schema, path, errors)
    return errors


def _check(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            errors.append(
                type_invalid(
                    path,
                    None,
                    f'{path} in body must be of type {schema["type"]}: "null"',
                )
            )
        return
    if not _check_type(value, schema, path, errors):
        return
    _check_enum_and_bounds(value, schema, path, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{i}]", errors)
    for sub in schema.get("allOf") or []:
        _check(value, sub, path, errors)
    if schema.get("anyOf") and all(_interpret(value, s, path) for s in schema["anyOf"]):
        errors.append(
            invalid(path, value, f"{path} in body must match at least one schema in anyOf")
        )
    if schema.get("oneOf"):
        ok = sum(1 for s in schema["oneOf"] if not _interpret(value, s, path))
        if ok != 1:
            errors.append(
                invalid(
                    path,
                    value,
                    f"{path} in body must validate one and only one schema (oneOf)",
                )
            )
    if schema.get("not") and not _interpret(value, schema["not"], path):
        errors.append(invalid(path, value, f"{path} in body must not validate the schema (not)"))


def _check_type(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, str) or _TYPE_CHECK["integer"](value):
            return True
        errors.append(
            type_invalid(
                path,
                _tname(value).strip('"'),  # the value's type, as kube-openapi's InvalidType
                f"{path} in body must be of type integer,string: {_tname(value)}",
            )
        )
        return False
    typ = schema.get("type")
    if typ and typ in _TYPE_CHECK and not _TYPE_CHECK[typ](value):
        errors.append(
            type_invalid(
                path,
                _tname(value).strip('"'),
                f"{path} in body must be of type {typ}: {_tname(value)}",
            )
        )
        return False
    return True


def _tname(value: Any) -> str:
    if isinstance(value, bool):
        return '"boolean"'
    if isinstance(value, int):
        return '"integer"'
    if isinstance(value, float):
        return '"number"'
    if isinstance(value, str):
        return '"string"'
    if isinstance(value, list):
        return '"array"'
    return '"object"'


def _check_enum_and_bounds(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        errors.append(not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path, errors)
    elif isinstance(value, list):
        _check_array(value, schema, path, errors)
    elif isinstance(value, dict):
        n = len(value)
        if "maxProperties" in schema and n > schema["maxProperties"]:
            errors.append(
                FieldError(
                    "FieldValueTooMany",
                    path,
                    f"Too many: {n}: {_at_most(schema['maxProperties'])}",
                )
            )
        if "minProperties" in schema and n < schema["minProperties"]:
            errors.append(
                invalid(
                    path,
                    n,
                    f"{path} in body should have at least {schema['minProperties']} properties",
                )
            )


def _at_most(limit: int) -> str:
    """apimachinery field.TooMany's words: "1 item", "2 items"."""
    return f"must have at most {limit} item" + ("" if limit == 1 else "s")


def _check_string(value: str, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(
                "FieldValueTooLong",
                path,
                f"Too long: may not be more than {schema['maxLength']} bytes",
            )
        )
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            invalid(
                path,
                value,
                f"{path} in body should be at least {schema['minLength']} chars long",
            )
        )
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(invalid(path, value, f"{path} in body should match '{schema['pattern']}'"))
    fmt = schema.get("format")
    if fmt == "date-time" and not re.fullmatch(_DATE_TIME, value):
        errors.append(invalid(path, value, f"{path} in body must be of type date-time: {value!r}"))


def _check_number(value: float, schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "maximum" in schema:
        mx = schema["maximum"]
        if value > mx or (schema.get("exclusiveMaximum") and value >= mx):
            word = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {word} {mx}"))
    if "minimum" in schema:
        mn = schema["minimum"]
        if value < mn or (schema.get("exclusiveMinimum") and value <= mn):
            word = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {word} {mn}"))
    if schema.get("multipleOf") and value % schema["multipleOf"]:
        errors.append(
            invalid(
                path,
                value,
                f"{path} in body should be a multiple of {schema['multipleOf']}",
            )
        )


def _check_array(value: list[Any], schema: Schema, path: str, errors: list[FieldError]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                path,
                f"Too many: {len(value)}: {_at_most(schema['maxItems'])}",
            )
        )
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            invalid(
                path,
                value,
                f"{path} in body should have at least {schema['minItems']} items",
            )
        )
    if schema.get("uniqueItems") or schema.get("x-kubernetes-list-type") == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                errors.append(
                    FieldError(
                        "FieldValueDuplicate",
                        f"{path}[{i}]",
                        f"Duplicate value: {_dup(item)}",
                    )
                )
            seen.append(item)


def _dup(item: Any) -> str:
    from .errors import fmt_value

    return fmt_value(item)


def _check_object(
    value: dict[str, Any], schema: Schema, path: str, errors: list[FieldError]
) -> None:
    props = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(required(f"{path}.{name}" if path else name))
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if not path and key in _META_KEYS:
            continue
        if key in props:
            _check(item, props[key], child, errors)
        elif isinstance(additional, dict):
            _check(item, additional, child, errors)


# -- compiled validation ----------------------------------------------------------------
Validator = Callable[[Any, str, list[FieldError]], None]
_DATE_TIME_RE = re.compile(_DATE_TIME)
_NUMBER_KEYS = ("maximum", "minimum", "multipleOf")
_ARRAY_KEYS = ("maxItems", "minItems", "uniqueItems", "x-kubernetes-list-type")
_OBJECT_KEYS = ("maxProperties", "minProperties")


def _compile(schema: Schema, sub: Callable[[Any], Validator]) -> Validator:
    """One node of `_check` as a closure: the same checks in the same order, with the
    keywords read once. A node whose keywords have unexpected shapes is left to
    `_check` itself. `sub` compiles child schemas."""
    props = schema.get("properties") or {}
    required_names = schema.get("required") or []
    typ = schema.get("type")
    subschemas = [
        *(props.values() if isinstance(props, dict) else ()),
        *(schema.get("allOf") or []),
        *(schema.get("anyOf") or []),
        *(schema.get("oneOf") or []),
    ]
    if (
        not isinstance(props, dict)
        or not isinstance(required_names, list)
        or not (typ is None or isinstance(typ, str))
        or not all(isinstance(s, dict) for s in subschemas)
        or (schema.get("not") and not isinstance(schema.get("not"), dict))
    ):
        return lambda value, path, errors: _check(value, schema, path, errors)
    nullable = schema.get("nullable")
    int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
    type_ok = _TYPE_CHECK.get(typ) if typ else None
    bounds_ok = _bounds_predicate(schema)
    prop_checks = {key: sub(s) for key, s in props.items()}
    additional = schema.get("additionalProperties")
    extra = sub(additional) if isinstance(additional, dict) else None
    walks_object = bool(required_names or prop_checks or extra)
    items = schema.get("items")
    item_check = sub(items) if isinstance(items, dict) else None
    all_of = [sub(s) for s in schema.get("allOf") or []]
    any_of = [sub(s) for s in schema.get("anyOf") or []]
    one_of = [sub(s) for s in schema.get("oneOf") or []]
    not_ = sub(schema["not"]) if schema.get("not") else None
    combines = bool(all_of or any_of or one_of or not_)

    def check(value: Any, path: str, errors: list[FieldError]) -> None:
        if value is None:
            if not nullable and typ:
                errors.append(
                    type_invalid(path, None, f'{path} in body must be of type {typ}: "null"')
                )
            return
        suspect = int_or_string or (type_ok is not None and not type_ok(value))
        if suspect and not _check_type(value, schema, path, errors):
            return
        if bounds_ok is not None and not bounds_ok(value):
            _check_enum_and_bounds(value, schema, path, errors)
        if isinstance(value, dict):
            if walks_object:
                _walk_object(value, path, errors)
        elif isinstance(value, list) and item_check is not None:
            for i, item in enumerate(value):
                item_check(item, f"{path}[{i}]", errors)
        if combines:
            _combine(value, path, errors)

    def _walk_object(value: dict[str, Any], path: str, errors: list[FieldError]) -> None:
        for name in required_names:
            if name not in value:
                errors.append(required(f"{path}.{name}" if path else name))
        for key, item in value.items():
            if not path and key in _META_KEYS:
                continue
            child = prop_checks.get(key, extra)
            if child is not None:
                child(item, f"{path}.{key}" if path else key, errors)

    def _combine(value: Any, path: str, errors: list[FieldError]) -> None:
        for c in all_of:
            c(value, path, errors)
        if any_of and all(_errors(c, value, path) for c in any_of):
            errors.append(
                invalid(path, value, f"{path} in body must match at least one schema in anyOf")
            )
        if one_of and sum(1 for c in one_of if not _errors(c, value, path)) != 1:
            errors.append(
                invalid(
                    path, value, f"{path} in body must validate one and only one schema (oneOf)"
                )
            )
        if not_ is not None and not _errors(not_, value, path):
            errors.append(
                invalid(path, value, f"{path} in body must not validate the schema (not)")
            )

    return check


def _bounds_predicate(schema: Schema) -> Callable[[Any], bool] | None:
    """True when `_check_enum_and_bounds` would report nothing (None: it never does).

    Only a False answer runs the real check, which then writes the errors; a
    keyword of an unexpected type makes the predicate always False.
    """
    has = [key for key in ("enum", "maxLength", "minLength", "pattern", "format") if key in schema]
    number = any(key in schema for key in _NUMBER_KEYS)
    array = any(key in schema for key in _ARRAY_KEYS)
    obj = any(key in schema for key in _OBJECT_KEYS)
    if not (has or number or array or obj):
        return None
    enum: Any = schema.get("enum")
    max_len, min_len = schema.get("maxLength"), schema.get("minLength")
    pattern = schema.get("pattern")
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else None
    except re.error:
        compiled = None
    exotic = (
        ("maxLength" in schema and type(max_len) is not int)
        or ("minLength" in schema and type(min_len) is not int)
        or ("pattern" in schema and compiled is None)
    )
    if exotic:
        return lambda value: False
    date_time = schema.get("format") == "date-time"

    def ok(value: Any) -> bool:
        if "enum" in has and value not in enum:
            return False
        if isinstance(value, str):
            return (
                (max_len is None or len(value) <= max_len)
                and (min_len is None or len(value) >= min_len)
                and (compiled is None or compiled.search(value) is not None)
                and (not date_time or _DATE_TIME_RE.fullmatch(value) is not None)
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return not number
        if isinstance(value, list):
            return not array
        if isinstance(value, dict):
            return not obj
        return True

    def safe(value: Any) -> bool:
        try:
            return ok(value)
        except Exception:  # let the real check raise or report it
            return False

    return safe


def _errors(check: Validator, value: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    check(value, path, errors)
    return errors


# kube-apiserver runs a CRD's CEL rules after its schema checks unless those found one of
# these (apiextensions-apiserver's hasBlockingErr), and then says so in one more error.
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
RULES_NOT_CHECKED = FieldError(
    "FieldValueInvalid",
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)


def validate_with_rules(
    value: Any, schema: Schema | None, *, old: Any = cel.MISSING
) -> list[FieldError]:
    """The schema's errors, then its rules' (or RULES_NOT_CHECKED after a blocking error)."""
    errors = validate(value, schema)
    if schema is None or not _facts(schema).any_rule:
        return errors
    if any(e.reason in _BLOCKING for e in errors):
        return [*errors, RULES_NOT_CHECKED]
    return errors + validate_rules(value, schema, old=old)


def validate_rules(
    value: Any, schema: Schema | None, *, old: Any = cel.MISSING
) -> list[FieldError]:
    """Evaluate `x-kubernetes-validations` rules (the subset cel.py understands)."""
    errors: list[FieldError] = []
    if schema is not None:
        _rules(value, schema, old, "", errors, _facts(schema).rules)
    return errors


def _rules(
    value: Any,
    schema: Schema,
    old: Any,
    path: str,
    errors: list[FieldError],
    has_rules: dict[int, bool],
) -> None:
    if value is None or not has_rules.get(id(schema), True):
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        if cel.evaluate(str(rule.get("rule", "")), value, old) is False:
            errors.append(_rule_error(rule, value, path))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) or (additional if isinstance(additional, dict) else None)
            if sub is not None:
                before = old.get(key, cel.MISSING) if isinstance(old, dict) else cel.MISSING
                _rules(item, sub, before, f"{path}.{key}" if path else key, errors, has_rules)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _rules(item, schema["items"], cel.MISSING, f"{path}[{i}]", errors, has_rules)


def _rule_error(rule: dict[str, Any], value: Any, path: str) -> FieldError:
    message = rule.get("message") or f"failed rule: {rule.get('rule', '')}"
    if rule.get("fieldPath"):
        path = f"{path}{rule['fieldPath']}" if path else str(rule["fieldPath"]).lstrip(".")
    reason = rule.get("reason") or "FieldValueInvalid"
    prefix = {
        "FieldValueForbidden": "Forbidden",
        "FieldValueRequired": "Required value",
        "FieldValueDuplicate": "Duplicate value",
    }.get(reason)
    if prefix:
        return FieldError(reason, path, f"{prefix}: {message}")
    if isinstance(value, (dict, list)):  # see e2e/README.md "Known divergences"
        type_name = "object" if isinstance(value, dict) else "array"
        return FieldError("FieldValueInvalid", path, f'Invalid value: "{type_name}": {message}')
    return invalid(path, value, message)  # a scalar shows its value, as kube-apiserver 1.36
