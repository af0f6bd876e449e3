#!/usr/bin/env bash
# How far is the goal (recall@10 >= 0.90 against the full-context reader at <= 64 stored positions)
# from what the reader itself keeps? On all 47 AP89 dev topics' judged lists: the reader (the untouched
# base by query likelihood, bf16) reading only the first 128 / 256 / 512 / 768 tokens of each article,
# which equals prefix caching at that many positions (the equivalence test; prefix caching at 128 is also
# read as stored K/V), and the same reader computing in float32 (ATEN_CPU_CAPABILITY=avx2 makes `auto`
# widen the compute dtype, the weights unchanged; its run adds the 128-token read in float32).
# The reader, BM25 and prefix 64 are carried from the seed-1 evaluation's run files, so that run comes
# first. Needs the AP89 build (../shared/data/trec-ap89/README.md) in data/trec-ap89; ~65 min on 2 cores
# after the seed-1 run, as measured (17, 3, 33 and 12 min for the four evaluations).
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
S1=runs/ap89-hybrid-q45-s1
HERE=reports/quality/ap89-judged-20-dev-47-reader-cuts
[ -d $S1/eval-dev47/runs ] || reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/run.sh
C=$S1/t48k16/checkpoint  # read full-context it is the untouched base: its adapter acts on gist rows only
for R in runs/ap89-reader-cuts runs/ap89-reader-fp32; do
  [ -d $R/eval-dev47/runs ] || { mkdir -p $R/eval-dev47 && cp -r $S1/eval-dev47/runs $R/eval-dev47/; }
done
$G eval --data $SET --split dev --max-queries 47 --teacher $C \
  --shadow-model "$C?max_item_tokens=128" --shadow-model "$C?max_item_tokens=256" \
  --shadow-model "$C?max_item_tokens=512" --shadow-model "$C?max_item_tokens=768" \
  --out runs/ap89-reader-cuts/eval-dev47 --run-dir runs/ap89-reader-cuts/eval-dev47/runs
$G eval --data $SET --split dev --max-queries 47 --teacher $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=128" \
  --out runs/ap89-prefix128/eval-dev47 --run-dir runs/ap89-reader-cuts/eval-dev47/runs
ATEN_CPU_CAPABILITY=avx2 $G eval --data $SET --split dev --max-queries 47 --teacher $C \
  --shadow-model "$C?max_item_tokens=128" \
  --out runs/ap89-reader-fp32/eval-dev47 --run-dir runs/ap89-reader-fp32/eval-dev47/runs
# BM25's top 20 (the lists a cascade reranks) of the same 47 dev topics: prefix 64 and 128 against the reader
scripts/ap89_import.sh bm25:20 data/ap89-bm25-20
$G eval --data data/ap89-bm25-20 --split dev --max-queries 47 --teacher $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=128" \
  --out runs/ap89-bm25-prefix128/eval-dev47 --run-dir runs/ap89-bm25-prefix128/eval-dev47/runs
mkdir -p $HERE/prefix128 $HERE/fp32 $HERE/bm25-lists
cp runs/ap89-reader-cuts/eval-dev47/{report.md,results.json} $HERE/
cp runs/ap89-prefix128/eval-dev47/{report.md,results.json} $HERE/prefix128/
cp runs/ap89-reader-fp32/eval-dev47/{report.md,results.json} $HERE/fp32/
cp runs/ap89-bm25-prefix128/eval-dev47/{report.md,results.json} $HERE/bm25-lists/
.venv/bin/python $HERE/distance.py > $HERE/distance.md
