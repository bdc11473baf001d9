"""Domains: policy, database, tools and tasks, loaded from τ²-bench's file layout.

A domain folder holds ``tasks.json`` (or ``tasks_small.json``), ``db.json`` or
``db.toml`` (plus optional ``user_db.*``), ``policy.md`` (or ``main_policy.md``),
an optional solo-mode policy and ``split_tasks.json``. The folder can be given
as the domain folder itself, its parent (``.../domains``) or a τ²-bench clone.
The tools are memrl code (``memrl.envs.domains``), registered by domain name.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError
from memrl.envs.environment import Environment
from memrl.envs.tasks import Task, read_tasks
from memrl.envs.toolkit import Toolkit

BUILTIN = ("library",)
OTHER_TASK_FILES = ("tasks_small.json", "tasks_full.json")
# τ²-bench domains that reuse another domain's files and tools with other policy-building options
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {"telecom-workflow": ("telecom", {"workflow": True})}


def _toolkits(name: str) -> tuple[type[Toolkit], type[Toolkit] | None]:
    if name == "mock":
        from memrl.envs.domains.mock import MockTools, MockUserTools

        return MockTools, MockUserTools
    if name == "retail":
        from memrl.envs.domains.retail import RetailTools

        return RetailTools, None
    if name == "library":
        from memrl.envs.domains.library import LibraryTools

        return LibraryTools, None
    if name == "telecom":
        from memrl.envs.domains.telecom import TelecomTools, TelecomUserTools

        return TelecomTools, TelecomUserTools
    raise ValueError(f"memrl has no tools for domain {name!r}; implemented: library (built in), mock, retail, "
                     "telecom")


def _read_db(path: Path, toolkit: type[Toolkit] | None = None) -> str:
    """The database as JSON text (parsed again for every fresh environment), normalised once by the
    toolkit to the benchmark's data model."""
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise DataError(path, None, None, f"not valid TOML ({err})") from None
    else:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise DataError(path, None, None, f"not valid JSON ({err})") from None
    if toolkit is not None:
        data = toolkit.normalize_db(data)
    return json.dumps(data)


def _first(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


@dataclass
class Domain:
    name: str
    policy: str
    tasks: list[Task]
    db_text: str
    toolkit: type[Toolkit]
    user_toolkit: type[Toolkit] | None = None
    user_db_text: str | None = None
    solo_policy: str | None = None
    splits: dict[str, list[str]] = field(default_factory=dict)
    folder: Path | None = None
    tool_options: dict[str, Any] = field(default_factory=dict)
    _extra: dict[str, dict[str, Task]] = field(default_factory=dict, repr=False)

    def new_env(self, solo: bool = False) -> Environment:
        """A fresh environment on an untouched copy of the database."""
        tools = self.toolkit(json.loads(self.db_text))
        for key, value in self.tool_options.items():
            setattr(tools, key, value)
        user = None
        if self.user_toolkit is not None:
            user = self.user_toolkit(json.loads(self.user_db_text) if self.user_db_text else {})
        policy = self.solo_policy if solo and self.solo_policy else self.policy
        return Environment(self.name, policy, tools, user, solo=solo)

    def _other_tasks(self) -> dict[str, Task]:
        """Tasks of the domain's other task files (``tasks_small.json``, ``tasks_full.json``), read
        when a split names ids that ``tasks.json`` lacks (telecom's ``small`` and ``full``)."""
        found: dict[str, Task] = {}
        for fname in OTHER_TASK_FILES:
            path = self.folder / fname if self.folder is not None else None
            if path is None or not path.is_file():
                continue
            if fname not in self._extra:
                self._extra[fname] = {t.id: t for t in read_tasks(path)}
            found.update(self._extra[fname])
        return found

    def get_tasks(self, split: str | None = None) -> list[Task]:
        """Tasks of a split (``train``, ``test``, ``base``...), or all when ``split`` is None."""
        if split is None:
            return list(self.tasks)
        if split not in self.splits:
            raise ValueError(f"domain {self.name} has no split {split!r}; splits: "
                             f"{', '.join(sorted(self.splits)) or 'none (use split=null)'}")
        by_id = {t.id: t for t in self.tasks}
        if any(i not in by_id for i in self.splits[split]):
            by_id = {**self._other_tasks(), **by_id}
        missing = [i for i in self.splits[split] if i not in by_id]
        if missing:
            absent = [f for f in OTHER_TASK_FILES if self.folder is None or not (self.folder / f).is_file()]
            hint = f" (split {split!r} may need {' or '.join(absent)} in {self.folder})" if absent else ""
            raise ValueError(f"split {split!r} of {self.name} names unknown tasks: {missing[:5]}{hint}")
        return [by_id[i] for i in self.splits[split]]


def _locate(name: str, data_dir: str | Path) -> Path:
    root = Path(data_dir).expanduser()
    for cand in (root / name, root / "data" / "tau2" / "domains" / name, root):
        if _first(cand, ("tasks.json", "tasks_small.json")) and (cand.name == name or cand == root / name):
            return cand
    raise FileNotFoundError(f"no {name!r} domain under {root} (looked for {root / name}/tasks.json and "
                            f"{root}/data/tau2/domains/{name}/tasks.json)")


def load_domain(name: str, data_dir: str | Path | None = None, *,
                tool_options: dict[str, Any] | None = None) -> Domain:
    """Load a domain by name: ``library`` is bundled; τ² domains come from ``data_dir``.

    ``tool_options`` set class-level switches of the agent toolkit on every environment, e.g.
    ``{"per_item_variant": True}`` for retail (see :mod:`memrl.envs.domains.retail`).
    """
    base, policy_options = VARIANTS.get(name, (name, {}))
    toolkit, user_toolkit = _toolkits(base)
    for key in tool_options or {}:
        if key.startswith("_") or not hasattr(toolkit, key) or callable(getattr(toolkit, key)):
            raise ValueError(f"domain {name!r} has no tool option {key!r}")
    if data_dir is None:
        if name not in BUILTIN:
            raise ValueError(f"domain {name!r} is not bundled; set env.data_dir to a τ²-bench clone "
                             "(or its data/tau2/domains folder)")
        folder = Path(str(resources.files("memrl.envs.domains") / name))
    else:
        folder = _locate(base, data_dir)
    tasks_file = _first(folder, ("tasks.json", "tasks_small.json"))
    db_file = _first(folder, ("db.json", "db.toml"))
    policy_file = _first(folder, ("policy.md", "main_policy.md"))
    if tasks_file is None or db_file is None or policy_file is None:
        raise FileNotFoundError(f"{folder}: a domain needs tasks.json, db.json|db.toml and policy.md "
                                f"(found: {', '.join(sorted(p.name for p in folder.iterdir()))})")
    user_db = _first(folder, ("user_db.json", "user_db.toml"))
    solo = _first(folder, ("policy_solo.md", "main_policy_solo.md"))
    splits: dict[str, Any] = {}
    split_file = folder / "split_tasks.json"
    if split_file.is_file():
        splits = json.loads(split_file.read_text())
    compose = getattr(toolkit, "compose_policy", None)  # a policy built from several files (telecom)
    policy = compose(folder, solo=False, **policy_options) if compose else policy_file.read_text()
    solo_policy = compose(folder, solo=True, **policy_options) if compose else (solo.read_text() if solo else None)
    return Domain(name=name, policy=policy, tasks=read_tasks(tasks_file),
                  db_text=_read_db(db_file, toolkit), toolkit=toolkit, user_toolkit=user_toolkit,
                  user_db_text=_read_db(user_db, user_toolkit) if user_db else None,
                  solo_policy=solo_policy, splits=splits, folder=folder,
                  tool_options=dict(tool_options or {}))
