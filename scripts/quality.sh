#!/usr/bin/env bash
# The quality run behind reports/quality.md: teacher, hybrid and pure gist students, evaluation, and the
# shipped gistrank-ql-k4 (4 gists, autoencoding stage, read by query likelihood) with its controls.
# CPU sized (SmolLM2-135M, fp32, items capped at 256 tokens, 60 product families); on CUDA the same
# commands run unchanged and much faster. Resume an interrupted stage with `gistrank train --out DIR --resume`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=runs/quality  # configs/student.json names the teacher under it
DATA=(--products 60 --max-item-tokens 256 --seed 0)
CFG=configs
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it

"$GISTRANK" train --out "$RUNS/teacher" --role teacher "${DATA[@]}" --config "$CFG/teacher.json"
"$GISTRANK" train --out "$RUNS/hybrid-t32-k8" --num-gist 8 --keep-item-prefix 32 "${DATA[@]}" --config "$CFG/student.json"
"$GISTRANK" train --out "$RUNS/gist-k8" --num-gist 8 "${DATA[@]}" --config "$CFG/student.json"
# the demo's shadow (reranker/core/checkpoints/teacher-lora): a LoRA teacher, 9.8 MB instead of 517 MB
"$GISTRANK" train --out "$RUNS/teacher-lora" --role teacher "${DATA[@]}" --config "$CFG/teacher_lora.json"
"$GISTRANK" eval --teacher "$RUNS/teacher/checkpoint" --shadow-model "$RUNS/teacher-lora/checkpoint" \
  "${DATA[@]}" --out "$RUNS/eval-teacher-lora"
"$GISTRANK" eval --teacher "$RUNS/teacher/checkpoint" \
  --student "$RUNS/hybrid-t32-k8/checkpoint" --student "$RUNS/gist-k8/checkpoint" \
  "${DATA[@]}" --out "$RUNS/eval"
# gistrank-ql-k4 (reranker/core/checkpoints/ql-k4): autoencoding stage only, read by query likelihood
# (bf16 where the CPU or GPU has it), and its controls read by the untouched base
"$GISTRANK" train --out "$RUNS/gist-k4-ae-ql" --num-gist 4 "${DATA[@]}" --config "$CFG/student_ae_stage.json" \
  --steps 80 --score-rule query_likelihood
"$GISTRANK" eval --teacher "$RUNS/teacher-lora/checkpoint" --student "$RUNS/gist-k4-ae-ql/checkpoint" \
  --prefix-k 4 --prefix-k 8 --control-base "${DATA[@]}" --out "$RUNS/eval-ql-k4-controls"
