"""Triton Inference Server (via PyTriton) serving a fixed numpy iris classifier.

Runs inside the ``triton`` env (nvidia-pytriton, numpy), never in the project env. The harness
sets LD_LIBRARY_PATH to this interpreter's LIBDIR (see PEERS.md: the Python backend stub would
otherwise load the system libpython and fail with ``_recursion_count``).

Why a fixed model: Triton itself is the thing under test, so the model is a nearest-centroid
classifier on the published iris class means — a linear function, deterministic, no training.
Input ``input-0`` FP32 [-1, 4]; outputs ``predict`` INT64 [-1, 1] (class index) and
``predict_proba`` FP32 [-1, 3]. Bound with ``@batch`` behind a dynamic batcher.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

# Iris class means (setosa, versicolor, virginica) of sepal length/width, petal length/width.
CENTROIDS = (
    (5.006, 3.428, 1.462, 0.246),
    (5.936, 2.770, 4.260, 1.326),
    (6.588, 2.974, 5.552, 2.026),
)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="iris")
    return parser.parse_args()


def _make_infer() -> Any:
    import numpy as np
    from pytriton.decorators import batch

    centroids = np.asarray(CENTROIDS, dtype=np.float32)
    # argmin ||x - c||^2 == argmax (x.c - ||c||^2 / 2): a linear classifier.
    weights, bias = centroids.T, -0.5 * (centroids**2).sum(axis=1)

    def infer(**inputs: Any) -> dict[str, Any]:
        logits = inputs["input-0"].astype(np.float32) @ weights + bias
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        proba = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        return {
            "predict": logits.argmax(axis=1).astype(np.int64)[:, None],
            "predict_proba": proba,
        }

    return batch(infer)  # @batch: the dynamic batcher hands infer whole batches


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # Triton.serve() stops cleanly on KeyboardInterrupt only


def main() -> None:
    import numpy as np
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    args = _parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    config = TritonConfig(
        http_address=args.host,
        http_port=args.http_port,
        grpc_address=args.host,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log_verbose=0,
    )
    with Triton(config=config, workspace=args.workdir / "triton") as triton:
        triton.bind(
            model_name=args.model_name,
            infer_func=_make_infer(),
            inputs=[Tensor(name="input-0", dtype=np.float32, shape=(4,))],
            outputs=[
                Tensor(name="predict", dtype=np.int64, shape=(1,)),
                Tensor(name="predict_proba", dtype=np.float32, shape=(3,)),
            ],
            config=ModelConfig(
                max_batch_size=1024,
                batcher=DynamicBatcher(max_queue_delay_microseconds=100),
            ),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
