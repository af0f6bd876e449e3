#!/usr/bin/env bash
# BM25's top 20, 24 AP89 dev topics: the selection hybrid (the first k/2 tokens kept, k/2 more chosen by
# KVzip per layer and KV head) and plain KVzip, each with every head keeping the same number of columns
# (uniform) or the layer's columns shared by importance (per-head budgets, Ada-KV), at 16, 32 and 64
# positions, read by the frozen base (query likelihood, items up to 1024 tokens, bf16 on this CPU), the
# reference its whole-article read. All twelve come out of one KVzip pass per article. The body is the
# seed-1 hybrid run's checkpoint (its adapter acts on gist rows only, so read full-context or through
# selection it is the untouched base); the reader, BM25, prefix caching and uniform KVzip are read back
# from the training-free table's files (../ap89-bm25-20-dev-24-selection/run.sh writes them). Needs the
# AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
C=runs/ap89-hybrid-q45-s1/t48k16/checkpoint
O=runs/ap89-bm25-hybrid/eval-dev24
HERE=reports/quality/ap89-bm25-20-dev-24-hybrid
[ -d runs/ap89-bm25-selection/eval-dev24/runs ] || reports/quality/ap89-bm25-20-dev-24-selection/run.sh
[ -d $O/runs ] || { mkdir -p $O && cp -r runs/ap89-bm25-selection/eval-dev24/runs $O/runs; }
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
$G eval --data data/ap89-bm25-20 --split dev --max-queries 24 --teacher $C "${S[@]}" --out $O --run-dir $O/runs
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} $HERE/
