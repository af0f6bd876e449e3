#!/usr/bin/env bash
# The shipped LoRA teacher as the reader on BM25's top 20 for 24 AP89 dev topics: plain KVzip and the
# selection hybrid of its own K/V, uniform and per-head, at 16, 32 and 64 positions (../kvzip_layouts.sh),
# against its full-context read. The teacher, BM25 and prefix caching are read back from run.sh's files
# (run first when missing). fp32, the teacher's dtype, on this 2-core CPU (~1 h 35 min: one KVzip pass,
# ~240 s a topic). Writes kvzip/ beside this script.
set -euo pipefail
cd "$(dirname "$0")/../../.."
C=runs/ap89-teacher/eval-bm25-dev
[ -d $C/runs ] || reports/quality/ap89-bm25-20-dev-24-teacher/run.sh
reports/quality/kvzip_layouts.sh "gistrank-teacher-lora?max_item_tokens=1024" data/ap89-bm25-20 $C/runs \
  runs/ap89-teacher-kvzip/eval-bm25-dev reports/quality/ap89-bm25-20-dev-24-teacher/kvzip
