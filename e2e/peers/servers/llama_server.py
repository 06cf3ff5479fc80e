"""llama.cpp's OpenAI-compatible server on a tiny random llama written here with ``gguf``.

Runs inside the ``llama`` env (llama-cpp-python[server], gguf), never in the project env.
Why a random model: nothing may download weights, and the runner only needs the real protocol
(``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``); the text is nonsense.
The model is a 2-layer llama with a byte-level SentencePiece vocabulary (<unk>, <s>, </s> and the
256 byte tokens), so any input text tokenizes. Weights are seeded, hence identical every run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

N_EMBD = 64
N_HEAD = 4
N_LAYER = 2
N_FF = 128
N_CTX = 512
SEED = 1234


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--model-name", default="tiny-llama")
    parser.add_argument("--embedding", action="store_true", help="serve /v1/embeddings")
    return parser.parse_args()


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style byte vocabulary: 3 control tokens, then <0x00>..<0xFF>."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    return tokens, [0.0] * len(tokens), [int(t) for t in types]


def _tensors(n_vocab: int) -> dict[str, object]:
    """numpy shapes are (rows, cols) = ggml (ne1, ne0); llama.cpp wants ne0 = input dim."""
    import numpy as np

    rng = np.random.default_rng(SEED)

    def rand(*shape: int) -> object:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    tensors: dict[str, object] = {
        "token_embd.weight": rand(n_vocab, N_EMBD),
        "output_norm.weight": ones,
        "output.weight": rand(n_vocab, N_EMBD),
    }
    for i in range(N_LAYER):
        tensors |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_v.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_output.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": rand(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": rand(N_FF, N_EMBD),
            f"blk.{i}.ffn_down.weight": rand(N_EMBD, N_FF),
        }
    return tensors


def write_model(path: Path, *, name: str) -> None:
    """Write the tiny llama GGUF file to ``path``."""
    import gguf

    tokens, scores, types = _vocab()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_pooling_type(gguf.PoolingType.MEAN)  # one vector per input on /v1/embeddings
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for tensor_name, array in _tensors(len(tokens)).items():
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    args = _parse_args()
    model = args.workdir / "tiny-llama.gguf"
    write_model(model, name=args.model_name)
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(model),
        "--model_alias", args.model_name,
        "--host", args.host,
        "--port", str(args.http_port),
        "--n_ctx", str(N_CTX),
        "--n_threads", "1",
        "--embedding", "true" if args.embedding else "false",
        "--verbose", "false",  # llama.cpp's per-tensor load log is thousands of lines
    ]  # fmt: skip
    # exec keeps the pid, so the harness's process group still covers the server.
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
