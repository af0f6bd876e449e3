#!/usr/bin/env bash
# The hybrid over the frozen base trained longer: the first 48 raw item tokens stored + 16 gists trained
# 75 minutes on 2 CPU cores (1.9× the 40-minute run in ../ap89-judged-20-dev-hybrid-t48-k16/, same recipe,
# seed and 24 train topics; the item K/V is computed before the clock starts), read on all 47 AP89 dev
# topics with judged articles (51–100) beside prefix caching at 64 positions (the default) and BM25.
# Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89; ~1 h 40 min on 2 cores
# (item K/V 4 min, training 75, evaluation ~20).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-hybrid-m75
scripts/ap89_import.sh judged:20 $SET
[ -d $R/t48k16/checkpoint ] || $G train-gists --data $SET --max-queries 24 --num-gist 16 \
  --keep-item-prefix 48 --max-item-tokens 1024 --steps 10000 --minutes 75 \
  --config configs/frozen_gists/ap89-token-kl.json --cache-dir runs/ap89/item-kv --memory-items 96 \
  --device cpu --out $R/t48k16
C=$R/t48k16/checkpoint
$G eval --data $SET --split dev --max-queries 47 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-dev47 \
  --run-dir $R/eval-dev47/runs
