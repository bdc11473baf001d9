"""The HF engine's static-cache decode: fixed shapes per batch-size bucket, one CUDA graph per bucket on a GPU.

Why: the eager decode step (:class:`memrl.engines.hf_batch.EagerStepper`) is launch-bound on a GPU. Each
token costs hundreds of small kernels launched from Python, plus a cache that grows and a mask rebuilt
every step; on one H200 the qwen2.5-0.5b shape decoded 34 tok/s for one sequence and 1,371 at 64 in flight,
under 1% of what the memory bandwidth allows (``bench/results/gpu-2026-11-26.md``). Here every tensor a
decode step touches is preallocated and keeps its shape, so the whole forward pass of a step can be
captured once as a CUDA graph and replayed with one launch.

Layout. A pool holds, per layer, keys and values ``[rows, kv_heads, length, head_dim]``; an additive mask
``[rows, length]`` (0: attend, dtype min: not); the fed-back token and position of each row; and the
cache column the step writes. Prompts are prefilled as today (:func:`memrl.engines.hf_batch.prefill`,
left padded, shared prompts prefilled once) and copied into columns ``0..width-1``; decode step ``t``
writes column ``width + t`` for every row, so all rows share one write column, a device tensor the
graph reads. A batch of ``n`` live rows runs in the smallest power-of-two bucket ``b >= n``: the rows
past ``n`` are dummies whose outputs are ignored. A finished row is dropped by moving the live rows to
the front (keys, values, mask, position), as the eager loop's ``batch_select_indices`` does, so the
batch steps down the buckets as rows end. The length is a power of two >= prompt width + reserve; a
batch that decodes past it doubles it (copying the live rows; the graphs of the old length go). The two
pools used last stay, with their graphs: a batch takes one whose length is within 4x of what it needs.

What stays as today: token choice (``BatchRows.step``: the same batched sampling, per-request
generators, stop tokens, interrupt and cancel at the next step), the prefill, the log-prob definition.
The logits differ from the eager loop's only by float rounding (the attention sums over masked slots
whose weight is exactly 0), so seeded requests get the same tokens (tests/engines/test_hf_static.py).

The step itself (:mod:`memrl.engines.hf_compile`) is the model's forward over slices of the pool, as the
eager ops or, with ``engine.decode=compiled``, through ``torch.compile``: fused kernels, so each replay
runs about a third of the kernels.

On a CPU the same code runs without graphs. Graphs read the weights' memory in place: an in-place update
(the optimizer, ``update_weights``) is seen by the next replay; a replaced tensor, a train/eval switch or
a LoRA merge/unmerge changes the model's fingerprint and the graphs are captured again. If a capture
fails, decoding goes on eagerly over the same static cache and ``graph_error`` says why (out of memory at
capture only for that batch: a later batch captures again).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.engines.hf_compile import CompiledStep, compile_unsupported, make_step
from memrl.engines.sampling import to_device

log = logging.getLogger(__name__)

MIN_LENGTH = 256  # shortest cache length: fewer distinct lengths, fewer captures
KEEP_POOLS = 2  # pools of different lengths kept with their graphs
DECODE_MODES = ("auto", "eager", "static", "compiled")


def bucket(n: int) -> int:
    """The smallest power of two >= ``n``: the batch size a step of ``n`` live rows runs at."""
    return 1 << max(n - 1, 0).bit_length()


def length_for(need: int, minimum: int = MIN_LENGTH) -> int:
    """Cache length for ``need`` positions: a power of two, at least ``minimum``."""
    return max(bucket(need), minimum)


def static_unsupported(model: Any) -> str | None:
    """Why the static decode cannot run ``model`` (None when it can).

    It feeds the model a ready 4-D additive mask and one shared cache column, so it needs an attention that
    takes such a mask (sdpa, eager) and a model whose layers all attend to the full past: a sliding window
    would be applied by the model's own mask builder, which the 4-D mask skips.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = getattr(base, "config", None)
    impl = getattr(cfg, "_attn_implementation", None) or "eager"
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} (static decode needs sdpa or eager)"
    types = getattr(cfg, "layer_types", None) or []
    if any(t != "full_attention" for t in types):
        return "layers with sliding-window or other non-full attention"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return "a sliding-window model"
    if any("dynamic" in str(kind) for kind in _rope_types(cfg)):
        return "dynamic RoPE scaling (it compares max(position_ids) on the host every step: no CUDA graph)"
    return None


def _rope_types(cfg: Any) -> list[Any]:
    """The RoPE types of a config: ``rope_parameters`` (transformers 5), per layer type or not, or ``rope_scaling``."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if not isinstance(rope, dict):
        return []
    nested = [v for v in rope.values() if isinstance(v, dict)]
    return [r.get("rope_type", r.get("type")) for r in (nested or [rope])]


def resolve_decode(mode: str, model: Any, device: torch.device) -> bool:
    """Whether a batch decodes on the static path: ``static`` and ``compiled`` always (ValueError if the model
    cannot), ``eager`` never, ``auto`` on a CUDA device when the model can."""
    if mode not in DECODE_MODES:
        raise ValueError(f"engine decode must be one of {', '.join(DECODE_MODES)}, not {mode!r}")
    why = static_unsupported(model)
    if mode in ("static", "compiled") and why:
        raise ValueError(f"engine.decode={mode} cannot run this model: {why}")
    return mode in ("static", "compiled") or (mode == "auto" and device.type == "cuda" and why is None)


def resolve_compile(mode: str, device: torch.device) -> bool:
    """Whether the static step goes through ``torch.compile``: ``compiled`` where inductor can generate code for
    ``device`` (ValueError naming what is missing where it cannot)."""
    if mode != "compiled":
        return False
    why = compile_unsupported(device)
    if why:
        raise ValueError(f"engine.decode=compiled cannot compile on {device.type}: {why}")
    return True


def describe_decode(mode: str, model: Any, device: torch.device) -> str:
    """One line saying which decode path ``mode`` takes for ``model`` on ``device``, and why."""
    if resolve_decode(mode, model, device):
        graphs = ", a CUDA graph per batch-size bucket" if device.type == "cuda" else " (no CUDA graphs off a GPU)"
        fused = ", compiled with torch.compile (fused kernels)" if mode == "compiled" else ""
        return f"hf decode: static KV cache{fused}{graphs}"
    why = "engine.decode=eager" if mode == "eager" else static_unsupported(model) or f"{device.type}, not a GPU"
    return f"hf decode: eager, one kernel launch per op ({why})"


@dataclass(eq=False)  # pools are found and dropped by identity: == would compare their tensors
class Pool:
    """The preallocated tensors of one (rows, length) shape, and the graphs captured over them."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor  # [rows, length] additive, the model's dtype
    tokens: torch.Tensor  # [rows, 1] long: the token each row feeds back
    positions: torch.Tensor  # [rows, 1] long: its position id
    column: torch.Tensor  # [1] long: the cache column this step writes
    graphs: dict[int, tuple[Any, torch.Tensor]] = field(default_factory=dict)  # bucket -> (graph, logits)
    mempool: Any = None

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])

    @classmethod
    def allocate(cls, like: Sequence[torch.Tensor], rows: int, length: int) -> Pool:
        """Zeroed buffers shaped after ``like`` (one prefilled key tensor per layer ``[n, heads, width, dim]``)."""
        def kv() -> list[torch.Tensor]:
            return [k.new_zeros(rows, k.shape[1], length, k.shape[3]) for k in like]

        first = like[0]
        return cls(kv(), kv(), first.new_zeros(rows, length),
                   torch.zeros(rows, 1, dtype=torch.long, device=first.device),
                   torch.zeros(rows, 1, dtype=torch.long, device=first.device),
                   torch.zeros(1, dtype=torch.long, device=first.device))


class StaticDecoder:
    """The static-cache decode of one engine; one batch at a time (``claim``), the eager loop for the others.

    ``start`` loads a prefilled batch and returns the stepper; ``drop`` and ``forward`` are the eager
    stepper's (:class:`memrl.engines.hf_batch.EagerStepper`) so the engine's loop drives either.
    """

    def __init__(self, model: Any, cache_kw: str, graphs: bool, min_length: int = MIN_LENGTH,
                 compiled: bool = False) -> None:
        self.model, self.cache_kw, self.min_length = model, cache_kw, min_length
        self.graphs = graphs
        self.step = make_step(model, cache_kw, compiled)  # engine.decode=compiled: through torch.compile
        self.graph_error: str | None = None
        self.captures = 0
        self.pool: Pool | None = None  # the current batch's
        self.pools: list[Pool] = []  # the last KEEP_POOLS used, most recent last
        self._fingerprint: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self.n = 0  # live rows, at the front of the pool
        self.col = 0  # the next column to write
        self._eager_batch = False  # a capture of this batch ran out of memory
        self._oom_said = False

    @contextlib.contextmanager
    def claim(self) -> Any:
        """Yield this decoder if no other batch is using it, else None (that batch decodes eagerly)."""
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            yield self
        finally:
            self._lock.release()

    # -- one batch ----------------------------------------------------------------
    def start(self, cache: Any, attention: torch.Tensor, last_pos: torch.Tensor, reserve: int) -> StaticDecoder:
        """Copy a prefilled batch (``cache`` of prompt width ``attention.shape[1]``) into the pool.

        ``reserve``: positions the batch is expected to need (width + new tokens, as the eager reserve).
        """
        keys = [layer.keys for layer in cache.layers]
        values = [layer.values for layer in cache.layers]
        n, width = attention.shape
        self._check_model()
        pool = self._pool_for(keys, bucket(n), max(reserve, width + 1))
        for dst, src in zip(pool.keys + pool.values, keys + values):
            dst[:n, :, :width].copy_(src)
        pool.mask[:n].fill_(torch.finfo(pool.mask.dtype).min)
        pool.mask[:n, :width].masked_fill_(attention.bool(), 0.0)
        pool.positions[:n, 0].copy_(last_pos)
        self.n, self.col, self._eager_batch = n, width, False
        return self

    def drop(self, keep: list[int]) -> None:
        """Keep only the rows ``keep`` (indices among the live rows), moved to the front of the pool."""
        pool = self.pool
        assert pool is not None
        idx = torch.tensor(keep, device=pool.mask.device)
        for t in (*pool.keys, *pool.values, pool.mask, pool.positions):
            t[: len(keep)].copy_(t[: self.n].index_select(0, idx))
        self.n = len(keep)

    def forward(self, next_tokens: list[int]) -> torch.Tensor:
        """Feed each live row its token; the next-token logits ``[n, vocab]``."""
        if self.col >= self.pool.length:  # type: ignore[union-attr]
            self._grow()
        pool = self.pool
        assert pool is not None
        n = self.n
        pool.tokens[:n, 0].copy_(to_device(torch.tensor(next_tokens, dtype=torch.long), pool.tokens.device))
        pool.positions[:n] += 1
        pool.mask[:n, self.col] = 0.0
        pool.column.fill_(self.col)
        logits = self._run(bucket(n))
        self.col += 1
        return logits[:n]

    # -- the pool -----------------------------------------------------------------
    def _pool_for(self, like: Sequence[torch.Tensor], rows: int, need: int) -> Pool:
        """The shortest kept pool with the rows and a length within 4x of ``need``, else a new one (the least
        recently used goes). Two are kept because MemAgent alternates long chunk turns and short final turns:
        one pool would be reallocated, and its graphs captured again, at every switch."""
        want = length_for(need, self.min_length)
        fits = [p for p in self.pools if p.rows >= rows and want <= p.length <= 4 * want]
        if fits:
            pool = min(fits, key=lambda p: p.length)  # the shortest: every step attends over the whole length
            self.pools.remove(pool)
        else:
            same = [p for p in self.pools if p.length == want]  # too few rows: replaced by a larger one
            rows = max([rows, *(p.rows for p in same)])
            self.pools = [p for p in self.pools if p not in same][-(KEEP_POOLS - 1):]
            self.pool = None  # free the dropped buffers and graphs before the new ones are allocated
            pool = Pool.allocate(like, rows, want)
        self.pools.append(pool)
        self.pool = pool
        return pool

    def _grow(self) -> None:
        """Double the length mid-batch: the live rows' keys, values and mask move to a new pool."""
        old = self.pool
        assert old is not None
        self.pools = [p for p in self.pools if p is not old][-(KEEP_POOLS - 1):]
        self.pool = None
        new = Pool.allocate(old.keys, old.rows, 2 * old.length)
        n, length = self.n, old.length
        for dst, src in zip(new.keys + new.values, old.keys + old.values):
            dst[:n, :, :length].copy_(src[:n])
        new.mask[:n].fill_(torch.finfo(new.mask.dtype).min)
        new.mask[:n, :length].copy_(old.mask[:n])
        new.positions.copy_(old.positions)
        self.pools.append(new)
        self.pool = new

    def release(self) -> None:
        """Free every pool and its graphs (the next batch allocates and captures again)."""
        self.pool, self.pools = None, []

    def _check_model(self) -> None:
        """Forget the graphs when the model is no longer the one they were captured on."""
        fp = model_fingerprint(self.model)
        if fp != self._fingerprint:
            for pool in self.pools:
                pool.graphs.clear()
        self._fingerprint = fp

    # -- the step -----------------------------------------------------------------
    def _forward(self, b: int) -> torch.Tensor:
        """One decode step of the first ``b`` rows of the pool, eagerly or compiled (also what a graph records)."""
        pool = self.pool
        assert pool is not None
        return self.step(pool.tokens[:b], pool.mask[:b, None, None, :], pool.positions[:b], pool.column,
                         [k[:b] for k in pool.keys], [v[:b] for v in pool.values])

    def _run(self, b: int) -> torch.Tensor:
        pool = self.pool
        assert pool is not None
        if not self.graphs:
            return self._forward(b)
        if b not in pool.graphs:
            if self._eager_batch:  # this batch's capture ran out of memory: eager to its end
                return self._forward(b)
            try:
                pool.graphs[b] = self._capture(b)
            except torch.cuda.OutOfMemoryError:  # the trainer's memory, for now: a later batch tries again
                pool.graphs.clear()
                self._eager_batch = True
                if not self._oom_said:  # said once: every batch tries again, and may run out again
                    self._oom_said = True
                    log.warning("static decode: out of memory capturing a CUDA graph; such batches decode eagerly "
                                "and the next ones try again")
                return self._forward(b)
            except Exception as exc:  # e.g. an op that synchronises inside the model: go on without graphs
                if self._uncompile(exc):  # the compiled step's capture failed: the plain step's may not
                    return self._run(b)
                self.graphs, self.graph_error = False, f"{type(exc).__name__}: {exc}"
                for kept in self.pools:  # never replayed again: their memory goes
                    kept.graphs.clear()
                    kept.mempool = None
                log.warning("static decode: CUDA graph capture failed (%s); decoding eagerly", self.graph_error)
                return self._forward(b)
        graph, logits = pool.graphs[b]
        graph.replay()
        return logits

    def _uncompile(self, exc: Exception) -> bool:
        """After a failed capture: turn compile off and say so, if the step was compiled (True: capture again)."""
        if isinstance(self.step, CompiledStep) and self.step.error is None:
            self.step.disable(f"CUDA graph capture of the compiled step: {type(exc).__name__}: {exc}")
            return True
        return False

    def _capture(self, b: int) -> tuple[Any, torch.Tensor]:
        pool = self.pool
        assert pool is not None
        graph, logits = capture_graph(lambda: self._forward(b), pool)
        self.captures += 1
        return graph, logits


def capture_graph(step: Callable[[], torch.Tensor], pool: Pool) -> tuple[Any, torch.Tensor]:
    """Record ``step`` (one decode step over ``pool``'s tensors) as a CUDA graph in the pool's memory pool,
    after two warm-up runs on the side stream the capture then uses; (graph, the logits tensor each replay
    rewrites). Replays run on the caller's stream, after the inputs it wrote there.

    The warm-ups write the cache column this step writes anyway, with the same inputs, so they change nothing.
    One stream for warm-ups and capture: what a kernel sets up per stream on first use (cuBLAS workspaces) is
    set up before the capture. ``thread_local``: the trainer may launch kernels from its own thread meanwhile
    (asynchronous training). The pool's device is made current: a capture on another device records nothing.
    A failed capture leaves its stream current (``torch.cuda.graph`` raises before restoring it): the caller's
    stream is restored, so the eager fallback runs where it would have.
    """
    with torch.cuda.device(pool.mask.device):
        if pool.mempool is None:
            pool.mempool = torch.cuda.graph_pool_handle()
        caller = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(caller)
        try:
            with torch.cuda.stream(side):
                for _ in range(2):
                    step()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool.mempool, stream=side, capture_error_mode="thread_local"):
                logits = step()
        finally:
            torch.cuda.set_stream(caller)
            caller.wait_stream(side)
    return graph, logits


def model_fingerprint(model: Any) -> tuple[Any, ...]:
    """What a captured graph depends on beyond the weights' values: where they live, train/eval, LoRA state."""
    ptrs = tuple(p.data_ptr() for p in model.parameters())
    lora = tuple((tuple(getattr(m, "merged_adapters", ())), bool(getattr(m, "disable_adapters", False)),
                  str(getattr(m, "active_adapters", "")))
                 for m in model.modules() if hasattr(m, "merged_adapters"))
    return ptrs, bool(model.training), lora
