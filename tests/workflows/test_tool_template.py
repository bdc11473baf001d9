"""workflow.tool_format=template: token mode renders the tokenizer's own chat template with tools=.

Each prompt the engine gets must be the text that ``apply_chat_template(messages, tools=...)``
gives for the episode so far (what an OpenAI-compatible server builds), while the turns stay
token-in/token-out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memrl.config.schema import MemRLConfig
from memrl.envs.messages import Message, ToolCall
from memrl.models.tiny import build_hf_tokenizer
from memrl.workflows.tool_agent import task_samples, tool_agent
from memrl.text.tool_calls import agent_chat, render_call
from tests.workflows.test_tool_agent import Script

# A Qwen-2.5-like template with tools (written for this test): tools in the system turn, calls as
# <tool_call> JSON, consecutive tool results in one user turn of <tool_response> blocks.
TOOL_TEMPLATE = (  # Hugging Face renders with trim_blocks: a newline right after a tag is written {{ '\n' }}
    "<|im_start|>system\n{{ messages[0]['content'] }}{% if tools %}{{ '\n\n# Tools\n<tools>' }}"
    "{% for t in tools %}{{ '\n' }}{{ t | tojson }}{% endfor %}{{ '\n</tools>' }}{% endif %}<|im_end|>\n"
    "{% for m in messages[1:] %}"
    "{% if m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}{% if m['content'] or not loop.first %}{{ '\n' }}{% endif %}"
    "<tool_call>\n{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] | tojson }}}"
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}"
    "{% if messages[loop.index0]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\n<tool_response>\n' }}{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 2]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    t = build_hf_tokenizer(["return_book loan_id member tool_call tool_response ###STOP### hello"], vocab_size=400)
    t.chat_template = TOOL_TEMPLATE
    return t


def cfg(**wf: Any) -> MemRLConfig:
    return MemRLConfig.model_validate({"workflow": {"name": "tool_agent", **wf}})


def sample(task_id: str, **kw: Any):
    s = next(x for x in task_samples(cfg(), None) if x.task.id == task_id)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def assert_prompts_are_served_renderings(s: Any, script: Script, traj: Any, tok: Any) -> str:
    """Before each agent turn, the engine's prompt decodes to the template's rendering of the log so far."""
    env = s.domain.new_env(solo=s.solo)
    log = [Message.from_dict(m) for m in traj.info["messages"]]
    starts = [i for i, m in enumerate(log) if m.role == "assistant" and i > 0]
    assert len(starts) == len(script.engine.calls)
    served = ""
    for (prompt, _), upto in zip(script.engine.calls, starts):
        served = tok.apply_chat_template(agent_chat(env.policy, log[:upto], json_arguments=False),
                                         tools=env.tool_schemas(), tokenize=False, add_generation_prompt=True)
        assert tok.decode(prompt) == served
    # still token-in/token-out: every prompt extends the previous prompt and output unchanged
    for (prev, _), out, (nxt, _) in zip(script.engine.calls, script.outputs, script.engine.calls[1:]):
        assert nxt[: len(prev) + len(out)] == prev + out
    return served


def test_every_prompt_is_the_templates_rendering_of_the_episode_so_far(tok):
    s = sample("pay_and_checkout_1")
    gold = s.task.evaluation_criteria.actions
    both = "I will do both.\n" + "\n".join(render_call(ToolCall(a.name, a.arguments)) for a in gold)
    texts = [render_call(ToolCall("get_member_details", {"member_id": "M004"})), both, "Paid and lent."]
    script = Script(tok, texts)
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(tool_format="template").workflow))
    assert traj.reward == 1.0 and traj.info["ending"] == "agent_stop" and traj.metrics["turns"] == 3
    last = assert_prompts_are_served_renderings(s, script, traj, tok)
    assert "<|im_start|>user\n<tool_response>\n" in last and last.count("<tool_response>") == 3
    assert '<tools>\n{"type": "function", "function": {"name": "checkout_book"' in last


def test_user_turns_and_a_cut_turn_follow_the_template(tok):
    from memrl.envs.user_sim import ScriptedUser

    loan = sample("return_1").task.evaluation_criteria.actions[0].arguments["loan_id"]
    said = iter(["Please return my book.", f"It is loan {loan}.", "Thanks ###STOP###"])
    s = sample("return_1", solo=False, user=ScriptedUser(lambda task, messages: next(said)))
    script = Script(tok, ["x" * 300, render_call(ToolCall("return_book", {"loan_id": loan})), "Done."], cut={0})
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(tool_format="template", turn_tokens=120).workflow))
    assert traj.reward == 1.0 and traj.info["ending"] == "user_stop" and traj.metrics["turn_truncated"] == 1
    assert_prompts_are_served_renderings(s, script, traj, tok)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    conv = traj.conversations[0]
    cut_at = conv.loss_mask.index(1) + 120
    assert conv.token_ids[cut_at] == end and conv.loss_mask[cut_at] == 0  # the closing token is not trained


def test_templates_that_cannot_be_cut_are_refused(tok):
    s = sample("return_1")
    plain = build_hf_tokenizer(["hello"], vocab_size=300)
    plain.chat_template = None
    with pytest.raises(ValueError, match="workflow.options.tool_format=template needs a tokenizer with a chat template"):
        asyncio.run(tool_agent(s, Script(plain, ["hi"]).engine, plain, cfg(tool_format="template").workflow))
    counting = build_hf_tokenizer(["hello"], vocab_size=300)
    counting.chat_template = ("{{ messages | length }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                              "{{ m['content'] }}<|im_end|>\n{% endfor %}"
                              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    script = Script(counting, [render_call(ToolCall("search_books", {"query": "x"}))])
    with pytest.raises(ValueError, match="renders earlier turns differently"):
        asyncio.run(tool_agent(s, script.engine, counting, cfg(tool_format="template").workflow))


def test_a_tokenizer_without_chat_template_is_used_as_plain_text_and_said_once(capsys):
    from memrl.workflows.templates import apply_chat

    plain = build_hf_tokenizer(["hello"], vocab_size=300)
    plain.chat_template = None
    plain.name_or_path = "my-base-model"
    assert apply_chat(plain, "Question?") == apply_chat(plain, "Question?") == "Question?\n"
    said = capsys.readouterr().err
    assert said.count("my-base-model: the tokenizer has no chat template") == 1 and said.count("\n") == 1
