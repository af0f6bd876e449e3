#!/usr/bin/env bash
# Gists under GistPool's pooling windows over the frozen base (k = 64), each recipe trained 40 minutes on
# 2 CPU cores on the first 24 train topics (their items' K/V cached in runs/ap89/item-kv), at a 10× lower
# learning rate than the 12-topic pilot's: τ = 1 (configs/frozen_gists/ap89-pool.json) and τ = 4
# (ap89-pool-t4.json); then both read on 24 AP89 dev topics × 20 judged articles beside their untrained
# start and prefix 64 (the default).
set -euo pipefail
G=.venv/bin/gistrank
R=runs/ap89-pool
for V in t1 t4; do
  C=configs/frozen_gists/ap89-pool.json
  [ $V = t4 ] && C=configs/frozen_gists/ap89-pool-t4.json
  [ -d $R/$V/checkpoint ] || $G train-gists --data data/ap89-judged-20 --max-queries 24 --num-gist 64 \
    --max-item-tokens 1024 --pool-windows --steps 10000 --minutes 40 --config $C \
    --cache-dir runs/ap89/item-kv --memory-items 96 --device cpu --out $R/$V
done
$G eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher $R/t1/checkpoint \
  --student $R/t1/checkpoint --student $R/t4/checkpoint --prefix-k 64 --out $R/eval --run-dir $R/eval/runs
