"""Find a run's config and decide whether the pair may run: every user error lives here.

The order of checks is the order a person fixes things in: the run's own spec (and the
priorities it names), the config reference (missing, or in a namespace that does not allow
this run), the config, then the controller's allow-lists and the Secret-namespace rule.
Each failure is a `Problem` with a CamelCase reason that becomes the `Accepted`
condition; none is retried until the run or the config changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pydantic import ValidationError

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.builders import ObjectIdentity, Resolved, image_of, service_account_of
from controller.core.jobs import Obj
from controller.core.kueue.policy import priority_problems
from controller.core.podpolicy import PodPolicy, pod_problems
from controller.core.secretrefs import secret_uses
from controller.core.serving import uses
from controller.core.settings import Settings
from controller.core.validation import (
    Problem,
    foreign_secret_problems,
    image_problem,
    run_spec_problems,
    service_account_problem,
    shared_output_problem,
)

ConfigLookup = Callable[[str, str], Obj | None]


def identity(obj: Obj) -> ObjectIdentity:
    """Name, namespace, UID and generation of an object."""
    meta = obj.get("metadata") or {}
    return ObjectIdentity(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation") or 0),
    )


def parse_run_spec(run: Obj) -> tuple[InferenceRunSpec | None, Problem | None]:
    """The run's spec, or the problem that makes it unreadable."""
    try:
        return InferenceRunSpec.model_validate(run.get("spec") or {}), None
    except ValidationError as exc:
        return None, Problem("spec", "InvalidSpec", _first_error(exc))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg"))


def find_config(run: Obj, spec: InferenceRunSpec, lookup: ConfigLookup) -> Obj | Problem:
    """The referenced config, or ConfigNotFound / ConfigNotAllowed. A config in another
    namespace that does not allow the run's gets the same answer whether it exists or not:
    nothing tells what another namespace holds."""
    run_ns = identity(run).namespace
    ref = spec.config_ref
    namespace = ref.namespace or run_ns
    config = lookup(namespace, ref.name)
    allowed = ((config or {}).get("spec") or {}).get("allowedNamespaces") or []
    if namespace != run_ns and (config is None or run_ns not in allowed):
        return Problem(
            "spec.configRef",
            "ConfigNotAllowed",
            f'InferenceConfig "{namespace}/{ref.name}" does not exist, or does not list '
            f'namespace "{run_ns}" in spec.allowedNamespaces; the run starts when it does',
        )
    if config is None:
        return Problem(
            "spec.configRef",
            "ConfigNotFound",
            f'InferenceConfig "{namespace}/{ref.name}" does not exist; create it and the run '
            "starts",
        )
    return config


def parse_config_spec(config: Obj) -> InferenceConfigSpec | Problem:
    """The config's spec, or InvalidConfig."""
    try:
        return InferenceConfigSpec.model_validate(config.get("spec") or {})
    except ValidationError as exc:
        return Problem("config.spec", "InvalidConfig", _first_error(exc))


def check(resolved: Resolved, settings: Settings) -> Problem | None:
    """The first semantic problem of a run with its config, or None."""
    problems = [
        image_problem(image_of(resolved, settings), allowed=settings.allowed_images),
        service_account_problem(
            service_account_of(resolved, settings),
            allowed=settings.allowed_service_accounts,
            default=settings.runner_service_account,
        ),
        *foreign_secret_problems(
            secret_uses(resolved.config_spec), run_namespace=resolved.run.namespace
        ),
        *pod_problems(resolved.config_spec, PodPolicy.of(settings)),
        shared_output_problem(resolved.spec, resolved.config_spec, config=resolved.config.name),
    ]
    return next((p for p in problems if p is not None), None)


def resolve(
    run: Obj,
    spec: InferenceRunSpec,
    *,
    lookup: ConfigLookup,
    settings: Settings,
    deployments: ConfigLookup = lambda _ns, _name: None,
) -> Resolved | Problem:
    """The run with its config, validated; or the first problem a user must fix (or, for a
    config's model.deploymentRef, the deployment the run waits for: serving/uses.py)."""
    # The run's own problems come first: they need no config, and a user who creates the
    # config the run waits for should not learn only then that the run itself is wrong.
    own = [*run_spec_problems(spec, identity(run).name), *priority_problems(spec, settings)]
    if own:
        return own[0]
    config = find_config(run, spec, lookup)
    if isinstance(config, Problem):
        return config
    config_spec = parse_config_spec(config)
    if isinstance(config_spec, Problem):
        return config_spec
    resolved = Resolved(identity(run), spec, identity(config), config_spec)
    return check(resolved, settings) or _with_deployment(resolved, config, deployments)


def _with_deployment(
    resolved: Resolved, config: Obj, deployments: ConfigLookup
) -> Resolved | Problem:
    """The run with its config's deploymentRef replaced by what the deployment serves."""
    target = uses.target_of(config)
    if target is None:
        return resolved
    found = uses.with_deployment(
        resolved.config_spec,
        config,
        deployments(target.namespace, target.name),
        run_namespace=resolved.run.namespace,
        scheduled=resolved.spec.is_scheduled,
    )
    return found if isinstance(found, Problem) else replace(resolved, config_spec=found)
