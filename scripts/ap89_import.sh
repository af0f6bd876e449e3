#!/usr/bin/env bash
# One AP89 relevance set, imported from the build in data/trec-ap89 (../shared/data/trec-ap89/README.md)
# unless its folder already exists: `scripts/ap89_import.sh CANDIDATES OUT`, CANDIDATES as
# `gistrank data import-trec --candidates` takes it (judged, judged:20, bm25:20); title queries. OUT is
# relative to the repository root. The article text stays out of git (data/ is ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
GISTRANK=${GISTRANK:-.venv/bin/gistrank}  # make setup builds it
SRC=data/trec-ap89
[ -d "$2" ] || "$GISTRANK" data import-trec --docs "$SRC/docs.jsonl" --topics "$SRC/topics.jsonl" \
  --qrels "$SRC/qrels.txt" --query-field title --candidates "$1" --out "$2"
