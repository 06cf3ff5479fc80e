"""llama.cpp's own ``llama-server`` (slots, ``--parallel N``) on the tiny random GGUF llama.

Runs inside the ``llamacpp`` env, whose setup (``llamacpp_build.py``) compiled the binary into
``<env>/bin/llama-server``. Why this server beside llama-cpp-python's (``llama_server.py``): that
one answers one request at a time, while llama.cpp's own server decodes up to ``--parallel``
requests together in one batch, which is what `concurrency: auto` must find. The model is the
same file ``llama_server.py`` writes. Each slot gets the model's whole context (``--ctx-size``
is the context times the slots). The API key, if any, comes in ``LLAMA_API_KEY`` (read by
llama-server itself; ``/health`` stays open). Arguments this script does not know
(``--embedding``, ``--metrics``...) go to llama-server as they are.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from llama_server import N_CTX, write_model


def _parse_args() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="tiny-llama")
    parser.add_argument("--parallel", type=int, default=1, help="slots (llama-server -np)")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_known_args()


def main() -> None:
    args, rest = _parse_args()
    model = args.workdir / "tiny-llama.gguf"
    write_model(model, name=args.model_name)
    binary = Path(sys.executable).parent / "llama-server"  # <env>/bin, not the resolved python
    argv = [
        str(binary),
        "--model", str(model),
        "--alias", args.model_name,
        "--host", args.host,
        "--port", str(args.http_port),
        "--parallel", str(args.parallel),
        "--ctx-size", str(N_CTX * args.parallel),
        "--threads", str(args.threads),
        "--no-webui",
        "--log-verbosity", "2",  # warnings: the info level logs several lines a request
        *rest,
    ]  # fmt: skip
    # exec keeps the pid, so the harness's process group still covers the server.
    os.execv(binary, argv)


if __name__ == "__main__":
    main()
