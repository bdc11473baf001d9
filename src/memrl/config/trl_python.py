"""The TRL settings of a Python training script, read without running it (part of ``memrl config from-trl``).

Why apart: a script configures TRL in three calls, ``GRPOConfig(...)`` (the trainer), ``ModelConfig(...)`` or
``LoraConfig(...)`` (the adapter, passed as ``GRPOTrainer(peft_config=...)``) and ``GRPOTrainer(model="...")``;
missing the adapter would translate a LoRA recipe's learning rate into a full fine-tune's. Only literals are read
(``torch.bfloat16`` as its name); anything else is kept as its source text, listed as unreadable, never guessed.
"""

from __future__ import annotations

import ast
from typing import Any

CONFIG_CALLS = ("GRPOConfig", "ModelConfig", "ScriptArguments", "GRPOScriptArguments")
LORA = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
        "target_modules": "lora_target_modules", "modules_to_save": "lora_modules_to_save", "use_dora": "use_dora"}


def python_config(text: str) -> dict[str, Any] | None:
    """The TRL fields a script's calls give (None: not Python, or no such call). A script that mentions
    ``GRPOConfig(`` but does not parse, or that reads its settings from its command line (``TrlParser``), is a
    ValueError saying so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as err:
        if "GRPOConfig(" in text:
            line = getattr(err, "lineno", None)
            raise ValueError(f"a Python script that does not parse (line {line}: {getattr(err, 'msg', err)})") from None
        return None
    fields: dict[str, Any] = {}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    for node in calls:
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        for kw in (k for k in node.keywords if k.arg is not None):
            if name in CONFIG_CALLS:
                fields[kw.arg] = literal(kw.value)
            elif name == "LoraConfig" and kw.arg in LORA:
                fields[LORA[kw.arg]] = literal(kw.value)
                fields["use_peft"] = True
            elif name == "GRPOTrainer" and kw.arg == "model" and isinstance(kw.value, ast.Constant):
                fields.setdefault("model_name_or_path", kw.value.value)
    if not fields:
        if "TrlParser" in text:
            raise ValueError("this script reads its settings from its command line (TrlParser): give its launch "
                             "command, or the --config YAML it reads")
        return None
    return fields


def literal(node: ast.AST) -> Any:
    """A keyword's value: a literal, a dict or list of them, ``torch.X`` as ``"X"``; else ``"$<source>"``."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Dict):
        return {literal(k): literal(v) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [literal(e) for e in node.elts]
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "torch":
        return node.attr
    return f"${ast.unparse(node)}"
