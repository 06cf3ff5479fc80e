"""e2e.fixtures.eventually: the polling helper every emulator and e2e test waits with.

Nothing is faked but the polled function: the exceptions are the official client's own.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException, NotFoundException

from e2e.fixtures import eventually


def appears_after(failures: int, error: Exception) -> object:
    calls = iter(range(failures + 1))

    def read() -> str:
        if next(calls) < failures:
            raise error
        return "found"

    return read


def test_eventually_retries_a_not_found_until_the_object_appears() -> None:
    # The client raises NotFoundException, a subclass: a 404 before a controller has made
    # the object is the race this helper exists for.
    read = appears_after(3, NotFoundException(status=404, reason="Not Found"))
    assert eventually(read, timeout=2.0, interval=0.001) == "found"  # type: ignore[arg-type]


def test_eventually_retries_any_api_exception() -> None:
    read = appears_after(2, ApiException(status=409, reason="Conflict"))
    assert eventually(read, timeout=2.0, interval=0.001) == "found"  # type: ignore[arg-type]


def test_eventually_gives_up_naming_the_last_error() -> None:
    def never() -> str:
        raise NotFoundException(status=404, reason="Not Found")

    with pytest.raises(
        AssertionError, match=r"condition not met within 0\.05s; last result: NotFoundException"
    ):
        eventually(never, timeout=0.05, interval=0.01)


def test_eventually_lets_an_unexpected_error_through_at_once() -> None:
    calls: list[int] = []

    def broken() -> str:
        calls.append(1)
        raise RuntimeError("bug in the test")

    with pytest.raises(RuntimeError, match="bug in the test"):
        eventually(broken, timeout=2.0)
    assert len(calls) == 1
