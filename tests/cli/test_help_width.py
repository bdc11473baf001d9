"""``--help`` at 80 columns (a default terminal, or any pipe) keeps every word: typer's tables would cut a long
key or flag (``sampling.temperatur…``) where it no longer fits."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app

COMMANDS = [[], ["eval"], ["train"], ["demo"], ["data", "synth"], ["data", "ruler"], ["tinker"], ["serve"],
            ["config", "from-verl"], ["sft"], ["rft"], ["view"], ["plot"], ["export"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "memrl")
def test_help_at_80_columns_cuts_no_word(cmd):
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    cut = [line for line in r.output.splitlines() if "…" in line]
    assert not cut, cut


def _description(output: str) -> list[str]:
    """The prose lines between the usage line and the first option panel, without the box margin (an example
    command, indented beyond the margin, is kept as written: it shows as an empty line here)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    return ["" if line.startswith("   ") else line.strip() for line in lines[start:end]]


@pytest.mark.parametrize("cmd", [["tinker"], ["demo"], ["data", "synth"], ["train"]], ids=" ".join)
def test_description_wraps_to_the_terminal_not_the_source(cmd):
    """Docstrings are wrapped at 110 columns in the source; at 80 no description line may end where the next
    line's first word would still have fitted (typer keeps the source's line breaks unless memrl reflows
    them, which showed ``memrl tinker --help`` as alternating full and half lines)."""
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    text = _description(r.output)
    assert sum(bool(line) for line in text) >= 3, text
    early = [(a, b) for a, b in zip(text, text[1:]) if a and b and len(a) + 1 + len(b.split()[0]) <= 76]
    assert not early, early


def test_reflow_joins_prose_and_keeps_items_and_examples():
    from memrl.cli.help_text import reflow

    doc = """First line
        of the summary.

        Prose wrapped
        at the source.
        - an item
          continued
        - another

            memrl train x.yaml
            memrl view runs/x
        """
    assert reflow(doc) == ("First line of the summary.\n\nProse wrapped at the source.\n- an item continued\n"
                           "- another\n\n    memrl train x.yaml\n    memrl view runs/x")
    assert reflow("\b\nkeep\nthese") == "\b\nkeep\nthese"


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "memrl")
def test_a_flag_shows_no_value_type(cmd):
    """typer 0.29 shows ``--access-log <bool>``, which reads as a flag taking a value (``--access-log true`` then
    fails): a flag's row shows no type; an option that takes a value still shows its own."""
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.output and "--help " in r.output
    if cmd == ["tinker"]:
        assert "<int>" in r.output  # --port takes a value: its type stays
