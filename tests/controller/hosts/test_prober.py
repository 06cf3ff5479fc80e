"""The host prober: health checks on an interval, admin calls in the background.

Real: the prober's threads and timing, the real guard, HTTP to stand-in daemons in network
namespaces (standins.py, written from Ollama's public API document: no real Ollama runs
here). Faked: nothing; the interval is shortened (0.2 s) and the threshold is 2.
Skips with one line where namespaces cannot be made (not root); fails instead in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.core.fleets.health import HostTarget
from controller.core.fleets.settings import FleetSettings
from controller.hosts.prober import HostProber
from e2e.fixtures import eventually
from tests.controller.hosts.spaces import stand_in

pytestmark = pytest.mark.requires_service  # network namespaces (root), stand-ins
SETTINGS = FleetSettings(health_interval=0.2, failure_threshold=2, request_timeout=2)


@pytest.fixture
def told() -> list[str]:
    return []


@pytest.fixture
def prober(told: list[str]) -> Iterator[HostProber]:
    checking = HostProber(SETTINGS, notify=told.append)
    checking.start()
    yield checking
    checking.stop()


def target(endpoint: str, name: str = "gpu-1") -> HostTarget:
    return HostTarget("fleet", name, endpoint, "ollama")


def test_a_host_is_ready_with_its_address_and_models_after_one_check(
    prober: HostProber, told: list[str], tmp_path: Path
) -> None:
    with stand_in(10, "ollama", library=["llama3"], workdir=tmp_path) as ollama:
        prober.track("fleet", [target(ollama.endpoint)])

        health = eventually(lambda: prober.health("fleet", "gpu-1"), timeout=10)

        assert health.ready and health.failures == 0
        assert (health.address, health.port, health.models) == (ollama.space.address, 11434, ())
        assert health.last_seen is not None
        assert told and set(told) == {"fleet"}


def test_a_host_turns_not_ready_after_the_failure_threshold(
    prober: HostProber, tmp_path: Path
) -> None:
    with stand_in(11, "ollama", library=[], workdir=tmp_path) as ollama:
        prober.track("fleet", [target(ollama.endpoint)])
        eventually(lambda: (h := prober.health("fleet", "gpu-1")) and h.ready, timeout=10)
        ollama.stop()

        health = eventually(
            lambda: (h := prober.health("fleet", "gpu-1")) and not h.ready and h, timeout=10
        )

    assert health.failures >= SETTINGS.failure_threshold
    assert health.last_error == "GET /api/version: connection refused"


def test_a_load_runs_once_in_the_background_and_the_next_check_lists_the_model(
    prober: HostProber, tmp_path: Path
) -> None:
    with stand_in(12, "ollama", library=["llama3"], workdir=tmp_path) as ollama:
        host = target(ollama.endpoint)
        prober.track("fleet", [host])
        eventually(lambda: (h := prober.health("fleet", "gpu-1")) and h.ready, timeout=10)
        for _ in range(3):  # asked three times while the first is in flight or just done
            prober.load(host, "llama3", source=None)

        eventually(lambda: prober.ops("fleet", "gpu-1")["llama3"].phase == "done", timeout=10)
        health = eventually(
            lambda: (h := prober.health("fleet", "gpu-1")) and h.models and h, timeout=10
        )

        assert health.models == ("llama3:latest",)
        pulls = [r for r in ollama.requests() if r["path"] == "/api/pull"]
    assert len(pulls) == 1


def test_a_failed_load_is_recorded_with_the_hosts_words(prober: HostProber, tmp_path: Path) -> None:
    with stand_in(13, "ollama", library=[], workdir=tmp_path) as ollama:
        host = target(ollama.endpoint)
        prober.track("fleet", [host])
        prober.load(host, "nope", source=None)

        state = eventually(
            lambda: (
                (op := prober.ops("fleet", "gpu-1").get("nope")) and op.phase == "failed" and op
            ),
            timeout=10,
        )

    assert (
        state.message
        == "POST /api/pull answered HTTP 500: pull model manifest: file does not exist"
    )


def test_a_host_in_a_denied_network_is_refused_and_never_connected(tmp_path: Path) -> None:
    denying = HostProber(SETTINGS.with_denied(("198.18.0.0/15",)), notify=lambda _ns: None)
    denying.start()
    try:
        with stand_in(14, "ollama", library=[], workdir=tmp_path) as ollama:
            denying.track("fleet", [target(ollama.endpoint)])

            health = eventually(lambda: denying.health("fleet", "gpu-1"), timeout=10)

            assert health.refused_reason == "AddressNotAllowed" and not health.ready
            assert health.refused is not None and "DENIED_CIDRS" in health.refused
            assert ollama.requests() == []
    finally:
        denying.stop()
