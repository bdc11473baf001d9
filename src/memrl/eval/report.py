"""Aggregate finished episodes into results.json, a markdown table and a PNG plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.io.atomic import atomic_path, atomic_write
from memrl.io.own_files import PNG_METADATA

METRICS = ("sub_em", "em", "f1")


def pass_at_k(episodes: Sequence[dict[str, Any]], repeats: int, key: str = "sub_em") -> tuple[float | None, int]:
    """(pass@K in percent, questions counted): a question passes when any of its K answers scores 1.

    Only questions with all K repeats finished count: one with fewer tries would be judged
    on fewer chances and pull pass@K down.
    """
    by_question: dict[str, list[float]] = {}
    for e in episodes:
        by_question.setdefault(str(e["sample_id"]), []).append(float(e["metrics"].get(key, 0.0)))
    complete = [v for v in by_question.values() if len(v) >= repeats]
    if not complete:
        return None, 0
    return round(100 * statistics.fmean(float(max(v) >= 1.0) for v in complete), 2), len(complete)


def percent(scores: Sequence[float]) -> float | None:
    """Item scores in [0, 1] as the papers' scripts report them: ``round(sum(v) * 100 / len(v), 2)``."""
    return round(sum(scores) * 100 / len(scores), 2) if scores else None


def empty_answer(episode: dict[str, Any]) -> bool:
    """A finished episode whose final response is empty: the papers' scripts skip it (``if output == ''``)."""
    return (episode.get("info") or {}).get("final_text") == ""


def summarize(episodes: Sequence[dict[str, Any]], failed: int = 0, repeats: int = 1,
              skip_empty: bool = False) -> dict[str, Any]:
    """Per-size means over *finished* episodes; accuracy in percent, ``None`` when none finished.

    Failed episodes (the engine raised: a timeout, an HTTP 401) say nothing about the model, so
    they are counted in ``failed`` and left out of every mean instead of being scored as wrong.
    ``skip_empty`` (a published protocol): an empty final response is left out of the scores too, as
    the papers' scripts skip it (``if output == '': continue``); counted in ``skipped_empty``.
    With ``repeats`` K > 1 the means are over all K answers of every question (mean accuracy)
    and ``pass_at_k`` says how many questions were answered right at least once. Percentages are
    ``round(sum * 100 / count, 2)``, the scripts' rounding.
    """
    episodes = [e for e in episodes if not e.get("error")]  # defensive: older memrl saved failures here
    scored = [e for e in episodes if not (skip_empty and empty_answer(e))]

    def mean(key: str) -> float | None:
        return statistics.fmean(e["metrics"].get(key, 0.0) for e in episodes) if episodes else None

    def pct(key: str) -> float | None:
        return percent([e["metrics"].get(key, 0.0) for e in scored])

    tokens, convs = mean("context_tokens"), mean("num_conversations")
    extra: dict[str, Any] = {}
    if repeats > 1:
        extra["pass_at_k"], extra["questions"] = pass_at_k(episodes, repeats)
    return {
        "samples": len(episodes) + failed,
        "finished": len(episodes),
        "failed": failed,
        **({"skipped_empty": len(episodes) - len(scored)} if skip_empty else {}),
        **{k: pct(k) for k in METRICS},
        "answered": pct("answered"),
        "context_tokens": None if tokens is None else round(tokens, 1),
        "conversations": None if convs is None else round(convs, 2),
        "seconds_per_episode": (round(statistics.fmean(e.get("seconds", 0.0) for e in episodes), 3)
                                if episodes else None),
        **extra,
    }


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def failed_total(results: dict[str, Any]) -> int:
    return sum(r.get("failed", 0) for r in results["by_docs"].values())


def _sampled(results: dict[str, Any]) -> str:
    """How the episodes were sampled, and how they filled their prompts (a re-scored folder keeps its own)."""
    s = results.get("sampling")
    if not s:
        return ""
    fill = ((results.get("config") or {}).get("workflow") or {}).get("options", {}).get("slot_fill")
    return f" Sampled at temperature {s['temperature']:g}, top_p {s['top_p']:g}" + (f", slot_fill {fill}" if fill
                                                                                       else "") + "."


def markdown_table(results: dict[str, Any]) -> str:
    """One row per document count; ``failed`` sits next to the accuracy it is excluded from."""
    rows = results["by_docs"]
    repeats = int(results.get("repeats", 1))
    protocol = results.get("protocol", "memrl")
    k_head = f" pass@{repeats} % |" if repeats > 1 else ""
    head = ("| docs | context tokens | finished | failed | sub-EM % | EM % | F1 % |" + k_head
            + " answered % | conversations |")
    lines = [f"**{results['workflow']}** on `{results['model']}` · protocol `{protocol}`", "",
             f"Metric: {results.get('metric', 'sub-EM (memrl)')}; "
             f"answer format `{results.get('answer_format', 'boxed')}`"
             + (f"; {repeats} samples per question (accuracy = mean over all samples)" if repeats > 1 else "")
             + "." + _sampled(results), "", head, "|" + "---:|" * (10 if repeats > 1 else 9)]
    for n in sorted(rows, key=int):
        r = rows[n]
        k_cell = f" {_cell(r.get('pass_at_k'), '.2f')} |" if repeats > 1 else ""
        lines.append(f"| {n} | {_cell(r['context_tokens'], ',.0f')} | {r['finished']} | {r['failed']} | "
                     f"{_cell(r['sub_em'], '.2f')} | {_cell(r['em'], '.2f')} | {_cell(r['f1'], '.2f')} |{k_cell} "
                     f"{_cell(r['answered'], '.1f')} | {_cell(r['conversations'], '.1f')} |")
    failed = failed_total(results)
    if failed:
        lines += ["", f"Accuracy is over finished episodes only: {failed} failed episode(s) are not counted "
                  "(see failures/; re-running the same command retries them)."]
    empty = sum(r.get("skipped_empty", 0) for r in rows.values())
    if empty:
        lines += ["", f"{empty} empty final answer(s) are left out of the accuracy, as the paper's script skips "
                  "them (skipped_empty in results.json)."]
    return "\n".join(lines) + "\n"


def plot_accuracy(results: dict[str, Any], path: Path) -> Path:
    """Accuracy (sub-EM, EM, F1) against mean context tokens, log-scaled x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["by_docs"]
    # sizes with no scored episode (none finished, or every answer empty under a published protocol): no point
    docs = [n for n in sorted(rows, key=int) if rows[n]["finished"] and rows[n].get("sub_em") is not None]
    x = [max(rows[n]["context_tokens"], 1.0) for n in docs]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for key, style in zip(METRICS, ("o-", "s--", "^:")):
        ax.plot(x, [rows[n][key] for n in docs], style, label=key.replace("_", "-").upper())
    for xi, n in zip(x, docs):
        ax.annotate(f"{n} docs", (xi, rows[n]["sub_em"]), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("context length (tokens, log scale)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{results['workflow']} · {Path(str(results['model'])).name} · {results.get('protocol', 'memrl')}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", metadata=PNG_METADATA)
    plt.close(fig)
    return path


def write_reports(results: dict[str, Any], out: Path) -> dict[str, Path]:
    paths = {"json": out / "results.json", "markdown": out / "results.md", "plot": out / "accuracy.png"}
    with atomic_write(paths["json"]) as fh:
        json.dump(results, fh, indent=2)
        fh.write("\n")
    with atomic_write(paths["markdown"]) as fh:
        fh.write(markdown_table(results))
    plot_accuracy(results, paths["plot"])
    return paths
