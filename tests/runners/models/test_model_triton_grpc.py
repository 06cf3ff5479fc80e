"""Triton gRPC client against an in-process gRPC inference service.

Real: gRPC (a `grpc.server` on 127.0.0.1 speaking tritonclient's generated GRPCInferenceService,
plain and TLS with an `openssl`-made certificate), protobuf, numpy. Faked: the model behind the
service (a handler function per test), and the kubelet, by replacing a ServiceAccount token
file the test wrote. Real Triton, KServe and MLServer are in
test_model_real_servers.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from model_fakes import Certificate, endpoint, iris, records
from tritonclient.grpc import service_pb2, service_pb2_grpc

from contracts.auth import MODEL_TOKEN_PATH_ENV
from runners.api import (
    BatchRejected,
    ConfigError,
    Prediction,
    RecordFailure,
    RunContext,
    TransientError,
)
from runners.columns import TensorValues
from runners.models import common, tensors
from runners.models.triton_grpc import TritonGrpcClient, grpc_target

SETOSA = [5.1, 3.5, 1.4, 0.2]
VIRGINICA = [6.7, 3.0, 5.2, 2.3]
Model = Callable[[Any, Any], Any]


class Service(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(self, model: Model) -> None:
        self.model = model
        self.seen: list[tuple[Any, dict[str, str]]] = []

    def ModelInfer(self, request: Any, context: Any) -> Any:
        self.seen.append((request, dict(context.invocation_metadata())))
        return self.model(request, context)


def classify(request: Any, context: Any) -> Any:
    """Raw INT64 labels: 0 when petal length < 2.5, else 2."""
    shape = list(request.inputs[0].shape)
    rows = np.frombuffer(request.raw_input_contents[0], dtype="<f4").reshape(shape)
    labels = np.where(rows[:, 2] < 2.5, 0, 2).astype("<i8")
    response = service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
    output = response.outputs.add(name="label", datatype="INT64")
    output.shape.extend([shape[0]])
    response.raw_output_contents.append(labels.tobytes())
    return response


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[str, Service]]]:
    servers: list[Any] = []

    def start(model: Model, *, tls: Certificate | None = None) -> tuple[str, Service]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service = Service(model)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
        if tls is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            creds = grpc.ssl_server_credentials([(tls.key.read_bytes(), tls.cert.read_bytes())])
            port = server.add_secure_port("127.0.0.1:0", creds)
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}", service

    yield start
    for server in servers:
        server.stop(None).wait()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("triton:8001", ("triton:8001", False)),
        ("grpc://triton:8001", ("triton:8001", False)),
        ("grpcs://triton:8001", ("triton:8001", True)),
        ("https://triton:8001/", ("triton:8001", True)),
    ],
)
def test_grpc_target_reads_host_port_with_or_without_scheme(
    url: str, expected: tuple[str, bool]
) -> None:
    assert grpc_target(url) == expected


def test_sends_one_raw_tensor_and_maps_raw_outputs(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    target, service = serve(classify)
    model = endpoint("triton-grpc", f"grpc://{target}", version="1", output_names=["label"])
    client = TritonGrpcClient(model, ctx)
    try:
        assert client.predict(iris(SETOSA, VIRGINICA)) == [Prediction(0), Prediction(2)]
    finally:
        client.close()
    request, _ = service.seen[0]
    assert (request.model_name, request.model_version) == ("iris", "1")
    assert request.inputs[0].name == "input-0"
    assert request.inputs[0].datatype == "FP32"
    assert list(request.inputs[0].shape) == [2, 4]
    assert [o.name for o in request.outputs] == ["label"]


def test_numeric_outputs_are_kept_as_tensors_and_a_bytes_output_makes_values_at_once(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    def answer(request: Any, context: Any) -> Any:
        response = classify(request, context)
        if request.outputs[0].name == "names":  # a second output of strings
            output = response.outputs.add(name="names", datatype="BYTES")
            output.shape.extend([2])
            response.raw_output_contents.append(tensors.encode_values(["a", "b"], "BYTES"))
        return response

    target, _ = serve(answer)
    for outputs, kept in ((["label"], True), (["names"], False)):
        client = TritonGrpcClient(endpoint("triton-grpc", target, output_names=outputs), ctx)
        try:
            outcomes = client.predict(iris(SETOSA, VIRGINICA))
        finally:
            client.close()
        assert (type(outcomes.values) is TensorValues) is kept  # runners/parquetparts.py
        want = [0, 2] if kept else [{"label": 0, "names": "a"}, {"label": 2, "names": "b"}]
        assert list(outcomes.values) == want and outcomes == [Prediction(v) for v in want]


def test_requests_of_each_batch_shape_carry_their_own_tensor_and_a_fresh_id(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    target, service = serve(classify)
    client = TritonGrpcClient(endpoint("triton-grpc", target, output_names=["label"]), ctx)
    big = [VIRGINICA] * 150 + [SETOSA] * 150  # 4,800 bytes: a two-byte length on the wire
    try:
        for batch in ([SETOSA, VIRGINICA], big, [VIRGINICA, SETOSA]):
            assert client.predict(iris(*batch)) == [
                Prediction(0 if row is SETOSA else 2) for row in batch
            ]
    finally:
        client.close()
    requests = [request for request, _ in service.seen]
    assert [list(r.inputs[0].shape) for r in requests] == [[2, 4], [300, 4], [2, 4]]
    sent = [np.frombuffer(r.raw_input_contents[0], dtype="<f4").tolist() for r in requests]
    assert sent[1] == np.asarray(big, dtype="<f4").ravel().tolist()
    assert sent[2] == np.asarray([VIRGINICA, SETOSA], dtype="<f4").ravel().tolist()
    assert len({r.id for r in requests}) == 3
    assert all(
        r.model_name == "iris" and [o.name for o in r.outputs] == ["label"] for r in requests
    )


def test_reads_typed_contents_when_the_server_sends_no_raw_outputs(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    def typed(request: Any, context: Any) -> Any:
        response = service_pb2.ModelInferResponse()
        output = response.outputs.add(name="proba", datatype="FP32")
        output.shape.extend([1, 2])
        output.contents.fp32_contents.extend([0.25, 0.75])
        return response

    target, _ = serve(typed)
    client = TritonGrpcClient(endpoint("triton-grpc", target), ctx)
    try:
        assert client.predict(iris(SETOSA)) == [Prediction([0.25, 0.75])]
    finally:
        client.close()


def test_fails_records_that_are_not_numeric_without_sending_them(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    target, service = serve(classify)
    client = TritonGrpcClient(endpoint("triton-grpc", target), ctx)
    try:
        outcomes = client.predict(
            records({"a": "x", "b": 1, "c": 1, "d": 1}, dict(zip("abcd", VIRGINICA, strict=True)))
        )
    finally:
        client.close()
    assert outcomes == [RecordFailure("value 'x' is not a number"), Prediction(2)]
    assert list(service.seen[0][0].inputs[0].shape) == [1, 4]


def test_fails_every_record_when_the_output_is_not_per_record(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    def scalar(request: Any, context: Any) -> Any:
        response = service_pb2.ModelInferResponse()
        output = response.outputs.add(name="sum", datatype="INT64")
        output.shape.extend([1])
        response.raw_output_contents.append(np.array([3], dtype="<i8").tobytes())
        return response

    target, _ = serve(scalar)
    client = TritonGrpcClient(endpoint("triton-grpc", target), ctx)
    try:
        outcomes = client.predict(iris(SETOSA, VIRGINICA))
    finally:
        client.close()
    assert all(isinstance(o, RecordFailure) and "batch size 2" in o.reason for o in outcomes)


def test_invalid_argument_rejects_the_batch(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    def refuse(request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unexpected shape [2,4]")

    target, _ = serve(refuse)
    client = TritonGrpcClient(endpoint("triton-grpc", target), ctx)
    try:
        with pytest.raises(BatchRejected, match=r"INVALID_ARGUMENT: unexpected shape \[2,4\]"):
            client.predict(iris(SETOSA))
    finally:
        client.close()


def test_unavailable_server_is_transient(ctx: RunContext) -> None:
    client = TritonGrpcClient(endpoint("triton-grpc", "127.0.0.1:1", timeout_seconds=2), ctx)
    try:
        with pytest.raises(TransientError, match="UNAVAILABLE"):
            client.predict(iris(SETOSA))
    finally:
        client.close()


def test_deadline_is_transient(serve: Callable[..., tuple[str, Service]], ctx: RunContext) -> None:
    def slow(request: Any, context: Any) -> Any:
        time.sleep(0.5)
        return classify(request, context)

    target, _ = serve(slow)
    client = TritonGrpcClient(endpoint("triton-grpc", target, timeout_seconds=0.1), ctx)
    try:
        with pytest.raises(TransientError, match="DEADLINE_EXCEEDED"):
            client.predict(iris(SETOSA))
    finally:
        client.close()


def test_sends_the_api_key_as_metadata(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext, put_secret: Callable[..., Path]
) -> None:
    put_secret("triton-key", "token", "t0k")
    target, service = serve(classify)
    auth = {"secret_ref": {"name": "triton-key", "key": "token"}, "header": "X-API-Key"}
    client = TritonGrpcClient(endpoint("triton-grpc", target, auth=auth), ctx)
    try:
        client.predict(iris(SETOSA))
    finally:
        client.close()
    assert service.seen[0][1]["x-api-key"] == "t0k"


def test_sends_the_service_account_token_and_the_new_one_once_it_is_replaced(
    serve: Callable[..., tuple[str, Service]],
    ctx: RunContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = tmp_path / "token"
    token.write_text("first.jwt.sig")
    monkeypatch.setenv(MODEL_TOKEN_PATH_ENV, str(token))
    monkeypatch.setattr(common, "CHECK_SECONDS", 0.0)
    target, service = serve(classify)
    auth = {"service_account_token": {"audience": "models.example"}}
    client = TritonGrpcClient(endpoint("triton-grpc", target, auth=auth), ctx)
    try:
        client.predict(iris(SETOSA))
        fresh = tmp_path / "fresh"
        fresh.write_text("second.jwt.sig\n")
        os.replace(fresh, token)  # the kubelet's swap: a new inode
        client.predict(iris(SETOSA))
    finally:
        client.close()
    said = [metadata["authorization"] for _, metadata in service.seen]
    assert said == ["Bearer first.jwt.sig", "Bearer second.jwt.sig"]


def test_tls_verifies_against_the_ca_from_the_secret(
    serve: Callable[..., tuple[str, Service]],
    ctx: RunContext,
    certificate: Certificate,
    put_secret: Callable[..., Path],
) -> None:
    target, _ = serve(classify, tls=certificate)
    put_secret("triton-ca", "ca.crt", certificate.cert.read_bytes())
    url = f"grpcs://localhost:{target.rsplit(':', 1)[1]}"
    tls = {"ca_secret_ref": {"name": "triton-ca", "key": "ca.crt"}}
    client = TritonGrpcClient(endpoint("triton-grpc", url, tls=tls), ctx)
    try:
        assert client.predict(iris(SETOSA)) == [Prediction(0)]
    finally:
        client.close()


def test_insecure_skip_verify_is_a_config_error(ctx: RunContext) -> None:
    model = endpoint("triton-grpc", "grpcs://triton:8001", tls={"insecure_skip_verify": True})
    with pytest.raises(ConfigError, match="insecureSkipVerify"):
        TritonGrpcClient(model, ctx)


def test_every_batch_follows_the_inputs_first_record_whatever_its_own_key_order(
    serve: Callable[..., tuple[str, Service]], ctx: RunContext
) -> None:
    # Issue 15 item 1: the input's first record fixes the feature order for the whole run.
    names = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    run = replace(ctx, first_record=lambda: dict(zip(names, SETOSA, strict=True)))
    target, service = serve(classify)
    client = TritonGrpcClient(endpoint("triton-grpc", target), run)
    reversed_keys = dict(reversed(list(zip(names, VIRGINICA, strict=True))))
    try:
        outcomes = client.predict(records(reversed_keys, dict(zip(names, SETOSA, strict=True))))
    finally:
        client.close()
    assert outcomes == [Prediction(2), Prediction(0)]
    request, _ = service.seen[0]
    sent = np.frombuffer(request.raw_input_contents[0], dtype="<f4").tolist()
    assert sent == pytest.approx(VIRGINICA + SETOSA)
