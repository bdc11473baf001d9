"""A plug-in's own settings from the config (``algorithm.policy_loss_options``, ``algorithm.adv_estimator_options``).

Why: a loss or estimator of your own often has a hyperparameter of its own (a scale, a temperature).
Without these dicts it had to be fixed in code (a ``functools.partial`` at an import path), so a sweep
meant one module attribute per value. The dict's keys are passed as keyword arguments; they are checked
against the function's signature when the config loads, so a misspelt key fails in one line before
any model loads, not at the first update.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any


def check_plugin_options(field: str, name: str, fn: Any, options: Mapping[str, Any],
                         standard: Mapping[str, str], positional: int) -> None:
    """Refuse ``options`` (the dict at ``algorithm.<field>``) that ``fn`` cannot take, in one line.

    ``name``: the configured plug-in (``algorithm.policy_loss`` value); ``standard``: the keywords memrl
    itself passes, each with the config key that sets it; ``positional``: how many leading arguments memrl
    passes by position (tensors; whatever the plug-in calls them, they are not settings). A built-in (a
    function of memrl) is refused: its settings are fields of ``algorithm`` already, listed in the config
    reference.
    """
    if not options:
        return
    inner = getattr(fn, "fn", fn)  # a registered PolicyLoss / AdvantageEstimator wraps the function
    module = getattr(inner, "__module__", "") or ""
    if module == "memrl" or module.startswith("memrl."):
        raise ValueError(f"{field} is for a plug-in of your own; {name!r} is built in and reads its settings "
                         "from algorithm's own keys (memrl config schema lists them)")
    for key in options:
        if key in standard:
            raise ValueError(f"{field}.{key}: memrl passes {key} itself (from {standard[key]}); set that instead")
    params = _parameters(inner)
    if params is None:
        return
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [p for i, (p, v) in enumerate(params.items()) if v.kind is inspect.Parameter.KEYWORD_ONLY
             or (v.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and i >= positional)]
    for key in options:
        if key not in named and not accepts_any:
            own = [p for p in named if p not in standard and params[p].default is not inspect.Parameter.empty]
            takes = f"it takes {', '.join(own)}" if own else "it takes no settings of its own"
            raise ValueError(f"{field}.{key}: {name} has no keyword argument {key!r} ({takes})")
        if key in params:
            _check_type(f"{field}.{key}", options[key], params[key])


def _check_type(where: str, value: Any, param: inspect.Parameter) -> None:
    """A value of another kind than the parameter's default (``shift=abc`` for ``shift=0.0``) would fail after
    the first rollout, inside the plug-in; refused here. An int is a float; a None default accepts anything."""
    default = param.default
    if default is inspect.Parameter.empty or default is None:
        return
    kinds: tuple[type, ...] = (int, float) if isinstance(default, float) else (type(default),)
    if isinstance(value, bool) and not isinstance(default, bool) or not isinstance(value, kinds):
        raise ValueError(f"{where}: {value!r} is a {type(value).__name__}; the plug-in's default "
                         f"({default!r}) is a {type(default).__name__}")


def _parameters(fn: Any) -> Mapping[str, inspect.Parameter] | None:
    """The function's parameters, or None when Python cannot tell (a C function): then anything is passed."""
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
