"""Build the engine a config asks for."""

from __future__ import annotations

from typing import Any

from memrl.config.schema import MemRLConfig
from memrl.engines.base import Engine


def build_engine(cfg: MemRLConfig, model: Any = None) -> Engine:
    """``hf`` loads ``model.path`` in-process (or wraps ``model``); ``openai`` talks to a server; ``vllm`` in-process."""
    kind = cfg.engine.kind
    if kind == "hf":
        from memrl.engines.hf import HFEngine
        from memrl.models.resolve import load_model

        model = model if model is not None else load_model(cfg.model.path, cfg.model.dtype, cfg.engine.device)
        return HFEngine(model, max_batch_size=cfg.engine.max_batch_size, seed=cfg.trainer.seed)
    if kind == "openai":
        from memrl.engines.openai import OpenAIEngine

        if not cfg.engine.base_url:
            raise ValueError("engine.kind=openai needs engine.base_url (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIEngine(cfg.engine.base_url, model=cfg.engine.served_model or cfg.model.path,
                            api_key_env=cfg.engine.api_key_env, **openai_options(cfg))
    if kind == "vllm":
        from memrl.engines.vllm import VLLMEngine

        return VLLMEngine.from_config(cfg)
    raise ValueError(f"unknown engine kind {kind!r}")


def openai_options(cfg: MemRLConfig) -> dict[str, Any]:
    """The ``engine`` section's concurrency, patience and retry settings for an :class:`OpenAIEngine`."""
    e = cfg.engine
    return {"concurrency": e.concurrency, "timeout_s": e.timeout_s, "timeout_per_token_s": e.timeout_per_token_s,
            "max_wait_s": e.max_wait_s, "retries": e.retries, "backoff_s": e.backoff_s}


def build_side_engine(cfg: MemRLConfig, model: str, kind: str, base_url: str | None,
                      served_model: str | None, api_key_env: str) -> tuple[Engine, Any]:
    """(engine, tokenizer) of a helper model beside the policy: the user simulator or the NL judge.

    ``kind`` ``hf`` loads ``model`` in-process; ``openai`` talks to ``base_url`` (``model`` then names
    the tokenizer and, unless ``served_model`` is given, the served model). Concurrency, timeouts,
    retries, device and batch size follow the ``engine`` section.
    """
    from memrl.models.resolve import load_model, load_tokenizer

    tokenizer = load_tokenizer(model)
    if kind == "openai":
        from memrl.engines.openai import OpenAIEngine

        return OpenAIEngine(base_url or "", served_model or model, api_key_env=api_key_env,
                            **openai_options(cfg)), tokenizer
    from memrl.engines.hf import HFEngine

    net = load_model(model, device=cfg.engine.device)
    return HFEngine(net, pad_token_id=tokenizer.pad_token_id or 0, max_batch_size=cfg.engine.max_batch_size,
                    seed=cfg.trainer.seed), tokenizer
