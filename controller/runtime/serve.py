"""The controller's HTTP endpoints: `/metrics` on one port, `/healthz` and `/readyz` on another.

Kept apart from the manager so probes and scrapes never wait on a reconcile; the
routes only read thread-safe state. Each endpoint is one asyncio loop on a thread
of its own, so a connection costs a socket and a coroutine, never a thread: 200
clients that send half a request and stall (slowloris) used to hold 200 threads.

Rules the code relies on:
- A client has `header_timeout` seconds, in total, to send its request head, and
  `write_timeout` seconds to take the answer; then the connection is closed.
- At most `connections` connections are open. At the limit, a new connection
  closes the one that has waited longest without sending its request (the likely
  stalled client): a probe, which sends its request at once, is answered however
  many stalled clients come. If every connection is being answered, the new one is
  closed at once.
- One request per connection (`Connection: close`); GET and HEAD only; no body is read.
- Routes run on a small thread pool, so a slow route (a scrape on a big cache)
  never stops the loop from reading and timing out other connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType

log = logging.getLogger(__name__)
Route = Callable[[], tuple[int, str, str]]  # status, content type, body
MAX_HEAD = 8192  # request line and headers; a probe or a scrape sends a few hundred bytes
ROUTE_THREADS = 2


@dataclass(frozen=True)
class Limits:
    """How much one endpoint gives its clients."""

    connections: int = 64
    header_timeout: float = 5.0  # kubelet probes time out after 1 s by default
    write_timeout: float = 10.0  # Prometheus' default scrape timeout


class _Connection:
    """One accepted connection while its coroutine runs."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.reading = True  # still waiting for the request head (evictable)

    def close_now(self) -> None:
        self.writer.transport.abort()


class Endpoint:
    """A small HTTP server on a thread of its own (the socket is bound at construction)."""

    def __init__(
        self,
        port: int,
        routes: dict[str, Route],
        *,
        host: str = "127.0.0.1",
        limits: Limits | None = None,
    ) -> None:
        self.routes, self.limits = dict(routes), limits or Limits()
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=128)
        self._loop = asyncio.new_event_loop()
        self._pool = ThreadPoolExecutor(ROUTE_THREADS, thread_name_prefix=f"http-{self.port}")
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"http-{self.port}", daemon=True
        )
        self._open: dict[asyncio.Task[None], _Connection] = {}  # oldest first
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._sock.getsockname()[1])

    @property
    def address(self) -> str:
        """The bound address."""
        return str(self._sock.getsockname()[0])

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)

    def stop(self) -> None:
        """Stop serving, close every connection and the socket."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()
        self._sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Endpoint:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- on the loop's thread ---------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD)

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
        still_open = list(self._open.items())
        for task, conn in still_open:
            conn.close_now()
            task.cancel()
        await asyncio.gather(*(task for task, _ in still_open), return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = _Connection(writer)
        if len(self._open) >= self.limits.connections and not self._evict_one():
            conn.close_now()
            return
        self._open[task] = conn
        try:
            await self._exchange(reader, conn)
        except asyncio.IncompleteReadError:
            writer.close()  # the client gave up
        except (TimeoutError, asyncio.CancelledError, asyncio.LimitOverrunError, OSError):
            conn.close_now()  # stalled, evicted, reset, or a head over MAX_HEAD
        except Exception:
            log.exception("answering a request failed")
            conn.close_now()
        finally:
            self._open.pop(task, None)

    def _evict_one(self) -> bool:
        """Close the oldest connection still waiting for its request; False if none is."""
        for task, conn in self._open.items():
            if conn.reading:
                del self._open[task]
                conn.close_now()
                task.cancel()
                return True
        return False

    async def _exchange(self, reader: asyncio.StreamReader, conn: _Connection) -> None:
        async with asyncio.timeout(self.limits.header_timeout):
            head = await reader.readuntil(b"\r\n\r\n")
        conn.reading = False
        answer = await self._loop.run_in_executor(self._pool, self._answer, head)
        conn.writer.write(answer)
        async with asyncio.timeout(self.limits.write_timeout):
            await conn.writer.drain()
            conn.writer.close()
            await conn.writer.wait_closed()

    def _answer(self, head: bytes) -> bytes:
        """The whole response to one request head (runs on the route pool)."""
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(400, "text/plain", "bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain", "method not allowed\n")
        route = self.routes.get(target)
        if route is None:
            return _response(404, "text/plain", "not found\n")
        try:
            status, ctype, body = route()
        except Exception:
            log.exception("%s failed", target)
            status, ctype, body = 500, "text/plain", "internal error\n"
        return _response(status, ctype, body, with_body=method == "GET")


def _response(status: int, ctype: str, body: str, *, with_body: bool = True) -> bytes:
    data = body.encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {ctype}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (data if with_body else b"")


def probe(check: Callable[[], bool]) -> Route:
    """A route answering 200 `ok` when `check()` holds, else 503."""

    def route() -> tuple[int, str, str]:
        return (200, "text/plain", "ok\n") if check() else (503, "text/plain", "not ready\n")

    return route
