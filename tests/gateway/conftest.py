"""Fixtures of the gateway tests: one gateway per module, episodes opened on it with the real openai SDK."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the gateway tests use the openai SDK (pip install 'memrl[dev]')")

from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.gateway import CallSettings, Gateway  # noqa: E402
from memrl.gateway.tool_parser import resolve_tool_parser  # noqa: E402
from memrl.workflows.api import Episode  # noqa: E402

# A ChatML template that renders tools and earlier tool calls (hermes style), like Qwen's.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments}"
    " | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def gateway():
    gw = Gateway("tiny-policy", max_body_mb=0.25)
    yield gw
    gw.close()


@pytest.fixture(scope="session")
def tools_tokenizer(tiny_model):
    tok = copy.deepcopy(tiny_model[1])
    tok.chat_template = TOOLS_TEMPLATE
    tok.model_max_length = 4096  # the window of engines without a model config (ScriptedEngine)
    return tok


@contextlib.asynccontextmanager
async def open_episode(gateway: Gateway, engine: Any, tokenizer: Any, *, seed: int = 0,
                       sampling: SamplingParams | None = None, **settings: Any) -> AsyncIterator[tuple]:
    """(episode, endpoint, AsyncOpenAI client) for one episode open on ``gateway``."""
    settings.setdefault("tool_parser", resolve_tool_parser("hermes"))
    ep = Episode({}, engine=engine, tokenizer=tokenizer, sampling=sampling or SamplingParams(seed=seed))
    with gateway.episode(ep, CallSettings(**settings)) as endpoint:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        try:
            yield ep, endpoint, client
        finally:
            await client.close()
