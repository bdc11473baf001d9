"""``memrl plot`` over several runs: overlaid curves, the summary table, and one-line refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.io.labels import folder_labels
from memrl.train.plots import pick_keys, smoothed, summary


def write_run(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def two_runs(tmp_path):
    a = write_run(tmp_path / "grpo" / "run", [{"step": s, "reward": r, "f1": r / 2} for s, r in
                                              [(1, 0.1), (2, 0.5), (3, 0.4)]])
    b = write_run(tmp_path / "gigpo" / "run", [{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.9},
                                               {"step": 2, "eval/accuracy": 50.0}])
    return a, b


def test_smoothed_is_a_trailing_mean():
    assert smoothed([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert smoothed([1.0, 2.0, 3.0, 4.0], 3) == [1.0, 1.5, 2.0, 3.0]
    assert smoothed([5.0, 7.0], 1) == [5.0, 7.0]


def test_a_non_finite_value_neither_erases_the_curve_nor_wins_the_max():
    """A diverging run logs grad_norm NaN (every update of a step skipped) or inf: the running sum stayed NaN for
    the rest of the run, and max() with a NaN first reported 'max nan'."""
    nan, inf = float("nan"), float("inf")
    assert smoothed([1.0, nan, 3.0, 5.0], 2) == [1.0, 1.0, 3.0, 4.0]
    assert smoothed([inf, 2.0], 2) == [pytest.approx(float("nan"), nan_ok=True), 2.0]
    rows = [{"step": 1, "reward": nan}, {"step": 2, "reward": 0.5}, {"step": 3, "reward": 0.9},
            {"step": 4, "reward": 0.7}]
    assert summary(["r"], [rows], ["reward"]) == [["r", "4", "0.7 (max 0.9 @ 3; 1 non-finite)"]]
    assert summary(["r"], [rows[:1]], ["reward"])[0][2] == "nan (no finite value)"


def test_labels_take_parents_until_the_runs_differ(tmp_path):
    assert folder_labels([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert folder_labels([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]


def test_summary_gives_last_and_best_with_its_step(two_runs):
    rows = [[{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.5}, {"step": 3, "reward": 0.4}], [{"step": 4}]]
    assert summary(["a", "b"], rows, ["reward"]) == [["a", "3", "0.4 (max 0.5 @ 2)"], ["b", "4", "-"]]


def test_keys_default_to_those_present_and_a_typo_names_the_closest(two_runs):
    runs = [[{"step": 1, "reward": 0.1, "f1": 0.2, "eval/accuracy": 3.0, "flag": True, "kl": 0.0}]]
    assert pick_keys(runs, None) == ["reward", "eval/accuracy"]  # kl is 0 throughout: left out unless asked
    assert pick_keys(runs, ["kl"]) == ["kl"]
    stuck = [[{"step": 1, "reward": 0.0, "kl": 0.0, "entropy": 0.0, "response_tokens": 5.0}]]
    assert pick_keys(stuck, None) == ["reward", "response_tokens"]  # a reward of 0 throughout is what to see
    assert pick_keys(runs, ["f1", "f1"]) == ["f1"]
    with pytest.raises(ValueError, match=r"--metric 'f11': no run has it; did you mean 'f1'\?"):
        pick_keys(runs, ["f11"])
    with pytest.raises(ValueError, match="none of reward"):
        pick_keys([[{"step": 1, "loss": 2.0}]], None)


def test_two_runs_overlaid_with_their_table(two_runs, tmp_path):
    out = tmp_path / "cmp.png"
    r = CliRunner().invoke(app, ["plot", *map(str, two_runs), "--out", str(out), "-m", "reward", "-m", "f1",
                                 "--smooth", "2"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000
    lines = r.output.splitlines()
    assert lines[0] == f"wrote {out}"
    grpo = next(ln for ln in lines if ln.startswith("grpo/run"))
    gigpo = next(ln for ln in lines if ln.startswith("gigpo/run"))
    assert "0.4 (max 0.5 @ 2)" in grpo and "0.2 (max 0.25 @ 2)" in grpo
    assert "0.9 (max 0.9 @ 2)" in gigpo and gigpo.rstrip().endswith("-")  # gigpo has no f1
    assert sorted(p.name for p in two_runs[0].iterdir()) == ["metrics.jsonl"]


def test_refusals_are_one_line(two_runs, tmp_path):
    r = CliRunner().invoke(app, ["plot", *map(str, two_runs)])
    assert r.exit_code == 2 and r.output.strip() == ("error: 2 folders: say where the comparison goes with "
                                                     "--out PATH.png (nothing is written into them)")
    r = CliRunner().invoke(app, ["plot", str(two_runs[0]), "-m", "rewrad"])
    assert r.exit_code == 2 and "did you mean 'reward'?" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(app, ["plot", str(two_runs[0]), "--smooth", "0"])
    assert r.exit_code == 2 and r.output.strip() == "error: --smooth must be at least 1 (steps averaged), not 0"
    r = CliRunner().invoke(app, ["plot", str(tmp_path / "nope"), "--out", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and r.output.strip() == (f"error: {tmp_path / 'nope'}: neither a training run (no "
                                                     "metrics.jsonl) nor an eval folder (no results.json)")
    assert not (tmp_path / "x.png").exists()
