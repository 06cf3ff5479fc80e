"""Runs that use a ModelDeployment: the config's `model.deploymentRef`, both ways. Pure.

Run side: a config's `model.deploymentRef` is replaced, when the run is rendered, by what
the deployment's status says (endpoint, protocol, model name, API-key Secret; for
`concurrency: auto`, its slots times ready replicas as the start), so the contract and the
runner only ever see a resolved `url`. A one-shot run waits (Pending,
`Accepted=False` with reason DeploymentNotAvailable) while the deployment is not
Available, and fails when its `timeoutSeconds` pass first; a scheduled run needs only the
endpoint to make its CronJob (an on-demand deployment is scaled up while an execution
runs, and the runner's retries cover its start).

Deployment side: which runs use a deployment now, for on-demand scaling. A run counts only
while it is admitted and live: its reconcile records the ModelDeployment it was admitted to
in `status.modelDeployment` (`admitted_to`: the deployment allows the run's namespace), and
`is_active` says whether it runs or waits for it now; the deployment counts only the runs
of namespaces it allows at that moment (`allowed_runs`). So a refused run never scales
another namespace's deployment, and never shows in its `status.activeRuns`.

Namespaces, as for configs (controller/core/pinning.py, docs/security.md): the
deploymentRef resolves in the config's namespace by default; a deployment in another
namespace than the run's must list the run's namespace in `spec.allowedNamespaces`, and
its key Secret, which a run cannot read across namespaces, must then be replaced by a
Secret of the run's own namespace (`model.auth.secretRef`) or by the runner's own
ServiceAccount token (`model.auth.serviceAccountToken`: no key to copy; the deployment must
accept the token, `auth.oidc`). A config's own `model.auth` always wins over the deployment's
key Secret, which is then neither mounted nor sent. The reference is part of the config,
so a change of it in a shared config waits for the run's owner like any config change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ValidationError

from contracts.auth import ApiKeyAuth
from contracts.base import SecretKeyRef
from contracts.config import InferenceConfigSpec, RunnerTuning
from contracts.llm import run_problem
from contracts.model import ModelBlock
from contracts.run import InferenceRunStatus
from contracts.serving import API_KEY_SECRET_KEY, ModelDeploymentStatus
from controller.core import conditions as cond
from controller.core.conditions import find
from controller.core.fleets.uses import as_deployment_status
from controller.core.jobs import parse_time
from controller.core.pinning import config_pin
from controller.core.ports import Obj
from controller.core.status import Observed
from controller.core.validation import Problem

# Reasons a run waits for, until its timeout (the others are user errors: they wait for a fix).
WAIT_REASONS = frozenset({"DeploymentNotFound", "DeploymentNotAllowed", "DeploymentNotAvailable"})
# Queued (Kueue holds the Job): its deployment stays up, so the run finds it serving when admitted.
ACTIVE_PHASES = frozenset({"Pending", "Queued", "Running"})
# A run refused for one of these was allowed to use the deployment: it waits for it to be up.
ADMITTED_REASONS = frozenset({"DeploymentNotAvailable"})


@dataclass(frozen=True)
class Target:
    """Where a config's deploymentRef points: the deployment's namespace and name (and kind:
    a ModelDeployment, or an InferenceModel served by external hosts)."""

    namespace: str
    name: str
    kind: str = "ModelDeployment"

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def target_of(config: Obj) -> Target | None:
    """The deployment a config's `model.deploymentRef` names (default namespace: the
    config's), or None when the config calls a URL."""
    model = (config.get("spec") or {}).get("model")
    ref = model.get("deploymentRef") if isinstance(model, dict) else None
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    namespace = ref.get("namespace") or _meta(config).get("namespace", "")
    return Target(str(namespace), str(ref["name"]), str(ref.get("kind") or "ModelDeployment"))


def deployment_of(run: Obj) -> str | None:
    """The deployment (`namespace/name`) a run was admitted to use (`status.modelDeployment`)."""
    value = (run.get("status") or {}).get("modelDeployment")
    return str(value) if value else None


def is_active(run: Obj) -> bool:
    """True while a run uses the deployment it was admitted to: a one-shot run not finished,
    suspended or cancelled (queued counts: the deployment stays up for it), a scheduled run
    while one of its executions runs.

    Only an admitted run counts (`status.modelDeployment`, set by the run's reconcile once
    the deployment allows the run's namespace): a new run not yet looked at, a refused run
    (DeploymentNotAllowed, ConfigNotAllowed, an invalid config, a config change not accepted,
    ...) and a run being deleted never scale a deployment."""
    if _meta(run).get("deletionTimestamp") or deployment_of(run) is None:
        return False
    spec, status = run.get("spec") or {}, run.get("status") or {}
    if spec.get("schedule"):
        conditions = status.get("conditions") or []
        return any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions)
    if spec.get("cancel") or spec.get("suspend"):
        return False
    return status.get("phase") in ACTIVE_PHASES


def admitted_to(found: object, config: Obj | None) -> str | None:
    """The ModelDeployment a run's resolve (`Resolved` or `Problem`) admitted it to: its
    config's deploymentRef once the deployment allows the run, Available or not yet (the wait
    that scales an on-demand deployment up). None for a refusal, a config that calls a URL or
    an InferenceModel (external hosts: nothing to scale)."""
    target = target_of(config) if config is not None else None
    if target is None or target.kind != "ModelDeployment":
        return None
    if isinstance(found, Problem) and found.reason not in ADMITTED_REASONS:
        return None
    return target.key


def scheduled_use(obs: Observed, found: object) -> str | None:
    """The deployment a scheduled run uses: the one the config version its CronJob runs
    admitted it to (while a change of a shared config waits, the accepted version's)."""
    if obs.problem is not None or obs.config is None:
        return None
    if obs.cron_job is not None and not config_pin(obs).follow:
        return obs.previous.model_deployment
    return admitted_to(found, obs.config)


def started_use(obs: Observed) -> str | None:
    """The deployment a started one-shot run uses: the one it was admitted to. A run started
    before runs recorded it (status.modelDeployment) counts for its config's deploymentRef
    if the config is still the version the run accepted."""
    previous = obs.previous
    if previous.model_deployment is not None or obs.config is None:
        return previous.model_deployment
    meta, accepted = obs.config.get("metadata") or {}, previous.accepted_config
    unchanged = accepted is not None and (accepted.uid, accepted.generation) == (
        meta.get("uid"),
        meta.get("generation"),
    )
    return admitted_to(None, obs.config) if unchanged else None


def allowed_runs(deployment: Obj, runs: Iterable[str]) -> tuple[str, ...]:
    """Of the runs (`namespace/name`) that use a deployment, those whose namespace it allows
    now (its own, or one of spec.allowedNamespaces as stored): a namespace taken off the list
    stops counting at once, before its runs are looked at again."""
    own = _meta(deployment).get("namespace")
    allowed = (deployment.get("spec") or {}).get("allowedNamespaces") or []
    return tuple(r for r in runs if r.partition("/")[0] == own or r.partition("/")[0] in allowed)


def finished_at(run: Obj) -> datetime | None:
    """When a run's last execution ended, if it did."""
    return parse_time((run.get("status") or {}).get("completionTime"))


# -- the run side ---------------------------------------------------------------------------


def with_deployment(
    spec: InferenceConfigSpec,
    config: Obj,
    deployment: Obj | None,
    *,
    run_namespace: str,
    scheduled: bool,
) -> InferenceConfigSpec | Problem:
    """The config spec with its deploymentRef resolved from the deployment's status, or the
    problem (waiting or a user error). Configs that call a URL come back unchanged."""
    block, target = spec.model, target_of(config)
    if block is None or block.deployment_ref is None or target is None:
        return spec
    status = _check(target, deployment, block, run_namespace=run_namespace)
    if isinstance(status, Problem):
        return status
    foreign = target.namespace != run_namespace
    problem = _availability(target, status, require_available=not scheduled, foreign=foreign)
    if problem is not None:
        return problem
    assert status.endpoint and status.protocol and status.model_name
    auth = None
    if status.api_key_secret:
        key = SecretKeyRef(name=status.api_key_secret, key=API_KEY_SECRET_KEY)
        auth = ApiKeyAuth(secret_ref=key)
    try:
        resolved = block.with_target(
            url=status.endpoint, protocol=status.protocol, name=status.model_name, auth=auth
        )
    except ValidationError as exc:  # body settings the deployment's protocol refuses
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        return Problem("spec.model", "InvalidConfig", message)
    storage = spec.storage
    wrong = run_problem(
        resolved,
        resolved.protocol,
        storage_input=storage.input,
        outputs={"output": storage.output, "errors": storage.errors},
        runner=spec.runner,
    )
    if wrong is not None:  # e.g. an openai-batch input and a deployment serving KServe
        return Problem("spec", "InvalidConfig", wrong)
    return spec.model_copy(update={"model": resolved, "runner": _auto_start(spec.runner, status)})


def _auto_start(tuning: RunnerTuning, status: ModelDeploymentStatus) -> RunnerTuning:
    """`concurrency: auto` starts from the slots the deployment declares times its ready
    replicas (within maxConcurrency), unless the config says where to start."""
    slots, ready = status.slots_per_replica, status.ready_replicas
    if not tuning.is_auto or tuning.initial_concurrency is not None or not slots or not ready:
        return tuning
    start = min(slots * ready, tuning.concurrency_cap)
    return tuning.model_copy(update={"initial_concurrency": start})


def _check(
    target: Target, deployment: Obj | None, block: ModelBlock, *, run_namespace: str
) -> ModelDeploymentStatus | Problem:
    where = f'{target.kind} "{target.key}"'
    if deployment is not None and _meta(deployment).get("deletionTimestamp"):
        deployment = None
    foreign = target.namespace != run_namespace
    if foreign and not _allows(deployment, run_namespace):
        # The same answer whether it exists or not: nothing about another namespace leaks.
        message = (
            f'{where} does not exist, or does not list namespace "{run_namespace}" in '
            "spec.allowedNamespaces; the run starts when it does"
        )
        return Problem("spec.model.deploymentRef", "DeploymentNotAllowed", message)
    if deployment is None:
        message = f"{where} does not exist; create it and the run starts"
        return Problem("spec.model.deploymentRef", "DeploymentNotFound", message)
    try:
        status = (
            as_deployment_status(deployment)
            if target.kind == "InferenceModel"
            else ModelDeploymentStatus.model_validate(deployment.get("status") or {})
        )
    except ValidationError:
        message = f"{where} has a status longrun cannot read; the run starts when it is Available"
        return Problem("spec.model.deploymentRef", "DeploymentNotAvailable", message)
    if status.token_audiences and not status.api_key_secret and block.auth is None:
        audiences = ", ".join(status.token_audiences)
        message = (
            f"{where} accepts only signed tokens (auth.oidc, no API keys): set "
            f"model.auth.serviceAccountToken.audience to one of its audiences ({audiences}), "
            "or a token Secret in model.auth.secretRef"
        )
        return Problem("spec.model.auth", "TokenRequired", message)
    if not foreign:
        return status
    if status.api_key_secret and block.auth is None:
        message = (
            f'{where} keeps its API key in Secret "{status.api_key_secret}" of namespace '
            f'"{target.namespace}", and a run reads Secrets of its own namespace only: put the '
            f'key into a Secret in "{run_namespace}" and name it in model.auth.secretRef, or '
            "send the runner's ServiceAccount token (model.auth.serviceAccountToken) if the "
            "deployment accepts it (auth.oidc)"
        )
        return Problem("spec.model.auth", "SecretInOtherNamespace", message)
    return status


def _allows(deployment: Obj | None, namespace: str) -> bool:
    # Read as the API server stored it (a spec the controller refuses is not Available anyway).
    allowed = ((deployment or {}).get("spec") or {}).get("allowedNamespaces") or []
    return deployment is not None and isinstance(allowed, list) and namespace in allowed


def _availability(
    target: Target, status: ModelDeploymentStatus, *, require_available: bool, foreign: bool
) -> Problem | None:
    known = bool(status.endpoint and status.protocol and status.model_name)
    available = find(status.conditions, "Available")
    is_up = available is not None and available.status == "True"
    if known and (is_up or not require_available):
        return None
    phase = status.phase or "not reconciled yet"
    # Another namespace's status message is its owner's (it may name their Model's source).
    said = f"{phase}: {status.message}" if status.message and not foreign else phase
    message = (
        f'waiting for {target.kind} "{target.key}" to become Available ({said}); the run '
        "starts when it is, or fails when spec.timeoutSeconds pass first"
    )
    return Problem("spec.model.deploymentRef", "DeploymentNotAvailable", message)


def is_waiting(problem: Problem | None) -> bool:
    """True for the problems a run waits out (until its timeout) rather than a user error."""
    return problem is not None and problem.reason in WAIT_REASONS


def gave_up(previous: InferenceRunStatus) -> bool:
    """True for a one-shot run that failed waiting for its deployment: it never starts."""
    failed = find(previous.conditions, "Failed")
    return (
        previous.phase == "Failed"
        and not previous.job_name
        and failed is not None
        and failed.reason in WAIT_REASONS
    )


def wait_deadline(run: Obj, timeout_seconds: int | None) -> datetime | None:
    """When a waiting run gives up: `timeoutSeconds` after its creation (None: never)."""
    created = parse_time(_meta(run).get("creationTimestamp"))
    if timeout_seconds is None or created is None:
        return None
    return created + timedelta(seconds=timeout_seconds)


def waited_too_long(
    status: InferenceRunStatus,
    problem: Problem,
    *,
    deadline: datetime | None,
    generation: int,
    now: datetime,
) -> tuple[InferenceRunStatus, float | None]:
    """A waiting run's status (Failed once `deadline` passed), and when to look again."""
    if deadline is None:
        return status, None
    if now < deadline:
        return status, (deadline - now).total_seconds()
    message = f"{problem.message.split('; the run starts')[0]}: gave up after spec.timeoutSeconds"
    wants = [
        cond.Want("Accepted", False, problem.reason, f"{problem.field}: {problem.message}"),
        cond.Want("Running", False, problem.reason),
        cond.Want("Complete", False, problem.reason),
        cond.Want("Failed", True, problem.reason, message),
    ]
    failed = status.model_copy(
        update={
            "phase": "Failed",
            "message": message,
            "completion_time": now,
            "conditions": cond.resolve(status.conditions, wants, now=now, generation=generation),
        }
    )
    return failed, None


def waiting_status(
    status: InferenceRunStatus,
    problem: Problem | None,
    *,
    run: Obj,
    timeout_seconds: int | None,
    generation: int,
    now: datetime,
) -> tuple[InferenceRunStatus, float | None]:
    """A one-shot run's status while it waits for its deployment (Failed after its
    timeout), and when to look again; any other status passes through."""
    if problem is None or not is_waiting(problem):
        return status, None
    deadline = wait_deadline(run, timeout_seconds)
    return waited_too_long(status, problem, deadline=deadline, generation=generation, now=now)
