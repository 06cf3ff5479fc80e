"""The id screen: which ids the pipeline refuses before the model sees them.

Real: runners.recordids (numpy fingerprints, sorted runs). Faked: nothing; the records are
built by hand.
"""

from __future__ import annotations

import time

from runners.api import InputRecord
from runners.recordids import MAX_ID_LENGTH, IdScreen, SeenIds


def records(*ids: str, start: int = 0) -> list[InputRecord]:
    return [InputRecord(start + n, i, {}) for n, i in enumerate(ids)]


def test_finds_repeats_within_a_batch_and_across_any_number_of_batches() -> None:
    seen = SeenIds()
    for start in range(0, 10_000, 7):
        assert seen.add([f"id-{n}" for n in range(start, min(start + 7, 10_000))]) == []
    assert len(seen) == 10_000
    assert seen.add(["id-9999", "new", "id-0", "new", "id-5000"]) == [0, 2, 3, 4]


def test_holds_twelve_to_sixteen_bytes_an_id_once_merged() -> None:
    seen = SeenIds()
    for start in range(0, 300_000, 1000):
        seen.add([str(n) for n in range(start, start + 1000)])
    # At most max(65,536, a sixteenth of the rest) wait in a dict; the rest is merged.
    assert 12 * (300_000 - 65_536) <= seen.nbytes <= 16 * 300_000


def test_finds_ids_merged_long_ago_and_ids_merged_just_now() -> None:
    seen = SeenIds()
    ids = [f"id-{n}" for n in range(300_000)]
    for start in range(0, len(ids), 256):
        seen.add(ids[start : start + 256])
    probe = [*ids[::997], "never-seen", *ids[-5:]]
    assert seen.add(probe) == [n for n, i in enumerate(probe) if i != "never-seen"]


def test_admitting_a_million_ids_takes_seconds_not_minutes() -> None:
    seen, started = SeenIds(), time.process_time()
    for start in range(0, 1_000_000, 256):
        seen.add([f"k{n:07d}" for n in range(start, min(start + 256, 1_000_000))])
    assert time.process_time() - started < 30  # ~3 s on a small node
    assert len(seen) == 1_000_000


def test_refuses_an_id_longer_than_any_output_keys_by_whatever_its_source() -> None:
    long_id = "x" * (MAX_ID_LENGTH + 1)
    for unique in (True, False):
        kept, refused = IdScreen(unique=unique).screen(records("a", long_id, "x" * MAX_ID_LENGTH))
        assert [r.position for r in kept] == [0, 2]
        assert [(r.position, "256 characters long" in why) for r, why in refused] == [(1, True)]


def test_refuses_the_later_of_two_records_with_one_id_only_when_ids_come_from_a_field() -> None:
    screen = IdScreen(unique=True)
    assert screen.screen(records("a", "b"))[1] == []
    kept, refused = screen.screen(records("c", "a", "c", start=2))
    assert [r.position for r in kept] == [2]
    assert [(r.position, why.split(":")[0]) for r, why in refused] == [
        (3, "duplicate id 'a'"),
        (4, "duplicate id 'c'"),
    ]
    assert IdScreen(unique=False).screen(records("a", "a"))[1] == []


def test_remembers_the_ids_of_committed_chunks_for_a_resumed_run() -> None:
    screen = IdScreen(unique=True)
    screen.remember(["a", "b", "x" * 300])
    kept, refused = screen.screen(records("b", "c", start=10))
    assert [r.id for r in kept] == ["c"] and [r.id for r, _ in refused] == ["b"]
