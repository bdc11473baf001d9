"""Config of the inference engines (``engine.*``): Hugging Face, OpenAI-compatible HTTP, in-process vLLM."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from memrl.config.registry import ENGINES, registered
from memrl.config.section import Section, Seed, ServerURL


class VLLMOptions(Section):
    """In-process vLLM engine options (``engine.kind=vllm``), passed to ``AsyncEngineArgs``.

    Defaults start on a CPU machine as well as on a GPU: eager mode (no graph capture,
    seconds instead of minutes to start) and no chunked prefill, because vLLM's CPU
    sampler fails on a seeded request whose prompt is split across scheduler steps.
    """

    max_model_len: int | None = Field(None, gt=0, description="Context window (default: the model's).")
    max_num_batched_tokens: int | None = Field(None, gt=0, description="Tokens one scheduler step may hold; "
                                               "default: at least max_model_len, so a prompt is never split.")
    max_num_seqs: int | None = Field(None, gt=0, description="Sequences decoded together.")
    enable_prefix_caching: bool | None = Field(None, description="Reuse keys/values of shared prompt prefixes "
                                               "(null: vLLM's default).")
    enforce_eager: bool = Field(True, description="No CUDA-graph / compile warm-up: fast start; set false "
                                "for the last bit of GPU decode speed.")
    kv_cache_memory: float | None = Field(None, gt=0, description="KV cache size in GiB (CPU: "
                                          "VLLM_CPU_KVCACHE_SPACE; GPU: kv_cache_memory_bytes); null: on a GPU "
                                          "vLLM's default (engine.gpu_memory_utilization), on a CPU "
                                          "$VLLM_CPU_KVCACHE_SPACE or 4 GiB (a quarter of a smaller machine's "
                                          "memory; vLLM's own default takes most of it and refuses to start "
                                          "beside a trainer).")
    seed: Seed | None = Field(None, description="Engine seed (default: trainer.seed).")
    sleep: Literal["auto", "on", "off"] = Field("auto", description="Sleep mode (free accelerator memory during "
                                                "updates): auto = on where the platform supports it and "
                                                "cluster.placement=colocate.")
    lora_sync: Literal["merged", "adapter"] = Field("merged", description="LoRA runs: push merged weights, or "
                                                    "only the adapter (a few MB) loaded as a vLLM LoRA request.")
    bucket_mb: int = Field(256, gt=0, description="Weight sync: tensors travel in buckets of this size "
                           "(whole layers on the shm and ipc paths): the extra memory a sync takes.")
    sync_path: Literal["auto", "ipc", "nccl", "shm", "bytes"] = Field(
        "auto", description="How new weights reach the engine: ipc (CUDA IPC, engine on the trainer's GPU), nccl "
        "(broadcast, engine on other GPUs), shm (shared memory, any platform), bytes (through vLLM's RPC); auto "
        "picks the first that applies.")
    cpu_layout: Literal["packed", "plain"] = Field(
        "packed", description="vLLM's CPU build: packed = vLLM repacks each linear weight for its GEMM kernels "
        "(fastest generation; every weight sync repacks them, 5-20x a memcpy); plain = weights stay as loaded and "
        "a shm sync writes them in place (about 2x a memcpy) at about 20-30% fewer generated tokens/s. Needs "
        "enforce_eager. See docs/benchmarks.md.")
    args: dict[str, Any] = Field(default_factory=dict, description="Any further AsyncEngineArgs field, e.g. "
                                 "{swap_space: 4}; names are checked against the installed vLLM.")


class EngineConfig(Section):
    """Inference backend."""

    kind: registered(ENGINES) = Field("hf", description="Inference backend: a kind registered in "
                                      "memrl.engines.factory (register_engine) or an import path to a builder "
                                      "(cfg, model) -> Engine.")
    base_url: ServerURL | None = Field(None, description="openai: server root, e.g. http://127.0.0.1:8000/v1.")
    served_model: str | None = Field(None, description="openai: model name sent in requests.")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the key.")
    max_batch_size: int = Field(32, gt=0, description="hf: requests decoded together.")
    max_attention_gb: float | None = Field(
        None, gt=0, description="hf: cap on a prefill's attention scores where they are materialized (prompts of "
        "different lengths on a CPU, or eager attention): long prompts are then prefilled fewer at a time. "
        "Counted as rows x heads x length^2 x 4 bytes (the peak measured is about a third). Default: 12 on a CPU, "
        "none on a GPU (SDPA's kernels need no such memory).")
    continuous_batching: bool = Field(
        False, description="hf: a request that arrives while a batch decodes joins it at the next step (eager "
        "decode) instead of waiting for the batch to end: faster multi-turn rollouts when some answers are long, "
        "but which step a request joins at depends on thread timing, so a run's numbers are no longer bitwise "
        "reproducible (seeded requests keep their tokens up to float rounding). memrl serve turns it on.")
    decode: Literal["auto", "eager", "static", "compiled"] = Field(
        "auto", description="hf: how decode steps run. static = a preallocated KV cache with fixed shapes per "
        "batch-size bucket, one CUDA graph per bucket on a GPU (no per-token Python or kernel-launch cost; same "
        "tokens and log-probs); compiled = static with the step compiled by torch.compile (inductor fuses the "
        "elementwise ops: about a third of the kernels a step; compiling takes tens of seconds at the first "
        "batch; tokens and log-probs equal up to the fused kernels' rounding); eager = the growing cache, one "
        "kernel launch per op; auto = static on a CUDA device for sdpa/eager attention without sliding windows, "
        "else eager.")
    tensor_parallel_size: int = Field(1, ge=1, description="vllm: GPUs per engine (tensor parallel); with "
                                      "cluster.rollout_replicas each replica takes this many.")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="vllm: share of each GPU the engine "
                                          "may take (weights + KV cache); leave room for training when colocated.")
    concurrency: int = Field(64, gt=0, description="Episodes (and HTTP requests) in flight at once.")
    timeout_s: float = Field(600.0, gt=0, description="openai: patience of a request before the client asks the "
                             "server whether it is alive (a live server's slow answer is awaited, up to max_wait_s).")
    timeout_per_token_s: float = Field(1.0, ge=0, description="openai: patience added per requested new token.")
    max_wait_s: float = Field(86400.0, gt=0, description="openai: longest wait for one answer of a live server.")
    retries: int = Field(3, ge=0, description="openai: retries of a failed request (transport error, 429, 5xx, "
                         "a server that stopped answering).")
    backoff_s: float = Field(0.5, ge=0, description="openai: first retry delay, doubled each retry (capped at 60 s).")
    logprob_check: bool = Field(True, description="openai: at start, ask the server (two temperatures) whether its "
                                "log-probs are temperature-scaled as the trainer's; refuse raw ones when "
                                "sampling.temperature is not 1.")
    device: str | None = Field(None, description="Device of the policy and the in-process engine: cpu, cuda, "
                               "cuda:N or mps (default: cuda when torch sees one, else cpu).")
    vllm: VLLMOptions = Field(default_factory=VLLMOptions)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        return check_device_name(v, "engine.device")


_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|npu|hpu)(:\d+)?")


def check_device_name(value: str | None, key: str) -> str | None:
    """A torch device name, refused at load time in one line (``gpu`` used to fail deep in model loading)."""
    if value is not None and not _DEVICE.fullmatch(value):
        hint = " (did you mean cuda?)" if value.lower().startswith("gpu") else ""
        raise ValueError(f"{key}={value!r} is not a device; use cpu, cuda, cuda:N or mps{hint}")
    return value
