#!/usr/bin/env bash
# The hybrid over the frozen base (the default model's reader, query likelihood): the first 48 raw item
# tokens stored + 16 gists trained 40 minutes on 2 CPU cores with the plain gists' CPU recipe
# (configs/frozen_gists/ap89-token-kl.json: lr 1e-3, list-wise KL + per-token KL) on the first 24 train
# topics (their articles' K/V cached in runs/ap89/item-kv); read on 24 AP89 dev topics × 20 judged
# articles beside its untrained start and prefix caching. --prefix-k counts after the student's t, so
# `--prefix-k 48` / `64` read prefix 96 / 112; prefix 48 (the hybrid's raw part alone) and prefix 64 as
# students of their own (fused with BM25 like every student) are the second evaluation, seeded with the
# first one's run files (reader and BM25 read back, not re-scored); then all 47 dev topics (prefix48/,
# dev47/ in this folder).
set -euo pipefail
G=.venv/bin/gistrank
R=runs/ap89-hybrid
[ -d $R/t48k16/checkpoint ] || $G train-gists --data data/ap89-judged-20 --max-queries 24 --num-gist 16 \
  --keep-item-prefix 48 --max-item-tokens 1024 --steps 10000 --minutes 40 \
  --config configs/frozen_gists/ap89-token-kl.json --cache-dir runs/ap89/item-kv --memory-items 96 \
  --device cpu --out $R/t48k16
C=$R/t48k16/checkpoint
[ -f $R/eval/results.json ] || $G eval --data data/ap89-judged-20 --split dev --max-queries 24 \
  --teacher $C --student $C --prefix-k 64 --prefix-k 48 --out $R/eval --run-dir $R/eval/runs
P=$R/eval-prefix48
[ -d $P/runs ] || { mkdir -p $P && cp -r $R/eval/runs $P/runs; }
[ -f $P/results.json ] || $G eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher $C \
  --student $C --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=48" \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $P --run-dir $P/runs
# confirmation on the 23 dev topics no earlier table read (78-100): all 47 dev topics with judged
# articles, the first 24 read back from the run files above
A=$R/eval-dev47
[ -d $A/runs ] || { mkdir -p $A && cp -r $P/runs $A/runs; }
$G eval --data data/ap89-judged-20 --split dev --max-queries 47 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=48" \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $A --run-dir $A/runs
