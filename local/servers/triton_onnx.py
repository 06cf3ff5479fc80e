"""Local-only: Triton (through PyTriton) serving the ONNX model of a Triton repository.

Runs in the triton virtualenv (local/runtimes.py; `python -m e2e.peers prepare triton`
installs PyTriton with onnxruntime). PyTriton ships Triton with its Python backend only, so
the ONNX file (`<repository>/<name>/1/model.onnx`) is run by onnxruntime inside a PyTriton
model: the same KServe v2 REST API on `--http-port`, every input and output of the graph
with its own name and datatype, the first dimension the batch (as Triton's ONNX backend
does with `max_batch_size` > 0). gRPC and metrics get free ports of their own: locally
only HTTP is served. Without onnxruntime in that env this exits with that advice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MAX_BATCH = 1024
SHORT_TMP = 40  # longest TMPDIR kept: room for PyTriton's socket names within 107 bytes
# onnxruntime's type names → numpy's (the datatypes a v2 request can carry).
DTYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def parse_args() -> argparse.Namespace:
    """The repository, the served name and the port."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the address HTTP listens on")
    return parser.parse_known_args()[0]


def free_port() -> int:
    """A port nothing listens on now on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tensors(args: list[Any], np: Any, tensor: Any) -> list[Any]:
    """PyTriton tensors for ONNX inputs or outputs: per-row shape (the batch dimension
    dropped, unknown sizes -1) and datatype."""
    found = []
    for arg in args:
        if arg.type not in DTYPES:
            sys.exit(f"{arg.name}: ONNX type {arg.type} is not served locally")
        dims = [d if isinstance(d, int) and d > 0 else -1 for d in list(arg.shape)[1:]]
        shape = tuple(dims) or (1,)
        found.append(tensor(name=arg.name, dtype=np.dtype(DTYPES[arg.type]).type, shape=shape))
    return found


@contextmanager
def short_tmpdir() -> Iterator[None]:
    """A short TMPDIR while serving: PyTriton and its Python backend put Unix sockets there,
    and a socket path longer than 107 bytes fails (`AF_UNIX path too long`); a pod's /tmp
    here is deep under the work directory."""
    if len(tempfile.gettempdir()) <= SHORT_TMP:
        yield
        return
    short = tempfile.mkdtemp(prefix="longrun-triton-", dir="/tmp")
    os.environ["TMPDIR"] = tempfile.tempdir = short
    try:
        yield
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt  # Triton.serve() stops cleanly on KeyboardInterrupt only


def main() -> None:
    """Serve until SIGTERM."""
    args = parse_args()
    try:
        import onnxruntime
    except ImportError:
        sys.exit(
            "triton locally needs onnxruntime in the triton env: "
            "python -m e2e.peers prepare triton (or pip install onnxruntime there)"
        )
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import Tensor

    path = Path(args.model_repository) / args.model_name / "1" / "model.onnx"
    if not path.is_file():
        sys.exit(f"no ONNX model at {path}")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = tensors(session.get_inputs(), np, Tensor)
    outputs = tensors(session.get_outputs(), np, Tensor)
    # A graph whose rows have no dimension of their own takes [batch] and is served as [batch, 1].
    flat = {a.name for a in session.get_inputs() if len(a.shape) == 1}

    @batch  # type: ignore[untyped-decorator]
    def infer(**given: Any) -> dict[str, Any]:
        feed = {}
        for spec in inputs:
            value = given[spec.name].astype(spec.dtype)
            feed[spec.name] = value.reshape(-1) if spec.name in flat else value
        results = session.run(None, feed)
        # onnxruntime may return int64 as numpy's `longlong`, which PyTriton does not take
        # for `int64`: every output is cast to its declared type.
        return {
            spec.name: (value.reshape(len(value), -1) if value.ndim == 1 else value).astype(
                spec.dtype
            )
            for spec, value in zip(outputs, results, strict=True)
        }

    signal.signal(signal.SIGTERM, _interrupt)
    with short_tmpdir():
        serve(args, inputs, outputs, infer)


def serve(args: argparse.Namespace, inputs: list[Any], outputs: list[Any], infer: Any) -> None:
    """Bind the model and serve until SIGTERM."""
    from pytriton.model_config import ModelConfig
    from pytriton.triton import Triton, TritonConfig

    config = TritonConfig(
        http_address=args.host,
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_verbose=0,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.model_name,
            infer_func=infer,
            inputs=inputs,
            outputs=outputs,
            config=ModelConfig(max_batch_size=MAX_BATCH),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
