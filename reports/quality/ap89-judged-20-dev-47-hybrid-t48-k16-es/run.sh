#!/usr/bin/env bash
# The hybrid over the frozen base (the first 48 raw item tokens stored + 16 gists, the recipe of
# ../ap89-judged-20-dev-47-hybrid-t48-k16/) trained on all 45 train topics with judged articles, the last
# 5 (topics 45–49) held out: 40 topics (770 articles) drawn by the steps, the 5 held-out lists (98
# articles) checked every 20 steps, the checkpoint the gists of the lowest held-out list-wise KL to the
# reader (patience 5 checks, 55 minutes at most); read on all 47 AP89 dev topics with judged articles
# (51–100) beside prefix caching at 64 positions (the default) and BM25. Needs the AP89 build
# (../shared/data/trec-ap89/README.md) in data/trec-ap89; ~1 h 30 min on 2 cores, as measured in two
# runs over one --cache-dir (item K/V: 4 min for the 473 articles of 24 topics, 4 min 16 s for the 382
# more; training 55 min; evaluation 29 min).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-hybrid-q45
scripts/ap89_import.sh judged:20 $SET
[ -d $R/t48k16/checkpoint ] || $G train-gists --data $SET --max-queries 45 --holdout-queries 5 \
  --holdout-every 20 --holdout-patience 5 --num-gist 16 --keep-item-prefix 48 --max-item-tokens 1024 \
  --steps 10000 --minutes 55 --config configs/frozen_gists/ap89-token-kl.json --cache-dir runs/ap89/item-kv \
  --memory-items 96 --device cpu --out $R/t48k16
C=$R/t48k16/checkpoint
$G eval --data $SET --split dev --max-queries 47 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-dev47 \
  --run-dir $R/eval-dev47/runs
