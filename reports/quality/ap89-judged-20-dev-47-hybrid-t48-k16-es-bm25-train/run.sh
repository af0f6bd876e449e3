#!/usr/bin/env bash
# The early-stopped hybrid of ../ap89-judged-20-dev-47-hybrid-t48-k16-es/ (the first 48 raw item tokens
# stored + 16 gists over the frozen base, 40 train topics drawn, topics 45–49 held out to pick the step,
# patience 5 checks, 55 minutes at most) with one change: each train topic's list is the union of its 20
# judged articles and BM25's top 20 (`judged:20+bm25:20`, ~38 articles a topic), so the steps also see the
# first stage's hard negatives, unjudged ones included (no label is read by the training). Read on all 47
# AP89 dev topics' judged lists and on BM25's top 20 for the first 24 dev topics, beside prefix caching at
# 64 positions (the default), the reader and BM25. Needs the AP89 build (../shared/data/trec-ap89/README.md)
# in data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
TRAIN=data/ap89-judged-20-bm25-20
R=runs/ap89-hybrid-jb45
scripts/ap89_import.sh judged:20+bm25:20 $TRAIN
scripts/ap89_import.sh judged:20 data/ap89-judged-20
scripts/ap89_import.sh bm25:20 data/ap89-bm25-20
[ -d $R/t48k16/checkpoint ] || $G train-gists --data $TRAIN --max-queries 45 --holdout-queries 5 \
  --holdout-every 20 --holdout-patience 5 --num-gist 16 --keep-item-prefix 48 --max-item-tokens 1024 \
  --steps 10000 --minutes 55 --config configs/frozen_gists/ap89-token-kl.json --cache-dir runs/ap89/item-kv \
  --memory-items 96 --device cpu --out $R/t48k16
C=$R/t48k16/checkpoint
PREFIX="$C?compressor=prefix&keep_item_prefix=0&num_gist=64"
$G eval --data data/ap89-judged-20 --split dev --max-queries 47 --teacher $C --student $C --student "$PREFIX" \
  --out $R/eval-dev47 --run-dir $R/eval-dev47/runs
$G eval --data data/ap89-bm25-20 --split dev --max-queries 24 --teacher $C --student $C --student "$PREFIX" \
  --out $R/eval-bm25-dev24 --run-dir $R/eval-bm25-dev24/runs
