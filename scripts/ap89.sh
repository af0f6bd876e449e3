#!/usr/bin/env bash
# Real long documents: AP newswire 1989 with TREC topics 51-100 (dev), items read up to 1024 tokens.
# Full-context references (the untouched base read zero-shot by query likelihood, the shipped LoRA
# teacher), BM25 over the whole collection, and training-free K/V selection at fixed budgets, with
# prefix caching at the same budgets. Needs the AP89 build (shared/data/trec-ap89/README.md) in
# data/trec-ap89; its text is never committed. CPU sized: the first MAX_QUERIES dev topics of the
# BM25 top-20 lists; every system's run file is kept in runs/ap89/*/runs.
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
SRC=data/trec-ap89
MAX_QUERIES=${MAX_QUERIES:-12}
OUT=runs/ap89
# the base LM, no training: score = log p(query | article) under its own head
BASE_QL="smollm2-135m-instruct?score_rule=query_likelihood&query_template=%0AQuery%3A+%7Bquery%7D&max_item_tokens=1024"
TEACHER="gistrank-teacher-lora?max_item_tokens=1024"

for candidates in judged bm25:20; do
  set_dir="data/ap89-${candidates%%:*}"
  [ -d "$set_dir" ] || "$GISTRANK" data import-trec --docs "$SRC/docs.jsonl" --topics "$SRC/topics.jsonl" \
    --qrels "$SRC/qrels.txt" --query-field title --candidates "$candidates" --out "$set_dir"
done

"$GISTRANK" eval --data data/ap89-bm25 --split dev --max-queries "$MAX_QUERIES" \
  --teacher "$BASE_QL" --full-model "$TEACHER" \
  --student "$BASE_QL&compressor=select&num_gist=16" --student "$BASE_QL&compressor=select&num_gist=64" \
  --prefix-k 16 --prefix-k 64 --out "$OUT/bm25-dev" --run-dir "$OUT/bm25-dev/runs"
