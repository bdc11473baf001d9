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
