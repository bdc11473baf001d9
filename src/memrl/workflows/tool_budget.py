"""Checks of a tool-agent run before any model loads: its environment, and room for its prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memrl.config import ConfigError, MemRLConfig
from memrl.envs.domain import load_domain
from memrl.workflows.common import encode_text
from memrl.text.tool_calls import FORMATS, TemplateFormat


def check_env(cfg: MemRLConfig) -> None:
    """The tool agent's settings: a trainable protocol, a domain whose splits exist, a user simulator."""
    if cfg.workflow.tool_protocol == "openai_chat":
        raise ConfigError("workflow.options.tool_protocol=openai_chat returns no token ids to train on; train with "
                          "workflow.options.tool_protocol=tokens (openai_chat is for memrl eval against a chat server)")
    try:
        domain = load_domain(cfg.env.domain, cfg.env.data_dir, prompts=cfg.env.prompts,
                             tool_options=cfg.env.tool_options)
        domain.get_tasks(cfg.env.train_split)
        if cfg.trainer.eval.every:
            domain.get_tasks(cfg.env.eval_split)
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(f"env: {err}") from None
    if not cfg.env.solo and not cfg.env.user.model:
        raise ConfigError("env.solo=false needs env.user.model (the user simulator)")


def tool_prompt_floor(cfg: MemRLConfig, tokenizer: Any, sample: Any) -> int:
    """Tokens of the domain's system prompt and tool schemas: the part of every tool_agent episode's
    first prompt that no task makes shorter (token protocol; ``workflow.options.tool_format`` decides the layout)."""
    w = cfg.workflow
    fmt = TemplateFormat(tokenizer) if w.tool_format == "template" else FORMATS[w.tool_format]
    env = sample.domain.new_env(solo=sample.solo)
    return len(encode_text(tokenizer, fmt.prompt(env.system_prompt(sample.task), env.tool_schemas(), [])))


def check_tool_prompt_budget(cfg: MemRLConfig, tokenizer: Any, samples: list[Any],
                             warn: Callable[[str], None]) -> None:
    """Refuse a ``workflow.options.max_total_tokens`` below the domain's system prompt and tools: every episode would
    end ``prompt_too_long`` with no turn (reward 0 that says nothing about the model); warn when it leaves
    less than one turn's worth."""
    w = cfg.workflow
    if w.tool_protocol != "tokens" or not samples:
        return
    floor = tool_prompt_floor(cfg, tokenizer, samples[0])
    room = w.max_total_tokens - floor
    if room <= 0:
        suggest = -(-(floor + 4 * w.turn_tokens) // 1024) * 1024
        raise ConfigError(f"workflow.options.max_total_tokens={w.max_total_tokens} is below the {floor} tokens of "
                          f"domain "
                          f"{cfg.env.domain}'s system prompt and tool schemas: every episode would end before the "
                          f"agent's first turn (prompt_too_long); raise it, e.g. "
                          f"workflow.options.max_total_tokens={suggest}")
    if room < w.turn_tokens:
        warn(f"workflow.options.max_total_tokens={w.max_total_tokens} leaves {room} tokens after domain "
             f"{cfg.env.domain}'s {floor}-token system prompt and tools, less than one turn "
             f"(workflow.options.turn_tokens={w.turn_tokens}); "
             "most episodes will end prompt_too_long")
