"""Offline assets for ``benchmarks/gpu_smoke/gpu_smoke.sh``: a tiny Qwen3 with a trained BPE tokenizer, and data.

``python benchmarks/gpu_smoke/assets.py <out_dir>`` writes, with no hub access:

* ``<out>/model``: a byte-level BPE tokenizer trained on the shipped fixtures (ChatML special tokens,
  Qwen3's chat template without thinking tags) and a 2-layer Qwen3 built from a config, saved in the
  Hugging Face layout vLLM and verl load;
* ``<out>/data``: the reference experiment's parquet layout, made by the project's own data
  preparation (``python -m math_data all``) from ``tests/fixtures/data`` (3 problems per set).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "data"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = [line for f in sorted(FIXTURES.glob("*.jsonl")) for line in f.read_text().splitlines()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tok) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=256, max_position_embeddings=2048, tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


def main(out_dir: str) -> int:
    out = Path(out_dir).resolve()
    tok = build_tokenizer(out / "model")
    build_model(out / "model", tok)
    from math_data.__main__ import main as data_main

    return data_main([
        "all", "--out-dir", str(out / "data"), "--tokenizer", str(out / "model"), "--expected-count", "3",
        "--max-prompt-length", "256", "--train-source", str(FIXTURES / "dapo_processed.jsonl"),
        "--aime2024-source", str(FIXTURES / "aime_2024.jsonl"), "--aime2025-source", str(FIXTURES / "aime_2025.jsonl"),
    ])


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main(sys.argv[1]))
