"""Is the warm start somewhere GRPO can take over? Teacher-forced scores of the three skills the demo needs.

The warm start imitates the sloppy teacher for a fixed number of passes, and where that lands depends
on floating-point rounding, so on the CPU's vector width. On one 2-core CPU every seed was fine; on a
2-core AMD EPYC seed 1 ended with two codes at nearly the same input embedding (cosine 0.97): the model
wrote either for either, and 40 GRPO steps lifted held-out accuracy only to 59%. So after its phases the
demo *measures* the warm start on fresh documents, where the model must write a code:

- ``read``: the chunk holds the needle, the new memory is its code;
- ``carry``: the memory holds the code and the chunk does not; the teacher keeps it only 25% of the time,
  so what counts is the code's *share* of the probability given to the four codes;
- ``answer``: the final ``\\boxed{ code}``.

Each score is the correct code's share of the codes' probability, averaged per code; ``keep`` is the
probability given to any code when carrying (the teacher's 25%). A warm start passes when every code's
share is at least :data:`MIN_SHARE` in every skill and ``keep`` at least :data:`MIN_KEEP`; otherwise the
demo trains more passes (``memrl_demo.run``). Behaviour, not weights, is what is compared, so the check
means the same on every machine.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import defaultdict
from typing import Any

from memrl_demo.needle import CODES, make_split
from memrl_demo.teacher import TeacherEngine

MIN_SHARE = 0.9
MIN_KEEP = 0.1
SKILLS = ("read", "carry", "answer")


def code_ids(tok: Any) -> dict[str, int]:
    """Each code's token (one per code: the demo's tokenizer is trained so)."""
    return {c: tok.encode(" " + c, add_special_tokens=False)[0] for c in CODES}


def _turns(tok: Any, docs: list[Any], workflow: Any) -> list[tuple[str, str, list[int], int]]:
    """(skill, code, token ids, index of the code token) of every turn where a keeping teacher writes a code."""
    from memrl.workflows.memagent import memagent

    ids = code_ids(tok)
    turns = []
    for doc in docs:
        code = doc.answers[0]
        teacher = TeacherEngine(tok, code, workflow.final_tokens, 0.0, random.Random(0))
        traj = asyncio.run(memagent(doc, teacher, tok, workflow))
        for conv in traj.conversations:
            tokens, mask = list(conv.token_ids), list(conv.loss_mask)
            start = mask.index(1)
            where = [i for i in range(start, len(tokens)) if tokens[i] == ids[code]]
            if not where:
                continue  # the first memory turn before the needle: "none"
            if conv.meta.get("kind") == "final":
                skill = "answer"
            else:
                skill = "read" if teacher.sees_needle(tokens[:start]) else "carry"
            turns.append((skill, code, tokens, where[0]))
    return turns


def skill_scores(model: Any, tok: Any, workflow: Any, *, seed: int, docs: int = 48) -> dict[str, Any]:
    """``{"read"|"carry"|"answer": {code: share}, "keep": mean code probability when carrying}`` on ``docs``
    fresh training-length documents (seeded by ``seed``), played through the demo's memagent ``workflow``
    options."""
    import torch

    columns = torch.tensor(list(code_ids(tok).values()))
    shares: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    keep: list[float] = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for skill, code, ids, pos in _turns(tok, make_split(seed, docs, (2, 5)), workflow):
            logits = model(torch.tensor([ids[:pos]])).logits[0, -1].float()
            p = logits.softmax(-1)[columns]
            shares[skill][code].append((p[CODES.index(code)] / p.sum()).item())
            if skill == "carry":
                keep.append(p.sum().item())
    model.train(was_training)
    out: dict[str, Any] = {s: {c: statistics.fmean(v) for c, v in sorted(shares[s].items())} for s in SKILLS}
    out["keep"] = statistics.fmean(keep) if keep else 0.0
    return out


def weakest(scores: dict[str, Any]) -> tuple[str, str, float] | None:
    """The (skill, code, share) furthest below :data:`MIN_SHARE`, ``("keep", "", p)`` when the model
    carries no code at all; ``None`` when the warm start passes."""
    low = min(((s, c, v) for s in SKILLS for c, v in scores[s].items()), key=lambda t: t[2])
    if low[2] < MIN_SHARE:
        return low
    return ("keep", "", scores["keep"]) if scores["keep"] < MIN_KEEP else None


def describe(scores: dict[str, Any]) -> str:
    """One line: the lowest share per skill and the keep rate."""
    parts = [f"{s} {min(scores[s].values()):.2f}" for s in SKILLS]
    return "lowest code share: " + ", ".join(parts) + f"; keeps a code {scores['keep']:.0%} of the time"
