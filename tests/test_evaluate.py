"""Evaluation protocol: BM25 by hand, and a tiny end-to-end train + eval whose report has every field."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY
from tiny import tiny_relevance_set

from reranker.core.compressors.base import Compressor
from reranker.core.compressors.prefix import PrefixCompressor
from reranker.core.compressors.select import SelectCompressor
from reranker.core.config import RerankerConfig
from reranker.core.errors import EmptyInputError
from reranker.core.fusion import interpolate, minmax
from reranker.core.kv_codec import payload_nbytes
from reranker.core.model import Reranker
from reranker.data.relevance_data import collection_stats
from reranker.evaluation.baselines import bm25_scores
from reranker.evaluation.fusion import WEIGHTS, fit_weight
from reranker.evaluation.report import markdown_report, write_outputs
from reranker.evaluation.results import (
    METRICS,
    TEACHER,
    Difference,
    EvalResult,
    QueryRecord,
    SystemFacts,
    merge_results,
    paired_across,
    paired_differences,
    paired_row,
)
from reranker.evaluation.runner import evaluate, score_queries
from reranker.evaluation.sweep import BudgetSweep, layout_reader
from reranker.evaluation.systems import System, baseline_systems, student_systems
from reranker.ranking_metrics import ndcg_at_k, ranking
from reranker.training.trainer import TrainConfig, Trainer


def test_bm25_by_hand() -> None:
    docs = ["phone 256gb blue", "phone 128gb", "kettle"]
    scores = bm25_scores("phone 256GB", docs, k1=1.5, b=0.75)
    avg = 6 / 3
    idf_phone = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_256 = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))

    def term(idf: float, doc_len: int) -> float:
        return idf * 1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * doc_len / avg))

    assert math.isclose(scores[0], term(idf_phone, 3) + term(idf_256, 3), rel_tol=1e-12)
    assert math.isclose(scores[1], term(idf_phone, 2), rel_tol=1e-12)
    assert scores[2] == 0.0


def test_train_then_eval_reports_every_field(tiny_base: Path, tmp_path: Path) -> None:
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    common = dict(base=str(tiny_base), gist=gist, steps=4, queries_per_step=2, candidates_per_query=4)
    Trainer(TrainConfig(role="teacher", **common), data, tmp_path / "teacher", device="cpu").fit(
        progress=False
    )
    students = []
    for t, k in ((0, 2), (0, 4), (3, 2)):  # a k sweep and a hybrid (t raw prefix tokens + k gists)
        cfg = TrainConfig(
            role="student",
            train_body=False,
            **(common | {"gist": gist.model_copy(update={"num_gist": k, "keep_item_prefix": t})}),
        )
        Trainer(cfg, data, tmp_path / f"student{t}-{k}", device="cpu").fit(progress=False)
        students.append(tmp_path / f"student{t}-{k}" / "checkpoint")
    out = tmp_path / "eval"
    teacher_path = tmp_path / "teacher" / "checkpoint"
    result = evaluate(
        data, teacher_path, students, out, device="cpu", prefix_ks=(1,), full_paths=[teacher_path]
    )

    trained = {f"{s} k={k}" for s in ("gist", "untrained gists") for k in (2, 4)}
    hybrid = {"gist t=3 k=2", "untrained gists t=3 k=2"}
    # t + k' for k' in (1, own k), each scored by its own student's body and head
    prefix = {f"prefix {n} · gist k=2" for n in (1, 2)} | {f"prefix {n} · gist k=4" for n in (1, 4)}
    prefix |= {f"prefix {n} · gist t=3 k=2" for n in (3 + 1, 3 + 2)}
    full = f"full context · {teacher_path}"  # another full-context model: here the teacher itself
    fused = {f"{s} + bm25" for s in ("teacher", full, "gist k=2", "gist k=4", "gist t=3 k=2")}
    systems = {"teacher", "bm25", "no item", full} | trained | hybrid | prefix | fused
    assert set(result.summary) == systems
    assert set(result.interpolation) == fused
    assert all(fit["weight"] in WEIGHTS for fit in result.interpolation.values())
    # costs: every scored system timed; a compressed one's stored positions and payload bytes
    assert set(result.costs) == systems - fused
    assert all(c["ms_per_candidate"] > 0 for c in result.costs.values())
    hybrid_costs = result.costs["gist t=3 k=2"]
    assert hybrid_costs["positions"] == 5  # every test item is longer than t
    reader = Reranker.from_pretrained(students[2], device="cpu")
    dims = (reader.num_layers, 5, reader.num_kv_heads, reader.head_dim)
    assert hybrid_costs["bytes_bf16"] == payload_nbytes(*dims, "bfloat16")
    assert hybrid_costs["bytes_int8"] == payload_nbytes(*dims, "int8")
    assert "positions" not in result.costs["teacher"]
    stored = {name for name, c in result.costs.items() if "positions" in c}
    assert stored == trained | hybrid | prefix
    assert all(result.costs[name]["compress_ms_per_item"] > 0 for name in stored)
    assert "compress_ms_per_item" not in result.costs["teacher"] | result.costs["bm25"]
    assert "compress ms/item" in (out / "report.md").read_text()
    trained_runs = {"gist k=2": 0, "gist k=4": 1, "gist t=3 k=2": 2}  # each its own run's wall time
    for name, at in trained_runs.items():
        curve = [json.loads(line) for line in (students[at].parent / "curve.jsonl").read_text().splitlines()]
        assert result.costs[name]["training_minutes"] == pytest.approx(
            sum(r["wall_seconds"] for r in curve) / 60
        )
    assert not any("training_minutes" in c for n, c in result.costs.items() if n not in trained_runs)
    read = {i for q in data.split("test").queries for i, _ in data.candidates(q.query_id)}
    longer = sum(len(reader.tokenizer(data.items[i].text)["input_ids"]) > 48 for i in read)
    assert result.truncation == {"max_item_tokens": 48, "items": len(read), "truncated": longer}
    assert longer and f"{longer} of {len(read)} candidates" in (out / "report.md").read_text()
    assert result.full_models == [str(teacher_path)]
    assert [replace(r, system="teacher") for r in result.records if r.system == full] == [
        r for r in result.records if r.system == "teacher"
    ]
    assert result.systems["gist t=3 k=2"] == SystemFacts("gist t=3", 5)
    assert result.systems["prefix 5 · gist t=3 k=2"] == SystemFacts(
        "prefix · gist t=3 k=2", 5, control_of="gist t=3 k=2"
    )
    assert len(result.records) == len(systems) * 2  # two test queries
    teacher = result.summary["teacher"].all
    assert teacher["recall@1"] == teacher["recall@5"] == 1.0  # the reference agrees with itself
    for system, s in result.summary.items():
        assert set(METRICS) <= set(s.all), system
        assert all(0.0 <= s.all[m] <= 1.0 for m in METRICS)
        assert s.hard is not None and s.hard["n"] == 1
        assert s.by_length_quartile
    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads(json.dumps(result.to_json()))
    assert EvalResult.read(out) == result  # results.json reads back to the same result
    assert saved["systems"]["gist t=3 k=2"] == {"family": "gist t=3", "positions": 5}  # the file format
    assert set(saved["records"][0]) == {"system", "query_id", "hard", "length_quartile", *METRICS}
    report = (out / "report.md").read_text()
    assert all(system in report for system in systems)
    assert "Recall" not in report  # the reference's top K kept is overlap@K, not the IR recall
    assert {p.name for p in out.glob("*.png")} == {
        "recall_at_5_vs_k.png",
        "recall_at_10_vs_k.png",
        "ndcg_at_10_vs_k.png",
        "quality_vs_bytes.png",
    }

    # the same students evaluated in two runs and merged: the joint evaluation, table and all
    parts = [
        evaluate(
            data, teacher_path, group, tmp_path / f"part{i}", device="cpu", prefix_ks=(1,), full_paths=fulls
        )
        for i, (group, fulls) in enumerate(((students[:1], []), (students[1:], [teacher_path])))
    ]
    merged = merge_results(parts)
    assert merged.systems == result.systems and merged.summary == result.summary
    assert merged.full_models == result.full_models
    assert sorted(map(repr, merged.records)) == sorted(map(repr, result.records))
    write_outputs(merged, tmp_path / "merged")  # the same rows (in another order), timings aside
    expected = markdown_report(replace(result, costs=merged.costs)).splitlines()
    assert sorted((tmp_path / "merged" / "report.md").read_text().splitlines()) == sorted(expected)
    # two runs of one layout in one evaluation: each named by its run folder, neither overwrites the other
    shutil.copytree(students[0], tmp_path / "rerun" / "checkpoint")
    pair = evaluate(
        data,
        teacher_path,
        [students[0], tmp_path / "rerun" / "checkpoint"],
        tmp_path / "pair",
        device="cpu",
        prefix_ks=(),
    )
    runs = {"student0-2", "rerun"}
    assert {f"gist k=2 · {run}" for run in runs} <= set(pair.summary)
    assert {f"prefix 2 · gist k=2 · {run}" for run in runs} <= set(pair.summary)
    assert pair.systems["gist k=2 · rerun"] == SystemFacts("gist · rerun", 2)
    by_run = {
        run: [replace(r, system="") for r in pair.records if r.system == f"gist k=2 · {run}"] for run in runs
    }
    assert by_run["rerun"] == by_run["student0-2"] and len(by_run["rerun"]) == 2  # same weights, same scores
    with pytest.raises(ValueError, match="repeat a layout and a run folder name"):
        evaluate(data, teacher_path, [students[0], students[0]], tmp_path / "twice", device="cpu")
    # a selection student of the same k beside it: both keep their plain names (cached runs stay found)
    mixed = student_systems(
        [students[0], f"{students[0]}?compressor=select&num_gist=2"], {}, (), device="cpu"
    )
    assert {"gist k=2", "select k=2"} <= set(mixed)
    with pytest.raises(ValueError, match="teacher differs"):
        merge_results([parts[0], replace(parts[1], teacher="another")])
    tampered = json.loads(json.dumps(parts[1].to_json()))
    next(r for r in tampered["records"] if r["system"] == "bm25")["ndcg@10"] = -1.0
    with pytest.raises(ValueError, match="system 'bm25' differs"):
        merge_results([parts[0], EvalResult.from_json(tampered)])


def test_paired_differences_by_hand() -> None:
    ndcg = {"gist k=2": [1.0, 0.5, 0.2], "prefix 2 · gist k=2": [0.5, 0.5, 0.4]}
    records = [
        QueryRecord(system, f"q{i}", False, 0, {"ndcg@10": value, "recall@5": 1.0})
        for system, values in ndcg.items()
        for i, value in enumerate(values)
    ]
    systems = {
        "gist k=2": SystemFacts("gist", 2),
        "prefix 2 · gist k=2": SystemFacts("prefix · gist k=2", 2, control_of="gist k=2"),
        "bm25": SystemFacts("bm25", None),
    }
    [row] = paired_differences(records, systems)
    assert (row.student, row.control) == ("gist k=2", "prefix 2 · gist k=2")
    ndcg10 = row.by_metric["ndcg@10"]
    assert math.isclose(ndcg10.mean, (0.5 + 0.0 - 0.2) / 3)
    assert (ndcg10.better, ndcg10.worse) == (1, 1)
    low, high = ndcg10.ci95
    assert -0.2 - 1e-12 <= low < ndcg10.mean < high <= 0.5 + 1e-12  # within the extremes
    assert row.by_metric["recall@5"] == Difference(mean=0.0, ci95=[0.0, 0.0], better=0, worse=0)


def test_paired_across_two_evaluations_by_hand() -> None:
    """A system in one results.json minus another in a second one, query by query; refused unless both
    were read on the same queries."""

    def result(system: str, ndcg: dict[str, float]) -> EvalResult:
        records = [
            QueryRecord(system, q, False, 0, dict.fromkeys(METRICS, 0.0) | {"ndcg@10": v})
            for q, v in ndcg.items()
        ]
        return EvalResult(
            "dev", "t", [system], [], len(ndcg), {system: SystemFacts("gist", 2)}, {}, {}, records
        )

    new = result("gist k=2", {"q2": 0.9, "q1": 0.3})
    old = EvalResult.from_json(json.loads(json.dumps(result("gist k=2", {"q1": 0.5, "q2": 0.4}).to_json())))
    diff = paired_across(new, "gist k=2", old, "gist k=2", "ndcg@10")
    assert math.isclose(diff.mean, (-0.2 + 0.5) / 2) and (diff.better, diff.worse) == (1, 1)
    assert str(diff).startswith("+0.150 [")
    # a report's table row: the label, then one cell per metric (recall@5 is 0 everywhere here)
    row = paired_row("new − old", new, "gist k=2", old, "gist k=2", ("ndcg@10", "recall@5"))
    assert row == f"| new − old | {diff} | +0.000 [+0.000, +0.000] (0 / 0) |"
    with pytest.raises(ValueError, match="not evaluated on the same queries"):
        paired_across(new, "gist k=2", result("gist k=2", {"q1": 0.5}), "gist k=2", "ndcg@10")
    with pytest.raises(ValueError, match="not evaluated on the same queries"):
        paired_across(new, "prefix k=2", old, "gist k=2", "ndcg@10")  # a system it did not read


def test_untouched_base_controls(tiny_base: Path, tmp_path: Path) -> None:
    """`control_base` reads a student's controls with its base LM as it was before any training: for a
    fully fine-tuned student (its checkpoint stores the trained body) they are the controls the saved
    untouched base scores as a student of its own, not the student's own controls."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    untouched = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "untouched")
    cfg = TrainConfig(
        role="student", base=str(tiny_base), gist=gist, steps=4, queries_per_step=2, candidates_per_query=4
    )
    Trainer(cfg, data, tmp_path / "student", device="cpu").fit(progress=False)
    student = tmp_path / "student" / "checkpoint"
    result = evaluate(
        data, untouched, [student], tmp_path / "eval", device="cpu", prefix_ks=(1,), control_base=True
    )
    alone = evaluate(data, untouched, [untouched], tmp_path / "alone", device="cpu", prefix_ks=(1,))

    def rows(res: EvalResult, system: str) -> list[QueryRecord]:
        return [replace(r, system="") for r in res.records if r.system == system]

    controls = ["untrained gists k=2", "prefix 1 · gist k=2", "prefix 2 · gist k=2"]
    # the untouched base's gists are untrained: it is its own untrained-gists control
    as_alone = {"untrained gists k=2": "gist k=2"}
    for control in controls:
        base_read = f"{control} · untouched base"
        assert result.systems[base_read].control_of == "gist k=2"
        same = as_alone.get(control, control)
        assert rows(result, base_read) == rows(alone, same) and len(rows(alone, same)) == 2
    assert "untrained gists k=2" not in alone.systems
    assert rows(result, "gist k=2") != rows(alone, "gist k=2")  # the student did train its body
    paired = {row.control: row for row in paired_differences(result.records, result.systems)}
    assert set(paired) == {c + tag for c in controls for tag in ("", " · untouched base")}
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "| gist k=2 | prefix 1 · gist k=2 · untouched base |" in report
    # two students of one base in one evaluation: both read their controls with that base, untouched
    pair = evaluate(
        data,
        untouched,
        [student, untouched],
        tmp_path / "pair",
        device="cpu",
        prefix_ks=(1,),
        control_base=True,
    )
    for control in controls:
        for run in ("student", "untouched"):
            name = f"{control} · {run} · untouched base"
            if run == "untouched" and control in as_alone:  # that student is its own untrained control
                assert name not in pair.systems
                continue
            assert rows(pair, name) == rows(alone, as_alone.get(control, control))


# ------------------------------------------------------------------ BM25 IDF, short items, failures
def test_bm25_idf_is_the_collections_not_the_candidate_lists() -> None:
    """ "zebra" is in two of three candidates but in two of 100 documents of the collection; "common" is in
    one candidate but in nearly every document. IDF over the list would rank the "common" document
    first; the collection's IDF ranks the zebra documents first, as a first stage over it would."""
    candidates = ["zebra stripes", "zebra foal", "common news"]
    collection = collection_stats(candidates + ["common words everywhere"] * 97)
    query = "zebra common"
    by_list = bm25_scores(query, candidates)
    by_collection = bm25_scores(query, candidates, collection=collection)
    assert ranking(by_list)[0] == 2
    assert ranking(by_collection)[:2] == [0, 1]
    idf_zebra = math.log(1 + (100 - 2 + 0.5) / (2 + 0.5))
    k1, b, avg = 0.9, 0.4, collection.avg_length  # the stated defaults
    expected = idf_zebra * 1 * (k1 + 1) / (1 + k1 * (1 - b + b * 2 / avg))
    assert math.isclose(by_collection[0], expected, rel_tol=1e-12)
    # evaluation reads IDF over the whole set's items, not the evaluated split's candidate lists
    systems = baseline_systems({str(i): text for i, text in enumerate(candidates)}, collection)
    assert systems["bm25"].score(query, ["0", "1", "2"]) == by_collection


@pytest.mark.parametrize("compressor", ["prefix", "select"])
def test_a_budget_sweep_gives_each_budget_what_its_own_reader_compresses(
    tiny_model: Reranker, compressor: str
) -> None:
    """One pass, every budget: each budget's units are what the body set up for that k compresses alone
    (its fingerprint, layout and tensors) — short items stored whole, as serving stores them."""
    body = tiny_model.with_gist_config(tiny_model.gist.model_copy(update={"compressor": compressor}))
    budgets = [body.gist.model_copy(update={"num_gist": k}) for k in (2, 6, 9)]
    sweep = BudgetSweep(body, budgets, batch_size=2)
    item_ids, _ = body.item_ids(ITEMS)
    assert any(len(ids) < 6 for ids in item_ids)  # "kettle" is stored whole at k = 6 and 9
    for k in budgets:
        alone = layout_reader(body, k).compress(ITEMS)
        swept = sweep.compress(k, ITEMS)
        for a, b in zip(alone, swept, strict=True):
            assert (a.fingerprint, a.compressor, a.budget, a.query_start) == (
                b.fingerprint,
                b.compressor,
                b.budget,
                b.query_start,
            )
            torch.testing.assert_close(a.kv, b.kv, rtol=1e-4, atol=1e-5)
        assert sweep.reader(k).fingerprint == alone[0].fingerprint
        online = sweep.reader(k).score(QUERY, swept)
        torch.testing.assert_close(online, layout_reader(body, k).score(QUERY, alone))
    sweep.forget(ITEMS)
    assert not any(sweep.done.values())


def test_a_budget_sweep_refuses_trained_gists(tiny_model: Reranker) -> None:
    with pytest.raises(ValueError, match="one trained layout"):
        BudgetSweep(tiny_model, [tiny_model.gist])


def test_a_failing_system_keeps_the_others_results() -> None:
    data = tiny_relevance_set()
    test = data.split("test")
    calls = {"n": 0}

    def flaky(query: str, cand_ids: list[str]) -> list[float]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("out of memory on the second query")
        return [1.0, 2.0, 3.0, 4.0][: len(cand_ids)]

    systems = {
        "flaky": System(flaky, SystemFacts("flaky", 4)),
        "nan": System(lambda _q, ids: [float("nan")] * len(ids), SystemFacts("nan", 4)),
        "steady": System(
            lambda _q, ids: [float(len(i)) + n for n, i in enumerate(ids)], SystemFacts("s", None)
        ),
    }
    reference = System(lambda _q, ids: [float(-n) for n in range(len(ids))], TEACHER)
    scored = score_queries(test, reference, systems, [0, 1])
    assert set(scored.errors) == {"flaky", "nan"}
    assert scored.errors["flaky"] == "RuntimeError: out of memory on the second query"
    assert "finite" in scored.errors["nan"]
    assert {r.system for r in scored.records} == {"teacher", "steady"}  # no partial system
    assert [r.query_id for r in scored.records] == ["q2", "q2", "q3", "q3"]  # query by query
    assert set(scored.scores) == {"teacher", "steady"} and calls["n"] == 2  # not called after failing


def test_the_gain_is_chosen_once_for_every_system_and_stated_in_the_report() -> None:
    """`--gain exponential` scores nDCG with 2^label − 1 for every system, the report's headers say so,
    and evaluations on different gains do not merge."""
    test = tiny_relevance_set().split("test")
    reversed_order = System(lambda _q, ids: [float(n) for n in range(len(ids))], SystemFacts("s", 4))
    reference = System(lambda _q, ids: [float(-n) for n in range(len(ids))], TEACHER)
    by_gain = {}
    for gain in ("linear", "exponential"):
        scored = score_queries(test, reference, {"s": reversed_order}, [0] * len(test.queries), gain=gain)
        by_gain[gain] = {(r.system, r.query_id): r.metrics["ndcg@10"] for r in scored.records}
        for query in test.queries:
            ids, labels = zip(*test.candidates(query.query_id), strict=True)
            values = scored.scores["s"][query.query_id]
            assert by_gain[gain][("s", query.query_id)] == ndcg_at_k(values, labels, 10, ids, gain)
    assert by_gain["linear"] != by_gain["exponential"]  # graded labels: the gain changes the numbers

    result = EvalResult("test", "t", [], [], 1, {"teacher": TEACHER}, {}, {}, [], gain="exponential")
    assert "ndcg@10 (gain = 2^label − 1)" in markdown_report(result)
    assert EvalResult.from_json(result.to_json()).gain == "exponential"
    with pytest.raises(ValueError, match="gain differs"):
        merge_results([result, replace(result, gain="linear")])


def test_each_candidate_is_forgotten_after_the_last_query_that_names_it() -> None:
    """An evaluation holds one query's compressed K/V, not every query's: `forget` gets each candidate
    once, right after the last query naming it, and nothing is forgotten that a later query needs."""
    test = tiny_relevance_set().split("test")
    events: list[tuple[str, str]] = []

    def prepare(ids: list[str]) -> None:
        events.extend(("prepare", i) for i in ids)

    def forget(ids: list[str]) -> None:
        events.extend(("forget", i) for i in ids)

    system = System(lambda _q, ids: [0.0] * len(ids), SystemFacts("s", 4), prepare, forget=forget)
    reference = System(lambda _q, ids: [float(-n) for n in range(len(ids))], TEACHER)
    score_queries(test, reference, {"s": system}, [0] * len(test.queries))
    named = {i for q in test.queries for i, _ in test.candidates(q.query_id)}
    forgotten = [i for what, i in events if what == "forget"]
    assert sorted(forgotten) == sorted(named)  # each once
    for n, (what, item) in enumerate(events):
        if what == "forget":
            assert ("prepare", item) not in events[n + 1 :]


def test_evaluate_records_a_failed_system_and_goes_on(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "model")

    def broken(*_args: object, **_kwargs: object) -> list:
        raise EmptyInputError("items [1] have fewer than t + k = 2 tokens")

    monkeypatch.setattr("reranker.evaluation.sweep.BudgetSweep.compress", broken)  # the prefix pass
    out, runs = tmp_path / "eval", tmp_path / "runs"
    result = evaluate(data, model, [model], out, device="cpu", prefix_ks=(1,), run_dir=runs)
    failed = {"prefix 1 · gist k=2", "prefix 2 · gist k=2"}
    assert set(result.errors) == failed
    assert result.errors["prefix 1 · gist k=2"].startswith("EmptyInputError: items [1]")
    scored = {"teacher", "bm25", "no item", "gist k=2"}  # untrained gists: the student is its own control
    assert scored | {"teacher + bm25", "gist k=2 + bm25"} == set(result.summary)
    assert not failed & set(result.systems) and len(result.records) == 6 * 2
    saved = json.loads((out / "results.json").read_text())
    assert saved["errors"] == result.errors and EvalResult.from_json(saved) == result
    report = (out / "report.md").read_text()
    assert "Systems that failed" in report and "| prefix 1 · gist k=2 | EmptyInputError: items [1]" in report
    assert set(json.loads((runs / "runs.json").read_text())) == set(result.summary)
    merged = merge_results([result, result])
    assert merged.errors == result.errors


def test_a_selection_student_on_a_slice_of_queries(tiny_base: Path, tmp_path: Path) -> None:
    """A model reference with compressor=select is evaluated like any student: its own online path and
    its prefix controls at the same budgets, no untrained-gists control (it has no gists); with
    `max_queries` only the split's first queries are scored."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    teacher = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "teacher")
    select = f"{teacher}?compressor=select&num_gist=3"
    result = evaluate(data, teacher, [select], tmp_path / "eval", device="cpu", prefix_ks=(1,), max_queries=1)
    assert result.queries == 1 == len({r.query_id for r in result.records})
    assert "select k=3" in result.systems and "prefix 3 · select k=3" in result.systems
    assert not any("untrained" in name for name in result.systems)
    # the teacher's own body read by selection: at a budget above every item's length nothing is
    # dropped, and it ranks exactly as the reference (recall@1 = 1 on every query)
    whole = f"{teacher}?compressor=select&num_gist=64"
    full = evaluate(data, teacher, [whole], tmp_path / "whole", device="cpu", prefix_ks=(1,))
    assert all(r.metrics["recall@1"] == 1.0 for r in full.records if r.system == "select k=64")


def test_bm25_interpolation_weight_is_fitted_on_the_other_queries() -> None:
    """Two queries where the model is right and BM25 wrong, one the other way round: the weight to
    deploy favours the model; the odd query is graded at the weight the other two chose (≥ 2/3 puts the
    relevant item first when the model is right), so its own labels never pick its weight."""
    labels = {q: [0, 1, 0] for q in ("q1", "q2", "q3")}
    right, wrong = [2.0, 3.0, 1.0], [3.0, 1.0, 2.0]  # the relevant item (index 1) first / last
    model = {"q1": right, "q2": right, "q3": wrong}
    bm25 = {"q1": wrong, "q2": wrong, "q3": right}
    fitted = fit_weight(model, bm25, labels)
    assert fitted.weight == 0.7  # the smallest weight that ranks the relevant item first on q1 and q2
    assert fitted.held_out["q3"] == 0.7
    assert ranking(interpolate(model["q3"], bm25["q3"], fitted.held_out["q3"]))[0] != 1  # graded honestly
    assert ranking(interpolate(model["q3"], bm25["q3"], 0.3))[0] == 1  # its own best weight would cheat
    assert minmax([2.0, 2.0]) == [0.0, 0.0] and minmax([1.0, 3.0, 2.0]) == [0.0, 1.0, 0.5]


def test_a_rerun_scores_only_what_the_cache_lacks(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a run folder, a second evaluation over more queries reuses every cached (system, query) —
    each model scores only the new query — and gives the records a fresh evaluation gives; a changed
    model (another key) is scored afresh."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "model")
    runs = tmp_path / "runs"
    first = evaluate(
        data, model, [model], tmp_path / "a", device="cpu", prefix_ks=(1,), run_dir=runs, max_queries=1
    )
    assert first.queries == 1 and "key" in json.loads((runs / "cache.json").read_text())["teacher"]
    called: list[tuple[str, str]] = []
    for method in ("score", "score_full"):
        original = getattr(Reranker, method)

        def counted(self: Reranker, query: str, items: list, _m: str = method, _f=original) -> torch.Tensor:
            called.append((_m, query))
            return _f(self, query, items)

        monkeypatch.setattr(Reranker, method, counted)
    second = evaluate(data, model, [model], tmp_path / "b", device="cpu", prefix_ks=(1,), run_dir=runs)
    new_query = data.split("test").queries[1].text
    # teacher once; the student (untrained: its own gists control) and two prefix controls once each: the
    # new query only
    assert sorted(called) == [("score", new_query)] * 3 + [("score_full", new_query)]
    monkeypatch.undo()
    fresh = evaluate(data, model, [model], tmp_path / "c", device="cpu", prefix_ks=(1,))
    assert sorted(map(repr, second.records)) == sorted(map(repr, fresh.records))
    other = Reranker.from_pretrained(tiny_base, gist.model_copy(update={"max_item_tokens": 40}))
    other_path = other.save_pretrained(tmp_path / "other")
    called.clear()
    monkeypatch.setattr(Reranker, "score_full", counted)
    evaluate(data, other_path, [], tmp_path / "d", device="cpu", run_dir=runs)
    assert len(called) == 2  # another teacher: both queries scored again


def test_select_students_share_one_pass_and_identical_controls_score_once(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Select students that differ only in k: one selection forward per item for both (not one per k),
    the same scores as evaluating each alone; one prefix pass and one prefix control per budget, each
    paired with the student of that budget (not one copy per student), all on one line of the plots."""
    data = tiny_relevance_set()
    base = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    )
    path = base.save_pretrained(tmp_path / "base")
    specs = [f"{path}?compressor=select&num_gist={k}" for k in (2, 3)]
    passes: dict[str, int] = {"select": 0, "prefix": 0}
    for kind in (SelectCompressor, PrefixCompressor):

        def counted(
            self: Compressor, model: Reranker, item_ids: list, budgets: list, _c=kind.compress
        ) -> list:
            passes[self.name] += len(item_ids)
            return _c(self, model, item_ids, budgets)

        monkeypatch.setattr(kind, "compress", counted)
    both = evaluate(data, path, specs, tmp_path / "both", device="cpu", prefix_ks=(3,))
    test_items = {i for q in data.split("test").queries for i, _ in data.candidates(q.query_id)}
    # each item through the selection forward once, and through the prefix forward once
    assert passes == {"select": len(test_items), "prefix": len(test_items)}
    controls = {name: f.control_of for name, f in both.systems.items() if name.startswith("prefix")}
    assert controls == {"prefix 2 · select k=2": "select k=2", "prefix 3 · select k=3": "select k=3"}
    # one body, one prefix line in the plots (as the students make one select line)
    assert {both.systems[name].family for name in controls} == {"prefix · select"}
    monkeypatch.undo()
    for spec, k in zip(specs, (2, 3), strict=True):
        alone = evaluate(data, path, [spec], tmp_path / f"alone{k}", device="cpu", prefix_ks=(3,))
        mine = [r for r in both.records if r.system == f"select k={k}"]
        assert mine and mine == [r for r in alone.records if r.system == f"select k={k}"]
        alone_prefix = [r.metrics for r in alone.records if r.system == f"prefix 3 · select k={k}"]
        assert alone_prefix == [r.metrics for r in both.records if r.system == "prefix 3 · select k=3"]


def test_hybrid_and_per_head_selection_students_share_one_selection_pass(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KVzip students of one body that differ in k, the hybrid prefix t and the per-head rule: one KVzip
    forward per item for all of them, each scoring what it scores evaluated alone; each stored budget
    t + k has its prefix control, one system per budget for the students that store it."""
    data = tiny_relevance_set()
    base = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    )
    path = base.save_pretrained(tmp_path / "base")
    kvzip = f"{path}?compressor=select&select_scorer=kvzip"
    specs = [
        f"{kvzip}&num_gist=4",
        f"{kvzip}&keep_item_prefix=2&num_gist=2",
        f"{kvzip}&keep_item_prefix=2&num_gist=2&select_head_budget=adaptive",
    ]
    names = ["select kvzip k=4", "select kvzip t=2 k=2", "select kvzip per-head t=2 k=2"]
    passes: list[int] = []
    original = SelectCompressor.compress

    def counted(self: Compressor, model: Reranker, item_ids: list, layouts: list) -> list:
        passes.append(len(item_ids))
        return original(self, model, item_ids, layouts)

    monkeypatch.setattr(SelectCompressor, "compress", counted)
    together = evaluate(data, path, specs, tmp_path / "together", device="cpu", prefix_ks=(2,))
    test_items = {i for q in data.split("test").queries for i, _ in data.candidates(q.query_id)}
    assert sum(passes) == len(test_items)  # one KVzip forward per item, not one per student
    controls = {name: f.control_of for name, f in together.systems.items() if name.startswith("prefix")}
    assert controls == {
        "prefix 2 · select kvzip k=4": "select kvzip k=4",
        "prefix 4 · select kvzip k=4": "select kvzip k=4",
        "prefix 4 · select kvzip t=2 k=2": "select kvzip t=2 k=2",
        "prefix 4 · select kvzip per-head t=2 k=2": "select kvzip per-head t=2 k=2",
    }
    monkeypatch.undo()
    systems = student_systems(specs, {i: data.items[i].text for i in data.items}, prefix_ks=(2,))
    fours = {systems[n].key for n in controls if n.startswith("prefix 4")}
    assert len(fours) == 1  # one body reads prefix 4 for all three: one system, scored once
    for spec, name in zip(specs, names, strict=True):
        alone = evaluate(data, path, [spec], tmp_path / name.replace(" ", "-"), device="cpu", prefix_ks=())
        mine = [r for r in together.records if r.system == name]
        assert mine and mine == [r for r in alone.records if r.system == name]


def test_students_that_differ_only_in_selection_settings_share_their_prefix_controls(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SnapKV and a KVzip student of one body: prefix caching reads neither setting, so each budget's
    control is one system for both — the same key, one prefix pass per item."""
    data = tiny_relevance_set()
    base = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    )
    path = base.save_pretrained(tmp_path / "base")
    specs = [f"{path}?compressor=select{scorer}&num_gist=2" for scorer in ("", "&select_scorer=kvzip")]
    texts = {i: data.items[i].text for i in data.items}
    systems = student_systems(specs, texts, prefix_ks=(3,))
    keys = {name: s.key for name, s in systems.items() if name.startswith("prefix 3")}
    assert len(keys) == 2 and len(set(keys.values())) == 1
    prefix_items = []
    original = PrefixCompressor.compress

    def counted(self: Compressor, model: Reranker, item_ids: list, budgets: list) -> list:
        prefix_items.extend(item_ids)
        return original(self, model, item_ids, budgets)

    monkeypatch.setattr(PrefixCompressor, "compress", counted)
    evaluate(data, path, specs, tmp_path / "eval", device="cpu", prefix_ks=(3,))
    test_items = {i for q in data.split("test").queries for i, _ in data.candidates(q.query_id)}
    assert len(prefix_items) == len(test_items)  # one prefix pass per item, not one per student


def test_a_prefix_student_is_not_its_own_control(tiny_base: Path, tmp_path: Path) -> None:
    """A prefix-caching student's control at its own budget, read by its own body, would be the
    student again: only the other budgets are its controls (none asked: no control, no error)."""
    data = tiny_relevance_set()
    base = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    )
    spec = f"{base.save_pretrained(tmp_path / 'base')}?compressor=prefix&num_gist=2"
    with_other = evaluate(data, spec, [spec], tmp_path / "a", device="cpu", prefix_ks=(1,))

    def controls(result: object) -> dict[str, str | None]:
        return {name: f.control_of for name, f in result.systems.items() if f.control_of}

    assert "prefix k=2" in with_other.systems
    assert controls(with_other) == {"prefix 1 · prefix k=2": "prefix k=2"}
    alone = evaluate(data, spec, [spec], tmp_path / "b", device="cpu", prefix_ks=())
    assert "prefix k=2" in alone.systems and controls(alone) == {}


@pytest.mark.lowbit
def test_a_student_stored_at_int4_is_scored_as_the_store_returns_it(tiny_base: Path, tmp_path: Path) -> None:
    """Prefix caching stored at 4 bits, and at 2 bits in the same pass: each scored over its decoded
    units (not the exact K/V), its bytes counted at its storage, its controls at the same storage."""
    data = tiny_relevance_set()
    base = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    )
    path = base.save_pretrained(tmp_path / "base")
    specs = [f"{path}?compressor=prefix&num_gist=8&kv_storage={s}" for s in ("int4", "int2")]
    exact = f"{path}?compressor=prefix&num_gist=8"
    result = evaluate(data, exact, specs, tmp_path / "eval", device="cpu", prefix_ks=(4,))
    assert {"prefix k=8 int4", "prefix k=8 int2", "prefix 4 · prefix k=8 int4"} <= set(result.systems)
    dims = (base.num_layers, base.num_kv_heads, base.head_dim)
    for storage in ("int4", "int2"):
        costs = result.costs[f"prefix k=8 {storage}"]
        assert costs["bytes_stored"] == payload_nbytes(dims[0], 8, *dims[1:], storage)  # items longer than 8
    # what the int4 system scores is the decoded units, not the exact K/V
    query = data.queries[0]
    ids = [i for i, _ in data.candidates(query.query_id)]
    texts = {i: data.items[i].text for i in ids}
    system = student_systems([specs[0]], texts, prefix_ks=())["prefix k=8 int4"]
    int4 = Reranker.from_pretrained(specs[0], device="cpu")
    units = int4.compress([texts[i] for i in ids])
    scored = torch.tensor(system.score(query.text, ids))
    torch.testing.assert_close(scored, int4.score(query.text, int4.as_stored(units)))
    assert not torch.allclose(scored, int4.score(query.text, units))


def test_untrained_pooled_gists_are_their_own_control(tiny_base: Path, tmp_path: Path) -> None:
    """A base read with `compressor=gist&gist_pool_windows=true` (no training) is named for its windows
    and has prefix controls but no untrained-gists control (it would be itself); once its gists move
    the control is back."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    base = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "base")
    spec = f"{tiny_base}?compressor=gist&num_gist=2&max_item_tokens=48&gist_pool_windows=true"
    result = evaluate(data, base, [spec], tmp_path / "eval", device="cpu", prefix_ks=(1,), max_queries=1)
    controls = {name: f.control_of for name, f in result.systems.items() if f.control_of}
    assert controls == {
        "prefix 1 · gist pooled k=2": "gist pooled k=2",
        "prefix 2 · gist pooled k=2": "gist pooled k=2",
    }
    trained = Reranker.from_pretrained(spec, device="cpu")
    with torch.no_grad():
        trained.gist_embeddings.add_(0.01)
    moved = trained.save_pretrained(tmp_path / "moved")
    again = evaluate(data, base, [moved], tmp_path / "again", device="cpu", prefix_ks=(1,), max_queries=1)
    assert again.systems["untrained gists pooled k=2"].control_of == "gist pooled k=2"
    # without the untrained control the trained student keeps its prefix controls only
    alone = evaluate(
        data,
        base,
        [moved],
        tmp_path / "alone",
        device="cpu",
        prefix_ks=(1,),
        max_queries=1,
        untrained_control=False,
    )
    assert {name for name, f in alone.systems.items() if f.control_of} == set(controls)
    assert "gist pooled k=2" in alone.summary and "untrained gists pooled k=2" not in alone.summary


def test_a_stopped_evaluation_keeps_its_finished_queries(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scores reach the run folder query by query: an evaluation that dies on its second query (here
    the reference fails) leaves the first query cached for every system, and the rerun scores only the
    second."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "model")
    runs = tmp_path / "runs"
    _first, second = (q.text for q in data.split("test").queries)
    original = Reranker.score_full

    def dies_on_the_second(self: Reranker, query: str, items: list) -> torch.Tensor:
        if query == second:
            raise RuntimeError("killed")
        return original(self, query, items)

    monkeypatch.setattr(Reranker, "score_full", dies_on_the_second)
    with pytest.raises(RuntimeError, match="killed"):
        evaluate(data, model, [model], tmp_path / "a", device="cpu", prefix_ks=(1,), run_dir=runs)
    monkeypatch.undo()
    kept = json.loads((runs / "cache.json").read_text())
    assert kept["gist k=2"]["costs"]["ms_per_candidate"] > 0  # what the first query measured is kept
    called: list[str] = []

    def counted(self: Reranker, query: str, items: list) -> torch.Tensor:
        called.append(query)
        return original(self, query, items)

    monkeypatch.setattr(Reranker, "score_full", counted)
    evaluate(data, model, [model], tmp_path / "b", device="cpu", prefix_ks=(1,), run_dir=runs)
    assert called == [second]


def test_a_smaller_evaluation_into_the_run_folder_loses_no_cached_score(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial on one query with the student left out, into the run folder of a two-query evaluation,
    keeps what it did not score: the second query in every run file (beside qrels.txt of the one it
    evaluated), the student's runs and cache entries; the full evaluation again scores nothing."""
    data = tiny_relevance_set()
    gist = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "model")
    runs = tmp_path / "runs"
    evaluate(data, model, [model], tmp_path / "a", device="cpu", prefix_ks=(1,), run_dir=runs)
    full = {name: (runs / entry["run"]).read_text() for name, entry in _cache(runs).items()}
    evaluate(data, model, [], tmp_path / "b", device="cpu", run_dir=runs, max_queries=1)
    first = data.split("test").queries[0].query_id
    assert {line.split()[0] for line in (runs / "qrels.txt").read_text().splitlines()} == {first}
    assert _cache(runs).keys() == full.keys()
    for name, entry in _cache(runs).items():
        assert sorted((runs / entry["run"]).read_text().splitlines()) == sorted(full[name].splitlines())
    called: list[str] = []
    for method in ("score", "score_full"):
        original = getattr(Reranker, method)

        def counted(self: Reranker, query: str, items: list, _f=original) -> torch.Tensor:
            called.append(query)
            return _f(self, query, items)

        monkeypatch.setattr(Reranker, method, counted)
    evaluate(data, model, [model], tmp_path / "c", device="cpu", prefix_ks=(1,), run_dir=runs)
    assert called == []


def _cache(runs: Path) -> dict[str, dict]:
    return json.loads((runs / "cache.json").read_text())


def test_every_full_context_line_has_a_style_of_its_own() -> None:
    """Plots draw systems without stored positions as horizontal lines: several full-context models and
    their BM25 interpolations must not share one style (they did: all black dash-dot)."""
    from reranker.evaluation.plots import _level_styles

    others = ["full context · a", "full context · b", "full context · a + bm25", "teacher + bm25"]
    styles = _level_styles(["teacher", "bm25", "no item", *others])
    assert styles["bm25"]["ls"] == "--" and styles["teacher"] == {"color": "black", "ls": "-."}
    drawn = {(str(styles[n]["color"]), styles[n]["ls"]) for n in ["teacher", "bm25", "no item", *others]}
    assert len(drawn) == 3 + len(others)
    assert styles["full context · a + bm25"]["ls"] == ":"
