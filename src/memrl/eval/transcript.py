"""Human-readable transcripts of episodes (one text file per episode)."""

from __future__ import annotations

from typing import Any

from memrl.types import Trajectory


def render_transcript(traj: Trajectory, tokenizer: Any, title: str) -> str:
    """Every conversation's prompt and response, decoded with special tokens visible."""
    info, m = traj.info, traj.metrics
    lines = [
        f"# {title}",
        f"question: {info.get('question')}",
        f"gold: {info.get('answers')}",
        "answer: none: the episode failed and is not scored (re-running the eval retries it)" if "error" in info
        else f"answer: {info.get('answer')!r}   reward={traj.reward:g}   "
        + "   ".join(f"{k}={m[k]:g}" for k in ("em", "sub_em", "f1") if k in m),
        f"conversations: {traj.num_conversations}",
        "",
    ]
    if "error" in info:
        lines += [f"ERROR: {info['error']}", ""]
    for k, conv in enumerate(traj.conversations, start=1):
        meta = " ".join(f"{key}={val}" for key, val in conv.meta.items())
        split = conv.prompt_length
        prompt = tokenizer.decode(conv.token_ids[:split], skip_special_tokens=False)
        response = tokenizer.decode(conv.token_ids[split:], skip_special_tokens=False)
        lines += [
            f"## conversation {k}/{traj.num_conversations} ({meta})",
            f"### prompt ({split} tokens)",
            prompt,
            f"### response ({conv.num_tokens - split} tokens)",
            response,
            "",
        ]
    return "\n".join(lines)
