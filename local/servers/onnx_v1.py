"""Local-only: a minimal model server image's stand-in, the `generic` runtime's example.

testdata/examples/serving/generic.yaml runs "your own server image": one that takes
`--model FILE --name NAME --port PORT`, runs an ONNX model and answers KServe v1. Locally
that image is this script (`longrun serve --image-map IMAGE=COMMAND`), run by a Python with
onnxruntime and numpy (the triton env of e2e/peers has both). The standard library serves
HTTP:

- `GET /healthz`: 200 once the model is loaded;
- `GET /v1/models/NAME`: `{"name": NAME, "ready": true}`;
- `POST /v1/models/NAME:predict` with `{"instances": [row, ...]}`: `{"predictions": [...]}`,
  one per row: the value of the graph's only output, or `{output: value}` for several, a
  one-element value unwrapped (`[2]` → `2`).

It listens on 127.0.0.1 (`--host` to change) and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NUMPY_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64"}


def parse_args() -> argparse.Namespace:
    """The model file, the served name and where to listen."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="the ONNX file")
    parser.add_argument("--name", required=True, help="the served model name")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    return parser.parse_args()


class Predictor:
    """The ONNX graph: rows in, one prediction per row out."""

    def __init__(self, path: str) -> None:
        import numpy as np
        import onnxruntime

        self.np = np
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        first = self.session.get_inputs()[0]
        self.input = first.name
        self.dtype = NUMPY_TYPES.get(first.type, "float32")
        self.outputs = [o.name for o in self.session.get_outputs()]

    def predict(self, instances: list[Any]) -> list[Any]:
        rows = self.np.asarray(instances, dtype=self.dtype)
        results = self.session.run(None, {self.input: rows})
        per_row = [[_plain(value[i]) for value in results] for i in range(len(rows))]
        if len(self.outputs) == 1:
            return [values[0] for values in per_row]
        return [dict(zip(self.outputs, values, strict=True)) for values in per_row]


def _plain(value: Any) -> Any:
    listed = value.tolist() if hasattr(value, "tolist") else value
    return listed[0] if isinstance(listed, list) and len(listed) == 1 else listed


def handler(name: str, predictor: Predictor) -> type[BaseHTTPRequestHandler]:
    """The request handler for model `name`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(200, {"status": "ok"})
            elif self.path == f"/v1/models/{name}":
                self._answer(200, {"name": name, "ready": True})
            else:
                self._answer(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            if self.path != f"/v1/models/{name}:predict":
                self._answer(404, {"error": f"no model at {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                instances = body["instances"]
                self._answer(200, {"predictions": predictor.predict(instances)})
            except (ValueError, KeyError, TypeError) as exc:
                self._answer(400, {"error": f"bad request: {exc}"})

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:  # no per-request log lines
            return

    return Handler


def main() -> None:
    """Serve until SIGTERM."""
    args = parse_args()
    try:
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        sys.exit(f"this server needs onnxruntime and numpy (the triton env of e2e/peers): {exc}")
    predictor = Predictor(args.model)
    server = ThreadingHTTPServer((args.host, args.port), handler(args.name, predictor))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"serving {args.name} from {args.model} on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
