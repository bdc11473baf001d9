"""``memrl.Trainer`` from Python: its arguments checked in one line, a workflow object's options and name in the
run's config, construction from two threads, no Hugging Face progress bars, ``trainer.train()``."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import yaml

from memrl import Trainer
from memrl.config import ConfigError
from memrl.train import assembly
from tests.workflows.test_workflow_api import Twice

WORDS = [{"word": w} for w in ("apple", "river")]
TWICE = "tests.workflows.test_workflow_api:Twice"


def raw(tmp_path, run: str = "run", **workflow: object) -> dict:
    cfg = {"model": {"path": "tiny"}, "algorithm": {"n": 2}, "engine": {"device": "cpu"},
           "trainer": {"total_steps": 1, "prompts_per_step": 2, "lr": 1e-3, "output_dir": str(tmp_path / run)}}
    return {**cfg, "workflow": workflow} if workflow else cfg


def test_a_workflow_object_checks_and_records_the_configs_options(tmp_path):
    trainer = Trainer(raw(tmp_path, options={"first_tokens": 2}), workflow=Twice(), train=WORDS)
    assert trainer.workflow.options.first_tokens == 2
    assert trainer.cfg.workflow.name == TWICE and trainer.cfg.workflow.options == {"first_tokens": 2}
    trainer.train()  # TRL's name for run()
    assert trainer.trained_steps == 1
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["workflow"]
    assert recorded == {"name": TWICE, "options": {"first_tokens": 2}}
    assert Trainer(raw(tmp_path, "set", name=TWICE), workflow=Twice(first_tokens=4), train=WORDS) \
        .cfg.workflow.options == {"first_tokens": 4}  # the object's own options are recorded too
    with pytest.raises(ConfigError, match=r"^unknown option 'workflow.options.first_token' of workflow "
                                          f"'{TWICE}': did you mean 'workflow.options.first_tokens'\\?$"):
        Trainer(raw(tmp_path, options={"first_token": 2}), workflow=Twice(), train=WORDS)
    with pytest.raises(ConfigError, match="workflow.name 'memagent' and the workflow argument .* are two workflows"):
        Trainer(raw(tmp_path, name="memagent"), workflow=Twice(), train=WORDS)


@pytest.mark.parametrize("kwargs, message", [
    ({"train": "apple"}, r"^memrl.Trainer\(train=...\): expected a list of samples .*got str 'apple'"),
    ({"train": {"word": "apple"}}, r"^memrl.Trainer\(train=...\): expected a list .*got one record .*train=\[record\]"),
    ({"train": WORDS, "eval": "held.jsonl"}, r"^memrl.Trainer\(eval=...\): expected a list of samples .*got str"),
    ({"train": 3}, r"^memrl.Trainer\(train=...\): expected a list of samples .*got int$"),
    ({"train": []}, r"^memrl.Trainer\(train=\[\]\): no training samples; give at least one record$"),
])
def test_records_of_the_wrong_shape_are_refused_naming_the_argument(tmp_path, kwargs, message):
    with pytest.raises((TypeError, ConfigError), match=message):
        Trainer(raw(tmp_path), workflow=Twice(), **kwargs)


def test_a_config_of_the_wrong_shape_is_refused_in_one_line(tmp_path):
    with pytest.raises(TypeError, match=r"^memrl.Trainer\(config\): expected a MemRLConfig, a dict of sections .* "
                                        r"got list$"):
        Trainer([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^unknown config key 'trainer.lrr': did you mean 'trainer.lr'\?$"):
        Trainer({"trainer": {"lrr": 1.0}}, workflow=Twice(), train=WORDS)


def test_trainers_built_in_two_threads_load_one_at_a_time(tmp_path, monkeypatch):
    real = assembly.build_policy
    inside, overlapped, second = [0], [False], threading.Event()
    lock = threading.Lock()

    def watched(cfg, **kw):  # the first to arrive waits for the other: without a lock it comes in meanwhile
        with lock:
            inside[0] += 1
            overlapped[0] |= inside[0] > 1
            first = inside[0] == 1 and not second.is_set()
            second.set() if not first else None
        if first:
            second.wait(2.0)
        try:
            return real(cfg, **kw)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(assembly, "build_policy", watched)
    built: dict[int, Trainer] = {}
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            built[i] = Trainer(raw(tmp_path, f"run{i}"), workflow=Twice(), train=WORDS)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(60)
    assert not errors and not overlapped[0]
    a, b = (dict(built[i].policy.named_parameters()) for i in range(2))
    assert all(torch.equal(a[k], b[k]) for k in a)  # each built from the seed alone: the same initial weights


def test_the_trainer_silences_hugging_face_progress_bars(tmp_path, monkeypatch):
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    monkeypatch.delenv("MEMRL_HF_PROGRESS", raising=False)
    hf_logging.enable_progress_bar()
    enable_progress_bars()
    Trainer(raw(tmp_path), workflow=Twice(), train=WORDS)
    assert not hf_logging.is_progress_bar_enabled() and are_progress_bars_disabled()
