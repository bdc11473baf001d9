"""``tool_agent`` with ``record=turns``: each model call is a conversation of its own (the context so far as
prompt, that call's tokens trained), anchored at the database and that context, so gigpo credits turns."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.config import ConfigError, MemRLConfig, load_config
from memrl.engines.base import GenerationResult
from memrl.envs.domain import task_env
from memrl.envs.evaluate import history_messages
from memrl.envs.messages import ToolCall
from memrl.text.tool_calls import render_call
from memrl.train.batch import rows_from_trajectories
from memrl.train.scoring import assign_advantages
from memrl.workflows import anchor
from memrl.workflows.builtins import ToolAgent
from tests.workflows.test_tool_agent import Script, run, sample, tok  # noqa: F401  (tok is a fixture)


class Recorder:
    """Wraps an engine: keeps (prompt ids as received, result) of every call; each call's log-probs differ."""

    def __init__(self, inner) -> None:
        self.inner, self.seen = inner, []

    async def generate(self, prompt_ids, params):
        res = await self.inner.generate(prompt_ids, params)
        k = len(self.seen) + 1
        res = GenerationResult(list(res.token_ids), [-0.01 * k * (i + 1) for i in range(len(res.token_ids))],
                               res.finish_reason)
        self.seen.append((list(prompt_ids), res))
        return res


def episode(s, texts, tok, cut=(), **wf):  # noqa: F811
    script = Script(tok, texts, cut=cut)
    script.engine = rec = Recorder(script.engine)
    return run(s, script, tok, **wf), rec


def calls(s, *names):
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    made = {"lookup": render_call(ToolCall("get_member_details", {"member_id": "M999"})),  # a tool error
            "return": render_call(ToolCall("return_book", {"loan_id": loan})), "done": "The return is recorded."}
    return [made[n] for n in names]


def test_each_call_is_a_conversation_with_the_engines_prompt_and_output(tok):  # noqa: F811
    s = sample("return_")
    texts = calls(s, "lookup") + ['<tool_call>{"name": "' + "x" * 300] + calls(s, "return", "done")
    traj, rec = episode(s, texts, tok, cut={1}, turn_tokens=120, record="turns")
    convs = traj.conversations
    assert len(convs) == len(rec.seen) == traj.metrics["turns"] == traj.metrics["num_conversations"] == 4
    for conv, (prompt, res) in zip(convs, rec.seen):
        assert conv.token_ids == prompt + res.token_ids  # the whole context the engine was given, then its output
        assert conv.loss_mask == [0] * len(prompt) + [1] * len(res.token_ids)
        assert conv.logprobs == [0.0] * len(prompt) + res.logprobs
        assert conv.meta["finish"] == res.finish_reason
    assert convs[1].meta["finish"] == "length" and tok.convert_tokens_to_ids("<|im_end|>") not in convs[1].token_ids[
        len(rec.seen[1][0]):]  # the end token closing a cut turn is the next prompt's, never trained
    one, _ = episode(s, texts, tok, cut={1}, turn_tokens=120)
    assert one.reward == traj.reward == 1.0 and len(one.conversations) == 1
    assert one.conversations[0].token_ids == convs[-1].token_ids  # the last turn's prompt is the whole context
    trained = [t for c in convs for t, m in zip(c.token_ids, c.loss_mask) if m]
    assert trained == [t for t, m in zip(one.conversations[0].token_ids, one.conversations[0].loss_mask) if m]


def test_the_default_records_one_episode_as_before(tok):  # noqa: F811
    s = sample("return_")
    texts = calls(s, "lookup", "return", "done")
    unset, rec_unset = episode(s, texts, tok)
    explicit, rec_explicit = episode(s, texts, tok, record="episode")
    turns, rec_turns = episode(s, texts, tok, record="turns")
    assert unset == explicit and len(unset.conversations) == 1 and unset.metrics["num_conversations"] == 1.0
    assert [p for p, _ in rec_unset.seen] == [p for p, _ in rec_explicit.seen] == [p for p, _ in rec_turns.seen]
    assert turns.info == unset.info and turns.reward == unset.reward
    assert {k: v for k, v in turns.metrics.items() if k != "num_conversations"} == \
        {k: v for k, v in unset.metrics.items() if k != "num_conversations"}


def group(tok):  # noqa: F811
    """Three episodes of one ticket: A looks up (an error), returns, stops (reward 1); C returns at once and stops
    (1); D looks up as A did, then stops without returning (0)."""
    s = sample("return_")
    return s, [episode(s, calls(s, *names), tok, record="turns")[0]
               for names in (("lookup", "return", "done"), ("return", "done"), ("lookup", "done"))]


def test_anchors_are_shared_where_database_and_context_agree(tok):  # noqa: F811
    s, (a, c, d) = group(tok)
    assert [t.reward for t in (a, c, d)] == [1.0, 1.0, 0.0]
    (a0, a1, a2), (c0, c1), (d0, d1) = ([x.state for x in t.conversations] for t in (a, c, d))
    env = task_env(s.domain, s.task, solo=True)
    env.set_state(s.task.initial_state, history_messages(s.task))
    first_prompt = [t for t, m in zip(a.conversations[0].token_ids, a.conversations[0].loss_mask) if not m]
    assert a0 == c0 == d0 == anchor(env.db_hash(), first_prompt)  # every episode starts from the same place
    assert a1 == d1  # both looked up the same way: same database, same context
    assert len({a0, a1, a2, c1}) == 4  # C after its return and A after its return: same database, other contexts


def test_gigpo_credits_turns_and_grpo_gives_each_turn_its_episodes_advantage(tok):  # noqa: F811
    _, trajs = group(tok)
    for t in trajs:
        t.group_id = "g"

    def advantages(estimator):
        cfg = MemRLConfig.model_validate({"algorithm": {"adv_estimator": estimator, "gamma": 1.0}})
        rows = rows_from_trajectories(trajs)
        assign_advantages(cfg, trajs, rows)
        return [(r.episode, r.step, float(r.advantages[torch.tensor(r.loss_mask[1:]) == 1].unique().item()))
                for r in rows]

    gigpo = {(e, k): v for e, k, v in advantages("gigpo")}
    # by hand (ROLL's numbers, unbiased std + 1e-6): the episode term over the 7 turns' scores 1,1,1,1,1,0,0 ...
    std7 = math.sqrt((5 * (2 / 7) ** 2 + 2 * (5 / 7) ** 2) / 6)
    win, lose = (2 / 7) / (std7 + 1e-6), (-5 / 7) / (std7 + 1e-6)
    # ... plus the step term within each anchor: {A0, C0, D0} scores 1,1,0; {A1, D1} 1,0; A2 and C1 alone (0)
    std3, std2 = math.sqrt((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 2), math.sqrt(0.5)
    want = {(0, 0): win + (1 / 3) / (std3 + 1e-6), (0, 1): win + 0.5 / (std2 + 1e-6), (0, 2): win,
            (1, 0): win + (1 / 3) / (std3 + 1e-6), (1, 1): win,
            (2, 0): lose - (2 / 3) / (std3 + 1e-6), (2, 1): lose - 0.5 / (std2 + 1e-6)}
    assert gigpo == pytest.approx(want, abs=1e-5)
    assert len({round(v, 5) for k, v in gigpo.items() if k[0] == 0}) == 3  # A's turns differ from each other
    grpo = advantages("grpo")
    for e in range(3):  # GRPO: every turn of an episode carries the episode's one advantage
        assert len({round(v, 6) for ep, _, v in grpo if ep == e}) == 1
    assert grpo[0][2] == grpo[3][2] > 0 > grpo[-1][2]


def test_a_bad_record_value_is_one_line_naming_the_option_and_its_values():
    with pytest.raises(ValueError) as err:
        ToolAgent(record="turn")
    assert str(err.value) == "option 'record' of workflow 'tool_agent': Input should be 'episode' or 'turns'"
    with pytest.raises(ConfigError) as err:
        load_config(None, ["workflow.name=tool_agent", "workflow.options.record=steps"])
    msg = str(err.value)
    assert "\n" not in msg and "workflow.options.record: Input should be 'episode' or 'turns'" in msg
