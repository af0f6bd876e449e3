#!/usr/bin/env bash
# Real long documents: AP newswire 1989 with TREC topics 51-100 (dev), items read up to 1024 tokens.
# Full-context references (the untouched base read zero-shot by query likelihood, the shipped LoRA
# teacher, and with runs/ap89/teacher-ql-lora a LoRA teacher trained on topics 1-50), BM25 over the
# whole collection, each interpolated with BM25, and training-free K/V selection and prefix caching at
# k in {8, 16, 32, 64, 128} (one compression pass serves every k), the hybrid budget (32 raw
# prefix tokens + 8 selected), and prefix caching on the shipped teacher's body at k in {16 … 128}.
# Needs the AP89 build (shared/data/trec-ap89/README.md) in data/trec-ap89; its text is never committed. CPU sized: the first MAX_QUERIES dev topics of each
# candidate set in SETS (bm25: a topic's BM25 top 20 over the whole collection; judged-20: 20 of its
# judged articles drawn with the pool's share of relevant ones). Every system's scores are cached in
# the run folder, so a rerun with more topics or another system scores only what is new.
set -euo pipefail
cd "$(dirname "$0")/.."
export GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it (scripts/ap89_import.sh uses it too)
MAX_QUERIES=${MAX_QUERIES:-12}
OUT=runs/ap89
# the base LM, no training: score = log p(query | article) under its own head
BASE_QL="smollm2-135m-instruct?score_rule=query_likelihood&query_template=%0AQuery%3A+%7Bquery%7D&max_item_tokens=1024"
# the shipped LoRA teacher (trained on the synthetic catalog); SHIPPED_TEACHER= leaves it out
SHIPPED_TEACHER=${SHIPPED_TEACHER-gistrank-teacher-lora}
FULL=()
[ -n "$SHIPPED_TEACHER" ] && FULL+=(--shadow-model "$SHIPPED_TEACHER?max_item_tokens=1024")
# the LoRA teacher trained on the AP89 training topics (configs/ap89_teacher_lora.json, README), when
# its run has finished; AP89_TEACHER= leaves it out
AP89_TEACHER=${AP89_TEACHER-$OUT/teacher-ql-lora/checkpoint}
[ -n "$AP89_TEACHER" ] && [ -d "$AP89_TEACHER" ] && FULL+=(--shadow-model "$AP89_TEACHER?max_item_tokens=1024")

scripts/ap89_import.sh judged data/ap89-judged  # every judged article: the training topics' text (experiments/ap89.md)
scripts/ap89_import.sh bm25:20 data/ap89-bm25
scripts/ap89_import.sh judged:20 data/ap89-judged-20

STUDENTS=(--student "$BASE_QL&compressor=select&keep_item_prefix=32&num_gist=8")
for k in 8 16 32 64 128; do STUDENTS+=(--student "$BASE_QL&compressor=select&num_gist=$k" --prefix-k "$k"); done
# prefix caching on the shipped teacher's body (a head-rule cross-encoder trained on the synthetic
# catalog): whether a better full-context reader keeps more when cut to its first k tokens; one prefix
# pass serves every k, cheap next to a full-context read. SHIPPED_BODY= leaves it out
SHIPPED_BODY=${SHIPPED_BODY-gistrank-teacher-lora}
if [ -n "$SHIPPED_BODY" ]; then
  for k in 16 32 64 128; do
    STUDENTS+=(--student "$SHIPPED_BODY?compressor=prefix&num_gist=$k&max_item_tokens=1024")
  done
fi
for set in ${SETS:-bm25 judged-20}; do
  "$GISTRANK" eval --data "data/ap89-$set" --split dev --max-queries "$MAX_QUERIES" \
    --teacher "$BASE_QL" "${FULL[@]}" "${STUDENTS[@]}" --out "$OUT/$set-dev" --run-dir "$OUT/$set-dev/runs"
done
