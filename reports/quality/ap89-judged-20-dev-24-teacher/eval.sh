#!/usr/bin/env bash
# The shipped LoRA teacher as the reader: its full-context read (the reference) against prefix caching and
# SnapKV selection of its own K/V at 16, 32 and 64 positions; AP89 dev, 24 judged topics × 20 articles.
set -euo pipefail
T="gistrank-teacher-lora?max_item_tokens=1024"
S=()
for k in 16 32 64; do
  S+=(--prefix-k "$k" --student "$T&compressor=select&num_gist=$k")
done
.venv/bin/gistrank eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher "$T" "${S[@]}" \
  --out runs/ap89-teacher/eval-judged-dev --run-dir runs/ap89-teacher/eval-judged-dev/runs
