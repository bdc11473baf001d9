"""The protobuf half of the Tinker wire format: forward/backward requests in, fwd/bwd and sample results out.

The ``tinker`` SDK (0.38) sends ``/api/v1/forward_backward`` bodies as protobuf (optionally zstd
compressed) and asks for ``ForwardBackwardOutput`` and ``SampleResponse`` results as protobuf
(``Accept: application/x-protobuf``); it refuses JSON for those two result types. Everything else is
JSON. The message classes come from the SDK's own generated module (``tinker.proto``), so the bytes
are exactly what its decoder (``tinker/proto/response_conv.py``) expects; the server therefore needs
the ``tinker`` package installed, as any script that talks to it does. Numbers cross as raw little-endian
arrays: tokens int32, log-probs float32 (NaN where a prompt position has none), tensors float32/int64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl.serve.errors import APIError

PROTO = "application/x-protobuf"
_NUMPY = {"float32": np.float32, "int64": np.int64}


def _pb() -> Any:
    """The SDK's generated protobuf module (imported late: the JSON routes work without it)."""
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as exc:  # pragma: no cover - the CLI checks this at start
        raise RuntimeError("memrl tinker speaks the tinker SDK's wire format: pip install 'tinker==0.38.0'") from exc
    return tinker_public_pb2


def require_sdk() -> None:
    """Fail at start (one line) rather than at the first forward_backward when ``tinker`` is missing."""
    _pb()


@dataclass
class Datum:
    """One training example: input token ids and the loss's tensors (numpy, keyed as the SDK names them)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class FwdBwdRequest:
    """A decoded forward/backward request (proto or JSON)."""

    model_id: str
    seq_id: int | None
    loss_fn: str
    config: dict[str, float | str]
    data: list[Datum]
    forward_only: bool


def bad(field_name: str, message: str) -> APIError:
    return APIError(400, f"{field_name}: {message}", code="invalid_value", param=field_name)


MAX_TENSOR_ELEMENTS = 2**24  # what a 64 MB body holds as float32: a sparse tensor may not unpack to more


def decompress(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """Undo ``Content-Encoding: zstd`` (the SDK's ``proto_compress_fwdbwd``), capped at ``max_bytes``."""
    if not encoding or encoding == "identity":
        return body
    if encoding != "zstd":
        raise APIError(400, f"Content-Encoding {encoding!r} is not supported (zstd or none)", param="body")
    import zstandard

    try:
        out = zstandard.ZstdDecompressor().decompress(body, max_output_size=max_bytes + 1)
    except zstandard.ZstdError as exc:
        raise APIError(400, f"cannot zstd-decompress the body: {exc}", param="body") from None
    if len(out) > max_bytes:
        raise APIError(413, f"decompressed body is larger than {max_bytes / 2**20:g} MB (--max-body-mb)",
                       code="request_too_large", param="body")
    return out


def _tensor(msg: Any, name: str) -> np.ndarray:
    """A proto ``Tensor`` (dense or sparse CSR, padded with 0) as a numpy array of its declared shape."""
    pb = _pb()
    dtype = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64}.get(msg.dtype)
    if dtype is None:
        raise bad(name, "tensors must be float32 or int64")
    shape = [int(s) for s in msg.shape]
    if msg.HasField("sparse_csr"):
        csr = msg.sparse_csr
        if len(shape) != 2 or min(shape) < 0:
            raise bad(name, "a sparse tensor must be 2-D")
        if shape[0] * shape[1] > MAX_TENSOR_ELEMENTS:  # checked before np.zeros: a 140-byte body asked for GBs
            raise bad(name, f"shape {shape} unpacks to more than {MAX_TENSOR_ELEMENTS} values")
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        if len(crow) != shape[0] + 1 or len(col) != len(values) or (len(col) and col.max() >= shape[1]):
            raise bad(name, "inconsistent sparse CSR indices")
        dense = np.zeros(shape, dtype=dtype)
        rows = np.repeat(np.arange(shape[0]), np.diff(crow))
        dense[rows, col] = values
        return dense
    arr = np.frombuffer(msg.dense, dtype=dtype).copy()
    if shape:
        if int(np.prod(shape)) != arr.size:
            raise bad(name, f"{arr.size} values for shape {shape}")
        arr = arr.reshape(shape)
    return arr


def _chunks_tokens(chunks: Any, name: str) -> list[int]:
    tokens: list[int] = []
    for k, chunk in enumerate(chunks):
        which = chunk.WhichOneof("chunk")
        if which != "encoded_text":
            raise bad(f"{name}.chunks[{k}]", f"{which} chunks are not served (token chunks only)")
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def parse_forward_backward(body: bytes) -> FwdBwdRequest:
    """Decode the SDK's protobuf ``ForwardBackwardRequest`` (its ``forward_only`` flag included)."""
    pb = _pb()
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception:  # google.protobuf.message.DecodeError and friends
        raise APIError(400, "body is not a protobuf ForwardBackwardRequest", param="body") from None
    data = []
    for i, datum in enumerate(msg.data):
        tokens = _chunks_tokens(datum.model_input, f"data[{i}].model_input")
        inputs = {key: _tensor(t, f"data[{i}].loss_fn_inputs.{key}") for key, t in datum.loss_fn_inputs.items()}
        data.append(Datum(tokens, inputs))
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():  # preferred when set: it also carries strings
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    return FwdBwdRequest(msg.model_id, msg.seq_id or None, msg.loss_fn, config, data, bool(msg.forward_only))


def parse_forward_backward_json(body: dict[str, Any], forward_only: bool) -> FwdBwdRequest:
    """The JSON form of the same request (older SDKs, plain HTTP clients); a body of the wrong shape is a 400."""
    try:
        return _forward_backward_json(body, forward_only)
    except APIError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError, OverflowError) as exc:
        raise APIError(400, f"forward_backward_input: malformed ({type(exc).__name__}: {str(exc)[:200]})",
                       code="invalid_value", param="forward_backward_input") from None


def _forward_backward_json(body: dict[str, Any], forward_only: bool) -> FwdBwdRequest:
    fb = body.get("forward_backward_input") or body.get("forward_input") or {}
    data = []
    for i, datum in enumerate(fb.get("data") or []):
        chunks = (datum.get("model_input") or {}).get("chunks") or []
        tokens: list[int] = []
        for k, chunk in enumerate(chunks):
            if chunk.get("type", "encoded_text") != "encoded_text":
                raise bad(f"data[{i}].model_input.chunks[{k}]", f"{chunk.get('type')} chunks are not served")
            tokens.extend(int(t) for t in chunk.get("tokens") or [])
        inputs = {}
        for key, t in (datum.get("loss_fn_inputs") or {}).items():
            dtype = _NUMPY.get(t.get("dtype", "float32"))
            if dtype is None:
                raise bad(f"data[{i}].loss_fn_inputs.{key}", "tensors must be float32 or int64")
            arr = np.asarray(t.get("data") or [], dtype=dtype)
            inputs[key] = arr.reshape(t["shape"]) if t.get("shape") else arr
        data.append(Datum(tokens, inputs))
    return FwdBwdRequest(str(body.get("model_id", "")), body.get("seq_id"), str(fb.get("loss_fn", "")),
                         dict(fb.get("loss_fn_config") or {}), data, forward_only)


def encode_forward_backward(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """``ForwardBackwardOutput``: one ``ArrayRecord`` whose fields concatenate the datums' arrays."""
    pb = _pb()
    msg = pb.ForwardBackwardOutput()
    msg.loss_fn_output_type = "ArrayRecord"
    for key, value in metrics.items():
        msg.metrics[key] = float(value)
    record = msg.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    names = list(dict.fromkeys(name for out in outputs for name in out))
    for name in names:
        arrays = [np.asarray(out[name]) for out in outputs]
        is_int = arrays[0].dtype.kind in "iu"
        dtype = np.int64 if is_int else np.float32
        flat = [a.astype(dtype).ravel() for a in arrays]
        offsets = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum([a.nbytes for a in flat], out=offsets[1:])
        field_msg = record.fields[name]
        field_msg.data = b"".join(a.tobytes() for a in flat)
        field_msg.offsets = offsets.tobytes()
        field_msg.dtype = pb.DTYPE_INT64 if is_int else pb.DTYPE_FLOAT32
        field_msg.trailing_shape.extend(list(arrays[0].shape[1:]))
    return msg.SerializeToString()


@dataclass
class Sequence:
    """One sampled sequence as the wire carries it."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"
    topk: list[list[tuple[int, float]]] | None = None


def _topk(msg: Any, rows: list[list[tuple[int, float]] | None]) -> None:
    """Dense ``[n, k]`` top-k matrices; short or missing rows are padded the SDK's way (id 0, -99999)."""
    k = max((len(r) for r in rows if r), default=1)
    ids = np.zeros((len(rows), k), dtype=np.int32)
    lps = np.full((len(rows), k), -99999.0, dtype=np.float32)
    for i, row in enumerate(rows):
        for j, (tok, lp) in enumerate(row or []):
            ids[i, j], lps[i, j] = tok, lp
    msg.token_ids, msg.logprobs, msg.k, msg.length = ids.tobytes(), lps.tobytes(), k, len(rows)


def encode_sample(sequences: list[Sequence], prompt_logprobs: list[float] | None,
                  topk_prompt: list[list[tuple[int, float]] | None] | None) -> bytes:
    """``SampleResponse``: tokens int32, log-probs float32; prompt log-probs NaN where not computed."""
    pb = _pb()
    msg = pb.SampleResponse()
    for seq in sequences:
        out = msg.sequences.add()
        out.stop_reason = pb.STOP_REASON_STOP if seq.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        out.tokens = np.asarray(seq.tokens, dtype=np.int32).tobytes()
        out.logprobs = np.asarray(seq.logprobs, dtype=np.float32).tobytes()
        if seq.topk is not None:
            _topk(out.topk_sampled_logprobs, list(seq.topk))
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    if topk_prompt is not None:
        _topk(msg.topk_prompt_logprobs, topk_prompt)
    return msg.SerializeToString()
