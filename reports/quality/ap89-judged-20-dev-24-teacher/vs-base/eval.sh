#!/usr/bin/env bash
# The teacher's full-context read (reference) beside the untouched base's (the default's reader) and the
# default itself (prefix 64 on the base), paired on the same 24 AP89 dev topics × 20 judged articles.
set -euo pipefail
T="gistrank-teacher-lora?max_item_tokens=1024"
B="gistrank-base-ql-prefix64"
.venv/bin/gistrank eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher "$T" \
  --shadow-model "$B" --student "$B" --prefix-k 64 \
  --out runs/ap89-teacher/eval-judged-dev-vs-base --run-dir runs/ap89-teacher/eval-judged-dev/runs
