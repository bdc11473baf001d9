"""Train any agent program: an OpenAI-compatible gateway that records each call's exact tokens.

A program written against the OpenAI API (the ``openai`` SDK, LangGraph, plain HTTP) is given
a base URL and key of its own for one episode; every call it makes is rendered with the
tokenizer's chat template, generated token-in/token-out by the rollout engine and recorded
as a conversation of that episode (:mod:`memrl.workflows.api`). The ``agent`` workflow
(:mod:`memrl.gateway.workflow`) runs such programs for ``memrl train`` and ``memrl eval``.
"""

from memrl.gateway.server import Endpoint, Gateway
from memrl.gateway.sessions import CallSettings

__all__ = ["CallSettings", "Endpoint", "Gateway"]
