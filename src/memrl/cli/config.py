"""``memrl config ...``: inspect the resolved configuration and the schema it is checked against."""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Collection
from typing import Any, Optional

import typer
import yaml

from memrl.cli.common import resolve_config
from memrl.cli.config_plugins import plugins
from memrl.cli.errors import user_errors
from memrl.config import MemRLConfig
from memrl.config.describe import FieldRow, field_rows

app = typer.Typer(help="Inspect configuration (YAML + dotted overrides such as trainer.lr=1e-6).",
                  no_args_is_help=True)

FORMATS = ("text", "json", "markdown")


@app.command("show")
@user_errors
def show(
    config: Optional[Path] = typer.Argument(None, help="YAML config file (optional)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Overrides key=value, e.g. trainer.lr=1e-6 "
                                                    "data.docs=[50,100]."),
) -> None:
    """Print the resolved config: defaults, then the file, then the overrides.

    Every value the run will use, workflow options included (defaults filled in).
    A lone KEY=VALUE in the CONFIG position is treated as an override.
    """
    typer.echo(yaml.safe_dump(resolved_tree(resolve_config(config, overrides, {})), sort_keys=False), nl=False)


def resolved_tree(cfg: MemRLConfig) -> dict[str, Any]:
    """The config as plain data, each section through its ``resolved()`` where it has one (workflow options)."""
    tree = cfg.model_dump(mode="json")
    for name in tree:
        resolved = getattr(getattr(cfg, name), "resolved", None)
        if callable(resolved):
            tree[name] = resolved()
    return tree


@app.command("schema")
@user_errors
def schema(
    fmt: str = typer.Option("text", "--format", "-f", help="text | json | markdown."),
    workflows: Optional[list[str]] = typer.Option(None, "--workflow", "-w", help="List the options of this "
                                                  "workflow (a name or 'package.module:Class'; repeatable); "
                                                  "default: every registered workflow."),
) -> None:
    """Print every config field: dotted key, type, default, bounds, choices and description.

    Names checked against a registry (algorithm.adv_estimator, engine.kind, ...) list what is
    registered; workflow.options.* rows come from each workflow's Options model.
    """
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: choose {', '.join(FORMATS)}")
    rows = schema_rows(workflows)
    if fmt == "json":
        typer.echo(json.dumps([r.as_dict() for r in rows], indent=1))
    else:
        typer.echo("\n".join(markdown_lines(rows) if fmt == "markdown" else text_lines(rows)))


def schema_rows(workflows: list[str] | None = None) -> list[FieldRow]:
    """Every config field; ``workflow.options`` expanded into the options of ``workflows`` (default: all)."""
    from memrl.plugins import WORKFLOWS
    from memrl.workflows.registry import registered, workflow_class

    rows: list[FieldRow] = []
    for row in field_rows(MemRLConfig):
        if row.key != "workflow.options":
            rows.append(row)
            continue
        for name in workflows or WORKFLOWS.names:
            rows += field_rows(workflow_class(registered(WORKFLOWS.validate(name))).Options, row.key, name)
    return rows


def _summary(row: FieldRow) -> str:
    """Description, bounds, and for a workflow option the workflow that declares it."""
    parts = [row.description] if row.description else []
    if row.bounds:
        parts.append(f"({row.bounds})")
    if row.workflow:
        parts.insert(0, f"[workflow {row.workflow}]")
    return " ".join(parts)


def text_lines(rows: list[FieldRow]) -> list[str]:
    """``key: type = default``, then the description and choices indented under it."""
    lines = []
    for row in rows:
        lines.append(f"{row.key}: {row.type} = {json.dumps(row.default)}")
        if _summary(row):
            lines.append(f"    {_summary(row)}")
        lines += [f"      {name}" + (f": {doc}" if doc else "") for name, doc in row.choices.items()]
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def markdown_lines(rows: list[FieldRow]) -> list[str]:
    """One table per top-level section (and per workflow's options)."""
    lines: list[str] = []
    table = None
    for row in rows:
        section = row.key.split(".")[0] + (f".options ({row.workflow})" if row.workflow else "")
        if section != table:
            table = section
            lines += ([""] if lines else []) + [f"## `{section}`", "", "| key | type | default | description |",
                                                "|---|---|---|---|"]
        desc = _summary(row)
        if row.choices:
            desc += " Choices: " + "; ".join(f"`{n}`" + (f" ({d.rstrip('.')})" if d else "")
                                             for n, d in row.choices.items()) + "."
        lines.append(f"| `{row.key}` | {_cell(row.type)} | `{_cell(json.dumps(row.default))}` | {_cell(desc)} |")
    return lines


@app.command("from-verl")
@user_errors
def from_verl(
    script: str = typer.Argument(..., help="A verl launch script (python -m verl.trainer.main_ppo key=value ...), "
                                 "or - for standard input."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the memrl YAML here (default: standard output)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
) -> None:
    """Translate a verl script's Hydra overrides into a memrl config, verl 0.9's defaults filling the gaps.

    Each value is commented with the verl flag it came from ("verl's default" where the script left it out);
    the flags with no memrl setting are listed on standard error with the reason (GPU plumbing memrl sizes
    itself, a task setting that belongs to a workflow, no counterpart). The task itself (workflow, reward,
    data layout) is memrl's: add workflow.* to the result. Example:
    memrl config from-verl run_qwen3_8b_grpo.sh --out configs/qwen3_grpo.yaml
    """
    import sys

    from memrl.config.from_verl import VERL_ONLY_GROUPS, overrides_of, render_yaml, translate

    text = sys.stdin.read() if script == "-" else _read_script(Path(script))
    flags, unresolved = overrides_of(text)
    if not any(k.split(".", 1)[0] in VERL_ONLY_GROUPS for k in flags):
        raise ValueError(f"{script}: not a verl launch script (no {'/'.join(VERL_ONLY_GROUPS)}.* override among "
                         f"its {len(flags)} key.name=value words)")
    result = translate(flags)
    rendered = render_yaml(result)
    _check_translation(rendered)
    _write(rendered, out, force, script)
    _report(flags.keys(), result.skipped, unresolved, out)


@app.command("from-trl")
@user_errors
def from_trl(
    source: str = typer.Argument(..., help="A TRL GRPO config file (YAML of GRPOConfig fields, what trl grpo --config "
                                 "reads), a launch command / script (--name value words), a Python script whose "
                                 "GRPOConfig(...) keywords are literals (read, not run), or - for standard input."),
    processes: Optional[int] = typer.Option(None, "--processes", min=1, help="Processes the TRL run trains on (its "
                                            "batch sizes are per process); default: the launcher's --num_processes, "
                                            "else its accelerate --config_file's num_processes, else 1."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the memrl YAML here (default: standard output)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
) -> None:
    """Translate a TRL GRPO run's settings into a memrl config, TRL's GRPOConfig defaults filling the gaps.

    TRL's defaults are not memrl's (no dual clip, 1e-4 on the group std, batch sizes per process, steps counted
    in optimizer steps): every setting TRL's run uses is written, commented with the field it came from ("TRL's
    default" where the run left it out); the fields with no memrl setting are listed on standard error with the
    reason. The task (dataset, reward functions, budgets) is memrl's: add workflow.* to the result. Example:
    memrl config from-trl grpo.yaml --processes 8 --out configs/from_trl.yaml
    """
    import sys

    from memrl.config.from_trl import HEADER, translate_trl
    from memrl.config.from_verl import render_yaml
    from memrl.config.trl_args import trl_arguments

    text = sys.stdin.read() if source == "-" else _read_script(Path(source), "a TRL config file or launch command")
    fields, launched = trl_arguments(text, None if source == "-" else Path(source).resolve().parent)
    if not fields:
        raise ValueError(f"{source}: no TRL settings found (neither a YAML mapping nor --name value words)")
    result = translate_trl(fields, processes or launched)
    rendered = render_yaml(result, HEADER)
    _check_translation(rendered)
    _write(rendered, out, force, source)
    _report(fields.keys(), result.skipped, [], out, source="TRL")


def _write(rendered: str, out: Optional[Path], force: bool, source: str) -> None:
    """The translation to ``out`` (atomically, never over the file read, nor over another without --force), else
    to standard output."""
    if out is None:
        typer.echo(rendered, nl=False)
        return
    if source != "-" and out.resolve() == Path(source).resolve():
        raise ValueError(f"--out {out} is the script being translated; choose another file")
    if out.exists() and not force:
        raise ValueError(f"{out} exists: pass --force to overwrite it")
    from memrl.io.atomic import atomic_write

    with atomic_write(out) as fh:
        fh.write(rendered)


def _read_script(path: Path, what: str = "a verl launch script") -> str:
    if not path.is_file():
        raise ValueError(f"{path}: no such file (give {what}, or - to read standard input)")
    return path.read_text(encoding="utf-8", errors="replace")


def _check_translation(rendered: str) -> None:
    """The translation must load as a memrl config; a failure is memrl's bug, said in one line."""
    import tempfile

    from memrl.config import ConfigError, load_config

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(rendered)
    try:
        load_config(Path(fh.name), [])
    except ConfigError as err:
        raise ValueError(f"the translated config does not load ({err}); please report it with the script") from None
    finally:
        Path(fh.name).unlink()


def _report(flags: Collection[str], skipped: dict[str, str], unresolved: list[str], out: Optional[Path],
            source: str = "verl") -> None:
    """On standard error: how many of the script's flags were translated, then those left out grouped by why,
    and what ``source``'s defaults would do that memrl does not (a default, not a flag of the script)."""
    from rich.console import Console

    err = Console(stderr=True, width=120, highlight=False)
    where = f" into {out}" if out else ""
    left = [k for k in skipped if k in flags]
    noun = "flags" if source == "verl" else "settings"
    err.print(f"translated {len(flags) - len(left)} of {len(flags)} {source} {noun}{where}; {len(left)} left out:")
    by_reason: dict[str, list[str]] = {}
    for key, why in skipped.items():
        noted = key in flags or key.endswith("default)") or key.startswith("(")  # a field, or a note
        shown = key if noted else f"{key} ({source}'s default)"
        by_reason.setdefault(why, []).append(shown)
    for why, keys in sorted(by_reason.items(), key=lambda kv: len(kv[1])):
        err.print(f"- {why} ({len(keys)}): " + ", ".join(keys), soft_wrap=False)
    if unresolved:
        err.print(f"not set in the script, left as written: {', '.join('$' + v for v in unresolved)}")


app.command("plugins")(user_errors(plugins))
