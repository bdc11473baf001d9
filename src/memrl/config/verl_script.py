"""The ``key=value`` words of a verl launch script, with the script's own variables substituted.

Split from :mod:`memrl.config.from_verl` (which maps them onto memrl's settings): reading a shell script
is a job of its own. Environment variables are never read, so nothing secret ends up in a printed config.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

VAR = re.compile(r"\$(?:\{(?P<braced>\w+)(?::-(?P<default>[^}]*))?\}|(?P<plain>[A-Za-z_]\w*|\d))")


def overrides_of(script: str) -> tuple[dict[str, str], list[str]]:
    """The ``key=value`` words of a shell script's commands (dotted keys; ``+key`` as ``key``), with the
    script's ``NAME=value`` assignments substituted into ``$NAME``/``${NAME}``; and the variables left unresolved.
    A quoted value may span lines, and the overrides a script gathers in a variable (``ACTOR="actor.x=1
    actor.y=2"``, expanded in the command as ``$ACTOR``) count as the script's."""
    names: dict[str, str] = {}
    found: dict[str, str] = {}
    unresolved: list[str] = []
    for line in _logical_lines(script):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for word in words:
            key, eq, value = word.partition("=")
            if not eq:
                continue
            if re.fullmatch(r"[A-Za-z_]\w*", key):  # a shell variable (NAME=value, export NAME=value)
                names[key] = _substitute(value, names, unresolved)
                _gather(names[key], found)
                continue
            key = key.lstrip("+~")
            if "." in key:
                found[key] = _substitute(value, names, unresolved)
    return found, sorted(set(unresolved))


def _logical_lines(script: str) -> list[str]:
    """The script's lines, continuations joined and a double-quoted value that spans lines kept whole;
    comment-only lines dropped. A quote never closed leaves its lines as they are."""
    lines: list[str] = []
    pending: list[str] = []
    for raw in script.replace("\\\n", " ").splitlines():
        line = raw if pending else raw.split(" #", 1)[0].strip()
        if not pending and (not line or line.startswith("#")):
            continue
        pending.append(line)
        joined = " ".join(pending)
        if joined.replace('\\"', "").count('"') % 2 == 0:
            lines.append(joined)
            pending = []
    return lines + [p.split(" #", 1)[0].strip() for p in pending]


def _gather(value: str, found: dict[str, str]) -> None:
    """The dotted ``key=value`` words inside a variable's value (a group of overrides the command expands)."""
    try:
        words = shlex.split(value)
    except ValueError:
        return
    for word in words:
        key, eq, val = word.partition("=")
        key = key.lstrip("+~")
        if eq and "." in key and re.fullmatch(r"[\w.]+", key):
            found[key] = val


def _substitute(value: str, names: dict[str, str], unresolved: list[str]) -> str:
    """``$NAME``, ``${NAME}`` and ``${NAME:-default}`` replaced by the script's own assignments."""
    def one(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        if name in names:
            return names[name]
        if m.group("default") is not None:
            return m.group("default")
        unresolved.append(name)
        return m.group(0)
    return VAR.sub(one, value)


def scalar(text: str) -> Any:
    """A Hydra value as Python: true/false, null, numbers, else the string."""
    low = text.strip().strip("'\"")
    if low.lower() in ("true", "false"):
        return low.lower() == "true"
    if low.lower() in ("null", "none", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(low)
        except ValueError:
            pass
    return low


# verl's config groups of the actor, its rollout and its model, as its flags spell them
A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
M = "actor_rollout_ref.model."


@dataclass
class Translation:
    """memrl settings (dotted key -> (value, where it came from)) and the verl flags left out, with why."""

    settings: dict[str, tuple[Any, str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def set(self, key: str, value: Any, source: str) -> None:
        self.settings[key] = (value, source)
