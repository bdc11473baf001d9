"""Domains: policy, database, tools and tasks; memrl's own and yours, loaded through one registry.

``env.domain`` names a built-in (``library``, ``mock``, ``retail``, ``telecom``,
``telecom-workflow``) or a plug-in ``package.module:name`` (see :data:`memrl.plugins.DOMAINS`).
Either way the name resolves to a **domain factory**, called as
``factory(data_dir=env.data_dir, tool_options=env.tool_options)``, that returns a **domain**:

* ``new_env(solo: bool = False) -> memrl.envs.Environment``: a fresh environment (tools on an
  untouched copy of the database, the policy the agent is shown) for one episode;
* ``get_tasks(split: str | None = None) -> list[memrl.envs.Task]``: the tasks of a split, or all.

A domain whose environment depends on the task (τ³'s ``banking_knowledge``: which reads are logged,
the user's tool list, a prompt holding the task's documents) declares ``new_env(solo, task=None)``;
the workflow and the grader then build every environment with :func:`task_env`.

A domain whose tools are a :class:`~memrl.envs.toolkit.Toolkit` and whose files follow τ²-bench's
layout needs no code beyond a :class:`ToolDomain`, which is how the built-ins are declared. The
folder holds ``tasks.json`` (or ``tasks_small.json``), ``db.json`` or ``db.toml`` (plus optional
``user_db.*``), ``policy.md`` (or ``main_policy.md``), an optional solo-mode policy and
``split_tasks.json``; τ² domains are found under ``env.data_dir`` (the domain folder's parent, a
``data/tau2/domains`` folder or a τ²-bench clone).
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memrl.data.errors import DataError
from memrl.envs.environment import Environment
from memrl.envs.task_checks import check_tasks
from memrl.envs.tasks import Task, read_tasks
from memrl.envs.toolkit import Toolkit
from memrl.io.text_files import read_json, read_text

OTHER_TASK_FILES = ("tasks_small.json", "tasks_full.json")
DOMAIN_METHODS = ("new_env", "get_tasks")


@runtime_checkable
class DomainLike(Protocol):
    """What the tool-agent workflow, the grader and the eval use of a domain."""

    def new_env(self, solo: bool = False) -> Environment: ...

    def get_tasks(self, split: str | None = None) -> list[Task]: ...


def task_env(domain: DomainLike, task: Task, solo: bool = False) -> Environment:
    """A fresh environment for one episode of ``task`` (passed on when ``new_env`` takes a ``task``)."""
    if "task" in inspect.signature(domain.new_env).parameters:
        return domain.new_env(solo=solo, task=task)  # type: ignore[call-arg]
    return domain.new_env(solo=solo)


def _read_db(path: Path, toolkit: type[Toolkit] | None = None) -> str:
    """The database as JSON text (parsed again for every fresh environment), normalised once by the
    toolkit to the benchmark's data model."""
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            data = tomllib.loads(read_text(path))
        except tomllib.TOMLDecodeError as err:
            raise DataError(path, None, None, f"not valid TOML ({err})") from None
    else:
        data = read_json(path)
    if toolkit is not None:
        data = toolkit.normalize_db(data)
    return json.dumps(data)


def _first(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


@dataclass
class Domain:
    """A domain read from files: what a :class:`ToolDomain` builds, and the shape most domains take."""

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
    prompts: str = "memrl"  # what the agent reads: memrl's or τ²-bench's system prompt and tools (tau2_schemas)
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
        return Environment(self.name, policy, tools, user, solo=solo, prompts=self.prompts)

    def _other_tasks(self) -> dict[str, Task]:
        """Tasks of the domain's other task files (``tasks_small.json``, ``tasks_full.json``), read
        when a split names ids that ``tasks.json`` lacks (telecom's ``small`` and ``full``)."""
        found: dict[str, Task] = {}
        for fname in OTHER_TASK_FILES:
            path = self.folder / fname if self.folder is not None else None
            if path is None or not path.is_file():
                continue
            if fname not in self._extra:
                tasks = read_tasks(path)
                check_tasks(path, tasks, self.toolkit, self.user_toolkit)
                self._extra[fname] = {t.id: t for t in tasks}
            found.update(self._extra[fname])
        return found

    def get_tasks(self, split: str | None = None) -> list[Task]:
        """Tasks of a split (``train``, ``test``, ``base``...), or all when ``split`` is None."""
        if split is None:
            return list(self.tasks)
        if split not in self.splits:
            raise ValueError(f"domain {self.name} has no split {split!r}; splits: "
                             f"{', '.join(sorted(self.splits)) or 'none (no split_tasks.json)'}: pick one with memrl eval "
                             "--split NAME, or set env.train_split / env.eval_split to one of them (null: every "
                             "task)")
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


def _toolkit_class(spec: str | type[Toolkit] | None, what: str) -> type[Toolkit] | None:
    """A toolkit given as a class or an import path, checked to be a :class:`Toolkit` subclass."""
    if spec is None or (isinstance(spec, type) and issubclass(spec, Toolkit)):
        return spec
    if isinstance(spec, str):
        from memrl.plugins import load_object

        obj = load_object(spec, what)
        if isinstance(obj, type) and issubclass(obj, Toolkit):
            return obj
    raise ValueError(f"{what} {spec!r} is not a memrl.envs.Toolkit subclass")


@dataclass(frozen=True)
class ToolDomain:
    """A domain declared as its tools and a folder of τ²-layout files; calling it loads a :class:`Domain`.

    ``toolkit`` / ``user_toolkit`` are classes or import paths (imported only when the domain
    loads). ``folder`` holds files that ship with the code; without one the files are looked up
    under ``env.data_dir`` by ``files`` (default: ``name``), as τ²-bench's domains are. A given
    ``env.data_dir`` wins over ``folder``. ``policy_options`` go to the toolkit's
    ``compose_policy(folder, solo, **options)`` when it builds its policy from several files.
    """

    name: str
    toolkit: str | type[Toolkit]
    user_toolkit: str | type[Toolkit] | None = None
    folder: str | Path | None = None
    files: str | None = None
    policy_options: dict[str, Any] = field(default_factory=dict)

    def tool_classes(self) -> tuple[type[Toolkit], type[Toolkit] | None]:
        tools = _toolkit_class(self.toolkit, f"domain {self.name!r}: toolkit")
        assert tools is not None
        return tools, _toolkit_class(self.user_toolkit, f"domain {self.name!r}: user_toolkit")

    def __call__(self, data_dir: str | Path | None = None, tool_options: dict[str, Any] | None = None) -> Domain:
        toolkit, user_toolkit = self.tool_classes()
        for key in tool_options or {}:
            if key.startswith("_") or not hasattr(toolkit, key) or callable(getattr(toolkit, key)):
                raise ValueError(f"domain {self.name!r} has no tool option {key!r}")
        if data_dir is not None:
            folder = _locate(self.files or self.name, data_dir)
        elif self.folder is not None:
            folder = Path(self.folder)
        else:
            raise ValueError(f"domain {self.name!r} is not bundled; set env.data_dir to a τ²-bench clone "
                             "(or its data/tau2/domains folder)")
        return _from_folder(self, folder, toolkit, user_toolkit, dict(tool_options or {}))


def _from_folder(spec: ToolDomain, folder: Path, toolkit: type[Toolkit], user_toolkit: type[Toolkit] | None,
                 tool_options: dict[str, Any]) -> Domain:
    """The domain's files read into a :class:`Domain` (databases normalised by their toolkits)."""
    tasks_file = _first(folder, ("tasks.json", "tasks_small.json"))
    db_file = _first(folder, ("db.json", "db.toml"))
    policy_file = _first(folder, ("policy.md", "main_policy.md"))
    if tasks_file is None or db_file is None or policy_file is None:
        found = ", ".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else "no such folder"
        raise FileNotFoundError(f"{folder}: a domain needs tasks.json, db.json|db.toml and policy.md "
                                f"(found: {found})")
    user_db = _first(folder, ("user_db.json", "user_db.toml"))
    solo = _first(folder, ("policy_solo.md", "main_policy_solo.md"))
    split_file = folder / "split_tasks.json"
    splits: dict[str, Any] = read_json(split_file) if split_file.is_file() else {}
    compose = getattr(toolkit, "compose_policy", None)  # a policy built from several files (telecom)
    opts = spec.policy_options
    policy = compose(folder, solo=False, **opts) if compose else read_text(policy_file)
    solo_policy = compose(folder, solo=True, **opts) if compose else (read_text(solo) if solo else None)
    tasks = read_tasks(tasks_file)
    check_tasks(tasks_file, tasks, toolkit, user_toolkit)
    return Domain(name=spec.name, policy=policy, tasks=tasks,
                  db_text=_read_db(db_file, toolkit), toolkit=toolkit, user_toolkit=user_toolkit,
                  user_db_text=_read_db(user_db, user_toolkit) if user_db else None,
                  solo_policy=solo_policy, splits=splits, folder=folder, tool_options=tool_options)


# The built-in domains, registered by name in :data:`memrl.plugins.DOMAINS` (as yours can be by path).
_TOOLS = "memrl.envs.domains"
LIBRARY = ToolDomain("library", f"{_TOOLS}.library:LibraryTools",
                     folder=Path(str(resources.files(_TOOLS) / "library")))
MOCK = ToolDomain("mock", f"{_TOOLS}.mock:MockTools", f"{_TOOLS}.mock:MockUserTools")
RETAIL = ToolDomain("retail", f"{_TOOLS}.retail:RetailTools")
TELECOM = ToolDomain("telecom", f"{_TOOLS}.telecom:TelecomTools", f"{_TOOLS}.telecom:TelecomUserTools")
# τ²-bench's telecom-workflow: telecom's files and tools, the step-by-step workflow in the policy
TELECOM_WORKFLOW = ToolDomain("telecom-workflow", TELECOM.toolkit, TELECOM.user_toolkit, files="telecom",
                              policy_options={"workflow": True})


def load_domain(name: str, data_dir: str | Path | None = None, *,
                tool_options: dict[str, Any] | None = None, prompts: str = "memrl") -> Domain | DomainLike:
    """The domain ``env.domain`` names, built by its factory (see the module docstring).

    ``tool_options`` set class-level switches of a :class:`ToolDomain`'s agent toolkit on every
    environment, e.g. ``{"per_item_variant": True}`` for retail (see :mod:`memrl.envs.domains.retail`).
    ``prompts``: ``tau2`` gives the agent τ²-bench's system prompt and, with the user simulator, its tool
    schemas (:mod:`memrl.envs.tau2_schemas`), checked here; ``memrl``: the policy alone and memrl's docstrings.
    """
    from memrl.plugins import DOMAINS, call_mismatch

    if not DOMAINS.known(name) and ":" not in name:
        raise ValueError(f"memrl has no tools for domain {name!r}; choose {', '.join(DOMAINS.choices())} "
                         "or give an import path 'package.module:factory'")
    factory = DOMAINS.get(name)
    kwargs = {"data_dir": data_dir, "tool_options": dict(tool_options or {})}
    wrong = call_mismatch(factory, **kwargs)
    if wrong:
        raise ValueError(f"domain {name!r}: {wrong}; a domain factory is called with data_dir= and tool_options= "
                         "(a ToolDomain is one; a function returning one takes them too)")
    domain = factory(**kwargs)
    missing = [m for m in DOMAIN_METHODS if not callable(getattr(domain, m, None))]
    if missing:
        raise ValueError(f"domain {name!r} built a {type(domain).__name__} without {' and '.join(missing)} "
                         "(a domain provides new_env(solo) and get_tasks(split))")
    if prompts != "memrl":
        _use_prompts(domain, name, prompts)
    return domain


def _use_prompts(domain: Any, name: str, source: str) -> None:
    """Switch ``domain``'s environments to ``source``'s prompts, and build them now: a missing τ²-bench
    install or a tool one side lacks fails before any model loads."""
    from memrl.envs.tau2_schemas import SOURCES

    if source not in SOURCES:
        raise ValueError(f"env.prompts must be one of {', '.join(SOURCES)}, not {source!r}")
    if not isinstance(domain, Domain):
        raise ValueError(f"env.prompts={source}: domain {name!r} is not one of memrl's τ²-bench domains")
    domain.prompts = source
    probe = domain.new_env(solo=False)  # both toolkits (solo mode adds the user's to the agent's)
    probe.tool_schemas()  # first: a toolkit without a τ²-bench counterpart says so before τ²-bench is imported
    probe.system_prompt()
    if probe.user_tools is not None:
        probe.user_tools.schemas()


def check_domain(obj: Any) -> str | None:
    """What is wrong with a registered domain (memrl.plugins.DOMAINS), or None."""
    if isinstance(obj, ToolDomain):
        try:
            obj.tool_classes()  # the toolkits' import paths, checked now rather than at the first episode
        except ValueError as exc:
            return str(exc)
        return None
    if inspect.isclass(obj):
        missing = [m for m in DOMAIN_METHODS if not callable(getattr(obj, m, None))]
        if missing:
            return f"a domain class needs methods new_env(solo) and get_tasks(split); {obj.__name__} lacks " \
                   + " and ".join(missing)
        return None
    if not callable(obj):
        return "a domain must be a factory (data_dir, tool_options) -> object with new_env and get_tasks, " \
               "e.g. a memrl.envs.domain.ToolDomain"
    return None
