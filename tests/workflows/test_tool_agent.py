"""The tool_agent workflow: loss masks, token-in/token-out, endings, user simulator."""

from __future__ import annotations

import asyncio

import pytest

from memrl.config.schema import MemRLConfig
from memrl.envs.messages import ToolCall
from memrl.envs.user_sim import LLMUserSimulator, ScriptedUser
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows.tool_agent import TaskSample, task_samples, tool_agent
from memrl.text.tool_calls import render_call


@pytest.fixture(scope="module")
def tok():
    return build_hf_tokenizer(["return_book loan_id member tool_call ###STOP### hello"], vocab_size=400)


def cfg(**wf):
    return MemRLConfig.model_validate({"workflow": {"name": "tool_agent", **wf}})


def sample(task_prefix: str, **kw) -> TaskSample:
    s = next(x for x in task_samples(cfg(), None) if x.task.id.startswith(task_prefix))
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class Script:
    """An engine that replies with fixed texts, each ended by <|im_end|> unless ``cut``."""

    def __init__(self, tok, texts, cut=()):
        self.tok, self.texts, self.cut = tok, texts, set(cut)
        self.outputs: list[list[int]] = []
        self.engine = ScriptedEngine(self.reply)

    def reply(self, prompt, params):
        i = len(self.outputs)
        ids = encode_text(self.tok, self.texts[min(i, len(self.texts) - 1)])
        end = self.tok.convert_tokens_to_ids("<|im_end|>")
        out = ids if i in self.cut else ids + [end]
        self.outputs.append(out[: params.max_new_tokens])
        return out


def run(s, script, tok, **wf):
    return asyncio.run(tool_agent(s, script.engine, tok, cfg(**wf).workflow))


def test_only_model_tokens_carry_loss_and_nothing_is_retokenized(tok):
    s = sample("return_")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    texts = ["I will look.\n" + render_call(ToolCall("get_member_details", {"member_id": "M999"})),  # tool error
             '<tool_call>{"name": "' + "x" * 300,  # hits the turn limit: closed with an untrained end token
             render_call(ToolCall("return_book", {"loan_id": loan})),
             "The return is recorded."]
    script = Script(tok, texts, cut={1})
    traj = run(s, script, tok, turn_tokens=120)
    conv = traj.conversations[0]
    # the loss-masked tokens are exactly the engine outputs, in order
    trained = [t for t, m in zip(conv.token_ids, conv.loss_mask) if m]
    assert trained == [t for out in script.outputs for t in out]
    assert sum(conv.loss_mask) == sum(len(o) for o in script.outputs)
    # each call's prompt is the previous prompt + the previous output + loss-0 segments (token in, token out)
    calls = script.engine.calls
    for (prev, _), out, (nxt, _) in zip(calls, script.outputs, calls[1:]):
        assert nxt[: len(prev) + len(out)] == prev + out
    # every logprob of a generated token is the engine's; non-generated tokens carry 0
    assert all((lp == -0.5) == bool(m) for lp, m in zip(conv.logprobs, conv.loss_mask))
    # runs between generated spans are the tool results / end token, never generated text
    assert traj.reward == 1.0 and traj.info["ending"] == "agent_stop"
    assert traj.metrics["turns"] == 4 and traj.metrics["turn_truncated"] == 1
    assert traj.metrics["tool_calls"] == 3 and traj.metrics["tool_errors"] == 1
    assert traj.metrics["invalid_tool_calls"] == 1
    assert traj.metrics["tool_call_validity"] == pytest.approx(1 / 3)
    roles = [m["role"] for m in traj.info["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "assistant", "tool", "assistant"]
    log = traj.info["messages"]  # calls read from the model's text get the ids their results carry (τ² checks)
    pairs = [(m["tool_calls"][0]["id"], log[i + 1]["call_id"]) for i, m in enumerate(log) if m["tool_calls"]]
    assert pairs and all(a == b and a for a, b in pairs)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    spans = [i for i in range(1, len(conv.loss_mask)) if conv.loss_mask[i - 1] == 1 and conv.loss_mask[i] == 0]
    assert len(spans) == 3  # the last span runs to the end
    assert conv.token_ids[spans[1]] == end  # the end token added after the cut turn is not trained on
    assert conv.token_ids[spans[0] - 1] == end  # a turn that ended by itself trained its own end token


def test_invalid_call_is_reported_and_limits_end_with_zero(tok):
    s = sample("return_")
    script = Script(tok, ['<tool_call>{"name": broken</tool_call>'])
    traj = run(s, script, tok, max_turns=3)
    assert traj.info["ending"] == "max_turns" and traj.reward == 0.0
    assert traj.metrics["invalid_tool_calls"] == 3 and traj.metrics["tool_call_validity"] == 0.0
    # the parse error was shown to the model
    second_prompt = tok.decode(script.engine.calls[1][0])
    assert "Error: could not parse tool call" in second_prompt
    traj = run(s, Script(tok, ["y" * 50]), tok, max_total_tokens=1)
    assert traj.info["ending"] == "max_tokens" and traj.reward == 0.0


def test_a_transfer_is_a_tool_call_and_the_agent_goes_on(tok):
    """τ²-bench's orchestrator hands the transfer's result back to the agent, which tells the user; the episode
    ends when the user (or, solo, the agent) stops, not at the call."""
    call = render_call(ToolCall("transfer_to_human_agents", {"summary": "donation"}))
    traj = run(sample("transfer"), Script(tok, [call, "You are being transferred."]), tok)
    assert traj.info["ending"] == "agent_stop" and traj.reward == 1.0
    assert [m["role"] for m in traj.info["messages"]][-3:] == ["assistant", "tool", "assistant"]
    heard = []

    def user(task, messages):
        heard.append(messages[-1].content)
        return ["I have a donation.", "###TRANSFER###"][len(heard) - 1]

    s = sample("transfer", solo=False, user=ScriptedUser(user))
    traj = run(s, Script(tok, [call, "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT."]), tok)
    assert traj.info["ending"] == "transfer" and traj.reward == 1.0
    assert heard[-1] == "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT."  # the user heard the agent's message


def test_stop_text_ends_only_a_solo_agent(tok):
    """τ²'s LLMAgent has no stop of its own: outside solo mode ###STOP### in its text goes to the user."""
    said = []

    def user(task, messages):
        said.append(messages[-1].content)
        return ["Hello.", "Thanks ###STOP###"][len(said) - 1]

    s = sample("return_", solo=False, user=ScriptedUser(user))
    traj = run(s, Script(tok, ["Bye ###STOP###"]), tok)
    assert traj.info["ending"] == "user_stop" and said[-1] == "Bye ###STOP###"
    traj = run(sample("return_"), Script(tok, ["Bye ###STOP###"]), tok)
    assert traj.info["ending"] == "agent_stop"
    # no call made: no share of valid calls (0 would read as "every call invalid"), and made_tool_call says why
    assert "tool_call_validity" not in traj.metrics and traj.metrics["made_tool_call"] == 0.0


def test_user_simulator_turns_are_inserted_without_loss(tok):
    s = sample("return_")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    said = []

    def user(task, messages):
        said.append([m.role for m in messages])
        return ["I am returning a book.", "Yes, go ahead.", "Thanks ###STOP###"][len(said) - 1]

    s = sample("return_", solo=False, user=ScriptedUser(user))
    script = Script(tok, ["Which loan?", render_call(ToolCall("return_book", {"loan_id": loan})), "Done."])
    traj = run(s, script, tok)
    assert traj.info["ending"] == "user_stop" and traj.reward == 1.0
    assert said[0] == ["assistant"]  # the agent's greeting opens the conversation
    conv = traj.conversations[0]
    assert [t for t, m in zip(conv.token_ids, conv.loss_mask) if m] == [t for o in script.outputs for t in o]
    text = tok.decode(conv.token_ids)
    assert "<|im_start|>user\nYes, go ahead.<|im_end|>" in text
    assert traj.metrics["user_turns"] == 2  # and the opening message


def test_llm_user_simulator_flips_roles(tok):
    s = sample("return_")
    seen = []

    def reply(prompt, params):
        seen.append(tok.decode(prompt))
        return encode_text(tok, "###STOP###") + [tok.convert_tokens_to_ids("<|im_end|>")]

    sim = LLMUserSimulator(ScriptedEngine(reply), tok, max_tokens=16)
    from memrl.envs.messages import Message

    chat = sim.chat(s.task, [Message("assistant", "Hi, how can I help?"), Message("user", "Return please"),
                             Message("tool", "{}"), Message("assistant", "Done")])
    assert [c["role"] for c in chat] == ["system", "user", "assistant", "user"]
    assert "Instructions:" in chat[0]["content"] and "###STOP###" in chat[0]["content"]
    out = asyncio.run(sim.reply(s.task, [Message("assistant", "Hi")]))
    assert out == "###STOP###" and seen[0].endswith("<|im_start|>assistant\n")


def test_the_episode_conversation_records_its_last_turns_finish_reason(tok):
    """record=episode keeps one growing conversation: its finish reason is its latest turn's, so
    algorithm.mask_truncated_completions masks an episode whose last turn ran out of tokens (it never did)."""
    cut = run(sample("return_"), Script(tok, ['<tool_call>{"name": "' + "x" * 300], cut=set(range(10))), tok,
              turn_tokens=40, max_total_tokens=4000)
    assert cut.conversations[0].meta["finish"] == "length" and cut.metrics["turn_truncated"] > 0
    done = run(sample("return_"), Script(tok, ["The return is recorded."]), tok, turn_tokens=40)
    assert done.conversations[0].meta["finish"] == "stop"
