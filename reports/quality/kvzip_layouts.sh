#!/usr/bin/env bash
# Plain KVzip and the selection hybrid (the first k/2 tokens kept, k/2 more chosen by KVzip per layer and
# KV head), each with every head keeping the same number of columns (uniform) or the layer's columns
# shared by importance (per-head budgets, Ada-KV), at 16, 32 and 64 positions with prefix caching at the
# same budgets, read by READER against its own whole-article read on 24 dev topics of DATA: twelve
# layouts from one KVzip pass per article. Scores already in CACHED (a run folder of an earlier
# evaluation: the reader, BM25, prefix, ...) are read back, not recomputed. Writes the evaluation to OUT
# and its report, results and plots to HERE; `kvzip_layouts.py HERE` prints the table and paired rows.
# Usage (from the repository root): reports/quality/kvzip_layouts.sh READER DATA CACHED OUT HERE
set -euo pipefail
READER=$1 DATA=$2 CACHED=$3 O=$4 HERE=$5
[ -d "$O/runs" ] || { mkdir -p "$O" && cp -r "$CACHED" "$O/runs"; }
case $READER in *\?*) Z="$READER&" ;; *) Z="$READER?" ;; esac
Z+="compressor=select&select_scorer=kvzip"
S=()
for k in 16 32 64; do
  h=$((k / 2))
  S+=(--prefix-k "$k")
  for rule in uniform adaptive; do
    S+=(--student "$Z&keep_item_prefix=0&num_gist=$k&select_head_budget=$rule")
    S+=(--student "$Z&keep_item_prefix=$h&num_gist=$h&select_head_budget=$rule")
  done
done
.venv/bin/gistrank eval --data "$DATA" --split dev --max-queries 24 --teacher "$READER" "${S[@]}" \
  --out "$O" --run-dir "$O/runs"
mkdir -p "$HERE"
cp "$O"/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} "$HERE/"
