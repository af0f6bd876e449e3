#!/usr/bin/env bash
# The short run of ../ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/ (its step 20, 6.8 minutes, read 0.610)
# with a third seed: the same hybrid recipe (48 raw item tokens + 16 gists over the frozen base, 40 train
# topics drawn, 45–49 held out) run for 20 steps, read on all 47 AP89 dev topics' judged lists. The reader,
# BM25 and prefix 64 are carried from the seed-1 evaluation's run files (the reader is that run's checkpoint
# read full-context: its adapter acts on gist rows only, so it reads as the untouched base), so the seed-1
# run comes first. Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89; ~30 min on
# 2 cores after the seed-1 run, as measured (training 5.2 min, evaluation 22 min).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
S1=runs/ap89-hybrid-q45-s1
R=runs/ap89-hybrid-20-steps-s2
[ -d $S1/eval-dev47/runs ] || reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh
C=$S1/t48k16/checkpoint
[ -d $R/t48k16/checkpoint ] || $G train-gists --data $SET --max-queries 45 --holdout-queries 5 \
  --holdout-pseudo-queries 3 --holdout-every 20 --seed 2 --num-gist 16 --keep-item-prefix 48 \
  --max-item-tokens 1024 --steps 20 --config configs/frozen_gists/ap89-token-kl.json \
  --cache-dir runs/ap89/item-kv --memory-items 96 --device cpu --out $R/t48k16
[ -d $R/eval-dev47/runs ] || { mkdir -p $R/eval-dev47 && cp -r $S1/eval-dev47/runs $R/eval-dev47/; }
$G eval --data $SET --split dev --max-queries 47 --teacher $C --student $R/t48k16/checkpoint \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-dev47 \
  --run-dir $R/eval-dev47/runs
