"""Prompt templates spliced at the token level.

A template is plain text with ``{placeholder}`` slots (``{question}``,
``{memory}``, ``{chunk}``, ``{recalled}``, ``{context}``); every other brace is
literal, so ``\\boxed{}`` needs no escaping. The text is wrapped in the
tokenizer's chat template as one user turn, the literal pieces are tokenized
once, and at run time the slots are filled with token ids, never text. That is
how memory tokens travel from one conversation into the next unchanged.

:meth:`TokenTemplate.render_text` is the other way, the one an OpenAI-compatible
server takes with a chat client such as MemAgent's evaluation client: slots
filled with text, the whole user message chat-templated and tokenized at once.
The two differ where the tokenizer merges across a piece boundary: with
SmolLM2's GPT-2 pre-tokenizer the literal ``"<problem> \\n"`` alone ends in one
token ``' \\n'``, but followed by a question it splits into ``' '``, ``'\\n'``.

Users can load the prompts of a published checkpoint from a YAML file whose
keys are the template names (``memory``, ``final``, ``no_memory``, ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from memrl.text.tokens import encode_text

SLOTS = ("question", "memory", "chunk", "recalled", "context")
_SLOT_RE = re.compile(r"\{(" + "|".join(SLOTS) + r")\}")


class TokenTemplate:
    """A chat-formatted prompt with token-id slots."""

    def __init__(self, text: str, tokenizer: Any, chat: bool = True) -> None:
        self.text = text
        self._tokenizer, self._chat = tokenizer, chat
        self._text_parts = _SLOT_RE.split(text)
        full = apply_chat(tokenizer, text) if chat else text
        parts = _SLOT_RE.split(full)
        # parts alternates literal, slot, literal, slot, ..., literal
        self._pieces: list[list[int] | str] = []
        for k, part in enumerate(parts):
            if k % 2:
                self._pieces.append(part)
            elif part:
                self._pieces.append(tokenizer.encode(part, add_special_tokens=False))
        self.slots = {p for p in self._pieces if isinstance(p, str)}

    @property
    def overhead(self) -> int:
        """Tokens of the template itself (without slot contents)."""
        return sum(len(p) for p in self._pieces if not isinstance(p, str))

    def render(self, **slots: Sequence[int]) -> list[int]:
        missing = self.slots - slots.keys()
        if missing:
            raise KeyError(f"template slots not filled: {sorted(missing)}")
        out: list[int] = []
        for p in self._pieces:
            out.extend(slots[p] if isinstance(p, str) else p)
        return out

    def fill(self, **texts: str) -> str:
        """The template's text with every slot replaced by text (one pass: slot text is never re-read)."""
        missing = self.slots - texts.keys()
        if missing:
            raise KeyError(f"template slots not filled: {sorted(missing)}")
        return "".join(texts[part] if k % 2 else part for k, part in enumerate(self._text_parts))

    def render_text(self, **texts: str) -> list[int]:
        """Ids of the filled text as one chat-templated user turn, tokenized whole.

        What a server builds from ``messages=[{"role": "user", "content": fill(...)}]``
        (``apply_chat_template(..., add_generation_prompt=True)``, no further special tokens).
        """
        body = self.fill(**texts)
        return encode_text(self._tokenizer, apply_chat(self._tokenizer, body) if self._chat else body)


def apply_chat(tokenizer: Any, text: str) -> str:
    """``text`` as one user turn followed by the assistant prefix, as a string."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    from memrl.config.renames import notice

    name = getattr(tokenizer, "name_or_path", "") or "the model"
    notice(f"{name}: the tokenizer has no chat template, so prompts go to the model as plain text (a base "
           "model?); give a chat model, or model.tokenizer with a template, if that was not meant")
    return text + "\n"


_PARSED: dict[tuple[str, int, int], Any] = {}  # (path, mtime_ns, size) -> the file's YAML


def _parsed(p: Path) -> Any:
    """The YAML of prompt file ``p``, parsed once per version of the file: workflows ask for their prompts every
    episode, and parsing on each call cost ~1 ms of interpreter time that async training's update waited for."""
    st = p.stat()
    key = (os.path.abspath(p), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        if len(_PARSED) > 64:
            _PARSED.clear()
        _PARSED[key] = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    return _PARSED[key]


def load_prompts(path: str | Path | None, defaults: Mapping[str, str]) -> dict[str, str]:
    """Defaults overridden by a user's YAML file (re-read when it changes); unknown names are an error."""
    prompts = dict(defaults)
    if path is None:
        return prompts
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"prompt file not found: {p}")
    data = _parsed(p)
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a mapping of template names to text")
    for key, value in data.items():
        if key not in defaults:
            raise ValueError(f"{p}: unknown template {key!r}; expected one of {sorted(defaults)}")
        if not isinstance(value, str):
            raise ValueError(f"{p}:{key}: template must be a string")
        prompts[key] = value
    return prompts
