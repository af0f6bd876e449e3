#!/usr/bin/env bash
# The 24 AP89 dev topics x 20 judged articles of the selection tables: plain KVzip and the selection
# hybrid (the first k/2 tokens kept, k/2 more chosen by KVzip per layer and KV head), each with every
# head keeping the same number of columns (uniform) or the layer's columns shared by importance
# (per-head budgets, Ada-KV), at 16, 32 and 64 positions, read by the frozen base (query likelihood,
# items up to 1024 tokens, bf16 on this CPU), the reference its whole-article read. All twelve come out
# of one KVzip pass per article. The body is the seed-1 hybrid run's checkpoint (its adapter acts on gist
# rows only, so read full-context or through selection it is the untouched base); the reader, BM25 and
# prefix caching are read back from that run's 47-topic evaluation
# (../ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh writes it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
C=runs/ap89-hybrid-q45-s1/t48k16/checkpoint
O=runs/ap89-kvzip-layouts/eval-dev24
HERE=reports/quality/ap89-judged-20-dev-24-kvzip-layouts
[ -d runs/ap89-hybrid-q45-s1/eval-dev47/runs ] || reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh
[ -d $O/runs ] || { mkdir -p $O && cp -r runs/ap89-hybrid-q45-s1/eval-dev47/runs $O/runs; }
Z="$C?compressor=select&select_scorer=kvzip"
S=()
for k in 16 32 64; do
  h=$((k / 2))
  S+=(--prefix-k "$k")
  for rule in uniform adaptive; do
    S+=(--student "$Z&keep_item_prefix=0&num_gist=$k&select_head_budget=$rule")
    S+=(--student "$Z&keep_item_prefix=$h&num_gist=$h&select_head_budget=$rule")
  done
done
$G eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher $C "${S[@]}" --out $O --run-dir $O/runs
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} $HERE/
