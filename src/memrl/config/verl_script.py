"""The ``key=value`` words of a verl launch script, with the script's own variables substituted.

Split from :mod:`memrl.config.from_verl` (which maps them onto memrl's settings): reading a shell script
is a job of its own. Environment variables are never read, so nothing secret ends up in a printed config.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

VAR = re.compile(r"\$(?:\{(?P<braced>\w+)(?::-(?P<default>[^}]*))?\}|(?P<plain>[A-Za-z_]\w*|\d))")


def overrides_of(script: str) -> tuple[dict[str, str], list[str]]:
    """The ``key=value`` words of a shell script's commands (dotted keys; ``+key`` as ``key``), with the
    script's ``NAME=value`` assignments substituted into ``$NAME``/``${NAME}``; and the variables left unresolved."""
    text = script.replace("\\\n", " ")
    names: dict[str, str] = {}
    found: dict[str, str] = {}
    unresolved: list[str] = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
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
                continue
            key = key.lstrip("+~")
            if "." in key:
                found[key] = _substitute(value, names, unresolved)
    return found, sorted(set(unresolved))


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
