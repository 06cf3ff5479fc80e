"""The server's limits and namespace policy (flags of `longrun batch-api`, chart values)."""

from __future__ import annotations

from dataclasses import dataclass

# OpenAI's own limits for a batch input file: 200 MB and 50,000 requests.
DEFAULT_MAX_FILE_BYTES = 200 * 1000 * 1000
DEFAULT_MAX_REQUESTS = 50_000
MAX_WINDOW_HOURS = 24 * 7


@dataclass(frozen=True)
class ApiSettings:
    """How big a file may be, how many requests it may hold, which namespaces are served."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_requests: int = DEFAULT_MAX_REQUESTS
    # The namespace of a request that names none (no /namespaces/<ns> path, no
    # OpenAI-Organization header, not a ServiceAccount's token); None: such a request is refused.
    default_namespace: str | None = None
    # Only these namespaces are served (a file store on a claim of one namespace); empty: all.
    namespaces: tuple[str, ...] = ()

    def serves(self, namespace: str) -> bool:
        """True when this server keeps files and batches for `namespace`."""
        return not self.namespaces or namespace in self.namespaces
