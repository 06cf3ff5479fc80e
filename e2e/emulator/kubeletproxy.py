"""`pods/log` of a pod on a registered Node: read through that node's kubelet, as
kube-apiserver does.

With its built-in kubelet off, the emulator's pods are run by a node agent
(e2e/nodeagent), which keeps their output and serves it on the kubelet's HTTPS
endpoint (`/containerLogs/{ns}/{pod}/{container}`). A real API server answers
`pods/log` by calling that endpoint at the Node's address
(`--kubelet-preferred-address-types`; here InternalIP first) and
`status.daemonEndpoints.kubeletEndpoint.Port`, with its `--kubelet-client-certificate`
and, when `--kubelet-certificate-authority` is set, checking the kubelet's certificate.
`EmulatorConfig.kubelet_client` holds those three files; without it the call is made
with no client certificate and no verification (a real server started without the flags),
which a kubelet that requires certificates refuses.

What is mirrored: the option limits (`ValidatePodLogOptions`), the container name
rules (`a container name must be specified ...`, `container X is not valid for pod Y`),
the log options passed on, the body streamed as it comes (`follow`), and the kubelet's
refusals turned into Status errors the way the API server's response checker does (400
keeps the kubelet's message; others name the resource). Pods the emulator runs itself
(no Node object) keep the built-in path.
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from .errors import ApiError, FieldError, invalid, invalid_object
from .wire import chunk_frame

if TYPE_CHECKING:
    from .server import Handler
    from .store import Store

Obj = dict[str, Any]
ADDRESS_TYPES = ("InternalIP", "Hostname", "InternalDNS", "ExternalIP", "ExternalDNS")
DEFAULT_KUBELET_PORT = 10250
PASSED_ON = ("tailLines", "limitBytes", "sinceSeconds", "sinceTime")
FLAGS = ("follow", "previous", "timestamps")
READ_TIMEOUT = 60.0


@dataclass(frozen=True)
class KubeletClient:
    """kube-apiserver's `--kubelet-client-certificate`, `--kubelet-client-key` and
    `--kubelet-certificate-authority` (None: the kubelet's certificate is not checked)."""

    cert: Path
    key: Path
    ca: Path | None = None


def node_of(store: Store, pod: Obj) -> Obj | None:
    """The stored Node the pod is bound to; None for a pod bound to no node (yet)."""
    node_name = pod["spec"].get("nodeName")
    return store.get("nodes", "", node_name) if node_name else None


def serve_log(handler: Handler, pod: Obj, node: Obj | None, client: KubeletClient | None) -> None:
    """Answer `GET pods/<name>/log` with what the node's kubelet answers."""
    name = pod["metadata"]["name"]
    container = _container(pod, handler.query.get("container") or "")
    _validate(handler.query, name)
    if node is None:  # kube-apiserver's LogLocation: no node, no location, an empty stream
        handler._send(200, b"", "text/plain")
        return
    host, port = _endpoint(node)
    path = "/containerLogs/{}/{}/{}".format(
        *(quote(p, safe="") for p in (pod["metadata"]["namespace"], name, container))
    )
    query = {k: handler.query[k] for k in PASSED_ON if handler.query.get(k)}
    query.update({k: "true" for k in FLAGS if handler.query.get(k) in ("true", "1")})
    url = f"{path}?{urlencode(query)}" if query else path
    follow = "follow" in query
    conn = http.client.HTTPSConnection(
        host, port, context=_context(client), timeout=None if follow else READ_TIMEOUT
    )
    try:
        try:
            conn.request("GET", url)
            answer = conn.getresponse()
        except OSError as exc:
            raise ApiError(500, f'Get "https://{host}:{port}{url}": {exc}') from None
        if not 200 <= answer.status <= 206:
            raise _refusal(answer.status, answer.read(4096).decode(errors="replace"), name)
        _relay(handler, answer)
    finally:
        conn.close()


def _container(pod: Obj, asked: str) -> str:
    """The API server's choice of container (`pods/log` LogLocation)."""
    name = pod["metadata"]["name"]
    spec = pod["spec"]
    names = [str(c["name"]) for c in spec.get("containers") or []]
    if not asked:
        if len(names) == 1:
            return names[0]
        choices = " ".join(names)
        raise ApiError(
            400, f"a container name must be specified for pod {name}, choose one of: [{choices}]"
        )
    others = [
        c["name"] for key in ("initContainers", "ephemeralContainers") for c in spec.get(key) or []
    ]
    if asked not in names + others:
        raise ApiError(400, f"container {asked} is not valid for pod {name}")
    return asked


def _validate(query: dict[str, str], name: str) -> None:
    """`ValidatePodLogOptions`, as the API server runs it before calling the kubelet."""
    least = {"tailLines": 0, "limitBytes": 1, "sinceSeconds": 1}
    errors: list[FieldError] = []
    for key, low in least.items():
        value = query.get(key, "")
        if value.lstrip("-").isdigit() and int(value) < low:
            rule = "must be greater than or equal to 0" if low == 0 else "must be greater than 0"
            errors.append(invalid(key, int(value), rule))
    if errors:
        raise invalid_object("PodLogOptions", "", name, errors)


def _endpoint(node: Obj) -> tuple[str, int]:
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    host = next((addresses[t] for t in ADDRESS_TYPES if addresses.get(t)), None)
    if host is None:
        raise ApiError(500, f"no preferred addresses found; known addresses: {list(addresses)}")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    return str(host), int(port) if port and int(port) > 0 else DEFAULT_KUBELET_PORT


def _context(client: KubeletClient | None) -> ssl.SSLContext:
    if client is None or client.ca is None:
        context = ssl._create_unverified_context()
    else:
        context = ssl.create_default_context(cafile=str(client.ca))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    return context


def _refusal(status: int, body: str, pod_name: str) -> ApiError:
    """The API server's response checker: a 400 keeps the kubelet's words, a 500 is an
    internal error, anything else is a generic answer naming `pods/log <pod>`."""
    if status == 400:
        return ApiError(400, body)
    if status == 500:
        return ApiError(500, f"Internal error occurred: {body}")
    generic = {
        401: "the server has asked for the client to provide credentials",
        403: "forbidden",
        404: "the server could not find the requested resource",
    }.get(
        status,
        f"the server responded with the status code {status} but did not return more information",
    )
    return ApiError(status, f"{generic} ( pods/log {pod_name})")


def _relay(handler: Handler, answer: http.client.HTTPResponse) -> None:
    """The kubelet's body as chunks, each written as soon as it arrives."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Cache-Control", "no-cache, private")
    handler.end_headers()
    while data := answer.read1(65536):
        handler.write_chunks([chunk_frame(data)])
    handler.end_stream()
    with contextlib.suppress(OSError):
        answer.close()
