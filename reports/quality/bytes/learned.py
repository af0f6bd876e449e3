"""Learned gists at equal bytes: the shipped gist checkpoints (`gistrank-ql-k4`: 4 gists read by query
likelihood; `gistrank-hybrid-t32-k8`: 32 raw tokens + 8 gists, head rule — both trained on the synthetic
catalog, neither on AP89) stored at their own precision and at int4, on one list kind of `evaluate.py`'s
run, whose whole-article and BM25 scores are reused. Each article is compressed once per checkpoint (its
LoRA body writes the gists, so nothing is shared with the prefix table), each unit encoded at every
storage and decoded as serving would read it. Adds each setting's scores to a copy of the run.

    .venv/bin/python reports/quality/bytes/learned.py runs/bytes/ap89.json --set judged-20 \\
        --data data/ap89-judged-20 --out runs/bytes/ap89-learned-judged-20.json
"""

from __future__ import annotations

import dataclasses
import time

from extend import open_run, save_run
from tqdm.auto import tqdm

from reranker import Reranker
from reranker.core.checkpoints import HYBRID_CHECKPOINT, QL_CHECKPOINT
from reranker.core.config import RerankerConfig
from reranker.core.kv_codec import payload_nbytes

STORAGES = {QL_CHECKPOINT: ("bfloat16", "int4"), HYBRID_CHECKPOINT: ("bfloat16", "int4")}


def main() -> None:
    args, run, dev = open_run(__doc__.splitlines()[0], "the checkpoints")
    lists = run["sets"][args.set]
    queries = {q.query_id: q for q in dev.queries}
    for alias, storages in STORAGES.items():
        body = Reranker.read(alias, device="cpu")
        # the same weights and trained gists, stored at each precision (a reader per fingerprint)
        positions = body.gist.num_gist + body.gist.keep_item_prefix
        readers = {
            f"{alias.removeprefix('gistrank-')} {positions} {s}": body.with_gist_config(
                RerankerConfig(**(body.gist.model_dump() | {"kv_storage": s})), keep_gists=True
            )
            for s in storages
        }
        dims = (body.num_layers, positions, body.num_kv_heads, body.head_dim)
        for name, reader in readers.items():
            run["kib"][name] = payload_nbytes(*dims, reader.gist.storage) / 1024
        seconds, items = 0.0, 0
        for query_id, item in tqdm(lists.items(), desc=f"{alias}, {args.set}", unit="list"):
            texts = [dev.items[i].text for i in item["ids"]]
            start_s = time.perf_counter()
            units = body.compress(texts)
            seconds, items = seconds + time.perf_counter() - start_s, items + len(texts)
            for name, reader in readers.items():
                stamped = [dataclasses.replace(u, fingerprint=reader.fingerprint) for u in units]
                scores = reader.score(queries[query_id].text, reader.as_stored(stamped))
                item["scores"][name] = scores.tolist()
        for name in readers:
            run["timing"][name] = {"compress_ms_per_item": 1e3 * seconds / items}
    save_run(args, run)


if __name__ == "__main__":
    main()
