"""Aggregate finished episodes into results.json, a markdown table and a PNG plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.data.atomic import atomic_path, atomic_write

METRICS = ("sub_em", "em", "f1")


def summarize(episodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-size means; accuracy in percent; errors count as wrong answers."""
    def mean(key: str) -> float:
        return statistics.fmean(e["metrics"].get(key, 0.0) for e in episodes) if episodes else 0.0

    return {
        "samples": len(episodes),
        **{k: round(100 * mean(k), 2) for k in METRICS},
        "answered": round(100 * mean("answered"), 2),
        "context_tokens": round(mean("context_tokens"), 1),
        "conversations": round(mean("num_conversations"), 2),
        "errors": sum(1 for e in episodes if e.get("error")),
        "seconds_per_episode": round(statistics.fmean(e.get("seconds", 0.0) for e in episodes), 3) if episodes else 0,
    }


def markdown_table(results: dict[str, Any]) -> str:
    rows = results["by_docs"]
    head = "| docs | context tokens | samples | sub-EM % | EM % | F1 % | answered % | conversations | errors |"
    lines = [f"**{results['workflow']}** on `{results['model']}`", "", head, "|" + "---:|" * 9]
    for n in sorted(rows, key=int):
        r = rows[n]
        lines.append(f"| {n} | {r['context_tokens']:,.0f} | {r['samples']} | {r['sub_em']:.2f} | {r['em']:.2f} | "
                     f"{r['f1']:.2f} | {r['answered']:.1f} | {r['conversations']:.1f} | {r['errors']} |")
    return "\n".join(lines) + "\n"


def plot_accuracy(results: dict[str, Any], path: Path) -> Path:
    """Accuracy (sub-EM, EM, F1) against mean context tokens, log-scaled x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["by_docs"]
    docs = sorted(rows, key=int)
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
    ax.set_title(f"{results['workflow']} · {Path(str(results['model'])).name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
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
