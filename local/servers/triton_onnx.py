"""Local-only: Triton (through PyTriton) serving the ONNX model of a Triton repository.

Runs in the triton virtualenv (local/runtimes.py). PyTriton ships Triton with its Python
backend only, so the ONNX file (`<repository>/<name>/1/model.onnx`) is run by onnxruntime
inside a PyTriton model: the same KServe v2 REST API on `--http-port`. onnxruntime must be
installed in that env (`pip install onnxruntime`); without it this exits with that advice.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any


def parse_args() -> argparse.Namespace:
    """The repository, the served name and the port."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    return parser.parse_args()


def main() -> None:
    """Serve until SIGTERM."""
    args = parse_args()
    try:
        import onnxruntime
    except ImportError:
        sys.exit("triton locally needs onnxruntime in the triton env: pip install onnxruntime")
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    path = Path(args.model_repository) / args.model_name / "1" / "model.onnx"
    session = onnxruntime.InferenceSession(str(path))
    first = session.get_inputs()[0]

    @batch  # type: ignore[untyped-decorator]
    def infer(**inputs: Any) -> dict[str, Any]:
        rows = next(iter(inputs.values())).astype(np.float32)
        outputs = session.run(None, {first.name: rows})
        return {o.name: value for o, value in zip(session.get_outputs(), outputs, strict=True)}

    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_port=0)
    triton = Triton(config=config)
    triton.bind(
        model_name=args.model_name,
        infer_func=infer,
        inputs=[Tensor(name=first.name, dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name=o.name, dtype=np.float32, shape=(-1,)) for o in session.get_outputs()],
        config=ModelConfig(max_batch_size=256),
    )
    signal.signal(signal.SIGTERM, lambda *_: triton.stop())
    triton.serve()


if __name__ == "__main__":
    main()
