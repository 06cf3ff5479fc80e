"""Container log files: how the worker writes them, and how the kubelet reads them back.

The worker writes `<workdir>/logs/<ns>_<pod>_<uid>/<container>-<restart>.log`, one line
per output line in the CRI log format (`<time> <stream> F <text>`, `log_line`), stdout
and stderr interleaved as they came. The kubelet's rules for reading them
(`PodLogOptions`, as `kuberuntime`'s ReadLogs applies them):
- `tailLines`: the last N lines of the file, counted before `sinceSeconds`/`sinceTime`
  filter them; `limitBytes`: the output stops after so many bytes, timestamps included;
- `timestamps`: each line prefixed by its RFC 3339 time with nine fractional digits;
- `previous`: the instance in `lastState.terminated`; otherwise the running or last
  terminated one (`validateContainerLogStatus`, whose refusals are kept word for word);
- `follow`: keep writing what is appended until that instance ends.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

Obj = dict[str, Any]
FOLLOW_POLL = 0.1
# The kubelet's words for the commonest reasons a container has not started.
WAITING_WORDS = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}
_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z")


@dataclass(frozen=True)
class PodLogs:
    """One pod the agent runs: the pod as the agent last saw it, where its container logs
    are, and whether its worker has finished (no instance will be written again)."""

    pod: Obj
    folder: Path
    is_done: Callable[[], bool]


class LogError(Exception):
    """A refused log request: the HTTP status and the kubelet's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogOptions:
    """The kubelet's reading of `PodLogOptions` from a query."""

    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: datetime | None = None
    timestamps: bool = False
    previous: bool = False
    follow: bool = False


# -- the file format -----------------------------------------------------------------------


def log_line(stream: str, text: str, *, now: datetime | None = None) -> str:
    """One line of a container log file, in the CRI format a kubelet reads."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} F {text}\n"


def log_folder(workdir: Path, pod: Obj) -> Path:
    """Where the worker writes a pod's container logs."""
    meta = pod["metadata"]
    return workdir / "logs" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 UTC time with up to nine fractional digits (Python keeps six)."""
    match = _TIME.fullmatch(text)
    if match is None:
        return None
    base = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    micros = int((match.group(2) or "0")[:6].ljust(6, "0"))
    return base + timedelta(microseconds=micros)


def render(raw: str, options: LogOptions) -> bytes | None:
    """What a file line becomes in the answer; None when `since` filters it out."""
    stamp, _, rest = raw.partition(" ")
    at = parse_time(stamp)
    if at is None:  # not a CRI line: served as it is, with no time to filter or show
        return (raw + "\n").encode()
    _stream, _, rest = rest.partition(" ")
    tag, _, text = rest.partition(" ")
    if options.since is not None and at < options.since:
        return None
    end = "\n" if tag != "P" else ""  # a partial line continues in the next entry
    prefix = at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z " if options.timestamps else ""
    return (prefix + text + end).encode()


# -- the query -----------------------------------------------------------------------------


def parse_options(query: dict[str, list[str]], *, now: datetime) -> LogOptions:
    """`PodLogOptions` from a query string, validated as the kubelet does."""

    def last(key: str) -> str | None:
        values = query.get(key)
        return values[-1] if values else None

    tail, legacy = last("tailLines"), last("tail")  # `tail`: the kubelet's old spelling wins
    if legacy:
        tail = None if legacy == "all" else legacy
    try:
        tail_lines = None if tail is None else int(tail)
        limit = last("limitBytes")
        limit_bytes = None if limit is None else int(limit)
        since_seconds = last("sinceSeconds")
        seconds = None if since_seconds is None else int(since_seconds)
        since_time = last("sinceTime")
        flags = {key: _flag(last(key)) for key in ("timestamps", "previous", "follow")}
    except ValueError:
        raise LogError(400, '{"message": "Unable to decode query."}') from None
    since = None if since_time is None else parse_time(since_time.replace("+00:00", "Z"))
    invalid = (
        (tail_lines is not None and tail_lines < 0)
        or (limit_bytes is not None and limit_bytes < 1)
        or (seconds is not None and seconds < 1)
        or (seconds is not None and since_time is not None)
        or (since_time is not None and since is None)
    )
    if invalid:
        raise LogError(422, '{"message": "Invalid request."}')
    if seconds is not None:
        since = now - timedelta(seconds=seconds)
    return LogOptions(tail_lines, limit_bytes, since, **flags)


def _flag(value: str | None) -> bool:
    if value in (None, "", "false", "False", "0"):
        return False
    if value in ("true", "True", "1"):
        return True
    raise ValueError(value)


# -- which file ----------------------------------------------------------------------------


def instance_path(found: PodLogs, container: str, *, previous: bool) -> Path:
    """The log file of the container instance a request means, by the kubelet's rules
    (`validateContainerLogStatus`): the running or last terminated instance, or with
    `previous` the one in `lastState.terminated`."""
    pod = found.pod
    name = pod["metadata"]["name"]
    specs = [c for key in ("containers", "initContainers") for c in pod["spec"].get(key) or []]
    if not any(c.get("name") == container for c in specs):
        raise LogError(404, f'container "{container}" not found in pod "{name}"')
    status = _status_of(pod, container)
    if status is None:
        raise LogError(400, f'container "{container}" in pod "{name}" is not available')
    state, last = status.get("state") or {}, status.get("lastState") or {}
    restarts = int(status.get("restartCount") or 0)
    if previous:
        if "terminated" not in last:
            message = f'previous terminated container "{container}" in pod "{name}" not found'
            raise LogError(400, message)
        instance = restarts - 1
    elif "running" in state or "terminated" in state:
        instance = restarts
    elif "terminated" in last:
        instance = restarts - 1  # waiting to restart: the instance that ended
    else:
        reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        why = WAITING_WORDS.get(reason, reason)
        raise LogError(400, f'container "{container}" in pod "{name}" is waiting to start: {why}')
    return found.folder / f"{container}-{instance}.log"


def is_ended(found: PodLogs | None, path: Path) -> bool:
    """True when nothing more will be written to this instance's file (`found` is the pod as
    the agent sees it now): the pod is gone or replaced, its worker is done, a later
    instance started, or its status says this instance ended (the worker reports that only
    once the process's output is all written)."""
    if found is None or found.folder != path.parent or found.is_done():
        return True
    container, _, number = path.stem.rpartition("-")
    instance = int(number)
    if (path.parent / f"{container}-{instance + 1}.log").exists():
        return True
    status = _status_of(found.pod, container) or {}
    restarts = int(status.get("restartCount") or 0)
    return restarts > instance or (
        restarts == instance and "terminated" in (status.get("state") or {})
    )


def _status_of(pod: Obj, container: str) -> Obj | None:
    """The container's entry in the pod's `containerStatuses` or `initContainerStatuses`."""
    status = pod.get("status") or {}
    keys = ("containerStatuses", "initContainerStatuses")
    entries = [entry for key in keys for entry in status.get(key) or []]
    return next((entry for entry in entries if entry.get("name") == container), None)


# -- writing the answer --------------------------------------------------------------------


class Sink(Protocol):
    def write(self, data: bytes, /) -> Any: ...

    def flush(self) -> None: ...


class Limited:
    """Writes to `out` until `limit` bytes went out (the kubelet's LimitWriter)."""

    def __init__(self, out: Sink, limit: int | None) -> None:
        self.out, self.remaining = out, limit

    @property
    def full(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def write(self, data: bytes) -> None:
        if self.remaining is not None:
            data = data[: self.remaining]
            self.remaining -= len(data)
        if data:
            self.out.write(data)


def stream_log(
    path: Path,
    options: LogOptions,
    out: Limited,
    *,
    ended: Callable[[], bool],
    stopping: threading.Event,
) -> None:
    """Write the instance's log (tail, since, limit); with `follow`, keep writing what is
    appended until the instance ends, the limit is reached or the server stops."""
    lines, offset = _complete_lines(_read(path, 0))
    if options.tail_lines is not None:
        lines = lines[-options.tail_lines :] if options.tail_lines else []
    _write(lines, options, out)
    while options.follow and not out.full:
        finished = ended()  # looked at before reading: what came before it gets written
        more, used = _complete_lines(_read(path, offset))
        offset += used
        _write(more, options, out)
        if finished or stopping.wait(FOLLOW_POLL):
            return


def _read(path: Path, offset: int) -> bytes:
    """The file from `offset` on; nothing when it is not there (yet)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""


def _complete_lines(data: bytes) -> tuple[list[str], int]:
    """The whole lines in `data` and how many bytes they take (a line being written waits)."""
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]  # only "\n" ends a line (a "\r" is text)
    return [line.decode(errors="replace") for line in lines], end


def _write(lines: list[str], options: LogOptions, out: Limited) -> None:
    for raw in lines:
        if out.full:
            return
        data = render(raw, options)
        if data is not None:
            out.write(data)
    out.out.flush()
