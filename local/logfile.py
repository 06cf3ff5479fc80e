"""A local container's output, line by line, into a file (`longrun serve`'s server logs)."""

from __future__ import annotations

import threading
from pathlib import Path


class LogFile:
    """A container's output, line by line, into a file (never on the terminal: no key there
    either way, but a server's chatter is not the command's)."""

    def __init__(self, path: Path) -> None:
        self._handle = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, _stream: str, line: str) -> None:
        with self._lock:
            self._handle.write(line + "\n")
            self._handle.flush()

    def close(self) -> None:
        self._handle.close()
