"""The arguments of ``memrl.Trainer(config, workflow=..., train=..., eval=...)``, checked before anything loads.

From Python the mistakes are of type, not of spelling: a string where records were meant runs one
character per sample, a single record runs as a dataset of its keys, a list where the config was
meant fails deep inside pydantic. Each is refused here in one line naming the argument. A
workflow object given from Python is what runs, so its own ``Options`` check the config's
``workflow.options`` and the run's ``config.yaml`` records its name, not the default ``memagent``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memrl.config import ConfigError, MemRLConfig, WorkflowConfig, load_config
from memrl.config.load import config_from_dict, read_config_file
from memrl.config.renames import both_given, notice
from memrl.plugins import WORKFLOWS
from memrl.workflows.api import Workflow, options_error
from memrl.workflows.registry import FunctionWorkflow, as_workflow

EXPECTED_CONFIG = "a MemRLConfig, a dict of sections ({'model': {'path': 'tiny'}, ...}) or a YAML file's path"


def as_config(config: Any) -> MemRLConfig:
    """A MemRLConfig from itself, a dict of sections, or a YAML path; a one-line error for anything else."""
    if isinstance(config, MemRLConfig):
        return config
    if isinstance(config, (str, Path)):
        return load_config(config)
    if config is None:
        return MemRLConfig()
    if not isinstance(config, Mapping):
        raise TypeError(f"memrl.Trainer(config): expected {EXPECTED_CONFIG}, got {type(config).__name__}")
    return config_from_dict(config)


def checked_records(value: Any, arg: str) -> list[Any] | None:
    """``train=`` / ``eval=`` as a list of samples (None: the workflow loads its own); one line otherwise."""
    if value is None:
        return None
    what = f"memrl.Trainer({arg}=...): expected a list of samples (records such as [{{'word': 'apple'}}, ...])"
    if isinstance(value, (str, bytes, Path)):
        raise TypeError(f"{what}, got {type(value).__name__} {str(value)[:40]!r}; a file of records is "
                        f"data.{arg}_file in the config")
    if isinstance(value, Mapping):
        raise TypeError(f"{what}, got one record (a dict); wrap it in a list: {arg}=[record]")
    if not isinstance(value, Iterable):
        raise TypeError(f"{what}, got {type(value).__name__}")
    records = list(value)
    if arg == "train" and not records:
        raise ConfigError("memrl.Trainer(train=[]): no training samples; give at least one record")
    return records


def workflow_name(target: Any) -> str:
    """How ``config.yaml`` names a workflow (a class, or an old-style function): its built-in name, else its
    import path ``module:Class``."""
    kind = target if inspect.isclass(target) or inspect.isfunction(target) else type(target)  # a callable object
    path = f"{kind.__module__}:{kind.__qualname__}"
    return next((n for n in WORKFLOWS.names if WORKFLOWS.target(n) == path), path)


def _workflow_section(config: Any) -> tuple[Any, dict[str, Any], str | None]:
    """(the config without its workflow section, the options it gives, the workflow name it gives if any)."""
    if isinstance(config, MemRLConfig):
        given = config.workflow.name if "name" in config.workflow.model_fields_set else None
        return config, dict(config.workflow.options), given
    if isinstance(config, (str, Path)):
        config = read_config_file(config)
    if not isinstance(config, Mapping) or not isinstance(config.get("workflow"), Mapping):
        return config, {}, None
    rest = dict(config)
    section = dict(rest.pop("workflow"))
    options = dict(section.pop("options", None) or {})
    given = section.pop("name", None)
    for key, value in section.items():  # written before options existed: workflow.chunk_tokens
        if key in options:
            raise ConfigError(both_given(f"workflow.{key}", f"workflow.options.{key}"))
        notice(f"config key workflow.{key} is now workflow.options.{key} (read as such; update the file)")
        options[key] = value
    return rest, options, given


def run_workflow(config: Any, workflow: Any) -> tuple[MemRLConfig, Workflow]:
    """The run's config and the workflow that runs; with ``workflow`` given, the config's options are checked by
    its ``Options`` and the config records its name and options (what a resumed or viewed run reads back)."""
    if workflow is None:
        cfg = as_config(config)
        return cfg, cfg.workflow.build()
    rest, options, given = _workflow_section(config)
    cfg = as_config(rest)
    if inspect.isclass(workflow) and issubclass(workflow, Workflow):
        target, model, base = workflow, workflow.Options, {}
    else:
        inst = as_workflow(workflow)  # an instance, or an old-style function behind one (else a TypeError)
        target = inst.fn if isinstance(inst, FunctionWorkflow) else type(inst)
        model, base = inst.Options, inst.options.model_dump(mode="json", exclude_unset=True)
    name = workflow_name(target)
    if given is not None and given != name and not _names(given, target):
        raise ConfigError(f"workflow.name {given!r} and the workflow argument ({name}) are two workflows: "
                          "give only one of them")
    for key in sorted(set(base) & set(options)):
        if base[key] != options[key]:  # the config's value wins, as a command-line setting would: say so
            print(f"notice: workflow.options.{key}={options[key]!r} from the config replaces {key}={base[key]!r} "
                  f"given to the {name} workflow object", file=sys.stderr)
    try:
        model(**{**base, **options})
    except ValidationError as exc:
        raise ConfigError(options_error(exc, name, model, "workflow.options.")) from None
    wf = as_workflow(workflow, options)
    recorded = wf.options.model_dump(mode="json", include={*base, *options})
    section = WorkflowConfig.model_construct(name=name, options=recorded)
    return cfg.model_copy(update={"workflow": section}), wf


def _names(name: str, target: Any) -> bool:
    """Whether the config's ``workflow.name`` is ``target`` (a workflow class or function) under another spelling."""
    try:
        return WORKFLOWS.get(name) is target
    except ValueError:
        return False
