"""Named plug-ins the config chooses by name: advantage estimators, loss aggregations, KL estimators,
off-policy corrections, engine kinds and teacher engine kinds.

Each kind has one :class:`NameRegistry`. A built-in is registered where it is defined, by a
decorator (``@register_adv_est("grpo")``, verl's ``core_algos`` pattern), so its name is written
once. The registry knows only which module holds its built-ins and imports it (by name) the first
time a name is looked up: the config layer validates names without importing torch at start-up
and without a static import of ``memrl.rl`` or ``memrl.engines`` (which sit above it).

Yours: decorate a function in your module and name it by import path (``algorithm.adv_estimator=
my_pkg.est:my_estimator``), or, from Python, import your module before the config is validated and
use the registered name, or declare it as an entry point of your package
(:mod:`memrl.installed_plugins`) and use that name anywhere.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator

from memrl.installed_plugins import installed_target, with_installed
from memrl.plugins import load_object

T = TypeVar("T")


class NameRegistry:
    """Entries of one kind by name; built-ins come from importing ``builtins`` on first use."""

    def __init__(self, kind: str, builtins: str) -> None:
        self.kind = kind
        self.builtins = builtins
        self._entries: dict[str, Any] = {}
        self._loaded = False

    def _load_builtins(self) -> None:
        if not self._loaded:
            self._loaded = True  # set first: the module's decorators call register() while it imports
            importlib.import_module(self.builtins)

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` as ``name`` and return it (a decorator's result); a second, different entry fails."""
        old = self._entries.get(name)
        if old is not None and old is not entry:
            raise ValueError(f"{self.kind} {name!r} is already registered ({origin(old)}); pick another name")
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests and notebooks that redefine a plug-in)."""
        self._entries.pop(name, None)

    @property
    def names(self) -> tuple[str, ...]:
        self._load_builtins()
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def get(self, name: str) -> Any:
        """The entry registered as ``name``, or the object at import path ``name``; else a one-line ValueError."""
        self._load_builtins()
        if name in self._entries:
            return self._entries[name]
        path = name if ":" in name else installed_target(self.kind, name)
        if path is not None:
            obj = load_object(path, self.kind)
            if name in self._entries:  # an installed module whose decorator registered the same name
                return self._entries[name]
            if not callable(obj):
                raise ValueError(f"{self.kind} {name!r}: {type(obj).__name__} object is not callable")
            return obj
        raise ValueError(self.unknown(name))

    def validate(self, name: str) -> str:
        """``name`` unchanged if it is registered or a loadable import path, else a one-line ValueError."""
        self.get(name)
        return name

    def unknown(self, name: str) -> str:
        """The one-line error for a name that is not registered: the nearest name and every choice."""
        names = with_installed(self.kind, self.names)
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"unknown {self.kind} {name!r}{hint}: choose {', '.join(names)} or an import path 'package.module:name'"


def origin(obj: Any, sep: str = ".") -> str:
    """Where a plug-in's function is defined, for messages (``sep=":"``: as an import path names it); a registered
    entry that wraps its function (``.fn``) by the function's."""
    fn = getattr(obj, "fn", obj)
    return f"{getattr(fn, '__module__', '?')}{sep}{getattr(fn, '__qualname__', type(fn).__name__)}"


def registered(registry: Any) -> Any:
    """A ``str`` config field validated against ``registry`` (the registry is kept in the field's metadata):
    a :class:`NameRegistry`, or a plug-in registry of :mod:`memrl.plugins` (workflows, rewards, domains).

    Only values a user gives are checked (defaults are not validated), so loading a config that keeps
    the defaults imports no built-in module.
    """
    return Annotated[str, AfterValidator(registry.validate), registry]


def field_registry(metadata: list[Any]) -> NameRegistry | None:
    """The registry of a field made by :func:`registered` (from pydantic's ``FieldInfo.metadata``), if any."""
    return next((m for m in metadata if isinstance(m, NameRegistry)), None)


ADV_ESTIMATORS = NameRegistry("advantage estimator", "memrl.rl.advantages")
LOSS_AGGREGATIONS = NameRegistry("loss_agg_mode", "memrl.rl.losses")
KL_ESTIMATORS = NameRegistry("KL estimator", "memrl.rl.losses")
OFF_POLICY = NameRegistry("off_policy kind", "memrl.rl.offpolicy")
POLICY_LOSSES = NameRegistry("policy loss", "memrl.rl.policy_losses")
ENGINES = NameRegistry("engine kind", "memrl.engines.factory")
TEACHERS = NameRegistry("teacher engine kind", "memrl.train.teacher")
