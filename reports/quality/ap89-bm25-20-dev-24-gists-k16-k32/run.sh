#!/usr/bin/env bash
# The plain gists at 16 and 32 positions over the frozen base (trained 10 CPU-minutes each on judged
# lists of train topics by ../ap89-judged-20-dev-24-gists-k16-k32/run.sh, which this runs first when
# their checkpoints are missing) read on the lists a cascade reranks: BM25's top 20 for 24 AP89 dev
# topics, unjudged articles counted non-relevant; beside prefix caching at 16, 32 and 64, the reference
# the base's whole-article read (the k = 16 checkpoint read full-context: its gists and adapter act on
# gist rows only). Their untrained starts are read on the judged lists only: --no-untrained-control
# skips compressing every article a second time for them. Needs the AP89 build
# (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
G=.venv/bin/gistrank
SET=data/ap89-bm25-20
R=runs/ap89-gists-k16-k32
O=$R/eval-bm25
[ -d $R/k32/checkpoint ] || reports/quality/ap89-judged-20-dev-24-gists-k16-k32/run.sh
scripts/ap89_import.sh bm25:20 $SET
C=$R/k16/checkpoint
prefix() { echo "$C?compressor=prefix&keep_item_prefix=0&num_gist=$1"; }
$G eval --data $SET --split dev --max-queries 24 --teacher $C --student $C --student $R/k32/checkpoint \
  --student "$(prefix 16)" --student "$(prefix 32)" --student "$(prefix 64)" \
  --no-untrained-control --out $O --run-dir $O/runs
for F in report.md results.json ndcg_at_10_vs_k.png quality_vs_bytes.png; do
  if [ -f $O/$F ]; then cp $O/$F "$HERE/"; fi
done
