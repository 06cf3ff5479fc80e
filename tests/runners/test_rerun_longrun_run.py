"""Re-running the failed records as a user does: two `longrun run`s, the second reading the
first's error output with `recordField: input` and a `generateName` run, as
docs/getting-started.md shows.

Real: `longrun run` (in-process, `local.run.main`), the real runner as its pod's process,
the KServe v1 protocol over HTTP, the file storage. Faked: the model server, a small
KServe v1 server in the test that refuses (HTTP 400) any request holding a flower whose
sepal_length is the marker 9.9 while it is `broken`, as a model that was fixed between two
runs does; the runner's bisection turns each refusal into one failed record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from local.run import main

MARKED = {"f4", "f11", "f25"}
FLOWERS: list[dict[str, Any]] = [
    {
        "id": f"f{n}",
        "sepal_length": 9.9 if f"f{n}" in MARKED else 5.0 + n / 10,
        "sepal_width": 3.0,
        "petal_length": 1.0 + n / 10,
        "petal_width": 0.2,
    }
    for n in range(30)
]


class Model:
    """KServe v1 on 127.0.0.1: class 0 or 1 by petal length; 400 for a marked flower."""

    def __init__(self) -> None:
        self.broken = True
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rows = body["instances"]
                if model.broken and any(row[0] == 9.9 for row in rows):
                    self.answer(400, {"error": "sepal_length out of range"})
                else:
                    self.answer(200, {"predictions": [int(row[2] >= 2.5) for row in rows]})

            def answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def model() -> Iterator[Model]:
    model = Model()
    yield model
    model.server.shutdown()
    model.server.server_close()


def config(name: str, url: str, *, input: str, output: str) -> str:
    features = "[sepal_length, sepal_width, petal_length, petal_width]"
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: {name}}}
spec:
  model: {{protocol: kserve-v1, url: "{url}", name: iris, inputFields: {features}}}
  storage:
    input: {{file: {input}}}
    output: {{file: {{path: "{output}"}}}}
  runner: {{batchSize: 8, chunkSize: 10, maxFailedRecords: 10}}
"""


def longrun_run(folder: Path, text: str) -> int:
    path = folder / "run.yaml"
    path.write_text(text)
    return main(["-f", str(path), "--work-dir", str(folder / "work"), "--backoff-seconds", "0"])


def rows(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for part in sorted(folder.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def test_a_generate_name_run_of_the_error_output_predicts_exactly_the_failed_flowers(
    tmp_path: Path, model: Model, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "flowers.jsonl"
    source.write_text("".join(json.dumps(f) + "\n" for f in FLOWERS))
    first_input = f'{{path: "{source}", idField: id}}'
    first = config("iris", model.url, input=first_input, output=f"{tmp_path}/out")
    first += "---\napiVersion: longrun.dev/v1alpha1\nkind: InferenceRun\n"
    first += "metadata: {name: iris-once}\nspec: {configRef: {name: iris}}\n"
    assert longrun_run(tmp_path, first) == 0
    assert "records: read=30 written=27 failed=3" in capsys.readouterr().err
    assert sorted(e["id"] for e in rows(tmp_path / "out-errors")) == sorted(MARKED)

    model.broken = False
    again = f'{{path: "{tmp_path}/out-errors", idField: id, recordField: input}}'
    retry = config("iris-retry", model.url, input=again, output=f"{tmp_path}/out-retry")
    retry += "---\napiVersion: longrun.dev/v1alpha1\nkind: InferenceRun\n"
    retry += "metadata: {generateName: iris-retry-}\nspec: {configRef: {name: iris-retry}}\n"
    assert longrun_run(tmp_path, retry) == 0

    assert "records: read=3 written=3 failed=0" in capsys.readouterr().err
    redone = rows(tmp_path / "out-retry")
    by_id = {f["id"]: f for f in FLOWERS}
    assert sorted(r["id"] for r in redone) == sorted(MARKED)
    assert all(r["input"] == by_id[r["id"]] for r in redone)
    assert all(r["prediction"] == int(by_id[r["id"]]["petal_length"] >= 2.5) for r in redone)
    every = [r["id"] for r in rows(tmp_path / "out")] + [r["id"] for r in redone]
    assert sorted(every) == sorted(by_id)  # each flower predicted once over the two runs
