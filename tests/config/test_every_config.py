"""Every YAML under configs/ and examples/ loads in the current schema, and trains one step on ``tiny``.

The airline presets, the custom-workflow and the agent-program examples train in their own
tests (tests/train/test_tau2_airline_presets.py, tests/test_plugins.py, tests/gateway); this
file trains the rest, at the smallest budgets, with the model swapped for ``tiny``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from memrl.config import load_config
from memrl.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
ALL = sorted([*(REPO / "configs").glob("*.yaml"), *(REPO / "examples").glob("*/*.yaml")])
TINY = ["model.path=tiny", "model.dtype=float32", "engine.kind=hf", "lora.enabled=false",
        "cluster.rollout_replicas=0", "cluster.trainers=1", "trainer.total_steps=1", "trainer.prompts_per_step=1",
        "trainer.mini_batches=1", "algorithm.n=2", "algorithm.dynamic_sampling=false", "trainer.eval_every=0",
        "trainer.gradient_checkpointing=false", "trainer.micro_batch_tokens=65536", "trainer.mode=sync"]
QA = {"memagent_grpo.yaml", "memagent_paper.yaml", "rememr1_paper.yaml", "memagent_distill.yaml"}
QA_EXTRA = {"memagent_distill.yaml": ["teacher.model=tiny", "teacher.dtype=float32"]}  # the teacher, tiny too
TOOLS = {"tau2_telecom_solo_grpo.yaml": "telecom", "tool_agent_demo.yaml": None, "config.yaml": None}


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_loads_without_old_keys(path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(path.parent))  # an example's plug-ins sit beside it
    cfg = load_config(path)
    assert cfg.workflow.name
    assert "notice" not in capsys.readouterr().err, f"{path} uses keys of an older schema"


def _qa_file(tmp_path: Path) -> Path:
    rows = [{"index": i, "input": f"Which city is number {i}?", "answers": [city],
             "context": f"Document 1:\nCity number {i} is {city}.\n\nDocument 2:\nNothing here.", "num_docs": 2}
            for i, city in enumerate(["Paris", "Rome", "Oslo"])]
    out = tmp_path / "train.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def _trains(path: Path, tmp_path: Path, extra: list[str]) -> None:
    cfg = load_config(path, [*TINY, *extra, f"trainer.output_dir={tmp_path / 'run'}"])
    Trainer(cfg).run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train_rows" in r] == [1], path.name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(QA))
def test_qa_config_trains_one_step_on_tiny(name, tmp_path):
    budgets = ["workflow.options.chunk_tokens=32", "workflow.options.memory_tokens=8",
               "workflow.options.final_tokens=8", "workflow.options.question_tokens=16",
               "workflow.options.max_chunks=2"]
    _trains(REPO / "configs" / name, tmp_path, [f"data.train_file={_qa_file(tmp_path)}", "data.eval_file=null",
                                                *budgets, *QA_EXTRA.get(name, [])])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", [p for p in ALL if p.name in TOOLS and "agent_program" not in str(p)
                                  and "custom_workflow" not in str(p)], ids=lambda p: p.name)
def test_tool_config_trains_one_step_on_tiny(path, tmp_path, monkeypatch, tau2_dir):
    monkeypatch.syspath_prepend(str(path.parent))
    extra = ["workflow.options.max_turns=1", "workflow.options.turn_tokens=8", "env.solo=true",
             "workflow.options.max_total_tokens=32768", "env.nl_judge_model=null"]
    if TOOLS[path.name]:
        extra.append(f"env.data_dir={tau2_dir}")
    sys.modules.pop("smart_home", None)
    _trains(path, tmp_path, extra)
