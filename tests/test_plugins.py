"""Plug-ins by import path: workflows and rewards of your own, checked when the config loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.config import ConfigError, load_config
from memrl.plugins import REWARDS, WORKFLOWS, load_object
from memrl.workflows import get_workflow

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "custom_workflow"


def test_builtins_come_from_the_same_registry():
    assert set(WORKFLOWS.names) == {"memagent", "rememr1", "full_context", "tool_agent", "agent"}
    from memrl.workflows.builtins import MemAgent

    assert type(get_workflow("memagent")) is MemAgent
    assert REWARDS.get("em")("\\boxed{Paris}", sample={"answers": ["paris"]}, answer="Paris") == 1.0


def test_bad_names_fail_when_the_config_loads():
    with pytest.raises(ConfigError, match=r"workflow.name: unknown workflow 'memagnet' \(did you mean 'memagent'\?\): "
                                          "choose memagent"):
        load_config(None, ["workflow.name=memagnet"])
    with pytest.raises(ConfigError, match="cannot import no_such_pkg"):
        load_config(None, ["workflow.name=no_such_pkg.mod:fn"])
    with pytest.raises(ConfigError, match="has no attribute nope"):
        load_config(None, ["workflow.reward=memrl.rewards.builtin:nope"])
    with pytest.raises(ConfigError, match="a workflow must be a memrl.Workflow subclass"):
        load_config(None, ["workflow.name=memrl.rewards.builtin:em"])
    with pytest.raises(ValueError, match="import path"):
        load_object("just_a_name", "workflow")


def test_example_plugins_load_and_score(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cfg = load_config(EXAMPLE / "config.yaml", [])
    assert cfg.workflow.name == "say_word:SayWord"
    reward = REWARDS.get("say_word:mentions_word")
    assert reward("I say APPLE.", sample={"word": "apple"}) == 1.0 and reward("no", sample={"word": "apple"}) == 0.0


def test_example_is_small_and_its_samples_have_no_dummy_fields():
    code = [x for x in (EXAMPLE / "say_word.py").read_text().splitlines()
            if x.strip() and not x.strip().startswith("#")]
    body = code[code.index(next(x for x in code if x.startswith("from memrl"))):]
    assert len(body) <= 15, body
    assert all(set(json.loads(x)) == {"word"} for x in (EXAMPLE / "words.jsonl").read_text().splitlines())


@pytest.mark.parametrize("config", ["config.yaml", "recall.yaml"])
def test_example_trains_from_outside_the_source_tree(tmp_path, config):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE)}
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", EXAMPLE / config,
                        "trainer.total_steps=2", f"trainer.output_dir={tmp_path / 'run'}",
                        f"data.train_file={EXAMPLE / 'words.jsonl'}"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows if "reward" in m] == [1, 2]
    assert (tmp_path / "run" / "rollouts" / "step_000002.jsonl").is_file()


DOMAIN_EXAMPLE = REPO / "examples" / "custom_domain"


def test_builtin_domains_come_from_the_registry():
    from memrl.envs.domain import LIBRARY, load_domain
    from memrl.plugins import DOMAINS

    assert set(DOMAINS.names) == {"library", "mock", "retail", "airline", "telecom", "telecom-workflow",
                                  "banking_knowledge"}
    assert DOMAINS.get("library") is LIBRARY
    lib = load_domain("library")
    assert lib.name == "library" and len(lib.get_tasks("test")) > 0
    with pytest.raises(ValueError, match="no tools for domain 'hotel'"):
        load_domain("hotel")
    with pytest.raises(ValueError, match="domain 'airline' is not bundled; set env.data_dir"):
        load_domain("airline")


def test_bad_domains_fail_when_the_config_loads(tmp_path, monkeypatch):
    (tmp_path / "half_domain.py").write_text(
        "class NoTasks:\n    def __init__(self, data_dir=None, tool_options=None):\n        pass\n"
        "    def new_env(self, solo=False):\n        return None\n"
        "NOT_A_FACTORY = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"env.domain: unknown domain 'libary' \(did you mean 'library'\?\): "
                                          "choose library"):
        load_config(None, ["env.domain=libary"])
    with pytest.raises(ConfigError, match="NoTasks lacks get_tasks"):
        load_config(None, ["env.domain=half_domain:NoTasks"])
    with pytest.raises(ConfigError, match="a domain must be a factory"):
        load_config(None, ["env.domain=half_domain:NOT_A_FACTORY"])
    with pytest.raises(ConfigError, match="toolkit 'half_domain:NoTasks' is not a memrl.envs.Toolkit subclass"):
        (tmp_path / "bad_tools.py").write_text(
            "from memrl.envs.domain import ToolDomain\nD = ToolDomain('d', 'half_domain:NoTasks')\n")
        load_config(None, ["env.domain=bad_tools:D"])


def test_a_domain_class_is_built_with_the_env_settings(tmp_path, monkeypatch):
    """Any class with new_env and get_tasks is a domain: here one that serves two library tasks."""
    (tmp_path / "two_tasks.py").write_text(
        "from memrl.envs.domain import load_domain\n"
        "class TwoTasks:\n"
        "    def __init__(self, data_dir=None, tool_options=None):\n"
        "        self.inner = load_domain('library', data_dir, tool_options=tool_options)\n"
        "        self.seen = (data_dir, tool_options)\n"
        "    def new_env(self, solo=False):\n        return self.inner.new_env(solo)\n"
        "    def get_tasks(self, split=None):\n        return self.inner.get_tasks(split)[:2]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from memrl.envs.domain import load_domain
    from memrl.workflows import load_samples

    cfg = load_config(None, ["workflow.name=tool_agent", "env.domain=two_tasks:TwoTasks"])
    assert load_domain(cfg.env.domain).seen == (None, {})
    samples = load_samples(cfg, "train")
    assert len(samples) == 2 and samples[0].domain.new_env(solo=True).tools.tools


def test_example_domain_loads_and_its_gold_actions_score_one(monkeypatch):
    monkeypatch.syspath_prepend(str(DOMAIN_EXAMPLE))
    from memrl.envs.domain import load_domain
    from memrl.envs.evaluate import replay_gold

    cfg = load_config(DOMAIN_EXAMPLE / "config.yaml", [])
    domain = load_domain(cfg.env.domain, cfg.env.data_dir)
    tasks = domain.get_tasks(None)
    assert len(domain.get_tasks("train")) == 12 and len(domain.get_tasks("test")) == 4
    assert [replay_gold(domain, t, solo=True).reward for t in tasks] == [1.0] * len(tasks)


def test_example_domain_trains_from_outside_the_source_tree(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(DOMAIN_EXAMPLE)}
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", DOMAIN_EXAMPLE / "config.yaml",
                        "trainer.total_steps=2", f"trainer.output_dir={tmp_path / 'run'}"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows if "reward" in m] == [1, 2]
    record = json.loads((tmp_path / "run" / "rollouts" / "step_000001.jsonl").read_text().splitlines()[0])
    assert "smart-home help desk" in record["conversations"][0]["text"]["prompt"].lower()
    # the run's rollouts feed memrl rft (the model recorded in the run's config.yaml, tiny)
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "rft", tmp_path / "run", "--min-reward", "0",
                        "--out", tmp_path / "rft"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = sum(len(f.read_text().splitlines()) for f in (tmp_path / "run" / "rollouts").glob("*.jsonl"))
    assert f"kept {saved} of {saved} episodes" in r.stdout and (tmp_path / "rft" / "config.json").is_file()
