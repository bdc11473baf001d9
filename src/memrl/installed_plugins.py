"""Plug-ins that installed packages declare as entry points, named in a config like built-ins.

A package that ships a workflow, reward, domain or algorithm piece declares it once in its own
``pyproject.toml`` (the way pytest and flake8 find their plug-ins)::

    [project.entry-points."memrl.workflows"]
    countdown = "my_pkg.agents:Countdown"

and, once installed, ``workflow.name=countdown`` works with no import path. The group of each kind
is :data:`GROUPS`. A built-in name always wins over an installed one of the same name; two installed
packages declaring one name differently make that name refuse to load (an import path still works).
Entry points are read once per process, without importing the packages: a plug-in's module is
imported only when its name is used.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import metadata

# The entry-point group of each plug-in kind (Registry/NameRegistry kind -> group).
GROUPS = {
    "workflow": "memrl.workflows",
    "reward": "memrl.rewards",
    "domain": "memrl.domains",
    "advantage estimator": "memrl.adv_estimators",
    "loss_agg_mode": "memrl.loss_aggregations",
    "KL estimator": "memrl.kl_estimators",
    "off_policy kind": "memrl.off_policy",
    "policy loss": "memrl.policy_losses",
    "engine kind": "memrl.engines",
    "teacher engine kind": "memrl.teachers",
}


@dataclass(frozen=True)
class Declared:
    """One entry point: the import path it names and the distribution that declares it."""

    path: str
    dist: str


@functools.cache
def declared(group: str) -> dict[str, tuple[Declared, ...]]:
    """Every name of entry-point group ``group`` with its distinct declarations (more than one: a conflict).

    Cached: entry points are read from every installed distribution's metadata, which takes tens of
    milliseconds; ``declared.cache_clear()`` re-reads them (a package installed while Python runs).
    """
    found: dict[str, list[Declared]] = {}
    for ep in metadata.entry_points(group=group):
        path = f"{ep.module}:{ep.attr}" if ep.attr else ep.module
        dist = ep.dist.name if ep.dist is not None else "an unnamed distribution"
        entries = found.setdefault(ep.name, [])
        if all(d.path != path for d in entries):  # one package seen twice on sys.path is not a conflict
            entries.append(Declared(path, dist))
    return {name: tuple(entries) for name, entries in sorted(found.items())}


def installed_names(kind: str) -> tuple[str, ...]:
    """The names installed packages declare for plug-in kind ``kind``."""
    group = GROUPS.get(kind)
    return tuple(declared(group)) if group else ()


def with_installed(kind: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` (a registry's built-ins), then the installed names of ``kind`` they do not already hold: the
    choices an unknown-name error lists."""
    return names + tuple(n for n in installed_names(kind) if n not in names)


def installed_target(kind: str, name: str) -> str | None:
    """The import path an installed package declares as ``name`` for ``kind`` (None: none declares it), or a
    one-line ValueError when two packages declare it differently or the entry point names no attribute."""
    group = GROUPS.get(kind)
    entries = declared(group).get(name) if group else None
    if not entries:
        return None
    if len(entries) > 1:
        who = "; ".join(f"{d.dist} ({d.path})" for d in entries)
        raise ValueError(f"{kind} {name!r} is declared by more than one installed package: {who}; "
                         "name the one you mean by its import path")
    path = entries[0].path
    if ":" not in path:
        raise ValueError(f"{kind} {name!r}: the entry point of {entries[0].dist} names module {path} but no "
                         f"object; write it as '{path}:name' in its [project.entry-points.\"{group}\"]")
    return path
