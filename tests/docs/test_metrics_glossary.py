"""docs/reference/metrics.md names every column of the console line and every key a run writes to metrics.jsonl."""

from __future__ import annotations

import json

from memrl.train.tracking import CONSOLE_KEYS
from tests.docs.blocks import DOCS

PAGE = DOCS / "reference" / "metrics.md"


def test_every_console_column_is_explained() -> None:
    text = PAGE.read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}
    for shown, key, _ in CONSOLE_KEYS:
        assert f"`{shown}`" in rows and f"`{key}`" in rows[f"`{shown}`"], f"console column {shown} ({key}) missing"


def test_every_key_of_a_run_is_explained(tmp_path) -> None:
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    cfg = config(tmp_path, trainer__total_steps=1, trainer__eval_every=1)
    cfg.data.eval_file = cfg.data.train_file
    cfg.trainer.eval.samples = 2
    Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"))).run()
    keys = {k for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)}
    text = PAGE.read_text(encoding="utf-8")
    held_out = {k for k in keys if k.startswith("eval/") and k != "eval/accuracy"}  # `eval/<name>`: each <name>
    assert held_out and "`eval/<name>`" in text
    missing = sorted(k for k in (keys - held_out) | {k[5:] for k in held_out} if f"`{k}`" not in text)
    assert len(keys) > 30 and not missing, f"metrics.jsonl keys not in docs/reference/metrics.md: {missing}"
