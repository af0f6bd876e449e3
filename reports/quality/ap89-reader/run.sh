#!/usr/bin/env bash
# A reader trained for the default store (prefix caching of each article's first 64 tokens, SmolLM2-135M
# read by query likelihood): the reader adapter (rank 8, query rows only) trained list-wise on the labels of
# AP89's train topics (1–50: each topic's 20 judged articles + BM25's top 20, unjudged = 0), the step chosen
# on the last 5 train topics (dev untouched), 20 minutes on 2 CPU cores after the stored units are computed.
# Then read on the dev topics (51–100): BM25's top 20 and 20 judged articles, beside BM25 and the default on
# the SAME stored units (evaluate.py). Needs the AP89 build (../shared/data/trec-ap89/README.md) in
# data/trec-ap89.
set -euo pipefail
cd "$(dirname "$0")/../../.."
G=.venv/bin/gistrank
R=runs/ap89-reader
Q=reports/quality
scripts/ap89_import.sh judged:20+bm25:20 data/ap89-judged-20-bm25-20
scripts/ap89_import.sh bm25:20 data/ap89-bm25-20
scripts/ap89_import.sh judged:20 data/ap89-judged-20
[ -d $R/labels/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 --objective labels \
  --steps 100000 --minutes 20 --device cpu --cache-dir $R/units --out $R/labels --config $Q/ap89-reader/train.json
# the whole-article zero-shot reader's per-topic nDCG@10 comes from earlier evaluations of the same lists
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-bm25-20 --reader $R/labels/checkpoint \
  --whole-article $Q/ap89-judged-20-dev-47-reader-cuts/bm25-lists/results.json --out $Q/ap89-reader/bm25-20.json
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-judged-20 --reader $R/labels/checkpoint \
  --whole-article $Q/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/results.json --out $Q/ap89-reader/judged-20.json
# the same recipe, seed 1, 12 minutes (the units read back from --cache-dir), read on BM25's top 20
[ -d $R/labels-seed1/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 --objective labels \
  --steps 100000 --minutes 12 --device cpu --cache-dir $R/units --out $R/labels-seed1 --seed 1 \
  --config $Q/ap89-reader/train.json
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-bm25-20 --reader $R/labels-seed1/checkpoint \
  --out $Q/ap89-reader/bm25-20-seed1.json
# label-free: sentence pseudo-queries past the stored prefix, no judgment in the steps (15 min cap)
[ -d $R/pseudo-sentence/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 --objective labels \
  --no-judged --pseudo-lists 400 --pseudo-query sentence --steps 100000 --minutes 15 --device cpu \
  --cache-dir $R/units --out $R/pseudo-sentence --config $Q/ap89-reader/train.json
for lists in bm25-20 judged-20; do
  .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --reader $R/pseudo-sentence/checkpoint \
    --out $Q/ap89-reader/$lists-pseudo-sentence.json
done
# combined: the labelled lists and the same pseudo-lists in one run
[ -d $R/labels-pseudo-sentence/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 \
  --objective labels --pseudo-lists 400 --pseudo-query sentence --steps 100000 --minutes 15 --device cpu \
  --cache-dir $R/units --out $R/labels-pseudo-sentence --config $Q/ap89-reader/train.json
for lists in bm25-20 judged-20; do
  .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --reader $R/labels-pseudo-sentence/checkpoint \
    --out $Q/ap89-reader/$lists-labels-pseudo-sentence.json
done
# distillation: KL to the whole-article zero-shot reader's scores (its targets computed once per pair and
# kept in --cache-dir: ~60 CPU-minutes of 1,024-token forwards, read back by any later run)
[ -d $R/distill/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 --objective distill \
  --steps 100000 --minutes 15 --device cpu --cache-dir $R/units --out $R/distill --config $Q/ap89-reader/train.json
for lists in bm25-20 judged-20; do
  .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --reader $R/distill/checkpoint \
    --out $Q/ap89-reader/$lists-distill.json
done
# the current default store (each article's first 128 tokens, K/V at 4 bits): the distillation recipe over
# it, its targets read back from --cache-dir (they depend on the reader, not on the store)
D=gistrank-base-ql-prefix128-int4
[ -d $R/distill-prefix128-int4/checkpoint ] || $G train-reader --model $D --data data/ap89-judged-20-bm25-20 \
  --objective distill --steps 100000 --minutes 15 --device cpu --cache-dir $R/units --out $R/distill-prefix128-int4 \
  --config $Q/ap89-reader/train.json
# and the labels recipe over it (20 min cap), its units read back from --cache-dir
[ -d $R/labels-prefix128-int4/checkpoint ] || $G train-reader --model $D --data data/ap89-judged-20-bm25-20 \
  --objective labels --steps 100000 --minutes 20 --device cpu --cache-dir $R/units --out $R/labels-prefix128-int4 \
  --config $Q/ap89-reader/train.json
for recipe in distill labels; do
  for lists in bm25-20 judged-20; do
    .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --store $D \
      --reader $R/$recipe-prefix128-int4/checkpoint --out $Q/ap89-reader/$lists-$recipe-prefix128-int4.json
  done
done
# labels + distillation: the same lists, both losses; the targets read back from --cache-dir
[ -d $R/labels-distill/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/ap89-judged-20-bm25-20 --objective both \
  --steps 100000 --minutes 15 --device cpu --cache-dir $R/units --out $R/labels-distill --config $Q/ap89-reader/train.json
for lists in bm25-20 judged-20; do
  .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --reader $R/labels-distill/checkpoint \
    --out $Q/ap89-reader/$lists-labels-distill.json
done
# the synthetic catalog: train-reader's `--data synthetic` set saved to a folder, labels only, read on its dev split
[ -d data/synthetic-200 ] || .venv/bin/python -c "from reranker.data.data_synth import generate; \
generate(0, 200, queries_per_product=4, length_tokens=(100, 1024)).save_jsonl('data/synthetic-200')"
[ -d runs/synthetic-reader/checkpoint ] || $G train-reader --model gistrank-base-ql-prefix64 --data data/synthetic-200 --objective labels \
  --steps 100000 --minutes 8 --device cpu --out runs/synthetic-reader --config $Q/ap89-reader/train.json
.venv/bin/python $Q/ap89-reader/evaluate.py --data data/synthetic-200 --reader runs/synthetic-reader/checkpoint \
  --out $Q/ap89-reader/synthetic-dev.json
# the recipe's ceiling: the labels recipe over each article's whole K/V (its first 1,024 tokens, the store a
# prefix as long as the reader reads, kept at bf16), the same lists and steps; read on dev beside the
# zero-shot reader over the same whole-article units (48 GB of units in --cache-dir, ~45 min to compute;
# then ~43 CPU-seconds a step: hours for the 20 minutes' worth of steps the other recipes ran)
W='gistrank-base-ql-prefix128-int4?num_gist=1024&kv_storage=bfloat16'
[ -d $R/labels-whole/checkpoint ] || $G train-reader --model "$W" --data data/ap89-judged-20-bm25-20 \
  --objective labels --steps 100000 --minutes 20 --device cpu --cache-dir $R/units --out $R/labels-whole \
  --config $Q/ap89-reader/train.json
for lists in bm25-20 judged-20; do
  .venv/bin/python $Q/ap89-reader/evaluate.py --data data/ap89-$lists --store "$W" \
    --reader $R/labels-whole/checkpoint --out $Q/ap89-reader/$lists-labels-whole.json
done
