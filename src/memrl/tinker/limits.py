"""What one request may ask of ``memrl tinker``, checked before it is queued (400 naming the field).

A request the model cannot run (a token id past the embedding, a sequence longer than the position
window, targets that do not line up with the input) would fail inside the worker after waiting its
turn; one that is merely huge would hold the single worker for hours. Both are refused when posted.
The SDK is told the batch limits in ``/api/v1/client/config`` (``fwdbwd_max_chunk_len``,
``fwdbwd_max_chunk_bytes_count``), so it splits a large ``forward_backward`` into requests that fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from memrl.serve.errors import APIError
from memrl.tinker.wire import Datum, bad


@dataclass(frozen=True)
class TinkerLimits:
    """``max_model_len``: longest sequence; ``vocab_size``: token ids below it; ``max_datums`` and
    ``max_request_tokens``: one forward/backward request; ``micro_tokens``: padded tokens per forward
    pass inside it (its activations are kept for the backward pass: 8192 padded tokens of SmolLM2-135M in
    float32 took the server past 22 GB on a 23 GB machine, so the default is 2048); ``max_num_samples``:
    one sample request; ``max_loras``: live training clients."""

    max_model_len: int
    vocab_size: int
    max_datums: int = 1024
    max_request_tokens: int = 1_000_000
    micro_tokens: int = 2048
    max_num_samples: int = 64
    max_loras: int = 16
    max_body_bytes: int = 64 * 2**20

    def client_config(self) -> dict[str, object]:
        """The SDK's ``ClientConfigResponse``: plain API keys, no server-side custom losses, our chunk sizes."""
        chunk_bytes = max(1, min(5_000_000, self.max_body_bytes // 2, self.max_request_tokens * 4))
        return {"pjwt_auth_enabled": False, "credential_default_source": "api_key", "parallel_fwdbwd_chunks": True,
                "proto_compress_fwdbwd": False, "fwdbwd_max_chunk_len": self.max_datums,
                "fwdbwd_max_chunk_bytes_count": chunk_bytes, "sample_use_retrieve_futures": False,
                "custom_loss_server_side": False, "sample_join_sampling_session": False,
                "sample_max_concurrent_requests": 2000, "use_pyqwest_transport": False}


def check_loss(loss_fn: str) -> None:
    """Refuse a loss the losses module does not compute, with its reason (before the request queues)."""
    from memrl.tinker.losses import LOSSES, REFUSED

    if loss_fn in LOSSES:
        return
    why = f": {REFUSED[loss_fn]}" if loss_fn in REFUSED else ""
    raise APIError(400, f"loss_fn: {loss_fn!r} is not supported{why} (supported: {', '.join(LOSSES)})",
                   code="unsupported_loss", param="loss_fn")


def check_ids(ids: list[int] | np.ndarray, field_name: str, vocab: int) -> None:
    arr = np.asarray(ids)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        raise bad(field_name, f"token id {int(arr.min() if arr.min() < 0 else arr.max())} is outside the "
                              f"vocabulary (0..{vocab - 1})")


def check_datums(data: list[Datum], limits: TinkerLimits) -> None:
    """Sizes, token ids, and that every ``loss_fn_inputs`` tensor has one row per input position."""
    if not data:
        raise bad("data", "no datums")
    if len(data) > limits.max_datums:
        raise bad("data", f"{len(data)} datums in one request, at most {limits.max_datums} (--max-datums)")
    total = sum(len(d.tokens) for d in data)
    if total > limits.max_request_tokens:
        raise bad("data", f"{total} tokens in one request, at most {limits.max_request_tokens}")
    for i, d in enumerate(data):
        name = f"data[{i}]"
        if not d.tokens:
            raise bad(f"{name}.model_input", "no tokens")
        if len(d.tokens) > limits.max_model_len:
            raise bad(f"{name}.model_input", f"{len(d.tokens)} tokens, the model's window is {limits.max_model_len}")
        check_ids(d.tokens, f"{name}.model_input", limits.vocab_size)
        if "target_tokens" not in d.inputs:
            raise bad(f"{name}.loss_fn_inputs", "target_tokens is required")
        for key, arr in d.inputs.items():
            if arr.ndim == 0 or arr.shape[0] != len(d.tokens) or arr.ndim > 2:
                raise bad(f"{name}.loss_fn_inputs.{key}", f"shape {list(arr.shape)}, expected [{len(d.tokens)}] "
                                                          "(one value per input position)")
            if key != "target_tokens" and not np.isfinite(arr).all():
                raise bad(f"{name}.loss_fn_inputs.{key}", "values must be finite")
        check_ids(d.inputs["target_tokens"], f"{name}.loss_fn_inputs.target_tokens", limits.vocab_size)


def check_sampling(prompt: list[int], num_samples: int, max_tokens: int | None, temperature: float, top_p: float,
                   top_k: int, limits: TinkerLimits, seed: int | None = None) -> int:
    """The sampling fields' ranges; returns ``max_tokens``.

    An omitted ``max_tokens`` (the SDK's default) means "until a stop or the window's end", as vLLM
    reads ``max_tokens=None``: the model's window less the prompt.
    """
    if seed is not None and not 0 <= seed < 2**63 - limits.max_num_samples:
        raise bad("sampling_params.seed", "must be between 0 and 2**63 - 1 minus the samples (sample i uses seed + i)")
    if not 1 <= num_samples <= limits.max_num_samples:
        raise bad("num_samples", f"must be between 1 and {limits.max_num_samples} (--max-num-samples), "
                                 f"got {num_samples}")
    if max_tokens is not None and max_tokens < 0:
        raise bad("sampling_params.max_tokens", f"must be >= 0, got {max_tokens}")
    if not prompt:
        raise bad("prompt", "no tokens")
    check_ids(prompt, "prompt", limits.vocab_size)
    if max_tokens is None:
        if len(prompt) >= limits.max_model_len:
            raise bad("prompt", f"{len(prompt)} tokens fill the model's window ({limits.max_model_len})")
        max_tokens = limits.max_model_len - len(prompt)
    if len(prompt) + max_tokens > limits.max_model_len:
        raise bad("sampling_params.max_tokens", f"{len(prompt)} prompt tokens + {max_tokens} new ones exceed the "
                                                f"model's window ({limits.max_model_len})")
    if not math.isfinite(temperature) or temperature < 0:
        raise bad("sampling_params.temperature", f"must be a finite number >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise bad("sampling_params.top_p", f"must be in (0, 1], got {top_p}")
    if top_k < -1:
        raise bad("sampling_params.top_k", f"must be -1 (no limit) or a positive count, got {top_k}")
    return max_tokens
