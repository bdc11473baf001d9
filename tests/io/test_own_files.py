"""memrl view/plot --out replace a page or plot memrl wrote, and anything else only with --force."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from memrl.cli.main import app  # noqa: E402
from memrl.io.own_files import PNG_METADATA, written_by_memrl  # noqa: E402


def test_memrls_pages_and_plots_are_told_from_other_files(tmp_path):
    fig = plt.figure()
    plt.savefig(tmp_path / "ours.png", metadata=PNG_METADATA)
    plt.savefig(tmp_path / "theirs.png")  # matplotlib's own Software text
    plt.close(fig)
    (tmp_path / "page.html").write_text("<!DOCTYPE html><head><title>memrl view · run</title>")
    (tmp_path / "notes.html").write_text("<title>my notes</title>")
    (tmp_path / "fake.png").write_text("not an image")
    assert written_by_memrl(tmp_path / "ours.png") and written_by_memrl(tmp_path / "page.html")
    assert not any(written_by_memrl(tmp_path / n) for n in ("theirs.png", "notes.html", "fake.png"))


def test_plot_out_keeps_a_users_figure_unless_forced(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": s / 4}) + "\n" for s in (1, 2, 3)))
    figure = tmp_path / "figure.png"
    figure.write_bytes(b"my figure")
    r = CliRunner().invoke(app, ["plot", str(run), "--out", str(figure)])
    assert r.exit_code == 2 and "exists and memrl did not write it: pass --force" in " ".join(r.output.split())
    assert figure.read_bytes() == b"my figure"
    assert CliRunner().invoke(app, ["plot", str(run), "--out", str(figure), "--force"]).exit_code == 0
    assert written_by_memrl(figure)
    r = CliRunner().invoke(app, ["plot", str(run), "--out", str(figure)])  # memrl's own plot: replaced as before
    assert r.exit_code == 0, r.output
