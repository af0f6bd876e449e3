#!/usr/bin/env bash
# The shipped LoRA teacher as the frozen reader: 64 plain gists trained over it for 10 minutes on 2 CPU
# cores (configs/frozen_gists/ap89.json: list-wise KL only, the teacher scores by its head; lr 1e-3) on
# the first 12 train topics' judged lists (their articles' teacher K/V cached once in runs/ap89/item-kv,
# under the teacher's fingerprint); read on the 24 AP89 dev topics x 20 judged articles of eval.sh beside
# their untrained start (eval reads it for every gist student) and
# prefix 64 on the same body, the reference the checkpoint's full-context read (the gists and their
# adapter act on gist rows only: it reads as the teacher). fp32, the teacher's dtype (~85 min). Writes
# gists/ beside this script.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-teacher-gists
scripts/ap89_import.sh judged:20 $SET
[ -d $R/k64/checkpoint ] || $G train-gists --reader gistrank-teacher-lora --data $SET --max-queries 12 \
  --num-gist 64 --max-item-tokens 1024 --steps 10000 --minutes 10 --config configs/frozen_gists/ap89.json \
  --cache-dir runs/ap89/item-kv --memory-items 48 --device cpu --out $R/k64
C=$R/k64/checkpoint
$G eval --data $SET --split dev --max-queries 24 --teacher $C --student $C \
  --student "$C?compressor=prefix&keep_item_prefix=0&num_gist=64" --out $R/eval --run-dir $R/eval/runs
mkdir -p "$HERE/gists"
for F in report.md results.json ndcg_at_10_vs_k.png quality_vs_bytes.png; do
  if [ -f $R/eval/$F ]; then cp $R/eval/$F "$HERE/gists/"; fi
done
cp $R/k64/curve.jsonl "$HERE/gists/curve.jsonl"
