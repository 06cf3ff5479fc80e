"""The HTTP front: OpenAI's paths, the namespace and auth of each request, streamed answers.

Paths are served under `/v1` and under `/namespaces/<namespace>/v1` (batchapi/access.py says
how the namespace is chosen). A request for one object is authorised on that object and
answers 404 when refused; a collection request answers 401/403. A body the server did not
read (a refused upload, one over the size limit) is read away before the answer, up to
`drain_limit`, so that clients sending a large body still see the answer.

Logs: one line per request with the method, the route, the status, the namespace and the
user; never a body, a file's content or a token.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from batchapi.access import Gate
from batchapi.batches import Batches
from batchapi.bodies import BodyReader
from batchapi.errors import ApiFailure, bad_request, no_batch, no_file
from batchapi.files import Files
from batchapi.templates import find_templates
from controller.core.ports import ApiError

log = logging.getLogger("longrun.batchapi")
Obj = dict[str, Any]
MAX_JSON_BODY = 1024 * 1024
SOCKET_TIMEOUT = 300.0


@dataclass(frozen=True)
class Route:
    """One endpoint: method, path pattern under /v1, handler name, verb, and for object
    routes the 404 a refusal answers with."""

    method: str
    pattern: re.Pattern[str]
    name: str
    verb: str
    missing: Callable[[str], ApiFailure] | None = None


ID = r"([A-Za-z0-9_-]{1,128})"
ROUTES = (
    Route("POST", re.compile(r"^files$"), "upload", "create"),
    Route("GET", re.compile(r"^files$"), "list_files", "list"),
    Route("GET", re.compile(rf"^files/{ID}$"), "get_file", "get", no_file),
    Route("DELETE", re.compile(rf"^files/{ID}$"), "delete_file", "delete", no_file),
    Route("GET", re.compile(rf"^files/{ID}/content$"), "file_content", "get", no_file),
    Route("POST", re.compile(r"^batches$"), "create_batch", "create"),
    Route("GET", re.compile(r"^batches$"), "list_batches", "list"),
    Route("GET", re.compile(rf"^batches/{ID}$"), "get_batch", "get", no_batch),
    Route("POST", re.compile(rf"^batches/{ID}/cancel$"), "cancel_batch", "patch", no_batch),
    Route("GET", re.compile(r"^models$"), "list_models", "list"),
)
PATH = re.compile(r"^(?:/namespaces/([^/]+))?/v1/(.*?)/?$")


class BatchApi:
    """The endpoints over the services, independent of HTTP details."""

    def __init__(self, *, files: Files, batches: Batches, gate: Gate, drain_limit: int) -> None:
        self.files = files
        self.batches = batches
        self.gate = gate
        self.drain_limit = drain_limit

    def models(self, namespace: str) -> Obj:
        cluster = self.batches.cluster
        found = find_templates(cluster.list_configs(namespace), cluster.list_deployments(namespace))
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": namespace}
            for model in sorted(found)
        ]
        return {"object": "list", "data": data}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "longrun-batch-api"
    api: BatchApi  # set on the subclass made per server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(SOCKET_TIMEOUT)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is logged by _serve

    def _serve(self, method: str) -> None:
        started = time.monotonic()
        request_id = "req_" + secrets.token_hex(16)
        parts = urlsplit(self.path)
        if parts.path in ("/healthz", "/readyz") and method == "GET":
            self._send_json(200, {"status": "ok"}, request_id)
            return
        context: Obj = {"method": method, "route": "", "namespace": "", "user": ""}
        body: BodyReader | None = None
        try:
            route, path_ns, object_id = _route(method, parts.path)
            context["route"] = route.name
            body = self._body(method)
            status = self._dispatch(
                route, path_ns, object_id, parts.query, body, context, request_id
            )
        except ApiFailure as refused:
            status = refused.status
            self._refuse(refused, body, request_id)
        except ApiError as exc:
            cluster_failure = _cluster_failure(exc)
            status = cluster_failure.status
            self._refuse(cluster_failure, body, request_id)
        except Exception:
            log.exception("unexpected error", extra=context)
            status = 500
            self._refuse(ApiFailure(500, "Internal error; see the server's log."), body, request_id)
        elapsed = round((time.monotonic() - started) * 1000)
        fields = {**context, "status": status, "ms": elapsed, "id": request_id}
        log.info(
            "%s %s %d %s %s %d ms",
            method,
            context["route"] or parts.path,
            status,
            context["namespace"] or "-",
            context["user"] or "-",
            elapsed,
            extra=fields,
        )

    def _body(self, method: str) -> BodyReader | None:
        headers = self.headers
        if (
            method != "POST"
            and not headers.get("Content-Length")
            and not headers.get("Transfer-Encoding")
        ):
            return None
        return BodyReader(self.rfile, headers)  # type: ignore[arg-type]

    def _dispatch(
        self,
        route: Route,
        path_ns: str | None,
        object_id: str,
        query_text: str,
        body: BodyReader | None,
        context: Obj,
        request_id: str,
    ) -> int:
        gate = self.api.gate
        user = gate.identify(self.headers.get("Authorization"))
        context["user"] = str((user or {}).get("username") or "")
        header = self.headers.get("OpenAI-Organization")
        namespace = gate.namespace(path=path_ns, header=header, user=user)
        context["namespace"] = namespace
        if route.missing is not None:
            name = (
                "batch-" + object_id.removeprefix("batch_") if route.name.endswith("batch") else ""
            )
            if not gate.allows(user, namespace=namespace, verb=route.verb, name=name):
                raise route.missing(object_id)
        else:
            gate.check_collection(user, namespace=namespace, verb=route.verb)
        query = {k: v[0] for k, v in parse_qs(query_text).items()}
        answer = self._call(route, namespace, object_id, query, body, context)
        if body is not None and not body.drain(MAX_JSON_BODY):  # an epilogue after the form
            self.close_connection = True
        if isinstance(answer, tuple):
            size, chunks = answer
            self._send_stream(size, chunks, request_id)
        else:
            self._send_json(200, answer, request_id)
        return 200

    def _call(
        self,
        route: Route,
        namespace: str,
        object_id: str,
        query: dict[str, str],
        body: BodyReader | None,
        context: Obj,
    ) -> Any:
        api = self.api
        match route.name:
            case "upload":
                if body is None:
                    raise bad_request("Send the file as a multipart/form-data body.")
                return api.files.upload(namespace, body, self.headers.get("Content-Type") or "")
            case "list_files":
                return api.files.list(namespace, query)
            case "get_file":
                return api.files.get(namespace, object_id).openai()
            case "delete_file":
                return api.files.delete(namespace, object_id)
            case "file_content":
                return api.files.content(namespace, object_id)
            case "create_batch":
                return api.batches.create(namespace, _json(body), user=context["user"])
            case "list_batches":
                return api.batches.list(namespace, query)
            case "get_batch":
                return api.batches.get(namespace, object_id)
            case "cancel_batch":
                return api.batches.cancel(namespace, object_id)
            case _:
                return api.models(namespace)

    def _refuse(self, failure: ApiFailure, body: BodyReader | None, request_id: str) -> None:
        if body is not None:
            try:
                drained = body.drain(self.api.drain_limit)
            except (ApiFailure, OSError):
                drained = False
            if not drained:
                self.close_connection = True
        self._send_json(failure.status, failure.body(), request_id)

    def _send_json(self, status: int, data: Obj, request_id: str) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-request-id", request_id)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def _send_stream(self, size: int, chunks: Iterator[bytes], request_id: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("x-request-id", request_id)
        self.end_headers()
        sent = 0
        for chunk in chunks:
            self.wfile.write(chunk)
            sent += len(chunk)
        if sent != size:  # a part vanished while it was read: the client must not take it
            self.close_connection = True


def _route(method: str, path: str) -> tuple[Route, str | None, str]:
    match = PATH.match(path)
    if match is None:
        raise ApiFailure(404, f"Unknown request URL: {method} {path}.", code="unknown_url")
    path_ns, rest = match.group(1), match.group(2)
    allowed = []
    for route in ROUTES:
        found = route.pattern.match(rest)
        if found is None:
            continue
        if route.method == method:
            return route, path_ns, found.group(1) if found.groups() else ""
        allowed.append(route.method)
    if allowed:
        raise ApiFailure(405, f"{method} is not allowed here; use {' or '.join(allowed)}.")
    raise ApiFailure(404, f"Unknown request URL: {method} {path}.", code="unknown_url")


def _json(body: BodyReader | None) -> Any:
    data = bytearray()
    while body is not None and (piece := body.read()):
        data += piece
        if len(data) > MAX_JSON_BODY:
            raise ApiFailure(413, f"The request body is larger than {MAX_JSON_BODY} bytes.")
    try:
        return json.loads(data or b"null")
    except ValueError:
        raise bad_request("The request body is not JSON.") from None


def _cluster_failure(exc: ApiError) -> ApiFailure:
    if exc.status in (400, 422):
        return bad_request(f"The Kubernetes API server refused the batch's objects: {exc.message}")
    if exc.status == 409:
        return ApiFailure(409, exc.message, code="conflict")
    status = 503 if exc.status in (0, 429) or exc.status >= 500 else 502
    return ApiFailure(status, f"The Kubernetes API server answered {exc.status}: {exc.message}")


class BatchApiServer:
    """The HTTP server on a thread: `start()`, `url`, `stop()`."""

    def __init__(self, api: BatchApi, *, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = type("Handler", (_Handler,), {"api": api})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> BatchApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
