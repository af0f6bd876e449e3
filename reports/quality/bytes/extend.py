"""What `selection.py` and `learned.py` share: one list kind of `evaluate.py`'s run read back (its
whole-article and BM25 scores reused), more systems' scores added to it, written as a copy."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from reranker.data.relevance_data import RelevanceSet


def open_run(description: str, adds: str) -> tuple[argparse.Namespace, dict[str, Any], RelevanceSet]:
    """The command line (run, --set, --data, --out), the run and the set's dev split."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("run", type=Path, help="evaluate.py's --out")
    parser.add_argument("--set", required=True, help=f"the list kind to add {adds} to")
    parser.add_argument("--data", required=True, help="that set's relevance folder")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    return args, json.loads(args.run.read_text()), RelevanceSet.load_jsonl(args.data).split("dev")


def save_run(args: argparse.Namespace, run: dict[str, Any]) -> None:
    """The run with only the list kind that got the new scores."""
    run["sets"] = {args.set: run["sets"][args.set]}
    args.out.write_text(json.dumps(run) + "\n")
