"""How MemAgent's (and ReMemR1's) evaluation and reward code read a ``\\boxed`` answer, as behaviour.

memrl's own reading (:func:`memrl.rewards.qa.extract_boxed`) takes the last ``\\boxed{...}`` with
its braces matched and strips it. The originals read differently, and published numbers follow
their reading:

* if ``\\boxed`` followed by a space occurs anywhere, the answer is everything after the last
  ``\\boxed `` up to the next ``$`` (so ``\\boxed {Paris}`` reads ``{Paris}``, and ``Use \\boxed
  format. \\boxed{Paris}`` reads ``format. \\boxed{Paris}``);
* otherwise it is the last ``\\boxed`` (or ``\\fbox``) span up to the brace that closes the first
  one opened after it, with ``\\boxed{`` and ``}`` cut off, and nothing stripped (``\\boxed{ }``
  is the answer ``" "``, which counts as given).

A span that does not start with ``\\boxed{`` and end with ``}`` (``\\boxed\\n{x}``, ``\\fbox{x}``)
stops the originals' evaluation scripts with an assertion and scores 0 in their reward, which
catches it: :class:`Unreadable` says so and each caller does what its original does.
"""

from __future__ import annotations

from memrl.rewards.qa import extract_boxed

_SPACED = "\\boxed "
_BRACED = "\\boxed{"


class Unreadable(ValueError):
    """A box the originals cannot read (their code asserts on it)."""


def last_box(text: str) -> str | None:
    """The originals' last box of ``text`` (``\\boxed `` form first), or None when there is none or it is unclosed."""
    if _SPACED in text:
        return _SPACED + text.split(_SPACED)[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def box_content(box: str) -> str:
    """What a box from :func:`last_box` holds, unstripped; :class:`Unreadable` where the originals assert."""
    if _SPACED in box:
        if not box.startswith(_SPACED):
            raise Unreadable(box[:40])
        return box[len(_SPACED):]
    if not (box.startswith(_BRACED) and box.endswith("}")):
        raise Unreadable(box[:40])
    return box[len(_BRACED):-1]


def original_boxed(text: str | None) -> str | None:
    """The answer the originals' evaluation reads, or None; where they would stop, memrl's own reading."""
    if not text:
        return None
    box = last_box(text)
    if box is None:
        return None
    try:
        return box_content(box)
    except Unreadable:  # the original script dies here; memrl reads the box as it reads any other
        return extract_boxed(text)
