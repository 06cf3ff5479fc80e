"""The sharded example (testdata/examples/sharded): one run over four pods, end to end, from
Parquet input, so each pod reads its own contiguous range (partitioning rule chunkRanges).

Real: the API emulator (or, with LONGRUN_KUBE_BACKEND=real, a private kube-apiserver, etcd and
kube-controller-manager) whose Job controller makes the Indexed Job's four pods, the node
agent running them as the real runner, `longrun controller` as a process, kubectl, the KServe
model server, moto's S3 server. Rewritten: the model's and S3's URLs, the namespace, and the
chunk size (20 records, so the 150 flowers make 8 chunks, two for each pod). Faked: nothing.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq

from controller.core.names import CONTRACT_KEY
from e2e.peers.server import PeerServer
from e2e.system import System
from tests.e2e.conftest import apply, example, find
from tests.e2e.test_examples import assert_counts, wait_phase
from tests.iris import accuracy, class_of, iris_rows

BUCKET = "longrun-data"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def _s3(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_sharded_example_scores_every_flower_once_over_four_pods_and_adds_them_up(
    system: System, kserve_server: PeerServer, moto_endpoint: str
) -> None:
    objects = example("sharded")
    spec = find(objects, "InferenceConfig")["spec"]
    spec["model"].update(url=kserve_server.http_url, name=kserve_server.model)
    for role in ("input", "output"):
        spec["storage"][role]["s3"]["endpointUrl"] = moto_endpoint
    spec["storage"]["output"]["s3"]["prefix"] = "iris/sharded-scores/"
    spec["runner"].update(chunkSize=20, progressIntervalSeconds=1)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-credentials"}}
    objects.insert(0, {**secret, "stringData": CREDENTIALS})
    s3 = _s3(moto_endpoint)
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    flowers = [{k: v for k, v in row.items() if k != "species"} for row in iris_rows()]
    body = io.BytesIO()  # row groups of 32: the pods' ranges (chunks of 20) cut across them
    pq.write_table(pa.Table.from_pylist(flowers), body, row_group_size=32)
    s3.put_object(Bucket=BUCKET, Key="iris/flowers.parquet", Body=body.getvalue())
    ns = system.namespace("sharded")

    apply(system, ns, objects)
    status = wait_phase(system, ns, "iris-sharded-once", "Succeeded")

    assert_counts(status, read=150, written=150)  # four pods' summaries, added up
    assert status["result"]["chunks"] == 8
    job = system.get("job", status["jobName"], ns) or {}
    config_map = system.get("configmap", status["configMapName"], ns) or {}
    contract = json.loads(config_map["data"][CONTRACT_KEY])
    assert contract["partitioning"] == {"count": 4, "rule": "chunkRanges"}
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 4)
    pods = system.items("pods", ns, f"job-name={status['jobName']}")
    indexes = {
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
    }
    assert indexes == {"0", "1", "2", "3"}
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="iris/sharded-scores/")["Contents"]
    lines = [
        json.loads(line)
        for item in listed
        if item["Key"].endswith(".jsonl")
        for line in s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read().splitlines()
    ]
    predicted = {int(line["id"]): class_of(line["prediction"]) for line in lines}
    assert len(lines) == 150 and sorted(predicted) == list(range(1, 151))  # each once
    assert accuracy(predicted) > 0.9
    assert status["progress"]["text"] == "150/150 (100%)"
    s3.close()
