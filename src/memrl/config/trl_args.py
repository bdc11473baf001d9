"""The settings of a TRL GRPO run, read from its config file or its launch command (``memrl config from-trl``).

Split from :mod:`memrl.config.from_trl` (which maps them onto memrl's): TRL runs are configured two ways, a YAML
file of ``GRPOConfig`` / ``ModelConfig`` fields (``trl grpo --config grpo.yaml``) or ``--name value`` words on a
command (``accelerate launch --num_processes 8 train.py --learning_rate 1e-6 --use_vllm``), and both end here as
one mapping of field names to Python values. Environment variables are never read.
"""

from __future__ import annotations

import shlex
from typing import Any

from memrl.config.verl_script import _logical_lines, scalar

# fields that take several values on a command line (``--lora_target_modules q_proj v_proj``)
LIST_FIELDS = ("lora_target_modules", "reward_weights", "report_to", "reward_funcs")
# accelerate / torchrun flags that say how many processes train (TRL's batch sizes are per process)
PROCESS_FLAGS = ("num_processes", "nproc_per_node")


def trl_arguments(text: str) -> tuple[dict[str, Any], int | None]:
    """The run's fields (dashes as underscores) and, from a launcher's flags, how many processes it runs (None:
    not said). A YAML mapping is a config file; anything else is read as a shell command."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict):
        fields = {str(k).replace("-", "_"): v for k, v in data.items()}
        processes = fields.pop("num_processes", None)
        return fields, int(processes) if isinstance(processes, int) else None
    return command_arguments(text)


def command_arguments(text: str) -> tuple[dict[str, Any], int | None]:
    """``--name value`` / ``--name=value`` / ``--flag`` words of a shell command, values as Python scalars; a list
    field keeps every value up to the next flag. The launcher's process count is returned apart."""
    words: list[str] = []
    for line in _logical_lines(text):
        try:
            words += shlex.split(line, comments=True)
        except ValueError:
            continue
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
        else:
            fields[name] = scalar(values[0]) if values else True
    processes = next((fields.pop(k) for k in PROCESS_FLAGS if k in fields), None)
    return fields, int(processes) if isinstance(processes, int) else None


def _flag(word: str) -> bool:
    """A word that starts another option (``--x``, ``-x``), not a negative number (``--max_steps -1``)."""
    return word.startswith("-") and not isinstance(scalar(word), (int, float))
