"""``memrl config ...``: inspect the resolved configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from memrl.cli.errors import user_errors
from memrl.cli.common import resolve_config
from memrl.config import dump_config

app = typer.Typer(help="Inspect configuration (YAML + dotted overrides such as trainer.lr=1e-6).",
                  no_args_is_help=True)


@app.command("show")
@user_errors
def show(
    config: Optional[Path] = typer.Argument(None, help="YAML config file (optional)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Overrides key=value, e.g. trainer.lr=1e-6 "
                                                    "data.docs=[50,100]."),
) -> None:
    """Print the resolved config: defaults, then the file, then the overrides.

    A lone KEY=VALUE in the CONFIG position is treated as an override.
    """
    typer.echo(dump_config(resolve_config(config, overrides, {})), nl=False)
