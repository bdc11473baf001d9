"""Build the engine a config asks for: ``engine.kind`` names an engine registered here (or yours).

Each kind registers a builder ``build(cfg, model) -> Engine`` with :func:`register_engine`
(``model``: an in-process policy to wrap, or None) and, if it can also serve a helper model beside
the policy (user simulator, NL judge), a ``side(cfg, spec, tokenizer, where) -> Engine`` (``spec``:
that model's config section, e.g. ``env.user``; ``where``: its dotted path, for error messages).
Heavy backends are imported inside their builders, so registering costs nothing and
``engine.kind`` is validated without importing vLLM.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memrl.config.registry import ENGINES
from memrl.engines.base import Engine
from memrl.engines.hosted import Hosted, HostedHF, HostedVLLM, vllm_replica_gpus

if TYPE_CHECKING:
    from memrl.config.schema import MemRLConfig

Builder = Callable[..., Engine]


@dataclass(frozen=True)
class EngineKind:
    """How to build one kind of engine for the policy (``build``) and, if it can, for a side model (``side``).

    ``receives_weights``: whether the trainer can push new weights into it (a remote server cannot), so
    training with it is refused before anything loads.
    ``replica``: how it runs inside a rollout replica (``cluster.rollout_replicas``), a
    :class:`~memrl.engines.hosted.Hosted` builder; None: it cannot. ``replica_gpus(cfg)``: the GPUs one
    replica asks for when ``cluster.replica_gpus`` leaves it open (None: none).
    ``wraps_policy``: it can generate with the trained policy module itself, in the trainer's process; its
    ``build(cfg, model, pad_token_id=...)`` then gets that module (or a copy) and the tokenizer's pad id.
    ``preflight(cfg)``: checks of the kind's own options against the rest of the config, run by the
    trainer's preflight before any model loads (a ``ConfigError`` naming the keys to change).
    ``chats``: its engines answer OpenAI chat messages themselves (``await engine.chat(messages, tools,
    params)``), so a side model with ``protocol: chat`` loads no tokenizer (the server's own template and
    tool parser apply); any other kind's engine is wrapped to answer them with the model's template.
    """

    build: Builder
    side: Builder | None = None
    receives_weights: bool = True
    replica: Callable[..., Hosted] | None = None
    replica_gpus: Callable[[MemRLConfig], int] | None = None
    wraps_policy: bool = False
    preflight: Callable[[MemRLConfig], None] | None = None
    chats: bool = False

    def __call__(self, cfg: MemRLConfig, model: Any = None) -> Engine:
        return self.build(cfg, model)


def register_engine(name: str, *, side: Builder | None = None, receives_weights: bool = True,
                    replica: Callable[..., Hosted] | None = None,
                    replica_gpus: Callable[[MemRLConfig], int] | None = None,
                    wraps_policy: bool = False,
                    preflight: Callable[[MemRLConfig], None] | None = None,
                    chats: bool = False) -> Callable[[Builder], EngineKind]:
    """Decorator: register ``build(cfg, model) -> Engine`` as ``engine.kind=name`` (the keywords: see
    :class:`EngineKind`)."""
    def decorate(build: Builder) -> EngineKind:
        return ENGINES.register(name, EngineKind(build, side, receives_weights, replica, replica_gpus,
                                                 wraps_policy, preflight, chats))
    return decorate


def engine_kind(name: str) -> EngineKind:
    """The kind ``name`` selects; a plain builder function given by import path serves the policy only."""
    obj = ENGINES.get(name)
    return obj if isinstance(obj, EngineKind) else EngineKind(obj)


def side_engine_kinds() -> tuple[str, ...]:
    """The registered kinds that can run a side model (what ``env.user.engine`` may name)."""
    return tuple(n for n in ENGINES.names if engine_kind(n).side is not None)


def trainable_engine_kinds() -> tuple[str, ...]:
    """The registered kinds the trainer can push weights into (what training may use)."""
    return tuple(n for n in ENGINES.names if engine_kind(n).receives_weights)


def replica_engine_kinds() -> tuple[str, ...]:
    """The registered kinds that can run in a rollout replica (what ``cluster.rollout_replicas`` may use)."""
    return tuple(n for n in ENGINES.names if engine_kind(n).replica is not None)


def replica_builder(name: str) -> Callable[..., Hosted]:
    """The ``replica`` builder of kind ``name``; a one-line error naming the kinds that have one."""
    build = engine_kind(name).replica
    if build is None:
        raise ValueError(f"engine.kind={name} cannot run in a rollout replica; choose "
                         f"{', '.join(replica_engine_kinds())}")
    return build


def openai_options(cfg: MemRLConfig) -> dict[str, Any]:
    """The ``engine`` section's concurrency, patience and retry settings for an :class:`OpenAIEngine`."""
    e = cfg.engine
    return {"concurrency": e.concurrency, "timeout_s": e.timeout_s, "timeout_per_token_s": e.timeout_per_token_s,
            "max_wait_s": e.max_wait_s, "retries": e.retries, "backoff_s": e.backoff_s}


def _hf_side(cfg: MemRLConfig, spec: Any, tokenizer: Any, where: str) -> Engine:
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    net = load_model(spec.model, device=cfg.engine.device)
    return HFEngine(net, pad_token_id=tokenizer.pad_token_id or 0, max_batch_size=cfg.engine.max_batch_size,
                    seed=cfg.trainer.seed, decode=cfg.engine.decode, max_attention_bytes=_attention_bytes(cfg),
                    continuous_batching=cfg.engine.continuous_batching, tokenizer=tokenizer)


@register_engine("hf", side=_hf_side, replica=HostedHF, wraps_policy=True)
def _hf(cfg: MemRLConfig, model: Any = None, pad_token_id: int | None = None) -> Engine:
    """Batching transformers in-process: loads model.path or wraps the trained policy.

    The trainer passes the policy with its tokenizer's pad id.
    """
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import config_tokenizer, load_model

    model = model if model is not None else load_model(cfg.model.path, cfg.model.dtype, cfg.engine.device)
    return HFEngine(model, pad_token_id=pad_token_id, max_batch_size=cfg.engine.max_batch_size,
                    seed=cfg.trainer.seed, decode=cfg.engine.decode, max_attention_bytes=_attention_bytes(cfg),
                    continuous_batching=cfg.engine.continuous_batching,
                    tokenizer=config_tokenizer(cfg.model))  # loaded once per process: the trainer's own


def _attention_bytes(cfg: MemRLConfig) -> int | None:
    gb = cfg.engine.max_attention_gb
    return None if gb is None else int(gb * 2**30)


def _openai_side(cfg: MemRLConfig, spec: Any, tokenizer: Any, where: str) -> Engine:
    from memrl.engines.openai import OpenAIEngine

    if not spec.base_url:
        raise ValueError(f"{where}.engine=openai needs {where}.base_url (e.g. http://127.0.0.1:8000/v1)")
    return OpenAIEngine(spec.base_url, spec.served_model or spec.model, api_key_env=spec.api_key_env,
                        **openai_options(cfg))


@register_engine("openai", side=_openai_side, receives_weights=False, chats=True)
def _openai(cfg: MemRLConfig, model: Any = None) -> Engine:
    """An OpenAI-compatible server at engine.base_url (vLLM, SGLang, memrl serve)."""
    from memrl.engines.openai import OpenAIEngine

    if not cfg.engine.base_url:
        raise ValueError("engine.kind=openai needs engine.base_url (e.g. http://127.0.0.1:8000/v1)")
    engine = OpenAIEngine(cfg.engine.base_url, model=cfg.engine.served_model or cfg.model.path,
                          api_key_env=cfg.engine.api_key_env, **openai_options(cfg))
    temperature = cfg.sampling.temperature
    if cfg.engine.logprob_check and temperature not in (0.0, 1.0):
        engine.check_logprobs(temperature)
    if temperature != 0.0 and (cfg.sampling.top_p < 1.0 or cfg.sampling.top_k > 0):
        from memrl.engines.vllm_args import filtering_notice  # a vLLM server's processed log-probs, as in-process

        note = filtering_notice("processed_logprobs", cfg.sampling.top_p, cfg.sampling.top_k)
        if temperature == 1.0:  # no probe ran: a server in raw mode is exact here (raw = unfiltered at T 1)
            note = f"{note} (if the server runs --logprobs-mode processed_logprobs; raw_logprobs at temperature 1 " \
                   "are the trainer's own, unfiltered)"
        print(note, file=sys.stderr)
    return engine


def _vllm_preflight(cfg: MemRLConfig) -> None:
    """Asynchronous training generates during every update, so the engine must not sleep through them."""
    from memrl.config import ConfigError

    if cfg.trainer.mode == "async" and cfg.engine.vllm.sleep == "on":
        raise ConfigError("trainer.mode=async keeps vLLM generating during updates: use engine.vllm.sleep=off or auto")


@register_engine("vllm", replica=HostedVLLM, replica_gpus=vllm_replica_gpus, preflight=_vllm_preflight)
def _vllm(cfg: MemRLConfig, model: Any = None) -> Engine:
    """vLLM in-process (engine.vllm.*), weights synced from the trainer."""
    from memrl.engines.vllm import VLLMEngine

    return VLLMEngine.from_config(cfg)


def build_engine(cfg: MemRLConfig, model: Any = None) -> Engine:
    """The engine of ``engine.kind``; ``model`` is an in-process policy the kind may wrap instead of loading."""
    return engine_kind(cfg.engine.kind)(cfg, model)


def build_side_engine(cfg: MemRLConfig, spec: Any, where: str) -> tuple[Engine, Any]:
    """(engine, tokenizer) of a helper model beside the policy: the user simulator or the NL judge.

    ``spec`` is its section (``env.user``, ``env.judge``; ``where`` is that path): ``spec.engine`` names
    a registered kind with a side builder. ``hf`` loads ``spec.model`` in-process; ``openai`` talks to
    ``spec.base_url`` (``spec.model`` then names the tokenizer and, unless ``spec.served_model`` is
    given, the served model). Concurrency, timeouts, retries, device and batch size follow ``engine``.
    With ``spec.protocol`` chat a kind that ``chats`` loads no tokenizer (None: ``spec.model`` is only the
    served model's name); any other kind's token engine is returned with its tokenizer, for
    :func:`memrl.text.template_chat.as_chat` to answer chat requests with the model's own template.
    """
    from memrl.models.resolve import load_tokenizer

    kind = engine_kind(spec.engine)
    if kind.side is None:
        raise ValueError(f"{where}.engine: engine kind {spec.engine!r} cannot run a side model; choose "
                         f"{', '.join(side_engine_kinds())}")
    chat = getattr(spec, "protocol", "tokens") == "chat"
    tokenizer = None if chat and kind.chats else load_tokenizer(spec.model, field=f"{where}.model")
    return kind.side(cfg, spec, tokenizer, where), tokenizer
