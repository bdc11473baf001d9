"""The answer side of ``memrl serve``: completion text (cut at stop strings) and log-prob blocks.

``/v1/completions`` gives OpenAI's legacy block (``tokens``, ``token_logprobs``, ``top_logprobs`` as one
``{token: logprob}`` dict per step holding the k most likely tokens and the sampled one, ``text_offset``);
``/v1/chat/completions`` gives ``content: [{token, logprob, bytes, top_logprobs: [...]}]``. With
``return_tokens_as_token_ids`` tokens are ``"token_id:N"`` strings, as vLLM writes them. A token's text is
vLLM's: a token that holds only part of a character is ``""`` and the one that completes it carries the
whole character (read with up to four sampled tokens before it), so the tokens join into the text and
``text_offset`` points into it. A chat entry's ``bytes`` are the token's own bytes, as OpenAI gives them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import weakref
from collections.abc import Collection, Sequence
from typing import Any

from memrl.engines.base import GenerationResult
from memrl.serve.fields import cut_at_stop


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the character a byte-level BPE vocabulary writes -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_BYTES = _byte_decoder()
CONTEXT_TOKENS = 4  # sampled tokens read before a partial one (vLLM's)
_HEX_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # sentencepiece's byte fallback pieces


def _before(ids: Sequence[int], i: int) -> Sequence[int]:
    """The sampled tokens a token's text is read after (:meth:`Answers.text_of`)."""
    return ids[max(0, i - CONTEXT_TOKENS):i]


_MARKERS: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _space_marker(tokenizer: Any) -> str | None:
    """The Metaspace replacement of a SentencePiece-style tokenizer (its decoding drops a leading one), else None.

    Read from the tokenizer's JSON once per tokenizer: writing that out takes ~0.1 s for a 49K vocabulary,
    and the gateway builds its answers per call."""
    try:
        return _MARKERS[tokenizer]
    except (KeyError, TypeError):
        pass
    marker = None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        pre = (json.loads(backend.to_str()).get("pre_tokenizer") or {}) if backend is not None else {}
    except (AttributeError, TypeError, ValueError):
        pre = {}
    for part in [pre, *(pre.get("pretokenizers") or [])]:
        if part.get("type") == "Metaspace":
            marker = str(part.get("replacement", "\u2581"))
            break
    with contextlib.suppress(TypeError):  # an object that takes no weak reference is read each time
        _MARKERS[tokenizer] = marker
    return marker


def _byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


class Answers:
    """Builds answer fields with one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.byte_level = _byte_level(tokenizer)
        self.marker = _space_marker(tokenizer)
        self.eos = getattr(tokenizer, "eos_token_id", None)

    def _alone(self, t: int) -> str:
        """A token decoded by itself; a SentencePiece token keeps the leading space its decoding drops."""
        text = self.tokenizer.decode([t]) or ""
        if self.marker is None:
            return text
        piece = self.tokenizer.convert_ids_to_tokens(t)
        marks = len(piece) - len(piece.lstrip(self.marker)) if isinstance(piece, str) else 0
        missing = marks - (len(text) - len(text.lstrip(" ")))
        return " " * missing + text if missing > 0 else text

    def text_of(self, t: int, before: Sequence[int]) -> str:
        """Token ``t``'s text after the sampled tokens ``before`` it, as vLLM's log-probs write it.

        A byte-level token alone may decode to U+FFFD, part of a character: read with the tokens before it
        it is ``""`` while the character is unfinished, and the whole character where it finishes one.
        """
        text = self._alone(t)
        if not text.endswith("\ufffd"):
            return text
        context = list(before[-CONTEXT_TOKENS:])
        for n in range(1, len(context) + 1):
            ctx = context[-n:]
            joined = self.tokenizer.decode(ctx + [t])
            if joined.endswith("\ufffd"):
                continue
            clean = len(ctx)  # the context tokens that are themselves parts of this character say ""
            while clean > 0 and self.tokenizer.decode([ctx[clean - 1]]).endswith("\ufffd"):
                clean -= 1
            prefix = self.tokenizer.decode(ctx[:clean]) if clean else ""
            common = len(os.path.commonprefix([prefix, joined]))
            return joined[common:]
        return ""

    def token_bytes(self, t: int) -> list[int]:
        """The token's own UTF-8 bytes (OpenAI's ``bytes``): a token holding part of a character gives that part,
        so joining the bytes of a step's tokens spells the text; its decoding alone would be U+FFFD."""
        piece = self.tokenizer.convert_ids_to_tokens(t)
        if isinstance(piece, str) and t not in getattr(self.tokenizer, "all_special_ids", ()):
            if self.byte_level and all(c in _BYTES for c in piece):
                return [_BYTES[c] for c in piece]
            hexed = _HEX_BYTE.fullmatch(piece)
            if hexed:
                return [int(hexed.group(1), 16)]
        return list(self.tokenizer.decode([t]).encode("utf-8", "surrogatepass"))

    def finished(self, res: GenerationResult, skip_special: bool, stops: Sequence[str],
                 stop_token_ids: Collection[int]) -> tuple[GenerationResult, str]:
        """The result cut at the first stop string (if any), and its text (without a stop token).

        A ``stop`` finish ends on a stop token or, from an engine that reads stop strings, on the token that
        completes one: only a stop token is left out of the text (as vLLM never searches a stop token's text).
        """
        def decode(ids: Sequence[int]) -> str:
            return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)

        on_token = res.finish_reason == "stop" and bool(res.token_ids) and res.token_ids[-1] in stop_token_ids
        ids = res.token_ids[:-1] if on_token else res.token_ids
        cut = cut_at_stop(decode, ids, stops)
        meta = dict(res.meta)
        if cut is None:  # vLLM's stop_reason: the stop token, unless it is the end of sequence (then null)
            meta["stop_reason"] = res.token_ids[-1] if on_token and res.token_ids[-1] != self.eos else None
            return GenerationResult(res.token_ids, res.logprobs, res.finish_reason, meta), decode(ids)
        keep, text, met = cut
        meta["stop_reason"] = met
        if "top_logprobs" in meta:
            meta["top_logprobs"] = meta["top_logprobs"][:keep]
        return GenerationResult(res.token_ids[:keep], res.logprobs[:keep], "stop", meta), text

    def token(self, t: int, as_ids: bool, before: Sequence[int] = ()) -> str:
        return f"token_id:{t}" if as_ids else self.text_of(t, before)

    @staticmethod
    def alternatives(res: GenerationResult, k: int) -> list[list[tuple[int, float]]]:
        """Per step: its k most likely tokens (the sampled token alone when k is 0)."""
        if k == 0:
            return [[(t, lp)] for t, lp in zip(res.token_ids, res.logprobs)]
        return res.meta["top_logprobs"]

    def completion_logprobs(self, res: GenerationResult, k: int, as_ids: bool) -> dict[str, Any]:
        ids = res.token_ids
        texts = [self.text_of(t, _before(ids, i)) for i, t in enumerate(ids)]
        tokens = [f"token_id:{t}" for t in ids] if as_ids else texts
        offsets, at = [], 0
        for text in texts:
            offsets.append(at)
            at += len(text)
        tops = []
        for i, (token, lp, alts) in enumerate(zip(tokens, res.logprobs, self.alternatives(res, k))):
            top = {self.token(a, as_ids, _before(ids, i)): alp for a, alp in alts}
            top.setdefault(token, lp)  # the sampled token is always listed (up to k + 1)
            tops.append(top)
        return {"tokens": tokens, "token_logprobs": res.logprobs, "top_logprobs": tops, "text_offset": offsets}

    def chat_logprobs(self, res: GenerationResult, k: int, as_ids: bool) -> dict[str, Any]:
        ids = res.token_ids

        def entry(t: int, lp: float, i: int) -> dict[str, Any]:
            return {"token": self.token(t, as_ids, _before(ids, i)), "logprob": lp, "bytes": self.token_bytes(t)}

        alts = self.alternatives(res, k) if k else [[] for _ in ids]
        return {"content": [{**entry(t, lp, i), "top_logprobs": [entry(a, alp, i) for a, alp in alt]}
                            for i, (t, lp, alt) in enumerate(zip(ids, res.logprobs, alts))]}
