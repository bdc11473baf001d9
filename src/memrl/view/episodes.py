"""One record as the page shows it: a training rollout per token, or an eval episode as saved.

The browser has no tokenizer, so the response tokens are decoded here, one string per token.
Without a tokenizer the record's decoded ``text`` fields are shown instead.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Record fields shown as the episode's summary when present (short, human-facing).
INFO_KEYS = ("question", "answers", "answer", "final_text", "ending", "note", "error", "task_id", "memory")


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One string per token whose concatenation reads as the decoded text.

    A token that ends inside a multi-byte character decodes to U+FFFD on its own; its bytes are
    carried to the next token so the text shows the character once. Each token is decoded with a
    few tokens of left context, as incremental detokenizers do, so leading-space rules hold.
    """
    out: list[str] = []
    start = 0  # first token of the pending group (tokens not emitted yet)
    for i in range(len(ids)):
        ctx = ids[max(0, start - 4):start]
        prev = tokenizer.decode(ctx, skip_special_tokens=False)
        text = tokenizer.decode([*ctx, *ids[start:i + 1]], skip_special_tokens=False)
        if text.endswith("\ufffd") and i - start < 4 and i + 1 < len(ids):
            out.append("")
            continue
        piece = text[len(prev):] if text.startswith(prev) else tokenizer.decode(ids[start:i + 1],
                                                                                skip_special_tokens=False)
        out.append(piece)
        start = i + 1
    return out


def trainer_logprobs(conv: dict[str, Any]) -> list[float] | None:
    """The trainer's log-probs where they line up with the tokens (a display extra: others are left out)."""
    tlps = conv.get("trainer_logprobs")
    ok = isinstance(tlps, list) and len(tlps) == len(conv.get("token_ids") or []) and \
        all(type(v) in (int, float) for v in tlps)
    return tlps if ok else None


def _round(values: Sequence[float] | None) -> list[float] | None:
    return None if values is None else [round(float(v), 4) for v in values]


def conversation_spans(conv: dict[str, Any], tokenizer: Any | None) -> list[dict[str, Any]]:
    """The conversation as ordered spans: ``prompt``, then ``gen`` (policy tokens) and ``ctx`` runs.

    ``gen`` spans hold per-token strings and the engine's and trainer's log-probs when the
    tokenizer is known; otherwise the record's decoded ``text`` is shown as prompt + response.
    """
    ids, mask = conv.get("token_ids") or [], conv.get("loss_mask") or []
    text = conv.get("text") or {}
    if tokenizer is None:
        spans = [{"kind": "prompt", "text": text.get("prompt", "")}]
        if text.get("response"):
            spans.append({"kind": "gen", "text": text["response"]})
        return spans
    split = next((i for i, m in enumerate(mask) if m), len(mask))
    spans = [{"kind": "prompt", "text": tokenizer.decode(ids[:split], skip_special_tokens=False)}]
    lps, tlps = conv.get("logprobs"), trainer_logprobs(conv)
    i = split
    while i < len(ids):
        j = i
        while j < len(ids) and mask[j] == mask[i]:
            j += 1
        if mask[i]:
            spans.append({"kind": "gen", "tokens": token_strings(tokenizer, ids[i:j]),
                          "lp": _round(lps[i:j] if lps else None), "tlp": _round(tlps[i:j] if tlps else None)})
        else:
            spans.append({"kind": "ctx", "text": tokenizer.decode(ids[i:j], skip_special_tokens=False)})
        i = j
    return spans


def _conv_stats(conv: dict[str, Any]) -> dict[str, Any]:
    mask = conv.get("loss_mask") or []
    gen = [k for k, m in enumerate(mask) if m]
    lps, tlps = conv.get("logprobs") or [], trainer_logprobs(conv) or []
    stats: dict[str, Any] = {"tokens": len(mask), "generated": len(gen)}
    if gen and lps:
        stats["mean_logprob"] = round(sum(lps[k] for k in gen) / len(gen), 4)
    if gen and lps and tlps:
        stats["max_mismatch"] = round(max(abs(lps[k] - tlps[k]) for k in gen), 4)
    return stats


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    info = record.get("info") or {}
    return {k: info[k] for k in INFO_KEYS if k in info and info[k] not in (None, "", [])}


def anchor_key(state: Any) -> str | None:
    """A conversation's anchor state (``meta.state``, from ``ep.generate(..., state=)``) as one string, or None."""
    if state is None or state == "":
        return None
    return state if isinstance(state, str) else json.dumps(state, sort_keys=True, default=str)


def _conv_meta(conv: dict[str, Any]) -> dict[str, Any]:
    meta = conv.get("meta")
    return meta if isinstance(meta, dict) else {}


def anchor_counts(records: Iterable[Any]) -> Counter[tuple[str, str]]:
    """How many conversations of the given records (one step's saved episodes) share each anchor state
    within their group: ``{(group_id, state): count}``. GiGPO compares the turns of one anchor group
    (the trainer scopes anchors to the prompt group); a file keeps only some of a step's episodes, so
    these are the saved turns sharing it, a lower bound of the trained group."""
    counts: Counter[tuple[str, str]] = Counter()
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("conversations"), list):
            continue
        for c in rec["conversations"]:
            key = anchor_key(_conv_meta(c).get("state")) if isinstance(c, dict) else None
            if key is not None:
                counts[(str(rec.get("group_id", "")), key)] += 1
    return counts


def run_episode(record: dict[str, Any], ep_id: str, tokenizer: Any | None,
                anchors: Mapping[tuple[str, str], int] | None = None) -> dict[str, Any]:
    """A rollout record (see :mod:`memrl.io.records`) as the page shows it.

    Each conversation carries its turn reward, the advantage it was trained with and its anchor state
    (``state``), with ``anchor_shared``: the saved conversations of its group at this step with the same
    state (``anchors``, from :func:`anchor_counts` over the step's file). ``advantages`` lists every
    conversation's advantage when they differ (a per-turn estimator such as gigpo), else it is None.
    """
    info = record.get("info") or {}
    group = str(record.get("group_id", ""))
    convs = []
    for k, c in enumerate(record.get("conversations") or []):
        state = anchor_key(_conv_meta(c).get("state"))
        convs.append({"index": k, "reward": c.get("reward"), "meta": c.get("meta") or {},
                      "advantage": c.get("advantage"), "state": state,
                      "anchor_shared": (anchors or {}).get((group, state)) if state is not None else None,
                      **_conv_stats(c), "spans": conversation_spans(c, tokenizer)})
    advs = [c["advantage"] for c in convs if c.get("advantage") is not None]
    return {"id": ep_id, "step": record.get("step"), "pick": record.get("pick"),
            "policy_version": record.get("policy_version"), "sample_id": str(record.get("sample_id", "")),
            "group_id": group, "reward": record.get("reward"),
            "advantage": advs[0] if advs else None,
            "advantages": [c["advantage"] for c in convs] if len(set(advs)) > 1 else None,
            "length": sum(c["generated"] for c in convs),
            "metrics": record.get("metrics") or {}, "breakdown": info.get("reward_breakdown") or {},
            "summary": _summary(record), "messages": info.get("messages") or [], "conversations": convs}


_CONV_HEAD = re.compile(r"^## conversation (\d+)/(\d+) ?\(?(.*?)\)?$", re.M)


def transcript_conversations(text: str) -> list[dict[str, str]]:
    """Prompt and response text of each conversation of a long-context eval transcript."""
    heads = list(_CONV_HEAD.finditer(text))
    out = []
    for h, nxt in zip(heads, [*heads[1:], None]):
        body = text[h.end():nxt.start() if nxt else len(text)]
        prompt, _, response = body.partition("\n### response (")
        prompt = re.sub(r"^\n?### prompt \(\d+ tokens\)\n", "", prompt)
        response = re.sub(r"^\d+ tokens\)\n", "", response)
        out.append({"prompt": prompt, "response": response.rstrip("\n")})
    return out


def eval_episode(record: dict[str, Any], ep_id: str, transcript: str | None) -> dict[str, Any]:
    """An eval record (long-context or tool agent) as the page shows it."""
    info = record.get("info") or {}
    texts = transcript_conversations(transcript) if transcript else []
    convs = []
    for k, c in enumerate(record.get("conversations") or []):
        meta = {key: v for key, v in c.items() if key not in ("prompt_tokens", "response_tokens")}
        t = texts[k] if k < len(texts) else {}
        spans = [{"kind": "prompt", "text": t.get("prompt", "")}]
        if t.get("response"):
            spans.append({"kind": "gen", "text": t["response"]})
        convs.append({"index": k, "meta": meta, "tokens": c.get("prompt_tokens", 0) + c.get("response_tokens", 0),
                      "generated": c.get("response_tokens", 0), "spans": spans})
    metrics = record.get("metrics") or {}
    length = sum(c["generated"] for c in convs) if convs else int(metrics.get("response_tokens", 0))
    sample = record.get("task_id", record.get("sample_id", ""))
    step, reward = record.get("docs"), record.get("reward")
    if "ruler_score" in record:  # a RULER suite episode: its score, at its length, among its task's samples
        step, reward, sample = record.get("length"), record["ruler_score"], f"{record.get('task')}/{sample}"
        metrics = {**metrics, "workflow_reward": record.get("reward")}
    return {"id": ep_id, "step": step, "pick": None, "sample_id": str(sample), "group_id": str(sample),
            "reward": reward, "advantage": None, "length": length, "metrics": metrics,
            "breakdown": info.get("reward_breakdown") or {}, "summary": _summary(record),
            "messages": info.get("messages") or [], "conversations": convs,
            "trial": record.get("trial", record.get("repeat")),
            "transcript": transcript if not texts and not info.get("messages") else None}
