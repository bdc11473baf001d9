"""A model name that does not load says why in one line: a near miss of an alias is named, and under
HF_HUB_OFFLINE a hub id is missing from the cache (not "check your internet connection")."""

from __future__ import annotations

import pytest

from memrl.models.resolve import ModelNotFoundError, load_model, load_tokenizer


def test_a_typo_of_an_alias_is_named(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"tokenizer 'tinyy' is not a local folder or an alias .*did you mean "
                                                 r"'tiny'\?"):
        load_tokenizer("tinyy")
    with pytest.raises(ModelNotFoundError, match=r"model 'smolm2-135m-instruct'.*did you mean 'smollm2-135m-instruct'"):
        load_model("smolm2-135m-instruct", device="cpu")


def test_an_uncached_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as err:
        load_tokenizer("memrl-test-org/no-such-model-xyz")
    assert "nor in the local Hugging Face cache, and HF_HUB_OFFLINE=1 forbids downloading it" in str(err.value)
    assert "internet connection" not in str(err.value)
