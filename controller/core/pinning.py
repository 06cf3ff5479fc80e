"""A config in another namespace cannot change what runs in this one: runs pin it.

Secrets, PVCs and the ServiceAccount resolve in the run's namespace. If edits to a
shared config (`allowedNamespaces`) flowed into the runs that use it, the config's
owner could run another image, or send this namespace's credentials elsewhere,
without any right here. So a run that uses a config from another namespace is
rendered from the config version it accepted (`status.acceptedConfig`: uid and
generation), and a later change waits, shown by the `ConfigCurrent` condition and a
Warning event, until the run's owner accepts it by editing the run:
`spec.configRef.generation: <new generation>`. A config deleted and created again
(a new uid) is a change too.

A config in the run's own namespace is followed as it changes (whoever may edit it
may edit the run too), unless the run names `spec.configRef.generation` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.run import AcceptedConfig
from controller.core.conditions import Want
from controller.core.status import Observed
from controller.core.validation import Problem


@dataclass(frozen=True)
class Pin:
    """Whether to render from the current config, and what the status records and shows."""

    follow: bool
    accepted: AcceptedConfig | None
    want: Want | None = None  # the ConfigCurrent condition, for pinned runs
    problem: Problem | None = None  # why nothing can start, when the change is not accepted


def config_pin(obs: Observed) -> Pin:
    """The pin of a run on its (resolved, present) config."""
    assert obs.config is not None
    meta = obs.config.get("metadata") or {}
    current = AcceptedConfig(
        uid=str(meta.get("uid") or ""), generation=int(meta.get("generation") or 0)
    )
    wanted = obs.spec.config_ref.generation
    run_ns = str((obs.run.get("metadata") or {}).get("namespace") or "")
    if meta.get("namespace") == run_ns and wanted is None:
        return Pin(follow=True, accepted=current)
    accepted = obs.previous.accepted_config
    if _accepts(obs, accepted, current, wanted):
        return Pin(follow=True, accepted=current, want=Want("ConfigCurrent", True, "Accepted"))
    return _waiting(obs, accepted, current, wanted)


def _accepts(
    obs: Observed, accepted: AcceptedConfig | None, current: AcceptedConfig, wanted: int | None
) -> bool:
    if accepted == current:
        return True
    if accepted is None:  # the run's creator accepts the config as it is, or as named
        return wanted in (None, current.generation)
    # Only an edit of the run by its owner accepts a change: a spec the status has not seen.
    edited = obs.generation != obs.previous.observed_generation
    return edited and wanted == current.generation


def _waiting(
    obs: Observed, accepted: AcceptedConfig | None, current: AcceptedConfig, wanted: int | None
) -> Pin:
    meta = (obs.config or {}).get("metadata") or {}
    name = f'InferenceConfig "{meta.get("namespace")}/{meta.get("name")}"'
    if accepted is None:
        text = (
            f"{name} is at generation {current.generation}, but spec.configRef.generation says "
            f"{wanted}; set it to {current.generation} to accept the config as it is"
        )
    else:
        was = f"generation {accepted.generation}"
        if accepted.uid != current.uid:
            was += " of a config since deleted and created again"
        text = (
            f"{name} changed since this run accepted it ({was}, now generation "
            f"{current.generation}); this run keeps running what it accepted. Review the "
            f"change, then set spec.configRef.generation: {current.generation} on this run"
        )
    want = Want("ConfigCurrent", False, "ConfigChangeNotAccepted", text)
    return Pin(
        follow=False,
        accepted=accepted,
        want=want,
        problem=Problem("spec.configRef.generation", "ConfigChangeNotAccepted", text),
    )
