"""In-process Hugging Face transformers engine with request batching.

Concurrent ``generate`` calls are gathered into one batch: prompts are left
padded, prefilled together into a KV cache, then decoded one token per step for
the whole batch. Each request keeps its own sampling parameters, seed,
``max_new_tokens`` and stop tokens; finished rows are dropped from the batch
(and the cache) and answered at once, so long requests neither drag nor delay
short ones. Tokens are chosen for the whole batch at once, on the model's
device (``engines.sampling.select_tokens``): one softmax and one inverse-CDF
draw per step, not a Python loop of per-row sampling. The model runs in a
worker thread, so the event loop keeps scheduling workflow coroutines while a
batch decodes.

Long requests are scheduled apart: a request for more than ``long_new_tokens``
new tokens (a server client asking for ``max_tokens=100000``) waits and decodes
in a second lane, so it never holds back the short requests that arrive while it
runs; the two lanes' batches decode in their own threads. Each batch's KV cache
reserves the prompt width plus at most ``reserve_new_tokens`` positions and grows
(doubling) only as far as its rows actually decode, so one request's budget does
not size the memory of its batch-mates.

Continuous batching (``continuous_batching``; ``memrl serve`` turns it on): a request that arrives while a
batch decodes joins it at the next step instead of waiting for the batch to end (:mod:`memrl.engines.hf_join`;
eager decode only). Off, batches form as before and a training run is bitwise reproducible.

Failure and cancellation are per request. Prompt ids outside the vocabulary are
rejected by ``generate`` before they reach a batch; if a batched decode still
raises, its unanswered requests are decoded again one at a time, so only the
request that causes the error fails. A request whose caller is cancelled (a
client that disconnected, a server that shuts down) leaves its batch at the
next decode step instead of decoding to ``max_new_tokens``.

Decoding on a GPU: ``decode="auto"`` (``engine.decode``) runs the decode steps over a static KV cache with
one CUDA graph per batch-size bucket (:mod:`memrl.engines.hf_static`), which removes the per-token Python
and kernel-launch cost the eager loop pays; ``eager`` keeps the loop below everywhere, ``static`` takes the
static path on a CPU too (without graphs). Both give the same tokens and log-probs up to float rounding.
``compiled`` is ``static`` with the step compiled by ``torch.compile`` (:mod:`memrl.engines.hf_compile`):
fused kernels, a fraction of the eager step's, so a graph replay is shorter; tokens and log-probs then
equal the others' up to the fused kernels' rounding.

Reproducibility: a request with a ``seed`` draws from its own generator, so it
gets the same token ids whatever batch it lands in. Its log-probs agree to float
rounding only (about 1e-6 in float32 on CPU): matrix kernels may sum a row in a
different order depending on its position and the batch size. In the rare case
where a sampling threshold falls within that rounding, a token can differ too.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.engines.base import REQUEST_OWNER, GenerationResult, SamplingParams
from memrl.engines.hf_batch import (Answer, BatchRows, EagerStepper, Request, attention_cap, cache_keyword,
                                    fair_order, left_padded, masks_materialize, over_attention, prefill,
                                    vocab_size)
from memrl.engines.hf_join import join_waiting
from memrl.engines.hf_static import StaticDecoder, describe_decode, resolve_compile, resolve_decode
from memrl.engines.kv_cache import release_freed_memory, reserved_cache


@dataclass
class _Lane:
    """A queue of requests and the worker that decodes them in batches (the short or the long lane)."""

    pending: list[Request] = field(default_factory=list)
    running: list[Request] = field(default_factory=list)
    wake: asyncio.Event | None = None
    lock: asyncio.Lock | None = None
    worker: asyncio.Task[None] | None = None
    guard: threading.Lock = field(default_factory=threading.Lock)  # pending/running: the decode thread takes joiners
    epoch: int = 0  # bumped by close(): a decode thread still running from before takes no new joiners


@dataclass
class EngineStats:
    """Counters for benchmarks and logs."""

    requests: int = 0
    batches: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    joined: int = 0  # requests that joined a running batch (continuous batching)
    peak_rows: int = 0  # the most rows one decode step has run


def _seeded(seed: int | None) -> torch.Generator | None:
    return torch.Generator().manual_seed(seed) if seed is not None else None


class HFEngine:
    """Batching engine over any ``transformers`` causal LM."""

    returns_top_logprobs = True  # honours SamplingParams.top_logprobs

    def __init__(
        self,
        model: Any,
        *,
        pad_token_id: int | None = None,
        max_batch_size: int = 32,
        max_batch_tokens: int = 262_144,
        batch_wait_s: float = 0.002,
        seed: int = 0,
        long_new_tokens: int = 4096,
        reserve_new_tokens: int = 1024,
        decode: str = "auto",
        max_attention_bytes: int | None = None,
        continuous_batching: bool = False,
        tokenizer: Any = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer  # only to end a completion on a stop string (SamplingParams.stop)
        self.cache_kw = cache_keyword(model)
        cfg = model.config
        pad = pad_token_id if pad_token_id is not None else getattr(cfg, "pad_token_id", None)
        if pad is None:
            eos = getattr(cfg, "eos_token_id", 0)
            pad = eos[0] if isinstance(eos, (list, tuple)) else (eos or 0)
        self.pad_token_id = int(pad)
        self.vocab_size = vocab_size(model)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self._attention_cap = attention_cap(model, max_attention_bytes)  # bounds a padded prefill's scores
        self._split_prefill = masks_materialize(model)  # prompts of other lengths prefill apart (hf_batch.prefill)
        self.batch_wait_s = batch_wait_s
        self.stats = EngineStats()
        self.weight_version = 0
        self.long_new_tokens = long_new_tokens
        self.reserve_new_tokens = reserve_new_tokens
        self.continuous_batching = continuous_batching  # requests join a decoding batch (memrl.engines.hf_join)
        self._draining = 0  # callers waiting for the batches to end: nobody joins them meanwhile
        self._generator = torch.Generator().manual_seed(seed)
        self._lanes = (_Lane(), _Lane())  # short, long
        self.decode = decode  # auto | eager | static | compiled (memrl.engines.hf_static)
        resolve_decode(decode, model, torch.device("cpu"))  # a bad name, or static for a model it cannot run
        resolve_compile(decode, self.device)  # compiled where inductor cannot generate code: said now
        self._static: StaticDecoder | None = None

    def describe(self) -> str:
        """The decode path this engine takes (``engine.decode``), for the run's start line."""
        return describe_decode(self.decode, self.model, self.device)

    @classmethod
    def from_pretrained(cls, spec: str, dtype: str = "auto", device: str | None = None, **kwargs: Any) -> HFEngine:
        from memrl.models.resolve import load_model

        return cls(load_model(spec, dtype=dtype, device=device), **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- public API --------------------------------------------------------------
    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        """Complete one prompt. Raises ``ValueError`` for ids the model cannot embed (this request only)."""
        prompt = self._checked_prompt(prompt_ids)
        lane = self._lanes[params.max_new_tokens > self.long_new_tokens]
        self._ensure_worker(lane)
        assert lane.wake is not None
        fut: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
        with lane.guard:
            lane.pending.append(Request(prompt, params, fut, _seeded(params.seed), owner=REQUEST_OWNER.get()))
        lane.wake.set()
        return await fut

    def _checked_prompt(self, prompt_ids: Sequence[int]) -> list[int]:
        # An id past the embedding is an IndexError inside the model that would fail every batch-mate.
        try:
            prompt = [operator.index(t) for t in prompt_ids]
        except TypeError:
            raise ValueError("prompt_ids must be integers") from None
        if not prompt:
            raise ValueError("prompt_ids must not be empty")
        bad = [t for t in prompt if t < 0 or (self.vocab_size is not None and t >= self.vocab_size)]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{(self.vocab_size or 1) - 1})")
        return prompt

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy new weights in between batches (RL weight sync). Partial dicts are allowed."""
        async with self._between_batches():
            result = self.model.load_state_dict(dict(state_dict), strict=False)
            if result.unexpected_keys:
                raise KeyError(f"update_weights: unknown parameter names {result.unexpected_keys[:5]}")
            self.weight_version += 1

    def interrupt(self) -> None:
        """Cut every request short: queued ones return no tokens, decoding ones the tokens they have, at the
        next decode step, each with finish reason ``"abort"`` (asynchronous training's weight update calls
        this so it need not wait for the turns in flight; they go on under the new weights). Call it on
        the event loop the requests were made on."""
        for lane in self._lanes:
            with lane.guard:
                for req in lane.running:
                    req.cut = True
                queued, lane.pending[:] = list(lane.pending), []
            for req in queued:
                if not req.future.done():
                    req.future.set_result(GenerationResult([], [], "abort", {"weight_version": self.weight_version}))

    def release_static(self) -> None:
        """Free the static decode's cache and graphs (a hosted replica going to sleep); the next batch
        allocates and captures them again."""
        if self._static is not None:
            self._static.release()

    async def idle(self) -> None:
        """Return once the batches decoding now have ended (cancelled rows leave at their next step)."""
        async with self._between_batches():
            pass

    @contextlib.asynccontextmanager
    async def _between_batches(self) -> AsyncIterator[None]:
        """Hold every lane's lock: no batch decodes inside this block (and none admits newcomers while we wait,
        or a stream of joiners would keep a batch, and a weight update, going forever)."""
        self._draining += 1
        try:
            async with contextlib.AsyncExitStack() as stack:
                for lane in self._lanes:
                    self._ensure_worker(lane)
                    assert lane.lock is not None
                    await stack.enter_async_context(lane.lock)
                yield
        finally:
            self._draining -= 1

    async def close(self) -> None:
        """Cancel queued and running requests; the decode threads stop at their next step."""
        for lane in self._lanes:
            with lane.guard:
                reqs, lane.pending[:] = lane.running + lane.pending, []
                lane.epoch += 1
            for req in reqs:
                if not req.future.done():
                    req.future.cancel()
            if lane.worker is not None:
                lane.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.worker
                lane.worker = None

    # -- scheduling --------------------------------------------------------------
    def _ensure_worker(self, lane: _Lane) -> None:
        loop = asyncio.get_running_loop()
        if lane.worker is None or lane.worker.done() or lane.worker.get_loop() is not loop:
            lane.wake = asyncio.Event()
            lane.lock = asyncio.Lock()
            lane.worker = loop.create_task(self._run(lane))

    def _take_batch(self, pending: list[Request]) -> list[Request]:
        """Oldest requests first, up to ``max_batch_size``, ``max_batch_tokens`` padded tokens and, where a padded
        prefill materializes attention scores, their memory cap (:func:`~memrl.engines.hf_batch.attention_cap`)."""
        batch: list[Request] = []
        order = fair_order(pending)
        longest = 0
        distinct: set[tuple[int, ...]] = set()  # prompts prefilled once however often they repeat
        lengths: set[int] = set()
        for req in order:
            longest_if = max(longest, len(req.prompt) + req.params.max_new_tokens)
            key = tuple(req.prompt) if self._attention_cap is not None else ()
            rows = len(distinct) + (key not in distinct)
            if batch and (len(batch) >= self.max_batch_size or longest_if * (len(batch) + 1) > self.max_batch_tokens
                          or over_attention(self._attention_cap, rows, lengths | {len(key)})):
                break
            batch.append(req)
            distinct.add(key)
            lengths.add(len(key))
            longest = longest_if
        taken = {id(r) for r in batch}
        pending[:] = [r for r in pending if id(r) not in taken]
        return batch

    async def _run(self, lane: _Lane) -> None:
        assert lane.wake is not None and lane.lock is not None
        loop = asyncio.get_running_loop()

        def settle(req: Request, res: GenerationResult) -> None:
            if not req.future.done():
                req.future.set_result(res)

        def answer(req: Request, res: GenerationResult) -> None:  # called from the decode thread
            loop.call_soon_threadsafe(settle, req, res)

        while True:
            if not lane.pending:
                lane.wake.clear()
                await lane.wake.wait()
            await asyncio.sleep(self.batch_wait_s)  # let concurrent callers join this batch
            async with lane.lock:  # taken once the lock is ours: waiting on it (a weight update), the batch
                with lane.guard:   # stays where interrupt() finds it
                    batch = [r for r in self._take_batch(lane.pending) if not r.future.done()]
                if not batch:
                    continue
                lane.running = batch
                try:
                    await self._decode_isolated(batch, answer, lane)
                finally:
                    lane.running = []

    async def _decode_isolated(self, batch: list[Request], answer: Answer, lane: _Lane | None = None) -> None:
        """Decode ``batch`` (which requests of ``lane`` join as it decodes); if that raises, decode its unanswered
        requests one by one so only the culprit fails."""
        try:
            await asyncio.to_thread(self._generate_batch, batch, answer, lane)
            return
        except Exception as exc:
            if len(batch) == 1:
                if not batch[0].future.done():
                    batch[0].future.set_exception(exc)
                return
        for req in batch:
            if req.future.done():  # answered before the failure, or cancelled
                continue
            req.generator = _seeded(req.params.seed)  # start the seeded draws again, as a fresh request would
            try:
                await asyncio.to_thread(self._generate_batch, [req], answer)
            except Exception as exc:  # this request itself fails
                if not req.future.done():
                    req.future.set_exception(exc)

    # -- the batched decode loop -------------------------------------------------
    def _generate_batch(self, reqs: list[Request], answer: Answer | None = None,
                        lane: _Lane | None = None) -> list[GenerationResult]:
        """Decode ``reqs`` together; ``answer(req, result)`` is called as each row finishes.

        A row whose future is done (its caller cancelled it) is dropped at the next step
        and reported with finish reason ``"abort"``.
        """
        release_freed_memory()  # what the trainer freed (an update's activations) is not held during the decode
        try:
            return self._decode(reqs, answer, lane)
        finally:
            release_freed_memory()

    @torch.inference_mode()
    def _decode(self, reqs: list[Request], answer: Answer | None, lane: _Lane | None = None) -> list[GenerationResult]:
        device, epoch = self.device, lane.epoch if lane is not None else 0
        input_ids, attention, positions = left_padded([r.prompt for r in reqs], self.pad_token_id, device)
        rows = BatchRows(reqs, answer, self.weight_version, self.tokenizer, self.stats)
        active = rows.start()
        self.stats.requests += len(reqs)
        self.stats.batches += 1
        self.stats.batch_sizes.append(len(reqs))
        self.stats.peak_rows = max(self.stats.peak_rows, len(reqs))
        self.stats.prompt_tokens += sum(len(r.prompt) for r in reqs)
        if not active:
            return rows.results()
        longest_new = max(reqs[i].params.max_new_tokens for i in active)
        # the cache grows past this reserve only if rows go on decoding
        reserve = input_ids.shape[1] + min(longest_new, self.reserve_new_tokens)
        keep = torch.tensor(active, device=device)
        input_ids, attention, positions = input_ids[keep], attention[keep], positions[keep]
        with self._static_claim() as static:
            cache = reserved_cache(input_ids.shape[1] if static else reserve)  # static: the prompt only
            logits = prefill(self.model, self.cache_kw, cache, [reqs[i].prompt for i in active],
                             input_ids, attention, positions, split=self._split_prefill)
            stepper = self._stepper(static, cache, attention, positions[:, -1], reserve)
            del cache
            while True:
                next_tokens = rows.step(active, logits, self._generator, self.pad_token_id)  # counts its tokens
                still = [j for j, i in enumerate(active) if rows.reasons[i] is None]
                if not still:
                    break
                if len(still) < len(active):  # drop the finished rows from the batch and the cache
                    stepper.drop(still)
                    next_tokens = [next_tokens[j] for j in still]
                    active = [active[j] for j in still]
                logits = stepper.forward(next_tokens)
                if lane is not None and lane.pending and self.continuous_batching and not self._draining \
                        and getattr(stepper, "admits", False) and lane.epoch == epoch:
                    logits, active = join_waiting(self, lane, rows, stepper, logits, active)
        return rows.results()[:len(reqs)]

    def _stepper(self, static: StaticDecoder | None, cache: Any, attention: torch.Tensor, last_pos: torch.Tensor,
                 reserve: int) -> StaticDecoder | EagerStepper:
        """The static decoder loaded with the prefilled batch, or the eager stepper over its cache (also when
        the static cache does not fit in the accelerator's memory beside the trainer: its pools are freed)."""
        if static is not None:
            try:
                return static.start(cache, attention, last_pos, reserve)
            except torch.cuda.OutOfMemoryError:
                static.release()
        return EagerStepper(self.model, self.cache_kw, cache, attention, last_pos)

    def _static_claim(self) -> contextlib.AbstractContextManager[StaticDecoder | None]:
        """The static decoder for this batch, or None: eager by ``decode``, or another batch holds it."""
        if self._static is None and resolve_decode(self.decode, self.model, self.device):
            self._static = StaticDecoder(self.model, self.cache_kw, graphs=self.device.type == "cuda",
                                         compiled=resolve_compile(self.decode, self.device))
        return self._static.claim() if self._static is not None else contextlib.nullcontext(None)
