#!/usr/bin/env bash
# The 24 AP89 dev topics x 20 judged articles of the selection tables: plain KVzip and the selection
# hybrid, uniform and per-head, at 16, 32 and 64 positions (../kvzip_layouts.sh), read by the frozen base
# (query likelihood, items up to 1024 tokens, bf16 on this CPU). The body is the seed-1 hybrid run's
# checkpoint (its adapter acts on gist rows only, so read full-context or through selection it is the
# untouched base); the reader, BM25 and prefix caching are read back from that run's 47-topic evaluation
# (../ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh writes it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=runs/ap89-hybrid-q45-s1/eval-dev47/runs
[ -d $R ] || reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh
reports/quality/kvzip_layouts.sh runs/ap89-hybrid-q45-s1/t48k16/checkpoint data/ap89-judged-20 $R \
  runs/ap89-kvzip-layouts/eval-dev24 reports/quality/ap89-judged-20-dev-24-kvzip-layouts
