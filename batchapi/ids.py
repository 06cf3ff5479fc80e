"""Ids of files and batches: random 128 bits, so that no tenant can guess another's.

A file id carries its creation time in front of the random part (`file-<8 hex seconds><32 hex
random>`), so that file stores list files in time order by key alone. A batch id is
`batch_<32 hex>`; its InferenceRun (and the run's config) is `batch-<the same hex>`.
An id of the wrong shape is treated as missing (and is never used as a storage key).
"""

from __future__ import annotations

import re
import secrets

FILE_ID = re.compile(r"^file-[0-9a-f]{40}$")
BATCH_ID = re.compile(r"^batch_[0-9a-f]{32}$")
RUN_NAME = re.compile(r"^batch-[0-9a-f]{32}$")


def new_file_id(now: float) -> str:
    """A fresh file id, ordered by creation time (seconds) before its random part."""
    return f"file-{int(now) & 0xFFFFFFFF:08x}{secrets.token_hex(16)}"


def new_batch_id() -> str:
    """A fresh batch id."""
    return f"batch_{secrets.token_hex(16)}"


def is_file_id(text: str) -> bool:
    """True for a well-formed file id."""
    return bool(FILE_ID.match(text))


def is_batch_id(text: str) -> bool:
    """True for a well-formed batch id."""
    return bool(BATCH_ID.match(text))


def run_name(batch_id: str) -> str:
    """The InferenceRun (and InferenceConfig) name of a batch."""
    return "batch-" + batch_id.removeprefix("batch_")


def batch_id_of(name: str) -> str | None:
    """The batch id of a run name, None for a run that is not a batch's."""
    return "batch_" + name.removeprefix("batch-") if RUN_NAME.match(name) else None
