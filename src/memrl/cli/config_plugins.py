"""``memrl config plugins``: every plug-in name a config may use, built in or declared by an installed package."""

from __future__ import annotations

import json
from typing import Any

import typer

from memrl.installed_plugins import GROUPS, declared


def registries() -> list[Any]:
    """One registry per plug-in kind, in the order a config reads them."""
    from memrl.config.registry import (ADV_ESTIMATORS, ENGINES, KL_ESTIMATORS, LOSS_AGGREGATIONS, OFF_POLICY,
                                       POLICY_LOSSES, TEACHERS)
    from memrl.plugins import DOMAINS, REWARDS, WORKFLOWS

    return [WORKFLOWS, REWARDS, DOMAINS, ADV_ESTIMATORS, POLICY_LOSSES, LOSS_AGGREGATIONS, KL_ESTIMATORS,
            OFF_POLICY, ENGINES, TEACHERS]


def plugin_rows() -> list[dict[str, Any]]:
    """Per kind: its entry-point group, the built-in names and each installed declaration (name, path, package)."""
    rows = []
    for registry in registries():
        group = GROUPS[registry.kind]
        builtins = list(registry.names)
        installed = [{"name": name, "path": d.path, "package": d.dist,
                      "note": _note(name, builtins, entries)}
                     for name, entries in declared(group).items() for d in entries]
        rows.append({"kind": registry.kind, "group": group, "builtin": builtins, "installed": installed})
    return rows


def _note(name: str, builtins: list[str], entries: tuple[Any, ...]) -> str:
    """Why an installed name will not load as declared ('' when it will)."""
    if name in builtins:
        return "shadowed by the built-in of the same name"
    if len(entries) > 1:
        return "declared by more than one package: use an import path"
    return ""


def plugins(fmt: str = typer.Option("text", "--format", "-f", help="text | json.")) -> None:
    """List the plug-in names a config may use: memrl's built-ins and installed packages' entry points.

    A package declares its plug-ins in its pyproject.toml, e.g.
    [project.entry-points."memrl.workflows"] countdown = "my_pkg.agents:Countdown";
    once installed, workflow.name=countdown works without an import path.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"--format {fmt!r}: choose text, json")
    rows = plugin_rows()
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    for row in rows:
        typer.echo(f"{row['kind']} [entry points: {row['group']}]")
        typer.echo(f"  built in: {', '.join(row['builtin'])}")
        for item in row["installed"]:
            note = f"  ({item['note']})" if item["note"] else ""
            typer.echo(f"  {item['name']} = {item['path']}  from {item['package']}{note}")
