"""KServe v1 and v2 (Open Inference Protocol) REST clients: request shapes and answer mapping.

Faked: the HTTP transport (`FakeTransport`: a handler function returning canned responses).
Real: the clients, JSON and binary tensor encoding (numpy), endpoint validation (pydantic).
The same clients against real KServe, MLServer and Triton are in test_model_real_servers.py.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from model_fakes import FakeTransport, Sent, endpoint, iris, records, reply

from runners.api import Prediction, RecordFailure, RunContext, TransientError
from runners.models.http import HttpResponse
from runners.models.kserve import KServeV1Client, KServeV2Client, takes_binary

SETOSA = [5.1, 3.5, 1.4, 0.2]
VIRGINICA = [6.7, 3.0, 5.2, 2.3]


def v2_answer(data: list[object], *, shape: list[int], name: str = "output-0") -> HttpResponse:
    return reply({"outputs": [{"name": name, "shape": shape, "datatype": "INT64", "data": data}]})


def test_v1_posts_instances_to_the_predict_url(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"predictions": [0, 2]}))
    client = KServeV1Client(endpoint("kserve-v1"), ctx, transport=fake)
    assert client.predict(iris(SETOSA, VIRGINICA)) == [Prediction(0), Prediction(2)]
    sent = fake.sent[0]
    assert sent.url == "http://model:8080/v1/models/iris:predict"
    assert sent.json() == {"instances": [SETOSA, VIRGINICA]}
    assert sent.headers["Content-Type"] == "application/json"


def test_v1_uses_a_full_predict_url_as_given(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"predictions": [1]}))
    url = "iris.ns.svc.cluster.local/v1/models/sklearn-iris:predict"
    KServeV1Client(endpoint("kserve-v1", url), ctx, transport=fake).predict(iris(SETOSA))
    assert fake.sent[0].url == f"http://{url}"


def test_v1_sends_strings_as_they_are(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"predictions": ["positive"]}))
    client = KServeV1Client(endpoint("kserve-v1", input_fields=["text"]), ctx, transport=fake)
    assert client.predict(records({"text": "great", "id": 7})) == [Prediction("positive")]
    assert fake.sent[0].json() == {"instances": [["great"]]}


def test_v1_fails_every_record_when_prediction_count_is_wrong(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"predictions": [0]}))
    client = KServeV1Client(endpoint("kserve-v1"), ctx, transport=fake)
    outcomes = client.predict(iris(SETOSA, VIRGINICA))
    assert all(isinstance(o, RecordFailure) and "1 predictions for 2" in o.reason for o in outcomes)


def test_v1_fails_every_record_without_predictions(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"outputs": []}))
    outcomes = KServeV1Client(endpoint("kserve-v1"), ctx, transport=fake).predict(iris(SETOSA))
    assert outcomes == [RecordFailure("kserve-v1: the response has no `predictions` list")]


def test_v2_posts_one_row_major_tensor(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([0, 2], shape=[2]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    assert client.predict(iris(SETOSA, VIRGINICA)) == [Prediction(0), Prediction(2)]
    body = fake.sent[0].json()
    assert fake.sent[0].url == "http://model:8080/v2/models/iris/infer"
    assert body["id"]
    assert body["inputs"] == [
        {"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": SETOSA + VIRGINICA}
    ]
    assert "outputs" not in body


def test_v2_names_input_datatype_version_and_outputs(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([[1]], shape=[1, 1], name="label"))
    model = endpoint(
        "kserve-v2",
        version="3",
        input_name="x",
        input_datatype="FP64",
        output_names=["label"],
        binary_data=False,
    )
    assert KServeV2Client(model, ctx, transport=fake).predict(iris(SETOSA)) == [Prediction([1])]
    body = fake.sent[0].json()
    assert fake.sent[0].url == "http://model:8080/v2/models/iris/versions/3/infer"
    assert (body["inputs"][0]["name"], body["inputs"][0]["datatype"]) == ("x", "FP64")
    assert body["outputs"] == [{"name": "label"}]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "iris-predictor.ns.svc.cluster.local/v2/models/granite/infer",
            "http://iris-predictor.ns.svc.cluster.local/v2/models/granite/infer",
        ),
        ("https://h/v2/models/m/versions/2/infer", "https://h/v2/models/m/versions/2/infer"),
        ("http://h:8080/", "http://h:8080/v2/models/iris/infer"),
        ("h:8080/prefix", "http://h:8080/prefix/v2/models/iris/infer"),
        ("http://h:8080/v2/", "http://h:8080/v2/models/iris/infer"),
    ],
)
def test_v2_normalises_krateo_and_base_urls(url: str, expected: str, ctx: RunContext) -> None:
    client = KServeV2Client(endpoint("kserve-v2", url), ctx, transport=FakeTransport(reply))
    assert client.url == expected


def test_v2_takes_input_fields_in_order(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([1], shape=[1]))
    model = endpoint("kserve-v2", input_fields=["b", "a"], binary_data=False)
    KServeV2Client(model, ctx, transport=fake).predict(records({"id": "x", "a": 1.0, "b": 2.0}))
    assert fake.sent[0].json()["inputs"][0]["data"] == [2.0, 1.0]


def test_v2_uses_a_list_field_as_the_row(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([0], shape=[1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    client.predict(records({"features": SETOSA}))
    assert fake.sent[0].json()["inputs"][0]["data"] == SETOSA


def test_v2_converts_numeric_strings(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([0], shape=[1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    client.predict(records({"a": "5.1", "b": 3}))
    assert fake.sent[0].json()["inputs"][0]["data"] == [5.1, 3]


def test_v2_fails_only_the_records_that_are_not_numeric(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([2], shape=[1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    outcomes = client.predict(
        records({"a": "tall", "b": 1.0}, {"a": 6.7, "b": 3.0}, {"a": 1.0, "b": None})
    )
    assert outcomes[1] == Prediction(2)
    assert outcomes[0] == RecordFailure("value 'tall' is not a number")
    assert outcomes[2] == RecordFailure("value None is not a number")
    assert fake.sent[0].json()["inputs"][0]["shape"] == [1, 2]


def test_v2_sends_bools_as_one_and_zero_for_a_numeric_datatype(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([0, 1], shape=[2]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    client.predict(records({"a": 5.1, "b": True}, {"a": 4.9, "b": False}))
    assert fake.sent[0].json()["inputs"][0]["data"] == [5.1, 1, 4.9, 0]


def test_v2_fails_records_missing_an_input_field(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([2], shape=[1]))
    model = endpoint("kserve-v2", input_fields=["a", "b"], binary_data=False)
    outcomes = KServeV2Client(model, ctx, transport=fake).predict(
        records({"a": 1}, {"a": 1, "b": 2})
    )
    assert outcomes == [RecordFailure("record has no field 'b'"), Prediction(2)]


def test_v2_fails_records_of_another_width(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([0, 2], shape=[2]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    outcomes = client.predict(records({"f": SETOSA}, {"f": [1.0]}, {"f": VIRGINICA}))
    assert outcomes[1] == RecordFailure("record has 1 input values, the batch has 4")
    assert outcomes[0] == Prediction(0)
    assert outcomes[2] == Prediction(2)


def test_v2_sends_nothing_when_every_record_fails(ctx: RunContext) -> None:
    fake = FakeTransport(reply)
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    assert client.predict(records({"a": "x"})) == [RecordFailure("value 'x' is not a number")]
    assert fake.sent == []


def test_v2_maps_row_outputs_and_several_outputs(ctx: RunContext) -> None:
    answer = reply(
        {
            "outputs": [
                {"name": "label", "shape": [2, 1], "datatype": "INT64", "data": [0, 2]},
                {"name": "proba", "shape": [2, 2], "datatype": "FP32", "data": [0.9, 0.1, 0, 1]},
            ]
        }
    )
    client = KServeV2Client(
        endpoint("kserve-v2", binary_data=False), ctx, transport=FakeTransport(lambda _: answer)
    )
    assert client.predict(iris(SETOSA, VIRGINICA)) == [
        Prediction({"label": [0], "proba": [0.9, 0.1]}),
        Prediction({"label": [2], "proba": [0, 1]}),
    ]


def test_v2_accepts_nested_output_data(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([[0], [2]], shape=[2, 1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    assert client.predict(iris(SETOSA, VIRGINICA)) == [Prediction([0]), Prediction([2])]


def test_v2_fails_every_record_when_the_output_is_not_per_record(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: v2_answer([1], shape=[1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    outcomes = client.predict(iris(SETOSA, VIRGINICA))
    assert all(isinstance(o, RecordFailure) and "batch size 2" in o.reason for o in outcomes)


def test_v2_fails_every_record_when_outputs_are_missing(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"model_name": "iris"}))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), ctx, transport=fake)
    [outcome] = client.predict(iris(SETOSA))
    assert isinstance(outcome, RecordFailure)
    assert "unexpected response" in outcome.reason


def binary_answer(sent: Sent) -> HttpResponse:
    """What Triton sends for binary outputs: JSON header, then the raw INT64 tensor."""
    assert sent.body is not None
    size = int(sent.headers["inference-header-content-length"])
    rows = json.loads(sent.body[:size])["inputs"][0]["shape"][0]
    raw = np.arange(rows, dtype="<i8").tobytes()
    head = {
        "outputs": [
            {
                "name": "label",
                "datatype": "INT64",
                "shape": [rows],
                "parameters": {"binary_data_size": len(raw)},
            }
        ]
    }
    header = json.dumps(head).encode()
    fields = {"inference-header-content-length": str(len(header))}
    return HttpResponse(200, fields, header + raw)


def test_v2_binary_sends_raw_tensor_after_the_json_header(ctx: RunContext) -> None:
    fake = FakeTransport(binary_answer)
    client = KServeV2Client(endpoint("kserve-v2", binary_data=True), ctx, transport=fake)
    assert client.predict(iris(SETOSA, VIRGINICA)) == [Prediction(0), Prediction(1)]
    sent = fake.sent[0]
    assert sent.body is not None
    size = int(sent.headers["inference-header-content-length"])
    head = json.loads(sent.body[:size])
    assert head["inputs"][0]["parameters"] == {"binary_data_size": 32}
    assert head["parameters"] == {"binary_data_output": True}
    raw = np.frombuffer(sent.body[size:], dtype="<f4").reshape(2, 4)
    assert raw.tolist() == np.asarray([SETOSA, VIRGINICA], dtype=np.float32).tolist()


def test_v2_binary_requests_of_each_shape_carry_their_own_header_and_a_fresh_id(
    ctx: RunContext,
) -> None:
    fake = FakeTransport(binary_answer)
    client = KServeV2Client(endpoint("kserve-v2", binary_data=True), ctx, transport=fake)
    batches = [[SETOSA, VIRGINICA], [VIRGINICA] * 3, [SETOSA, SETOSA]]
    for batch in batches:
        assert client.predict(iris(*batch)) == [Prediction(i) for i in range(len(batch))]
    heads = []
    for sent, batch in zip(fake.sent, batches, strict=True):
        assert sent.body is not None
        size = int(sent.headers["inference-header-content-length"])
        heads.append(json.loads(sent.body[:size]))
        assert heads[-1]["inputs"][0]["shape"] == [len(batch), 4]
        assert heads[-1]["inputs"][0]["parameters"] == {"binary_data_size": 16 * len(batch)}
        raw = np.frombuffer(sent.body[size:], dtype="<f4").reshape(len(batch), 4)
        assert raw.tolist() == np.asarray(batch, dtype=np.float32).tolist()
    assert len({head["id"] for head in heads}) == 3


def test_v2_binary_asks_for_named_outputs_in_binary(ctx: RunContext) -> None:
    fake = FakeTransport(binary_answer)
    model = endpoint("kserve-v2", binary_data=True, output_names=["label"])
    KServeV2Client(model, ctx, transport=fake).predict(iris(SETOSA))
    assert fake.sent[0].body is not None
    assert b'"outputs":[{"name":"label","parameters":{"binary_data":true}}]' in fake.sent[0].body


def test_v2_binary_encodes_bytes_tensors_with_length_prefixes(ctx: RunContext) -> None:
    fake = FakeTransport(binary_answer)
    model = endpoint("kserve-v2", binary_data=True, input_datatype="BYTES")
    KServeV2Client(model, ctx, transport=fake).predict(records({"text": "héllo"}))
    body = fake.sent[0].body
    assert body is not None
    assert body.endswith(struct.pack("<I", 6) + "héllo".encode())


def metadata_then(extensions: list[str]) -> FakeTransport:
    def handle(sent: Sent) -> HttpResponse:
        if sent.method == "GET":
            return reply({"name": "server", "extensions": extensions})
        if "inference-header-content-length" in sent.headers:
            return binary_answer(sent)
        return v2_answer([0], shape=[1])

    return FakeTransport(handle)


def test_v2_uses_binary_when_the_server_lists_the_extension(ctx: RunContext) -> None:
    fake = metadata_then(["classification", "binary_tensor_data"])
    client = KServeV2Client(endpoint("kserve-v2"), ctx, transport=fake)
    client.predict(iris(SETOSA))
    client.predict(iris(SETOSA))
    assert [s.method for s in fake.sent] == ["GET", "POST", "POST"]
    assert fake.sent[0].url == "http://model:8080/v2"
    assert "inference-header-content-length" in fake.sent[1].headers


def test_v2_uses_json_when_the_server_does_not_list_the_extension(ctx: RunContext) -> None:
    fake = metadata_then([])
    KServeV2Client(endpoint("kserve-v2"), ctx, transport=fake).predict(iris(SETOSA))
    assert "inference-header-content-length" not in fake.sent[1].headers


def test_v2_uses_binary_with_kserve_which_implements_the_extension_unlisted(
    ctx: RunContext,
) -> None:
    def handle(sent: Sent) -> HttpResponse:
        if sent.method == "GET":
            return reply({"name": "kserve", "version": "0.21.0", "extensions": ["model_repo"]})
        return binary_answer(sent)

    fake = FakeTransport(handle)
    KServeV2Client(endpoint("kserve-v2"), ctx, transport=fake).predict(iris(SETOSA))
    assert "inference-header-content-length" in fake.sent[1].headers


@pytest.mark.parametrize(
    ("metadata", "binary"),
    [
        ({"name": "kserve", "version": "0.14.0", "extensions": []}, True),
        ({"name": "kserve", "version": "0.13.1", "extensions": []}, False),
        ({"name": "kserve", "version": "1.0.0rc1"}, True),
        ({"name": "kserve", "version": "dev"}, False),
        ({"name": "mlserver", "version": "1.7.1", "extensions": []}, False),
        ({"name": "triton", "extensions": ["binary_tensor_data"]}, True),
        ({"extensions": "binary_tensor_data"}, False),
        (["binary_tensor_data"], False),
    ],
)
def test_binary_extension_is_read_from_server_metadata(metadata: Any, binary: bool) -> None:
    assert takes_binary(metadata) is binary


def test_v2_uses_json_when_the_server_has_no_metadata(ctx: RunContext) -> None:
    def handle(sent: Sent) -> HttpResponse:
        return (
            reply(b"not found", status=404) if sent.method == "GET" else v2_answer([0], shape=[1])
        )

    fake = FakeTransport(handle)
    client = KServeV2Client(endpoint("kserve-v2"), ctx, transport=fake)
    assert client.predict(iris(SETOSA)) == [Prediction(0)]


def test_v2_asks_again_when_the_server_was_down(ctx: RunContext) -> None:
    down = True

    def handle(sent: Sent) -> HttpResponse:
        if down:
            raise ConnectionRefusedError("refused")
        return metadata_then(["binary_tensor_data"]).handler(sent)

    fake = FakeTransport(handle)
    client = KServeV2Client(endpoint("kserve-v2"), ctx, transport=fake)
    with pytest.raises(TransientError):
        client.predict(iris(SETOSA))
    down = False
    assert client.predict(iris(SETOSA)) == [Prediction(0)]
    assert [s.method for s in fake.sent] == ["GET", "GET", "POST"]


def test_close_closes_the_transport(ctx: RunContext) -> None:
    fake = FakeTransport(reply)
    KServeV1Client(endpoint("kserve-v1"), ctx, transport=fake).close()
    assert fake.closed


def test_the_input_id_field_is_not_sent_as_a_feature(ctx: RunContext) -> None:
    keyed = replace(ctx, id_field="id")
    rows = records({"id": 7, "a": 1.0, "b": 2.0}, {"id": 8, "a": 3.0, "b": 4.0})
    v1 = FakeTransport(lambda _: reply({"predictions": [0, 1]}))
    KServeV1Client(endpoint("kserve-v1"), keyed, transport=v1).predict(rows)
    assert v1.sent[0].json() == {"instances": [[1.0, 2.0], [3.0, 4.0]]}
    v2 = FakeTransport(lambda _: v2_answer([0, 1], shape=[2]))
    KServeV2Client(endpoint("kserve-v2", binary_data=False), keyed, transport=v2).predict(rows)
    assert v2.sent[0].json()["inputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]


def test_the_id_field_is_sent_when_named_in_input_fields(ctx: RunContext) -> None:
    keyed = replace(ctx, id_field="id")
    fake = FakeTransport(lambda _: reply({"predictions": [0]}))
    model = endpoint("kserve-v1", input_fields=["id", "a"])
    KServeV1Client(model, keyed, transport=fake).predict(records({"id": 7, "a": 1.0, "b": 2.0}))
    assert fake.sent[0].json() == {"instances": [[7, 1.0]]}


# -- issue 15 item 1: the feature order is the input's first record's, for the whole run --------

NAMES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


def test_every_batch_follows_the_inputs_first_record_whatever_its_own_key_order(
    ctx: RunContext,
) -> None:
    # The run's first record (read by the runner for every pod, resumed ones too) fixes the order;
    # this batch, far into the input, starts with a record whose producer reversed the keys.
    first = dict(zip(NAMES, SETOSA, strict=True))
    run = replace(ctx, first_record=lambda: first)
    reversed_keys = dict(reversed(list(zip(NAMES, VIRGINICA, strict=True))))
    batch = records(reversed_keys, dict(zip(NAMES, SETOSA, strict=True)))
    v1 = FakeTransport(lambda _: reply({"predictions": [2, 0]}))
    KServeV1Client(endpoint("kserve-v1"), run, transport=v1).predict(batch)
    assert v1.sent[0].json() == {"instances": [VIRGINICA, SETOSA]}
    for binary in (False, True):
        v2 = FakeTransport(lambda _: v2_answer([2, 0], shape=[2]))
        client = KServeV2Client(endpoint("kserve-v2", binary_data=binary), run, transport=v2)
        assert client.predict(batch) == [Prediction(2), Prediction(0)]
        body = v2.sent[0].body or b""
        if binary:
            head = int(v2.sent[0].headers["inference-header-content-length"])
            sent = np.frombuffer(body[head:], dtype="<f4").tolist()
        else:
            sent = json.loads(body)["inputs"][0]["data"]
        assert sent == pytest.approx(VIRGINICA + SETOSA)


def test_a_record_without_the_first_records_fields_fails_naming_them(ctx: RunContext) -> None:
    run = replace(ctx, first_record=lambda: {"a": 1.0, "b": 2.0})
    fake = FakeTransport(lambda _: v2_answer([7], shape=[1]))
    client = KServeV2Client(endpoint("kserve-v2", binary_data=False), run, transport=fake)
    outcomes = client.predict(records({"a": 1.0, "c": 2.0}, {"b": 2.0, "a": 1.0}))
    assert outcomes == [
        RecordFailure(
            "record's fields differ from the input's first record "
            "(model.inputFields unset): missing ['b'], extra ['c']"
        ),
        Prediction(7),
    ]
    assert fake.sent[0].json()["inputs"][0]["data"] == [1.0, 2.0]
