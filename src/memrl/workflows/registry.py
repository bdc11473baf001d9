"""From a config's ``workflow`` section to a workflow object: names, options, old files, old plug-ins.

The names themselves live in :data:`memrl.plugins.WORKFLOWS` (built-ins by import path,
yours as ``package.module:Name``). A registered object may be a :class:`Workflow`
subclass, a Workflow instance, or, for one release, an async function with the old
signature ``(sample, engine, tokenizer, config, *, sampling, sample_id, group_id)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from memrl.config.renames import both_given, notice
from memrl.workflows.api import Workflow, options_error
from memrl.workflows.builtins import QAWorkflow
from memrl.workflows.options import LEGACY_KEYS, LegacyOptions  # noqa: F401 (reached by memrl.plugins)

class FunctionWorkflow(QAWorkflow):
    """An old-style workflow function behind the object API: its ``config`` gets every old field and its
    samples are read as before (long-context samples of ``data.train_file``)."""

    Options: ClassVar[type[BaseModel]] = LegacyOptions

    def __init__(self, fn: Any, **options: Any) -> None:
        super().__init__(**options)
        self.fn = fn
        self.name = getattr(fn, "__name__", "workflow")  # type: ignore[misc]

    def loop(self) -> Any:
        return self.fn


def check_workflow(obj: Any) -> str | None:
    """What is wrong with a registered workflow object (memrl.plugins.WORKFLOWS), or None."""
    if isinstance(obj, Workflow) or (inspect.isclass(obj) and issubclass(obj, Workflow)):
        return None
    if inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(getattr(obj, "__call__", None)):
        return _agent_program(obj)  # else the old function signature, adapted for one release
    return "a workflow must be a memrl.Workflow subclass (or instance) with async def run(self, ep)"


def _agent_program(fn: Any) -> str | None:
    """The hint for an agent program (``async def fn(client, sample)``) named as a workflow: an old-style workflow
    function takes (sample, engine, tokenizer, config), a program runs behind ``workflow.name: agent``."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    if len(params) >= 4:
        return None
    spec = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    return (f"an async function of ({', '.join(p.name for p in params)}) is an agent program, not a workflow: "
            f"run it with workflow.name: agent and workflow.options.program: '{spec}'")


def registered(name: str) -> Any:
    from memrl.plugins import WORKFLOWS

    return WORKFLOWS.get(name)


def workflow_class(obj: Any) -> type[Workflow]:
    """The class whose ``Options`` a registered object's options follow."""
    if inspect.isclass(obj):
        return obj
    if isinstance(obj, Workflow):
        return type(obj)
    return FunctionWorkflow


def migrate_workflow_keys(data: dict[str, Any]) -> dict[str, Any]:
    """Old flat keys (``workflow.chunk_tokens``) moved under ``options``, each with a one-line notice."""
    old = [k for k in data if k not in ("name", "options") and k in LEGACY_KEYS]
    if not old:
        return data
    data = dict(data)
    options = dict(data.get("options") or {})
    for key in old:
        if key in options:
            raise ValueError(both_given(f"workflow.{key}", f"workflow.options.{key}"))
        notice(f"config key workflow.{key} is now workflow.options.{key} (read as such; update the file)")
        options[key] = data.pop(key)
    data["options"] = options
    name = data.get("name", "memagent")
    try:
        fields = workflow_class(registered(name)).Options.model_fields
    except ValueError:
        return data  # the name's own validator reports it
    for key in old:
        if key not in fields and key in options:  # set for another workflow in an old file: it never applied
            notice(f"workflow.{key} does not apply to workflow {name!r} and is ignored")
            options.pop(key)
    return data


def options_model(name: str, raw: Mapping[str, Any]) -> BaseModel:
    """``raw`` validated by the options model of workflow ``name``; a one-line ValueError otherwise."""
    obj = registered(name)
    model = workflow_class(obj).Options
    base = dict(obj.options.model_dump()) if isinstance(obj, Workflow) else {}
    try:
        return model(**{**base, **dict(raw)})
    except ValidationError as exc:
        raise ValueError(options_error(exc, name, model, "workflow.options.")) from None


def checked_options(name: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The options given for workflow ``name``, validated and as plain values (what config.yaml keeps);
    defaults stay out, so "set by the user" remains visible (``WorkflowConfig.opts`` fills them in)."""
    model = options_model(name, raw)
    given = model.model_dump(mode="json", exclude_unset=True)
    return {k: given[k] for k in raw if k in given}


def make_workflow(name: str, options: Mapping[str, Any] | None = None) -> Workflow:
    """A ready workflow object: the registered class built with ``options`` (or an instance re-optioned)."""
    obj = registered(name)
    if isinstance(obj, Workflow):
        return obj.with_options({**obj.options.model_dump(), **dict(options or {})}) if options else obj
    if inspect.isclass(obj):
        return _built(name, obj, options)
    notice(f"workflow {name!r} is a function with the old signature; write it as a memrl.Workflow subclass "
           "(see examples/custom_workflow): functions keep working for one release")
    wf = FunctionWorkflow(obj, **dict(options or {}))
    wf.name = name  # type: ignore[misc]  # messages name it as the config does
    return wf


def _built(name: str, cls: type, options: Mapping[str, Any] | None) -> Workflow:
    """``cls(**options)``; an exception of the user's constructor becomes one line that names the workflow and
    where it was raised (a 30-line traceback through memrl's loader said less)."""
    try:
        return cls(**dict(options or {}))
    except ValidationError:  # its options: named by the caller
        raise
    except Exception as exc:  # noqa: BLE001 - the user's own code: say what and where, in one line
        raise ValueError(f"workflow {name!r}: building it raised {type(exc).__name__}: {exc}{_where(exc)}") from exc


def _where(exc: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def as_workflow(obj: Any, options: Mapping[str, Any] | None = None) -> Workflow:
    """What ``memrl.Trainer(workflow=...)`` accepts: a Workflow instance or class, or an old-style function."""
    if isinstance(obj, Workflow):
        return obj.with_options({**obj.options.model_dump(), **dict(options)}) if options else obj
    if inspect.isclass(obj) and issubclass(obj, Workflow):
        return obj(**dict(options or {}))
    if inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(getattr(obj, "__call__", None)):
        return FunctionWorkflow(obj, **dict(options or {}))
    raise TypeError(f"workflow must be a memrl.Workflow (instance or subclass), got {type(obj).__name__}")
