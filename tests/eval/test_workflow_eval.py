"""``memrl eval`` of any workflow on one file of samples: rewards, pass^k, failures kept apart, resume."""

from __future__ import annotations

import asyncio
import json

from memrl import Episode, Workflow
from memrl.config import MemRLConfig
from memrl.eval.workflow_eval import run_workflow_eval
from memrl.models.resolve import load_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows import build_workflow


class Parity(Workflow):
    """Reward 1 on even samples; sample 3 raises (a broken episode, not a broken eval)."""

    async def run(self, ep: Episode) -> None:
        await ep.generate([1, 2], max_new_tokens=2)
        if ep.sample["n"] == 3:
            raise RuntimeError("boom")
        ep.reward(float(ep.sample["n"] % 2 == 0))
        ep.metric("n", ep.sample["n"])


def test_file_eval_scores_resumes_and_keeps_failures(tmp_path):
    data = tmp_path / "samples.jsonl"
    data.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(5)))
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "data": {"eval_file": str(data)},
                                      "eval": {"repeats": 2}})
    tok = load_tokenizer("tiny")
    eng = ScriptedEngine(lambda p, s: [5, 6])
    wf = Parity().bind(cfg)
    out = tmp_path / "out"
    res = asyncio.run(run_workflow_eval(cfg, eng, tok, wf, out))
    assert (res["episodes"], res["failed"]) == (8, 2)  # sample 3 twice
    assert res["mean_reward"] == 0.75 and res["accuracy"] == 75.0  # samples 0, 2, 4 of 0, 1, 2, 4
    assert res["pass_hat_k"] == {"1": 0.75, "2": 0.75} and res["metrics"]["n"] == 1.75
    assert "RuntimeError: boom" in json.loads((out / "failures" / "3.json").read_text())["error"]
    calls = len(eng.calls)
    seen = []
    asyncio.run(run_workflow_eval(cfg, eng, tok, wf, out, on_start=lambda total, done: seen.append((total, done))))
    assert seen == [(10, 8)] and len(eng.calls) == calls + 2  # only the failed ones are tried again


def test_a_damaged_episode_file_is_set_aside_named_and_its_episode_run_again(tmp_path, capsys):
    data = tmp_path / "samples.jsonl"
    data.write_text("".join(json.dumps({"n": n}) + "\n" for n in (0, 2)))
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "data": {"eval_file": str(data)}})
    tok = load_tokenizer("tiny")
    eng = ScriptedEngine(lambda p, s: [5, 6])
    wf = Parity().bind(cfg)
    out = tmp_path / "out"
    asyncio.run(run_workflow_eval(cfg, eng, tok, wf, out))
    victim = sorted((out / "episodes").glob("*.json"))[0]
    victim.write_text(victim.read_text()[:20])  # cut short (a copy interrupted, a full disk)
    calls = len(eng.calls)
    res = asyncio.run(run_workflow_eval(cfg, eng, tok, wf, out))
    assert res["episodes"] == 2 and res["mean_reward"] == 1.0 and len(eng.calls) == calls + 1
    assert victim.with_name(victim.name + ".damaged").read_text() != victim.read_text()  # kept, not deleted
    assert f"notice: {victim} is damaged" in capsys.readouterr().err


def test_a_qa_file_is_scored_under_eval_protocol_as_the_folder_suite_scores_it(tmp_path):
    """The paper configs name one eval file: ``--protocol memagent`` must score it as MemAgent's script does
    (bidirectional sub-EM against the first gold), not with memrl's one-way sub-EM."""
    data = tmp_path / "eval.json"
    data.write_text(json.dumps([{"index": 0, "input": "What is the capital of France?",
                                 "context": "Paris is the capital of France. " * 5, "answers": ["Paris, France"]}]))
    tok = load_tokenizer("tiny")
    reply = tok.encode("The answer: \\boxed{Paris}", add_special_tokens=False)
    results = {}
    for protocol in ("memrl", "memagent"):
        cfg = MemRLConfig.model_validate({
            "model": {"path": "tiny"}, "data": {"eval_file": str(data)}, "eval": {"protocol": protocol},
            "workflow": {"name": "memagent", "options": {"answer_format": "boxed", "chunk_tokens": 200}}})
        eng = ScriptedEngine(lambda p, s: list(reply) + [tok.eos_token_id])
        results[protocol] = asyncio.run(run_workflow_eval(cfg, eng, tok, build_workflow(cfg), tmp_path / protocol))
    assert results["memrl"]["metrics"]["sub_em"] == 0.0 and "protocol" not in results["memrl"]
    paper = results["memagent"]
    assert paper["metrics"]["sub_em"] == 1.0 and paper["metrics"]["f1"] == 0.67  # 2-decimal F1 of {paris} vs {paris, france}
    assert paper["protocol"] == "memagent" and "MemAgent" in paper["metric"]
    assert "scored as the memagent paper does" in (tmp_path / "memagent" / "results.md").read_text()
