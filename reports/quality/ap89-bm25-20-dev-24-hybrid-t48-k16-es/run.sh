#!/usr/bin/env bash
# The early-stopped hybrid of ../ap89-judged-20-dev-47-hybrid-t48-k16-es/ (48 raw tokens + 16 gists over
# the frozen base, trained on the judged lists of 40 train topics, step picked on 5 held out) read on
# the lists a deployment reranks: BM25's top 20 for the first 24 dev topics (unjudged articles counted
# non-relevant), beside prefix caching at 64 positions (the default) and BM25's own order. Needs the
# AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89 and that run's checkpoint (its
# run.sh trains it); ~13 min on 2 cores (the BM25 import 45 s, evaluation 12 min).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-bm25-20
R=runs/ap89-hybrid-q45
scripts/ap89_import.sh bm25:20 $SET
C=$R/t48k16/checkpoint
[ -d $C ] || reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es/run.sh
$G eval --data $SET --split dev --max-queries 24 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval-bm25-dev24 \
  --run-dir $R/eval-bm25-dev24/runs
