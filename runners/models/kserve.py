"""KServe v1 and Open Inference Protocol (KServe v2 / Triton / MLServer) REST clients.

One request per batch: the batch's good records become the rows of one tensor (v2) or the
`instances` list (v1); records that cannot become rows fail on their own (see rows.py).

URLs: `url` is either the server's base URL or the full inference URL Krateo configs carry
(`host/v2/models/NAME/infer`, often without a scheme). A full URL is used as it is, so the
model named in its path wins over `name`.

The binary tensor extension (raw little-endian tensors after a JSON header) skips formatting and
parsing floats on both sides: the client's CPU for a 256-row iris batch drops by ~40 %, and the
server's too (KServe 0.21 serves 1.3-1.4x the records/s of JSON at B=256). It is used when
`binaryData` says so; left unset, the client asks the server once (`GET /v2`) and uses it when
the server lists the `binary_tensor_data` extension (Triton does) or is KServe 0.14 or later,
which implements it (kserve/kserve#3685) without listing it. MLServer 1.7 neither lists nor
implements it (binary input is a 500), so it gets JSON.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Sequence
from typing import Any

from contracts.model import ModelEndpoint
from runners.api import InputRecord, RunContext, TransientError
from runners.models import tensors
from runners.models.common import DEFAULT_DATATYPE, DEFAULT_INPUT_NAME
from runners.models.http import (
    HttpClient,
    HttpResponse,
    Transport,
    json_body,
    parse_json,
    with_scheme,
)
from runners.models.rows import InputFields, Rows
from runners.outcomes import Outcomes

_V1_PATH = re.compile(r"/v1/models/[^/]+:predict$")
_V2_PATH = re.compile(r"/v2/models/[^/]+(/versions/[^/]+)?/infer$")
_VERSION_SUFFIX = re.compile(r"/v[12]$")
_HEADER_LENGTH = "inference-header-content-length"
_HEADS = 64  # binary request headers kept, one per tensor shape (a run has a few)


def _split_url(url: str, pattern: re.Pattern[str]) -> tuple[str, str | None]:
    """(base URL, full inference URL or None) for a base or full URL."""
    url = with_scheme(url).rstrip("/")
    match = pattern.search(url)
    if match is None:
        return _VERSION_SUFFIX.sub("", url), None  # a base given as ".../v2" means its parent
    return url[: match.start()], url


class KServeV1Client:
    """KServe v1: `POST /v1/models/NAME:predict` with `{"instances": [...]}`."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        transport: Transport | None = None,
    ) -> None:
        base, full = _split_url(endpoint.url, _V1_PATH)
        self.url = full or f"{base}/v1/models/{endpoint.name}:predict"
        self._fields = InputFields(endpoint, ctx)
        self._http = HttpClient(endpoint, ctx, transport=transport)

    def predict(self, records: Sequence[InputRecord]) -> Outcomes:
        f = self._fields
        rows = Rows(
            records, fields=f.named, order=f.order(records), datatype=None, exclude=f.exclude
        )
        if not rows.count:
            return rows.predicted([])
        body = json_body({"instances": rows.rows})
        answer = self._http.post_json(self.url, body, what="kserve-v1 predict")
        found = answer.get("predictions") if isinstance(answer, dict) else None
        if not isinstance(found, list):
            return rows.fail_all("kserve-v1: the response has no `predictions` list")
        if len(found) != rows.count:
            reason = f"kserve-v1: {len(found)} predictions for {rows.count} instances"
            return rows.fail_all(reason)
        return rows.predicted(found)

    def close(self) -> None:
        self._http.close()


class KServeV2Client:
    """Open Inference Protocol REST: `POST /v2/models/NAME[/versions/V]/infer`."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        transport: Transport | None = None,
    ) -> None:
        base, full = _split_url(endpoint.url, _V2_PATH)
        version = f"/versions/{endpoint.version}" if endpoint.version else ""
        self.url = full or f"{base}/v2/models/{endpoint.name}{version}/infer"
        self._metadata_url = f"{base}/v2"
        self._input = endpoint.input_name or DEFAULT_INPUT_NAME
        self._datatype = endpoint.input_datatype or DEFAULT_DATATYPE
        self._outputs = endpoint.output_names
        self._fields = InputFields(endpoint, ctx)
        self._binary = endpoint.binary_data
        self._probe_lock = threading.Lock()
        self._ids = itertools.count()
        self._binary_heads: dict[tuple[int, int, int], bytes] = {}
        self._http = HttpClient(endpoint, ctx, transport=transport)

    def predict(self, records: Sequence[InputRecord]) -> Outcomes:
        f, datatype = self._fields, self._datatype
        named, order, exclude = f.named, f.order(records), f.exclude
        if self._uses_binary():
            rows, raw = Rows.packed(
                records, fields=named, order=order, datatype=datatype, exclude=exclude
            )
            if not rows.count:
                return rows.predicted([])
            response = self._send_binary(rows, raw)
        else:
            rows = Rows(records, fields=named, order=order, datatype=datatype, exclude=exclude)
            if not rows.count:
                return rows.predicted([])
            response = self._send_json(rows)
        try:
            values = self._values(response, count=rows.count)
        except (tensors.ShapeError, KeyError, TypeError, ValueError) as exc:
            return rows.fail_all(f"kserve-v2: unexpected response: {exc}"[:300])
        return rows.predicted(values)

    def _head(self, rows: Rows) -> dict[str, Any]:
        # KServe fails requests without an `id`; any unique string will do.
        tensor = {
            "name": self._input,
            "shape": [rows.count, rows.width],
            "datatype": self._datatype,
        }
        head: dict[str, Any] = {"id": str(next(self._ids)), "inputs": [tensor]}
        if self._outputs:
            head["outputs"] = [{"name": name} for name in self._outputs]
        return head

    def _send_json(self, rows: Rows) -> HttpResponse:
        head = self._head(rows)
        head["inputs"][0]["data"] = rows.values
        body = json_body(head)
        return self._http.send("POST", self.url, body=body, what="kserve-v2 infer")

    def _send_binary(self, rows: Rows, raw: bytes) -> HttpResponse:
        header = self._binary_header(rows, raw)
        extra = {
            _HEADER_LENGTH: str(len(header)),
            "Content-Type": "application/octet-stream",
        }
        return self._http.send(
            "POST", self.url, body=header + raw, headers=extra, what="kserve-v2 infer"
        )

    def _binary_header(self, rows: Rows, raw: bytes) -> bytes:
        """The JSON header of a binary request: all but the id depends on the tensor's shape and
        size only, so it is serialised once per shape and the id put in front."""
        shape = (rows.count, rows.width, len(raw))
        fixed = self._binary_heads.get(shape)
        if fixed is None:
            head = self._head(rows)
            del head["id"]
            head["inputs"][0]["parameters"] = {"binary_data_size": len(raw)}
            if self._outputs:
                for output in head["outputs"]:
                    output["parameters"] = {"binary_data": True}
            else:
                head["parameters"] = {"binary_data_output": True}
            fixed = json_body(head)
            if len(self._binary_heads) < _HEADS:
                self._binary_heads[shape] = fixed
        return b'{"id":"%d",' % next(self._ids) + fixed[1:]

    def _values(self, response: HttpResponse, *, count: int) -> Sequence[Any]:
        """One value per row from the response's outputs (JSON or binary)."""
        length = response.headers.get(_HEADER_LENGTH)
        if length is None:
            doc, raw = parse_json(response, what="kserve-v2 infer"), b""
        else:
            doc = json.loads(response.body[: int(length)])
            raw = response.body[int(length) :]
        outputs = []
        offset = 0
        for output in doc["outputs"]:
            size = (output.get("parameters") or {}).get("binary_data_size")
            if size is None:
                data = output["data"]
            else:
                end = offset + int(size)
                data = tensors.decode(raw[offset:end], output["datatype"], output["shape"])
                offset = end
            outputs.append((output["name"], data, output["shape"]))
        return tensors.batch_values(outputs, count=count)

    def _uses_binary(self) -> bool:
        if self._binary is None:
            with self._probe_lock:
                if self._binary is None:
                    self._binary = self._server_has_binary()
        return self._binary

    def _server_has_binary(self) -> bool:
        """Whether the server takes binary tensors; False when it will not say."""
        try:
            response = self._http.send("GET", self._metadata_url, what="kserve-v2 metadata")
            metadata = json.loads(response.body)
        except TransientError:
            raise  # the server is down: the infer call would fail too; ask again next time
        except Exception:
            return False  # no metadata (a proxy in front, an old server): stay with JSON
        return takes_binary(metadata)

    def close(self) -> None:
        self._http.close()


_KSERVE_BINARY_SINCE = (0, 14)


def takes_binary(metadata: Any) -> bool:
    """Whether server metadata (`GET /v2`) shows the binary tensor extension.

    Listed in `extensions`, or KServe's own server from the release that implements it unlisted.
    """
    if not isinstance(metadata, dict):
        return False
    extensions = metadata.get("extensions")
    if isinstance(extensions, list) and "binary_tensor_data" in extensions:
        return True
    version = re.match(r"(\d+)\.(\d+)", str(metadata.get("version", "")))
    if metadata.get("name") != "kserve" or version is None:
        return False
    return (int(version[1]), int(version[2])) >= _KSERVE_BINARY_SINCE
