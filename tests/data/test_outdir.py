"""Output folders: starting over deletes only what memrl wrote; unusable folders fail in one line."""

import json
import os

import pytest

from memrl.io.atomic import temp_name
from memrl.data.outdir import MANIFEST, OutputDirError, check_writable_dir, clear_outputs, record_outputs


def _memrl_run(out):
    record_outputs(out, ["results.json", "episodes"])
    (out / "results.json").write_text("{}")
    (out / "episodes" / "50").mkdir(parents=True)
    (out / "episodes" / "50" / "0.json").write_text("{}")


def test_clear_removes_only_recorded_entries_and_keeps_the_folder(tmp_path):
    out = tmp_path / "ev"
    _memrl_run(out)
    (out / temp_name("results.json")).write_text("half-written by a killed run")
    assert clear_outputs(out, "--restart") == 3
    assert out.is_dir() and os.listdir(out) == []


def test_clear_refuses_a_folder_with_user_files_and_changes_nothing(tmp_path):
    _memrl_run(tmp_path)  # e.g. --out . in a project folder
    (tmp_path / "notes.txt").write_text("mine")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(OutputDirError) as err:
        clear_outputs(tmp_path, "--restart")
    msg = str(err.value)
    assert str(tmp_path) in msg and "'notes.txt'" in msg and "\n" not in msg
    assert sorted(os.listdir(tmp_path)) == before
    assert (tmp_path / "episodes" / "50" / "0.json").is_file()


def test_clear_refuses_an_unmarked_folder_but_accepts_missing_or_empty(tmp_path):
    assert clear_outputs(tmp_path / "missing", "--fresh") == 0
    (tmp_path / "empty").mkdir()
    assert clear_outputs(tmp_path / "empty", "--fresh") == 0
    old = tmp_path / "old"
    (old / "rl").mkdir(parents=True)
    with pytest.raises(OutputDirError, match="'rl'"):
        clear_outputs(old, "--fresh")
    assert (old / "rl").is_dir()


def test_a_tampered_manifest_cannot_reach_outside_the_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "precious").write_text("x")
    (out / MANIFEST).write_text(json.dumps({"entries": ["..", "../precious", "/etc"]}))
    assert clear_outputs(out, "--restart") == 0
    assert (tmp_path / "precious").is_file()
    with pytest.raises(ValueError):
        record_outputs(out, ["../precious"])


def test_manifest_accumulates_names(tmp_path):
    record_outputs(tmp_path, ["a.json"])
    record_outputs(tmp_path, ["b.json"])
    assert json.loads((tmp_path / MANIFEST).read_text())["entries"] == ["a.json", "b.json"]


def test_starting_over_keeps_what_other_commands_wrote_there(tmp_path):
    # memrl data synth writes eval_50.json; memrl eval --data DIR --out DIR --restart must not delete its own input
    record_outputs(tmp_path, ["eval_50.json", "token_report.json"], by="memrl data synth")
    (tmp_path / "eval_50.json").write_text("[]")
    (tmp_path / "token_report.json").write_text("{}")
    record_outputs(tmp_path, ["results.json", "episodes"], by="memrl eval")
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "episodes").mkdir()
    writing = temp_name("eval_50.json")
    (tmp_path / writing).write_text("a synth writing right now")
    assert clear_outputs(tmp_path, "--restart", by="memrl eval") == 2
    assert sorted(os.listdir(tmp_path)) == sorted([MANIFEST, "eval_50.json", "token_report.json", writing])
    kept = json.loads((tmp_path / MANIFEST).read_text())
    assert kept["entries"] == ["eval_50.json", "token_report.json"]
    assert kept["owners"]["eval_50.json"] == ["memrl data synth"]
    # the synth's own start-over (or a clear for every command) then removes them
    assert clear_outputs(tmp_path, "--fresh") == 3 and os.listdir(tmp_path) == []


def test_a_name_two_commands_wrote_is_deleted_by_either_and_old_manifests_by_any(tmp_path):
    record_outputs(tmp_path, ["rollouts"], by="memrl demo")
    record_outputs(tmp_path, ["rollouts"], by="memrl eval")
    (tmp_path / "rollouts").mkdir()
    assert json.loads((tmp_path / MANIFEST).read_text())["owners"]["rollouts"] == ["memrl demo", "memrl eval"]
    assert clear_outputs(tmp_path, "--fresh", by="memrl demo") == 1 and os.listdir(tmp_path) == []
    old = tmp_path / "old"
    old.mkdir()
    (old / MANIFEST).write_text(json.dumps({"written_by": "memrl", "entries": ["results.json"]}))  # no owners
    (old / "results.json").write_text("{}")
    assert clear_outputs(old, "--restart", by="memrl eval") == 1 and os.listdir(old) == []


def test_writable_dir_checks(tmp_path, monkeypatch):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="is a file, not a folder"):
        check_writable_dir(f)
    with pytest.raises(OutputDirError, match="cannot be created"):
        check_writable_dir(f / "sub")
    check_writable_dir(tmp_path / "new" / "deeper")  # creatable: fine, and nothing is created
    assert not (tmp_path / "new").exists()

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("memrl.data.outdir.tempfile.mkstemp", denied)
    with pytest.raises(OutputDirError, match=r"--out .*: cannot write in .* \(Permission denied\)"):
        check_writable_dir(tmp_path / "ro")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a mode-0555 folder")
def test_read_only_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputDirError, match="cannot write"):
            check_writable_dir(ro)
    finally:
        ro.chmod(0o755)


def test_a_folder_an_older_memrl_wrote_is_recognised_by_its_signature(tmp_path):
    legacy = (("data", "model_init", "rl"), "model_init/config.json")
    old = tmp_path / "old"
    (old / "model_init").mkdir(parents=True)
    (old / "model_init" / "config.json").write_text("{}")
    (old / "rl").mkdir()
    assert clear_outputs(old, "--fresh", legacy=legacy) == 2 and os.listdir(old) == []

    mine = tmp_path / "mine"  # same names, no signature: not ours
    (mine / "data").mkdir(parents=True)
    with pytest.raises(OutputDirError, match="'data'"):
        clear_outputs(mine, "--fresh", legacy=legacy)
    (old / "model_init").mkdir()
    (old / "model_init" / "config.json").write_text("{}")
    (old / "notes.txt").write_text("x")  # signature, but something else too: refused
    with pytest.raises(OutputDirError, match="2 such entries"):
        clear_outputs(old, "--fresh", legacy=legacy)


def test_a_name_memrl_did_not_write_is_never_overwritten(tmp_path):
    """``memrl data ruler --out DIR`` overwrote a user's ruler_report.json and then listed it as its own."""
    from memrl.data.outdir import OutputDirError, record_outputs, recorded_entries

    (tmp_path / "ruler_report.json").write_text("MY PRECIOUS REPORT")
    with pytest.raises(OutputDirError, match="ruler_report.json exists and memrl did not write it"):
        record_outputs(tmp_path, ["a.jsonl", "ruler_report.json"], by="memrl data ruler")
    assert (tmp_path / "ruler_report.json").read_text() == "MY PRECIOUS REPORT"
    assert recorded_entries(tmp_path) is None  # nothing recorded, nothing claimed
    record_outputs(tmp_path, ["a.jsonl"], by="memrl data ruler")
    (tmp_path / "a.jsonl").write_text("x")
    record_outputs(tmp_path, ["a.jsonl"], by="memrl data ruler")  # its own output: a re-run may replace it


def test_a_folder_an_older_memrl_wrote_can_still_be_written_into(tmp_path):
    """A demo folder from before the manifest resumes (its stages are recognised by the signature); the same
    names without it, or beside a stranger, are refused."""
    legacy = (("data", "model_init", "rl"), "model_init/config.json")
    old = tmp_path / "old"
    (old / "model_init").mkdir(parents=True)
    (old / "model_init" / "config.json").write_text("{}")
    (old / "data").mkdir()
    record_outputs(old, ["data", "model_init", "rl"], by="memrl demo", legacy=legacy)
    stranger = tmp_path / "stranger"
    (stranger / "data").mkdir(parents=True)
    with pytest.raises(OutputDirError, match="data exists and memrl did not write it"):
        record_outputs(stranger, ["data"], by="memrl demo", legacy=legacy)
    (old / "notes.txt").write_text("x")
    fresh = tmp_path / "old2"
    (fresh / "model_init").mkdir(parents=True)
    (fresh / "model_init" / "config.json").write_text("{}")
    (fresh / "notes.txt").write_text("x")  # something else too: not the older layout
    with pytest.raises(OutputDirError, match="model_init exists"):
        record_outputs(fresh, ["data", "model_init"], by="memrl demo", legacy=legacy)
