"""Selection at equal bytes: the same reader over SnapKV-style selected positions (`compressor=select`,
training-free), stored at the precisions of the prefix table, on one list kind of `evaluate.py`'s run —
its whole-article and BM25 scores are reused, so only the selection pass runs (one eager forward per
article serves every budget and storage: `BudgetSweep`). Adds each setting's scores to a copy of the run.

    .venv/bin/python reports/quality/bytes/selection.py runs/bytes/ap89.json --set judged-20 \\
        --data data/ap89-judged-20 --out runs/bytes/ap89-select.json
"""

from __future__ import annotations

from extend import open_run, save_run
from tqdm.auto import tqdm

from reranker import Reranker
from reranker.core.checkpoints import PREFIX64_MODEL
from reranker.core.config import RerankerConfig
from reranker.core.kv_codec import payload_nbytes
from reranker.evaluation.sweep import BudgetSweep

SETTINGS = [(64, "bfloat16"), (128, "int8"), (128, "int4"), (64, "int4"), (64, "int2")]


def main() -> None:
    args, run, dev = open_run(__doc__.splitlines()[0], "selection")
    lists = run["sets"][args.set]
    body = Reranker.read(PREFIX64_MODEL, compressor="select", device="cpu")
    layouts = {
        f"select {k} {s}": RerankerConfig(**(body.gist.model_dump() | {"num_gist": k, "kv_storage": s}))
        for k, s in SETTINGS
    }
    sweep = BudgetSweep(body, list(layouts.values()), batch_size=4)
    dims = (body.num_layers, body.num_kv_heads, body.head_dim)
    for name, (k, s) in zip(layouts, SETTINGS, strict=True):
        run["kib"][name] = payload_nbytes(dims[0], k, dims[1], dims[2], s) / 1024
    queries = {q.query_id: q for q in dev.queries}
    for query_id, item in tqdm(lists.items(), desc=f"{args.set} lists", unit="list"):
        texts = [dev.items[i].text for i in item["ids"]]
        for name, layout in layouts.items():
            units = sweep.compress(layout, texts)
            item["scores"][name] = sweep.reader(layout).score(queries[query_id].text, units).tolist()
        sweep.forget(texts)
    seconds, items = sweep.cost()
    for name in layouts:
        run["timing"][name] = {"compress_ms_per_item": 1e3 * seconds / items}
    save_run(args, run)


if __name__ == "__main__":
    main()
