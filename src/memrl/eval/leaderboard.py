"""The τ²-bench leaderboard's numbers from ``memrl eval --workflow tool_agent`` results.

The benchmark's leaderboard shows, per domain, pass^1..pass^4 in percent (its ``submission.json``
stores ``results.<domain>.pass_k`` = 100 x the mean over tasks of pass^k, unrounded), and an
"Overall" column: for each k the plain mean of the domains' pass^k over the leaderboard domains the
submission has (its ``get_top_models_overall``: retail, airline, telecom, banking_knowledge). memrl
computes the same from the per-domain ``results.json`` files, and says so when one of retail,
airline and telecom is missing (the site's entries have all three) or when a domain ran a subset of
its split's tasks (``env.task_ids`` / ``env.num_tasks``): such numbers are not comparable with the
leaderboard's. Other domains (mock, library, your own) are listed but never enter Overall.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

LEADERBOARD_DOMAINS = ("retail", "airline", "telecom")  # τ²-bench's Overall
OPTIONAL_DOMAINS = ("banking_knowledge",)  # τ³-bench's fourth domain, averaged in when present
MAX_K = 4  # the leaderboard's columns: pass^1 .. pass^4


def domain_scores(results: Mapping[str, Any]) -> dict[str, float]:
    """``{"pass_1": 61.2, ...}``: a domain's pass^k (k <= 4) in percent, as a submission stores it."""
    return {f"pass_{k}": 100 * float(v) for k, v in sorted(results["pass_hat_k"].items(), key=lambda kv: int(kv[0]))
            if int(k) <= MAX_K}


def overall(scores: Mapping[str, Mapping[str, float]]) -> dict[str, float] | None:
    """The Overall column: per k, the mean over the leaderboard domains present; None without any."""
    counted = [d for d in (*LEADERBOARD_DOMAINS, *OPTIONAL_DOMAINS) if d in scores]
    if not counted:
        return None
    ks = sorted({k for d in counted for k in scores[d]}, key=lambda k: int(k.split("_")[1]))
    return {k: statistics.fmean(scores[d][k] for d in counted if k in scores[d]) for k in ks}  # each k over those with it


def leaderboard(results_by_domain: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The leaderboard view of several domains' ``results.json`` (see the module docstring)."""
    scores = {d: domain_scores(r) for d, r in results_by_domain.items()}
    total = overall(scores)
    first = next(iter(results_by_domain.values()))
    counted = [d for d in (*LEADERBOARD_DOMAINS, *OPTIONAL_DOMAINS) if d in scores] if total else []
    missing = [d for d in LEADERBOARD_DOMAINS if d not in scores]
    notes = []
    if total and missing:
        notes.append(f"Overall averages {', '.join(counted)} only, as τ²-bench's leaderboard script does; the "
                     f"site's entries also have {', '.join(missing)}")
    subset = [d for d, r in results_by_domain.items() if r.get("subset")]
    if subset:
        notes.append(f"{', '.join(subset)}: a subset of the split's tasks (env.task_ids / env.num_tasks), not "
                     "comparable with the leaderboard, which runs every task")
    return {
        "model": first.get("model"), "split": first.get("split"), "trials": first.get("trials"),
        "results": scores, "overall": total, "overall_domains": counted, "note": "; ".join(notes),
        "complete_tasks": {d: [r.get("complete_tasks"), r.get("tasks")] for d, r in results_by_domain.items()},
        "nl_assertions_unchecked": {d: r.get("nl_assertions_unchecked", 0) for d, r in results_by_domain.items()},
    }


def leaderboard_markdown(board: Mapping[str, Any]) -> str:
    """The leaderboard as a markdown table: one row per domain, then Overall (percent, 1 decimal)."""
    ks = sorted({k for s in board["results"].values() for k in s}, key=lambda k: int(k.split("_")[1]))
    head = "| domain | tasks (complete / all) | " + " | ".join(f"pass^{k.split('_')[1]}" for k in ks) + " |"
    lines = [f"**τ²-bench leaderboard view** · `{board['model']}` · split `{board['split']}` · "
             f"{board['trials']} trial(s) per task\n", head, "|---|---:|" + "---:|" * len(ks)]

    def cells(s: Mapping[str, float]) -> str:
        return " | ".join(f"{s[k]:.1f}" if k in s else "-" for k in ks)

    for domain, s in board["results"].items():
        done, total = board["complete_tasks"][domain]
        lines.append(f"| {domain} | {done} / {total} | {cells(s)} |")
    if board["overall"] is not None:
        lines.append(f"| **Overall** ({', '.join(board['overall_domains'])}) | | {cells(board['overall'])} |")
    lines.append("")
    if board["note"]:
        lines.append(board["note"] + ".\n")
    unjudged = {d: n for d, n in board["nl_assertions_unchecked"].items() if n}
    if unjudged:
        lines.append("Natural-language assertions not judged (no env.judge.model), so these rewards are higher "
                     "than τ²-bench's: " + ", ".join(f"{d} {n}" for d, n in unjudged.items()) + ".\n")
    return "\n".join(lines)
