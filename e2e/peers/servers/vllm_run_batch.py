"""vLLM's own batch runner (``vllm run-batch``) on the tiny llama, as the vllm peer serves it.

Runs inside the ``vllm`` env, never in the project env: the engine loads the model itself
(45-180 s here), reads the OpenAI batch file ``-i``, writes one output file ``-o`` and exits.
The engine's settings are the server's (``vllm_server.engine_environ`` and ``engine_args``),
so that a file run here and a file sent to the ``vllm`` peer meet the same model, context
length and served name: what tests compare is then the two batch runners, nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vllm_server import MODEL_DIR, engine_args, engine_environ  # this script's folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-i", "--input-file", required=True)
    parser.add_argument("-o", "--output-file", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="tiny-llama")
    parser.add_argument("--embedding", action="store_true", help="the pooling runner")
    args = parser.parse_args()
    os.environ.update(engine_environ(args.workdir))
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "run-batch",
        "-i", args.input_file,
        "-o", args.output_file,
        "--model", str(MODEL_DIR),
        *engine_args(args.model_name, embedding=args.embedding),
    ]  # fmt: skip
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
