"""``--out`` of export/sft/rft: replacing a folder never reaches the user's own files or the command's inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from memrl.train.outdir import check_target, replacing_dir


def _project(tmp_path: Path) -> Path:
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text("x: 1\n")
    (tmp_path / "notes.txt").write_text("mine")
    return tmp_path


def test_the_current_folder_or_one_holding_it_is_refused_even_with_force(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path) / "run")
    for out in (Path("."), Path(".."), tmp_path / "run"):
        with pytest.raises(ValueError, match="the folder you are in"):
            check_target(out, force=True)
    assert (tmp_path / "notes.txt").is_file() and (tmp_path / "run" / "config.yaml").is_file()


@pytest.mark.parametrize("out, says", [("run", "is the input"), (".", "the folder you are in"),
                                       ("run/checkpoints", "inside the input")])
def test_an_out_that_is_holds_or_lies_in_the_input_is_refused(tmp_path, monkeypatch, out, says):
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "run" / "checkpoints" / "step_1").mkdir()
    with pytest.raises(ValueError, match=says):
        check_target(Path(out), force=True, inputs=[Path("run")])
    monkeypatch.chdir("/")
    with pytest.raises(ValueError, match="holds the input"):
        check_target(tmp_path, force=True, inputs=[tmp_path / "run"])


def test_a_new_folder_inside_the_input_and_a_sibling_are_fine(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path))
    check_target(Path("run/model"), force=False, inputs=[Path("run")])  # export RUN --out RUN/model
    (tmp_path / "old_model").mkdir()
    (tmp_path / "old_model" / "model.safetensors").write_text("old")
    (tmp_path / "old_model" / "config.json").write_text("{}")
    check_target(Path("old_model"), force=True, inputs=[Path("run")])  # an export (from before the manifest)
    with pytest.raises(ValueError, match="--force"):
        check_target(Path("old_model"), force=False, inputs=[Path("run")])


def test_replacing_a_relative_folder_touches_nothing_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "old.bin").write_text("old")
    with replacing_dir(Path("model")) as tmp:
        (tmp / "new.bin").write_text("new")
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes.txt", "run"]  # no parking left


def test_a_failed_swap_keeps_the_old_folder_and_every_sibling(tmp_path, monkeypatch):
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "old.bin").write_text("old")
    real = Path.rename

    def refuse(self, target):
        if self.name == "model":
            raise OSError(16, "Device or resource busy")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", refuse)
    with pytest.raises(OSError), replacing_dir(Path("model")) as tmp:
        (tmp / "new.bin").write_text("new")
    assert (tmp_path / "model" / "old.bin").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes.txt", "run"]


def test_an_out_that_cannot_be_written_fails_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="--out .*file/model: .*file is a file, so the folder cannot be created"):
        check_target(tmp_path / "file" / "model", force=False)


def _export(folder: Path) -> Path:
    from memrl.train.outdir import mark_export

    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_text("{}")
    mark_export(folder)
    return folder


def test_force_replaces_an_earlier_export_only(tmp_path):
    export = _export(tmp_path / "export")
    check_target(export, force=True)
    (export / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"--force refuses to replace it: it holds 'notes.txt', which memrl did "
                                         r"not write; remove it yourself or choose another --out"):
        check_target(export, force=True)
    run = _project(tmp_path / "p") / "run"
    with pytest.raises(ValueError, match="is a training run .*--force replaces only an earlier export"):
        check_target(run, force=True)
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "eval_config.yaml").write_text("model: {}\n")
    with pytest.raises(ValueError, match="is a memrl eval folder"):
        check_target(tmp_path / "ev", force=True)
    with pytest.raises(ValueError, match="holds 'notes.txt', which memrl did not write"):
        check_target(tmp_path / "p", force=True)  # a folder of the user's, with a run inside
    assert (tmp_path / "p" / "notes.txt").read_text() == "mine"


def test_force_refuses_another_commands_folder(tmp_path):
    from memrl.data.outdir import record_outputs

    data = tmp_path / "data"
    record_outputs(data, ["eval_8.json"], by="memrl data synth")
    (data / "eval_8.json").write_text("[]")
    with pytest.raises(ValueError, match="holds 'eval_8.json', which memrl data synth wrote, not an export"):
        check_target(data, force=True)


def test_a_legacy_export_with_a_file_of_the_users_is_refused(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for name in ("config.json", "model-00001-of-00002.safetensors", "merges.txt", "notes.md"):
        (old / name).write_text("x")
    with pytest.raises(ValueError, match="holds 'notes.md', which memrl did not write"):
        check_target(old, force=True)
    (old / "notes.md").unlink()
    check_target(old, force=True)


def test_an_export_killed_mid_swap_is_put_back_or_cleaned(tmp_path):
    """SIGKILL after the old --out was parked and before the new one was renamed in left no --out and a hidden
    full model copy that nothing removed; the next write puts the old one back first (or drops it)."""
    from memrl.train.outdir import replacing_dir

    out = tmp_path / "exp"
    parked = tmp_path / ".exp.ygy17wvg.old"
    (parked / "exp").mkdir(parents=True)
    (parked / "exp" / "model.safetensors").write_text("old")
    foreign = tmp_path / ".exp.mine.old"  # not memrl's parking shape: never touched
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(RuntimeError):
        with replacing_dir(out):
            raise RuntimeError("the new export failed")
    assert (out / "model.safetensors").read_text() == "old" and not parked.exists()
    (parked / "exp").mkdir(parents=True)  # again, now with --out present: the parked copy only goes
    with replacing_dir(out) as tmp:
        (tmp / "model.safetensors").write_text("new")
    assert (out / "model.safetensors").read_text() == "new" and not parked.exists()
    assert (foreign / "notes.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".exp.mine.old", "exp"]
    odd = tmp_path / "exp[v2]"  # glob characters in the name: the parked copy is still found
    (tmp_path / ".exp[v2].abcd1234.old" / "exp[v2]").mkdir(parents=True)
    with replacing_dir(odd) as tmp:
        (tmp / "model.safetensors").write_text("new")
    assert not (tmp_path / ".exp[v2].abcd1234.old").exists() and (odd / "model.safetensors").exists()
