"""A model name that does not load says why in one line: a near miss of an alias is named, and under
HF_HUB_OFFLINE a hub id is missing from the cache (not "check your internet connection")."""

from __future__ import annotations

import os

import pytest

from memrl.models.resolve import ModelNotFoundError, load_model, load_tokenizer


def test_a_typo_of_an_alias_is_named(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"tokenizer 'tinyy' is not a local folder or an alias .*did you mean "
                                                 r"'tiny'\?"):
        load_tokenizer("tinyy")
    with pytest.raises(ModelNotFoundError, match=r"model 'smolm2-135m-instruct'.*did you mean 'smollm2-135m-instruct'"):
        load_model("smolm2-135m-instruct", device="cpu")


def test_a_configs_model_is_named_by_its_setting(monkeypatch, tmp_path):
    """A run's tokenizer comes from model.path (or model.tokenizer): a failure names that setting, not a
    "tokenizer" the user never gave."""
    from types import SimpleNamespace

    from memrl.models.resolve import config_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"^model.path 'tinyy' is not a local folder or an alias"):
        config_tokenizer(SimpleNamespace(path="tinyy", tokenizer=None))
    with pytest.raises(ModelNotFoundError, match=rf"^model.tokenizer {tmp_path}/gone/: no such folder"):
        config_tokenizer(SimpleNamespace(path="tiny", tokenizer=f"{tmp_path}/gone/"))
    assert config_tokenizer(SimpleNamespace(path="tiny", tokenizer=None)).vocab_size > 0


def test_an_uncached_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as err:
        load_tokenizer("memrl-test-org/no-such-model-xyz")
    assert "nor in the local Hugging Face cache, and HF_HUB_OFFLINE=1 forbids downloading it" in str(err.value)
    assert "internet connection" not in str(err.value)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch never-made-by-memrl",))


def test_pickled_weights_that_could_run_code_are_one_line_and_never_run(tmp_path, monkeypatch):
    """A model folder whose pytorch_model.bin is a pickle of an object: refused (torch's weights_only) in one
    line that does not advise unpickling it, and nothing runs."""
    import shutil

    import torch

    from memrl.models.resolve import ModelNotFoundError, load_model, resolve_model_path

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(os.path.join(resolve_model_path("tiny"), "config.json"), folder / "config.json")
    torch.save({"x": _RunsCode()}, folder / "pytorch_model.bin")
    with pytest.raises(ModelNotFoundError, match="never unpickles") as err:
        load_model(str(folder), device="cpu")
    assert "weights_only" not in str(err.value) and not (tmp_path / "never-made-by-memrl").exists()


def test_a_teacher_model_is_named_by_its_setting(monkeypatch):
    import torch

    from memrl.config import load_config
    from memrl.train.teacher import hf_teacher

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(None, ["teacher.model=tinyy"])
    with pytest.raises(ModelNotFoundError, match=r"^teacher.model 'tinyy' is not a local folder or an alias"):
        hf_teacher(cfg, load_tokenizer("tiny"), torch.device("cpu"))
