"""One registry per kind of plug-in: memrl's own workflows, rewards and domains, and yours by import path.

A config names a built-in (``workflow.name=memagent``) or any object importable as
``package.module:attribute`` (``workflow.name=my_pkg.agents:my_workflow``), the way slime takes a
generate function and verl a reward function by path. Names are checked when the config is
validated, so a typo or a missing module fails in one line before any model loads. Built-ins
are registered here by path too and imported only when used; an installed package's plug-ins have
names as well, declared as entry points (:mod:`memrl.installed_plugins`).

Protocols:

* **workflow**: a :class:`memrl.Workflow` subclass (``async def run(self, ep)``, optional ``Options``
  model read from ``workflow.options``); see :mod:`memrl.workflows.api`;
* **reward**: ``def reward(text: str, *, sample, answer=None, **kw) -> float`` (TRL's shape): the final
  response's text, the sample (its gold answers: :func:`gold_answers`) and the answer extracted by
  ``workflow.options.answer_format``; the older ``(text, golds, answer)`` still works;
* **domain** (``env.domain``): a factory ``f(data_dir=..., tool_options=...)`` returning an object with
  ``new_env(solo=False) -> Environment`` and ``get_tasks(split=None) -> list[Task]``, most simply a
  :class:`memrl.envs.domain.ToolDomain` (a Toolkit class and a folder of τ²-layout files); a class
  with that constructor and those methods is one too (see :mod:`memrl.envs.domain`).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

from memrl.installed_plugins import installed_names, installed_target, with_installed


def load_object(spec: str, what: str) -> Any:
    """The object named ``package.module:attr`` (dots allowed after the colon), or a one-line ValueError."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"{what} {spec!r} is neither built in nor an import path 'package.module:name'")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import {module} ({exc}); is it installed or on PYTHONPATH?") \
            from None
    except SyntaxError as exc:  # the plug-in's own code: say where, as Python would, in one line
        raise ValueError(f"{what} {spec!r}: {exc.filename}:{exc.lineno}: syntax error ({exc.msg})") from None
    except Exception as exc:  # noqa: BLE001 - whatever a plug-in raises while importing is the plug-in's
        where = _plugin_frame(exc, module)
        raise ValueError(f"{what} {spec!r}: importing {module} raised {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())}{where}") \
            from None
    try:
        return functools.reduce(getattr, attr.split("."), mod)
    except AttributeError:
        raise ValueError(f"{what} {spec!r}: module {module} has no attribute {attr}") from None


def _plugin_frame(exc: BaseException, module: str) -> str:
    """`` (at file:line)`` of the innermost frame of the traceback, to point at the plug-in's line."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return ""
    return f" (at {last.tb_frame.f_code.co_filename}:{last.tb_lineno})"


class Registry:
    """Names of built-ins (import paths, loaded lazily) and the rule a plug-in of this kind must follow."""

    def __init__(self, kind: str, check: Callable[[Any], str | None] | str) -> None:
        """``check`` says what is wrong with an object of this kind (None: nothing); as an import path it is
        loaded when first needed, so the kind's own layer defines it and this module imports nothing above."""
        self.kind = kind
        self._check_spec = check
        self._builtins: dict[str, str] = {}

    def register(self, name: str, target: str) -> None:
        self._builtins[name] = target

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._builtins)

    def target(self, name: str) -> str:
        """The import path behind a name: a built-in's, an installed package's (entry point), else the name."""
        return self._builtins.get(name) or installed_target(self.kind, name) or name

    def known(self, name: str) -> bool:
        """Whether ``name`` is a built-in or declared by an installed package (no import path needed)."""
        return name in self._builtins or name in installed_names(self.kind)

    def validate(self, name: str) -> str:
        """``name`` if it is a built-in or a loadable plug-in (imported now to find out), else ValueError."""
        if name not in self._builtins:
            if ":" not in name and not self.known(name):
                close = difflib.get_close_matches(name, self.choices(), n=1, cutoff=0.6)  # --workflow memagnet
                hint = f" (did you mean {close[0]!r}?)" if close else ""  # as memrl.config.registry says it
                raise ValueError(f"unknown {self.kind} {name!r}{hint}: choose {', '.join(self.choices())} "
                                 "or give an import path 'package.module:name'")
            self.get(name)
        return name

    def choices(self) -> tuple[str, ...]:
        """Built-in names, then those of installed packages."""
        return with_installed(self.kind, self.names)

    def get(self, name: str) -> Any:
        obj = load_object(self.target(name), self.kind)
        check = self._check_spec
        if isinstance(check, str):
            check = self._check_spec = load_object(check, f"{self.kind} check")
        problem = check(obj)
        if problem:
            raise ValueError(f"{self.kind} {name!r}: {problem}")
        return obj


def _is_reward(obj: Any) -> str | None:
    if not callable(obj):
        return "a reward must be a function (text, *, sample, answer=None, **kw) -> float"
    return None


WORKFLOWS = Registry("workflow", "memrl.workflows.registry:check_workflow")


def workflow_support(attr: str) -> Any:
    """A function of :mod:`memrl.workflows.registry` (options, old keys), reached by path so that the config
    layer validates workflow options without importing the workflows layer."""
    return load_object(f"memrl.workflows.registry:{attr}", "workflow registry")
for _name, _cls in (("memagent", "MemAgent"), ("rememr1", "RememR1"), ("full_context", "FullContext"),
                   ("tool_agent", "ToolAgent")):
    WORKFLOWS.register(_name, f"memrl.workflows.builtins:{_cls}")
WORKFLOWS.register("agent", "memrl.gateway.workflow:AgentWorkflow")

REWARDS = Registry("reward", _is_reward)
for _name in ("em", "sub_em", "f1", "memagent_strict"):
    REWARDS.register(_name, f"memrl.rewards.builtin:{_name}")
for _name in ("tau2", "progress"):  # tool-agent rewards: they read the episode's grade (grade=...)
    REWARDS.register(_name, f"memrl.envs.progress:{_name}")


DOMAINS = Registry("domain", "memrl.envs.domain:check_domain")
for _name, _attr in (("library", "LIBRARY"), ("mock", "MOCK"), ("retail", "RETAIL"), ("telecom", "TELECOM"),
                     ("telecom-workflow", "TELECOM_WORKFLOW")):
    DOMAINS.register(_name, f"memrl.envs.domain:{_attr}")
DOMAINS.register("airline", "memrl.envs.domains.airline:AIRLINE")
DOMAINS.register("banking_knowledge", "memrl.envs.domains.banking_knowledge:banking_knowledge_domain")


def gold_answers(sample: Any) -> list[str]:
    """The gold answers of a sample: ``answers`` (a list or one string) or ``answer``, as attribute or key."""
    if isinstance(sample, dict):
        value = sample.get("answers", sample.get("answer"))
    else:
        value = getattr(sample, "answers", getattr(sample, "answer", None))
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _new_style(fn: Any) -> bool:
    """Whether a reward takes ``(text, *, sample, answer=None, **kw)`` (else the old ``(text, golds, answer)``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "sample" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def reward_value(name: str, text: str, golds: Sequence[str], answer: str | None, sample: Any = None,
                 **kw: Any) -> float:
    """The configured reward of one final response; a ValueError naming the reward unless it is a finite number.

    Rewards have TRL's shape, ``reward(text, *, sample, answer=None, **kw) -> float`` (``sample`` is the
    record, gold answers included); the old ``(text, golds, answer)`` functions are still called as such.
    A NaN reward would otherwise be trained on (every advantage of its group turns NaN) and
    written to the rollouts; raising makes the episode a failed one, which is never trained on.
    """
    fn = REWARDS.get(name)
    if _new_style(fn):
        value = fn(text, sample=sample if sample is not None else {"answers": list(golds)}, answer=answer, **kw)
    else:
        value = fn(text, golds, answer)
    return finite_reward(value, f"reward {name!r} returned", f" for answer {answer!r}")


# Largest |reward|: group means and variances are taken in float32, where 1e20 squared is already infinite,
# so one huge reward would make a whole step's update non-finite (and be skipped with everyone's episodes).
MAX_REWARD = 1e15


def finite_reward(value: Any, lead: str, context: str = "") -> float:
    """:func:`finite_number`, and within ``±MAX_REWARD``."""
    number = finite_number(value, lead, context)
    if abs(number) > MAX_REWARD:
        raise ValueError(f"{lead} {number:g}{context}: a reward must lie within ±{MAX_REWARD:g}")
    return number


def finite_number(value: Any, lead: str, context: str = "") -> float:
    """``value`` as a float, or a one-line ValueError (``lead`` names who gave it): a NaN or infinite reward or
    metric would otherwise reach the advantages and the logs."""
    if isinstance(value, (str, bytes)):  # float("1.0") would pass a judge's raw text as a number
        raise ValueError(f"{lead} {value!r} ({type(value).__name__}), not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{lead} {value!r} ({type(value).__name__}), not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{lead} {number}{context}: it must be a finite number")
    return number


def call_mismatch(fn: Any, *args: Any, **kwargs: Any) -> str | None:
    """Why ``fn`` cannot be called with these arguments (its signature refuses them), else None.

    Checked before the call, so a ``TypeError`` raised inside a plug-in is reported as its own bug and not as a
    wrong signature (both read "TypeError: ..." after the fact)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        return str(err)
    except ValueError:  # no signature Python can read (a C function): let the call say
        return None
    return None
