"""Plug-ins declared as entry points by installed packages: named like built-ins, no import path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.config.registry import ADV_ESTIMATORS
from memrl.installed_plugins import declared
from memrl.plugins import DOMAINS, REWARDS, WORKFLOWS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "custom_workflow"

ENTRY_POINTS = """\
[memrl.workflows]
say_it = say_word:SayWord

[memrl.rewards]
mentions = say_word:mentions_word
em = epdemo_algo:always_one
twice = epdemo_algo:always_one

[memrl.adv_estimators]
centred = epdemo_algo:centred

[memrl.domains]
bare = epdemo_algo
"""

ALGO = """\
def centred(scores, group_ids, *, epsilon):
    return scores - scores.mean()


def always_one(text, *, sample, answer=None, **kw):
    return 1.0
"""


def _dist(site: Path, name: str, entry_points: str) -> None:
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path holding two installed distributions (as pip leaves them) and their code."""
    site = tmp_path / "site"
    site.mkdir()
    _dist(site, "epdemo", ENTRY_POINTS)
    _dist(site, "epother", "[memrl.rewards]\ntwice = say_word:mentions_word\n")
    (site / "epdemo_algo.py").write_text(ALGO)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))
    declared.cache_clear()
    yield site
    declared.cache_clear()


def test_installed_names_load_like_builtins(site):
    cfg = load_config(None, ["workflow.name=say_it", "algorithm.adv_estimator=centred"])
    assert cfg.workflow.name == "say_it"
    assert WORKFLOWS.get("say_it").__name__ == "SayWord"
    assert REWARDS.get("mentions")("I say APPLE", sample={"word": "apple"}) == 1.0
    scores = torch.tensor([1.0, 0.0, 2.0])
    assert ADV_ESTIMATORS.get("centred")(scores, [0, 0, 0], epsilon=1e-6).tolist() == [0.0, -1.0, 1.0]


def test_a_builtin_name_wins_over_an_installed_one(site):
    em = REWARDS.get("em")
    assert em.__module__ == "memrl.rewards.builtin"
    assert em("\\boxed{x}", sample={"answers": ["y"]}, answer="x") == 0.0  # the package's would give 1.0


def test_bad_installed_names_fail_in_one_line_naming_the_packages(site):
    with pytest.raises(ValueError, match=r"reward 'twice' is declared by more than one installed package: "
                                         r"epdemo \(epdemo_algo:always_one\); epother \(say_word:mentions_word\)"):
        REWARDS.get("twice")
    with pytest.raises(ValueError, match=r"domain 'bare': the entry point of epdemo names module epdemo_algo "
                                         r"but no object"):
        DOMAINS.get("bare")
    with pytest.raises(ConfigError, match=r"unknown advantage estimator 'centered' \(did you mean 'centred'\?\): "
                                          r"choose grpo, .*, centred or an import path"):
        load_config(None, ["algorithm.adv_estimator=centered"])
    with pytest.raises(ConfigError, match=r"unknown workflow 'say_that' \(did you mean 'say_it'\?\): choose memagent, "
                                          r".*, agent, say_it or"):
        load_config(None, ["workflow.name=say_that"])


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE)])}


def test_config_plugins_lists_what_is_installed(site):
    cmd = [sys.executable, "-m", "memrl.cli.main", "config", "plugins"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(site), check=True).stdout
    assert "  say_it = say_word:SayWord  from epdemo\n" in out
    assert "  em = epdemo_algo:always_one  from epdemo  (shadowed by the built-in of the same name)" in out
    rows = json.loads(subprocess.run(cmd + ["--format", "json"], capture_output=True, text=True, timeout=120,
                                     env=_env(site), check=True).stdout)
    rewards = next(r for r in rows if r["kind"] == "reward")
    assert rewards["group"] == "memrl.rewards" and "em" in rewards["builtin"]
    assert {i["package"] for i in rewards["installed"] if i["name"] == "twice"} == {"epdemo", "epother"}


def test_an_installed_workflow_trains_by_its_name(site, tmp_path):
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", EXAMPLE / "config.yaml",
                        "workflow.name=say_it", "algorithm.adv_estimator=centred", "trainer.total_steps=2",
                        f"trainer.output_dir={tmp_path / 'run'}", f"data.train_file={EXAMPLE / 'words.jsonl'}"],
                       capture_output=True, text=True, timeout=600, env=_env(site), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "name: say_it" in saved and "adv_estimator: centred" in saved
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows if "reward" in m] == [1, 2]
