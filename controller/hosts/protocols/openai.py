"""`openai`: any OpenAI-compatible server (llama.cpp, vLLM, LM Studio...): static.

The server serves what it was started with; the controller reads that from
`GET /v1/models` (also its health check) and cannot load or unload anything: an
InferenceModel is placed only on hosts that already list its model.
"""

from __future__ import annotations

from controller.hosts.client import HostClient, HostError
from controller.hosts.protocols.base import model_ids

MODELS = "/v1/models"


class OpenAIProtocol:
    """A static OpenAI-compatible server."""

    name = "openai"
    can_load = False

    def normalize(self, model: str) -> str:
        """Names compare as they are."""
        return model

    def health(self, client: HostClient) -> None:
        """`GET /v1/models` answers with a model list."""
        model_ids(client.request("GET", MODELS), path=MODELS)

    def list(self, client: HostClient) -> list[str]:
        """The ids of `GET /v1/models`."""
        return model_ids(client.request("GET", MODELS), path=MODELS)

    def load(self, client: HostClient, model: str, *, source: str | None) -> None:
        """An OpenAI-compatible server cannot be asked to load a model."""
        raise HostError(f'the openai protocol cannot load models; start the server with "{model}"')

    def unload(self, client: HostClient, model: str) -> None:
        """Nor to unload one."""
        raise HostError("the openai protocol cannot unload models")
