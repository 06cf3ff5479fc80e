"""`inferenced`: dormlab's inference daemon for Apple Silicon (github.com/dormlab/inferenced).

Its README documents an OpenAI-compatible surface and that the operator loads a model with
`POST /admin/models`. So: health and list are `GET /v1/models`; load is
`POST /admin/models` with `{"model": "<name>"}` (for a `modelRef`, also `"source"`, the
Model's spec.source). The request body's shape and the unload call,
`DELETE /admin/models/<name>`, are not in the README's public part: they are this
module's assumption (docs/serving.md says so). Tested against a stand-in written from that
description (tests/controller/hosts/inferenced_standin.py), not against a real inferenced.
"""

from __future__ import annotations

from urllib.parse import quote

from controller.hosts.client import HostClient
from controller.hosts.protocols.openai import OpenAIProtocol


class InferencedProtocol(OpenAIProtocol):
    """An inferenced daemon: the OpenAI surface, and loads models on `POST /admin/models`."""

    name = "inferenced"
    can_load = True

    def load(self, client: HostClient, model: str, *, source: str | None) -> None:
        """`POST /admin/models`."""
        body = {"model": model, **({"source": source} if source else {})}
        client.request("POST", "/admin/models", body)

    def unload(self, client: HostClient, model: str) -> None:
        """`DELETE /admin/models/<name>`."""
        client.request("DELETE", f"/admin/models/{quote(model, safe='')}")
