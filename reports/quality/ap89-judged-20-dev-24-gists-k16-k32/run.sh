#!/usr/bin/env bash
# Plain gists (t = 0) at 16 and 32 positions over the frozen base (the default model's reader, query
# likelihood), each trained 10 minutes on 2 CPU cores with the plain gists' CPU recipe
# (configs/frozen_gists/ap89-token-kl.json: lr 1e-3, list-wise KL + per-token KL) on the first 24 train
# topics (their articles' K/V cached once in runs/ap89/item-kv, shared by both runs); read on 24 AP89 dev
# topics × 20 judged articles beside their untrained starts (eval reads them for every gist student)
# and prefix caching at 16, 32 and 64 (~85 min in all). The reader is the k = 16 run's
# checkpoint read full-context (its gists and adapter act on gist rows only: it reads as the untouched
# base). Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-gists-k16-k32
scripts/ap89_import.sh judged:20 $SET
for K in 16 32; do
  [ -d $R/k$K/checkpoint ] || $G train-gists --data $SET --max-queries 24 --num-gist $K \
    --max-item-tokens 1024 --steps 10000 --minutes 10 --config configs/frozen_gists/ap89-token-kl.json \
    --cache-dir runs/ap89/item-kv --memory-items 96 --device cpu --out $R/k$K
done
C=$R/k16/checkpoint
prefix() { echo "$C?compressor=prefix&keep_item_prefix=0&num_gist=$1"; }
$G eval --data $SET --split dev --max-queries 24 --teacher $C --student $C --student $R/k32/checkpoint \
  --student "$(prefix 16)" --student "$(prefix 32)" --student "$(prefix 64)" \
  --out $R/eval --run-dir $R/eval/runs
for F in report.md results.json ndcg_at_10_vs_k.png quality_vs_bytes.png; do
  if [ -f $R/eval/$F ]; then cp $R/eval/$F "$HERE/"; fi
done
for K in 16 32; do cp $R/k$K/curve.jsonl "$HERE/curve-k$K.jsonl"; done
