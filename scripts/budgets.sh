#!/usr/bin/env bash
# The synthetic catalog's budget table: the shipped checkpoints against the demo's shadow
# (gistrank-teacher-lora, full context) on the test split, and that teacher's own body read with
# training-free K/V selection or prefix caching at k in {8, 16, 32, 64, 128} and as a hybrid (t = 32 raw
# prefix tokens + 8 selected, the trained hybrid's budget). No training; items capped at 256 tokens.
# Then the default model (a preset: the untouched base read by likelihood, prefix caching at 64) in an
# evaluation of its own, seeded with the first one's scores (teacher, BM25 read back, never re-scored),
# and `eval-merge` joins the two into one table (the shared systems checked identical).
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
DATA=(--products 60 --max-item-tokens 256 --seed 0)
OUT=runs/budgets
TEACHER=gistrank-teacher-lora
STUDENTS=(--student gistrank-hybrid-t32-k8 --student gistrank-ql-k4
  --student "$TEACHER?compressor=select&keep_item_prefix=32&num_gist=8")
for k in 8 16 32 64 128; do STUDENTS+=(--student "$TEACHER?compressor=select&num_gist=$k" --prefix-k "$k"); done
"$GISTRANK" eval --teacher "$TEACHER" "${STUDENTS[@]}" "${DATA[@]}" --out "$OUT/synthetic-test" \
  --run-dir "$OUT/synthetic-test/runs"
DEFAULT=$OUT/default-test
[ -d "$DEFAULT/runs" ] || { mkdir -p "$DEFAULT" && cp -r "$OUT/synthetic-test/runs" "$DEFAULT/runs"; }
"$GISTRANK" eval --teacher "$TEACHER" --student gistrank-base-ql-prefix64 "${DATA[@]}" --out "$DEFAULT" \
  --run-dir "$DEFAULT/runs"
"$GISTRANK" eval-merge "$OUT/synthetic-test" "$DEFAULT" --out "$OUT/synthetic-merged"
