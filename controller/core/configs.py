"""An InferenceConfig's own status: is it usable, as far as the config alone can tell?

A config is checked when it changes, not only when a run uses it, so a config that
no run can use says why at once (`kubectl get icfg` shows `Accepted`). The checks are
the ones that need no run: the spec parses, the image and ServiceAccount are
allowed, and every Secret it names is in its own namespace. A run checks them again
against its own namespace (`controller.core.resolve`).
"""

from __future__ import annotations

from datetime import datetime

from contracts.config import InferenceConfigStatus
from controller.core import conditions as cond
from controller.core.podpolicy import PodPolicy, pod_problems
from controller.core.ports import Obj
from controller.core.resolve import parse_config_spec
from controller.core.secretrefs import secret_uses
from controller.core.settings import Settings
from controller.core.status import accepted_want
from controller.core.validation import (
    Problem,
    foreign_secret_problems,
    image_problem,
    service_account_problem,
)


def config_problem(config: Obj, settings: Settings) -> Problem | None:
    """The first problem that makes this config unusable by any run, or None."""
    spec = parse_config_spec(config)
    if isinstance(spec, Problem):
        return Problem(spec.field.removeprefix("config."), spec.reason, spec.message)
    namespace = str((config.get("metadata") or {}).get("namespace") or "")
    problems = [
        image_problem(spec.image or settings.default_runner_image, allowed=settings.allowed_images),
        service_account_problem(
            spec.pod.service_account_name or settings.runner_service_account,
            allowed=settings.allowed_service_accounts,
            default=settings.runner_service_account,
        ),
        *foreign_secret_problems(secret_uses(spec), run_namespace=namespace),
        *pod_problems(spec, PodPolicy.of(settings)),
    ]
    return next((p for p in problems if p is not None), None)


def config_status(config: Obj, settings: Settings, *, now: datetime) -> InferenceConfigStatus:
    """The config's status: `Accepted` with the observed generation."""
    try:
        previous = InferenceConfigStatus.model_validate(config.get("status") or {})
    except ValueError:
        previous = InferenceConfigStatus()
    generation = int((config.get("metadata") or {}).get("generation") or 0)
    wants = [accepted_want(config_problem(config, settings))]
    return InferenceConfigStatus(
        observed_generation=generation,
        conditions=cond.resolve(previous.conditions, wants, now=now, generation=generation),
    )
