#!/usr/bin/env bash
# BM25's top 20, 24 AP89 dev topics: plain KVzip and the selection hybrid, uniform and per-head, at 16, 32
# and 64 positions (../kvzip_layouts.sh), read by the frozen base (query likelihood, items up to 1024
# tokens, bf16 on this CPU). The body is the seed-1 hybrid run's checkpoint (its adapter acts on gist
# rows only, so read full-context or through selection it is the untouched base); the reader, BM25,
# prefix caching and uniform KVzip are read back from the training-free table's files
# (../ap89-bm25-20-dev-24-selection/run.sh writes them). Needs the AP89 build
# (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ -d runs/ap89-bm25-selection/eval-dev24/runs ] || reports/quality/ap89-bm25-20-dev-24-selection/run.sh
reports/quality/kvzip_layouts.sh runs/ap89-hybrid-q45-s1/t48k16/checkpoint data/ap89-bm25-20 \
  runs/ap89-bm25-selection/eval-dev24/runs runs/ap89-bm25-hybrid/eval-dev24 \
  reports/quality/ap89-bm25-20-dev-24-hybrid
