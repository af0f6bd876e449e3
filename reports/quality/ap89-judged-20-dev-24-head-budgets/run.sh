#!/usr/bin/env bash
# Per-head budgets on AP89: the hybrid (the first 32 tokens kept, 32 more chosen by KVzip per layer and
# KV head) with every head keeping 32 (uniform) or the layer's 32·H_kv shared by importance (adaptive,
# Ada-KV), read by the frozen base (query likelihood, items up to 1024 tokens, bf16 on this CPU) on 24
# dev topics × 20 judged articles, in one evaluation so the two are paired on the same reads. The body
# is the hybrid run's checkpoint (its adapter acts on gist rows only, so selection reads the untouched
# base); the reader, BM25 and prefix 64 are read back from that run's files (run.sh beside
# ../ap89-judged-20-dev-hybrid-t48-k16/). Needs data/ap89-judged-20 (scripts/ap89_frozen_gists.sh).
set -euo pipefail
G=.venv/bin/gistrank
C=runs/ap89-hybrid/t48k16/checkpoint
O=runs/ap89-head-budgets
[ -d $O/runs ] || { mkdir -p $O && cp -r runs/ap89-hybrid/eval-dev47/runs $O/runs; }
H="$C?compressor=select&select_scorer=kvzip&keep_item_prefix=32&num_gist=32"
$G eval --data data/ap89-judged-20 --split dev --max-queries 24 --teacher $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" \
  --student "$H" --student "$H&select_head_budget=adaptive" --out $O --run-dir $O/runs
# plain KVzip at 64, uniform and per-head, on the first 8 of those topics (kvzip64/ in this folder)
K=runs/ap89-head-budgets-kvzip64
[ -d $K/runs ] || { mkdir -p $K && cp -r $O/runs $K/runs; }
Z="$C?compressor=select&select_scorer=kvzip&keep_item_prefix=0&num_gist=64"
$G eval --data data/ap89-judged-20 --split dev --max-queries 8 --teacher $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" \
  --student "$Z" --student "$Z&select_head_budget=adaptive" --out $K --run-dir $K/runs
