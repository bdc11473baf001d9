"""In-process Hugging Face transformers engine with request batching.

Concurrent ``generate`` calls are gathered into one batch: prompts are left
padded, prefilled together into a KV cache, then decoded one token per step for
the whole batch. Each request keeps its own sampling parameters, seed,
``max_new_tokens`` and stop tokens; finished rows are dropped from the batch
(and the cache) so long requests do not drag short ones. The model runs in a
worker thread, so the event loop keeps scheduling workflow coroutines while a
batch decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.engines.base import GenerationResult, SamplingParams
from memrl.engines.sampling import select_token


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: asyncio.Future[GenerationResult]
    generator: torch.Generator | None


@dataclass
class EngineStats:
    """Counters for benchmarks and logs."""

    requests: int = 0
    batches: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)


class HFEngine:
    """Batching engine over any ``transformers`` causal LM."""

    def __init__(
        self,
        model: Any,
        *,
        pad_token_id: int | None = None,
        max_batch_size: int = 32,
        max_batch_tokens: int = 262_144,
        batch_wait_s: float = 0.002,
        seed: int = 0,
    ) -> None:
        self.model = model
        cfg = model.config
        pad = pad_token_id if pad_token_id is not None else getattr(cfg, "pad_token_id", None)
        if pad is None:
            eos = getattr(cfg, "eos_token_id", 0)
            pad = eos[0] if isinstance(eos, (list, tuple)) else (eos or 0)
        self.pad_token_id = int(pad)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.batch_wait_s = batch_wait_s
        self.stats = EngineStats()
        self.weight_version = 0
        self._generator = torch.Generator().manual_seed(seed)
        self._pending: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._worker: asyncio.Task[None] | None = None

    @classmethod
    def from_pretrained(cls, spec: str, dtype: str = "auto", device: str | None = None, **kwargs: Any) -> HFEngine:
        from memrl.models.resolve import load_model

        return cls(load_model(spec, dtype=dtype, device=device), **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- public API --------------------------------------------------------------
    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("prompt_ids must not be empty")
        self._ensure_worker()
        assert self._wake is not None
        gen = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        fut: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(prompt, params, fut, gen))
        self._wake.set()
        return await fut

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy new weights in between batches (RL weight sync). Partial dicts are allowed."""
        self._ensure_worker()
        assert self._lock is not None
        async with self._lock:
            result = self.model.load_state_dict(dict(state_dict), strict=False)
            if result.unexpected_keys:
                raise KeyError(f"update_weights: unknown parameter names {result.unexpected_keys[:5]}")
            self.weight_version += 1

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        for req in self._pending:
            if not req.future.done():
                req.future.cancel()
        self._pending.clear()

    # -- scheduling --------------------------------------------------------------
    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._lock = asyncio.Lock()
            self._worker = loop.create_task(self._run())

    def _take_batch(self) -> list[_Request]:
        """Oldest requests first, up to ``max_batch_size`` and ``max_batch_tokens`` padded tokens."""
        batch: list[_Request] = []
        longest = 0
        for req in self._pending:
            longest_if = max(longest, len(req.prompt) + req.params.max_new_tokens)
            if batch and (len(batch) >= self.max_batch_size or longest_if * (len(batch) + 1) > self.max_batch_tokens):
                break
            batch.append(req)
            longest = longest_if
        del self._pending[: len(batch)]
        return batch

    async def _run(self) -> None:
        assert self._wake is not None and self._lock is not None
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.batch_wait_s)  # let concurrent callers join this batch
            batch = [r for r in self._take_batch() if not r.future.cancelled()]
            if not batch:
                continue
            async with self._lock:
                try:
                    results = await asyncio.to_thread(self._generate_batch, batch)
                except Exception as exc:  # fail these requests, keep serving others
                    for req in batch:
                        if not req.future.done():
                            req.future.set_exception(exc)
                    continue
            for req, res in zip(batch, results):
                if not req.future.done():
                    req.future.set_result(res)

    # -- the batched decode loop -------------------------------------------------
    @torch.inference_mode()
    def _generate_batch(self, reqs: list[_Request]) -> list[GenerationResult]:
        from transformers import DynamicCache

        device = self.device
        n = len(reqs)
        lengths = [len(r.prompt) for r in reqs]
        width = max(lengths)
        input_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(reqs):
            input_ids[i, width - lengths[i]:] = torch.tensor(r.prompt, dtype=torch.long)
            attention[i, width - lengths[i]:] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)

        out_ids: list[list[int]] = [[] for _ in reqs]
        out_lps: list[list[float]] = [[] for _ in reqs]
        reasons: list[str | None] = [None] * n
        for i, r in enumerate(reqs):
            if r.params.max_new_tokens == 0:
                reasons[i] = "length"
        active = [i for i in range(n) if reasons[i] is None]
        self.stats.requests += n
        self.stats.batches += 1
        self.stats.batch_sizes.append(n)
        self.stats.prompt_tokens += sum(lengths)
        if not active:
            return [GenerationResult([], [], "length") for _ in reqs]

        keep = torch.tensor(active, device=device)
        input_ids, attention, positions = input_ids[keep], attention[keep], positions[keep]
        cache = DynamicCache()
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :]
        last_pos = positions[:, -1]
        while active:
            step_logits = logits.float().cpu()
            next_tokens = []
            for j, i in enumerate(active):
                r = reqs[i]
                tok, lp = select_token(step_logits[j], r.params, r.generator or self._generator)
                out_ids[i].append(tok)
                out_lps[i].append(lp)
                next_tokens.append(tok)
                if tok in r.params.stop_token_ids:
                    reasons[i] = "stop"
                elif len(out_ids[i]) >= r.params.max_new_tokens:
                    reasons[i] = "length"
            self.stats.generated_tokens += len(active)
            still = [j for j, i in enumerate(active) if reasons[i] is None]
            if not still:
                break
            if len(still) < len(active):
                idx = torch.tensor(still, device=device)
                cache.batch_select_indices(idx)
                attention, last_pos = attention[idx], last_pos[idx]
                next_tokens = [next_tokens[j] for j in still]
                active = [active[j] for j in still]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
            last_pos = last_pos + 1
            tokens = torch.tensor(next_tokens, dtype=torch.long, device=device)[:, None]
            out = self.model(input_ids=tokens, attention_mask=attention, position_ids=last_pos[:, None],
                             past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :]
        return [GenerationResult(out_ids[i], out_lps[i], reasons[i] or "length",  # type: ignore[arg-type]
                                 {"weight_version": self.weight_version}) for i in range(n)]
