"""The demo prints the same numbers on every run: two short runs give identical metrics and weights."""

import json

import torch
from typer.testing import CliRunner

from memrl_demo.run import DemoScale, SftPhase, run_demo
from tests.demo.conftest import copy_of

SMALL = DemoScale(train_docs=16, heldout_docs=6, sft_phases=(SftPhase("spot", 3e-3, 2, 24, (0, 1)),), prompts_per_step=2,
                  episodes_per_prompt=4, eval_samples=6, check_rounds=1)
TIMING = ("time/", "tokens_per_s", "seconds")


def _metrics(run):
    rows = [json.loads(line) for line in (run / "rl" / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def test_two_short_runs_are_identical(tmp_path, small_demo):
    """Run ``a`` is the session's shared run (tests/demo/conftest.py), made earlier in this process."""
    a_dir, a = small_demo
    threads = torch.get_num_threads()
    b = run_demo(tmp_path / "b", rl_steps=2, seed=3, scale=SMALL)
    drop = lambda s: {k: v for k, v in s.items() if k not in ("seconds", "cpu_seconds")}  # noqa: E731
    assert drop(a) == drop(b)
    ma, mb = _metrics(a_dir), _metrics(tmp_path / "b")
    assert len(ma) == 3 and ma == mb  # the step-0 eval and both GRPO steps, loss and grad norm included
    wa = (a_dir / "sft_model" / "model.safetensors").read_bytes()
    assert wa == (tmp_path / "b" / "sft_model" / "model.safetensors").read_bytes()
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()  # restored
    assert (a_dir / "data" / "train.jsonl").read_text() != ""


def test_fresh_refuses_a_folder_with_user_files(tmp_path):
    from memrl.cli.main import app

    (tmp_path / "thesis.tex").write_text("mine")
    (tmp_path / "rl").mkdir()
    r = CliRunner().invoke(app, ["demo", "--fresh", "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.strip().startswith(f"error: --fresh: refusing to delete the contents of {tmp_path}: it holds")
    assert (tmp_path / "thesis.tex").read_text() == "mine" and (tmp_path / "rl").is_dir()


def test_async_demo_reuses_the_warm_start_and_trains_asynchronously(tmp_path, small_demo):
    copy_of(small_demo, tmp_path)  # what run_demo(tmp_path, rl_steps=2, seed=3, scale=SMALL) leaves
    sft = (tmp_path / "sft_model" / "model.safetensors").read_bytes()
    summary = run_demo(tmp_path, rl_steps=2, seed=3, scale=SMALL, asynchronous=True, max_staleness=1)
    assert (tmp_path / "sft_model" / "model.safetensors").read_bytes() == sft  # the same warm start, reused
    assert summary["mode"] == "async" and summary["max_staleness"] == 1
    assert json.loads((tmp_path / "summary_async.json").read_text()) == summary
    assert json.loads((tmp_path / "summary.json").read_text())["mode"] == "sync"  # the sync run is kept
    rows = [json.loads(x) for x in (tmp_path / "rl_async" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "train_rows" in r]
    assert len(trained) == 2 and all(r["train_rows"] > 0 and "async/staleness_1" in r for r in trained)
    assert (tmp_path / "rl_async" / "curves.png").is_file()
