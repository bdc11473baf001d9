"""Mistakes a researcher makes extending the Python API, each refused in one line before they cost a run (or,
inside a notebook's event loop, simply working)."""

from __future__ import annotations

import asyncio
import json

import pytest

from memrl import Episode, Trainer, Workflow
from memrl.config import ConfigError, load_config
from memrl.engines.base import SamplingParams
from memrl.models.resolve import load_tokenizer
from tests.workflows.test_workflow_api import Twice, episode


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def cfg(tmp_path, **trainer):
    return {"model": {"path": "tiny"}, "algorithm": {"n": 2},
            "trainer": {"total_steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run"), **trainer}}


RECORDS = [{"word": w} for w in ("apple", "river", "stone")]


def test_a_metric_named_as_the_trainers_own_and_a_string_reward_are_refused(tok):
    ep, _ = episode(tok)
    for name in ("step", "response_tokens", "eval/accuracy", "time/rollout"):
        with pytest.raises(ValueError, match=rf"ep.metric\('{name}'\): the trainer writes"):
            ep.metric(name, 1.0)
    ep.metric("turns", 3)  # a workflow's own name
    with pytest.raises(ValueError, match=r"ep.reward got '1.0' \(str\), not a number"):
        ep.reward("1.0")  # a judge's raw text is not a reward
    with pytest.raises(ValueError, match=r"ep.reward got 1e\+308: a reward must lie within ±1e\+15"):
        ep.reward(1e308)  # finite, but its square overflows the advantages of the whole step
    ep.reward(-1e15)


class Rnu(Workflow):
    async def rnu(self, ep: Episode) -> None:  # a typo
        ep.reward(1.0)


class Plain(Workflow):
    def run(self, ep: Episode) -> None:  # not async
        ep.reward(1.0)


class Picky(Twice):
    def check(self, config):
        if config.algorithm.n < 4:
            raise ValueError("Picky needs algorithm.n >= 4")


def test_a_workflow_that_cannot_run_is_refused_before_the_model_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"defines no run method \('rnu' is defined: a typo\?\)"):
        Trainer(cfg(tmp_path), workflow=Rnu(), train=RECORDS)
    with pytest.raises(ConfigError, match="run must be a coroutine"):
        Trainer(cfg(tmp_path), workflow=Plain(), train=RECORDS)
    with pytest.raises(ConfigError, match="Picky needs algorithm.n >= 4"):  # check() holds with train= too
        Trainer(cfg(tmp_path), workflow=Picky(), train=RECORDS)


def test_the_trainer_runs_inside_a_running_event_loop_and_says_when_there_is_nothing_to_do(tmp_path):
    import io

    from rich.console import Console

    said = io.StringIO()
    trainer = Trainer(cfg(tmp_path, lr=1e-3), workflow=Twice(first_tokens=2), train=RECORDS,
                      tracker_console=Console(file=said, width=300))

    async def notebook_cell():
        return trainer.run()

    last = asyncio.run(notebook_cell())
    assert "reward" in last and trainer.trained_steps == 1
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert "nothing to train" not in said.getvalue()
    assert trainer.run() == {}  # again: nothing left, and it says so
    assert "nothing to train:" in said.getvalue() and "trained 1 of trainer.total_steps=1" in said.getvalue()


def test_load_config_takes_a_dict_and_sampling_refuses_nan():
    got = load_config({"algorithm": {"n": 3}}, ["trainer.lr=0.5"])
    assert got.algorithm.n == 3 and got.trainer.lr == 0.5
    with pytest.raises(ConfigError, match="algorithmm"):
        load_config({"algorithmm": {"n": 3}})
    with pytest.raises(ValueError, match="finite number >= 0, got nan"):
        SamplingParams(temperature=float("nan"))


class NoSamples(Twice):
    def load_samples(self, split):
        return None


def test_load_samples_returning_nothing_names_it(tmp_path):
    with pytest.raises(ValueError, match=r"load_samples\('train'\) returned NoneType, not a list"):
        Trainer(cfg(tmp_path), workflow=NoSamples())


def test_a_resume_on_other_samples_is_refused_unless_allowed(tmp_path):
    from memrl.train.state import samples_fingerprint

    assert samples_fingerprint(RECORDS)["sha256"] == samples_fingerprint([dict(r) for r in RECORDS])["sha256"]
    assert samples_fingerprint([object()])["sha256"] is None  # objects: counted only
    Trainer(cfg(tmp_path, lr=1e-3), workflow=Twice(first_tokens=2), train=RECORDS).run()
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000001" / "state.json").read_text())
    assert state["samples"] == samples_fingerprint(RECORDS)
    more = cfg(tmp_path, lr=1e-3, total_steps=2)
    other = [{"word": w} for w in ("tiger", "ocean", "cloud")]
    with pytest.raises(ConfigError, match="was trained on other samples .the same 3 samples in number, different"):
        Trainer(more, workflow=Twice(first_tokens=2), train=other)
    with pytest.raises(ConfigError, match=r"\(3 samples then, 4 now\)"):
        Trainer(more, workflow=Twice(first_tokens=2), train=[*RECORDS, {"word": "moon"}])
    allowed = cfg(tmp_path, lr=1e-3, total_steps=2, allow_changes=["data.train_file"])
    trainer = Trainer(allowed, workflow=Twice(first_tokens=2), train=other)
    assert trainer.resumed_from == 1
    assert Trainer(more, workflow=Twice(first_tokens=2), train=RECORDS).resumed_from == 1  # the same: resumes


def test_a_config_option_that_replaces_the_objects_own_is_announced(tmp_path, capsys):
    from memrl.train.arguments import run_workflow

    config = {**cfg(tmp_path), "workflow": {"options": {"first_tokens": 6}}}
    _, wf = run_workflow(config, Twice(first_tokens=4))
    assert wf.options.first_tokens == 6
    assert "workflow.options.first_tokens=6 from the config replaces first_tokens=4" in capsys.readouterr().err
    run_workflow(config, Twice(first_tokens=6))
    assert "replaces" not in capsys.readouterr().err  # the same value: nothing to say


class InitRaises(Workflow):
    def __init__(self, **options):
        super().__init__(**options)
        raise RuntimeError("no connection to my retriever")

    async def run(self, ep: Episode) -> None:
        ep.reward(0.0)


def test_a_workflow_whose_constructor_raises_is_one_line_naming_it_and_where():
    from memrl.workflows.registry import make_workflow

    name = f"{__name__}:InitRaises"
    with pytest.raises(ValueError) as err:
        make_workflow(name)
    said = str(err.value)
    assert said.startswith(f"workflow {name!r}: building it raised RuntimeError: no connection to my retriever (at ")
    assert said.endswith(f"test_workflow_api_guards.py:{InitRaises.__init__.__code__.co_firstlineno + 2})")


def test_a_missing_train_file_is_named_before_the_run_folder_is_written(tmp_path):
    """A workflow reading data.train_file with the default load_samples: a missing file or a folder is one line
    naming data.train_file, before anything is written; a workflow with its own reader checks its own."""
    run = tmp_path / "run"
    for path, said in ((tmp_path / "nosuch.jsonl", "data.train_file: file not found: "),
                       (tmp_path, f"data.train_file: {tmp_path} is a folder")):
        with pytest.raises(ConfigError, match=f"^{said}"):
            Trainer({**cfg(tmp_path), "data": {"train_file": str(path)}}, workflow=Twice())
        assert not run.exists()
    with pytest.raises(ValueError, match="returned NoneType"):  # its own load_samples: its own business
        Trainer({**cfg(tmp_path), "data": {"train_file": str(tmp_path / "nosuch.jsonl")}}, workflow=NoSamples())
