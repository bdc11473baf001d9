"""Turn memrl's ``engine.vllm`` config section into ``AsyncEngineArgs`` keyword arguments.

Kept apart from the engine so the argument rules (CPU-safe defaults, LoRA rank
rounding, name checks against the installed vLLM) are testable without starting
one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any

from memrl.config import ConfigError
from memrl.config.schema import MemRLConfig
from memrl.engines.base import GenerationResult, SamplingParams

WORKER_EXTENSION = "memrl.engines.vllm_worker.MemrlWorkerExtension"
# vLLM's default (raw_logprobs) reports log-probs of the logits *before* temperature; the trainer scores
# tokens under logits / temperature. processed_logprobs is that distribution (after top-k/top-p, if on).
LOGPROBS_MODE = "processed_logprobs"
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's LoRA kernels are built for


class VLLMMissingError(ImportError, ValueError):
    """vLLM is not installed: an ImportError to code that checks for one, and a one-line user error to the CLI
    (a ValueError; it was printed under a 52-line traceback)."""


def require_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise VLLMMissingError(
            "the vllm engine needs vLLM: pip install 'memrl[vllm]' on a CUDA machine, or vLLM's CPU build "
            "(`make test-vllm` shows the recipe); or use --engine hf, or --engine openai against a vLLM server"
        ) from None
    return vllm


def engine_arg_names() -> set[str]:
    """Every field ``AsyncEngineArgs`` of the installed vLLM accepts."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    return {f.name for f in dataclasses.fields(AsyncEngineArgs)}


def check_extra_args(args: dict[str, Any], valid: set[str]) -> None:
    """Fail on the first name the installed vLLM does not know, suggesting the nearest one."""
    for name in args:
        if name not in valid:
            close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.5)
            hint = f"did you mean 'engine.vllm.args.{close[0]}'?" if close else "see vLLM's AsyncEngineArgs"
            raise ConfigError(f"unknown vLLM engine argument 'engine.vllm.args.{name}': {hint}")


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def sleep_available() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def logprob_definition(mode: str, *, top_p: float = 1.0, top_k: int = 0) -> str:
    """What the engine's log-probs are, in words: the trainer's own definition, or how they differ from it."""
    if mode == "processed_logprobs":
        if top_p < 1.0 or top_k > 0:
            return ("temperature-scaled, renormalised over the top-k/top-p set (the trainer's are unfiltered: "
                    "they differ by the log of the kept probability mass)")
        return "temperature-scaled, unfiltered (the trainer's definition)"
    if mode == "raw_logprobs":
        return "raw: before temperature (the trainer's differ at any temperature but 1)"
    return f"{mode}: logits, not log-probs (every correction that reads them is wrong)"


def filtering_notice(mode: str, top_p: float, top_k: int) -> str | None:
    """One line at start when no vLLM mode gives the unfiltered temperature-scaled log-prob the trainer computes."""
    if mode == "processed_logprobs" and not (top_p < 1.0 or top_k > 0):
        return None
    return (f"note: vLLM log-probs are {logprob_definition(mode, top_p=top_p, top_k=top_k)}; "
            f"sampling.top_p={top_p:g} sampling.top_k={top_k}")


def lora_rank(r: int) -> int:
    """The smallest rank vLLM supports that holds an adapter of rank ``r`` (zero-padded by vLLM)."""
    for k in _LORA_RANKS:
        if k >= r:
            return k
    raise ConfigError(f"lora.r={r} is larger than vLLM's largest LoRA rank {_LORA_RANKS[-1]}")


def model_window(path: str) -> int | None:
    """``max_position_embeddings`` from a local model folder's config.json, if there is one."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return None
    value = json.loads(cfg.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def trainer_gpu_index(device: str | None, cuda: bool) -> int | None:
    """The CUDA device index the trainer (rank 0) uses: ``engine.device`` ``cuda:k`` -> k, unset/``cuda`` -> 0."""
    if not cuda or (device is not None and not device.startswith("cuda")):
        return None
    _, _, index = (device or "cuda").partition(":")
    return int(index) if index else 0


def plan_sync_path(cfg: MemRLConfig) -> tuple[str, int | None]:
    """(weight sync path, trainer GPU index) for an in-process engine built from ``cfg``; a bad request is a ConfigError."""
    from memrl.engines.vllm_sync import choose_path, shm_root

    cuda = not on_cpu()
    gpu = trainer_gpu_index(cfg.engine.device, cuda)
    try:
        path, _ = choose_path(cfg.engine.vllm.sync_path, cuda=cuda, tensor_parallel=cfg.engine.tensor_parallel_size,
                              trainer_gpu=gpu, shm_dir=shm_root())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return path, gpu


def check_cpu_layout(layout: str, *, cpu: bool, engine_args: dict[str, Any]) -> str:
    """``engine.vllm.cpu_layout`` where it can work: plain needs vLLM's CPU build and eager mode (a compiled
    model keeps calling the packed kernels it was traced with)."""
    if layout == "plain" and not cpu:
        raise ConfigError("engine.vllm.cpu_layout=plain is for vLLM's CPU build; on a GPU leave it packed")
    if layout == "plain" and not engine_args.get("enforce_eager", False):
        raise ConfigError("engine.vllm.cpu_layout=plain needs engine.vllm.enforce_eager=true")
    return layout


def build_engine_args(cfg: MemRLConfig, model_path: str, *, cpu: bool, sleep: bool,
                      sync_path: str = "bytes") -> dict[str, Any]:
    """Keyword arguments for ``AsyncEngineArgs``; ``engine.vllm.args`` wins over everything else.

    ``sync_path`` ``ipc``/``nccl`` starts vLLM's weight-transfer engine of that backend in the workers.

    On a CPU the default is whole-prompt scheduling (no chunked prefill, a step budget of
    at least the window): vLLM's CPU sampler fails ("CPU Generator does not use offset")
    when a seeded request's prompt is split across scheduler steps.
    """
    o = cfg.engine.vllm
    kw: dict[str, Any] = {
        "model": model_path,
        "tokenizer": cfg.model.tokenizer or model_path,
        "dtype": cfg.model.dtype,
        "tensor_parallel_size": cfg.engine.tensor_parallel_size,
        "seed": o.seed if o.seed is not None else cfg.trainer.seed,
        "enforce_eager": o.enforce_eager,
        "worker_extension_cls": WORKER_EXTENSION,
        "enable_sleep_mode": sleep,
        "logprobs_mode": LOGPROBS_MODE,
    }
    if not cpu:
        kw["gpu_memory_utilization"] = cfg.engine.gpu_memory_utilization
    if o.max_model_len is not None:
        kw["max_model_len"] = o.max_model_len
    if o.max_num_seqs is not None:
        kw["max_num_seqs"] = o.max_num_seqs
    if o.enable_prefix_caching is not None:
        kw["enable_prefix_caching"] = o.enable_prefix_caching
    if o.kv_cache_memory is not None:
        kw["kv_cache_memory_bytes"] = int(o.kv_cache_memory * 2**30)
    elif cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        kw["kv_cache_memory_bytes"] = cpu_kv_default()
    if o.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = o.max_num_batched_tokens
    if cpu and "enable_chunked_prefill" not in o.args:
        kw["enable_chunked_prefill"] = False
        window = o.max_model_len or model_window(model_path)
        if o.max_num_batched_tokens is None and window:
            kw["max_num_batched_tokens"] = max(window, 2048)
        elif o.max_num_batched_tokens is not None and window and o.max_num_batched_tokens < window:
            raise ConfigError(f"engine.vllm.max_num_batched_tokens={o.max_num_batched_tokens} is below the "
                              f"window ({window}); on a CPU prompts must fit one scheduler step (or set "
                              "engine.vllm.args.enable_chunked_prefill=true and use unseeded sampling)")
    if sync_path in ("ipc", "nccl"):
        kw["weight_transfer_config"] = {"backend": sync_path}
    if cfg.lora.enabled and o.lora_sync == "adapter":
        if cfg.cluster.strategy == "fsdp":
            raise ConfigError("engine.vllm.lora_sync=adapter needs cluster.strategy=ddp (FSDP shards the adapter)")
        kw.update(enable_lora=True, max_loras=1, max_lora_rank=lora_rank(cfg.lora.r))
    kw.update(o.args)
    return kw


def to_vllm_params(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` (sampled-token logprobs; no detokenization unless stop
    strings are asked for: vLLM keeps the token that completes one, as the HF engine does)."""
    greedy = params.is_greedy
    kw: dict[str, Any] = {
        "max_tokens": params.max_new_tokens,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": params.top_k if (params.top_k > 0 and not greedy) else -1,
        "logprobs": 0,
        "stop_token_ids": list(params.stop_token_ids),
        "ignore_eos": True,  # the request's stops only, as the hf engine (vLLM would add the model's EOS)
        "detokenize": False,
    }
    if params.seed is not None:
        kw["seed"] = params.seed
    if params.stop:  # vLLM looks for stop strings in the text, so only these requests are detokenized
        kw.update(stop=list(params.stop), detokenize=True, skip_special_tokens=params.skip_special_tokens)
    return kw


def vllm_result(final: Any, reason: str | None, meta: dict[str, Any]) -> GenerationResult:
    """The engine protocol's result from vLLM's last cumulative output (None: aborted before a token)."""
    if final is None:
        return GenerationResult([], [], "abort", meta)
    o = final.outputs[0]
    ids = list(o.token_ids)
    lps = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(ids, o.logprobs or [])]
    finish = reason if reason in ("stop", "length") else "abort"
    return GenerationResult(ids, lps, finish, meta)  # type: ignore[arg-type]


def cpu_kv_default() -> int:
    """vLLM's CPU build asks for most of the machine's memory for its KV cache when none is set, and refuses to
    start when the trainer holds the rest: 4 GiB, or a quarter of the memory on a smaller machine."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 2**30
    return int(min(4 * 2**30, total // 4))
