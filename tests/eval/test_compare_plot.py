"""``memrl plot`` over eval folders: accuracy against context length (or pass^k against k), overlaid."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.eval.compare_plot import curve, plot_evals


def qa(sub_em: list[float], finished: tuple[int, ...] = (4, 4, 4)) -> dict:
    docs = ["50", "200", "800"]
    return {"model": "m", "workflow": "memagent", "by_docs": {
        n: {"context_tokens": 7000.0 * 4 ** i, "finished": f, "failed": 0, "sub_em": s, "em": s / 2, "f1": s / 4}
        for i, (n, s, f) in enumerate(zip(docs, sub_em, finished))}}


def ruler(avg: list[float]) -> dict:
    lengths = [4096, 8192]
    return {"suite": "ruler", "lengths": lengths, "tasks": ["niah_single_1", "qa_1"], "average": {
        str(n): a for n, a in zip(lengths, avg)}, "by_task": {
        "niah_single_1": {str(n): {"score": 100.0} for n in lengths},
        "qa_1": {"4096": {"score": 2 * avg[0] - 100.0}, "8192": {"score": None}}}}


def folder(path, results):
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps(results))
    return path


def test_curves_of_each_kind():
    c = curve("long-context", qa([90.0, 50.0, 25.0], finished=(4, 0, 4)), "sub_em")  # 200 docs: none finished
    assert (c.x, c.names, c.y) == ([7000.0, 112000.0], ["50 docs", "800 docs"], [90.0, 25.0])
    c = curve("RULER", ruler([80.0, 70.0]), "qa_1")
    assert (c.x, c.names, c.y) == ([4096.0, 8192.0], ["4K", "8K"], [60.0, None])
    c = curve("pass^k", {"pass_hat_k": {"2": 0.25, "1": 0.5, "10": 0.125}}, "pass^k")
    assert (c.names, c.y) == (["pass^1", "pass^2", "pass^10"], [50.0, 25.0, 12.5])


def test_two_long_context_evals_overlaid(tmp_path):
    base = folder(tmp_path / "base", qa([40.0, 20.0, 10.0]))
    rl = folder(tmp_path / "rl", qa([90.0, 85.0, 80.0]))
    out = tmp_path / "acc.png"
    r = CliRunner().invoke(app, ["plot", str(base), str(rl), "--out", str(out), "-m", "sub_em", "-m", "f1"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000
    lines = r.output.splitlines()
    assert lines[0] == f"wrote {out}" and "sub_em (%):" in lines and "f1 (%):" in lines
    assert [ln.split() for ln in lines if ln.startswith(("base", "rl"))] == [
        ["base", "40.0", "20.0", "10.0"], ["rl", "90.0", "85.0", "80.0"],  # sub_em
        ["base", "10.0", "5.0", "2.5"], ["rl", "22.5", "21.2", "20.0"]]  # f1 = sub_em / 4 here
    assert sorted(p.name for p in base.iterdir()) == ["results.json"]


def test_ruler_and_pass_k_tables(tmp_path):
    a, b = folder(tmp_path / "a", ruler([80.0, 70.0])), folder(tmp_path / "b", ruler([60.0, 50.0]))
    _, tables = plot_evals([a, b], tmp_path / "r.png")
    assert tables == [("average", ["eval", "4K", "8K"], [["a", "80.0", "70.0"], ["b", "60.0", "50.0"]])]
    _, tables = plot_evals([a], tmp_path / "r.png", ["qa_1"])
    assert tables[0][2] == [["a", "60.0", "-"]]
    t1 = folder(tmp_path / "t1", {"pass_hat_k": {"1": 0.5, "2": 0.25}})
    t2 = folder(tmp_path / "t2", {"pass_hat_k": {"1": 0.75}})
    _, tables = plot_evals([t1, t2], tmp_path / "p.png")
    assert tables == [("pass^k", ["eval", "pass^1", "pass^2"], [["t1", "50.0", "25.0"], ["t2", "75.0", "-"]])]


def test_refusals_are_one_line(tmp_path):
    q = folder(tmp_path / "q", qa([1.0, 2.0, 3.0]))
    t = folder(tmp_path / "t", {"pass_hat_k": {"1": 0.5}})
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    cases = {
        ("plot", str(q), str(t), "--out", str(tmp_path / "x.png")):
            f"error: cannot overlay evals of different kinds: {q} (long-context), {t} (pass^k)",
        ("plot", str(q), str(run), "--out", str(tmp_path / "x.png")):
            "error: training runs and eval folders cannot be overlaid: plot them separately",
        ("plot", str(q), "-m", "average", "--out", str(tmp_path / "x.png")):
            "error: --metric 'average' for long-context evals: one of sub_em, em, f1",
        ("plot", str(q), "--smooth", "3", "--out", str(tmp_path / "x.png")):
            "error: --smooth applies to training runs, not to eval folders",
    }
    for args, want in cases.items():
        r = CliRunner().invoke(app, list(args))
        assert r.exit_code == 2 and r.output.strip() == want, (args, r.output)
    assert not (tmp_path / "x.png").exists()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{oops")
    with pytest.raises(ValueError, match="results.json: not JSON"):
        plot_evals([tmp_path / "bad"], tmp_path / "x.png")


def test_an_eval_with_nothing_finished_or_no_results_yet_is_named(tmp_path):
    failed = folder(tmp_path / "failed", qa([0.0, 0.0, 0.0], finished=(0, 0, 0)))
    r = CliRunner().invoke(app, ["plot", str(failed)])
    assert r.exit_code == 2 and "nothing to plot: no sub_em value" in " ".join(r.output.split())
    assert not (failed / "curves.png").exists()  # no empty picture
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "eval_config.yaml").write_text("model: {}\n")
    r = CliRunner().invoke(app, ["plot", str(stopped)])
    assert r.exit_code == 2 and "an eval folder without results.json" in " ".join(r.output.split())


def test_folders_scored_under_different_protocols_are_labelled_with_them(tmp_path):
    """The same answers score 0 under memrl's sub-EM and 100 under MemAgent's two-way one: the rows say which."""
    a = folder(tmp_path / "a", qa([0.0, 0.0, 0.0]))
    b = folder(tmp_path / "b", {**qa([100.0, 100.0, 100.0]), "protocol": "memagent"})
    r = CliRunner().invoke(app, ["plot", str(a), str(b), "--out", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    rows = [ln.split()[:2] for ln in r.output.splitlines() if ln.startswith(("a ", "b "))]
    assert rows == [["a", "(memrl)"], ["b", "(memagent)"]]
