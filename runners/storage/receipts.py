"""What an HTTP receiver says it holds: the resume point of the `http` and `krateo` outputs.

Why: a generic HTTP API cannot be listed, so a restarted pod sent every chunk again from
chunk 0, and a pod killed often enough never got past the first chunks. When the config
names where to ask (`http.committedUrl`, `krateo.committedPath`), the sink asks once at
start which chunks the receiver holds for this run, Job and role, and the pipeline resumes
after them, as it does for files, objects and tables; a new run asks with its own UID and
so never resumes another run's chunks. When the config names no such place the sink says
nothing is committed, because it cannot know: every chunk is sent again, and exactly-once
then rests on the receiver de-duplicating by (jobId, jobName, chunk).

The answer is a list whose items are a chunk index or `{"chunk": n, "records": n}`;
`records` lets the summary and the error budget count what earlier pods committed
(without it those chunks count 0 records).
"""

from __future__ import annotations

from typing import Any

from runners.api import ConfigError


def held_chunks(items: Any, *, field: str) -> dict[int, int]:
    """chunk -> records held (0 when the receiver does not say) of a receiver's answer."""
    if not isinstance(items, list):
        raise ConfigError(f"{field}: the answer holds no list of chunks")
    held: dict[int, int] = {}
    for item in items:
        chunk = item.get("chunk") if isinstance(item, dict) else item
        records = item.get("records", 0) if isinstance(item, dict) else 0
        if not _is_count(chunk) or not _is_count(records):
            raise ConfigError(
                f"{field}: {repr(item)[:80]} is neither a chunk index nor "
                '{"chunk": <index>, "records": <count>}'
            )
        held[int(str(chunk))] = int(str(records))
    return held


def _is_count(value: Any) -> bool:
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
