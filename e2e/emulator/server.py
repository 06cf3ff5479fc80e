"""HTTP front end: routing, content negotiation, watch streaming.

A stdlib ThreadingHTTPServer speaking HTTP/1.1 with keep-alive and chunked
watch streams. Every resource goes through one generic handler that turns URL +
verb into an Api call; the registry says what the URL means.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from . import codec, discovery, kubeletproxy, oidc, protobuf
from .authn import ADMIN, Identity
from .binding import bind
from .errors import ApiError, bad_request
from .options import DeleteOptions, Request
from .registry import ResourceType
from .watching import WatchStream
from .wire import FastHeadersHandler, chunk_frame, response_head

if TYPE_CHECKING:
    from .emulator import Emulator

Obj = dict[str, Any]


@dataclass
class Route:
    rt: ResourceType
    namespace: str
    name: str
    subresource: str

    @property
    def resource(self) -> str:
        return f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural


class EmulatorHTTPServer(ThreadingHTTPServer):
    """Tracks connections so stop() can close idle keep-alive sockets and join threads."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], emulator: Emulator) -> None:
        self.emulator = emulator
        self.connections: dict[socket.socket, threading.Thread] = {}
        self.conn_lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__(address, Handler)

    def drop(self, handler: Handler) -> None:
        handler.dropped = True
        with contextlib.suppress(OSError):
            handler.request.shutdown(socket.SHUT_RDWR)

    def close_connections(self) -> None:
        with self.conn_lock:
            conns = dict(self.connections)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in conns.values():
            thread.join(timeout=5)


class Handler(FastHeadersHandler):
    """One generic handler for every path the emulator serves."""

    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer
    timeout = 300

    dropped = False
    identity: Identity = ADMIN

    def setup(self) -> None:
        super().setup()
        # Watch chunks are small writes; without NODELAY, delayed ACKs add ~40 ms each.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.conn_lock:
            self.server.connections[self.request] = threading.current_thread()

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.conn_lock:
            self.server.connections.pop(self.request, None)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- entry points --------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = dict(parse_qsl(url.query, keep_blank_values=True))
        self.warnings: list[str] = []
        try:
            body = self._read_body()
            security = self.server.emulator.security
            self.identity = security.identify(self.headers)
            if not _is_resource_path(url.path):
                security.check_path(self.identity, method, url.path)
            if not self._static(method, url.path):
                self._resource(method, url.path, body)
        except ApiError as err:
            self._send_json(err.code, err.status(), headers=err.headers)
        except OSError:  # client went away or the connection was dropped on purpose
            self.close_connection = True
        except Exception as exc:  # report, don't kill the connection thread
            internal = ApiError(500, f"emulator internal error: {exc!r}")
            self._send_json(500, internal.status())

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        ctype = self.headers.get("Content-Type", "")
        if "protobuf" in ctype:
            try:
                return protobuf.decode(raw)
            except (protobuf.Unsupported, IndexError, UnicodeDecodeError) as exc:
                raise ApiError(415, f"{exc}; send application/json") from None
        if "cbor" in ctype:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml",
            )
        try:
            return json.loads(raw)
        except ValueError:
            ctype = self.headers.get("Content-Type", "")
            if "yaml" in ctype:
                raise ApiError(415, "server-side apply is not supported by the emulator") from None
            raise bad_request("the body of the request could not be decoded as JSON") from None

    # -- discovery and static documents ---------------------------------------------------
    def _static(self, method: str, path: str) -> bool:
        reg = self.server.emulator.registry
        path = path.rstrip("/") or "/"
        doc: Obj | None = None
        if method != "GET":
            return False
        if path in ("/healthz", "/livez", "/readyz"):
            self._send(200, b"ok", "text/plain")
            return True
        if path == "/version":
            doc = discovery.VERSION
        elif path == "/api":
            host, port = self.server.server_address[:2]
            doc = discovery.api_versions(f"{host!s}:{port}")
        elif path == "/apis":
            doc = discovery.api_group_list(reg)
        elif path == "/api/v1":
            doc = discovery.resource_list(reg, "", "v1")
        elif path == "/openapi/v2":
            self._send(
                200,
                discovery.OPENAPI_V2_PB,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )
            return True
        elif path in (oidc.DISCOVERY_PATH, oidc.JWKS_PATH):  # ServiceAccountIssuerDiscovery
            self._issuer_document(path)
            return True
        elif path == "/openapi/v3":
            doc = discovery.openapi_v3_root(reg)
        elif path.startswith("/openapi/v3/"):
            parts = path.removeprefix("/openapi/v3/").split("/")
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            doc = discovery.openapi_v3_group_version(reg, group, version)
            if doc is None:
                raise ApiError(404, "the server could not find the requested resource")
        else:
            parts = path.split("/")[1:]
            if parts[0] == "apis" and len(parts) == 2:
                doc = discovery.api_group(reg, parts[1])
                if doc is None:
                    raise ApiError(404, "the server could not find the requested resource")
            elif parts[0] == "apis" and len(parts) == 3:
                doc = discovery.resource_list(reg, parts[1], parts[2])
                if doc is None:
                    raise ApiError(404, "the server could not find the requested resource")
        if doc is None:
            return False
        self._send_json(200, doc)
        return True

    def _issuer_document(self, path: str) -> None:
        """The discovery document or the JWKS (oidc.py), each in its one media type."""
        jwks = path == oidc.JWKS_PATH
        mime = oidc.JWKS_CONTENT_TYPE if jwks else oidc.DISCOVERY_CONTENT_TYPE
        if not oidc.acceptable(self.headers.get("Accept"), mime):
            status = ApiError(406, oidc.not_acceptable(mime)).status()
            self._send_json(406, {**status, "details": {}})  # go-restful's empty details
            return
        if jwks:
            doc = self.server.emulator.security.authn.signer.jwks()
        else:
            host, port = self.server.server_address[:2]
            doc = oidc.discovery(f"{host!s}:{port}")
        self._send(200, json.dumps(doc).encode(), mime)

    # -- resources --------------------------------------------------------------------------
    def _route(self, path: str) -> Route:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if rest[:1] == ["watch"]:
            self.query["watch"] = "true"
            rest = rest[1:]
        namespace = ""
        # /namespaces/<ns>/<plural>... is a namespaced resource, but /namespaces/<name>/status
        # and /finalize are subresources of the Namespace itself.
        is_ns_sub = len(rest) == 3 and rest[2] in ("status", "finalize") and not group
        if len(rest) >= 3 and rest[0] == "namespaces" and not is_ns_sub:
            namespace, rest = rest[1], rest[2:]
        reg = self.server.emulator.registry
        if rest[:1] == ["namespaces"] and not namespace and len(rest) <= 3:
            rt = reg.get("", "v1", "namespaces") if not group else None
        else:
            rt = reg.get(group, version, rest[0]) if rest else None
        if rt is None or len(rest) > 3 or (namespace and not rt.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.subresources:
            raise ApiError(404, "the server could not find the requested resource")
        return Route(rt, namespace, name, sub)

    def _verb(self, method: str, route: Route) -> str:
        if method == "GET":
            if route.name:
                return "get"
            return "watch" if self.query.get("watch") in ("true", "1") else "list"
        if method == "DELETE":
            return "delete" if route.name else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]

    def _resource(self, method: str, path: str, body: Any) -> None:
        emu = self.server.emulator
        route = self._route(path)
        verb = self._verb(method, route)
        emu.security.check(self.identity, verb, route, self.query)
        fault = emu.faults.take(
            verb=verb, resource=route.resource, namespace=route.namespace, name=route.name
        )
        if fault is not None:
            raise fault
        req = Request(
            # kubectl sends dryRun in the query for writes, in DeleteOptions for deletes.
            dry_run=bool(self.query.get("dryRun"))
            or (method == "DELETE" and isinstance(body, dict) and bool(body.get("dryRun"))),
            field_validation=self.query.get("fieldValidation") or "Warn",
            warnings=self.warnings,
        )
        api, rt, ns, name = emu.api, route.rt, route.namespace, route.name
        if verb == "get" and route.subresource == "log":
            pod = api.get(rt, ns, name)
            node = kubeletproxy.node_of(emu.store, pod)  # run by a node agent: ask its kubelet
            kubeletproxy.serve_log(self, pod, node, emu.config.kubelet_client)
        elif verb == "get":
            self._send_obj(200, rt, api.get(rt, ns, name))
        elif verb == "list":
            self._list(route)
        elif verb == "watch":
            self._watch(route)
        elif emu.security.serves(route, verb):
            self._send_json(201, emu.security.serve(self.identity, route, body))
        elif verb == "create" and route.subresource == "binding":
            self._send_json(201, bind(api, ns, name, body))
        elif verb == "create":
            if name:
                raise ApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            self._send_obj(201, rt, api.create(rt, ns, body, req, owned=True))
        elif verb == "update":
            obj = api.update(rt, ns, name, body, subresource=route.subresource, req=req, owned=True)
            self._send_obj(200, rt, obj)
        elif verb == "patch":
            ctype = self.headers.get("Content-Type", "")
            obj = api.patch(
                rt,
                ns,
                name,
                body,
                content_type=ctype,
                subresource=route.subresource,
                req=req,
                owned=True,
            )
            self._send_obj(200, rt, obj)
        elif verb == "delete":
            opts = DeleteOptions.from_body(body if isinstance(body, dict) else None, self.query)
            obj, now = api.delete(rt, ns, name, opts, req)
            # delete.go: 200 even while finalizers hold the object, except for clients
            # that explicitly asked orphanDependents=false (kept for old clients).
            accepted = not now and opts.orphan_dependents is False
            self._send_obj(202 if accepted else 200, rt, obj)
        else:
            self._delete_collection(route, body, req)

    def _list(self, route: Route) -> None:
        q = self.query
        emu = self.server.emulator
        result = emu.api.list_objects(
            route.rt,
            route.namespace or None,
            label_selector=q.get("labelSelector"),
            field_selector=q.get("fieldSelector"),
            limit=int(q.get("limit") or 0),
            continue_token=q.get("continue"),
            resource_version=q.get("resourceVersion"),
            resource_version_match=q.get("resourceVersionMatch"),
        )
        if discovery.wants_table(self.headers.get("Accept", "")):
            items = [emu.api.present(route.rt, o) for o in result["items"]]
            doc = discovery.table(
                route.rt,
                items,
                rv=result["metadata"]["resourceVersion"],
                now=emu.clock.now(),
                include=q.get("includeObject", "Metadata"),
            )
            if "continue" in result["metadata"]:
                doc["metadata"]["continue"] = result["metadata"]["continue"]
            self._send_json(200, doc)
            return
        self._send_json(200, result)

    def _delete_collection(self, route: Route, body: Any, req: Request) -> None:
        emu = self.server.emulator
        listed = emu.api.list_objects(
            route.rt,
            route.namespace or None,
            label_selector=self.query.get("labelSelector"),
            field_selector=self.query.get("fieldSelector"),
        )
        opts = DeleteOptions.from_body(body if isinstance(body, dict) else None, self.query)
        items = []
        for obj in listed["items"]:
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):
                items.append(
                    emu.api.delete(route.rt, meta.get("namespace", ""), meta["name"], opts, req)[0]
                )
        listed["items"] = items
        self._send_json(200, listed)

    # -- watch (see watching.py) ---------------------------------------------------------
    def _watch(self, route: Route) -> None:
        WatchStream(self, route).serve()

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self._warning_headers()
        self.end_headers()

    def chunk(self, event: Obj) -> None:
        self.write_chunks([chunk_frame(codec.encode(event) + b"\n")])

    def write_chunks(self, frames: list[bytes]) -> None:
        """Framed chunks (see chunk_frame) in one write: a burst of events is one syscall."""
        self.wfile.write(b"".join(frames))
        self.wfile.flush()

    def end_stream(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    # -- responses --------------------------------------------------------------------------
    def _send_obj(self, code: int, rt: ResourceType, obj: Obj) -> None:
        emu = self.server.emulator
        obj = emu.api.present(rt, obj)
        if discovery.wants_table(self.headers.get("Accept", "")):
            rv = obj["metadata"].get("resourceVersion", "")
            obj = discovery.table(
                rt,
                [obj],
                rv=rv,
                now=emu.clock.now(),
                include=self.query.get("includeObject", "Metadata"),
            )
            self._send_json(code, obj)
            return
        # Stored versions never change: the watch event of this write reuses the bytes.
        self._send(code, emu.encodings.encode(obj), "application/json")

    def _send_json(self, code: int, doc: Obj, *, headers: dict[str, str] | None = None) -> None:
        self._send(code, codec.encode(doc), "application/json", headers)

    def _send(
        self, code: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        """Head and body in one write (one syscall, one TCP segment for small answers)."""
        extra = list((headers or {}).items())
        if self.request_version == "HTTP/0.9" or any(k.lower() == "connection" for k, _ in extra):
            self._send_stdlib(code, data, ctype, headers)
            return
        lines = [
            ("Content-Type", ctype),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-cache, private"),
            *extra,
            *(("Warning", _warning(msg)) for msg in getattr(self, "warnings", [])),
        ]
        self.wfile.write(response_head(self, code, lines) + data)

    def _send_stdlib(
        self, code: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        """The same answer through send_response/send_header (HTTP/0.9, Connection headers)."""
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self._warning_headers()
        self.end_headers()
        self.wfile.write(data)

    def _warning_headers(self) -> None:
        for msg in getattr(self, "warnings", []):
            self.send_header("Warning", _warning(msg))


def _is_resource_path(path: str) -> bool:
    """RequestInfo's split: /api/v1/<resource>... and /apis/<g>/<v>/<resource>... are resource
    requests; everything else (discovery, /healthz, /openapi) is a non-resource URL."""
    parts = [p for p in path.split("/") if p]
    return (parts[:2] == ["api", "v1"] and len(parts) > 2) or (
        parts[:1] == ["apis"] and len(parts) > 3
    )


def _warning(msg: str) -> str:
    """A Warning header value as kube-apiserver writes it (code 299, quoted text)."""
    return f"299 - {json.dumps(msg)}"
