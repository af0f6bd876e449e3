#!/usr/bin/env bash
# Quality per byte: the default reader over prefix caching of 16–512 positions stored at float32,
# bfloat16, int8, int4 and int2, against the whole-article reader, on the AP89 dev lists (judged:20 and
# BM25's top 20, the 47 dev topics with judgments) and on the synthetic catalog's first 16 dev queries.
# Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89. ~55 min on 2 cores for
# AP89 (one whole-item compression per article, ~1.4 s each in float32), ~15 min for the synthetic set (24 candidates of 100–1,024 tokens a query).
set -euo pipefail
cd "$(dirname "$0")/../../.."
P=.venv/bin/python
HERE=reports/quality/bytes
[ -d data/ap89-judged-20 ] || scripts/ap89_import.sh judged:20 data/ap89-judged-20
[ -d data/ap89-bm25-20 ] || scripts/ap89_import.sh bm25:20 data/ap89-bm25-20
[ -d data/synthetic-200 ] || $P -c "from reranker.data.data_synth import generate; \
generate(0, 200, queries_per_product=4, length_tokens=(100, 1024)).save_jsonl('data/synthetic-200')"
[ -f runs/bytes/ap89.json ] || $P $HERE/evaluate.py --data judged-20=data/ap89-judged-20 \
  --data bm25-20=data/ap89-bm25-20 --out runs/bytes/ap89.json
[ -f runs/bytes/synthetic.json ] || $P $HERE/evaluate.py --data synthetic=data/synthetic-200 \
  --max-queries 16 --out runs/bytes/synthetic.json
$P $HERE/table.py runs/bytes/ap89.json --plot $HERE/ap89.png > $HERE/ap89.md
$P $HERE/table.py runs/bytes/synthetic.json --plot $HERE/synthetic.png > $HERE/synthetic.md
# selection (SnapKV-style, training-free) at the same precisions, reusing the whole-article and BM25 scores
for KIND in judged-20 bm25-20; do
  [ -f runs/bytes/ap89-select-$KIND.json ] || $P $HERE/selection.py runs/bytes/ap89.json --set $KIND \
    --data data/ap89-$KIND --out runs/bytes/ap89-select-$KIND.json
  $P $HERE/table.py runs/bytes/ap89-select-$KIND.json --plot $HERE/ap89-select-$KIND.png > $HERE/ap89-select-$KIND.md
done
# the shipped learned-gist checkpoints at their own precision and at int4, on the judged lists
[ -f runs/bytes/ap89-learned-judged-20.json ] || $P $HERE/learned.py runs/bytes/ap89.json --set judged-20 \
  --data data/ap89-judged-20 --out runs/bytes/ap89-learned-judged-20.json
$P $HERE/table.py runs/bytes/ap89-learned-judged-20.json --plot $HERE/ap89-learned-judged-20.png > $HERE/ap89-learned-judged-20.md
