"""KServe's Python model server with an sklearn iris model trained here.

Runs inside the ``kserve`` env (kserve, scikit-learn), never in the project env. Why train at
start-up: ``load_iris`` ships with scikit-learn, so no download; fitting takes milliseconds.

Serves v1 REST (``/v1/models/NAME:predict``, ``{"instances": [[4 floats], ...]}`` ->
``{"predictions": [class, ...]}``), v2 REST and v2 gRPC (any FP32/FP64 [-1, 4] input ->
output ``predict`` INT64 [-1]). The PEERS.md pitfalls handled here:

- a v2 request without ``id`` gets a response with an empty id (KServe otherwise fails);
- gRPC callers get raw (binary) outputs: ``tritonclient.grpc`` reads only raw output contents;
- latency and access logging are off, or logs grow by hundreds of MB under load.

KServe binds 0.0.0.0 for REST and [::] for gRPC; it has no host option.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path
from typing import Any


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="ignored: KServe binds all hosts")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="iris")
    # parse_known_args: kserve.model_server parses sys.argv too, at import time.
    return parser.parse_known_args()[0]


def _make_model(name: str) -> Any:
    import numpy as np
    from kserve import Model
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    class IrisModel(Model):  # type: ignore[misc]
        def load(self) -> bool:
            features, labels = load_iris(return_X_y=True)
            self.classifier = LogisticRegression(max_iter=1000).fit(features, labels)
            self.ready = True
            return self.ready

        def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
            if not isinstance(payload, InferRequest):  # v1: {"instances": [...]}
                rows = np.asarray(payload["instances"], dtype=np.float64)
                return {"predictions": self.classifier.predict(rows).tolist()}
            rows = payload.inputs[0].as_numpy().astype(np.float64).reshape(-1, 4)
            classes = self.classifier.predict(rows).astype(np.int64)
            output = InferOutput(name="predict", shape=list(classes.shape), datatype="INT64")
            binary = bool(payload.from_grpc or payload.use_binary_outputs)
            output.set_data_from_numpy(classes, binary_data=binary)
            return InferResponse(
                response_id=payload.id or "",
                model_name=self.name,
                infer_outputs=[output],
                use_binary_outputs=binary,
            )

    model = IrisModel(name)
    model.load()
    return model


def _quiet_per_request_logs() -> None:
    """KServe logs every request three ways; keep start-up and errors, drop the per-request."""
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("kserve.trace").setLevel(logging.WARNING)  # REST timing middleware
    # The gRPC LoggingInterceptor logs "grpc method: ..." on the main kserve logger.
    logging.getLogger("kserve").addFilter(lambda r: not r.getMessage().startswith("grpc method:"))
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")


def main() -> None:
    args = _parse_args()
    from kserve import ModelServer

    server = ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        enable_grpc=True,
        enable_docs_url=False,
        enable_latency_logging=False,
        workers=1,
        grace_period=2,
    )
    _quiet_per_request_logs()
    server.start([_make_model(args.model_name)])


if __name__ == "__main__":
    main()
