"""Models of real published shapes with random weights, built locally (no download) for benchmarks.

The configs are the published ones (hidden size, layers, heads, vocabulary...), so weight
sync, generation and training move the same bytes and run the same kernels as the real
checkpoints; only the values are random. The tokenizer is memrl's small local BPE: token ids
stay below its vocabulary, the embedding table keeps the real model's size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# published configs (config.json of each hub model), trimmed to what shapes the weights
SHAPES: dict[str, dict[str, Any]] = {
    "tiny-5m": {"architecture": "qwen2", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 4096, "rope_theta": 1e6,
                "max_position_embeddings": 8192},
    "smollm2-135m": {"architecture": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                     "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "rope_theta": 1e5,
                     "max_position_embeddings": 8192},
    "qwen2.5-0.5b": {"architecture": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936, "rope_theta": 1e6,
                     "max_position_embeddings": 32768},
    "qwen2.5-1.5b": {"architecture": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "intermediate_size": 8960,
                     "vocab_size": 151936, "rope_theta": 1e6, "max_position_embeddings": 32768},
}


def hf_config(shape: str, dtype: str = "bfloat16") -> Any:
    """The ``transformers`` config of a named shape (tied embeddings, as all four models have)."""
    from transformers import LlamaConfig, Qwen2Config

    spec = dict(SHAPES[shape])
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[spec.pop("architecture")]
    return cls(**spec, tie_word_embeddings=True, torch_dtype=dtype, bos_token_id=None, eos_token_id=2,
               pad_token_id=3)


def random_state(shape: str, dtype: str = "bfloat16", seed: int = 0, scale: float = 0.02) -> dict[str, Any]:
    """A state dict of the shape's parameter names and shapes (as transformers names them), random values."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = hf_config(shape, dtype)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied: the same tensor as the embedding table
        t = torch.randn(p.shape, generator=g, dtype=torch.float32).mul_(scale).to(getattr(torch, dtype))
        out[name] = torch.ones_like(t) if name.endswith("norm.weight") else t
    out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def build_shaped_model(shape: str, out_dir: str | Path, dtype: str = "bfloat16", seed: int = 0) -> Path:
    """Write an HF folder (config, safetensors weights, local tokenizer) of ``shape`` with random weights."""
    from safetensors.torch import save_file

    from memrl.models.tiny import build_hf_tokenizer

    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    state = random_state(shape, dtype, seed)
    del state["lm_head.weight"]
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok = build_hf_tokenizer(vocab_size=512)
    tok.save_pretrained(out)
    cfg = hf_config(shape, dtype)
    cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
    cfg.save_pretrained(out)
    (out / "memrl_shape.json").write_text(json.dumps({"shape": shape, "dtype": dtype, "seed": seed}))
    return out


def param_count(shape: str) -> int:
    """Parameters of ``shape`` (the tied output layer counted once)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(shape))
    return sum(p.numel() for p in model.parameters())
