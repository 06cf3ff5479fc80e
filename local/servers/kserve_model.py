"""Local-only: KServe's Python server on one model file, as the kserve images run it.

Runs in the kserve virtualenv (local/runtimes.py), never in longrun's. The images
`kserve/sklearnserver` and `kserve/xgbserver` load the one model file in `--model_dir`
(`model.joblib`/`.pkl`/`.pickle`, or `model.bst`/`.json`/`.ubj`) and serve v1 and v2 REST;
this does the same with the `kserve` package. KServe binds every address; here the server
is kept on 127.0.0.1, since no NetworkPolicy guards a workstation.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path
from typing import Any

SKLEARN = (".joblib", ".pkl", ".pickle")
XGBOOST = (".bst", ".json", ".ubj")


def parse_args() -> argparse.Namespace:
    """The flags the images take (the rest is KServe's own)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model_name", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--http_port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")  # local-only: the node agent's pod address
    return parser.parse_known_args()[0]


def load(model_dir: Path) -> Any:
    """The estimator in `model_dir` (the first file the images would load)."""
    for path in sorted(model_dir.iterdir()):
        if path.suffix in SKLEARN:
            import joblib

            return joblib.load(path)
        if path.suffix in XGBOOST:
            import xgboost

            booster = xgboost.Booster()
            booster.load_model(str(path))
            return booster
    raise SystemExit(f"no model file in {model_dir} ({', '.join(SKLEARN + XGBOOST)})")


def model(name: str, estimator: Any) -> Any:
    """A KServe model answering v1 (`instances`) and v2 (tensors) with the predictions."""
    import numpy as np
    from kserve import Model
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

    class Served(Model):  # type: ignore[misc]
        def load(self) -> bool:
            self.ready = True
            return True

        def predict(self, payload: Any, headers: Any = None, response_headers: Any = None) -> Any:
            if not isinstance(payload, InferRequest):
                rows = np.asarray(payload["instances"], dtype=np.float64)
                return {"predictions": estimator.predict(rows).tolist()}
            rows = payload.inputs[0].as_numpy().astype(np.float64)
            predicted = np.asarray(estimator.predict(rows.reshape(len(rows), -1)))
            output = InferOutput(name="predict", shape=list(predicted.shape), datatype="INT64")
            output.set_data_from_numpy(predicted.astype(np.int64), binary_data=False)
            return InferResponse(
                response_id=payload.id or "", model_name=self.name, infer_outputs=[output]
            )

    served = Served(name)
    served.load()
    return served


def main() -> None:
    """Serve the model until SIGTERM."""
    args = parse_args()
    estimator = load(Path(args.model_dir))
    import uvicorn

    class Loopback(uvicorn.Config):  # type: ignore[misc]
        def __init__(self, *rest: Any, **options: Any) -> None:
            options["host"] = args.host
            super().__init__(*rest, **options)

    uvicorn.Config = Loopback
    from kserve import ModelServer

    server = ModelServer(
        http_port=args.http_port,
        enable_grpc=False,
        enable_docs_url=False,
        enable_latency_logging=False,
        workers=1,
        grace_period=2,
    )
    # KServe logs every request (access log, timing trace): keep start-up and errors only.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("kserve.trace").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    server.start([model(args.model_name, estimator)])


if __name__ == "__main__":
    main()
