"""A reader rollout over a served store, end to end: a real tritonserver (`gistrank serve` in a subprocess)
reading a real Feast SQLite store that `gistrank materialize` filled for the store's model. A retrained
reader (adapters at query rows, head) keeps the store's fingerprint, so the view it reads is the one
already there: every candidate a Feast hit, nothing recomputed, no row written, and the scores are the
new reader's. The store is a selection (the select compressor), so this is also that compressor's path
through Feast into Triton under one fingerprint. A new compressor is another store: no view covers it
until it is materialized."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers import ITEMS
from services import Serve
from typer.testing import CliRunner

from reranker import Reranker, RerankerConfig
from reranker.catalog.database import Catalog
from reranker.cli import app
from reranker.core import kv_codec
from reranker.core.render import render_item
from reranker.serving.client import RerankClient
from reranker.serving.server import free_port
from reranker.store import GistStore

pytestmark = [pytest.mark.triton, pytest.mark.reader_adapter, pytest.mark.select]

QUERY = "steel kettle"


def test_a_retrained_reader_rolls_out_over_the_served_store_with_no_write(
    tiny_base: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    ids = [f"item-{n}" for n in range(len(ITEMS))]
    with Catalog(url) as catalog:
        for item_id, text in zip(ids, ITEMS, strict=True):
            catalog.upsert(item_id, text.split(".")[0], {"n": item_id}, text)
        items = catalog.get(ids)
    texts = [render_item(items[i].title, items[i].attributes, items[i].description) for i in ids]

    gist = RerankerConfig(num_gist=4, compressor="select", max_item_tokens=160, dtype="float32")
    store_model = Reranker.from_pretrained(tiny_base, gist, device="cpu")
    store_ckpt = store_model.save_pretrained(tmp_path / "store")
    reader = store_model.with_gist_config(gist.model_copy(update={"reader_adapter_rank": 2}))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # "retrained": the adapter moved off its fresh zero
        for p in reader.reader_adapter.up.values():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    reader_ckpt = reader.save_pretrained(tmp_path / "reader")
    assert reader.fingerprint == store_model.fingerprint

    feast = ["--feast-dir", str(tmp_path / "feast")]
    runner = CliRunner()
    done = runner.invoke(app, ["materialize", "--model", str(store_ckpt), "--catalog-url", url, *feast])
    assert done.exit_code == 0, done.output
    store = GistStore(tmp_path / "feast", fingerprint=store_model.fingerprint)
    before = store.read(ids)

    # the rollout check: the retrained reader is covered by the view that is there, a new compressor is not
    status = runner.invoke(
        app, ["rollout", "status", "--model", str(reader_ckpt), "--catalog-url", url, *feast]
    )
    assert status.exit_code == 0 and "covers the catalog" in status.output, status.output
    assert f"a reader for store {store_model.fingerprint}" in status.output, status.output
    assert "rolling it out writes nothing to the store" in status.output
    assert "its scores fused with requests' first-stage scores by linear:0.5" in status.output
    # another fusion is another reading of the same store: same view, another reader fingerprint
    fused = runner.invoke(
        app, ["rollout", "status", "--model", f"{reader_ckpt}?fusion=rrf:0.5", "--catalog-url", url, *feast]
    )
    assert fused.exit_code == 0 and "by rrf:0.5:60" in fused.output, fused.output
    readers = [re.search(r"as reader (\w+)", out).group(1) for out in (status.output, fused.output)]
    assert readers[0] != readers[1]
    other = f"{store_ckpt}?compressor=prefix"
    status = runner.invoke(app, ["rollout", "status", "--model", other, "--catalog-url", url, *feast])
    assert status.exit_code == 3 and "the store has no view of it" in status.output, status.output

    ports = [free_port() for _ in range(3)]
    serve = Serve(
        [
            "--model", str(reader_ckpt),
            "--catalog-url", url,
            *feast,
            "--num-threads", "1",
            "--http-port", str(ports[0]),
            "--grpc-port", str(ports[1]),
            "--metrics-port", str(ports[2]),
            "--workdir", str(tmp_path / "run"),
        ]
    )  # fmt: skip
    try:
        serve.wait_for("ready in", timeout_s=600)
        with RerankClient(f"127.0.0.1:{ports[0]}", "http") as client:
            served = client.rerank(QUERY, ids)
    finally:
        serve.stop()

    assert [c.status for c in served] == ["feast"] * len(ids)  # 0 recomputes: the store's own units
    units = [kv_codec.decode(before[i].kv, expected_fingerprint=reader.fingerprint).kv for i in ids]
    expected = reader.score(QUERY, units)
    torch.testing.assert_close(torch.tensor([c.score for c in served]), expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(expected, store_model.score(QUERY, units), rtol=1e-3)  # the new reader's
    assert store.read(ids) == before  # 0 store writes
    # what the store holds is the store model's units (batched apart: equal within float rounding)
    torch.testing.assert_close(store_model.compress(texts[:1])[0].kv, units[0].kv, rtol=1e-4, atol=1e-5)
