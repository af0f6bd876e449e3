"""Tiny random-initialised Llama / Qwen2 bases with a small byte-level BPE tokenizer, built offline.

Same architectures as the real bases (RoPE, GQA), small enough to run anywhere in seconds: the test suite
and `gistrank soak` (which exercises the data path, not ranking quality) use them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CORPUS = [
    "Acme UltraPhone 15 Pro 256GB titanium blue, 2023 model, part number AP-15P-256-BL.",
    "Query: wireless noise cancelling headphones over-ear 2021 black",
    "Stainless steel kettle 1.7 L, 2200 W, auto shut-off, BPA free. Warranty: 2 years.",
    "Relevant: yes no maybe. Title: Attributes: Description: capacity size colour year brand model",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,:;-/()%\n",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_tiny_base(directory: Path, arch: str = "llama", seed: int = 0) -> Path:
    """Save a tiny random `arch` causal LM + tokenizer to `directory` (a local HF folder)."""
    tokenizer = build_tokenizer()
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        # sharper attention than the 0.02 default, so position and mask mistakes show up clearly
        initializer_range=0.1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(f"unknown tiny arch {arch!r}")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
