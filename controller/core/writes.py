"""The writes a decision asks for: create, patch, delete (pure data).

One set for both reconcilers, generic in the kinds each may write: a run's decision
(`decide.py`) writes `ports.Kind`, a ModelDeployment's (`serving/decide.py`) writes
`serving.writes.ServingKind`. The act layers apply them through their own ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from controller.core.ports import Obj

K = TypeVar("K", bound=str)


@dataclass(frozen=True)
class Create(Generic[K]):
    """Create `body`; AlreadyExists means: read it, and keep it if it is ours (a Secret is
    never read: see serving/keys.py)."""

    kind: K
    body: Obj


@dataclass(frozen=True)
class Patch(Generic[K]):
    """Patch an object we own: a merge patch (dict) or a JSON patch (list)."""

    kind: K
    namespace: str
    name: str
    body: Obj | list[Obj]


@dataclass(frozen=True)
class Delete(Generic[K]):
    """Delete an object, only while it still has `uid`; `why` is for the log."""

    kind: K
    namespace: str
    name: str
    uid: str
    why: str = field(default="", compare=False)
