#!/usr/bin/env bash
# The shipped LoRA teacher as the reader, KVzip selection of its own K/V at 16, 32 and 64 positions (one
# compression pass serves the three), against its full-context read; the 24 AP89 dev topics × 20 judged
# articles of eval.sh, prefix caching at the same budgets as the control. fp32, the teacher's dtype, on this
# 2-core CPU (~75 min). Writes kvzip/ beside this script.
set -euo pipefail
cd "$(dirname "$0")/../../.."
T="gistrank-teacher-lora?max_item_tokens=1024"
O=runs/ap89-teacher-kvzip/eval-judged-dev
HERE=reports/quality/ap89-judged-20-dev-24-teacher/kvzip
S=()
for k in 16 32 64; do
  S+=(--prefix-k "$k" --student "$T&compressor=select&select_scorer=kvzip&num_gist=$k")
done
.venv/bin/gistrank eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher "$T" "${S[@]}" \
  --out $O --run-dir $O/runs
mkdir -p $HERE
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} $HERE/
