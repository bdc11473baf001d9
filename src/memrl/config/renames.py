"""Keys that moved into nested sections: old files, overrides and attribute reads keep working.

``env.user_model`` became ``env.user.model``, ``trainer.eval_every`` became ``trainer.eval.every``,
``trainer.max_staleness`` became ``trainer.async.max_staleness`` (and so on, :data:`MOVED`). A
config file or a ``key=value`` override with an old key is read as the new one, with a one-line
notice; code reading ``cfg.trainer.eval_every`` still gets the value (see ``Section.__getattr__``).
"""

from __future__ import annotations

import sys
from typing import Any

# section -> {old key: (nested section, key in it)}
MOVED: dict[str, dict[str, tuple[str, str]]] = {
    "env": {
        **{f"user_{k}": ("user", k) for k in ("model", "engine", "base_url", "served_model", "api_key_env",
                                              "max_tokens", "temperature", "prompt")},
        **{f"nl_judge_{k}": ("judge", k) for k in ("model", "engine", "base_url", "served_model", "max_tokens")},
    },
    "trainer": {
        **{f"eval_{k}": ("eval", k) for k in ("every", "samples", "n", "temperature", "top_p")},
        **{k: ("async", k) for k in ("max_staleness", "partial_rollouts", "partial_chunk_tokens")},
    },
}
# the judge took its key from the user simulator's variable before it had one of its own
ALSO: dict[tuple[str, str], tuple[str, str]] = {("env", "user_api_key_env"): ("judge", "api_key_env")}

_NOTICED: set[str] = set()


def notice(message: str) -> None:
    """One line on stderr, once per process per message."""
    if message not in _NOTICED:
        _NOTICED.add(message)
        print(f"notice: {message}", file=sys.stderr)


def moved_key(section: str, key: str) -> tuple[str, str] | None:
    """(nested section, key) that ``section.key`` moved to, or None."""
    return MOVED.get(section, {}).get(key)


def both_given(old: str, new: str) -> str:
    """The one-line refusal of a setting given under its old and its new name at once: which one was meant
    cannot be known, and quietly taking either trains with a value the user may not have chosen."""
    return f"{old} and {new} are the same setting (old and new name) and both are given: keep only {new}"


def migrate_section(section: str, data: dict[str, Any]) -> dict[str, Any]:
    """A section's dict with its old flat keys moved into their nested sections (each with a notice)."""
    table = MOVED.get(section, {})
    old = [k for k in data if k in table]
    if not old:
        return data
    data = dict(data)
    for key in old:
        sub, leaf = table[key]
        if isinstance(data.get(sub), dict) and leaf in data[sub]:
            raise ValueError(both_given(f"{section}.{key}", f"{section}.{sub}.{leaf}"))
        notice(f"config key {section}.{key} is now {section}.{sub}.{leaf} (read as such; update the file)")
        value = data.pop(key)
        nested = dict(data.get(sub) or {})
        nested[leaf] = value
        data[sub] = nested
        also = ALSO.get((section, key))
        if also is not None:
            other = dict(data.get(also[0]) or {})
            other.setdefault(also[1], value)
            data[also[0]] = other
    return data


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """A whole raw config (a YAML file's mapping) with old keys of every section moved, in place."""
    for section in MOVED:
        if isinstance(raw.get(section), dict):
            raw[section] = migrate_section(section, raw[section])
    return raw


def moved_attribute(section: str, obj: Any, key: str) -> Any:
    """``obj.<sub>.<leaf>`` for an old attribute name of ``section``; AttributeError when ``key`` never moved."""
    target = moved_key(section, key)
    if target is None:
        raise AttributeError(key)
    sub = object.__getattribute__(obj, "async_" if target[0] == "async" else target[0])
    return getattr(sub, target[1])
