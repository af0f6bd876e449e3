#!/usr/bin/env bash
# The shipped LoRA teacher as the reader on the lists a cascade reranks: BM25's top 20 for 24 AP89 dev
# topics (unjudged articles counted non-relevant), its full-context read (the reference) against prefix
# caching and SnapKV selection of its own K/V at 16, 32 and 64 positions (one compression pass serves
# each selector's three budgets). fp32, the teacher's dtype, on this 2-core CPU. The judged-list
# counterpart is ../ap89-judged-20-dev-24-teacher/eval.sh. Needs the AP89 build
# (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
SET=data/ap89-bm25-20
T="gistrank-teacher-lora?max_item_tokens=1024"
O=runs/ap89-teacher/eval-bm25-dev
scripts/ap89_import.sh bm25:20 $SET
S=()
for k in 16 32 64; do
  S+=(--prefix-k "$k" --student "$T&compressor=select&num_gist=$k")
done
.venv/bin/gistrank eval --data $SET --split dev --max-queries 24 --teacher "$T" "${S[@]}" \
  --out $O --run-dir $O/runs
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} "$HERE/"
