"""OpenAI's Batch API on the whole system, driven by the official `openai` Python client.

Real: a Kubernetes (the emulator, or with LONGRUN_KUBE_BACKEND=real kube-apiserver, etcd and
kube-controller-manager), `longrun controller` and `longrun batch-api` as processes, the node
agent running the real runner, the llama.cpp server (e2e/peers) answering every request, the
directory file store, and the `openai` client with only base_url and key changed (the key: a
ServiceAccount token, checked by TokenReview and SubjectAccessReview). Nothing is faked.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from e2e.peers.server import PeerServer
from e2e.system import System
from tests.batchapi.strict import strict
from tests.e2e.batch_api import (
    ENDPOINT,
    BatchApiProcess,
    requests_file,
    serve_batch_api,
    tenant,
    wait_status,
)

pytestmark = pytest.mark.requires_service


@pytest.fixture
def batch_api(system: System, tmp_path: Path) -> Iterator[BatchApiProcess]:
    yield from serve_batch_api(system, tmp_path)


def test_a_batch_runs_on_llama_cpp_and_its_results_download(
    system: System, batch_api: BatchApiProcess, llama_chat_server: PeerServer
) -> None:
    ns, key = tenant(system, "batch-flow", llama_chat_server)
    with batch_api.client(key, ns) as client:
        uploaded = client.files.create(file=("requests.jsonl", requests_file(25)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id,
            endpoint=ENDPOINT,
            completion_window="24h",
            metadata={"suite": "e2e"},
        )
        done = wait_status(client, batch.id, "completed")
        raw = client.batches.with_raw_response.retrieve(batch.id).http_response.json()
        strict("batch", raw)
        assert raw["request_counts"] == {"total": 25, "completed": 25, "failed": 0}
        assert raw["in_progress_at"] and raw["completed_at"] and raw["error_file_id"] is None
        assert raw["usage"]["total_tokens"] > 0 and raw["metadata"] == {"suite": "e2e"}
        lines = [
            json.loads(x) for x in client.files.content(done.output_file_id).read().splitlines()
        ]
        assert sorted(line["custom_id"] for line in lines) == sorted(f"req-{i}" for i in range(25))
        assert {line["response"]["status_code"] for line in lines} == {200}
        usage = sum(line["response"]["body"]["usage"]["total_tokens"] for line in lines)
        assert raw["usage"]["total_tokens"] == usage
        listed = client.batches.list()
        assert [b.id for b in listed] == [batch.id]
    run = system.get("inferencerun", "batch-" + batch.id.removeprefix("batch_"), ns)
    assert run is not None and run["status"]["phase"] == "Succeeded"
    logged = batch_api.log.read_text()
    assert f"create_batch 200 {ns} system:serviceaccount:{ns}:client" in logged
    assert key not in logged and "Count to" not in logged  # no token, no file content


@pytest.fixture
def vllm(request: pytest.FixtureRequest) -> PeerServer:
    """vLLM's peer server, where this tree has it (issue 27 item 5 adds it to e2e/peers)."""
    try:
        server: PeerServer = request.getfixturevalue("vllm_server")
    except pytest.FixtureLookupError:
        pytest.skip("no vLLM peer in this tree (e2e/peers' vllm_server, issue 27 item 5)")
    return server


def test_a_batch_runs_on_vllm(vllm: PeerServer, system: System, batch_api: BatchApiProcess) -> None:
    ns, key = tenant(system, "batch-vllm", vllm)
    with batch_api.client(key, ns) as client:
        uploaded = client.files.create(file=("r.jsonl", requests_file(40)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        done = wait_status(client, batch.id, "completed", timeout=300)
        raw = client.batches.with_raw_response.retrieve(batch.id).http_response.json()
        strict("batch", raw)
        assert raw["request_counts"] == {"total": 40, "completed": 40, "failed": 0}
        lines = [
            json.loads(x) for x in client.files.content(done.output_file_id).read().splitlines()
        ]
        assert sorted(line["custom_id"] for line in lines) == sorted(f"req-{i}" for i in range(40))
        assert {line["response"]["body"]["object"] for line in lines} == {"chat.completion"}
        usage = sum(line["response"]["body"]["usage"]["total_tokens"] for line in lines)
        assert raw["usage"]["total_tokens"] == usage > 0


def test_files_in_s3_reach_the_runner_and_its_results_the_client(
    system: System, llama_chat_server: PeerServer, moto_endpoint: str, tmp_path: Path
) -> None:
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"batches-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    store = [
        "--s3-bucket",
        bucket,
        "--s3-prefix",
        "batch-api",
        "--s3-endpoint-url",
        moto_endpoint,
        "--s3-path-style",
        "--s3-runner-secret",
        "runner-s3",
    ]
    assert system.handle is not None
    env = {**keys, "AWS_DEFAULT_REGION": "us-east-1"}
    api = BatchApiProcess(system.handle.kubeconfig_path, tmp_path / "api", store, env=env)
    api.start()
    try:
        ns, key = tenant(system, "batch-s3", llama_chat_server)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "runner-s3"},
            "stringData": keys,
        }
        system.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(secret))
        with api.client(key, ns) as client:
            uploaded = client.files.create(file=("r.jsonl", requests_file(15)), purpose="batch")
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
            )
            done = wait_status(client, batch.id, "completed")
            assert done.request_counts.completed == 15
            lines = client.files.content(done.output_file_id).read().splitlines()
            ids = sorted(json.loads(line)["custom_id"] for line in lines)
            assert ids == sorted(f"req-{i}" for i in range(15))
        stored = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        assert f"batch-api/{ns}/files/{uploaded.id}.jsonl" in stored
        assert any(k.startswith(f"batch-api/{ns}/batches/{batch.id}/output/part-") for k in stored)
    finally:
        api.stop()


def test_a_cancelled_batch_keeps_what_it_finished(
    system: System, batch_api: BatchApiProcess, llama_chat_server: PeerServer
) -> None:
    ns, key = tenant(system, "batch-cancel", llama_chat_server, requestsPerSecond=20, concurrency=1)
    with batch_api.client(key, ns) as client:
        uploaded = client.files.create(file=("many.jsonl", requests_file(2000)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )

        def some_done() -> bool:
            counts = client.batches.retrieve(batch.id).request_counts
            return counts is not None and counts.completed >= 20

        wait_until(some_done)
        assert client.batches.cancel(batch.id).status == "cancelling"
        cancelled = wait_status(client, batch.id, "cancelled")
        counts = cancelled.request_counts
        assert 20 <= counts.completed < 2000 and cancelled.cancelled_at
        lines = client.files.content(cancelled.output_file_id).read().splitlines()
        assert len(lines) == counts.completed


def test_the_server_killed_mid_upload_and_mid_batch_loses_nothing(
    system: System, batch_api: BatchApiProcess, llama_chat_server: PeerServer
) -> None:
    ns, key = tenant(system, "batch-fault", llama_chat_server, requestsPerSecond=20)
    # Mid-upload: half a multipart body sent, then the server is killed.
    with half_upload(batch_api, ns, key):
        batch_api.kill()
    batch_api.start()
    with batch_api.client(key, ns) as client:
        assert client.files.list().data == []
        uploaded = client.files.create(file=("requests.jsonl", requests_file(120)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        wait_status(client, batch.id, "in_progress")
    # Mid-batch: the server is killed while the run goes on, and comes back later.
    batch_api.kill()
    time.sleep(2)
    batch_api.start()
    with batch_api.client(key, ns) as client:
        done = wait_status(client, batch.id, "completed")
        assert done.request_counts.completed == 120
        lines = client.files.content(done.output_file_id).read().splitlines()
        assert len(lines) == 120
        assert [f.id for f in client.files.list(purpose="batch")] == [uploaded.id]


def half_upload(api: BatchApiProcess, namespace: str, key: str) -> socket.socket:
    """Send the headers and half the body of an upload; the open connection."""
    body = requests_file(200)
    boundary = "cut-short"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="half.jsonl"\r\n\r\n'
        ).encode()
        + body
        + f"\r\n--{boundary}--\r\n".encode()
    )
    host, port = api.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST /namespaces/{namespace}/v1/files HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: {len(form)}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    ).encode()
    sock.sendall(head + form[: len(form) // 2])
    files = api.workdir / "files" / namespace / "files"
    wait_until(lambda: any(files.glob(".upload-*")))  # in the store's temporary file
    return sock


def wait_until(condition: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.5)
