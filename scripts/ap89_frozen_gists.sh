#!/usr/bin/env bash
# Gists over a frozen reader on real long documents: AP newswire 1989, trained on TREC topics 1-50
# (their judged articles, 20 a topic), evaluated on the dev topics 51-100 — on their judged lists and on
# BM25's top 20 — against prefix caching, SnapKV- and KVzip-style selection, the hybrid (the first k/2
# tokens kept, k/2 selected by KVzip) at each budget in KS, the untrained gists and BM25, all read by
# the default model's reader (the untouched base by query likelihood, items up to 1024 tokens, in this
# machine's dtype: bf16 where native); the reference is that reader's full context.
# Needs the AP89 build (shared/data/trec-ap89/README.md) in data/trec-ap89, or the imported sets in
# data/ap89-judged-20 and data/ap89-bm25-20; its text is never committed.
# Sized by TRAIN_QUERIES (train topics whose articles' K/V is computed once), STEPS or MINUTES, and
# MAX_QUERIES (dev topics). On CPU the reader's item K/V goes to CACHE_DIR and is read back by later runs
# (measured: 3.8 GB for 240 articles in bf16); on one GPU: DEVICE=cuda CACHE_DIR= MEMORY_ITEMS=1000
# MINUTES=5 CONFIG=configs/frozen_gists/ap89-gpu.json (eval uses CUDA whenever present).
set -euo pipefail
cd "$(dirname "$0")/.."
export GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it (scripts/ap89_import.sh uses it too)
OUT=${OUT:-runs/ap89}
K=${K:-64}
KS=${KS:-16 32 64}  # budgets of the training-free rows
SETS=${SETS:-judged:20 bm25:20}  # dev candidate lists evaluated; training reads judged:20's train split
STEPS=${STEPS:-200}
TRAIN_QUERIES=${TRAIN_QUERIES:-45}
MAX_QUERIES=${MAX_QUERIES:-24}
DEVICE=${DEVICE:-cpu}
MINUTES=${MINUTES:-}  # the steps' wall time (item K/V computed before it): training stops there, whatever STEPS says
HOLDOUT_QUERIES=${HOLDOUT_QUERIES:-}  # the last N of the TRAIN_QUERIES never drawn: their lists pick the step kept (early stopping)
CONFIG=${CONFIG:-configs/frozen_gists/ap89.json}  # further FrozenGistConfig fields (lists per step, lr, …)
CACHE_DIR=${CACHE_DIR-$OUT/item-kv}  # empty: the item K/V stays in memory (MEMORY_ITEMS units)
MEMORY_ITEMS=${MEMORY_ITEMS:-256}
POOL_WINDOWS=${POOL_WINDOWS:-}  # non-empty: each gist reads only its own span of the item (GistPool)
READER=${READER:-gistrank-base-ql-prefix64}  # default: the former default model, whose reader is the untouched base; or gistrank-teacher-lora (head rule)
RUN=$OUT/gists-frozen-k$K${POOL_WINDOWS:+-pool}-q$TRAIN_QUERIES${HOLDOUT_QUERIES:+-h$HOLDOUT_QUERIES}-s$STEPS${MINUTES:+-m$MINUTES}-$DEVICE

set_for() { echo "data/ap89-${1/:/-}"; }
for CANDS in $SETS; do
  SET=$(set_for "$CANDS")
  scripts/ap89_import.sh "$CANDS" "$SET"
done
[ -d "$RUN/checkpoint" ] || "$GISTRANK" train-gists --reader "$READER" --data "$(set_for judged:20)" \
  --max-queries "$TRAIN_QUERIES" --num-gist "$K" --max-item-tokens 1024 --steps "$STEPS" \
  --device "$DEVICE" ${MINUTES:+--minutes "$MINUTES"} ${CONFIG:+--config "$CONFIG"} \
  ${HOLDOUT_QUERIES:+--holdout-queries "$HOLDOUT_QUERIES"} \
  ${CACHE_DIR:+--cache-dir "$CACHE_DIR"} --memory-items "$MEMORY_ITEMS" ${POOL_WINDOWS:+--pool-windows} \
  --out "$RUN"
# every system is read by the trained run's body — the frozen reader, in the dtype it was trained in
# (the gists and their adapter act on gist rows only, so the checkpoint's full-context forward is the
# reader's own): the reference, trained and untrained gists, prefix caching, selection and the hybrid
CKPT=$RUN/checkpoint
# shellcheck source=scripts/compressed_systems.sh
source scripts/compressed_systems.sh
# shellcheck disable=SC2086  # KS: a list of budgets
compressed_systems "$CKPT" $KS
for CANDS in $SETS; do
  NAME=$(basename "$(set_for "$CANDS")")
  "$GISTRANK" eval --data "$(set_for "$CANDS")" --split dev --max-queries "$MAX_QUERIES" \
    --teacher "$CKPT" "${SYSTEMS[@]}" \
    --out "$RUN/eval-$NAME-dev" --run-dir "$RUN/eval-$NAME-dev/runs"
done
