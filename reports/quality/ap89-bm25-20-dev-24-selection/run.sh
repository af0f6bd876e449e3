#!/usr/bin/env bash
# BM25's top 20 (the lists a cascade reranks), 24 AP89 dev topics: prefix caching, SnapKV and KVzip
# selection at 16, 32 and 64 positions, read by the frozen base (query likelihood, items up to 1024
# tokens, bf16 on this CPU), the reference its whole-article read. The body is the seed-1 hybrid run's
# checkpoint (its adapter acts on gist rows only, so read full-context or through selection it is the
# untouched base); the reader and BM25 are read back from the 47-topic BM25-list evaluation's files
# (../ap89-judged-20-dev-47-reader-cuts/run.sh writes them). Each selector's three budgets come out of
# one compression pass. Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
C=runs/ap89-hybrid-q45-s1/t48k16/checkpoint
O=runs/ap89-bm25-selection/eval-dev24
HERE=reports/quality/ap89-bm25-20-dev-24-selection
[ -d runs/ap89-bm25-prefix128/eval-dev47/runs ] || reports/quality/ap89-judged-20-dev-47-reader-cuts/run.sh
[ -d $O/runs ] || { mkdir -p $O && cp -r runs/ap89-bm25-prefix128/eval-dev47/runs $O/runs; }
S=()
for k in 16 32 64; do
  S+=(--prefix-k "$k" --student "$C?compressor=select&keep_item_prefix=0&num_gist=$k")
  S+=(--student "$C?compressor=select&select_scorer=kvzip&keep_item_prefix=0&num_gist=$k")
done
$G eval --data data/ap89-bm25-20 --split dev --max-queries 24 --teacher $C "${S[@]}" --out $O --run-dir $O/runs
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} $HERE/
