"""Workflows: an agent's loop as a small object (:class:`Workflow`), its bookkeeping in :class:`Episode`."""

from __future__ import annotations

from typing import Any

from memrl.workflows.api import Episode, Generation, Workflow, anchor

def get_workflow(name: str) -> Workflow:
    """The workflow registered under ``name`` (or the plug-in at ``package.module:Name``), default options."""
    from memrl.workflows.registry import make_workflow

    return make_workflow(name)


def build_workflow(cfg: Any, *, services: bool = True) -> Workflow:
    """The workflow of a whole config: its options, bound to the config, services built (once per run)."""
    workflow = cfg.workflow.build()
    return workflow.setup(cfg) if services else workflow.bind(cfg)


def load_samples(cfg: Any, split: str) -> list[Any]:
    """The samples of ``split`` ('train' or 'eval') that the config's workflow reads."""
    return samples_of(build_workflow(cfg, services=False), split)


def samples_of(workflow: Workflow, split: str) -> list[Any]:
    """``workflow.load_samples(split)`` as a list (anything else it returns is refused), with what a plug-in's
    loader raises told in one line naming the workflow and the split: a pydantic ``ValidationError`` (several lines, no file) by its first error, anything but a
    ``ValueError`` (which a loader writes to be read as it is) by its type and message."""
    from pydantic import ValidationError

    try:
        got = workflow.load_samples(split)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "a sample"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        raise ValueError(f"workflow {workflow.label!r}: load_samples({split!r}): {where}: {first['msg']}{more}; "
                         f"source: {_source(workflow, split)}") from None
    except (ValueError, OSError):
        raise  # a file that is missing or malformed already says where
    except Exception as err:  # noqa: BLE001 - a plug-in's bug, told where it happened
        raise ValueError(f"workflow {workflow.label!r}: load_samples({split!r}) raised {type(err).__name__}: {err}; "
                         f"source: {_source(workflow, split)}") from err
    if got is None or isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
        raise ValueError(f"workflow {workflow.label!r}: load_samples({split!r}) returned {type(got).__name__}, not a "
                         "list of samples")
    return list(got)


def _source(workflow: Workflow, split: str) -> str:
    try:
        return workflow.data_source(workflow.config, split)
    except Exception:  # noqa: BLE001 - a message helper must not fail the message
        return "unknown"


__all__: list[Any] = ["Episode", "Generation", "Workflow", "anchor", "build_workflow", "get_workflow", "load_samples",
                     "samples_of"]
