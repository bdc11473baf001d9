"""Nested config sections: side models (``env.user``, ``env.judge``), ``trainer.eval``, ``trainer.async``."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from memrl.config.registry import ENGINES, registered
from memrl.config.section import Finite, Section, ServerURL


class SideModelConfig(Section):
    """A model the workflow talks to besides the policy: a local HF model or an OpenAI-compatible server."""

    model: str | None = Field(None, description="Model path/alias (engine hf), its tokenizer (engine openai), or "
                              "with protocol chat the served model's name (e.g. gpt-4.1-2025-04-14).")
    engine: registered(ENGINES) = Field("hf", description="A registered engine kind that can serve a side model: "
                                        "hf (in-process), openai (a server at base_url) or your own.")
    base_url: ServerURL | None = Field(None, description="openai: server root, e.g. http://host:8000/v1.")
    served_model: str | None = Field(None, description="openai: model name sent in requests.")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the key.")
    protocol: Literal["tokens", "chat"] = Field(
        "tokens", description="tokens: memrl renders the chat with the model's tokenizer and sends token ids "
        "(/completions or in-process). chat: OpenAI chat messages and function-calling tools to "
        "/v1/chat/completions (engine openai), as tau2-bench talks to its user simulator and judge; the "
        "server's own template and tool parser apply, so any chat API (e.g. gpt-4.1) can play the part. With "
        "engine hf, the same requests are rendered with the model's chat template and tools and its calls read "
        "with the hermes parser, as vLLM serves them.")
    max_tokens: int | None = Field(None, gt=0, description="New tokens of one reply (null: 256 for the user, 1024 "
                                   "for the judge with protocol tokens; with protocol chat none is sent, as in "
                                   "tau2-bench).")
    default_max_tokens: ClassVar[int] = 256

    def reply_tokens(self) -> int | None:
        """The cap on one reply: ``max_tokens``, else the section's default; None (send none) with chat."""
        if self.max_tokens is not None:
            return self.max_tokens
        return None if self.protocol == "chat" else self.default_max_tokens


class UserSimConfig(SideModelConfig):
    """The user simulator of a tool agent outside solo mode (``env.solo=false``)."""

    temperature: Finite = Field(1.0, ge=0, description="Sampling temperature of the simulated user.")
    prompt: str | None = Field(None, description="Text file with the user simulator's system prompt "
                               "(must contain {scenario}).")


class JudgeConfig(SideModelConfig):
    """The LLM judge of tau2-bench NL assertions. Unset model: assertions are not judged, left out of the
    reward and counted as nl_unchecked."""

    default_max_tokens: ClassVar[int] = 1024


class TrainEvalConfig(Section):
    """Evaluation during training, on the workflow's eval samples (data.eval_file, env.eval_split)."""

    every: int = Field(0, ge=0, description="Evaluate every K steps (0: never).")
    samples: int | None = Field(None, ge=1, description="Evaluate the first K samples (null: all).")
    n: int = Field(1, ge=1, description="Episodes per eval question; the accuracy is their mean (MemAgent "
                   "validates with n=4, temperature 1.0, top_p 0.7).")
    temperature: Finite = Field(0.0, ge=0, description="Eval sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Eval nucleus sampling.")


class AsyncConfig(Section):
    """Asynchronous training (``trainer.mode=async``): how far generation may run ahead of the weights."""

    max_staleness: int = Field(1, ge=0, description="How many updates generation may run ahead of the weights "
                               "(AReaL's max_head_offpolicyness: groups accepted + running < (max_staleness + "
                               "updates + 1) x prompts_per_step; 0: on-policy batches, equal to sync).")
    drop_stale: bool = Field(False, description="Also drop a finished group whose oldest token is more than "
                             "max_staleness updates behind the weights it would update (async/dropped_stale). "
                             "AReaL trains every finished group and only logs its lag (async/staleness_over); a "
                             "group held up by a slow tool or agent can be that stale.")
    partial_rollouts: Literal["finish", "interrupt"] = Field(
        "interrupt", description="At a weight update: 'finish' lets each in-flight model turn end under the old "
        "weights; 'interrupt' pauses generation every partial_chunk_tokens tokens so the new weights continue "
        "it from the tokens so far. Either way every token records its policy version.")
    partial_chunk_tokens: int = Field(32, ge=1, description="partial_rollouts=interrupt: tokens generated between "
                                      "points where a weight update may take over.")
