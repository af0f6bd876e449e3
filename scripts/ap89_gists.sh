#!/usr/bin/env bash
# Learned gists on real long documents (issue 19 §4): the autoencoding stage needs only item text, so
# it runs label-free on the AP89 training topics' judged articles, and its gists are read by query
# likelihood — no ranking stage (a ranking stage on top erased the gists on the synthetic catalog,
# reports/experiments/autoencoding.md). One student per k in KS, each evaluated beside the systems
# scripts/ap89.sh already scored (reference, AP89 teacher, BM25, selection and prefix caching) on the
# same slice: the first MAX_QUERIES dev topics of the BM25 top-20 lists, items read up to 1024 tokens.
# Needs scripts/ap89.sh's sets (data/ap89-judged, data/ap89-bm25) and, to stay CPU-sized, its score
# cache in runs/ap89/bm25-dev/runs (from `MAX_QUERIES=24 SHIPPED_TEACHER= scripts/ap89.sh`): every
# system already there is read back, only the new students and their controls are scored.
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
OUT=runs/ap89
KS=${KS:-8 16 32}
# 4 articles per step at up to 1024 tokens (+ a no-grad control pass for autoencode_gap): 93 s a step
# and ~10 GB on 2 CPU cores shared with another job, so STEPS=8 is what fits ~12 min per k there — far
# short of the 40-80 steps the synthetic stage needed before its gists carried their item; raise it
# where there is more compute (a stopped or finished run is extended, not restarted)
STEPS=${STEPS:-8}
# the slice of EVAL (eval-merge refuses two slices)
MAX_QUERIES=${MAX_QUERIES:-24}
EVAL=${EVAL:-$OUT/bm25-dev}  # ap89.sh's evaluation (read, not written)
for set_dir in data/ap89-judged data/ap89-bm25; do
  [ -d "$set_dir" ] || { echo "no $set_dir: run scripts/ap89.sh first" >&2; exit 1; }
done

# Training: `train` draws only the train split (topics 1-50; 45 have judgments) and regenerates items
# from the candidates of those topics — 4,255 judged articles, no label used — so no dev topic's
# judgment reaches the student (57 of the 472 dev-slice articles are also in the training pools: seen
# as text, never as labels). autoencode_tokens 128 (configs/ap89_gists_ae.json): a headline and first
# paragraph of a news article, not just its dateline; items up to 1024 tokens as they are read.
for k in $KS; do
  run=$OUT/gists-ae-k$k
  if [ -f "$run/trainer_state.json" ]; then  # finished or stopped: extend to STEPS, or leave it
    at=$(sed -n 's/^{"step": \([0-9]*\).*/\1/p' "$run/trainer_state.json")
    if [ "$at" -lt "$STEPS" ]; then
      "$GISTRANK" train --resume --out "$run" --data data/ap89-judged --steps "$STEPS"
    fi
  else
    "$GISTRANK" train --role student --model smollm2-135m-instruct --score-rule query_likelihood \
      --num-gist "$k" --max-item-tokens 1024 --config configs/ap89_gists_ae.json --steps "$STEPS" \
      --data data/ap89-judged --out "$run"
  fi
done

# Evaluation, in its own folder, so that ap89.sh's table (EVAL) stays as it is: the gist students are scored in EVAL-gists, seeded
# with a copy of EVAL's run folder (reference, the AP89 teacher and BM25 read back from the cache, never
# re-scored), and `eval-merge` joins the two into EVAL-merged: one table, the shared systems checked
# identical. Same reference, full-context models and slice as ap89.sh (the 24-topic run left the
# shipped teacher out, hence SHIPPED_TEACHER=). The
# gist students read with the template they were trained with (the autoencoding prompt, then the
# query) at 1024 tokens; each also gets its own controls: untrained gists and prefix caching at every
# k in KS, both read by its own body.
BASE_QL="smollm2-135m-instruct?score_rule=query_likelihood&query_template=%0AQuery%3A+%7Bquery%7D&max_item_tokens=1024"
SHIPPED_TEACHER=${SHIPPED_TEACHER-}
FULL=()
[ -n "$SHIPPED_TEACHER" ] && FULL+=(--shadow-model "$SHIPPED_TEACHER?max_item_tokens=1024")
AP89_TEACHER=${AP89_TEACHER-$OUT/teacher-ql-lora/checkpoint}
[ -n "$AP89_TEACHER" ] && [ -d "$AP89_TEACHER" ] && FULL+=(--shadow-model "$AP89_TEACHER?max_item_tokens=1024")
[ -f "$EVAL/results.json" ] || { echo "no $EVAL/results.json: run scripts/ap89.sh first" >&2; exit 1; }
[ -d "$EVAL-gists/runs" ] || { mkdir -p "$EVAL-gists" && cp -r "$EVAL/runs" "$EVAL-gists/runs"; }
STUDENTS=()
for k in $KS; do STUDENTS+=(--student "$OUT/gists-ae-k$k/checkpoint?max_item_tokens=1024" --prefix-k "$k"); done
"$GISTRANK" eval --data data/ap89-bm25 --split dev --max-queries "$MAX_QUERIES" \
  --teacher "$BASE_QL" "${FULL[@]}" "${STUDENTS[@]}" --out "$EVAL-gists" --run-dir "$EVAL-gists/runs"
"$GISTRANK" eval-merge "$EVAL" "$EVAL-gists" --out "$EVAL-merged"
