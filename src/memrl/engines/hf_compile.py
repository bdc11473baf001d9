"""The static decode step, plain or compiled with ``torch.compile`` (``engine.decode=compiled``).

Why compile: a CUDA graph removes the host's cost per kernel but not the kernels. A transformers decoder
layer is about 40 small kernels (RMSNorm alone is eight: casts, pow, mean, add, rsqrt, two multiplies;
rotary embedding ten), so one token of a 24-layer model is about a thousand kernels, each a few
microseconds on the device even when replayed from a graph: at one sequence in flight that, not memory
bandwidth, bounds the step. Inductor fuses each run of elementwise ops into one kernel, and the graph is
then captured over the fused kernels as before: for qwen2.5-0.5b's shape 338 kernels a step where the eager
ops are 932 (``bench/decode_kernels.py``).

What changes numerically: fused kernels round differently from the eager ops (float32 sums in another
order), so tokens and log-probs equal the eager engine's up to that rounding, not bit for bit; the
log-prob is still the one definition (the temperature-scaled distribution the token was drawn from).

Grouped-query attention under compile: transformers runs a one-token query on the key/value heads (no
copy of them per query head) only when not compiling; compiled, it copies them (``repeat_kv``), which at
64 rows of 1,024 positions moves about 12 GB a step for a 0.5B model. :func:`packed_decode_attention`
runs the same arithmetic without the copy, compiled or not, for one-token queries under a mask shared by
the heads; anything else goes to transformers' own function unchanged.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

Step = Callable[..., torch.Tensor]  # (tokens, mask, positions, column, keys, values) -> logits [b, vocab]


@functools.cache
def slot_layer_class() -> type:
    """A cache layer over a slice of the pool: writes the step's keys/values at the shared column, returns all.

    A ``DynamicLayer`` subclass, as :mod:`memrl.engines.kv_cache`'s, so ``DynamicCache`` accepts it in every
    transformers 5.x (the call ``update(key, value, layer_idx, ...)`` changed its trailing arguments). One
    class for the process: a compiled step guards on the type of what it traced."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        def __init__(self, keys: torch.Tensor, values: torch.Tensor, column: torch.Tensor) -> None:
            super().__init__()
            self.keys, self.values, self.column = keys, values, column
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            self.keys.index_copy_(2, self.column, key_states)
            self.values.index_copy_(2, self.column, value_states)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return int(self.keys.shape[-2])

        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return int(self.keys.shape[-2]), 0

    return SlotLayer


def plain_step(model: Any, cache_kw: str) -> Step:
    """The decode step of ``model`` over pool slices, as the eager ops (also what a CUDA graph records)."""
    from transformers import DynamicCache

    layer = slot_layer_class()

    def step(tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, column: torch.Tensor,
             keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> torch.Tensor:
        cache = DynamicCache()
        cache.layers = [layer(k, v, column) for k, v in zip(keys, values)]
        cache.layer_class_to_replicate = None
        out = model(input_ids=tokens, attention_mask=mask, position_ids=positions, **{cache_kw: cache},
                    use_cache=True)
        return out.logits[:, -1, :]

    return step


BACKEND = "inductor"  # torch.compile's backend (tests set "eager" to check the tracing without code generation)
# Sizes symbolic from the first compile: the batch-size buckets (2..64) and cache lengths share one compiled
# step (one row, a size Dynamo specializes, gets its own); static sizes would compile a step per shape seen.
DYNAMIC = True


def compile_unsupported(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot generate code for ``device`` here (None when it can)."""
    if BACKEND != "inductor":
        return None
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton is not installed (inductor generates GPU kernels with it)"
        return None
    if device.type == "cpu":
        return None if shutil.which("g++") or shutil.which("c++") or shutil.which("clang++") else \
            "no C++ compiler on PATH (inductor builds CPU kernels with one)"
    return f"inductor does not generate code for {device.type}"


class CompiledStep:
    """``plain_step`` through ``torch.compile``, falling back to the plain step for good if compiling fails.

    The first call compiles (tens of seconds for a real model; inside a CUDA graph's warm-up on a GPU) with
    symbolic sizes; a batch of one row compiles once more (Dynamo specializes sizes 0 and 1). ``error`` says
    why compiling failed; ``seconds`` is the time spent in calls that compiled, ``graphs`` how many graphs
    they made (2 expected: more means a graph break or recompiles).

    Each instance compiles its own copy of the step's code: Dynamo keeps its compiled graphs per code object,
    up to a recompile limit (8) past which it runs the code uncompiled without saying so, and the closures of
    every engine in a process (other model shapes, train/eval, LoRA states) would share one code object.
    ``emulate_precision_casts``: fused kernels round each intermediate as the eager ops do (bfloat16 between
    ops); without it, a bfloat16 model's compiled log-probs differed from the eager engine's several times
    more than the static path's, and seeded samples changed with them.
    """

    _made = 0

    def __init__(self, model: Any, cache_kw: str) -> None:
        install_packed_decode()
        CompiledStep._made += 1
        self.plain = _own_code(plain_step(model, cache_kw), f"memrl_decode_step_{CompiledStep._made}")
        self.compiled: Step | None = None
        self.error: str | None = None
        self.seconds = 0.0
        self.graphs = 0

    def __call__(self, *args: Any) -> torch.Tensor:
        if self.error is not None:
            return self.plain(*args)
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]
        t0 = time.perf_counter()
        try:
            if self.compiled is None:  # here, not at construction: a bad backend fails where it is caught
                options = {"emulate_precision_casts": True} if BACKEND == "inductor" else None
                self.compiled = torch.compile(self.plain, backend=BACKEND, dynamic=DYNAMIC, options=options)
            out = self.compiled(*args)
        except torch.cuda.OutOfMemoryError:
            raise  # the caller's out-of-memory handling (an eager batch), not a compile failure
        except Exception as exc:  # noqa: BLE001 - any compiler failure: decode on without it
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise  # a failed CUDA graph capture: the capture's handler decides (hf_static._run)
            self.disable(f"{type(exc).__name__}: {exc}")
            return self.plain(*args)
        made = counters["stats"]["unique_graphs"] - before
        if made:
            self.seconds += time.perf_counter() - t0
            self.graphs += made
        return out

    def disable(self, why: str) -> None:
        """Decode on with the plain step from now on, saying why once."""
        self.compiled, self.error = None, (why.splitlines() or [""])[0][:300]
        log.warning("static decode: torch.compile failed (%s); decoding without it", self.error)


def _own_code(fn: Step, name: str) -> Step:
    """``fn`` with a code object of its own (same body, closure and globals), named ``name``."""
    import types

    return types.FunctionType(fn.__code__.replace(co_name=name), fn.__globals__, name, fn.__defaults__,
                              fn.__closure__)


def make_step(model: Any, cache_kw: str, compiled: bool) -> Step | CompiledStep:
    """The static decoder's step: compiled (``engine.decode=compiled``) or plain."""
    return CompiledStep(model, cache_kw) if compiled else plain_step(model, cache_kw)


_ORIGINAL: dict[str, Callable[..., Any]] = {}


def packed_decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0,
                            scaling: float | None = None, is_causal: bool | None = None,
                            **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA for a one-token query on the key/value heads: the query heads that share a key/value head become
    that head's query rows (``[b, kv_heads, groups, dim]``), so no key or value is copied per query head.

    Used for a one-token query with a mask shared by all heads (the decode step's) and grouped heads; any
    other call goes to transformers' ``sdpa`` unchanged. Query head ``h`` reads key/value head ``h // groups``,
    as ``repeat_kv`` lays them out."""
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    plain = (query.shape[2] != 1 or groups <= 1 or attention_mask is None or attention_mask.dim() != 4
             or attention_mask.shape[1] != 1 or kwargs.get("position_bias") is not None
             or kwargs.get("softcap") is not None or kwargs.get("output_attentions", False))
    if plain:
        return _ORIGINAL["sdpa"](module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                 is_causal=is_causal, **kwargs)
    b, heads, _, dim = query.shape
    rows = query.reshape(b, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(rows, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling)
    return out.reshape(b, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def install_packed_decode() -> None:
    """Route transformers' ``sdpa`` attention through :func:`packed_decode_attention` (once a process).

    Process-wide, as transformers' attention registry is; every call it does not take is passed on unchanged,
    and the calls it takes are the ones transformers itself runs this way when not compiling."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    current = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if current is packed_decode_attention:
        return
    _ORIGINAL["sdpa"] = current
    AttentionInterface.register("sdpa", packed_decode_attention)
