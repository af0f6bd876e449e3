"""Tiny random-initialised Llama / Qwen2 bases with a small byte-level BPE tokenizer, built offline.

Same architectures as the real bases (RoPE, GQA), small enough that every test runs in seconds.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from reranker.core.config import GistConfig
from reranker.data.relevance_data import Item, Judgment, Query, RelevanceSet
from reranker.training.trainer import TrainConfig

GIST = GistConfig(num_gist=2, max_item_tokens=48, dtype="float32")  # tiny models' default gisting

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


def tiny_relevance_set() -> RelevanceSet:
    """Four items, two train and two test queries, each with one exact, one partial, two irrelevant."""
    specs = [
        ("Acme phone", {"storage": "256GB", "year": 2023}),
        ("Acme phone", {"storage": "128GB", "year": 2023}),
        ("Steel kettle", {"capacity": "1.7 L"}),
        ("Headphones", {"colour": "black"}),
    ]
    items = {
        f"i{n}": Item(item_id=f"i{n}", title=title, attributes=attrs, description="Warranty: 2 years. " * 3)
        for n, (title, attrs) in enumerate(specs)
    }
    queries = [
        Query(query_id="q0", text="phone 256GB", split="train"),
        Query(query_id="q1", text="kettle 1.7 L", split="train"),
        Query(query_id="q2", text="Acme phone 128GB", split="test", hard=True),
        Query(query_id="q3", text="black headphones", split="test"),
    ]
    labels = {"q0": [2, 1, 0, 0], "q1": [0, 0, 2, 1], "q2": [1, 2, 0, 0], "q3": [0, 0, 0, 2]}
    judgments = [
        Judgment(query_id=q, item_id=f"i{n}", label=label)
        for q, row in labels.items()
        for n, label in enumerate(row)
    ]
    return RelevanceSet(items=items, queries=queries, judgments=judgments)


def train_config(tiny_base: Path, **overrides: object) -> TrainConfig:
    """A short training run on a tiny base (GIST, 2 queries × 4 candidates, lr big enough to move)."""
    defaults = dict(
        base=str(tiny_base),
        gist=GIST,
        steps=30,
        queries_per_step=2,
        candidates_per_query=4,
        lr_body=1e-3,
        lr_gist=1e-2,
        checkpoint_every=1000,
    )
    return TrainConfig(**(defaults | overrides))
