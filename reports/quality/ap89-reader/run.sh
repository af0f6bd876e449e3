#!/usr/bin/env bash
# A reader trained for the default store (prefix caching of each article's first 64 tokens, SmolLM2-135M
# read by query likelihood): the reader adapter (rank 8, query rows only) trained on AP89's train topics
# (1–50: each topic's 20 judged articles + BM25's top 20, labels list-wise, plus 300 pseudo-query lists —
# a train article's headline asked of it and of its 7 BM25 neighbours), the step chosen on the last 5 train
# topics (dev untouched), 30 minutes on 2 CPU cores. Then read on the dev topics (51–100): BM25's top 20 of
# every dev topic and 20 judged articles of the 47 judged ones, beside BM25 and the default on the SAME
# stored units (evaluate.py). Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
R=runs/ap89-reader
scripts/ap89_import.sh judged:20+bm25:20 data/ap89-judged-20-bm25-20
scripts/ap89_import.sh bm25:20 data/ap89-bm25-20
scripts/ap89_import.sh judged:20 data/ap89-judged-20
[ -d $R/labels-pseudo/checkpoint ] || $G train-reader --data data/ap89-judged-20-bm25-20 --objective labels \
  --pseudo-lists 300 --steps 100000 --minutes 30 --device cpu --out $R/labels-pseudo \
  --config reports/quality/ap89-reader/train.json
# the whole-article zero-shot reader's per-topic nDCG@10 comes from earlier evaluations of the same lists
Q=reports/quality
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-bm25-20 --reader $R/labels-pseudo/checkpoint \
  --whole-article $Q/ap89-judged-20-dev-47-reader-cuts/bm25-lists/results.json --out $Q/ap89-reader/bm25-20.json
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-judged-20 --reader $R/labels-pseudo/checkpoint \
  --whole-article $Q/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/results.json --out $Q/ap89-reader/judged-20.json
