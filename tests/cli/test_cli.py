"""The ``memrl`` command, run as a user would (subprocess)."""

import json
import subprocess
import sys

from memrl.data import read_hotpotqa, read_samples


def memrl(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def test_help_explains_every_command():
    root = memrl("--help")
    assert root.returncode == 0
    for cmd in ("data", "config", "demo"):
        assert cmd in root.stdout
    synth = memrl("data", "synth", "--help")
    assert synth.returncode == 0 and "--docs" in synth.stdout and "--tokenizer" in synth.stdout
    assert memrl("config", "show", "--help").returncode == 0
    short = subprocess.run([sys.executable, "-m", "memrl", "data", "--help"], capture_output=True, text=True,
                           timeout=300)  # python -m memrl, where the scripts folder is not on PATH
    assert short.returncode == 0 and "prompts" in short.stdout and "synth" in short.stdout


def test_data_synth_on_real_sample(tmp_path, hotpot_file):
    r = memrl("data", "synth", "--input", hotpot_file, "--docs", "50,200,400", "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "eval_400.json" in r.stdout and "tokens" in r.stdout
    examples = {e.id: e for e in read_hotpotqa(hotpot_file)}
    for n in (50, 200, 400):
        samples = list(read_samples(tmp_path / f"eval_{n}.json"))
        assert len(samples) == 53
        for s in samples:
            assert s.context.count("\n\nDocument ") == n - 1
            assert all(p.render() in s.context for p in examples[s.id].gold_paragraphs)
    report = json.loads((tmp_path / "token_report.json").read_text())
    assert [r["docs"] for r in report] == [50, 200, 400]
    # a second run into the same folder (the README's eval files after its training file) keeps the others' rows
    r = memrl("data", "synth", "--input", hotpot_file, "--docs", "100,200", "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "token_report.json").read_text())
    assert sorted(r["docs"] for r in report) == [50, 100, 200, 400]


def test_malformed_row_gives_one_line_error(tmp_path, hotpot_file):
    rows = json.loads(hotpot_file.read_text())[:5]
    del rows[3]["answer"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(rows))
    r = memrl("data", "synth", "--input", bad, "--docs", "20", "--out", tmp_path / "out")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == f"error: {bad}:4:answer: missing field"
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_bad_flag_values(tmp_path):
    src = tmp_path / "q.json"
    src.write_text("[]")
    r = memrl("data", "synth", "--input", src, "--docs", "50,abc", "--out", tmp_path / "o")
    assert r.returncode == 2 and "--docs: 'abc' is not an integer" in r.stderr
    r = memrl("data", "synth", "--input", tmp_path / "missing.json", "--docs", "5", "--out", tmp_path / "o")
    assert r.returncode == 2 and "missing.json" in r.stderr


def test_config_show(tmp_path):
    r = memrl("config", "show", "trainer.lr=1e-6", "data.docs=[50,100]")
    assert r.returncode == 0, r.stderr
    assert "lr: 1.0e-06" in r.stdout and "- 100" in r.stdout
    f = tmp_path / "c.yaml"
    f.write_text("trainer:\n  seed: 3\n")
    r = memrl("config", "show", f, "trainer.lr=2e-6")
    assert r.returncode == 0 and "seed: 3" in r.stdout
    r = memrl("config", "show", "trainer.lrr=1")
    assert r.returncode == 2
    assert "unknown config key 'trainer.lrr': did you mean 'trainer.lr'?" in r.stderr
