"""The plugin registry, backoff and rate limiter, and progress lines.

Real: runners.registry over the contracts' table of built-ins and the installed entry
points, runners.retry, runners.progress, and the entry points shown in docs/custom-runner.md
checked against the contract's schema. Faked: the installed entry points where a test needs
none or a duplicate, module imports where a test needs a missing dependency, and clocks (no
sleeping, no timed assertions).
"""

from __future__ import annotations

import io
import json
import random
import re
import threading
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from contracts import plugins
from contracts.config import RunnerTuning
from contracts.model import BUILTIN_PROTOCOLS, ModelEndpoint
from contracts.storage import BUILTIN_KINDS
from runners import registry
from runners.api import ConfigError, TransientError
from runners.progress import Progress
from runners.retry import Backoff, RateLimiter, RequestPolicy, Stopped, call_with_retry
from runners.storage.file import FileBackend


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[metadata.EntryPoint]]:
    """The entry points the installed packages declare: none unless a test adds some."""
    eps: list[metadata.EntryPoint] = []
    monkeypatch.setattr(
        plugins.metadata, "entry_points", lambda group: [e for e in eps if e.group == group]
    )
    plugins.entry_points.cache_clear()
    yield eps
    plugins.entry_points.cache_clear()


def test_builtins_come_from_the_contracts_table_without_entry_points(
    installed: list[metadata.EntryPoint],
) -> None:
    assert registry.storage_backends.names() == sorted(BUILTIN_KINDS)
    assert registry.model_protocols.names() == sorted(BUILTIN_PROTOCOLS)
    assert registry.storage_backend("file") is FileBackend
    for name in BUILTIN_PROTOCOLS:
        assert callable(registry.model_protocol(name))


def test_duplicate_entry_points_are_rejected(installed: list[metadata.EntryPoint]) -> None:
    installed += [
        metadata.EntryPoint("dup", "a.mod:A", plugins.STORAGE_GROUP),
        metadata.EntryPoint("dup", "b.mod:B", plugins.STORAGE_GROUP),
    ]
    with pytest.raises(
        ConfigError, match=r"'dup' is registered more than once .*a\.mod:A, b\.mod:B"
    ):
        registry.storage_backend("dup")


def test_an_entry_point_clashing_with_a_builtin_is_rejected(
    installed: list[metadata.EntryPoint],
) -> None:
    installed.append(metadata.EntryPoint("sql", "other.sql:SqlBackend", plugins.STORAGE_GROUP))
    with pytest.raises(ConfigError, match=r"'sql' is registered more than once"):
        registry.storage_backend("sql")


def test_same_target_seen_twice_is_not_a_duplicate(installed: list[metadata.EntryPoint]) -> None:
    ep = metadata.EntryPoint("file", "runners.storage.file:FileBackend", plugins.STORAGE_GROUP)
    installed += [ep, ep]  # an editable install seen through two paths, naming the built-in
    assert registry.storage_backend("file") is FileBackend


def test_missing_optional_dependency_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_boto3(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'boto3'", name="boto3")

    monkeypatch.setattr(registry.importlib, "import_module", no_boto3)
    with pytest.raises(
        ConfigError, match=r"needs the 'boto3' package: pip install 'longrun\[runner\]'"
    ):
        registry.storage_backend("s3")


def test_unknown_name_lists_known_ones_and_the_group() -> None:
    with pytest.raises(
        ConfigError, match=r"no storage backend registered for 'nope' \(known: .*file"
    ):
        registry.storage_backend("nope")


def test_register_replaces_and_unregister_restores() -> None:
    reg = registry.Registry(
        plugins.STORAGE_GROUP, builtins={"file": "runners.storage.file:FileBackend"}
    )
    reg.register("file", dict)
    assert reg.load("file") is dict
    reg.unregister("file")
    assert reg.load("file") is FileBackend


def test_env_hook_registers_module_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        registry.PLUGINS_ENV, "longrun.storage:local=runners.storage.file:FileBackend"
    )
    assert registry.Registry(plugins.STORAGE_GROUP).load("local") is FileBackend


def test_malformed_env_hook_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.PLUGINS_ENV, "local=FileBackend")
    with pytest.raises(ConfigError, match="is not 'group:name=module:Class'"):
        registry.Registry(plugins.STORAGE_GROUP).load("local")


def test_protocol_names_in_the_custom_runner_guide_pass_contract_validation() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "custom-runner.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", guide, flags=re.S)
    names = [
        name
        for block in blocks
        for name in tomllib.loads(block)
        .get("project", {})
        .get("entry-points", {})
        .get(plugins.PROTOCOLS_GROUP, {})
    ]
    assert names
    for name in names:
        ModelEndpoint.model_validate({"protocol": name, "url": "http://m", "name": "m"})


def test_backoff_is_full_jitter_below_the_exponential_cap() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0, max_attempts=9, rng=random.Random(1))
    for attempt, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 4.0)]:
        delays = [backoff.delay(attempt) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap / 2  # spread, not a constant


def test_retry_after_wins_but_is_capped() -> None:
    backoff = Backoff(initial=0.5, maximum=10.0)
    assert backoff.delay(1, retry_after=3.0) == 3.0
    assert backoff.delay(1, retry_after=3600.0) == 10.0


def test_call_with_retry_gives_up_after_max_attempts() -> None:
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise TransientError("503", retry_after=0)

    with pytest.raises(TransientError):
        call_with_retry(failing, backoff=Backoff(max_attempts=3), stop=threading.Event())
    assert len(calls) == 3


def test_call_with_retry_stops_when_stop_is_set() -> None:
    stop = threading.Event()
    stop.set()

    def failing() -> None:
        raise TransientError("503")

    with pytest.raises(Stopped):
        call_with_retry(failing, backoff=Backoff(initial=100), stop=stop)


class RecordingEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return False


def test_rate_limiter_spaces_requests_by_the_interval() -> None:
    now = [100.0]
    limiter = RateLimiter(4.0, clock=lambda: now[0])
    stop = RecordingEvent()
    for _ in range(3):
        limiter.acquire(stop)
    assert stop.waits == [0.25, 0.5]


def test_default_backoff_is_the_contracts_default_tuning() -> None:
    default, tuned = Backoff(), Backoff.from_tuning(RunnerTuning())
    assert (default.initial, default.maximum, default.max_attempts) == (
        tuned.initial,
        tuned.maximum,
        tuned.max_attempts,
    )


def test_request_policy_follows_the_runner_tuning_and_paces_each_call() -> None:
    tuning = RunnerTuning(max_attempts=3, initial_backoff_seconds=0.2, requests_per_second=4)
    policy = RequestPolicy.from_tuning(tuning)
    assert (policy.backoff.initial, policy.backoff.max_attempts) == (0.2, 3)
    assert policy.limiter is not None
    assert RequestPolicy.from_tuning(RunnerTuning()).limiter is None
    calls = iter([TransientError("busy", retry_after=0), "ok"])

    def flaky() -> str:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert policy.call(flaky) == "ok"


def test_progress_counts_a_total_function_on_its_own_thread() -> None:
    release, now = threading.Event(), [0.0]

    def slow_total() -> int:
        release.wait(10)
        return 1000

    progress = Progress(interval=60, total=slow_total, stream=io.StringIO(), clock=lambda: now[0])
    progress.start()
    progress.add(100)
    now[0] = 10.0
    assert progress.line() == "progress: records=100 rate=10.0/s"  # not counted yet, not waited
    release.set()
    assert progress.counted.wait(10)
    progress.stop()
    assert progress.line() == "progress: records=100 rate=10.0/s total=1000 eta=90s"


def test_progress_leaves_the_eta_out_when_counting_fails() -> None:
    def broken_total() -> int:
        raise OSError("input vanished")

    progress = Progress(interval=60, total=broken_total, stream=io.StringIO(), clock=lambda: 1.0)
    progress.start()
    assert progress.counted.wait(10)  # an exception escaping the thread fails the test (-W error)
    progress.stop()
    assert progress.total is None
    assert "eta" not in progress.line()


def test_progress_line_has_count_rate_and_eta() -> None:
    now = [0.0]
    progress = Progress(
        interval=1, total=1000, done_before=100, stream=io.StringIO(), clock=lambda: now[0]
    )
    progress.add(300)
    now[0] = 10.0
    assert progress.line() == "progress: records=400 rate=30.0/s total=1000 eta=20s"


def test_progress_report_says_tokens_and_tokens_per_second_for_openai_runs() -> None:
    now, tokens = [0.0], [500]  # 500 tokens committed by an earlier pod
    progress = Progress(
        interval=1,
        total=None,
        stream=io.StringIO(),
        clock=lambda: now[0],
        counts=lambda: (10, 10, 0),
        tokens=lambda: tokens[0],
    )
    tokens[0], now[0] = 2500, 10.0
    report = json.loads(progress.report())["longrunProgress"]
    assert (report["tokens"], report["tokenRate"]) == (2500, 200.0)
    plain = Progress(interval=1, total=None, stream=io.StringIO(), clock=lambda: 1.0)
    assert "tokens" not in json.loads(plain.report())["longrunProgress"]
