"""The generated config and CLI references match the code (``make docs-ref`` regenerates them)."""

from __future__ import annotations

import importlib.util
import sys

from tests.docs.blocks import REPO


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_docs_ref", REPO / "scripts" / "gen_docs_ref.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs_ref", module)
    spec.loader.exec_module(module)
    return module


def test_generated_references_are_fresh() -> None:
    gen = load_generator()
    stale = [str(p.relative_to(REPO)) for p in gen.stale()]
    assert not stale, f"{stale} differ from what the code generates: run `make docs-ref` and commit the result"


def test_config_reference_covers_every_field() -> None:
    """Every leaf field of the schema appears with its dotted key, and descriptions are carried over."""
    gen = load_generator()
    text = gen.config_markdown()
    missing = sorted(k for k in gen.config_keys() if f"`{k}`" not in text)
    assert not missing, f"config keys missing from the reference: {missing}"
    assert "Episodes per prompt (the GRPO group)" in text  # algorithm.n's description
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| `")]
    bare = [cells[1].strip() for cells in rows if not cells[4].strip()]
    assert not bare, f"config keys with no description (give their Field a description=): {bare}"


def test_cli_reference_covers_every_command() -> None:
    gen = load_generator()
    text = gen.cli_markdown()
    for command in ("memrl train", "memrl eval", "memrl serve", "memrl view", "memrl sft", "memrl rft",
                    "memrl data synth", "memrl config show", "memrl demo", "memrl export"):
        assert f"`{command}`" in text, f"{command} missing from the CLI reference"
    assert "`--allow-changes`" in text


def test_each_section_once_and_every_workflow_named() -> None:
    """A section's fields after its nested sections stay in its one table; `workflow.name` and `memrl eval
    --workflow` name every registered workflow and the import-path form."""
    import re

    from memrl.plugins import WORKFLOWS

    gen = load_generator()
    text = gen.config_markdown()
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    assert sorted(h for h in set(headings) if headings.count(h) > 1) == []
    name_row = next(line for line in text.splitlines() if line.startswith("| `workflow.name` "))
    eval_row = next(line for line in gen.cli_markdown().splitlines() if line.startswith("| `--workflow`, `-w` "))
    for row in (name_row, eval_row):
        assert all(re.search(rf"\b{n}\b", row) for n in WORKFLOWS.names) and "package.module:" in row, row
