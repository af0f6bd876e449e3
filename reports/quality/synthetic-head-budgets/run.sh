#!/usr/bin/env bash
# Per-head budgets on the synthetic catalog (the catalog of scripts/quality.sh: 60 families, items cut at
# 256 tokens, test split): SnapKV- and KVzip-style selection at k = 16, 32, 64, each with every KV head
# keeping k (uniform) and with the layer's k·H_kv shared by importance (adaptive, Ada-KV). The body is the float32 checkpoint of the
# synthetic frozen-reader rows (scripts/synthetic_frozen_gists.sh; its gist adapter acts on gist rows
# only, so selection reads the untouched base by query likelihood, in float32 — the uniform rows repeat
# that table's); the reference is its full context.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=${GISTRANK:-.venv/bin/gistrank}
C=runs/synthetic-frozen/gistrank-base-ql-prefix64-k64-m10/checkpoint
O=${OUT:-runs/synthetic-head-budgets}
[ -d $C ] || READERS=gistrank-base-ql-prefix64 scripts/synthetic_frozen_gists.sh
# the reader's and BM25's runs are read back from that evaluation's files, not re-scored
[ -d "$O/runs" ] || { mkdir -p "$O" && cp -r "$(dirname $C)/eval/runs" "$O/runs"; }
S=()
for budget in uniform adaptive; do
  for k in 16 32 64; do
    S+=(--student "$C?compressor=select&num_gist=$k&select_head_budget=$budget"
      --student "$C?compressor=select&select_scorer=kvzip&num_gist=$k&select_head_budget=$budget")
  done
done
"$G" eval --teacher $C "${S[@]}" --products 60 --max-item-tokens 256 --seed 0 --out "$O" --run-dir "$O/runs"
