"""Fault injection: make chosen requests fail the way a loaded API server does.

Controllers must survive 409s, 429 with Retry-After, 5xx and dropped watches; the
only way to prove it is to produce them on demand. Rules are matched on the
Kubernetes verb and resource (`inferenceruns`, `inferenceruns/status`, ...) and
consumed one request at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .errors import REASONS, ApiError


@dataclass
class FaultRule:
    verb: str  # get/list/watch/create/update/patch/delete/deletecollection or "*"
    resource: str  # plural, "plural/subresource" or "*"
    status: int
    remaining: int
    retry_after: int | None = None
    namespace: str | None = None
    name: str | None = None
    message: str = ""

    def matches(self, *, verb: str, resource: str, namespace: str, name: str) -> bool:
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource)
            and self.namespace in (None, namespace)
            and self.name in (None, name)
        )

    def error(self) -> ApiError:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        message = self.message or f"injected fault: {REASONS.get(self.status, 'Error')}"
        details = {"retryAfterSeconds": self.retry_after} if self.retry_after is not None else {}
        return ApiError(self.status, message, details=details, headers=headers)


class Faults:
    """The test-facing fault controls of one emulator."""

    def __init__(self, *, drop_watches: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._drop_watches = drop_watches

    def fail_next(
        self,
        verb: str,
        resource: str,
        *,
        status: int,
        count: int = 1,
        retry_after: int | None = None,
        namespace: str | None = None,
        name: str | None = None,
        message: str = "",
    ) -> FaultRule:
        """Make the next `count` matching requests fail with `status`."""
        rule = FaultRule(verb, resource, status, count, retry_after, namespace, name, message)
        with self._lock:
            self._rules.append(rule)
        return rule

    def take(self, *, verb: str, resource: str, namespace: str, name: str) -> ApiError | None:
        """Consume and return the error for this request, if a rule matches."""
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(
                    verb=verb, resource=resource, namespace=namespace, name=name
                ):
                    rule.remaining -= 1
                    return rule.error()
            self._rules = [r for r in self._rules if r.remaining > 0]
        return None

    def drop_watches(self) -> None:
        """Cut every open watch connection, as a load balancer or apiserver restart does."""
        self._drop_watches()

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
