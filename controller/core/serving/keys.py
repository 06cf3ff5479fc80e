"""API keys, decided without ever reading the Secret that holds them.

The controller has no read access to Secrets (docs/security.md), so it cannot look at
the keys it made. What it must know about them is recorded in the deployment's status
(`status.apiKeys`: a random version, the count, the rotation request they were made
for), and the Secret is only ever written:

- no keys recorded yet: `create` it; AlreadyExists (ours from a pass whose status was
  lost, or someone else's) is answered with a JSON patch whose first op tests that the
  Secret's owner is this deployment, so a Secret that is not ours is never overwritten
  (the API server refuses the whole patch: NameConflict);
- a new rotation request or key count: the same owner-tested patch with new keys (a new
  count replaces every key: the old ones cannot be read to be kept); 404 means it was
  deleted, and it is created again;
- pods that cannot start (their containers wait in ContainerCreating or
  CreateContainerConfigError, as when the Secret is gone) make the controller try to
  `create` it: AlreadyExists says it is there, a success means it was missing and now
  holds new keys (reason SecretMissing).

Every new set of keys gets a new random version, which is the pod template's
`longrun.dev/api-keys-version`: the pods roll and pick the new keys up (llama.cpp and
nginx read them at start). `entropy` is the only randomness, so deciding stays pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from contracts.serving import ApiKeysStatus
from contracts.serving.deployment_status import KeysReason
from controller.core.ports import Obj
from controller.core.serving import auth, builders, names
from controller.core.serving.auth import Entropy
from controller.core.serving.observed import ServingObserved
from controller.core.serving.pods import may_lack_secret
from controller.core.serving.resolve import ServingResolved
from controller.core.serving.status import rollout_of
from controller.core.serving.writes import Write
from controller.core.writes import Create, Patch

VERSION_BYTES = 8


@dataclass(frozen=True)
class KeyPlan:
    """The Secret write (if any), the keys status after it, the pods' keys version, and
    whether the pods still accepting older keys must be stopped now (`revokes_old_keys`)."""

    writes: tuple[Write, ...]
    keys: ApiKeysStatus | None
    version: str | None  # None: auth is off
    revoke_old: bool = False


def plan_keys(
    obs: ServingObserved, r: ServingResolved, *, entropy: Entropy, now: datetime
) -> KeyPlan:
    """What to write into the key Secret this pass, and what status.apiKeys says then."""
    if not r.spec.auth.keys:
        return KeyPlan((), None, None)
    have = obs.previous.api_keys
    reason = new_keys_reason(obs, r, have)
    if reason is None:
        assert have is not None
        return KeyPlan((), have, have.version, revokes_old_keys(obs, r, have.version))
    count = r.spec.auth.key_count
    made = ApiKeysStatus(
        version=entropy(VERSION_BYTES).hex(),
        count=count,
        rotated_for=r.rotation,
        made_at=now,
        reason=reason,
    )
    body = builders.build_key_secret(r, auth.generate_keys(count, entropy))
    return KeyPlan((_write(obs, r, body, have),), made, made.version)


def new_keys_reason(
    obs: ServingObserved, r: ServingResolved, have: ApiKeysStatus | None
) -> KeysReason | None:
    """Why new keys are needed now (None: the recorded ones stand)."""
    if have is None:
        return "Created"
    if have.rotated_for != r.rotation:
        return "RotationRequested"
    if have.count != r.spec.auth.key_count:
        return "KeyCountChanged"
    if obs.secret_answer is None and may_lack_secret(obs.children.pods):
        return "SecretMissing"
    return None


def _write(
    obs: ServingObserved, r: ServingResolved, body: dict[str, object], have: ApiKeysStatus | None
) -> Write:
    replace = obs.secret_answer == "exists" or (
        have is not None and obs.secret_answer != "missing" and not _is_probe(obs, r, have)
    )
    if not replace:
        return Create("Secret", body)
    name = names.api_key_secret_name(r.owner.name)
    return Patch("Secret", r.owner.namespace, name, owner_tested_replace(body, obs.uid))


def _is_probe(obs: ServingObserved, r: ServingResolved, have: ApiKeysStatus) -> bool:
    return new_keys_reason(obs, r, have) == "SecretMissing"


def owner_tested_replace(body: dict[str, object], uid: str) -> list[dict[str, object]]:
    """A JSON patch replacing the keys that the API server applies only if the Secret's
    controller owner is `uid` (a failed `test` fails the whole patch with 422)."""
    metadata = body["metadata"]
    assert isinstance(metadata, dict)
    return [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": uid},
        {"op": "add", "path": "/metadata/annotations", "value": metadata["annotations"]},
        {"op": "add", "path": "/data", "value": body["data"]},
    ]


def serves_old_keys(pods: Sequence[Obj], version: str) -> bool:
    """True while a server pod that is not being stopped was started with keys older than
    `version` (its `longrun.dev/api-keys-version`): llama.cpp and nginx read the keys at
    start, so it still accepts them."""
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        had = (meta.get("annotations") or {}).get(names.KEYS_VERSION_ANNOTATION)
        stopped = meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed")
        if had and had != version and not stopped:
            return True
    return False


def revokes_old_keys(obs: ServingObserved, r: ServingResolved, version: str) -> bool:
    """Whether the window in which old keys still work must end now.

    New keys are in the Secret at once, but the pods started before accept the old ones
    until the rollout has replaced them: the window is the rollout. If the rollout stops
    (the Deployment's progress deadline passed, ProgressDeadlineExceeded) with such pods
    left, the window would never end; then the Deployment is switched to `Recreate`, which
    stops every old pod at once (nothing serves until new pods are ready), and back to its
    own strategy once they are gone. Once switched, it stays so while they serve: the
    Deployment's new generation reads as a rollout under way until its controller saw it.
    A deployment whose own strategy is Recreate stops its old pods itself."""
    deployment = obs.children.deployment
    if deployment is None or not serves_old_keys(obs.children.pods, version):
        return False
    if builders.rollout_strategy(r)["type"] == "Recreate":
        return False
    switched = ((deployment.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate"
    return switched or rollout_of(deployment).deadline_exceeded
