"""GRPO on the tool agent through the same trainer (built-in library domain, CPU)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from memrl.config import MemRLConfig
from memrl.envs.domain import load_domain
from memrl.envs.messages import ToolCall
from memrl.models.resolve import load_tokenizer
from memrl.testing import ScriptedEngine
from memrl.train.trainer import Trainer
from memrl.text.tool_calls import render_call

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def coin_agent(tok, seed=0) -> ScriptedEngine:
    """Makes the task's gold calls or just answers in text, at random: rewards vary inside groups."""
    rng = random.Random(seed)
    gold = {t.ticket: t.evaluation_criteria.actions for t in load_domain("library").tasks}

    def reply(prompt, params):
        text = tok.decode(prompt)
        if text.rstrip().endswith("</tool_response><|im_end|>\n<|im_start|>assistant"):
            out = "Done."
        elif rng.random() < 0.5:
            ticket = text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
            out = "\n".join(render_call(ToolCall(a.name, a.arguments)) for a in gold[ticket])
        else:
            out = "I cannot do that."
        return tok.encode(out, add_special_tokens=False) + [tok.eos_token_id]

    return ScriptedEngine(reply)


def test_grpo_on_tool_agent_logs_validity_and_updates(tmp_path):
    cfg = MemRLConfig.model_validate({
        "model": {"path": "tiny"}, "engine": {"device": "cpu"},
        "workflow": {"name": "tool_agent", "max_turns": 3, "turn_tokens": 256},
        "env": {"domain": "library", "train_split": "train"},
        "algorithm": {"n": 4}, "lora": {"enabled": True, "r": 4},
        "trainer": {"lr": 1e-3, "total_steps": 2, "prompts_per_step": 4, "save_every": 1, "seed": 1,
                    "output_dir": str(tmp_path / "run")},
    })
    trainer = Trainer(cfg, engine=coin_agent(load_tokenizer("tiny")))
    trainer.run()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert {"reward", "tool_call_validity", "turns", "tool_calls", "db_match", "completed"} <= set(m)
        assert 0 <= m["tool_call_validity"] <= 1 and m["completed"] == 1.0
    assert any(m["grad_norm"] > 0 for m in lines)  # rewards varied inside groups, so the policy moved
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_000001", "step_000002"]


def test_demo_config_runs_on_cpu_with_the_real_engine(tmp_path):
    out = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", str(REPO / "configs/tool_agent_demo.yaml"),
                          "trainer.total_steps=1", "trainer.eval_every=1", "trainer.eval_samples=2",
                          "trainer.prompts_per_step=2", "algorithm.n=2", "workflow.max_turns=2",
                          f"trainer.output_dir={tmp_path / 'run'}"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done: step 1" in out.stdout
    m = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert {"reward", "made_tool_call", "eval/accuracy"} <= set(m)
    # the valid share of the calls made: logged and shown when an episode called a tool, absent when none did
    assert ("tool_call_validity" in m) == ("tool-valid" in out.stderr) == (m["made_tool_call"] > 0)
