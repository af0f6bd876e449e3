#!/usr/bin/env bash
# The shipped LoRA teacher as the reader: plain KVzip and the selection hybrid of its own K/V, uniform and
# per-head, at 16, 32 and 64 positions (../kvzip_layouts.sh), against its full-context read; the 24
# AP89 dev topics x 20 judged articles of eval.sh. The teacher, prefix caching and uniform KVzip are read
# back from kvzip.sh's files (run first when missing). fp32, the teacher's dtype, on this 2-core CPU
# (~55 min). Writes hybrid/ beside this script.
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=runs/ap89-teacher-kvzip/eval-judged-dev
[ -d $K/runs ] || reports/quality/ap89-judged-20-dev-24-teacher/kvzip.sh
reports/quality/kvzip_layouts.sh "gistrank-teacher-lora?max_item_tokens=1024" data/ap89-judged-20 $K/runs \
  runs/ap89-teacher-hybrid/eval-judged-dev reports/quality/ap89-judged-20-dev-24-teacher/hybrid
