"""The options of the built-in workflows (``workflow.options.*``), one pydantic model each.

Defaults are the papers' (MemAgent: 5000-token chunks, 1024-token memory and answer;
ReMemR1: 2048-token budgets). A workflow reads only its own model, so a key that does
not apply to it fails with the nearest name instead of being ignored.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memrl.config.registry import registered
from memrl.plugins import REWARDS


class NoOptions(BaseModel):
    """The options of a workflow that declares none: any key is a typo."""

    model_config = ConfigDict(extra="forbid")


def strict_options(model: type[BaseModel]) -> type[BaseModel]:
    """``model``, or where it does not say what unknown keys mean, a subclass of it that refuses them.

    pydantic's default drops unknown keys, so ``revise_token=4`` would train with the default of
    ``revise_tokens``; a model that sets ``extra`` itself (even ``"allow"``) is taken at its word.
    """
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or "extra" in model.model_config:
        return model

    class Strict(model):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(extra="forbid")

    Strict.__name__, Strict.__qualname__ = model.__name__, model.__qualname__
    Strict.__module__, Strict.__doc__ = model.__module__, model.__doc__
    return Strict


def options_error(exc: ValidationError, workflow: str, model: type[BaseModel], prefix: str = "") -> str:
    """One line for the first problem of ``exc``: an unknown option gets the nearest name (``prefix`` is where
    options live: ``workflow.options.`` in a config, nothing for constructor keywords)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][0]), list(model.model_fields), n=1, cutoff=0.5)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else \
            f"{workflow} takes: {', '.join(model.model_fields) or 'no options'}"
        return f"unknown option '{prefix}{where}' of workflow {workflow!r}: {hint}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not where:
        return msg
    if prefix and msg.startswith(f"{prefix}{where} "):  # the check already names the option
        return msg
    return f"{prefix}{where}: {msg}" if prefix else f"option {where!r} of workflow {workflow!r}: {msg}"


class OptionsModel(BaseModel):
    """Strict about keys (a typo fails), lenient about scalar spelling, like the config sections."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)


class QAOptions(OptionsModel):
    """A question answered at the end of the episode and scored against gold answers."""

    final_tokens: int = Field(1024, gt=0, description="Max new tokens of the final answer turn.")
    question_tokens: int | None = Field(1024, gt=0, description="The question is cut to this many tokens; "
                                          "None never cuts it (the papers' evaluation clients).")
    prompts: str | None = Field(None, description="YAML file overriding the prompt templates.")
    reward: registered(REWARDS) = Field(
        "sub_em", description="em | sub_em | f1 | memagent_strict (MemAgent's RL reward: last boxed answer in the "
        "final 300 characters, lowercased, MATH-normalised without spaces, exact match, max over golds), or your "
        "own reward (text, *, sample, answer=None, **kw) -> float as 'package.module:function'.")
    answer_format: str = Field("boxed", description="How the final answer is read: boxed (last \\boxed{}), "
                               "answer_is (after the last 'the answer is', MemAgent's eval prompt) or "
                               "regex:<pattern> (last match; its first group if any).")

    @field_validator("answer_format")
    @classmethod
    def _answer_format(cls, v: str) -> str:
        from memrl.rewards.published import check_answer_format

        return check_answer_format(v)


class ChunkedOptions(QAOptions):
    """A document read chunk by chunk into a bounded memory."""

    chunk_tokens: int = Field(5000, gt=0, description="Context tokens shown per memory turn.")
    memory_tokens: int = Field(1024, gt=0, description="Max new tokens of a memory turn (= memory size).")
    max_chunks: int | None = Field(None, gt=0, description="Centre-truncate contexts longer than "
                                   "max_chunks * chunk_tokens (MemAgent training); None reads everything.")


class MemAgentOptions(ChunkedOptions):
    """MemAgent: overwrite a memory chunk by chunk, answer from the memory."""

    slot_fill: Literal["ids", "text"] = Field(
        "ids", description="How question, memory and chunk enter a prompt: ids (spliced token ids, the memory "
        "exactly as generated) or text (decoded, filled in as text and chat-templated whole: the ids a server "
        "builds from MemAgent's evaluation client; the default of memrl eval --protocol memagent).")


class RememR1Options(ChunkedOptions):
    """ReMemR1: MemAgent plus recall of earlier memories and per-turn state rewards (2048-token budgets)."""

    final_tokens: int = Field(2048, gt=0, description="Max new tokens of the final answer turn.")
    question_tokens: int | None = Field(2048, gt=0, description="The question is cut to this many tokens; "
                                          "None never cuts it (the papers' evaluation clients).")
    memory_tokens: int = Field(2048, gt=0, description="Max new tokens of a memory turn (= memory size).")
    recall_in_final: bool = Field(True, description="Show the recalled memory in the final turn.")
    state_reward_alpha: float = Field(0.8, ge=0, le=1, description="Weight of the outcome advantage against the "
                                      "per-turn state advantage (ReMemR1's alpha).")
    slot_fill: Literal["ids", "text"] = Field(
        "ids", description="How question, memories and chunk enter a prompt: ids (spliced token ids, as training "
        "does) or text (decoded, filled in as text and chat-templated whole: the ids a server builds from "
        "ReMemR1's evaluation client; the default of memrl eval --protocol rememr1).")
    rememr1_variant: Literal["memrl", "released"] = Field(
        "memrl", description="'released' reproduces the public ReMemR1 code (subword TF-IDF recall, <thinking> "
        "prompts, its state reward and the 2x state advantage); 'memrl' is the cleaner version.")
    recall_pool: Literal["previous", "including_current"] = Field(
        "previous", description="Recall searches memories of earlier turns (ReMemR1 training) or also the one "
        "just written (ReMemR1's eval code).")


class FullContextOptions(QAOptions):
    """The baseline: the whole document in one prompt."""

    max_context_tokens: int = Field(32768, gt=0, description="Model window; the document is centre-truncated "
                                    "to fit with the question and the answer budget.")


class ToolAgentOptions(OptionsModel):
    """A τ²-bench agent: tools, a policy, and (outside solo mode) a simulated user."""

    max_turns: int = Field(30, gt=0, description="Model turns per episode before it is cut (reward 0).")
    max_steps: int | None = Field(None, gt=0, description="tau2-bench's step limit (its default: 200): every "
                                  "message of the agent or the user and every batch of tool results is a step; "
                                  "the episode ends at the limit (max_steps, reward 0) where tau2-bench's "
                                  "orchestrator would end it. None: no step limit.")
    max_errors: int | None = Field(None, gt=0, description="tau2-bench's error limit (its default: 10): the "
                                   "episode ends (too_many_errors, reward 0) once this many tool calls, the "
                                   "agent's and the user's, returned an error. None: no limit.")
    timeout_s: float | None = Field(None, gt=0, description="tau2-bench's --timeout: the episode ends (timeout, "
                                    "reward 0) at the first step past this many seconds of wall-clock time, "
                                    "unless that step ended it otherwise; a model call under way is not "
                                    "interrupted. None (tau2-bench's default): no timeout.")
    enforce_protocol: bool = Field(False, description="tau2-bench's --enforce-communication-protocol: an agent "
                                   "or user message with both text and tool calls, or with neither, ends the "
                                   "episode (agent_error / user_error, reward 0). Off, as in tau2-bench.")
    invalid_messages: Literal["memrl", "tau2"] = Field(
        "memrl", description="What an empty agent or user message, a tool call from the server whose arguments "
        "are not a JSON object, or a solo agent's text turn does. 'memrl': the episode goes on (the model is "
        "shown the error; the solo agent's text ends it as agent_error, reward 0), what training needs. 'tau2': "
        "the trial fails, as in tau2-bench, where such a message raises; memrl eval runs it again up to "
        "eval.max_retries times and then leaves it out of the metrics (tau2-bench's infrastructure_error).")
    turn_tokens: int = Field(512, gt=0, description="Max new tokens of one model turn.")
    max_total_tokens: int = Field(8192, gt=0, description="Context limit of the whole episode.")
    tool_format: Literal["qwen", "hermes", "template"] = Field(
        "qwen", description="ChatML role of tool results ('qwen': user turn with <tool_response>; 'hermes': tool), "
        "or 'template': the tokenizer's own chat template with tools= (the prompt an OpenAI-compatible server "
        "builds for the same messages).")
    tool_parser: Literal["hermes", "json"] = Field("hermes", description="How tool calls are read from model text "
                                                   "(<tool_call> JSON blocks, or bare JSON).")
    tool_protocol: Literal["tokens", "openai_chat"] = Field(
        "tokens", description="'tokens' (token ids in and out, tool_format/tool_parser; what training needs) or "
        "'openai_chat' (OpenAI chat messages and tool_calls over /v1/chat/completions, engine.kind=openai; eval "
        "and serving only, the server's template and tool parser decide the prompt).")
    chat_omit: list[Literal["max_tokens", "top_p"]] = Field(
        default_factory=list, description="tool_protocol=openai_chat: request fields left out so the server's "
        "defaults apply. [max_tokens, top_p] sends what tau2-bench's agent sends (a turn is then not capped at "
        "turn_tokens; max_total_tokens still ends the episode).")
    seeds: Literal["memrl", "tau2"] = Field(
        "memrl", description="How a seeded episode seeds its model calls: 'memrl' (each call its own seed, "
        "stepped per turn) or 'tau2' (tau2-bench's: every agent and user call of the episode sends the episode's "
        "seed, and memrl eval gives trial t tau2-bench's t-th trial seed, random.seed(sampling.seed) then "
        "randint(0, 1000000) per trial; tau2-bench's default seed is 300).")
    record: Literal["episode", "turns"] = Field(
        "episode", description="How an episode is recorded for training: 'episode' (one conversation, the turns "
        "inside one growing context) or 'turns' (each model call its own conversation: the whole context so far "
        "as prompt, that call's tokens trained, anchored at the database state and the context the agent saw, "
        "so gigpo can credit turns). The episode runs the same either way; tool_protocol=openai_chat records "
        "nothing.")


class LegacyOptions(MemAgentOptions, RememR1Options, FullContextOptions, ToolAgentOptions):
    """Every field the workflow section had before options existed: what a function-style plug-in still gets."""

    final_tokens: int = Field(1024, gt=0, description="Max new tokens of the final answer turn.")
    question_tokens: int | None = Field(1024, gt=0, description="The question is cut to this many tokens; "
                                          "None never cuts it (the papers' evaluation clients).")
    memory_tokens: int = Field(1024, gt=0, description="Max new tokens of a memory turn (= memory size).")


LEGACY_KEYS = frozenset(LegacyOptions.model_fields)
