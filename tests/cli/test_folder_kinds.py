"""A training run and an eval folder are never mixed up: each command refuses the other's folder in one line,
a run folder given as a model says how to make it one, and an eval whose start failed leaves no lock behind."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.models.resolve import ModelNotFoundError, load_model, load_tokenizer, resolve_model_path


def one_line_error(args):
    r = CliRunner().invoke(app, [*map(str, args)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    return " ".join(r.output.split())


def test_memrl_eval_refuses_a_training_runs_folder(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    said = one_line_error(["eval", "--workflow", "tool_agent", "--domain", "library", "--split", "test",
                           "--model", "tiny", "--out", tmp_path])
    assert f"--out {tmp_path} is a training run" in said and "give another --out" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]  # nothing written there


@pytest.mark.parametrize("load", [load_model, load_tokenizer])
def test_a_model_path_that_is_nothing_or_not_a_model_says_so(tmp_path, monkeypatch, load):
    monkeypatch.chdir(tmp_path)
    for spec in (str(tmp_path / "nomodel"), "./nomodel", "runs/x/model"):
        with pytest.raises(ModelNotFoundError, match=f"^{re.escape(spec)}: no such folder \\(a model is"):
            load(spec)
    (tmp_path / "empty").mkdir()
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ModelNotFoundError, match="^empty: the folder holds no .*not a Hugging Face model folder"):
        load("empty")
    with pytest.raises(ModelNotFoundError, match="^weights.bin: is a file, not a model folder"):
        load("weights.bin")


def test_memrl_train_refuses_an_eval_folder(tmp_path):
    (tmp_path / "eval_config.yaml").write_text("model: {}\n")
    said = one_line_error(["train", f"trainer.output_dir={tmp_path}", "model.path=tiny"])
    assert f"trainer.output_dir={tmp_path} is an eval folder" in said


def test_a_run_folder_or_checkpoint_as_a_model_says_how_to_export_it(tmp_path):
    step = tmp_path / "run" / "checkpoints" / "step_000020"
    step.mkdir(parents=True)
    with pytest.raises(ModelNotFoundError, match=r"is a memrl training run, not a model folder: `memrl export"):
        resolve_model_path(str(tmp_path / "run"))
    with pytest.raises(ModelNotFoundError, match=r"training run checkpoint.*--step 20 --out DIR"):
        resolve_model_path(str(step))
    (step / "config.json").write_text("{}")  # a folder that is a model after all passes through
    assert resolve_model_path(str(step)) == str(step)
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)  # any other folder: transformers decides


def test_an_eval_whose_start_failed_does_not_hold_its_folder(tmp_path):
    from tests.eval.helpers import needle_eval_dir

    out, data = tmp_path / "e", needle_eval_dir(tmp_path / "data", n=3, count=2)
    base = ["eval", "--data", data, "--docs", "3", "--out", out]
    said = one_line_error([*base, "--model", str(tmp_path / "no_such_model")])
    assert "no_such_model" in said and (out / "eval_config.yaml").is_file()  # written before the model loaded
    r = CliRunner().invoke(app, [*map(str, base), "--model", "tiny"])  # the fix is not refused as "a different config"
    assert r.exit_code == 0, r.output
    assert (out / "results.json").is_file()
    said = one_line_error([*base, "--model", "tiny", "workflow.chunk_tokens=999"])  # results now: protected
    assert "holds results of a different config (changed: workflow.options.chunk_tokens (" in said
    assert "-> 999)" in said and "workflow.options," not in said  # the option that moved, not its section


@pytest.mark.parametrize("flag, value, said", [("--epochs", "0", "--epochs 0: must be at least 1"),
                                                ("--lr", "-1", "--lr -1: must be a positive finite number"),
                                                ("--lr", "inf", "--lr inf: must be a positive finite number"),
                                                ("--batch-rows", "0", "--batch-rows 0: must be at least 1")])
def test_sft_and_rft_refuse_a_flag_no_training_can_run_with_before_writing(tmp_path, flag, value, said):
    src = tmp_path / "rollouts.jsonl"
    src.write_text("")
    for cmd in (["sft", "--trajectories", src, "--model", "tiny"], ["rft", src, "--model", "tiny"]):
        out = tmp_path / "out"
        assert said in one_line_error([*cmd, "--out", out, flag, value])
        assert not out.exists()


def test_a_nan_reward_floor_is_refused_before_anything_is_read(tmp_path):
    for cmd in (["sft", "--trajectories", tmp_path / "none.jsonl", "--model", "tiny"], ["rft", tmp_path / "none.jsonl"]):
        said = one_line_error([*cmd, "--out", tmp_path / "m", "--min-reward", "nan"])
        assert said == "error: --min-reward nan: give a number (no reward is >= nan, so nothing would be kept)"


def test_small_mistakes_are_named_in_one_line(tmp_path):
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "a.yaml").write_text("model: {path: tiny}\n")
    said = one_line_error(["train", str(tmp_path / "cfgs")])
    assert "is a folder: give one YAML file" in said and "a.yaml" in said
    assert "model.path: String should have at least 1 character" in one_line_error(
        ["train", "model.path=", f"trainer.output_dir={tmp_path / 'r'}"])
    assert "--max-staleness applies with --async only" in " ".join(
        CliRunner().invoke(app, ["demo", "--max-staleness", "3", "--out", str(tmp_path / "d")]).output.split())
    assert not (tmp_path / "d").exists()
    (tmp_path / "file").write_text("x")
    said = one_line_error(["tinker", "--model", "tiny", "--state-dir", tmp_path / "file"])
    assert f"--state-dir {tmp_path / 'file'} is a file, not a folder" in said
    (tmp_path / "notes").mkdir()
    assert "no *.jsonl rollout files" in one_line_error(["rft", tmp_path / "notes", "--out", tmp_path / "m"])
    said = one_line_error(["train", "configs/memagent_grpo.yaml", "model.path=tiny", f"data.train_file={tmp_path / 'notes'}",
                           f"trainer.output_dir={tmp_path / 'r'}"])
    assert f"data.train_file: {tmp_path / 'notes'} is a folder; give the training file in it" in said


def test_a_page_or_plot_written_over_a_folder_or_of_no_step_is_refused(tmp_path):
    from memrl.io.atomic import atomic_write

    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a folder; name a file to write"):
        with atomic_write(tmp_path) as fh:
            fh.write("x")
    assert [p.name for p in tmp_path.iterdir()] == []  # no temp file left either
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "rollouts" / "step_000001.jsonl").write_text("")
    (run / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    said = one_line_error(["view", run, "--steps", "99", "--out", tmp_path / "p.html"])
    assert f"--steps 99: no saved rollout step matches; {run} has steps 1" in said


def test_a_bad_model_flag_is_named_as_the_flag(tmp_path):
    """serve, tinker and sft take the model as --model: a failure says --model, not 'tokenizer' or 'model'."""
    traj = tmp_path / "t.jsonl"
    conv = {"token_ids": [1, 2, 3], "loss_mask": [0, 0, 1], "logprobs": [0.0, 0.0, -1.0], "reward": 1.0}
    traj.write_text(json.dumps({"sample_id": "a", "group_id": "a", "reward": 1.0, "conversations": [conv]}) + "\n")
    (tmp_path / "empty").mkdir()
    for args in (["serve", "--model", tmp_path / "nope", "--port", "1"],
                 ["tinker", "--model", tmp_path / "nope", "--state-dir", tmp_path / "s"],
                 ["sft", "--trajectories", traj, "--model", tmp_path / "nope", "--out", tmp_path / "m"]):
        said = one_line_error(args)
        assert f"error: --model {tmp_path / 'nope'}: no such folder" in said, said
    said = one_line_error(["serve", "--model", tmp_path / "empty"])
    assert f"--model {tmp_path / 'empty'}: the folder holds no tokenizer files" in said
    with pytest.raises(ModelNotFoundError, match="^--model x/: no such folder"):
        load_model("x/", field="--model")


def test_a_run_whose_model_does_not_load_leaves_no_run_folder(tmp_path):
    """The config recorded before the model loads goes with the folder the start created; a folder the user made
    keeps it (it is replaced at the next start, which has no checkpoint to compare it with)."""
    import yaml

    from tests.train.helpers import config

    cfg = config(tmp_path).model_dump(mode="json")
    cfg["model"]["path"] = str(tmp_path / "no_model")
    for out, made in ((tmp_path / "runs" / "new", False), (tmp_path / "mine", True)):
        if made:
            out.mkdir()
        cfg["trainer"]["output_dir"] = str(out)
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        said = one_line_error(["train", tmp_path / "cfg.yaml"])
        assert f"{tmp_path / 'no_model'}: no such folder" in said
        assert [p.name for p in out.iterdir()] == ["config.yaml"] if made else not (tmp_path / "runs").exists()
