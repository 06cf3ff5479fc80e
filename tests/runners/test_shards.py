"""One run shared by several pods, through `longrun-runner`: each pod is one call of the CLI
with its `$JOB_COMPLETION_INDEX`, one after another, on one store.

Real: contract loading and validation, the CLI's exit codes and summaries, the pipeline,
runners/shards.py. Faked: the model (FakeModel registered as `kserve-v2`) and storage (the
memory backend registered as the custom kind `memory`). The storage contract suite
(storage_contract.py) runs pods at once, killed and replaced, on every real store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel, contract
from memory_backend import MemoryBackend, MemorySource, MemoryStore

from contracts.contract import CHUNK_RANGES, RunnerContract
from runners import cli, registry
from runners.api import ConfigError, InputRecord, Outcome, Prediction, RecordFailure, RunContext
from runners.budget import Budget
from runners.shards import Shard, early_excess


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(inputs=[{"n": i} for i in range(25)])


@pytest.fixture
def model() -> FakeModel:
    return FakeModel()


@pytest.fixture(autouse=True)
def plugins(store: MemoryStore, model: FakeModel) -> Iterator[None]:
    registry.storage_backends.register("memory", lambda: MemoryBackend(store))
    registry.model_protocols.register("kserve-v2", model.factory)
    yield
    registry.storage_backends.unregister("memory")
    registry.model_protocols.unregister("kserve-v2")


def pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any], index: int | str | None
) -> tuple[int, dict[str, Any]]:
    """One pod of the run: exit code and summary."""
    if index is None:
        monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    else:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", str(index))
    term = tmp_path / f"termination-{index}"
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(term))
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads(term.read_text())


def shared(pods: int, **runner: Any) -> dict[str, Any]:
    return contract(
        runner={"chunkSize": 4, **runner}, partitioning={"count": pods, "rule": "chunkRoundRobin"}
    )


def test_each_pod_commits_only_its_chunks_and_their_summaries_add_up_to_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, model: FakeModel
) -> None:
    doc = shared(3)
    summaries = []
    for index in range(3):
        before = set(store.chunks.get("out", {}))
        code, summary = pod(tmp_path, monkeypatch, doc, index)
        assert code == 0
        mine = set(store.chunks["out"]) - before
        assert mine and all(chunk % 3 == index for chunk in mine)
        summaries.append(summary)
    # 25 records in chunks of 4: chunks 0-6, the last of one record (pod 0's).
    assert [s["recordsWritten"] for s in summaries] == [9, 8, 8]
    assert [s["chunks"] for s in summaries] == [3, 2, 2]
    assert [s["runCompleted"] for s in summaries] == [False, False, True]  # the last to commit
    assert sorted(store.chunks["out"]) == list(range(7))
    assert store.manifests["out"] == {"recordsWritten": 25, "recordsFailed": 0, "chunks": 7}
    sent = sorted(int(r) for batch in model.batches for r in batch)
    assert sent == list(range(25))  # every record once, over the three pods


def test_ranged_pods_commit_contiguous_ranges_reading_only_theirs_and_add_up_to_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, model: FakeModel
) -> None:
    read: list[int] = []  # every position any pod read, ids before its range included
    records = MemorySource.records

    def counted(self: MemorySource, skip: int) -> Iterator[InputRecord]:
        for record in records(self, skip):
            read.append(record.position)
            yield record

    monkeypatch.setattr(MemorySource, "records", counted)
    doc = contract(runner={"chunkSize": 4}, partitioning={"count": 3, "rule": "chunkRanges"})
    summaries, ranges = [], []
    for index in range(3):
        before, read[:] = set(store.chunks.get("out", {})), []
        code, summary = pod(tmp_path, monkeypatch, doc, index)
        assert code == 0
        ranges.append(sorted(set(store.chunks["out"]) - before))
        mine = range(ranges[-1][0] * 4, min(ranges[-1][-1] * 4 + 4, 25))
        # Its range, and at most the one record its completion check looks for past the
        # committed chunks (runners/shards.py whole_run).
        assert sorted(read)[: len(mine)] == list(mine)
        assert [p for p in read if p not in mine] in ([], [(ranges[-1][-1] + 1) * 4])
        summaries.append(summary)
    # 25 records in chunks of 4: chunks 0-6 in ranges 0-1, 2-3 and 4-6.
    assert ranges == [[0, 1], [2, 3], [4, 5, 6]]
    assert [s["recordsWritten"] for s in summaries] == [8, 8, 9]
    assert store.manifests["out"] == {"recordsWritten": 25, "recordsFailed": 0, "chunks": 7}
    sent = sorted(int(r) for batch in model.batches for r in batch)
    assert sent == list(range(25))  # every record once, over the three pods


def test_a_ranged_pod_whose_input_changed_while_it_ran_exits_2_and_completes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, model: FakeModel
) -> None:
    # Index 2 of 3 (chunks 4 to the end of 25 records) sees five records added mid-run: a pod
    # that counted before the change and one that counted after would cut different ranges.
    def grows(batch: Any) -> list[Outcome]:
        if len(store.inputs) == 25:
            store.inputs.extend({"n": i} for i in range(25, 30))
        return [Prediction(r.id) for r in batch]

    model.handler = grows
    doc = contract(runner={"chunkSize": 4}, partitioning={"count": 3, "rule": "chunkRanges"})
    code, summary = pod(tmp_path, monkeypatch, doc, 2)
    assert code == 2
    assert (
        "the input changed while the run ran: 25 records when this pod started, 30 now"
        in (summary["reason"])
    )
    assert "out" not in store.manifests  # never presented as complete


def test_the_first_pods_to_finish_leave_the_output_incomplete(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: MemoryStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = shared(2)
    assert pod(tmp_path, monkeypatch, doc, 1)[0] == 0
    assert "out" not in store.manifests and "out-errors" not in store.manifests
    assert "index 1 of 2: done" in capsys.readouterr().err
    assert pod(tmp_path, monkeypatch, doc, 0)[0] == 0
    assert store.manifests["out"]["recordsWritten"] == 25
    assert "index 0 of 2: completing" in capsys.readouterr().err


def _grown_between_pods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, added: int
) -> list[tuple[int, dict[str, Any]]]:
    """Index 0 of 3 reads the 25 records (chunks of 4: its own are 0, 3 and 6, the last of
    one record); `added` records are appended; then indexes 1 and 2 read."""
    doc = shared(3)
    done = [pod(tmp_path, monkeypatch, doc, 0)]
    store.inputs.extend({"n": i} for i in range(25, 25 + added))
    return done + [pod(tmp_path, monkeypatch, doc, i) for i in (1, 2)]


def test_the_pod_that_finds_the_committed_chunks_hold_fewer_records_than_the_input_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore
) -> None:
    # 29 records: index 1 commits chunk 7 (position 28) and index 2 completes the prefix 0-7,
    # but chunk 6 holds the one record index 0 read where there are four now.
    done = _grown_between_pods(tmp_path, monkeypatch, store, 4)
    assert [code for code, _ in done] == [0, 0, 2]
    reason = done[2][1]["reason"]
    assert "the input changed while the run ran" in reason
    assert "committed chunks hold 26 records and the input has 29 now" in reason
    assert "delete it (or give the run a new output)" in reason
    assert "out" not in store.manifests  # never presented as complete


def test_round_robin_pods_that_leave_a_chunk_no_pod_read_all_exit_0_and_say_none_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore
) -> None:
    # 37 records: chunk 9 (position 36) is index 0's, which read 25. No pod finds the run
    # complete and each summary says so: the controller fails such a run
    # (controller/core/jobs.py `incomplete`), which its Job alone would call succeeded.
    done = _grown_between_pods(tmp_path, monkeypatch, store, 12)
    assert [code for code, _ in done] == [0, 0, 0]
    assert [summary["runCompleted"] for _, summary in done] == [False, False, False]
    assert "out" not in store.manifests


def test_a_one_pod_run_says_nothing_of_completing_a_shared_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore
) -> None:
    code, summary = pod(tmp_path, monkeypatch, contract(runner={"chunkSize": 4}), None)
    assert code == 0 and "runCompleted" not in summary
    assert store.manifests["out"]["recordsWritten"] == 25


def test_the_budget_is_judged_on_the_whole_run_by_the_pod_that_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, model: FakeModel
) -> None:
    # Two failures in each pod's share: within maxFailedRecords=3 for each, 6 for the run.
    def fails(records: Sequence[InputRecord]) -> list[Outcome]:
        return [RecordFailure("bad") if int(r.id) % 4 == 0 else Prediction(1) for r in records]

    model.handler = fails
    store.inputs = [{"n": i} for i in range(24)]
    doc = shared(3, maxFailedRecords=3)
    codes = [pod(tmp_path, monkeypatch, doc, index) for index in range(3)]
    assert [code for code, _ in codes[:2]] == [0, 0]
    code, summary = codes[2]
    assert code == 2  # final: the Job's podFailurePolicy fails the run at once
    assert "6 failed records of 24" in summary["reason"]
    assert "the whole run" in summary["reason"]
    assert "out" not in store.manifests  # never presented as complete


def test_a_pod_whose_own_failures_spend_the_whole_runs_budget_stops_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, model: FakeModel
) -> None:
    model.handler = lambda records: [RecordFailure("bad") for _ in records]
    store.inputs = [{"n": i} for i in range(40)]
    code, summary = pod(tmp_path, monkeypatch, shared(2, maxFailedRecords=3), 0)
    assert code == 2
    assert "this pod's 4 failed records alone" in summary["reason"]
    assert summary["chunks"] == 1  # the chunk that crossed it is committed, then it stops


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (None, "$JOB_COMPLETION_INDEX is not set"),
        ("3", "'3' is not an index of the run's 3 pods (0 to 2)"),
        ("one", "'one' is not an index"),
    ],
)
def test_a_pod_without_a_valid_index_exits_2_naming_partitioning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    store: MemoryStore,
    index: str | None,
    expected: str,
) -> None:
    code, summary = pod(tmp_path, monkeypatch, shared(3), index)
    assert code == 2 and expected in summary["reason"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "partitioning:" in err[0] and expected in err[0]
    assert store.chunks == {}


@pytest.mark.parametrize(
    ("output", "errors", "field"),
    [
        ({"http": {"url": "http://r.invalid/p"}}, None, "output.http.committedUrl"),
        (
            {"http": {"url": "http://r.invalid/p", "committedUrl": "http://r.invalid/c"}},
            {"http": {"url": "http://r.invalid/e"}},
            "errors.http.committedUrl",
        ),
        ({"krateo": {"api": {"path": "/p", "endpointRef": {"name": "e"}}}}, None, "errors:"),
    ],
)
def test_a_shared_run_needs_outputs_that_say_which_chunks_they_hold(
    output: dict[str, Any], errors: dict[str, Any] | None, field: str
) -> None:
    doc = shared(2)
    doc["output"] = output
    if errors is not None:
        doc["errors"] = errors
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        RunnerContract.model_validate(doc)
    doc.pop("partitioning")
    RunnerContract.model_validate(doc)  # one pod: allowed


def test_a_shard_owns_every_countth_chunk_and_its_share_of_the_input() -> None:
    shard = Shard(1, 3)
    assert [c for c in range(9) if shard.owns(c)] == [1, 4, 7]
    assert shard.first_missing({1, 4}) == 7 and shard.first_missing({0, 2}) == 1
    assert shard.before(7) == 2 and shard.before(1) == 0
    # 25 records in chunks of 4: pod 1 has chunks 1 and 4 (8 records); chunk 6 (1) is pod 0's.
    shares = [Shard(i, 3).share(25, 4) for i in range(3)]
    assert shares == [9, 8, 8] and sum(shares) == 25  # type: ignore[arg-type]
    assert Shard(0, 3).share(None, 4) is None


def _ranged(index: int, count: int, total: int | None, size: int = 4) -> Shard:
    return Shard(index, count, CHUNK_RANGES).bound(total, size, log=lambda _: None)


@pytest.mark.parametrize(("total", "count"), [(25, 3), (24, 3), (3, 4), (0, 2), (1000, 7)])
def test_ranged_shards_own_disjoint_contiguous_ranges_that_cover_every_chunk(
    total: int, count: int
) -> None:
    chunks = -(-total // 4)
    shards = [_ranged(i, count, total) for i in range(count)]
    owners = [[i for i, s in enumerate(shards) if s.owns(c)] for c in range(chunks + 3)]
    assert all(len(o) == 1 for o in owners)  # past the counted end: the last index's
    flat = [o[0] for o in owners]
    assert flat == sorted(flat)  # contiguous, in index order
    assert all(o[0] == count - 1 for o in owners[chunks:])
    shares = [s.share(total, 4) for s in shards]
    assert sum(shares) == total  # type: ignore[arg-type]
    assert max(shares) - min(shares) <= 4  # type: ignore[type-var,operator]


def test_a_ranged_shard_reads_from_its_first_missing_chunk_to_its_range_end() -> None:
    # 25 records in 7 chunks of 4 over 3 pods: chunks 0-1, 2-3 and 4-6 (the last to the end).
    middle, last = _ranged(1, 3, 25), _ranged(2, 3, 25)
    assert (middle.chunks, last.chunks) == ((2, 4), (4, None))
    assert middle.first_missing(set()) == 2 and middle.first_missing({2}) == 3
    assert middle.first_missing({2, 3}) == 4  # all committed: its range's end
    assert middle.end(4) == 16 and last.end(4) is None
    assert middle.before(3) == 1 and middle.before(9) == 2 and middle.before(0) == 0
    assert middle.describe() == "index 1 of 3, chunks 2 to 3"
    assert "chunks 4 to the end" in last.describe()


def test_only_a_ranged_shard_checks_that_the_inputs_count_held() -> None:
    ranged = _ranged(1, 3, 25)
    ranged.check_count(25, lambda: 25)
    with pytest.raises(ConfigError, match="25 records when this pod started, 24 now"):
        ranged.check_count(25, lambda: 24)
    Shard(1, 3).check_count(25, lambda: 24)  # round-robin ranges hold whatever the count


def test_ranges_need_the_inputs_count_up_front() -> None:
    with pytest.raises(ConfigError, match="chunkRanges needs the input's record count"):
        _ranged(0, 2, None)
    one = Shard(0, 1, CHUNK_RANGES)  # one pod: the whole input, counted or not
    assert one.bound(None, 4, log=lambda _: None) is one and one.owns(5)


def test_a_pods_failures_spend_the_budget_early_only_when_they_alone_spend_the_runs() -> None:
    count = Budget(max_records=3)
    assert early_excess(count, 3, run=None) is None
    assert early_excess(count, 4, run=None) is not None
    ratio = Budget(max_records=0, max_ratio=0.1)
    assert early_excess(ratio, 50, run=None) is None  # the run's total is not known yet
    assert early_excess(ratio, 10, run=100) is None
    assert early_excess(ratio, 11, run=100) is not None


def test_an_index_is_read_from_the_environment() -> None:
    doc = RunnerContract.model_validate(shared(4))
    assert Shard.from_contract(doc.partitioning, {"JOB_COMPLETION_INDEX": "2"}) == Shard(2, 4)
    assert Shard.from_contract(None, {}) == Shard.one()
    with pytest.raises(ConfigError, match="partitioning"):
        Shard.from_contract(doc.partitioning, {"JOB_COMPLETION_INDEX": "-1"})


@pytest.mark.parametrize(
    ("table", "query", "id_field", "problem"),
    [
        ("loose", None, None, "idField: 2 pods share the run"),
        ("loose", None, "n", None),
        ("keyed", None, None, None),
        (None, "SELECT n FROM loose", None, "query: 2 pods share the run"),
        (None, "SELECT n FROM loose\n  order   BY n", None, None),
    ],
)
def test_a_shared_run_reads_sql_in_one_order_in_every_pod(
    tmp_path: Path, table: str | None, query: str | None, id_field: str | None, problem: str | None
) -> None:
    import sqlalchemy as sa

    from contracts.storage import SqlStorage
    from runners.storage.sql import SqlSource

    url = f"sqlite:///{tmp_path / 'in.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE loose (n INTEGER)"))
        conn.execute(sa.text("CREATE TABLE keyed (n INTEGER PRIMARY KEY)"))
    engine.dispose()
    settings = SqlStorage(url=url, table=table, query=query, id_field=id_field)
    ctx = RunContext("uid-1", "job-1", shard_index=1, shard_count=2)
    if problem is None:
        SqlSource(settings, ctx).close()
        return
    with pytest.raises(ConfigError, match=problem):
        SqlSource(settings, ctx)
    SqlSource(settings, RunContext("uid-1", "job-1")).close()  # one pod: its order is its own
