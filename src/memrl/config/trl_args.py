"""The settings of a TRL GRPO run, read from its config file or its launch command (``memrl config from-trl``).

Split from :mod:`memrl.config.from_trl` (which maps them onto memrl's): TRL runs are configured two ways, a YAML
file of ``GRPOConfig`` / ``ModelConfig`` fields (``trl grpo --config grpo.yaml``) or ``--name value`` words on a
command (``accelerate launch --num_processes 8 train.py --learning_rate 1e-6 --use_vllm``), and both end here as
one mapping of field names to Python values. A command's ``--config FILE`` is read too (its flags override the
file's, as TRL's parser does); the script's own ``NAME=value`` assignments are substituted; environment variables
are never read.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from memrl.config.trl_python import python_config
from memrl.config.verl_script import _substitute, scalar

# fields that take several values on a command line (``--lora_target_modules q_proj v_proj``)
LIST_FIELDS = ("lora_target_modules", "reward_weights", "report_to", "reward_funcs", "lora_modules_to_save")
IDENTIFIER = re.compile(r"[A-Za-z_][\w.-]*")


def trl_arguments(text: str, base: Path | None = None) -> tuple[dict[str, Any], int | None]:
    """The run's fields (dashes as underscores) and, from a launcher's flags, how many processes it runs (None:
    not said). A YAML mapping whose keys are all names is a config file; anything else a shell command
    (``base``: the folder a command's ``--config FILE`` is relative to, besides the current one)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and data and all(IDENTIFIER.fullmatch(str(k)) for k in data):
        fields = {str(k).replace("-", "_"): v for k, v in data.items()}
        processes = fields.pop("num_processes", None)
        return fields, int(processes) if isinstance(processes, int) else \
            accelerate_processes(fields.get("accelerate_config"), base)
    in_python = python_config(text)
    if in_python is not None:
        return in_python, None
    return command_arguments(text, base)


def _with_config_file(fields: dict[str, Any], base: Path | None) -> dict[str, Any]:
    """A command's ``--config FILE`` read under its flags (TRL's parser gives the flags precedence); a ValueError
    naming the file when it is not next to the command or in the current folder, or is not a YAML mapping."""
    import yaml

    name = fields.get("config")
    if not isinstance(name, str):
        return fields
    found = [f / name for f in (Path.cwd(), base) if f is not None and (f / name).is_file()]
    if not found:
        raise ValueError(f"--config {name}: no such file next to the command or in the current folder; translate "
                         f"{name} itself, or run from its folder")
    try:
        data = yaml.safe_load(found[0].read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"--config {found[0]}: not a YAML file ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {found[0]}: not a mapping of TRL settings")
    merged = {str(k).replace("-", "_"): v for k, v in data.items()}
    merged.update({k: v for k, v in fields.items() if k != "config"})
    return merged


def command_arguments(text: str, base: Path | None = None) -> tuple[dict[str, Any], int | None]:
    """``--name value`` / ``--name=value`` / ``--flag`` / ``--no_flag`` words of a shell command, values as Python
    scalars; a list field keeps every value up to the next flag. The launcher's process count (accelerate's
    ``--num_processes``, torchrun's ``--nnodes`` x ``--nproc_per_node``, deepspeed's ``--num_gpus``) is returned
    apart."""
    names: dict[str, str] = {}
    words = [_substitute(w, names, []) for w in _words(text, names)]
    fields: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--") or len(word) == 2:
            continue
        name, eq, value = word[2:].partition("=")
        name = name.replace("-", "_")
        values = [value] if eq else []
        while not eq and i < len(words) and not _flag(words[i]):
            values.append(words[i])
            i += 1
            if name not in LIST_FIELDS:
                break
        if name in LIST_FIELDS:
            fields[name] = [scalar(v) for v in values]
        elif not values and name.startswith("no_"):  # HfArgumentParser's complement of a flag that defaults to True
            fields[name[3:]] = False
        else:
            fields[name] = scalar(values[0]) if values else True
    fields = _with_config_file(fields, base)  # before the process count: the file may hold num_processes
    processes = _processes(fields)  # the launcher's flags override its config file's, as accelerate's parser does
    launcher_file = fields.get("config_file", fields.get("accelerate_config"))
    return fields, processes if processes is not None else accelerate_processes(launcher_file, base)


def accelerate_processes(name: Any, base: Path | None) -> int | None:
    """How many processes an accelerate config file launches (``accelerate launch --config_file F``, TRL's
    ``--accelerate_config F`` or a config name TRL ships, read from an installed TRL): its ``num_processes``, or 1
    when its ``distributed_type`` is ``NO`` (accelerate then runs one process whatever the count says). None when
    the file cannot be found or read: the caller says the count was assumed."""
    import yaml

    if not isinstance(name, str) or not name:
        return None
    name = str(Path(name).expanduser())  # the shell expands ~ in a launch command
    found = [f / name for f in (Path.cwd(), base) if f is not None and (f / name).is_file()]
    path = found[0] if found else _shipped_accelerate_config(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("distributed_type")
    if kind is False or str(kind).upper() == "NO":  # YAML reads an unquoted NO as False
        return 1
    count = data.get("num_processes")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None


def _shipped_accelerate_config(name: str) -> Path | None:
    """TRL's own config of that name (``zero3`` -> trl/accelerate_configs/zero3.yaml), if TRL is installed."""
    try:
        import importlib.resources as resources

        candidate = resources.files("trl.accelerate_configs").joinpath(f"{name}.yaml")
    except (ImportError, ModuleNotFoundError, TypeError):
        return None
    return Path(str(candidate)) if candidate.is_file() else None


def _words(text: str, names: dict[str, str]) -> list[str]:
    """The shell words of ``text`` (continuations joined, CRLF or not; comments and quotes as the shell reads
    them); ``NAME=value`` assignments go to ``names`` (substituted into later words)."""
    joined = text.replace("\r\n", "\n").replace("\\\n", " ")
    try:
        words = shlex.split(joined, comments=True)
    except ValueError:  # an unclosed quote: line by line, keeping what reads
        words = []
        for line in joined.splitlines():
            try:
                words += shlex.split(line, comments=True)
            except ValueError:
                continue
    kept: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        after_flag = bool(kept) and kept[-1].startswith("--") and "=" not in kept[-1]  # --run_name a=b: a value
        if eq and re.fullmatch(r"[A-Za-z_]\w*", key) and not after_flag:  # a shell variable (NAME=value)
            names[key] = _substitute(value, names, [])
        else:
            kept.append(word)
    return kept


def _processes(fields: dict[str, Any]) -> int | None:
    """The process count the launcher's flags give (they are removed from ``fields``), or None: accelerate's
    ``--num_processes`` is the total; torchrun's ``--nproc_per_node`` and deepspeed's ``--num_gpus`` count one
    machine, times ``--nnodes`` / ``--num_nodes``."""
    total = fields.pop("num_processes", None)
    per_node = fields.pop("nproc_per_node", None)
    gpus = fields.pop("num_gpus", None)
    nodes = fields.pop("nnodes", None)
    machines = fields.pop("num_nodes", None)
    if isinstance(total, int):
        return total
    if isinstance(per_node, int):
        return per_node * (nodes if isinstance(nodes, int) else 1)
    if isinstance(gpus, int):
        return gpus * (machines if isinstance(machines, int) else 1)
    return None


def _flag(word: str) -> bool:
    """A word that starts another option (``--x``, ``-x``), not a negative number (``--max_steps -1``)."""
    return word.startswith("-") and not isinstance(scalar(word), (int, float))
