"""Structural-schema handling for custom resources: prune, default, validate.

The real server decodes a CR, drops fields its CRD schema does not declare
(unless `x-kubernetes-preserve-unknown-fields`), applies `default`s, then
validates. A controller that writes a field its CRD forgot will see it vanish on
a real cluster, so the emulator does the same, in the same order and with the
same error texts. CEL rules (`x-kubernetes-validations`) are not evaluated.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from . import cel
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


def apply_defaults(obj: Any, schema: Schema | None) -> Any:
    """Set `default` on missing properties, top-down, recursing into the results."""
    if schema is None:
        return obj
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if (
                obj.get(key, None) is None
                and "default" in sub
                and not (key in obj and sub.get("nullable"))
            ):
                obj[key] = copy.deepcopy(sub["default"])
        for key, value in obj.items():
            sub = props.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                obj[key] = apply_defaults(value, sub)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(v, schema["items"]) for v in obj]
    return obj


def drop_nulls(obj: Any, schema: Schema | None) -> Any:
    """Remove nulls on non-nullable fields before defaulting (real server since 1.20)."""
    if schema is None or not isinstance(obj, dict):
        return obj
    props = schema.get("properties") or {}
    for key in list(obj):
        sub = props.get(key)
        if sub is None and isinstance(schema.get("additionalProperties"), dict):
            sub = schema["additionalProperties"]
        if sub is None:
            continue
        if obj[key] is None and not sub.get("nullable"):
            del obj[key]
        else:
            obj[key] = drop_nulls(obj[key], sub)
    return obj


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
    """Validate a value against a structural schema; returns field errors."""
    if schema is None:
        return []
    errors: list[FieldError] = []
    _check(obj, schema, path, errors)
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
    if schema.get("anyOf") and all(validate(value, s, path=path) for s in schema["anyOf"]):
        errors.append(
            invalid(path, value, f"{path} in body must match at least one schema in anyOf")
        )
    if schema.get("oneOf"):
        ok = sum(1 for s in schema["oneOf"] if not validate(value, s, path=path))
        if ok != 1:
            errors.append(
                invalid(
                    path,
                    value,
                    f"{path} in body must validate one and only one schema (oneOf)",
                )
            )
    if schema.get("not") and not validate(value, schema["not"], path=path):
        errors.append(invalid(path, value, f"{path} in body must not validate the schema (not)"))


def _check_type(value: Any, schema: Schema, path: str, errors: list[FieldError]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, str) or _TYPE_CHECK["integer"](value):
            return True
        errors.append(
            type_invalid(
                path,
                value,
                f"{path} in body must be of type integer,string: {_tname(value)}",
            )
        )
        return False
    typ = schema.get("type")
    if typ and typ in _TYPE_CHECK and not _TYPE_CHECK[typ](value):
        errors.append(
            type_invalid(path, value, f"{path} in body must be of type {typ}: {_tname(value)}")
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
                    f"Too many: {n}: must have at most {schema['maxProperties']} items",
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
    if fmt == "date-time" and not re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value
    ):
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
                f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
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


_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}


def validate_rules(
    value: Any, schema: Schema | None, *, old: Any = cel.MISSING
) -> list[FieldError]:
    """Evaluate `x-kubernetes-validations` rules (the subset cel.py understands)."""
    errors: list[FieldError] = []
    if schema is not None:
        _rules(value, schema, old, "", errors)
    return errors


def _rules(value: Any, schema: Schema, old: Any, path: str, errors: list[FieldError]) -> None:
    if value is None:
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
                _rules(item, sub, before, f"{path}.{key}" if path else key, errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _rules(item, schema["items"], cel.MISSING, f"{path}[{i}]", errors)


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
    type_name = _TYPE_NAMES.get(type(value), "number")
    return FieldError("FieldValueInvalid", path, f'Invalid value: "{type_name}": {message}')
