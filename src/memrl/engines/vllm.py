"""In-process vLLM engine (GPU): ``AsyncLLM`` with token-id prompts, logprobs and weight sync.

Optional: ``pip install 'memrl[vllm]'``. vLLM batches continuously on its own,
so this wrapper only translates parameters and results. Weight sync calls
``load_weights`` on every worker's model through ``collective_rpc`` (as verl's
hybrid engine does) and resets the prefix cache, whose entries would
otherwise hold keys/values of the old weights. ``sleep``/``wake_up`` free
and restore GPU memory around training steps when rollout and training share
devices.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.engines.base import GenerationResult, SamplingParams


def require_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise ImportError(
            "the vllm engine needs vLLM on a CUDA machine: pip install 'memrl[vllm]' "
            "(or use --engine hf, or --engine openai against a running vLLM server)"
        ) from None
    return vllm


def to_vllm_params(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` (sampled-token logprobs, no detokenization)."""
    greedy = params.is_greedy
    kw: dict[str, Any] = {
        "max_tokens": params.max_new_tokens,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": params.top_k if (params.top_k > 0 and not greedy) else -1,
        "logprobs": 0,
        "stop_token_ids": list(params.stop_token_ids),
        "detokenize": False,
    }
    if params.seed is not None:
        kw["seed"] = params.seed
    return kw


def _load_weights(worker: Any, weights: list[tuple[str, Any]]) -> None:  # runs inside each vLLM worker
    worker.model_runner.model.load_weights(weights=weights)


class VLLMEngine:
    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._ids = itertools.count()
        self.weight_version = 0

    @classmethod
    def from_pretrained(cls, model: str, dtype: str = "auto", tensor_parallel_size: int = 1,
                        gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
                        enable_sleep_mode: bool = True, **engine_args: Any) -> VLLMEngine:
        """``engine_args``: any further ``AsyncEngineArgs`` field (e.g. ``distributed_executor_backend``)."""
        require_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from memrl.models.resolve import resolve_model_path

        args = AsyncEngineArgs(model=resolve_model_path(model), dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                               gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                               enable_sleep_mode=enable_sleep_mode, **engine_args)
        return cls(AsyncLLM.from_engine_args(args))

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        import vllm
        from vllm.inputs import TokensPrompt

        sp = vllm.SamplingParams(**to_vllm_params(params))
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), sp,
                                              request_id=f"memrl-{next(self._ids)}"):
            final = out
        if final is None:
            return GenerationResult([], [], "abort")
        o = final.outputs[0]
        ids = list(o.token_ids)
        lps = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(ids, o.logprobs or [])]
        reason = o.finish_reason if o.finish_reason in ("stop", "length") else "abort"
        return GenerationResult(ids, lps, reason)  # type: ignore[arg-type]

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        weights = [(k, v.detach().to("cpu")) for k, v in state_dict.items()]
        await self.engine.collective_rpc(_load_weights, args=(weights,))
        await self.engine.reset_prefix_cache()
        self.weight_version += 1

    async def sleep(self, level: int = 1) -> None:
        await self.engine.sleep(level)

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        self.engine.shutdown()
