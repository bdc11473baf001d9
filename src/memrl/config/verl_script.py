"""The ``key=value`` words of a verl launch script, with the script's own variables substituted; and the
:class:`Translation` record and its commented YAML, which ``memrl config from-verl`` and ``from-trl`` both write.

Split from :mod:`memrl.config.from_verl` (which maps them onto memrl's settings): reading a shell script
is a job of its own. Environment variables are never read, so nothing secret ends up in a printed config.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field
from typing import Any



def overrides_of(script: str) -> tuple[dict[str, str], list[str]]:
    """The ``key=value`` words of a shell script's commands (dotted keys; ``+key`` as ``key``), with the
    script's ``NAME=value`` assignments substituted into ``$NAME``/``${NAME}``; and the variables left unresolved.
    A quoted value may span lines, and the overrides a script gathers in a variable (``ACTOR="actor.x=1
    actor.y=2"``, expanded in the command as ``$ACTOR``) count as the script's."""
    names: dict[str, str] = {}
    found: dict[str, str] = {}
    unresolved: list[str] = []
    for line in _logical_lines(script):
        line = ARITH.sub(lambda m: _arithmetic(m.group(1), names, unresolved), line)
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
    """``$NAME``, ``${NAME}`` and ``${NAME:-default}`` replaced by the script's own assignments; a default may
    hold variables of its own (``${TRAIN_FILE:-"${DATA_HOME}/train.parquet"}``, as verl's DAPO scripts write)."""
    out: list[str] = []
    i = 0
    while i < len(value):
        m = PLAIN.match(value, i)
        if m:
            out.append(_lookup(m.group(1), None, m.group(0), names, unresolved))
            i = m.end()
        elif value.startswith("${", i) and (end := _closing(value, i + 2)) is not None:
            inner = value[i + 2: end]
            name = re.match(r"\w*", inner).group(0)  # type: ignore[union-attr]
            rest = inner[len(name):]
            default = _substitute(rest[2:], names, unresolved) if rest.startswith(":-") else None
            out.append(_lookup(name, default, value[i: end + 1], names, unresolved) if name else value[i: end + 1])
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")  # $(( ... )), one level of parentheses inside
def _bash_div(a: int, b: int) -> int:
    return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # bash truncates toward zero


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: _bash_div,
        ast.Div: _bash_div, ast.Mod: lambda a, b: a - _bash_div(a, b) * b}


def _arithmetic(expr: str, names: dict[str, str], unresolved: list[str]) -> str:
    """bash's ``$((...))`` over integers and the script's variables (``$((1024 * 4))``, ``$((bsz * 3))``, as
    verl's DAPO scripts size their budgets); an expression it cannot read is kept as one word."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            text = names.get(node.id)
            if text is None or not re.fullmatch(r"-?\d+", text.strip()):
                unresolved.append(node.id)
                raise ValueError(node.id)
            return int(text)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return int(_OPS[type(node.op)](value(node.left), value(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(ast.dump(node))

    try:
        text = re.sub(r"\$\{(\w+)\}", r"\1", expr).replace("$", "")  # ${a} and $a read as a, as bash reads them
        return str(value(ast.parse(text.strip(), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return "$((" + "".join(expr.split()) + "))"


PLAIN = re.compile(r"\$([A-Za-z_]\w*|\d)")


def _closing(text: str, start: int) -> int | None:
    """The index of the ``}`` that closes a ``${`` opened just before ``start`` (nested ones counted)."""
    depth = 1
    for j in range(start, len(text)):
        if text.startswith("${", j):
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return None


def _lookup(name: str, default: str | None, written: str, names: dict[str, str], unresolved: list[str]) -> str:
    """The script's value of ``name``, else its default, else the text as written (and ``name`` unresolved)."""
    if name in names:
        return names[name]
    if default is not None:
        return default
    unresolved.append(name)
    return written


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


VERL_HEADER = "# translated by memrl config from-verl; values marked 'verl's default' are verl 0.9's"


def render_yaml(t: Translation, header: str = VERL_HEADER) -> str:
    """The settings as YAML sections, each value commented with the flag it came from."""
    import yaml

    sections: dict[str, list[str]] = {}
    for key, (value, source) in sorted(t.settings.items()):
        section, _, rest = key.partition(".")
        dumped = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        sections.setdefault(section, []).append(_nested(rest, dumped, source))
    lines = [header]
    for section, rows in sections.items():
        lines.append(f"{section}:")
        lines += _merge(rows)
    return "\n".join(lines) + "\n"


def _nested(rest: str, dumped: str, source: str) -> str:
    return f"{rest}\t{dumped}\t{source}"


def _merge(rows: list[str]) -> list[str]:
    """``a.b<TAB>v<TAB>src`` rows as indented YAML (one level of nesting below the section is enough here)."""
    lines: list[str] = []
    opened: set[str] = set()
    for row in rows:
        path, value, source = row.split("\t")
        parts = path.split(".")
        if len(parts) == 2:
            if parts[0] not in opened:
                lines.append(f"  {parts[0]}:")
                opened.add(parts[0])
            lines.append(f"    {parts[1]}: {value}  # {source}")
        else:
            lines.append(f"  {parts[0]}: {value}  # {source}")
    return lines
