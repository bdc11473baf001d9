"""The Workflow/Episode API: what ``ep.generate`` records, options, rewards, metrics, the Python trainer."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from memrl import Episode, Trainer, Workflow
from memrl.config import ConfigError, MemRLConfig, WorkflowConfig, load_config
from memrl.engines.base import SamplingParams
from memrl.models.resolve import load_tokenizer
from memrl.testing.scripted import ScriptedEngine


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def episode(tok, reply=(5, 6, 7), **kw) -> tuple[Episode, ScriptedEngine]:
    eng = ScriptedEngine(lambda prompt, params: [*reply, tok.eos_token_id], logprob=-0.25)
    ep = Episode({"word": "apple", "id": "w1"}, engine=eng, tokenizer=tok,
                 sampling=SamplingParams(temperature=1.0, seed=11), **kw)
    return ep, eng


def test_generate_records_prompt_and_generated_tokens_with_the_loss_mask(tok):
    ep, eng = episode(tok)
    out = asyncio.run(ep.generate([1, 2, 3], max_new_tokens=8))
    conv = ep.conversations[0]
    assert conv.token_ids == [1, 2, 3, 5, 6, 7, tok.eos_token_id]
    assert conv.loss_mask == [0, 0, 0, 1, 1, 1, 1]  # the stop token is the policy's too
    assert conv.logprobs == [0.0, 0.0, 0.0, -0.25, -0.25, -0.25, -0.25]
    assert out.ids == [5, 6, 7] and out.token_ids == [5, 6, 7, tok.eos_token_id]
    assert str(out) == tok.decode([5, 6, 7], skip_special_tokens=True) and out.finish_reason == "stop"
    assert eng.calls[0][1].max_new_tokens == 8 and tok.eos_token_id in eng.calls[0][1].stop_token_ids


def test_each_call_gets_its_own_seed_and_text_and_messages_are_encoded(tok):
    ep, eng = episode(tok)
    asyncio.run(ep.generate("hello there", max_new_tokens=4))
    messages = [{"role": "user", "content": "hi"}]
    asyncio.run(ep.generate(messages, max_new_tokens=4, temperature=0.5))
    (p1, s1), (p2, s2) = eng.calls
    assert p1 == tok.encode("hello there", add_special_tokens=False)
    assert p2 == list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    assert s1.seed != s2.seed and s2.temperature == 0.5 and s1.temperature == 1.0
    assert len(ep.conversations) == 2


def test_merge_extends_the_last_conversation_only_when_the_prompt_continues_it(tok):
    ep, _ = episode(tok, reply=(9,))
    first = asyncio.run(ep.generate([1, 2], max_new_tokens=4, merge=True))
    asyncio.run(ep.generate([1, 2, *first.token_ids, 3], max_new_tokens=4, merge=True))  # continues
    assert len(ep.conversations) == 1
    assert ep.conversations[0].loss_mask == [0, 0, 1, 1, 0, 1, 1]
    asyncio.run(ep.generate([1, 3], max_new_tokens=4, merge=True))  # does not: a new conversation
    assert len(ep.conversations) == 2
    ep.reward(1.0)
    assert ep.trajectory().metrics["merge_missed"] == 0.5  # 1 of the 2 calls that could merge: said, not silent


def test_reward_and_metrics_become_the_trajectory(tok):
    ep, _ = episode(tok)
    with pytest.raises(ValueError, match="without a model call"):
        ep.reward(1.0)
        ep.trajectory()
    asyncio.run(ep.generate([1], max_new_tokens=2))
    with pytest.raises(ValueError, match="not a number"):
        ep.reward("yes")
    with pytest.raises(ValueError, match="finite"):
        ep.metric("x", float("nan"))
    ep.reward(0.5)
    ep.metric("custom", 2)
    traj = ep.trajectory()
    assert traj.reward == 0.5 and traj.metrics["custom"] == 2.0 and traj.sample_id == "w1"
    fresh, _ = episode(tok)
    asyncio.run(fresh.generate([1], max_new_tokens=2))
    with pytest.raises(ValueError, match=r"without calling ep.reward"):
        fresh.trajectory()


class Twice(Workflow):
    name = "twice"

    class Options(BaseModel):
        model_config = {"extra": "forbid"}
        first_tokens: int = 3

    async def run(self, ep: Episode) -> None:
        a = await ep.generate(f"Say {ep.sample['word']}:", max_new_tokens=self.options.first_tokens)
        b = await ep.generate(f"Again: {a}", max_new_tokens=2)
        ep.reward(float(ep.sample["word"] in b))
        ep.metric("first_len", len(a.ids))


def test_options_are_validated_with_the_nearest_name():
    assert Twice(first_tokens=5).options.first_tokens == 5
    cfg = WorkflowConfig(name="tests.workflows.test_workflow_api:Twice", options={"first_tokens": 4})
    assert cfg.build().options.first_tokens == 4 and cfg.first_tokens == 4
    with pytest.raises(ValueError, match="unknown option 'workflow.options.first_token' of workflow .*did you mean "
                                         "'workflow.options.first_tokens'"):
        WorkflowConfig(name="tests.workflows.test_workflow_api:Twice", options={"first_token": 4})


class Revise(Workflow):
    """A user's Options model that says nothing about unknown keys (pydantic's default drops them)."""

    class Options(BaseModel):
        revise_tokens: int = 8

    async def run(self, ep: Episode) -> None:
        ep.reward(0.0)


def test_a_plain_options_model_refuses_typos_with_the_nearest_name():
    assert Revise(revise_tokens=3).options.revise_tokens == 3
    with pytest.raises(ValueError, match=r"^unknown option 'revise_token' of workflow 'Revise': did you mean "
                                         r"'revise_tokens'\?$"):
        Revise(revise_token=3)
    with pytest.raises(ValueError, match="did you mean 'revise_tokens'"):
        Revise().with_options({"revise_token": 3})
    with pytest.raises(ValueError, match=r"^option 'revise_tokens' of workflow 'Revise': Input should be a valid"):
        Revise(revise_tokens="many")
    with pytest.raises(ConfigError, match="unknown option 'workflow.options.revise_token' of workflow .*did you mean "
                                          "'workflow.options.revise_tokens'"):
        load_config(None, ["workflow.name=tests.workflows.test_workflow_api:Revise",
                           "workflow.options.revise_token=4"])


def test_the_example_workflow_refuses_a_misspelt_option(monkeypatch):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    monkeypatch.syspath_prepend("examples/custom_workflow")
    bad = CliRunner().invoke(app, ["config", "show", "examples/custom_workflow/recall.yaml",
                                   "workflow.options.note_tokenz=4"])
    assert bad.exit_code == 2 and "did you mean 'workflow.options.note_tokens'" in bad.output
    good = CliRunner().invoke(app, ["config", "show", "examples/custom_workflow/recall.yaml",
                                    "workflow.options.note_tokens=4"])
    assert good.exit_code == 0, good.output


async def calculator(client, sample):
    """An agent program (what workflow.options.program names), not a workflow."""
    return 1.0


def test_an_agent_program_named_as_a_workflow_points_to_the_agent_workflow():
    with pytest.raises(ConfigError, match=r"is an agent program, not a workflow: run it with workflow.name: agent "
                                          r"and workflow.options.program: 'tests.workflows.test_workflow_api:calculator'"):
        load_config(None, ["workflow.name=tests.workflows.test_workflow_api:calculator"])
    assert load_config(None, ["workflow.name=tests.workflows.test_workflow_api:legacy"])  # the old signature still runs


def test_old_flat_keys_load_as_options_with_a_notice(capsys, monkeypatch):
    from memrl.config import renames

    monkeypatch.setattr(renames, "_NOTICED", set())  # each notice is printed once per process
    cfg = load_config(None, ["workflow.chunk_tokens=77"])
    assert cfg.workflow.options == {"chunk_tokens": 77} and cfg.workflow.opts.chunk_tokens == 77
    assert "workflow.options.chunk_tokens" in capsys.readouterr().err
    old = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_turns": 3, "chunk_tokens": 9}})
    assert old.workflow.options == {"max_turns": 3}  # chunk_tokens never applied to tool_agent: dropped
    assert "does not apply to workflow 'tool_agent'" in capsys.readouterr().err


def test_python_trainer_runs_a_workflow_object_on_records(tmp_path):
    cfg = {"model": {"path": "tiny"}, "algorithm": {"n": 2},
           "trainer": {"total_steps": 2, "prompts_per_step": 2, "output_dir": str(tmp_path / "run"), "lr": 1e-3}}
    records = [{"word": w} for w in ("apple", "river", "stone")]
    trainer = Trainer(cfg, workflow=Twice(first_tokens=2), train=records)
    last = trainer.run()
    assert trainer.trained_steps == 2 and "reward" in last
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "first_len" in r] == [1, 2]
    assert all(r["num_conversations"] == 2.0 for r in rows if "num_conversations" in r)


def test_a_workflow_without_samples_or_data_file_fails_in_one_line(tmp_path):
    cfg = {"model": {"path": "tiny"}, "trainer": {"output_dir": str(tmp_path / "run")},
           "workflow": {"name": "tests.workflows.test_workflow_api:Twice"}}
    with pytest.raises(ValueError, match="data.train_file"):
        Trainer(cfg)
    with pytest.raises(ConfigError, match="no training samples"):
        Trainer(cfg, workflow=Twice(), train=[])


async def legacy(sample, engine, tokenizer, config, *, sampling, sample_id=None, group_id=None):
    """A workflow function with the signature before Workflow objects existed."""
    from memrl.types import Conversation, Trajectory

    res = await engine.generate([1, 2], sampling.with_(max_new_tokens=config.final_tokens))
    return Trajectory([Conversation.from_prompt_response([1, 2], res.token_ids, res.logprobs)], 1.0,
                      sample_id or "s", group_id or "g")


def test_old_style_functions_run_behind_the_object_api_with_a_notice(tok, capsys, monkeypatch):
    from memrl.config import renames
    from memrl.workflows.registry import FunctionWorkflow, make_workflow

    monkeypatch.setattr(renames, "_NOTICED", set())

    wf = make_workflow("tests.workflows.test_workflow_api:legacy", {"final_tokens": 3})
    assert isinstance(wf, FunctionWorkflow) and "old signature" in capsys.readouterr().err
    eng = ScriptedEngine(lambda p, s: [7] * 10)
    traj = asyncio.run(wf.episode({"answers": ["x"]}, engine=eng, tokenizer=tok, sampling=SamplingParams()))
    assert traj.conversations[0].generated_ids() == [7, 7, 7] and traj.reward == 1.0


class Flaky(Workflow):
    """Raises on the word "river": a failed episode, kept with its traceback, not a failed run."""

    async def run(self, ep: Episode) -> None:
        await ep.generate("Say:", max_new_tokens=2)
        if ep.sample["word"] == "river":
            raise RuntimeError("no rivers here")
        ep.reward(1.0 if ep.calls else 0.0)


def test_a_raising_episode_is_failed_and_its_traceback_kept(tmp_path):
    cfg = {"model": {"path": "tiny"}, "algorithm": {"n": 2},
           "trainer": {"total_steps": 1, "prompts_per_step": 3, "output_dir": str(tmp_path / "run")}}
    trainer = Trainer(cfg, workflow=Flaky(), train=[{"word": w} for w in ("apple", "river", "stone")])
    trainer.run()
    assert trainer.failed_episodes == 2 and trainer.trained_steps == 1
    kept = sorted((tmp_path / "run" / "failures").iterdir())
    assert len(kept) == 2 and "RuntimeError: no rivers here" in kept[0].read_text()
    assert "in run" in kept[0].read_text()  # the whole traceback, down to the workflow's line


class WithService(Twice):
    closed: list[str] = []

    class Server:
        def close(self) -> None:
            WithService.closed.append("server")

    def build_services(self, config):
        return {"server": self.Server()}


def test_services_are_built_once_and_closed_when_the_run_ends(tmp_path):
    cfg = {"model": {"path": "tiny"}, "algorithm": {"n": 2},
           "trainer": {"total_steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")}}
    trainer = Trainer(cfg, workflow=WithService(), train=[{"word": "apple"}, {"word": "river"}])
    assert isinstance(trainer.workflow.services["server"], WithService.Server) and not WithService.closed
    trainer.run()
    assert WithService.closed == ["server"]


def test_the_runs_own_workflow_sets_the_norm_length_of_the_loss(tmp_path):
    """Dr. GRPO's seq-mean-token-sum-norm divides by the workflow's longest response: a workflow that does not
    know it (None) falls back to the padded width, never to 0 (a division by zero and a skipped update)."""
    import math

    cfg = {"model": {"path": "tiny"}, "algorithm": {"n": 2, "loss_agg_mode": "seq-mean-token-sum-norm"},
           "trainer": {"total_steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "run"), "lr": 1e-3}}
    trainer = Trainer(cfg, workflow=Twice(), train=[{"word": "apple"}, {"word": "river"}])
    assert trainer.updater.norm_length is None
    last = trainer.run()
    assert last["skipped_updates"] == 0 and math.isfinite(last["pg_loss"])
