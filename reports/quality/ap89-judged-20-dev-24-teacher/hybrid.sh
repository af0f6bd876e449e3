#!/usr/bin/env bash
# The shipped LoRA teacher as the reader, the selection hybrid of its own K/V (the first k/2 tokens
# kept, k/2 more chosen by KVzip per layer and KV head; every head the same number, or the layer's
# columns shared by importance: per-head budgets) and plain KVzip (both rules) at 16, 32 and 64
# positions, against its full-context read; the 24 AP89 dev topics x 20 judged articles of eval.sh. One
# KVzip pass per article serves every row; the teacher, prefix caching and uniform KVzip are read back
# from kvzip.sh's files (run first when missing). fp32, the teacher's dtype, on this 2-core CPU
# (~60 min). Writes hybrid/ beside this script.
set -euo pipefail
cd "$(dirname "$0")/../../.."
T="gistrank-teacher-lora?max_item_tokens=1024"
K=runs/ap89-teacher-kvzip/eval-judged-dev
O=runs/ap89-teacher-hybrid/eval-judged-dev
HERE=reports/quality/ap89-judged-20-dev-24-teacher/hybrid
[ -d $K/runs ] || reports/quality/ap89-judged-20-dev-24-teacher/kvzip.sh
[ -d $O/runs ] || { mkdir -p $O && cp -r $K/runs $O/runs; }
Z="$T&compressor=select&select_scorer=kvzip"
S=()
for k in 16 32 64; do
  h=$((k / 2))
  S+=(--prefix-k "$k")
  for rule in uniform adaptive; do
    S+=(--student "$Z&num_gist=$k&select_head_budget=$rule")
    S+=(--student "$Z&keep_item_prefix=$h&num_gist=$h&select_head_budget=$rule")
  done
done
.venv/bin/gistrank eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher "$T" "${S[@]}" \
  --out $O --run-dir $O/runs
mkdir -p $HERE
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} $HERE/
