#!/usr/bin/env bash
# The synthetic catalog's rows of the frozen-reader table (reports/experiments/frozen-gists.md): for
# each reader in READERS — the default's (the untouched base by query likelihood) and the shipped LoRA
# teacher (head rule) — gists trained over that frozen reader for MINUTES on the train split (k = K, the
# recipe's defaults), then read on the test split beside their untrained start, prefix caching, SnapKV-
# and KVzip-style selection and the hybrid at each budget in KS, and BM25; the reference is the reader's
# own full context. Same catalog as scripts/quality.sh and budgets.sh (60 families, items cut at 256).
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
DATA=(--products 60 --max-item-tokens 256 --seed 0)
OUT=${OUT:-runs/synthetic-frozen}
K=${K:-64}
KS=${KS:-16 32 64}
MINUTES=${MINUTES:-10}
READERS=${READERS:-gistrank-base-ql-prefix64 gistrank-teacher-lora}
# shellcheck source=scripts/compressed_systems.sh
source scripts/compressed_systems.sh
for READER in $READERS; do
  RUN=$OUT/$READER-k$K-m$MINUTES
  [ -d "$RUN/checkpoint" ] || "$GISTRANK" train-gists --reader "$READER" "${DATA[@]}" --num-gist "$K" \
    --steps 100000 --minutes "$MINUTES" --out "$RUN"
  # shellcheck disable=SC2086  # KS: a list of budgets
  compressed_systems "$RUN/checkpoint" $KS
  "$GISTRANK" eval --teacher "$RUN/checkpoint" "${SYSTEMS[@]}" "${DATA[@]}" --out "$RUN/eval" \
    --run-dir "$RUN/eval/runs"
done
