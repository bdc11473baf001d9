"""Resuming after a move, and with settings changed on purpose (``trainer.allow_changes``)."""

from __future__ import annotations

import io
import shutil

import pytest
import yaml
from rich.console import Console

from memrl.config import ConfigError, load_config
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config


def trainer(tmp, out=None, **over) -> tuple[Trainer, io.StringIO]:
    log = io.StringIO()
    cfg = config(tmp, **over)
    if out is not None:
        cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"output_dir": str(out)})})
    return Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")),
                   tracker_console=Console(file=log, width=400)), log


@pytest.fixture
def one_step(tmp_path):
    t, _ = trainer(tmp_path, trainer__total_steps=1)
    t.run()
    return tmp_path


def test_a_moved_run_resumes_where_it_is_now(one_step, tmp_path):
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(str(one_step / "run"), moved)
    t, _ = trainer(one_step, out=moved, trainer__total_steps=2)
    assert t.resumed_from == 1
    t.run()
    assert yaml.safe_load((moved / "config.yaml").read_text())["trainer"]["output_dir"] == str(moved)
    assert (moved / "checkpoints" / "step_000002").is_dir()


def test_changed_lr_is_refused_naming_the_way_to_allow_it(one_step):
    with pytest.raises(ConfigError) as err:
        trainer(one_step, trainer__total_steps=2, trainer__lr=5e-3)
    msg = str(err.value)
    assert "\n" not in msg and "changed: trainer.lr" in msg and "--allow-changes trainer.lr" in msg


def test_allowed_lr_change_takes_effect_with_a_notice(one_step):
    t, log = trainer(one_step, trainer__total_steps=2, trainer__lr=5e-3, trainer__weight_decay=0.1,
                     trainer__allow_changes=["trainer.lr", "trainer.weight_decay"])
    assert t.resumed_from == 1
    assert [g["lr"] for g in t.optimizer.param_groups] == [5e-3]  # not the checkpoint's 1e-3
    assert [g["weight_decay"] for g in t.optimizer.param_groups] == [0.1]
    assert t.scheduler.get_last_lr() == [5e-3]
    last = t.run()
    assert last["lr"] == pytest.approx(5e-3)
    saved = yaml.safe_load((one_step / "run" / "config.yaml").read_text())
    assert saved["trainer"]["lr"] == 5e-3  # the next resume compares with what the run now uses
    # the notice went to the console given (the tracker's), naming the change
    text = log.getvalue()
    assert "trainer.lr changed from 0.001 to 0.005" in text and "trainer.weight_decay changed" in text


def test_allow_changes_cannot_unlock_the_model():
    with pytest.raises(ConfigError, match="model.path cannot change on resume"):
        load_config(None, ["trainer.allow_changes=[model.path]"])
    with pytest.raises(ConfigError, match="'trainer.lrr' is not a setting"):
        load_config(None, ["trainer.allow_changes=[trainer.lrr]"])


def test_memrl_train_allow_changes_flag(one_step):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    path = one_step / "cfg.yaml"
    path.write_text(yaml.safe_dump(config(one_step).model_dump(mode="json")))
    r = CliRunner().invoke(app, ["train", str(path), "trainer.total_steps=2", "trainer.lr=5e-3"])
    assert r.exit_code == 2 and "--allow-changes trainer.lr" in r.output
    r = CliRunner().invoke(app, ["train", str(path), "trainer.total_steps=2", "trainer.lr=5e-3",
                                 "--allow-changes", "trainer.lr"])
    assert r.exit_code == 0, r.output
    assert "trainer.lr changed from 0.001 to 0.005" in r.output and "done: step 2" in r.output


def test_an_option_dropped_from_the_config_is_a_change_too(one_step):
    """A key the run started with and the new config lacks (its default then applies) is refused as an edit is."""
    from memrl.config import MemRLConfig
    from memrl.train.preflight import check_run_config

    raw = config(one_step, trainer__total_steps=2).model_dump(mode="json")
    raw["workflow"]["options"].pop("chunk_tokens")
    dropped = MemRLConfig.model_validate(raw)
    with pytest.raises(ConfigError, match="changed: workflow.options.chunk_tokens"):
        check_run_config(dropped, one_step / "run", notice=lambda msg: None)
    raw["trainer"]["allow_changes"] = ["workflow.options.chunk_tokens"]
    said: list[str] = []
    check_run_config(MemRLConfig.model_validate(raw), one_step / "run", notice=said.append)
    assert said == [f"resuming {one_step / 'run'} with workflow.options.chunk_tokens changed from 32 to unset "
                    "(its default) (trainer.allow_changes)"]



def test_a_data_file_changed_under_a_memory_agent_run_is_refused(one_step):
    """MemAgent's samples are dataclasses: they are fingerprinted by their fields, not only counted."""
    from memrl.data import LongContextSample
    from memrl.train.state import samples_fingerprint

    one = LongContextSample(index=0, question="q?", answers=["a"], context="c", num_docs=1)
    assert samples_fingerprint([one])["sha256"] is not None
    assert samples_fingerprint([one]) != samples_fingerprint([LongContextSample(0, "q!", ["a"], "c", 1)])
    cfg = config(one_step, trainer__total_steps=2)  # (writes the task file afresh)
    data = one_step / "train.jsonl"
    data.write_text(data.read_text().replace("Which letter 0?", "Which letter 0!", 1))
    with pytest.raises(ConfigError, match="was trained on other samples .the same 12 samples in number, different"):
        Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")))


def test_a_checkpoint_that_only_counted_its_samples_still_resumes(tmp_path):
    from memrl.train.state import check_same_samples

    cfg = config(tmp_path)
    old = {"count": 12, "sha256": None}  # written before dataclass samples had a digest
    check_same_samples(cfg, old, {"count": 12, "sha256": "ab"}, tmp_path)
    with pytest.raises(ConfigError, match="12 samples then, 13 now"):
        check_same_samples(cfg, old, {"count": 13, "sha256": "ab"}, tmp_path)


def test_a_first_option_added_to_an_empty_mapping_is_named_by_its_own_key(tmp_path):
    from memrl.config import MemRLConfig
    from memrl.train.preflight import check_run_config

    t, _ = trainer(tmp_path, trainer__total_steps=1)
    t.run()
    raw = config(tmp_path, trainer__total_steps=2).model_dump(mode="json")
    assert raw["algorithm"]["adv_estimator_options"] == {}
    raw["algorithm"]["adv_estimator_options"] = {"shift": 1.0}
    raw["algorithm"]["adv_estimator"] = "tests.train.test_plugin_options:shifted"
    raw["trainer"]["allow_changes"] = ["algorithm.adv_estimator", "algorithm.adv_estimator_options.shift"]
    said: list[str] = []
    check_run_config(MemRLConfig.model_validate(raw), tmp_path / "run", notice=said.append)
    assert len(said) == 2 and any("algorithm.adv_estimator_options.shift changed from unset to 1.0" in x for x in said)
