"""Every YAML under configs/ and examples/ loads in the current schema, and trains one step on ``tiny``.

The tau2 presets, the custom-workflow and the agent-program examples train in their own tests
(tests/train/test_tau2_preset.py with a tokenizer trained on telecom's texts, so its ~37K-character
solo prompt is not ~30K tiny-model tokens; tests/train/test_tau2_airline_presets.py,
tests/test_plugins.py, tests/gateway); this
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
TOOLS = {"tool_agent_demo.yaml", "config.yaml"}


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


TOOL_PATHS = [p for p in ALL if p.name in TOOLS and "agent_program" not in str(p) and "custom_workflow" not in str(p)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", TOOL_PATHS, ids=lambda p: p.name)
def test_tool_config_trains_one_step_on_tiny(path, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(path.parent))
    extra = ["workflow.options.max_turns=1", "workflow.options.turn_tokens=8", "env.solo=true",
             "workflow.options.max_total_tokens=32768", "env.nl_judge_model=null"]
    sys.modules.pop("smart_home", None)
    _trains(path, tmp_path, extra)


def test_every_config_trains_in_some_test():
    """A config this file does not train is trained by a test of its own, which names it."""
    others = "".join(p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("test_*.py")
                     if p.name != Path(__file__).name)
    names = [p.name for p in ALL]
    here = {p for p in ALL if p.parent.name == "configs" and p.name in QA} | set(TOOL_PATHS)
    untrained = [p for p in ALL if p not in here
                 and (p.name if names.count(p.name) == 1 else p.parent.name) not in others]
    assert not untrained, [str(p.relative_to(REPO)) for p in untrained]
