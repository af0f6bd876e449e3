#!/usr/bin/env bash
# Pilot: gists over the frozen base at k = 64 with and without GistPool's pooling windows, the same
# recipe and wall time each (12 train topics, 12 minutes on 2 CPU cores), read on 12 dev topics.
set -euo pipefail
G=.venv/bin/gistrank
for V in plain pool; do
  [ -d runs/pool-pilot/$V/checkpoint ] || $G train-gists --data data/ap89-judged-20 --max-queries 12 \
    --num-gist 64 --max-item-tokens 1024 --steps 1000 --minutes 12 --config configs/frozen_gists/ap89.json \
    --cache-dir runs/ap89/item-kv --memory-items 96 --device cpu $([ $V = pool ] && echo --pool-windows) \
    --out runs/pool-pilot/$V
done
$G eval --data data/ap89-judged-20 --split dev --max-queries 12 --teacher runs/pool-pilot/plain/checkpoint \
  --student runs/pool-pilot/plain/checkpoint --student runs/pool-pilot/pool/checkpoint --prefix-k 64 \
  --out runs/pool-pilot/eval --run-dir runs/pool-pilot/eval/runs
