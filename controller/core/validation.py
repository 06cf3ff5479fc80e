"""Semantic checks the schemas cannot express: cron syntax, time zones, and the names an
Indexed Job gives its pods.

Shared by the reconciler (which turns a failure into a condition such as
`InvalidSchedule`) and by `longrun validate` (which prints it), so both agree.
Kubernetes' CronJob accepts standard 5-field cron and the @-macros only, so we
refuse croniter's extensions (seconds, years, `H` hashing) that the API server
would reject later.
"""

from __future__ import annotations

import fnmatch
import re
import zoneinfo
from dataclasses import dataclass
from datetime import datetime

from croniter import CroniterBadDateError, croniter

from contracts.base import DNS_LABEL
from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from contracts.storage_rules import sharing_problem
from controller.core.names import cron_job_name, job_name
from controller.core.secretrefs import SecretUse

CRON_MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


@dataclass(frozen=True)
class Problem:
    """A user error: the field path, a CamelCase reason and a sentence a person can act on."""

    field: str
    reason: str
    message: str


# What Kubernetes' cron parser (robfig/cron ParseStandard) takes in a field: lists of
# `*`, `?`, N or N-M (numbers in the field's range, or three-letter names for months and
# weekdays), each with an optional /STEP. croniter also takes L, W, `#`, H and weekday 7,
# which the API server refuses.
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_CRON_PART = re.compile(r"^(\*|\?|(\w+)(-(\w+))?)(/(\d+))?$")
_CRON_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {
        m: i + 1
        for i, m in enumerate(
            ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
        )
    },
    {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])},
)


def _is_standard_field(field: str, index: int) -> bool:
    low, high = _CRON_RANGES[index]
    for part in field.split(","):
        match = _CRON_PART.match(part.upper())
        if match is None or match.group(6) == "0":
            return False
        for bound in (match.group(2), match.group(4)):
            if bound is None:
                continue
            value = _CRON_NAMES[index].get(bound, int(bound) if bound.isdigit() else -1)
            if not low <= value <= high:
                return False
    return True


def schedule_problem(schedule: str) -> str | None:
    """Why `schedule` is not a cron expression Kubernetes accepts, or None when it is."""
    text = schedule.strip()
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        return f'"{schedule}" embeds a time zone; use spec.timeZone instead'
    if text in CRON_MACROS:
        return None
    fields = text.split()
    if (
        len(fields) != 5
        or not all(_is_standard_field(f, i) for i, f in enumerate(fields))
        or not croniter.is_valid(text)
    ):
        return (
            f'"{schedule}" is not a valid cron expression '
            "(five fields: minute hour day-of-month month day-of-week, or @hourly/@daily/...)"
        )
    if not fires(text):
        return (
            f'"{schedule}" never fires: the day of the month it names never occurs in the '
            "months it names (like February 30)"
        )
    return None


# Any date fires within 8 years of any start (February 29 every 4 or 8 years), so a search
# from a fixed instant is enough: pure, no clock.
_FIRES_FROM = datetime(2001, 1, 1)


def fires(schedule: str) -> bool:
    """True when a syntactically valid schedule has a next time (`0 0 30 2 *` has none)."""
    try:
        croniter(schedule, _FIRES_FROM).get_next(datetime)
    except (CroniterBadDateError, ValueError):
        return False
    return True


def time_zone_problem(time_zone: str) -> str | None:
    """Why `time_zone` is not an IANA time zone name, or None when it is."""
    try:
        zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f'"{time_zone}" is not a known IANA time zone (e.g. Europe/Rome, UTC)'
    return None


# A CronJob names each execution's Job `<CronJob name>-<minutes since 1970>`: 8 digits until
# the year 2160.
SCHEDULED_SUFFIX = "-" + "9" * 8
_DNS_LABEL = re.compile(DNS_LABEL)
DNS_LABEL_MAX = 63


def parallelism_problem(spec: InferenceRunSpec, run_name: str) -> Problem | None:
    """Why the Job of a run spread over pods would be refused, or None.

    The Job controller names each pod of an Indexed Job's host `<Job name>-<index>`, so the API
    server refuses an Indexed Job unless `<Job name>-<completions - 1>` is a DNS label (at
    most 63 lowercase letters, digits and "-"); a scheduled run's Jobs are named by its
    CronJob (`SCHEDULED_SUFFIX`), and the CronJob controller would fail to create each one.
    """
    if spec.parallelism == 1:
        return None
    base = cron_job_name(run_name) if spec.is_scheduled else job_name(run_name)
    suffix = (SCHEDULED_SUFFIX if spec.is_scheduled else "") + f"-{spec.parallelism - 1}"
    host = base + suffix
    if len(host) <= DNS_LABEL_MAX and _DNS_LABEL.match(host):
        return None
    room = DNS_LABEL_MAX - len(suffix)  # a longer name is cut to fit its own limit, no more
    return Problem(
        "spec.parallelism",
        "InvalidParallelism",
        f"{spec.parallelism} pods make each execution an Indexed Job, whose pods Kubernetes "
        f'names after it up to "{host}": not a DNS label (at most {DNS_LABEL_MAX} lowercase '
        f'letters, digits and "-"); name the run with at most {max(room, 1)} of those, '
        "without dots, or lower spec.parallelism",
    )


def shared_output_problem(
    spec: InferenceRunSpec, config_spec: InferenceConfigSpec, *, config: str
) -> Problem | None:
    """Why the config's outputs cannot take a run over several pods, or None: the contract
    refuses them (contracts/storage_rules.py `sharing_problem`), so the Job is never made."""
    if spec.parallelism == 1:
        return None
    storage = config_spec.storage
    why = sharing_problem(storage.output, storage.errors, pods=spec.parallelism)
    if why is None:
        return None
    return Problem(
        "spec.parallelism",
        "OutputNotShareable",
        f'InferenceConfig "{config}" cannot serve a run over several pods: spec.storage.{why}; '
        "change the config, or set spec.parallelism to 1",
    )


def run_spec_problems(spec: InferenceRunSpec, run_name: str | None = None) -> list[Problem]:
    """Every semantic problem of a run spec, in field order (with the run's name: also those
    that come of its name)."""
    problems: list[Problem] = []
    if spec.schedule is not None and (msg := schedule_problem(spec.schedule)):
        problems.append(Problem("spec.schedule", "InvalidSchedule", msg))
    if spec.time_zone is not None:
        if spec.schedule is None:
            problems.append(
                Problem("spec.timeZone", "InvalidTimeZone", "timeZone needs spec.schedule")
            )
        elif msg := time_zone_problem(spec.time_zone):
            problems.append(Problem("spec.timeZone", "InvalidTimeZone", msg))
    if run_name is not None and (problem := parallelism_problem(spec, run_name)):
        problems.append(problem)
    return problems


def image_problem(image: str, *, allowed: tuple[str, ...]) -> Problem | None:
    """A problem when `image` matches none of the `allowed` globs (empty allows any)."""
    if not allowed or any(fnmatch.fnmatchcase(image, pattern) for pattern in allowed):
        return None
    return Problem(
        "spec.image",
        "ImageNotAllowed",
        f'image "{image}" is not allowed by the controller (ALLOWED_IMAGES, chart value '
        f"runner.allowedImages: {', '.join(allowed)}); use an allowed image or ask the "
        "platform team to add it to runner.allowedImages",
    )


def service_account_problem(
    name: str | None, *, allowed: tuple[str, ...], default: str | None
) -> Problem | None:
    """A problem when the runner ServiceAccount is neither the default nor allowed."""
    if name is None or name == default:
        return None
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed):
        return None
    return Problem(
        "spec.pod.serviceAccountName",
        "ServiceAccountNotAllowed",
        f'serviceAccount "{name}" is not allowed by the controller '
        "(ALLOWED_SERVICE_ACCOUNTS); remove it or ask the operator to allow it",
    )


def foreign_secret_problems(uses: list[SecretUse], *, run_namespace: str) -> list[Problem]:
    """Secret references into another namespace than the run's: longrun never follows them."""
    return [
        Problem(
            use.field,
            "SecretInOtherNamespace",
            f'the endpoint Secret "{use.name}" is referenced in namespace "{use.namespace}", '
            f'but a run may only read Secrets in its own namespace "{run_namespace}": put the '
            f'endpoint Secret in namespace "{run_namespace}" and drop endpointRef.namespace '
            "(or set it to the run's namespace)",
        )
        for use in uses
        if use.namespace and use.namespace != run_namespace
    ]
