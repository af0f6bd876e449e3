#!/usr/bin/env bash
# The early-stopped hybrid of ../ap89-judged-20-dev-47-hybrid-t48-k16-es/ (the first 48 raw item tokens
# stored + 16 gists over the frozen base, 40 train topics drawn, topics 45–49 held out to pick the step,
# patience 5 checks, 55 minutes at most) with a second seed (what the steps draw and the held-out
# pseudo-queries; the gists' initialisation does not depend on it) and a larger held-out check: each
# held-out list is asked its own topic and 3 fixed pseudo-queries (20 (list, query) pairs a check instead
# of 5); the curve logs the own-query KL beside it, so the step the 5-pair rule would have kept is read
# from the same run. Read on all 47 AP89 dev topics' judged lists beside prefix caching at 64 positions
# (the default) and the reader; then the step the 5-pair rule would have kept, rebuilt and read the same
# way. Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89; ~1 h 50 min on 2
# cores, as measured (training 55 min, evaluation 28 min, the rebuilt step 7 + 18 min).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-hybrid-q45-s1
scripts/ap89_import.sh judged:20 $SET
[ -d $R/t48k16/checkpoint ] || $G train-gists --data $SET --max-queries 45 --holdout-queries 5 \
  --holdout-pseudo-queries 3 --holdout-every 20 --holdout-patience 5 --seed 1 --num-gist 16 \
  --keep-item-prefix 48 --max-item-tokens 1024 --steps 10000 --minutes 55 \
  --config configs/frozen_gists/ap89-token-kl.json --cache-dir runs/ap89/item-kv --memory-items 96 \
  --device cpu --out $R/t48k16
C=$R/t48k16/checkpoint
$G eval --data $SET --split dev --max-queries 47 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-dev47 \
  --run-dir $R/eval-dev47/runs
# the step the own-query (5-pair) reading would have kept: step 20 (the lowest own-query KL, 1.23), rebuilt by the
# same seed run 20 steps (its curve's steps 1–20 and check at step 20 equal the full run's), read on the same
# 47 topics; the reader, BM25 and prefix 64 come from the run files of eval-dev47 (same keys)
S=$R/t48k16-step20
[ -d $S/checkpoint ] || $G train-gists --data $SET --max-queries 45 --holdout-queries 5 \
  --holdout-pseudo-queries 3 --holdout-every 20 --seed 1 --num-gist 16 --keep-item-prefix 48 \
  --max-item-tokens 1024 --steps 20 --config configs/frozen_gists/ap89-token-kl.json \
  --cache-dir runs/ap89/item-kv --memory-items 96 --device cpu --out $S
[ -d $R/eval-dev47-step20/runs ] || { mkdir -p $R/eval-dev47-step20 && cp -r $R/eval-dev47/runs $R/eval-dev47-step20/; }
$G eval --data $SET --split dev --max-queries 47 --teacher $C --student $S/checkpoint \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-dev47-step20 \
  --run-dir $R/eval-dev47-step20/runs
# the held-out checks, both readings (holdout_checks.png here)
$G curves "seed 1=$R/t48k16" --key holdout_kl --key holdout_kl_own_query --key holdout_overlap@10 --smooth 1 \
  --out reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/holdout_checks.png
