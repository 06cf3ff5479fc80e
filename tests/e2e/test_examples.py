"""Every example of testdata/examples, applied with kubectl and run by the whole system.

Real: the API emulator running pods through the local pod executor, `longrun controller`
as a process, the real runner, kubectl, the real model servers (KServe, Triton, llama.cpp),
PostgreSQL, moto's S3 server, local files, and a local HTTP API standing in for Krateo's
finops-database-handler. Rewritten: cluster DNS names, namespaces, table names and paths
(see tests/e2e/conftest.py). Nothing is faked in the path from `kubectl apply` to the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import System
from tests.e2e.conftest import EXAMPLES, apply, example, find
from tests.iris import accuracy, class_of, iris_rows, seed_iris, sql_rows
from tests.runners.http_stub import Receiver, serve

Obj = dict[str, Any]
RUN_TIMEOUT = 120.0
# The garbage collector's cascade from a run to its Job, pods and ConfigMap. On a real
# control plane kube-controller-manager's collector learns a CRD installed moments ago only
# when it re-reads discovery (every 30 s), so a System's first cascade may wait that long
# (e2e/README.md, known divergences).
CASCADE = 90.0


def wait_phase(system: System, ns: str, name: str, phase: str) -> Obj:
    """Poll the run (kubectl) until its phase is `phase`; its status."""

    def status() -> Obj | None:
        run = system.get("inferencerun", name, ns)
        current = (run or {}).get("status") or {}
        assert current.get("phase") != "Failed" or phase == "Failed", current
        return current if current.get("phase") == phase else None

    try:
        return eventually(status, timeout=RUN_TIMEOUT, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(system, ns)}") from None


def diagnose(system: System, ns: str) -> str:
    """What a person would look at: pod exits and logs, then the controller's log."""
    lines = []
    for pod in system.items("pods", ns):
        name = pod["metadata"]["name"]
        for state in (pod.get("status") or {}).get("containerStatuses") or []:
            lines.append(f"pod {name}: {json.dumps(state.get('state'))}")
        logs = system.kubectl("logs", name, "-n", ns, check=False)
        lines += [f"  {line}" for line in logs.splitlines()[-15:]]
    return "\n".join([*lines, "controller log:", system.log_tail()])


def reasons(system: System, ns: str) -> set[str]:
    """The reasons of the Events in `ns`."""
    return {event.get("reason", "") for event in system.items("events", ns)}


def assert_counts(status: Obj, *, read: int, written: int, failed: int = 0) -> None:
    result = status["result"]
    assert (result["recordsRead"], result["recordsWritten"]) == (read, written), result
    assert result.get("recordsFailed", 0) == failed, result


def test_iris_sql_example_upserts_every_prediction_into_postgres(
    system: System, kserve_server: PeerServer, postgres_url: str, table_prefix: str
) -> None:
    objects = example("iris-sql")
    find(objects, "Secret")["stringData"]["url"] = postgres_url
    spec = find(objects, "InferenceConfig")["spec"]
    spec["model"].update(url=kserve_server.http_url, name=kserve_server.model)
    spec["storage"]["input"]["sql"]["table"] = f"{table_prefix}_in"
    spec["storage"]["output"]["sql"]["table"] = f"{table_prefix}_out"
    seed_iris(postgres_url, f"{table_prefix}_in")
    ns = system.namespace("iris-sql")

    apply(system, ns, objects)
    status = wait_phase(system, ns, "iris-sql-once", "Succeeded")

    assert_counts(status, read=150, written=150)
    rows = sql_rows(postgres_url, f"{table_prefix}_out")
    uid = system.get("inferencerun", "iris-sql-once", ns)["metadata"]["uid"]  # type: ignore[index]
    assert {r["run_uid"] for r in rows} == {uid} and len(rows) == 150
    predicted = {int(r["record_id"]): class_of(json.loads(r["prediction"])) for r in rows}
    assert sorted(predicted) == list(range(1, 151))
    assert accuracy(predicted) > 0.9
    assert {"Pending", "Succeeded"} <= reasons(system, ns)
    # autoDeletePolicy None: the run, its Job and its ConfigMap stay.
    assert system.get("job", status["jobName"], ns) is not None
    assert system.get("configmap", status["configMapName"], ns) is not None


def test_triton_s3_example_writes_chunk_objects_and_is_deleted_after_its_delay(
    system: System, triton_server: PeerServer, moto_endpoint: str
) -> None:
    import boto3

    objects = example("triton-s3")
    spec = find(objects, "InferenceConfig")["spec"]
    assert spec["model"]["url"] and triton_server.grpc_url
    spec["model"].update(url=triton_server.grpc_url, name=triton_server.model)
    spec["model"]["inputName"] = "input-0"  # the name the PyTriton iris model binds
    bucket = "longrun-data"
    for role in ("input", "output"):
        spec["storage"][role]["s3"]["endpointUrl"] = moto_endpoint
    spec["autoDeleteDelaySeconds"] = 3
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    csv_text = (Path(__file__).resolve().parents[2] / "testdata/quickstart/iris.csv").read_text()
    s3.put_object(Bucket=bucket, Key="iris/input.csv", Body=csv_text.encode())
    ns = system.namespace("triton-s3")

    apply(system, ns, objects)
    status = wait_phase(system, ns, "triton-s3-once", "Succeeded")

    assert_counts(status, read=150, written=150)
    assert status["result"]["output"].startswith("s3://longrun-data/iris/predictions/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="iris/predictions/")["Contents"]
    lines = [
        json.loads(line)
        for item in listed
        if item["Key"].endswith(".jsonl")
        for line in s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().splitlines()
    ]
    predicted = {int(line["id"]): class_of(line["prediction"]) for line in lines}
    assert len(lines) == 150 and sorted(predicted) == list(range(1, 151))
    assert accuracy(predicted) > 0.9
    # DeleteOnSuccess after 3 s: the run goes, and with it (cascade) its Job, Pods, ConfigMap.
    job, config_map = status["jobName"], status["configMapName"]
    eventually(lambda: system.get("inferencerun", "triton-s3-once", ns) is None, timeout=30)
    eventually(
        lambda: (
            system.get("job", job, ns) is None and system.get("configmap", config_map, ns) is None
        ),
        timeout=CASCADE,
    )
    eventually(lambda: not system.items("pods", ns, f"job-name={job}"), timeout=CASCADE)
    s3.close()


def test_openai_files_example_answers_every_question_into_jsonl_files(
    system: System, llama_chat_server: PeerServer, tmp_path: Path
) -> None:
    questions = [{"id": f"q{i}", "question": f"What is {i} + {i}?"} for i in range(6)]
    data = tmp_path / "data"
    data.mkdir()
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    objects = example("openai-files")
    spec = find(objects, "InferenceConfig")["spec"]
    spec["model"].update(url=f"{llama_chat_server.http_url}/v1", name=llama_chat_server.model)
    # The volume is mounted at the data directory (a volume over /tmp itself is refused).
    spec["storage"]["input"]["file"].update(path=str(data / "questions.jsonl"), mountPath=str(data))
    spec["storage"]["output"]["file"].update(path=str(data / "answers"), mountPath=str(data))
    ns = system.namespace("openai-files")

    apply(system, ns, objects)
    status = wait_phase(system, ns, "openai-files-once", "Succeeded")

    assert_counts(status, read=6, written=6)
    lines = [
        json.loads(line)
        for part in sorted((data / "answers").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert sorted(line["id"] for line in lines) == [q["id"] for q in questions]
    assert all(isinstance(line["prediction"], str) for line in lines), lines[0]
    # The API key went to the pod by reference: the ConfigMap never holds it.
    config_map = system.get("configmap", status["configMapName"], ns)
    assert config_map is not None and "sk-local-test" not in json.dumps(config_map)


def test_openai_batch_example_writes_openai_lines_and_its_tokens_reach_the_status(
    system: System, llama_chat_server: PeerServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    requests = (EXAMPLES / "openai-batch" / "requests.jsonl").read_text()
    bad = json.dumps({"custom_id": "x", "method": "POST", "url": "/v1/images", "body": {}})
    (data / "requests.jsonl").write_text(requests + bad + "\n")
    objects = example("openai-batch")
    spec = find(objects, "InferenceConfig")["spec"]
    spec["model"]["url"] = f"{llama_chat_server.http_url}/v1"
    spec["storage"]["input"]["file"].update(path=str(data / "requests.jsonl"), mountPath=str(data))
    spec["storage"]["output"]["file"].update(path=str(data / "answers"), mountPath=str(data))
    ns = system.namespace("openai-batch")

    apply(system, ns, objects)
    status = wait_phase(system, ns, "openai-batch-once", "Succeeded")

    count = len(requests.splitlines())
    assert_counts(status, read=count + 1, written=count, failed=1)
    answers = [
        json.loads(line)
        for part in sorted((data / "answers").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    usage = sum(line["response"]["body"]["usage"]["total_tokens"] for line in answers)
    assert status["result"]["totalTokens"] == usage > 0
    assert status["progress"]["tokensTotal"] == usage
    (error,) = (data / "answers-errors").glob("part-*.jsonl")
    assert json.loads(error.read_text())["error"]["code"] == "invalid_url"


def krateo_objects(ns: str, *, finops_url: str, model: PeerServer) -> list[Obj]:
    """Krateo's iris example, its Secret pointing at the finops stand-in, moved to `ns`."""
    objects = example("krateo/krateo")
    find(objects, "Secret")["stringData"]["server-url"] = finops_url
    config = find(objects, "InferenceConfig")
    host = model.http_url.removeprefix("http://")
    config["spec"]["kserve"]["modelUrl"] = f"{host}/v2/models/{model.model}/infer"
    config["spec"]["kserve"]["modelName"] = model.model
    for role in ("input", "output"):
        config["spec"]["storage"][role]["krateo"]["api"]["endpointRef"]["namespace"] = ns
    find(objects, "InferenceRun")["spec"]["configRef"]["namespace"] = ns
    return objects


def test_krateo_example_runs_unchanged_and_is_deleted_on_completion(
    system: System, kserve_server: PeerServer
) -> None:
    # Krateo's input tables hold the model's features only: records are numbered by position.
    features = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    finops = Receiver([{k: row[k] for k in features} for row in iris_rows()])
    with serve(finops) as url:
        ns = system.namespace("kserve-test")
        apply(system, ns, krateo_objects(ns, finops_url=url, model=kserve_server))

        # DeleteOnCompletion without a delay: the run may be gone before a poll sees it
        # finished, so the proof is in the events and the data.
        eventually(
            lambda: system.get("inferencerun", "krateo-iris", ns) is None, timeout=RUN_TIMEOUT
        )

    assert "Succeeded" in reasons(system, ns), system.items("events", ns)
    posted = [body for method, path, body, _ in finops.requests if path == "/compute/sklearnoutput"]
    # Krateo-shaped bodies: string values only (the stand-in answers 500 otherwise), with the
    # predictions and their record ids JSON-encoded, kept once per (job_uid, job_name, chunk).
    chunks = [b for (*_, path), b in finops.chunks.items() if path == "/compute/sklearnoutput"]
    predictions = [p for body in chunks for p in json.loads(body["predictions"])]
    ids = [i for body in chunks for i in json.loads(body["ids"])]
    assert posted and len(predictions) == len(ids) == 150
    assert {int(i) for i in ids} == set(range(150))
    assert all(isinstance(value, str) for body in posted for value in body.values())
    assert all(body["output_table_name"] == "kserve_controller_output_sklearn" for body in posted)
    inputs = [body for method, path, body, _ in finops.requests if path == "/compute/sklearninput"]
    assert inputs and inputs[0]["input_table_name"] == "kserve_controller_input_sklearn"
    eventually(
        lambda: not system.items("jobs", ns) and not system.items("pods", ns), timeout=CASCADE
    )


def test_krateo_custom_example_passes_the_unknown_kind_through_and_fails_fast(
    system: System, kserve_server: PeerServer
) -> None:
    ns = system.namespace("kserve-test")
    secret = find(
        krateo_objects(ns, finops_url="http://127.0.0.1:9", model=kserve_server), "Secret"
    )
    objects = [secret, *example("krateo/krateo-custom")]

    apply(system, ns, objects)
    status = wait_phase(system, ns, "krateo-custom", "Failed")

    # The contract carries `custom` verbatim for a custom runner image; our runner is not one,
    # so it exits 2 ("bad contract") and the Job fails at once, without retries.
    contract = json.loads(
        system.get("configmap", status["configMapName"], ns)["data"]["contract.json"]  # type: ignore[index]
    )
    assert contract["output"] == {
        "custom": {
            "s3": {
                "endpointRef": {"name": "finops-database-handler-endpoint"},
                "moreCustom": "data",
            }
        }
    }
    assert "custom" in status["message"], status
    pods = system.items("pods", ns, f"job-name={status['jobName']}")
    assert len(pods) == 1
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"], failed
