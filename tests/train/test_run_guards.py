"""Runs that cannot work fail early and in one line; runs that stop working stop; results are never stale."""

from __future__ import annotations

import re

import io
import json
import os

import pytest
from rich.console import Console
from typer.testing import CliRunner

from memrl.config import ConfigError, MemRLConfig, load_config
from memrl.engines.base import EngineDeadError
from memrl.models.resolve import load_tokenizer
from memrl.testing import ScriptedEngine
from memrl.train.guards import NothingTrainableError, RunFinished
from memrl.train.preflight import RUN_CONFIG_HEADER
from memrl.train.tracking import Tracker, read_metrics
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config


def quiet() -> Console:
    return Console(file=io.StringIO(), width=400)


def failing_engine(exc: Exception) -> ScriptedEngine:
    eng = ScriptedEngine(lambda p, s: [])

    async def generate(prompt, params):
        raise exc

    eng.generate = generate  # type: ignore[method-assign]
    return eng


def invoke(*args: str):
    from memrl.cli.main import app

    return CliRunner().invoke(app, list(args))


# -- up-front checks ------------------------------------------------------------------------------
def test_output_dir_that_is_a_file_fails_before_work(tmp_path):
    (tmp_path / "run").write_text("not a folder")
    with pytest.raises(ConfigError, match="trainer.output_dir=.* is a file, not a folder"):
        Trainer(config(tmp_path))


@pytest.mark.parametrize("name,make", [("checkpoints", "file"), ("metrics.jsonl", "folder")])
def test_a_run_folder_entry_of_the_wrong_kind_fails_before_work(tmp_path, name, make):
    run = tmp_path / "run"
    run.mkdir()
    (run / name).mkdir() if make == "folder" else (run / name).write_text("x")
    with pytest.raises(ConfigError, match=rf"run/{name} is a {make}, where the run writes its {name}"):
        Trainer(config(tmp_path))


def test_unwritable_output_dir_fails_before_work(tmp_path, monkeypatch):
    import tempfile

    real = tempfile.mkstemp

    def refuse(*a, **k):
        if str(k.get("dir", "")).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied")
        return real(*a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(ConfigError, match="cannot write in .*Permission denied"):
        Trainer(config(tmp_path))
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_dir_fails_before_work(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match="cannot write"):
            Trainer(config(tmp_path, trainer__output_dir=str(ro / "run")))
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("key,value,package", [("trainer__tensorboard", True, "tensorboard"),
                                               ("trainer__wandb_project", "p", "wandb")])
def test_missing_tracking_extra_fails_before_the_model_loads(tmp_path, monkeypatch, key, value, package):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    import memrl.train.assembly as T  # where the run is built

    monkeypatch.setattr(T, "build_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ConfigError, match=f"needs {package}: pip install"):
        Trainer(config(tmp_path, **{key: value}))


def test_impossible_settings_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="clip_ratio_low"):
        load_config(None, ["algorithm.clip_ratio_low=-0.1"])
    assert load_config(None, ["algorithm.clip_ratio_low=10"]).algorithm.clip_ratio_low == 10  # no lower clip (CISPO)
    with pytest.raises(ConfigError, match=r"trainer.mini_batches=9 .* 8 rows"):  # 2 prompts x n=4
        Trainer(config(tmp_path, trainer__mini_batches=9))
    assert not (tmp_path / "run").exists()


def test_corrupt_run_config_is_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(RUN_CONFIG_HEADER + "model: [unclosed")
    with pytest.raises(ConfigError, match="config.yaml is unreadable"):
        Trainer(config(tmp_path))


def test_the_users_own_config_in_the_output_folder_is_never_replaced(tmp_path):
    # memrl train exp/config.yaml with trainer.output_dir: exp
    (tmp_path / "run").mkdir()
    mine = "# my experiment\ntrainer:\n  output_dir: run   # next to this file\n"
    (tmp_path / "run" / "config.yaml").write_text(mine)
    with pytest.raises(ConfigError, match="not a config memrl recorded.*trainer.output_dir"):
        Trainer(config(tmp_path))
    assert (tmp_path / "run" / "config.yaml").read_text() == mine
    (tmp_path / "run" / "config.yaml").unlink()
    Trainer(config(tmp_path))  # the run records its own, which a second start then reads
    assert (tmp_path / "run" / "config.yaml").read_text().startswith(RUN_CONFIG_HEADER)
    Trainer(config(tmp_path))


def test_metrics_of_a_folder_memrl_did_not_record_are_never_dropped(tmp_path):
    """A folder holding someone's metrics.jsonl and no run config: its rows were replaced with a warning."""
    (tmp_path / "run").mkdir()
    theirs = '{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n'
    (tmp_path / "run" / "metrics.jsonl").write_text(theirs)
    with pytest.raises(ConfigError, match="metrics.jsonl is not a run memrl recorded.*trainer.output_dir"):
        Trainer(config(tmp_path))
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == theirs


# -- metrics.jsonl ----------------------------------------------------------------------------------
def test_torn_last_line_is_dropped_with_a_warning(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew')
    warnings: list[str] = []
    assert read_metrics(tmp_path, warn=warnings.append) == [{"step": 1, "reward": 0.5}]
    assert "torn last line 2" in warnings[0] and "metrics.jsonl" in warnings[0]
    Tracker(tmp_path, 1, console=quiet()).log(2, {"reward": 1.0})  # resuming repairs the file
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_bad_line_inside_metrics_names_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2"):
        read_metrics(tmp_path)
    r = invoke("plot", str(tmp_path))
    assert r.exit_code == 2 and "line 2" in r.output


def test_plot_tolerates_a_torn_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.7}\n{"st')
    r = invoke("plot", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "curves.png").is_file()


def test_fresh_start_drops_rows_of_a_run_killed_before_its_first_checkpoint(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 10.0}\n{"step": 1, "reward": 0.1}\n')
    Tracker(tmp_path, 0, console=quiet()).log(0, {"eval/accuracy": 10.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [0]  # the step-0 eval once, not twice
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (0, 1, 2, 3)))
    Tracker(tmp_path, 2, console=quiet())
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2]
    said = io.StringIO()
    Tracker(tmp_path, 0, console=Console(file=said, width=300))  # its checkpoints deleted: a start over, said
    assert "has no checkpoint to resume from: the run starts over and the 2 step(s) it had logged (up to step 2) " \
        "are dropped" in said.getvalue() and read_metrics(tmp_path) == []


def test_a_start_over_drops_the_rollouts_of_steps_its_history_no_longer_has(tmp_path):
    rollouts = tmp_path / "run" / "rollouts"
    rollouts.mkdir(parents=True)
    for name in ("step_000002.jsonl", "step_000003.jsonl", "notes.txt"):
        (rollouts / name).write_text("{}\n")
    Trainer(config(tmp_path))  # no checkpoint: the run starts at step 0
    assert sorted(p.name for p in rollouts.iterdir()) == ["notes.txt"]


# -- runs that stop working ---------------------------------------------------------------------------
def test_dead_engine_stops_the_run_at_once(tmp_path):
    eng = failing_engine(EngineDeadError("replica 0 exited with code -9"))
    trainer = Trainer(config(tmp_path, trainer__total_steps=5), engine=eng, tracker_console=quiet())
    with pytest.raises(EngineDeadError, match="replica 0"):
        trainer.run()
    assert trainer.failed_episodes == 0 and trainer.step == 1


def test_every_episode_failing_stops_after_max_failed_steps(tmp_path):
    eng = failing_engine(RuntimeError("backend hiccup"))
    trainer = Trainer(config(tmp_path, trainer__total_steps=10, trainer__max_failed_steps=2), engine=eng,
                      tracker_console=quiet())
    with pytest.raises(NothingTrainableError) as err:
        trainer.run()
    msg = str(err.value)
    assert "\n" not in msg and "every episode failed" in msg and "backend hiccup" in msg
    assert "trainer.max_failed_steps=2" in msg
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2] and rows[-1]["failed_episodes"] == 16


def test_a_run_that_never_trained_keeps_no_checkpoint_and_takes_a_corrected_config(tmp_path):
    """Checkpoints of a run whose every step was idle hold the initial weights: none is written, so fixing the
    cause (here the engine; for a user, data.train_file) starts the run again instead of being refused."""
    from memrl.train.preflight import check_run_config

    cfg = config(tmp_path, trainer__total_steps=10, trainer__max_failed_steps=2, trainer__save_every=1)
    with pytest.raises(NothingTrainableError):
        Trainer(cfg, engine=failing_engine(RuntimeError("no such field")), tracker_console=quiet()).run()
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    fixed = config(tmp_path, trainer__total_steps=1, trainer__max_failed_steps=2, trainer__save_every=1,
                   trainer__lr=5e-4)
    check_run_config(fixed, tmp_path / "run", notice=lambda msg: None)  # not "started with a different config"
    last = Trainer(fixed, engine=coin_engine(load_tokenizer("tiny")), tracker_console=quiet()).run()
    assert "reward" in last and (tmp_path / "run" / "checkpoints" / "step_000001").is_dir()


def test_a_trainable_step_resets_the_failure_streak(tmp_path):
    good = coin_engine(load_tokenizer("tiny"))
    holder: dict = {}

    async def fails_on_even_steps(prompt, params):
        if holder["trainer"].step % 2 == 0:
            raise RuntimeError("flaky")
        return await good.generate(prompt, params)

    eng = ScriptedEngine(lambda p, s: [])
    eng.generate = fails_on_even_steps  # type: ignore[method-assign]
    trainer = holder["trainer"] = Trainer(config(tmp_path, trainer__total_steps=3, trainer__max_failed_steps=2),
                                          engine=eng, tracker_console=quiet())
    last = trainer.run()  # trainable, idle, trainable, idle, trainable: never two idle steps in a row
    # the idle steps do not count toward total_steps (as in verl/AReaL): three trained steps take five
    assert trainer.step == 5 and trainer.trained_steps == 3 and "reward" in last and trainer.idle.streak == 0
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and "reward" not in rows[1] and "reward" not in rows[3]
    assert last["idle_steps"] == 2 and trainer.state.to_json()["idle_steps"] == 2


def tool_cfg(tmp_path, **trainer) -> MemRLConfig:
    """A budget just above the library's system prompt and tools (the preflight lets it through), below the
    prompt with the ticket: every episode is cut before its first turn."""
    from memrl.models.resolve import load_tokenizer
    from memrl.train.preflight import tool_prompt_floor
    from memrl.workflows import load_samples

    probe = MemRLConfig.model_validate({"workflow": {"name": "tool_agent"}, "env": {"domain": "library"}})
    budget = tool_prompt_floor(probe, load_tokenizer("tiny"), load_samples(probe, "train")[0]) + 2
    return MemRLConfig.model_validate({
        "model": {"path": "tiny"}, "engine": {"device": "cpu"},
        "workflow": {"name": "tool_agent", "max_turns": 2, "turn_tokens": 16, "max_total_tokens": budget},
        "env": {"domain": "library", "train_split": "train"}, "algorithm": {"n": 2},
        "trainer": {"total_steps": 5, "prompts_per_step": 2, "output_dir": str(tmp_path / "run"), **trainer}})


def test_prompts_over_the_token_budget_are_counted_then_stop_the_run(tmp_path):
    out = io.StringIO()
    eng = ScriptedEngine(lambda p, s: pytest.fail("nothing should be generated"))
    trainer = Trainer(tool_cfg(tmp_path, max_failed_steps=2), engine=eng,
                      tracker_console=Console(file=out, width=400))
    with pytest.raises(NothingTrainableError) as err:
        trainer.run()
    msg = str(err.value)
    assert "4 of 4 episodes" in msg and "workflow.options.max_total_tokens=" in msg and "\n" not in msg
    rows = read_metrics(tmp_path / "run")
    assert [r["prompt_too_long"] for r in rows] == [4.0, 4.0] and rows[0]["failed_episodes"] == 0
    assert "4 of 4 episodes cut before generating" in out.getvalue()


# -- the CLI's last word -------------------------------------------------------------------------------
def test_cli_reports_run_ending_errors_in_one_line(tmp_path, monkeypatch):
    import memrl.dist.launch as launch

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"trainer:\n  output_dir: {tmp_path / 'run'}\n")
    for exc, code, text in ((EngineDeadError("gone"), 1, "the engine died"),
                            (NothingTrainableError("3 step(s) in a row"), 1, "3 step(s) in a row"),
                            (RunFinished(4, 4), 0, "run already finished at step 4 (trainer.total_steps=4)")):
        monkeypatch.setattr(launch, "train", lambda c, exc=exc: (_ for _ in ()).throw(exc))
        r = invoke("train", str(cfg))
        assert r.exit_code == code and text in r.output and "Traceback" not in r.output
    monkeypatch.setattr(launch, "train", lambda c: (2, {"failed_episodes": 8.0}))
    r = invoke("train", str(cfg))
    assert r.exit_code == 1 and "done" not in r.output and "none of its episodes completed" in r.output


def test_finished_run_is_reported_before_loading_anything(tmp_path, monkeypatch):
    from memrl.dist.launch import train

    cfg = config(tmp_path, trainer__total_steps=1)
    Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")), tracker_console=quiet()).run()
    import memrl.train.assembly as T  # where the run is built

    monkeypatch.setattr(T, "build_policy", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(RunFinished, match=r"finished at step 1 \(trainer.total_steps=1\); raise"):
        train(cfg)


# -- export -------------------------------------------------------------------------------------------
def test_export_never_leaves_stale_weights(tmp_path):
    from safetensors.torch import load_file

    from memrl.data.outdir import record_outputs
    from memrl.train.export import export_run

    Trainer(config(tmp_path, trainer__lr=1e-2), engine=coin_engine(load_tokenizer("tiny")),
            tracker_console=quiet()).run()
    run, out = tmp_path / "run", tmp_path / "export"

    def weights(folder):
        return load_file(str(next(folder.glob("*.safetensors"))))

    export_run(run, out, step=1)
    first = weights(out)
    with pytest.raises(ValueError, match="is not empty.*--force"):
        export_run(run, out, step=2)
    stale = "model-00002-of-00002.safetensors"  # a shard an older export wrote
    (out / stale).write_text("from an older export")
    record_outputs(out, [stale], by="memrl export", written=True)
    export_run(run, out, step=2, force=True)
    assert not (out / stale).exists()
    (out / "notes.txt").write_text("mine")  # not an export's: --force refuses
    r = invoke("export", str(run), "--out", str(out), "--force")
    assert r.exit_code == 2 and "holds 'notes.txt', which memrl did not write" in r.output
    assert (out / "notes.txt").is_file()
    other = tmp_path / "other_run"  # another training run: refused too
    (other / "checkpoints").mkdir(parents=True)
    (other / "metrics.jsonl").write_text("")
    r = invoke("export", str(run), "--out", str(other), "--force")
    assert r.exit_code == 2 and f"--out {other} is a training run" in r.output and (other / "metrics.jsonl").is_file()
    want = weights(run / "checkpoints" / "step_000002" / "model")
    got = weights(out)
    assert all((got[k] == want[k]).all() for k in want)
    assert any(not (got[k] == first[k]).all() for k in first)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export")]  # no temp folders left

    target = tmp_path / "file.bin"
    target.write_text("x")
    r = invoke("export", str(run), "--out", str(target))
    assert r.exit_code == 2 and "is an existing file" in r.output and target.read_text() == "x"

    # a run of the user's own workflow exports where its module does not import: the weights need no workflow
    recorded = run / "config.yaml"
    recorded.write_text(re.sub(r"\nworkflow:\n  name: \S+", "\nworkflow:\n  name: not_installed_pkg.agents:Search",
                               recorded.read_text()))
    assert "not_installed_pkg.agents:Search" in recorded.read_text()
    export_run(run, tmp_path / "export_own_workflow", step=2)
    assert weights(tmp_path / "export_own_workflow").keys() == want.keys()


def test_export_writes_extra_files_with_the_model_or_nothing(tmp_path, monkeypatch):
    """The demo's warm-start report travels with its model: both land, or (a crash mid-export) neither."""
    from memrl.models.resolve import load_model
    from memrl.train.policy import export_model

    model, tok = load_model("tiny", device="cpu"), load_tokenizer("tiny")
    out = export_model(model, tok, tmp_path / "a", extra_files={"report.json": '{"rounds": 2}'})
    assert json.loads((out / "report.json").read_text()) == {"rounds": 2} and (out / "config.json").is_file()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(tok), "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        export_model(model, tok, tmp_path / "b", extra_files={"report.json": "{}"})
    assert not (tmp_path / "b").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".b")]


@pytest.mark.parametrize("resume_step, purge", [(0, 0), (4, 5)])
def test_tensorboard_drops_the_steps_a_resumed_run_logs_again(tmp_path, monkeypatch, resume_step, purge):
    """As metrics.jsonl loses the rows after the checkpoint, TensorBoard's events from step resume+1 on are purged
    (a run killed after logging step 5 but saving 4 drew step 5 twice)."""
    import sys
    import types

    made = {}

    class Writer:
        def __init__(self, log_dir, purge_step=None):
            made.update(log_dir=log_dir, purge_step=purge_step)

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    Tracker(tmp_path, resume_step, tensorboard=True, console=quiet())
    assert made == {"log_dir": str(tmp_path / "tensorboard"), "purge_step": purge}
