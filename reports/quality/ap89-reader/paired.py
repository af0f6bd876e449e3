"""Paired differences between systems of two `evaluate.py` outputs on the same dev lists, e.g. the reader
trained over whole articles against the default served over its own store:

    .venv/bin/python reports/quality/ap89-reader/paired.py \
        reports/quality/ap89-reader/bm25-20-labels-whole.json:reader \
        reports/quality/ap89-reader/bm25-20-labels-prefix128-int4.json:default

prints each system's nDCG@10 and the first minus each other, over the topics both hold (95% bootstrap
interval, better / worse topics).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reranker.evaluation.results import Difference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("systems", nargs="+", help="FILE:SYSTEM, the first compared with each other")
    args = parser.parse_args()
    per_query = {}
    for spec in args.systems:
        path, _, system = spec.rpartition(":")
        per_query[spec] = json.loads(Path(path).read_text())["ndcg@10"][system]
    first = next(iter(per_query))
    # the first file's topic order: the bootstrap resamples as evaluate.py's own table does
    queries = [q for q in per_query[first] if all(q in v for v in per_query.values())]
    for spec, values in per_query.items():
        mean = sum(values[q] for q in queries) / len(queries)
        diff = Difference.of([per_query[first][q] - values[q] for q in queries])
        versus = "" if spec == first else f"; first − this: {diff}"
        print(f"{spec}: {mean:.3f} over {len(queries)} topics{versus}")


if __name__ == "__main__":
    main()
