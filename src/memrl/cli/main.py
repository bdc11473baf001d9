"""The ``memrl`` command."""

from __future__ import annotations

from typing import Any

import typer

from memrl import __version__
from memrl.cli import config as config_cli
from memrl.cli import data as data_cli
from memrl.cli import demo as demo_cli
from memrl.cli import eval as eval_cli
from memrl.cli import serve as serve_cli
from memrl.cli import sft as sft_cli
from memrl.cli import tinker as tinker_cli
from memrl.cli import train as train_cli
from memrl.cli import view as view_cli
from memrl.cli.help_text import reflow_app



def _fold_long_words() -> None:
    """typer's option tables cut a word longer than its column with an ellipsis (``sampling.temperatur…`` in
    an 80-column terminal or a pipe), losing the key or flag the text names; fold it onto the next line."""
    from rich.columns import Columns
    from rich.text import Text
    from typer import rich_utils

    if getattr(rich_utils, "memrl_folds", False):
        return
    light, helps = getattr(rich_utils, "highlighter", None), getattr(rich_utils, "_get_parameter_help", None)
    if light is None or helps is None:  # another typer: its own layout
        return

    def fold(shown: Any) -> Any:
        if isinstance(shown, Text):
            shown.overflow = "fold"
        elif isinstance(shown, Columns):
            for part in shown.renderables:
                fold(part)
        return shown

    rich_utils.highlighter = lambda text: fold(light(text))  # option names and help text
    negative = getattr(rich_utils, "negative_highlighter", None)
    if negative is not None:  # --no-... flags
        rich_utils.negative_highlighter = lambda text: fold(negative(text))
    rich_utils._get_parameter_help = lambda **kwargs: fold(helps(**kwargs))  # with [default: ...], [env var: ...]
    rich_utils.memrl_folds = True  # type: ignore[attr-defined]


def _no_flag_types() -> None:
    """typer 0.29 shows a type beside every option, ``--access-log <bool>`` (and ``--help <bool>``), which reads as
    a flag taking a value: ``--access-log true`` then fails. A flag shows none, as before."""
    from typer import core

    option = getattr(core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(option, "memrl_flags", False):  # another typer: its own layout
        return

    def without_flags(self: Any, ctx: Any) -> Any:
        return None if getattr(self, "is_flag", False) and not getattr(self, "count", False) else shown(self, ctx)

    option.display_type_rich = without_flags
    option.memrl_flags = True


_fold_long_words()
_no_flag_types()
app = typer.Typer(
    name="memrl",
    help="memrl: reinforcement learning for LLM agents whose episodes span several conversations "
    "(memory agents reading long documents chunk by chunk, tool agents).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_cli.app, name="data")
app.add_typer(config_cli.app, name="config")
app.command("demo")(demo_cli.demo)
app.command("eval")(eval_cli.eval_cmd)
app.command("serve")(serve_cli.serve_cmd)
app.command("train", context_settings={"ignore_unknown_options": True})(train_cli.train_cmd)  # --lr: a hint
app.command("sft")(sft_cli.sft_cmd)
app.command("tinker")(tinker_cli.tinker_cmd)
app.command("rft")(sft_cli.rft_cmd)
app.command("export")(train_cli.export_cmd)
app.command("plot")(train_cli.plot_cmd)
app.command("view")(view_cli.view_cmd)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"memrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """memrl command line."""


reflow_app(app)


def main(argv: list[str] | None = None) -> None:
    """Run the command; a mistake on the command line (unknown flag or command, a value of the wrong type)
    is one line on stderr naming it, exit 2, instead of click's usage text and a boxed panel."""
    import sys

    try:  # typer >= 0.22 carries its own copy of click
        from typer._click import exceptions as click
    except ImportError:
        from click import exceptions as click  # type: ignore[no-redef]

    try:
        code = app(args=argv, standalone_mode=False)
    except click.UsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "memrl"
        if not err.format_message():  # a group called bare: its help is already shown
            sys.exit(err.exit_code)
        typer.echo(f"error: {err.format_message().rstrip('.')}; see {where} --help", err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        typer.echo(f"error: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except typer.Abort:  # click's end for an EOFError (typer makes a Ctrl-C an exit 130 itself): as click says it
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:  # typer.Exit(code) under standalone_mode=False
        sys.exit(code)


if __name__ == "__main__":
    main()
