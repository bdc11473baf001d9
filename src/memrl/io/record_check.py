"""What is wrong with a rollout record, named by field, before anything indexes with its numbers.

A rollout record (``Trajectory.to_dict()``, see :mod:`memrl.io.records`) comes from a file a
person may have edited or produced with another tool. Its token ids index an embedding table and
a tokenizer: a negative id silently wraps around (or raises ``IndexError`` deep in torch), an id
past 2^31 overflows the packed arrays, a float is no token at all. ``memrl sft`` / ``rft`` refuse
such a record with ``file:line:field``; ``memrl view`` skips it with a warning and shows the rest.
"""

from __future__ import annotations

from typing import Any

ID_LIMIT = 2**31  # token ids are stored as signed 32-bit integers (memrl.packed)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            float: "a number with a fraction"}.get(type(value), type(value).__name__)


def ids_problem(ids: Any, vocab_size: int | None = None) -> tuple[str, str] | None:
    """(``[j]`` suffix, message) of the first bad token id of a ``token_ids`` list, or None."""
    if not isinstance(ids, list):
        return "", f"must be a list of token ids, got {_json_type(ids)}"
    limit = ID_LIMIT if vocab_size is None else min(vocab_size, ID_LIMIT)
    if all(type(t) is int for t in ids) and (not ids or (min(ids) >= 0 and max(ids) < limit)):
        return None  # the common case, checked at C speed
    for j, t in enumerate(ids):
        if type(t) is not int:
            return f"[{j}]", f"token id {t!r} is not an integer ({_json_type(t)})"
        if t < 0:
            return f"[{j}]", f"token id {t} is negative"
        if t >= limit:
            where = f"the vocabulary ({vocab_size} ids)" if vocab_size is not None and t < ID_LIMIT \
                else "the range of token ids (0 to 2^31-1)"
            return f"[{j}]", f"token id {t} is outside {where}"
    return None


def _numbers_problem(values: Any, n: int, name: str) -> str | None:
    if not isinstance(values, list):
        return f"must be a list, got {_json_type(values)}"
    if len(values) != n:
        return f"has {len(values)} entries for {n} token ids"
    ok = (lambda v: type(v) is int and v in (0, 1)) if name == "loss_mask" else \
        (lambda v: type(v) in (int, float))
    j = next((j for j, v in enumerate(values) if not ok(v)), None)
    if j is not None:
        return f"holds {values[j]!r} at [{j}]; expected {'0 or 1' if name == 'loss_mask' else 'numbers'}"
    return None


def record_problem(record: Any, vocab_size: int | None = None) -> tuple[str | None, str] | None:
    """(field, message) of the first thing that makes ``record`` unusable as token data, or None.

    ``field`` reads like ``conversations[1].token_ids[7]``; it is None when the record itself is
    not a JSON object. ``vocab_size`` also bounds the ids from above.
    """
    if not isinstance(record, dict):
        return None, f"a rollout record is a JSON object, got {_json_type(record)}"
    convs = record.get("conversations")
    if convs is None and any(k in record for k in ("messages", "prompt", "completion")):
        return "conversations", ("missing: this is a chat-format row (TRL's messages / prompt-completion); memrl "
                                 "trains on recorded token-level episodes (memrl train/eval rollouts, "
                                 "Trajectory.to_dict; docs/reference/rollout-format.md)")
    if not isinstance(convs, list):
        return "conversations", f"must be a list, got {_json_type(convs)}"
    for k, conv in enumerate(convs):
        where = f"conversations[{k}]"
        if not isinstance(conv, dict):
            return where, f"a conversation is a JSON object, got {_json_type(conv)}"
        ids = conv.get("token_ids")
        bad = ids_problem(ids, vocab_size)
        if bad is not None:
            return f"{where}.token_ids{bad[0]}", bad[1]
        for name in ("loss_mask", "logprobs"):  # trainer_logprobs: a display extra, see memrl.view.episodes
            why = _numbers_problem(conv.get(name), len(ids), name)
            if why is not None:
                return f"{where}.{name}", why
    return None
