"""``memrl view`` on broken records: each is skipped with one warning naming file:line, the page is still written."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.view.loader import load_episode, load_payload
from tests.view.test_page import data_of

# (what is broken, how to break a good record) -> the warning's field and words
BREAKS = [
    ("mask shorter", lambda r: r["conversations"][0].update(loss_mask=r["conversations"][0]["loss_mask"][:-2]),
     "conversations[0].loss_mask: has "),
    ("negative id", lambda r: r["conversations"][1]["token_ids"].__setitem__(3, -3),
     "conversations[1].token_ids[3]: token id -3 is negative"),
    ("huge id", lambda r: r["conversations"][0]["token_ids"].__setitem__(0, 10**12),
     "conversations[0].token_ids[0]: token id 1000000000000 is outside"),
    ("float id", lambda r: r["conversations"][0]["token_ids"].__setitem__(1, 2.5),
     "conversations[0].token_ids[1]: token id 2.5 is not an integer"),
]


@pytest.fixture
def broken_run(run_dir, tmp_path):
    """The session's run with step 1's four records broken one way each and a list as an extra line."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    path = run / "rollouts" / "step_000001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(recs) == 3
    good = recs[0]
    lines = []
    for _, brk, _ in BREAKS:
        rec = json.loads(json.dumps(good))
        brk(rec)
        lines.append(json.dumps(rec))
    lines += ["[1, 2, 3]", json.dumps(recs[1])]  # line 5 is a list, line 6 a sound record
    path.write_text("\n".join(lines) + "\n")
    return run, path


@pytest.mark.parametrize("lazy", [False, True])
def test_bad_records_are_skipped_with_a_warning_naming_file_and_line(broken_run, lazy):
    run, path = broken_run
    warnings: list[str] = []
    payload = load_payload(run, "tiny", warn=warnings.append, lazy=lazy)
    step1 = [e for e in payload["episodes"] if e["step"] == 1]
    assert [e["id"] for e in step1] == ["1-5"]  # the sound record keeps its place in the file
    assert len([e for e in payload["episodes"] if e["step"] == 2]) == 3
    assert len(warnings) == 5
    for n, (_, _, words) in enumerate(BREAKS, start=1):
        assert warnings[n - 1].startswith(f"{path}:{n}:{words}"), warnings[n - 1]
    assert warnings[4] == f"{path}:5: a rollout record is a JSON object, got a list (record skipped)"
    # the server's per-episode fetch: a bad record is no episode, a good one still loads
    assert load_episode(run, "1-0", "tiny", warn=warnings.append) is None
    assert load_episode(run, "1-4", "tiny", warn=warnings.append) is None
    assert load_episode(run, "1-5", "tiny", warn=warnings.append)["conversations"]
    for absurd in ("9" * 300 + "-0", "1-" + "9" * 5000):  # were a 500 (file name too long, int digit limit)
        assert load_episode(run, absurd, "tiny", warn=warnings.append) is None


def test_cli_still_writes_the_page(broken_run, tmp_path):
    run, path = broken_run
    out = tmp_path / "view.html"
    r = CliRunner().invoke(app, ["view", str(run), "--tokenizer", "tiny", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and f"wrote {out} (4 episodes" in r.output
    assert sum(1 for line in r.output.splitlines() if line.startswith(f"warning: {path}:")) == 5
    assert len(data_of(out.read_text())["episodes"]) == 4


def test_a_broken_eval_episode_or_rollout_is_skipped(tool_eval_dir, tmp_path):
    out = tmp_path / "eval"
    shutil.copytree(tool_eval_dir, out)
    victim = sorted((out / "episodes").rglob("*.json"))[0]
    victim.write_text("[1, 2]")
    rollout = sorted((out / "rollouts").rglob("*.jsonl"))[1]
    rec = json.loads(rollout.read_text())
    rec["conversations"][0]["token_ids"][0] = -1
    rollout.write_text(json.dumps(rec) + "\n")
    warnings: list[str] = []
    payload = load_payload(out, "tiny", warn=warnings.append)
    assert len(payload["episodes"]) == 16
    assert f"{victim}: expected a JSON object, got list (skipped)" in warnings
    assert any(w.startswith(f"{rollout}:1:conversations[0].token_ids[0]: token id -1 is negative") for w in warnings)
    (out / "results.json").write_text("[]")
    assert load_payload(out, "tiny", warn=warnings.append)["results"] is None


def test_trainer_logprobs_that_do_not_line_up_are_left_out_not_the_record(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    path = run / "rollouts" / "step_000001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[0]["conversations"][0]["trainer_logprobs"] = recs[0]["conversations"][0]["trainer_logprobs"][:-3]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    warnings: list[str] = []
    ep = load_payload(run, "tiny", warn=warnings.append)["episodes"][0]
    assert ep["id"] == "1-0" and not warnings
    first, second = ep["conversations"][0], ep["conversations"][1]
    assert "max_mismatch" not in first and all(s.get("tlp") is None for s in first["spans"] if s["kind"] == "gen")
    assert "max_mismatch" in second


def test_a_damaged_metrics_row_is_skipped_and_the_run_still_shows(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) >= 2
    lines[0] = lines[0][:20]  # not the last line (a torn last line is the usual, quieter case)
    path.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    payload = load_payload(run, "tiny", warn=warnings.append)
    assert len(payload["metrics"]) == len(lines) - 1 and payload["episodes"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}:1: ") and warnings[0].endswith("(skipped)")


def test_a_damaged_eval_rollout_record_is_said(tool_eval_dir, tmp_path):
    out = tmp_path / "eval"
    shutil.copytree(tool_eval_dir, out)
    rollout = sorted((out / "rollouts").rglob("*.jsonl"))[0]
    rollout.write_text('{"sample_id": "x", "convers')
    name = rollout.relative_to(out / "rollouts").with_suffix("").as_posix()
    warnings: list[str] = []
    ep = load_episode(out, name, "tiny", warn=warnings.append)
    assert ep is not None and warnings == [f"{rollout}:1: not a JSON record (the per-token view of this episode is "
                                           "not shown)"]


def test_a_run_that_has_logged_nothing_yet_is_an_empty_run(tmp_path):
    run = tmp_path / "starting"
    run.mkdir()
    from memrl.train.preflight import RUN_CONFIG_HEADER

    (run / "config.yaml").write_text(RUN_CONFIG_HEADER + "model:\n  path: tiny\n")  # as memrl train records it
    payload = load_payload(run, None)
    assert payload["kind"] == "run" and payload["episodes"] == [] and payload["metrics"] == []
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("model: {path: tiny}\n")  # not a run: the user's own file
    with pytest.raises(ValueError, match="neither a training run"):
        load_payload(tmp_path / "mine", None)


@pytest.mark.parametrize("ep_id", ["3/0\x00", "x" * 5000, "../../etc/passwd"])
def test_an_episode_id_no_file_can_have_is_no_episode(tmp_path, ep_id):
    (tmp_path / "episodes" / "3").mkdir(parents=True)
    (tmp_path / "episodes" / "3" / "0.json").write_text("{}")
    assert load_episode(tmp_path, ep_id, "tiny", warn=lambda m: None) is None
