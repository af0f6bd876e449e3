#!/usr/bin/env bash
# The plain gists at 16, 32 and 64 positions trained over the LoRA teacher on judged lists of train topics
# (../ap89-judged-20-dev-24-teacher/gists-k16-k32.sh and gists.sh, run first when their checkpoints are
# missing) read on the lists a cascade reranks: BM25's top 20 for 24 AP89 dev topics, unjudged articles
# counted non-relevant. The reference is the teacher's whole-article read; it, BM25 and no item are
# read back from run.sh's run files (run first when missing), beside prefix caching at 16 / 32 / 64 on
# the teacher's body. Untrained starts are not read (--no-untrained-control). fp32, the teacher's dtype
# (~60 min: 43 for the 16 and 32 gists, 17 for the 64).
# Writes gists/ beside this script.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
T="gistrank-teacher-lora?max_item_tokens=1024"
R=runs/ap89-teacher-gists
O=runs/ap89-teacher/eval-bm25-dev-gists
[ -d $R/k32/checkpoint ] || reports/quality/ap89-judged-20-dev-24-teacher/gists-k16-k32.sh
[ -d $R/k64/checkpoint ] || reports/quality/ap89-judged-20-dev-24-teacher/gists.sh
[ -d runs/ap89-teacher/eval-bm25-dev/runs ] || "$HERE/run.sh"
[ -d $O/runs ] || { mkdir -p $O && cp -r runs/ap89-teacher/eval-bm25-dev/runs $O/runs; }
.venv/bin/gistrank eval --data data/ap89-bm25-20 --split dev --max-queries 24 --teacher "$T" \
  --student $R/k16/checkpoint --student $R/k32/checkpoint --student $R/k64/checkpoint \
  --prefix-k 16 --prefix-k 32 --prefix-k 64 --no-untrained-control --out $O --run-dir $O/runs
mkdir -p "$HERE/gists"
cp $O/{report.md,results.json,ndcg_at_10_vs_k.png,quality_vs_bytes.png} "$HERE/gists/"
