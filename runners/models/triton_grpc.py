"""Open Inference Protocol over gRPC (Triton, KServe, MLServer), with tritonclient's stubs.

Why the generated stub and not `tritonclient.grpc.InferenceServerClient`: with the stub the
request is built straight from one numpy buffer, the answer keeps gRPC's status code (the
transient/rejected split below needs it) and typed output contents can be read too. Client CPU
per call measured on par with InferenceServerClient at batch 1 and 32 (within 5 %). One channel
(HTTP/2, thread-safe) is shared by all worker threads, with tritonclient's unlimited message sizes.

Tensors travel as raw contents (little-endian, see tensors.py). Outputs are read from
`raw_output_contents` when the server sends them and from the typed `contents` fields
otherwise, so servers that do not return raw outputs work too.

TLS: a `grpcs://`/`https://` URL or any `tls` block switches to a secure channel, verified
against the mounted CA bundle (else the system roots). gRPC cannot skip verification, so
`insecureSkipVerify` is a configuration error here: mount the server's CA instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from contracts.model import ModelEndpoint
from runners.api import (
    BatchRejected,
    ConfigError,
    InputRecord,
    RunContext,
    TransientError,
)
from runners.models import tensors
from runners.models.common import DEFAULT_DATATYPE, DEFAULT_INPUT_NAME, Credential, credential
from runners.models.rows import InputFields, Rows
from runners.netguard import Guard
from runners.outcomes import Outcomes
from runners.retry import ServerFault
from runners.tls import ca_file, is_insecure

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_UNLIMITED = 2**31 - 1
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", _UNLIMITED),
    ("grpc.max_receive_message_length", _UNLIMITED),
)
# Worth retrying: the server is down, overloaded, slow, or failed inside (like HTTP 5xx).
# Codes that blame the endpoint, not a record: exit 2 with what to check (see models/http.py).
ENDPOINT_CODES = {
    grpc.StatusCode.UNAUTHENTICATED: "check the key Secret or the token's audience in model.auth",
    grpc.StatusCode.PERMISSION_DENIED: "check model.auth and what that key or account may access",
    grpc.StatusCode.NOT_FOUND: "check model.url and model.name",
}
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)
# Of those, the server failed inside (like HTTP 500): perhaps on a record (a ServerFault).
SERVER_FAULT_CODES = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def grpc_target(url: str) -> tuple[str, bool]:
    """(host:port, scheme asks for TLS) from `host:port`, `grpc://host:port` or `grpcs://...`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    target = rest.split("/", 1)[0]
    return target, scheme in ("grpcs", "https")


def open_channel(endpoint: ModelEndpoint, ctx: RunContext) -> grpc.Channel:
    """An insecure or TLS channel to the endpoint, with tritonclient's message size limits."""
    target, tls_scheme = grpc_target(endpoint.url)
    # Checked once, here: gRPC resolves the name again itself (runners/netguard.py).
    Guard.of(ctx).check_authority(target, default_port=443)
    if is_insecure(endpoint.tls):
        raise ConfigError(
            "model.tls.insecureSkipVerify: gRPC cannot skip certificate verification; "
            "mount the server's CA with model.tls.caSecretRef instead"
        )
    if not tls_scheme and endpoint.tls is None:
        return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    path = ca_file(endpoint.tls, ctx, field="model.tls.caSecretRef")
    roots = None
    if path is not None:
        with open(path, "rb") as handle:
            roots = handle.read()
    creds = grpc.ssl_channel_credentials(root_certificates=roots)
    return grpc.secure_channel(target, creds, options=CHANNEL_OPTIONS)


class TritonGrpcClient:
    """`ModelInfer` over one shared gRPC channel; one request per batch."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        channel: grpc.Channel | None = None,
    ) -> None:
        self._channel = channel or open_channel(endpoint, ctx)
        self._infer = self._channel.unary_unary(  # the request goes as bytes: see _request
            INFER_METHOD, response_deserializer=service_pb2.ModelInferResponse.FromString
        )
        self._credential = credential(endpoint, ctx)
        self._metadata = _metadata(self._credential)
        self._model = endpoint.name
        self._version = endpoint.version or ""
        self._input = endpoint.input_name or DEFAULT_INPUT_NAME
        self._datatype = endpoint.input_datatype or DEFAULT_DATATYPE
        self._outputs = endpoint.output_names or []
        self._fields = InputFields(endpoint, ctx)
        self._timeout = endpoint.timeout_seconds
        self._ids = itertools.count()
        self._heads: dict[tuple[int, int], bytes] = {}

    def predict(self, records: Sequence[InputRecord]) -> Outcomes:
        f = self._fields
        rows, raw = Rows.packed(
            records,
            fields=f.named,
            order=f.order(records),
            datatype=self._datatype,
            exclude=f.exclude,
        )
        if not rows.count:
            return rows.predicted([])
        response = self._call(self._request(rows, raw))
        try:
            values = _values(response, count=rows.count)
        except (tensors.ShapeError, ValueError) as exc:
            return rows.fail_all(f"triton-grpc: unexpected response: {exc}"[:300])
        return rows.predicted(values)

    def _request(self, rows: Rows, raw: bytes) -> bytes:
        """The serialised ModelInferRequest.

        Everything but the id and the tensor's bytes depends only on the tensor's shape, so it
        is serialised once per shape and the two fields appended (protobuf parsers take fields
        in any order): a tenth of the client's CPU at a few hundred records per batch.
        """
        shape = (rows.count, rows.width)
        head = self._heads.get(shape)
        if head is None:
            request = service_pb2.ModelInferRequest(
                model_name=self._model, model_version=self._version
            )
            tensor = request.inputs.add(name=self._input, datatype=self._datatype)
            tensor.shape.extend(shape)
            for name in self._outputs:
                request.outputs.add().name = name
            head = request.SerializeToString()
            if len(self._heads) < _HEADS:
                self._heads[shape] = head
        request_id = str(next(self._ids)).encode()
        return b"".join((head, *_bytes_field(_ID, request_id), *_bytes_field(_RAW_INPUT, raw)))

    def _call(self, request: bytes) -> Any:
        try:
            metadata = self._metadata
            auth = self._credential
            if auth is not None and not auth.is_static and metadata[0][1] is not auth.value():
                metadata = self._metadata = _metadata(auth)  # a replaced ServiceAccount token
            return self._infer(request, timeout=self._timeout, metadata=metadata)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            reason = f"triton-grpc ModelInfer: {code.name}: {details}"[:300]
            if code in SERVER_FAULT_CODES:
                raise ServerFault(reason) from None
            if code in TRANSIENT_CODES:
                busy = code == grpc.StatusCode.RESOURCE_EXHAUSTED
                raise TransientError(reason, overloaded=busy) from None
            if code in ENDPOINT_CODES:
                raise ConfigError(f"{reason} ({ENDPOINT_CODES[code]})") from None
            raise BatchRejected(reason) from None

    def close(self) -> None:
        self._channel.close()


def _metadata(auth: Credential | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying the credential as it is now (gRPC wants lower-case keys)."""
    return () if auth is None else ((auth.header.lower(), auth.value()),)


# ModelInferRequest's field numbers (grpc_service.proto) and how many shapes' heads to keep
# (a run has one width and a few batch sizes: the batch size, each chunk's last batch).
_ID = 3
_RAW_INPUT = 7
_HEADS = 64


def _bytes_field(number: int, data: bytes) -> tuple[bytes, bytes, bytes]:
    """A length-delimited protobuf field: tag, length (base-128 varint), data."""
    length = bytearray()
    size = len(data)
    while size > 0x7F:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return bytes((number << 3 | 2,)), bytes(length), data


def _values(response: Any, *, count: int) -> Sequence[Any]:
    """One value per row from raw or typed output contents."""
    raw = response.raw_output_contents
    outputs = []
    for index, output in enumerate(response.outputs):
        shape = list(output.shape)
        if index < len(raw):
            data = tensors.decode(raw[index], output.datatype, shape)
        else:
            data = _typed(output)
        outputs.append((output.name, data, shape))
    return tensors.batch_values(outputs, count=count)


def _typed(output: Any) -> np.ndarray[Any, Any]:
    field = _CONTENTS.get(output.datatype)
    if field is None:
        raise tensors.ShapeError(f"output {output.name}: no raw contents for {output.datatype}")
    values = list(getattr(output.contents, field))
    if output.datatype == "BYTES":
        values = [v.decode(errors="replace") for v in values]
    return np.array(values, dtype=object if output.datatype == "BYTES" else None)
