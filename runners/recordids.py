"""Which record ids a run can write: at most 255 characters, and each once per execution.

Why in the pipeline and not in each sink: the outcome must not depend on the output kind.
A SQL output keys rows by (run, Job, record id), so a repeated id used to overwrite an
earlier row (299 rows for 300 records), while a file output kept both; an id longer than
the SQL column failed the chunk on every retry, while a file took it. Here both are
per-record errors before the model is called, on every sink alike.

How it scales: the length check is free. Duplicates are possible only when ids come from
an input field (`idField`; positions, and a SQL table's primary key, are unique), and only
then does the run keep every id it has admitted: the newest (at most a sixteenth of the
rest, at least 65,536) in a dict, the others as 96-bit fingerprints (Python's 64-bit
string hash and a CRC-32; a false match is about as likely as n²/2⁹⁷) in sorted numpy
arrays behind a Bloom filter: 14 to 16 bytes an id, about 150 MB for ten million ids,
and twice the arrays for a moment while the dict is merged in (the filter is set a slice
at a time, so its temporaries stay small). Each id costs a hash, a dict lookup and two
filter probes in Python, about 1 us; no numpy call per batch. The index lives as long as
the process: a resumed pod rebuilds it from the ids of its committed chunks, one pass over
that part of the input (the string hash is salted per process, which is fine for that).
"""

from __future__ import annotations

import bisect
import threading
import zlib
from collections.abc import Iterable, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from runners.api import InputRecord
from runners.formats import UnreadableRecord

_BIT = np.left_shift(1, np.arange(8)).astype(np.uint8)  # a byte's bit n, by n
MAX_ID_LENGTH = 255  # characters: the SQL output's record_id column, varchar(255)
_ID = attrgetter("id")


class IdScreen:
    """Refuses records whose ids an output cannot key them by (see module doc).

    `unique`: the ids come from an input field, so two records may share one; the later
    record (by position) is then refused as a duplicate.
    """

    def __init__(self, *, unique: bool) -> None:
        self._seen = SeenIds() if unique else None

    @property
    def remembers(self) -> bool:
        """True when the screen must know the ids of chunks committed before it started."""
        return self._seen is not None

    def remember_read(
        self,
        records: Iterable[InputRecord],
        before: int,
        *,
        committed: set[int],
        size: int,
        stop: threading.Event,
    ) -> None:
        """Remember the ids `records` (read from position 0) hold before position `before`
        (where this pod starts reading: what a one-pod run, or the run's other pods, read
        first) and in the `committed` chunks (of `size` records): one pass over them."""
        end = max(before, (max(committed) + 1) * size if committed else 0)
        ids: list[str] = []
        for record in records:
            if record.position >= end or stop.is_set():
                break
            if type(record) is not UnreadableRecord and (
                record.position < before or record.position // size in committed
            ):
                ids.append(record.id)
            if len(ids) >= 65536:
                self.remember(ids)
                ids = []
        self.remember(ids)

    def remember(self, ids: Sequence[str]) -> None:
        """Count `ids` as admitted already (ids of committed chunks, for a resumed run)."""
        if self._seen is not None:
            self._seen.add([i for i in ids if len(i) <= MAX_ID_LENGTH])

    def screen(
        self, batch: list[InputRecord]
    ) -> tuple[list[InputRecord], list[tuple[InputRecord, str]]]:
        """(records to predict, refused records with the reason), in the batch's order."""
        refused: list[tuple[InputRecord, str]] = []
        if max(map(len, map(_ID, batch)), default=0) > MAX_ID_LENGTH:  # one C loop a batch
            refused = [(r, _too_long(r.id)) for r in batch if len(r.id) > MAX_ID_LENGTH]
            batch = [r for r in batch if len(r.id) <= MAX_ID_LENGTH]
        if self._seen is not None and batch:
            repeated = self._seen.add([r.id for r in batch])
            if repeated:
                refused += [(batch[n], _duplicate(batch[n].id)) for n in repeated]
                skip = set(repeated)
                batch = [r for n, r in enumerate(batch) if n not in skip]
        return batch, refused


def refusal_code(reason: str) -> str:
    """The code of a refusal `screen` made, as OpenAI batch error lines name it."""
    return "duplicate_custom_id" if reason.startswith(_DUPLICATE) else "invalid_custom_id"


_DUPLICATE = "duplicate id "


def _too_long(record_id: str) -> str:
    return (
        f"id '{record_id[:40]}…' is {len(record_id)} characters long, longer than "
        f"{MAX_ID_LENGTH} characters (the most an output keys a record by)"
    )


def _duplicate(record_id: str) -> str:
    return f"{_DUPLICATE}'{record_id}': an earlier record of this run has the same id"


class SeenIds:
    """A set of strings, most of them kept as 96-bit fingerprints (see module doc).

    The newest ids sit in a dict by their 64-bit hash (exact: the id itself is kept). When
    it holds a sixteenth of the rest (and at least `_PENDING_MIN`), their fingerprints are
    merged into two sorted numpy arrays (hashes, CRCs), with a Bloom filter in front (16 to
    32 bits an id, two probes: 0.4 to 1.4 % false maybes), so that an id the run has not
    seen, the common case, is told apart in pure Python without a search.
    """

    _PENDING_MIN = 1 << 16
    _BLOOM_BITS = 32  # filter bits an id when it is (re)sized; it is resized at 16
    _SLICE = 1 << 16  # fingerprints set in the filter at a time

    def __init__(self) -> None:
        self._pending: dict[int, str] = {}
        self._clashes: set[str] = set()  # ids whose 64-bit hash another pending id has
        self._keys: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._checks: npt.NDArray[np.uint32] = np.empty(0, dtype=np.uint32)
        self._key_view, self._check_view = self._keys.data, self._checks.data
        self._bloom = bytearray(1)
        self._bits = 8  # bit positions: hash % bits and (hash >> 32) % bits

    def __len__(self) -> int:
        return len(self._pending) + len(self._clashes) + len(self._keys)

    @property
    def nbytes(self) -> int:
        """Memory of the merged fingerprints and their filter: 14 to 16 bytes an id."""
        return self._keys.nbytes + self._checks.nbytes + len(self._bloom)

    def add(self, ids: Sequence[str]) -> list[int]:
        """Add `ids`; the indexes (in `ids`) of those already present or earlier in `ids`."""
        pending, clashes, bloom, bits = self._pending, self._clashes, self._bloom, self._bits
        merged = len(self._keys) > 0
        repeated: list[int] = []
        for n, text in enumerate(ids):
            key = hash(text)
            held = pending.get(key)
            if held is None:
                pending[key] = text
            elif held == text or text in clashes:
                repeated.append(n)
                continue
            else:
                clashes.add(text)
            if not merged:
                continue
            low, high = key % bits, (key >> 32) % bits
            maybe = bloom[low >> 3] >> (low & 7) & bloom[high >> 3] >> (high & 7) & 1
            if maybe and self._merged_holds(key, text):
                repeated.append(n)
        if len(pending) + len(clashes) >= max(self._PENDING_MIN, len(self._keys) // 16):
            self._merge_pending()
        return repeated

    def _merged_holds(self, key: int, text: str) -> bool:
        """True when the merged fingerprints hold `text` (the filter said maybe).

        A bisection in Python over memoryviews: a numpy search would hand the GIL to the
        other threads and wait up to a switch interval to get it back, once per batch.
        """
        keys, checks = self._key_view, self._check_view
        at = bisect.bisect_left(keys, key)
        check = zlib.crc32(text.encode("utf-8", "surrogatepass"))
        while at < len(keys) and keys[at] == key:
            if checks[at] == check:
                return True
            at += 1
        return False

    def _merge_pending(self) -> None:
        texts = [*self._pending.values(), *self._clashes]
        keys = np.fromiter(map(hash, texts), dtype=np.int64, count=len(texts))
        crc32 = zlib.crc32
        checks = np.fromiter(
            (crc32(t.encode("utf-8", "surrogatepass")) for t in texts),
            dtype=np.uint32,
            count=len(texts),
        )
        order = np.argsort(keys, kind="stable")
        keys, checks = keys[order], checks[order]
        at = self._keys.searchsorted(keys)
        # One new array each (n + m): the old ones are freed after, so memory peaks at twice.
        self._keys = np.insert(self._keys, at, keys)
        self._checks = np.insert(self._checks, at, checks)
        self._key_view, self._check_view = self._keys.data, self._checks.data
        self._pending, self._clashes = {}, set()
        if len(self._keys) * 16 > self._bits:  # fewer than 16 bits an id: a bigger one
            self._bits = len(self._keys) * self._BLOOM_BITS
            self._bloom = bytearray(self._bits // 8 + 1)
            keys = self._keys
        filter_ = np.frombuffer(self._bloom, dtype=np.uint8)
        for start in range(0, len(keys), self._SLICE):  # a slice at a time: small temporaries
            part = keys[start : start + self._SLICE]
            for position in (part % self._bits, (part >> 32) % self._bits):
                np.bitwise_or.at(filter_, position >> 3, _BIT[position & 7])
