#!/usr/bin/env bash
# Gists over a frozen reader on real long documents: AP newswire 1989, trained on TREC topics 1-50
# (their judged articles, 20 a topic), evaluated on the dev topics 51-100 against prefix caching at the
# same budget, the untrained gists, SnapKV- and KVzip-style selection and BM25, all read by the default
# model's reader (the untouched base by query likelihood, items up to 1024 tokens, in this machine's
# dtype: bf16 where native); the reference is that reader's full context.
# Needs the AP89 build (shared/data/trec-ap89/README.md) in data/trec-ap89; its text is never
# committed. CPU sized by TRAIN_QUERIES (train topics whose articles' K/V is computed once), STEPS and
# MAX_QUERIES (dev topics). The reader's item K/V is kept in $OUT/item-kv and read back by later runs
# (measured: 3.8 GB for 240 articles in bf16, twice that in fp32); DEVICE=cuda trains on a GPU (eval
# uses CUDA whenever present).
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
SRC=data/trec-ap89
SET=data/ap89-judged-20
OUT=runs/ap89
K=${K:-64}
STEPS=${STEPS:-200}
TRAIN_QUERIES=${TRAIN_QUERIES:-20}
MAX_QUERIES=${MAX_QUERIES:-12}
DEVICE=${DEVICE:-cpu}
MINUTES=${MINUTES:-}  # a fixed wall-time slot (e.g. one lent GPU): training stops there, whatever STEPS says
CONFIG=${CONFIG:-configs/frozen_gists/ap89.json}  # further FrozenGistConfig fields (lists per step, lr, …)
READER="gistrank-base-ql-prefix64"  # the default model; its reader is the frozen reader here
RUN=$OUT/gists-frozen-k$K-q$TRAIN_QUERIES-s$STEPS${MINUTES:+-m$MINUTES}

[ -d "$SET" ] || "$GISTRANK" data import-trec --docs "$SRC/docs.jsonl" --topics "$SRC/topics.jsonl" \
  --qrels "$SRC/qrels.txt" --query-field title --candidates judged:20 --out "$SET"
[ -d "$RUN/checkpoint" ] || "$GISTRANK" train-gists --reader "$READER" --data "$SET" \
  --max-queries "$TRAIN_QUERIES" --num-gist "$K" --max-item-tokens 1024 --steps "$STEPS" \
  --device "$DEVICE" ${MINUTES:+--minutes "$MINUTES"} ${CONFIG:+--config "$CONFIG"} \
  --cache-dir "$OUT/item-kv" --out "$RUN"
# every system is read by the trained run's body — the frozen reader, in the dtype it was trained in
# (the gists and their adapter act on gist rows only, so the checkpoint's full-context forward is the
# reader's own): the reference, prefix caching, untrained gists, SnapKV and KVzip selection
CKPT=$RUN/checkpoint
"$GISTRANK" eval --data "$SET" --split dev --max-queries "$MAX_QUERIES" \
  --teacher "$CKPT" --student "$CKPT" --prefix-k "$K" \
  --student "$CKPT?compressor=select&num_gist=$K" \
  --student "$CKPT?compressor=select&select_scorer=kvzip&num_gist=$K" \
  --out "$OUT/judged-20-dev-gists-k$K" --run-dir "$OUT/judged-20-dev-reader/runs"
