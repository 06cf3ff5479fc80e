"""Startup and readiness probes, as the kubelet's prober runs them.

A probe (`httpGet` or `tcpSocket`; `exec` and `grpc` are not run here and count as
passing) goes to the pod's address, at the port given by number or by the name of one of
the probed container's own ports (as the kubelet resolves it: a name only another
container has is an error, so the probe fails). `httpGet` passes on 200 to 399, `tcpSocket`
when the connection opens. Timing is the pod's: the first check after
`initialDelaySeconds`, then one every `periodSeconds`, each within `timeoutSeconds`;
`failureThreshold` failures in a row fail it, `successThreshold` successes pass it.

Until the startup probe passes, the container is not `started` and readiness is not
probed; once it passes, readiness is probed at once (rather than a period later) and then
on its own period. A startup probe that fails its threshold gets the container killed and
restarted, as the kubelet does. No readiness probe: ready once started. Liveness probes
are not run.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Check = Callable[[Obj], bool]


def resolve_port(container: Obj, port: int | str) -> int | None:
    """A probe's port: a number, or the name of one of the container's own ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for own in container.get("ports") or []:
        if own.get("name") == port:
            return int(own["containerPort"])
    return None


def probe_once(probe: Obj, *, container: Obj, host: str) -> bool:
    """Run one check of `probe` against `host`; True when it passes."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = resolve_port(container, get.get("port", 80))
        if port is None:
            return False
        headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
        return _http(host, port, str(get.get("path") or "/"), headers, timeout)
    if "tcpSocket" in probe:
        port = resolve_port(container, probe["tcpSocket"].get("port", 0))
        return port is not None and _tcp(host, port, timeout)
    return True


def _http(host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> bool:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "kube-probe/1.36", **headers})
        return 200 <= conn.getresponse().status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _tcp(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class _Schedule:
    """One probe's counters and when it runs next."""

    probe: Obj
    due: float
    successes: int = 0
    failures: int = 0

    def record(self, ok: bool, now: float) -> None:
        self.successes, self.failures = (self.successes + 1, 0) if ok else (0, self.failures + 1)
        self.due = now + float(self.probe.get("periodSeconds") or 10)

    @property
    def passed(self) -> bool:
        return self.successes >= int(self.probe.get("successThreshold") or 1)

    @property
    def failed(self) -> bool:
        return self.failures >= int(self.probe.get("failureThreshold") or 3)


@dataclass
class ContainerProbes:
    """The probes of one running container instance; `tick()` runs what is due."""

    container: Obj
    host: str
    check: Check | None = None
    started: bool = False
    ready: bool = False
    startup_failed: bool = False
    _startup: _Schedule | None = field(default=None, init=False)
    _readiness: _Schedule | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        now = time.monotonic()
        if (startup := self.container.get("startupProbe")) is not None:
            self._startup = _Schedule(startup, now + float(startup.get("initialDelaySeconds", 0)))
        else:
            self.started = True
        if (readiness := self.container.get("readinessProbe")) is not None:
            delay = float(readiness.get("initialDelaySeconds", 0))
            self._readiness = _Schedule(readiness, now + delay)
        else:
            self.ready = self.started

    def tick(self) -> bool:
        """Run the probes that are due; True when `started` or `ready` changed."""
        before = (self.started, self.ready)
        now = time.monotonic()
        if not self.started and self._startup is not None and now >= self._startup.due:
            self._startup.record(self._run(self._startup.probe), now)
            self.started = self._startup.passed
            self.startup_failed = not self.started and self._startup.failed
            if self.started and self._readiness is not None:
                self._readiness.due = now  # readiness starts with the container started
        if self.started and self._readiness is None:
            self.ready = True
        elif self.started and self._readiness is not None and now >= self._readiness.due:
            self._readiness.record(self._run(self._readiness.probe), now)
            if self._readiness.passed:
                self.ready = True
            elif self._readiness.failed:
                self.ready = False
        return (self.started, self.ready) != before

    def _run(self, probe: Obj) -> bool:
        if self.check is not None:
            return self.check(probe)
        return probe_once(probe, container=self.container, host=self.host)
