"""Eval protocols, repeats/pass@K and sampling defaults, with a scripted workflow (no model)."""

import asyncio
import json

import pytest

from memrl.config import MemRLConfig, load_config
from memrl.data import LongContextSample, write_samples
from memrl.eval import runner
from memrl.eval.report import markdown_table
from memrl.types import Trajectory
from memrl.workflows.registry import as_workflow


def _samples() -> list[LongContextSample]:
    # sample 0: gold "Paris, France"; sample 1: golds "Lyon" then "Paris"
    return [LongContextSample(context="doc", question="q0", answers=["Paris, France"], index=0, num_docs=7),
            LongContextSample(context="doc", question="q1", answers=["Lyon", "Paris"], index=1, num_docs=7)]


class AnswersParis:
    """Every episode answers ``\\boxed{Paris}``; with ``flip`` repeat seeds alternate Paris / Rome."""

    def __init__(self, flip: bool = False):
        self.flip = flip
        self.seeds: list[int | None] = []

    async def __call__(self, sample, engine, tokenizer, wcfg, *, sampling):
        self.seeds.append(sampling.seed)
        word = "Rome" if self.flip and sampling.seed is not None and sampling.seed != 5 else "Paris"
        text = f"thinking... \\boxed{{{word}}}"
        from memrl.workflows.common import score_text

        answer, s, reward = score_text(text, sample.answers, wcfg.reward, wcfg.answer_format)
        m = {"em": s.em, "sub_em": s.sub_em, "f1": s.f1, "answered": float(answer is not None),
             "context_tokens": 10.0, "num_conversations": 1.0}
        return Trajectory([], reward, str(sample.index), str(sample.index), metrics=m,
                          info={"question": sample.question, "answers": list(sample.answers), "answer": answer,
                                "final_text": text})


def _run(tmp_path, monkeypatch, wf, **cfg):
    data = tmp_path / "data"
    if not (data / "eval_7.jsonl").exists():
        write_samples(_samples(), data / "eval_7.jsonl", fmt="jsonl")
    monkeypatch.setattr(runner, "build_workflow", lambda cfg: as_workflow(wf))
    c = MemRLConfig.model_validate({"model": {"path": "fake"}, **cfg})
    return asyncio.run(runner.run_eval(c, None, None, data, [7], tmp_path / "out"))


def test_protocols_score_the_same_episodes_differently(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, AnswersParis())
    row = res["by_docs"]["7"]
    # memrl: sample 0 one-way fails (gold not in "paris"), sample 1 matches its second gold
    assert (row["sub_em"], row["em"]) == (50.0, 50.0)
    assert res["protocol"] == "memrl" and "one-way" in res["metric"]

    res = _run(tmp_path, monkeypatch, AnswersParis(), eval={"protocol": "memagent"})
    row = res["by_docs"]["7"]
    # memagent: sample 0 counts (prediction inside gold), sample 1 fails (only the first gold "Lyon")
    assert (row["sub_em"], row["em"], row["f1"]) == (50.0, 0.0, 33.5)  # F1: (0.67 + 0) / 2
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["protocol"] == "memagent" and "bidirectional" in saved["metric"]
    md = (tmp_path / "out" / "results.md").read_text()
    assert "protocol `memagent`" in md and "bidirectional" in md


def test_repeats_report_mean_accuracy_and_pass_at_k(tmp_path, monkeypatch):
    wf = AnswersParis(flip=True)  # repeat 0 (seed 5) answers Paris, repeats 1 and 2 answer Rome
    res = _run(tmp_path, monkeypatch, wf, sampling={"seed": 5, "temperature": 1.0}, eval={"repeats": 3})
    assert sorted(wf.seeds) == [5, 5, 5 + 7919, 5 + 7919, 5 + 2 * 7919, 5 + 2 * 7919]  # seeds differ per repeat
    episodes = sorted(p.name for p in (tmp_path / "out" / "episodes" / "7").glob("*.json"))
    assert episodes == ["0.json", "0@1.json", "0@2.json", "1.json", "1@1.json", "1@2.json"]
    row = res["by_docs"]["7"]
    # memrl protocol: only sample 1's Paris answer (repeat 0) is right: 1 of 6 answers, 1 of 2 questions
    assert row["sub_em"] == round(100 / 6, 2) and row["pass_at_k"] == 50.0 and row["questions"] == 2
    assert "pass@3 %" in markdown_table(res)

    # fewer repeats later: the extra episodes on disk are not counted
    res = _run(tmp_path, monkeypatch, AnswersParis(flip=True), sampling={"seed": 5, "temperature": 1.0})
    assert res["by_docs"]["7"]["finished"] == 2 and "pass_at_k" not in res["by_docs"]["7"]


def _cfg_file(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "yaml_text, overrides, expected",
    [
        ("", [], (0.0, 1.0)),  # nothing set: greedy eval
        ("sampling:\n  temperature: 0.7\n", [], (0.7, 1.0)),  # the file's value is kept
        ("eval:\n  protocol: memagent\n", [], (0.7, 0.95)),  # the papers' eval sampling
        ("eval:\n  protocol: rememr1\nsampling:\n  top_p: 0.5\n", [], (0.7, 0.5)),
        ("eval:\n  protocol: memagent\n", ["sampling.temperature=0"], (0.0, 0.95)),
    ],
)
def test_eval_sampling_defaults(tmp_path, yaml_text, overrides, expected):
    cfg = runner.with_eval_sampling(load_config(_cfg_file(tmp_path, yaml_text), overrides))
    assert (cfg.sampling.temperature, cfg.sampling.top_p) == expected


def test_a_size_whose_every_answer_was_empty_is_left_out_of_the_plot(tmp_path):
    from memrl.eval.report import markdown_table, plot_accuracy, summarize

    empty = [{"metrics": {"sub_em": 0.0, "em": 0.0, "f1": 0.0, "context_tokens": 10.0}, "info": {"final_text": ""}}]
    full = [{"metrics": {"sub_em": 1.0, "em": 1.0, "f1": 1.0, "context_tokens": 20.0}, "info": {"final_text": "x"}}]
    rows = {"50": summarize(empty, skip_empty=True), "100": summarize(full, skip_empty=True)}
    assert rows["50"]["sub_em"] is None and rows["50"]["skipped_empty"] == 1 and rows["100"]["sub_em"] == 100.0
    results = {"by_docs": rows, "workflow": "memagent", "model": "m", "protocol": "memagent"}
    assert plot_accuracy(results, tmp_path / "accuracy.png").is_file()
    assert "1 empty final answer(s) are left out" in markdown_table(results)
