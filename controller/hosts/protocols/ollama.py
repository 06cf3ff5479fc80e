"""`ollama`: Ollama's documented API (github.com/ollama/ollama, docs/api.md).

- health: `GET /api/version`;
- list: `GET /api/ps`, the models loaded in memory (`models[].name`);
- load: `GET /api/tags` (pulled models); if absent, `POST /api/pull` (`stream: false`,
  waits until the pull ends), then `POST /api/generate` with no prompt, which loads the
  model, and `keep_alive: -1`, which keeps it loaded (Ollama's default unloads after five
  minutes idle); for a `modelRef` whose source is `hf://org/repo[/file]`, the pull is of
  `hf.co/org/repo` (Ollama's Hugging Face form) and `POST /api/copy` names it as the Model;
- unload: `POST /api/generate` with no prompt and `keep_alive: 0`.

Names without a tag mean `:latest`, as in Ollama. Tested against a stand-in written from
those documents (tests/controller/hosts/ollama_standin.py), not against a real Ollama.
"""

from __future__ import annotations

from typing import Any

from controller.hosts.client import HostClient, HostError


def _names(answer: Any, path: str) -> list[str]:
    models = answer.get("models") if isinstance(answer, dict) else None
    if not isinstance(models, list):
        raise HostError(f"GET {path} answered without a `models` list")
    return [str(m.get("name") or m.get("model"))[:253] for m in models if isinstance(m, dict)][:256]


class OllamaProtocol:
    """An Ollama server: pulls, loads and unloads models on request."""

    name = "ollama"
    can_load = True

    def normalize(self, model: str) -> str:
        """`llama3` is `llama3:latest`."""
        last = model.rsplit("/", 1)[-1]
        return model if ":" in last else f"{model}:latest"

    def health(self, client: HostClient) -> None:
        """`GET /api/version` answers with a version."""
        answer = client.request("GET", "/api/version")
        if not isinstance(answer, dict) or "version" not in answer:
            raise HostError("GET /api/version answered without a version")

    def list(self, client: HostClient) -> list[str]:
        """The models loaded in memory (`GET /api/ps`)."""
        return _names(client.request("GET", "/api/ps"), "/api/ps")

    def load(self, client: HostClient, model: str, *, source: str | None) -> None:
        """Pull `model` unless present, then load it and keep it loaded."""
        pulled = {
            self.normalize(n) for n in _names(client.request("GET", "/api/tags"), "/api/tags")
        }
        if self.normalize(model) not in pulled:
            self._pull(client, model, source)
        client.request("POST", "/api/generate", {"model": model, "keep_alive": -1})

    def _pull(self, client: HostClient, model: str, source: str | None) -> None:
        origin = _hugging_face(source) if source else None
        answer = client.request("POST", "/api/pull", {"model": origin or model, "stream": False})
        if isinstance(answer, dict) and answer.get("status") not in (None, "success"):
            raise HostError(f"POST /api/pull ended with status {str(answer.get('status'))[:80]}")
        if origin is not None:
            client.request("POST", "/api/copy", {"source": origin, "destination": model})

    def unload(self, client: HostClient, model: str) -> None:
        """Unload `model` now (`keep_alive: 0`)."""
        client.request("POST", "/api/generate", {"model": model, "keep_alive": 0})


def _hugging_face(source: str) -> str:
    """`hf.co/org/repo` for `hf://org/repo[/file][@rev]`; HostError for other sources."""
    if not source.startswith("hf://"):
        raise HostError(f"ollama pulls hf:// sources only, not {source.split('://', 1)[0]}://")
    org, _, rest = source.removeprefix("hf://").partition("/")
    repo = rest.split("/", 1)[0].split("@", 1)[0]
    return f"hf.co/{org}/{repo}"
