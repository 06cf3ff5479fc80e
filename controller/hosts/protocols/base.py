"""The one small interface every admin protocol implements (load, unload, list, health)."""

from __future__ import annotations

from typing import Any, Protocol

from controller.hosts.client import HostClient, HostError


class AdminProtocol(Protocol):
    """How the controller manages one kind of inference daemon.

    Contract: every method speaks to the host only through `client` (which enforces the
    network guard and never follows redirects) and raises `HostError` with one line saying
    what failed, never more of the host's answer than the protocol needs. `health` returns
    when the daemon answers as a healthy one; `list` returns the names of the models it
    serves now (loaded, ready to answer); `load` makes `model` served (for a `modelRef`,
    `source` is the Model's spec.source) and may take minutes; `unload` stops serving it.
    A protocol whose daemon cannot load (`can_load` False) raises HostError from both.
    `normalize` maps a model name to the form the daemon compares names in.
    """

    name: str
    can_load: bool

    def normalize(self, model: str) -> str: ...

    def health(self, client: HostClient) -> None: ...

    def list(self, client: HostClient) -> list[str]: ...

    def load(self, client: HostClient, model: str, *, source: str | None) -> None: ...

    def unload(self, client: HostClient, model: str) -> None: ...


def model_ids(answer: Any, *, path: str) -> list[str]:
    """The `id`s of an OpenAI `GET /v1/models` answer (`{"data": [{"id": ...}]}`)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise HostError(f"GET {path} answered without a `data` list of models")
    return [str(m["id"])[:253] for m in data if isinstance(m, dict) and m.get("id")][:256]
