#!/usr/bin/env bash
# Plain gists at 16 and 32 positions over the shipped LoRA teacher as the frozen reader, each trained
# 10 minutes on 2 CPU cores with gists.sh's recipe (configs/frozen_gists/ap89.json: list-wise KL only,
# the teacher scores by its head; lr 1e-3; the first 12 train topics' judged lists, their articles'
# teacher K/V cached in runs/ap89/item-kv); read on the 24 AP89 dev topics x 20 judged articles beside
# gists.sh's 64 gists and prefix caching at 16, 32 and 64 on the teacher's body. The reference is
# gists.sh's checkpoint read full-context (gists and adapter act on gist rows only: it reads as the
# teacher), so its whole-article read, prefix 64 and the 64 gists are read back from gists.sh's run files
# (which this runs first when missing). Untrained starts are not read (--no-untrained-control: the 64
# gists' start read at the no-item floor). fp32, the teacher's dtype (~70 min). Writes gists-k16-k32/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
G=.venv/bin/gistrank
SET=data/ap89-judged-20
R=runs/ap89-teacher-gists
O=$R/eval-k16-k32
[ -d $R/eval/runs ] || "$HERE/gists.sh"
for K in 16 32; do
  [ -d $R/k$K/checkpoint ] || $G train-gists --reader gistrank-teacher-lora --data $SET --max-queries 12 \
    --num-gist $K --max-item-tokens 1024 --steps 10000 --minutes 10 --config configs/frozen_gists/ap89.json \
    --cache-dir runs/ap89/item-kv --memory-items 48 --device cpu --out $R/k$K
done
C=$R/k64/checkpoint
prefix() { echo "$C?compressor=prefix&keep_item_prefix=0&num_gist=$1"; }
[ -d $O/runs ] || { mkdir -p $O && cp -r $R/eval/runs $O/runs; }
$G eval --data $SET --split dev --max-queries 24 --teacher $C --student $R/k16/checkpoint \
  --student $R/k32/checkpoint --student $C --student "$(prefix 16)" --student "$(prefix 32)" \
  --student "$(prefix 64)" --no-untrained-control --out $O --run-dir $O/runs
mkdir -p "$HERE/gists-k16-k32"
for F in report.md results.json ndcg_at_10_vs_k.png quality_vs_bytes.png; do
  if [ -f $O/$F ]; then cp $O/$F "$HERE/gists-k16-k32/"; fi
done
for K in 16 32; do cp $R/k$K/curve.jsonl "$HERE/gists-k16-k32/curve-k$K.jsonl"; done
