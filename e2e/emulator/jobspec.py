"""Validation of a Job's counts, completion mode, per-index back-off and failure policy.

The rules and their wording follow kube-apiserver's pkg/apis/batch/validation
(validateJobSpec, validatePodFailurePolicyRule, ValidateJobSpecUpdate), in its order, so
a Job the controller builds is refused here exactly when, and as, a cluster refuses it.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, invalid, not_supported, required

Obj = dict[str, Any]
MAX_INDEXED_PARALLELISM = 100_000  # maxParallelismForIndexedJob
MAX_FAILED_INDEXES = 100_000  # maxFailedIndexesForIndexedJob
COMPLETIONS_SOFT_LIMIT = 100_000  # above it, backoffLimitPerIndex needs tighter limits
HIGH_COMPLETIONS_LIMIT = 10_000  # parallelism and maxFailedIndexes then
INDEXED_PARALLELISM = "must be less than or equal to 100000 when completion mode is Indexed"
HIGH_COMPLETIONS = (
    "must be less than or equal to 10000 when completions are above 100000 and used with "
    "backoff limit per index"
)
ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
NON_NEGATIVE = ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes")  # fmt: skip
IMMUTABLE = ("completionMode", "podFailurePolicy", "backoffLimitPerIndex")  # after the template


def validate_counts(spec: Obj, path: str, *, template: bool = False) -> list[FieldError]:
    """Every rule of a JobSpec but the pod template's; a CronJob's job `template` is not
    defaulted, so it may omit completionMode."""
    errors: list[FieldError] = []
    for field in NON_NEGATIVE:
        value = spec.get(field)
        if value is not None and value < (1 if field == "activeDeadlineSeconds" else 0):
            errors.append(invalid(f"{path}.{field}", value, "must be greater than or equal to 0"))
    if spec.get("maxFailedIndexes") is not None and spec.get("backoffLimitPerIndex") is None:
        errors.append(
            required(f"{path}.backoffLimitPerIndex", "when maxFailedIndexes is specified")
        )
    mode = spec.get("completionMode")
    if mode not in ("NonIndexed", "Indexed") and not (template and mode is None):
        errors.append(not_supported(f"{path}.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed":
        errors += _indexed(spec, path)
    else:
        for field in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if spec.get(field) is not None:
                errors.append(
                    invalid(f"{path}.{field}", spec[field], "requires indexed completion mode")
                )
    return errors + _failure_policy(spec, f"{path}.podFailurePolicy")


def _indexed(spec: Obj, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    completions, parallelism = spec.get("completions"), spec.get("parallelism")
    most = spec.get("maxFailedIndexes")
    if completions is None:
        errors.append(required(f"{path}.completions", "when completion mode is Indexed"))
    if parallelism is not None and parallelism > MAX_INDEXED_PARALLELISM:
        errors.append(invalid(f"{path}.parallelism", parallelism, INDEXED_PARALLELISM))
    if completions is not None and most is not None and most > completions:
        errors.append(
            invalid(f"{path}.maxFailedIndexes", most, "must be less than or equal to completions")
        )
    if most is not None and most > MAX_FAILED_INDEXES:
        errors.append(
            invalid(f"{path}.maxFailedIndexes", most, "must be less than or equal to 100000")
        )
    if completions is None or completions <= COMPLETIONS_SOFT_LIMIT:
        return errors
    if spec.get("backoffLimitPerIndex") is None:
        return errors
    if most is None:
        errors.append(
            required(
                f"{path}.maxFailedIndexes", "must be specified when completions is above 100000"
            )
        )
    if parallelism is not None and parallelism > HIGH_COMPLETIONS_LIMIT:
        errors.append(invalid(f"{path}.parallelism", parallelism, HIGH_COMPLETIONS))
    if most is not None and most > HIGH_COMPLETIONS_LIMIT:
        errors.append(invalid(f"{path}.maxFailedIndexes", most, HIGH_COMPLETIONS))
    return errors


def _failure_policy(spec: Obj, path: str) -> list[FieldError]:
    """Each rule's action: one of ACTIONS, and FailIndex only with backoffLimitPerIndex."""
    errors: list[FieldError] = []
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        action, where = rule.get("action"), f"{path}.rules[{i}].action"
        if not action:
            quoted = " ".join(f'"{a}"' for a in ACTIONS)  # Go's %q of a []string
            errors.append(required(where, f"valid values: [{quoted}]"))
        elif action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            errors.append(invalid(where, action, "requires the backoffLimitPerIndex to be set"))
        elif action not in ACTIONS:
            errors.append(not_supported(where, action, ACTIONS))
    return errors


def validate_job_update(new: Obj, old: Obj) -> list[FieldError]:
    """Fields a Job keeps for life (completions too, unless Indexed); maxFailedIndexes may
    change."""
    fields = ["selector", "template", *IMMUTABLE]
    if new["spec"].get("completionMode") != "Indexed":
        fields.insert(0, "completions")
    return [
        invalid(f"spec.{field}", new["spec"].get(field), "field is immutable")
        for field in fields
        if new["spec"].get(field) != old["spec"].get(field)
    ]
