"""Eval episodes saved as rollout records: read back as trajectories, shown per token, fine-tuned on by rft."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import torch

from memrl.config.schema import MemRLConfig
from memrl.eval.records import read_rollouts
from memrl.eval.runner import EVAL_OUTPUTS, check_resume, run_eval
from memrl.eval.tool_eval import run_tool_eval, task_folder
from memrl.models.resolve import load_model, load_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.view.loader import load_payload
from memrl.workflows import load_samples
from memrl.workflows.common import encode_text
from tests.eval.helpers import needle_eval_dir, tokenizer_dir


def _records(folder):
    return {p.relative_to(folder).with_suffix("").as_posix(): json.loads(p.read_text())
            for p in folder.rglob("*.jsonl")}


def test_qa_eval_writes_one_rollout_record_per_episode(tmp_path):
    data = needle_eval_dir(tmp_path / "data", count=2)
    tok_dir = tokenizer_dir(tmp_path / "tok")
    tok = load_tokenizer(str(tok_dir))
    cfg = MemRLConfig.model_validate({"model": {"path": str(tok_dir)}, "workflow": {"name": "memagent"},
                                      "sampling": {"temperature": 0.0}})
    answer = encode_text(tok, "\\boxed{none}") + [tok.convert_tokens_to_ids("<|im_end|>")]
    out = tmp_path / "out"
    check_resume(out, cfg)
    asyncio.run(run_eval(cfg, ScriptedEngine(lambda prompt, params: answer), tok, data, [3], out))
    assert "rollouts" in EVAL_OUTPUTS  # --restart clears them with the rest
    records = _records(out / "rollouts")
    assert sorted(records) == ["3/0", "3/1"]
    for name, rec in records.items():
        episode = json.loads((out / "episodes" / f"{name}.json").read_text())
        assert rec["eval"] == {"docs": 3, "repeat": 0} and rec["pick"] == "eval" and rec["step"] is None
        assert rec["reward"] == episode["reward"] and rec["sample_id"] == episode["sample_id"]
        assert [sum(c["loss_mask"]) for c in rec["conversations"]] == \
               [c["response_tokens"] for c in episode["conversations"]]
        assert all(c["text"]["response"].startswith("\\boxed{none}") for c in rec["conversations"])
        assert "advantage" not in rec["conversations"][0] and "trainer_logprobs" not in rec["conversations"][0]
    trajs = read_rollouts(out)
    assert len(trajs) == 2 and all(t.num_conversations == len(records["3/0"]["conversations"]) for t in trajs)
    # memrl view shows the conversations per token (with the engine's log-probs), not from the transcript
    ep = next(e for e in load_payload(out, tokenizer=str(tok_dir))["episodes"] if e["id"] == "3/0")
    gen = [s for c in ep["conversations"] for s in c["spans"] if s["kind"] == "gen"]
    assert gen and all(s["tokens"] and s["lp"] == [-0.5] * len(s["tokens"]) for s in gen)
    assert "".join(gen[0]["tokens"]).startswith("\\boxed{none}") and ep["transcript"] is None

    bare = tmp_path / "bare"  # --no-rollouts: summaries and transcripts only
    check_resume(bare, cfg)
    asyncio.run(run_eval(cfg, ScriptedEngine(lambda prompt, params: answer), tok, data, [3], bare, rollouts=False))
    assert (bare / "transcripts" / "3" / "0.txt").is_file() and not (bare / "rollouts").exists()

    # the page in a browser (skipped without Chromium): one token element per generated token
    from memrl.view.page import render_page
    from tests.view.conftest import Dom, browser

    page = tmp_path / "eval.html"
    page.write_text(render_page(load_payload(out, tokenizer=str(tok_dir))), encoding="utf-8")
    dom = Dom(browser(page, "--dump-dom", fragment="#episode=3%2F0"))
    assert len(dom.having("conv")) == len(records["3/0"]["conversations"])
    toks = dom.having("tok")
    assert len(toks) == sum(sum(c["loss_mask"]) for c in records["3/0"]["conversations"])
    assert all("engine log-prob -0.5" in t["title"] for t in toks)


def test_tool_eval_rollouts_feed_rft_and_the_weights_change(tmp_path):
    tok = load_tokenizer("tiny")
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "workflow": {"name": "tool_agent", "max_turns": 2},
                                      "env": {"domain": "library", "eval_split": "test"},
                                      "sampling": {"temperature": 1.0}})
    reply = encode_text(tok, "Nothing to change here.") + [tok.convert_tokens_to_ids("<|im_end|>")]
    out = tmp_path / "eval"
    check_resume(out, cfg)
    res = asyncio.run(run_tool_eval(cfg, ScriptedEngine(lambda prompt, params: reply), tok, out, 2))
    tasks = [s.task.id for s in load_samples(cfg, "eval")]
    records = _records(out / "rollouts")
    assert sorted(records) == sorted(f"{task_folder(t)}/{k}" for t in tasks for k in (0, 1))
    some = records[f"{task_folder(tasks[0])}/1"]
    assert some["eval"] == {"task_id": tasks[0], "trial": 1} and some["info"]["messages"]
    solved = sum(v["successes"] for v in res["per_task"].values())
    assert 0 < solved < 2 * len(tasks)

    page = load_payload(out)  # the recorded model (tiny) decodes the tokens
    assert page["per_token"] and all(e["conversations"] for e in page["episodes"])

    run = [sys.executable, "-m", "memrl.cli.main"]
    r = subprocess.run([*run, "rft", out, "--out", tmp_path / "rft", "--lr", "0.01"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"kept {solved} of {2 * len(tasks)} episodes with reward >= 1" in r.stdout and "model tiny" in r.stdout
    before, after = load_model("tiny").state_dict(), load_model(str(tmp_path / "rft")).state_dict()
    assert torch.equal(before["lm_head.weight"], load_model("tiny").state_dict()["lm_head.weight"])
    assert any(not torch.equal(before[k], after[k]) for k in before)

    r = subprocess.run([*run, "sft", "--trajectories", out, "--min-reward", "1", "--model", "tiny",
                        "--out", tmp_path / "sft"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{solved} trajectories" in r.stdout

    r = subprocess.run([*run, "rft", out, "--min-reward", "2", "--out", tmp_path / "none"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "--min-reward 2: no episode" in r.stderr and "Traceback" not in r.stderr


def test_an_unreadable_eval_config_in_a_folder_with_results_is_one_line(tmp_path):
    from memrl.config import ConfigError

    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "workflow": {"name": "memagent"}})
    out = tmp_path / "out"
    check_resume(out, cfg)
    (out / "results.json").write_text("{}")
    (out / "eval_config.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"eval_config.yaml is unreadable \(ParserError\): restore it, or pass "
                                          r"--restart"):
        check_resume(out, cfg)
