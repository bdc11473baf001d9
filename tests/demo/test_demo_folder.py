"""A demo folder remembers its task and seed: a resumed demo never mixes two seeds' (or tasks') stages."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.data.outdir import MANIFEST
from memrl_demo.folder import CLAIM, claim_folder
from memrl_demo.run import DEMO_OUTPUTS


def test_a_folder_is_claimed_by_its_first_demo_and_refuses_another_seed_or_task(tmp_path):
    claim_folder(tmp_path, "needle", 0, DEMO_OUTPUTS)
    assert json.loads((tmp_path / CLAIM).read_text()) == {"task": "needle", "seed": 0}
    assert CLAIM in json.loads((tmp_path / MANIFEST).read_text())["entries"]  # --fresh removes it
    claim_folder(tmp_path, "needle", 0, DEMO_OUTPUTS)  # the same demo resumes
    with pytest.raises(ValueError, match=r"holds the needle demo of seed 0; --task needle --seed 1 needs another"):
        claim_folder(tmp_path, "needle", 1, DEMO_OUTPUTS)
    with pytest.raises(ValueError, match="holds the needle demo of seed 0; --task tools --seed 0"):
        claim_folder(tmp_path, "tools", 0, DEMO_OUTPUTS)


def test_a_folder_from_before_the_record_is_judged_by_its_summary(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"seed": 2, "heldout_tickets": 16}))
    with pytest.raises(ValueError, match="holds the tools demo of seed 2"):
        claim_folder(tmp_path, "tools", 0, DEMO_OUTPUTS)
    claim_folder(tmp_path, "tools", 2, DEMO_OUTPUTS)
    assert json.loads((tmp_path / CLAIM).read_text()) == {"task": "tools", "seed": 2}
    bare = tmp_path / "bare"
    (bare / "data").mkdir(parents=True)  # stages but no summary yet (interrupted before RL): nothing to go by
    claim_folder(bare, "needle", 5, DEMO_OUTPUTS)
    (bare / CLAIM).write_text("[1]")
    with pytest.raises(ValueError, match="not a demo record"):
        claim_folder(bare, "needle", 5, DEMO_OUTPUTS)


def test_memrl_demo_refuses_another_seed_in_one_line(tmp_path):
    claim_folder(tmp_path, "needle", 0, DEMO_OUTPUTS)
    r = CliRunner().invoke(app, ["demo", "--seed", "1", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{tmp_path} holds the needle demo of seed 0" in " ".join(r.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CLAIM, MANIFEST])
