"""Checks that run before a model is loaded, so a bad setting costs seconds, not a model load.

Every problem here is the user's to fix, so each raises ``ConfigError`` with
one line naming the setting (the CLI prints it and exits 2).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from memrl.config import ConfigError, MemRLConfig
from memrl.io.atomic import atomic_write
from memrl.workflows.tool_budget import check_tool_prompt_budget, tool_prompt_floor  # noqa: F401 (their old home)
from memrl.workflows.api import check_defined

# Config keys that may change between a run and its resumption.
RESUMABLE_CHANGES = {*(f"trainer.{k}" for k in ("total_steps", "save_every", "eval.every", "keep_checkpoints",
                                                 "tensorboard", "wandb_project", "max_nan_steps", "max_failed_steps",
                                                 "stop_grace_s", "rollouts_every", "rollouts_per_step", "allow_changes",
                                                 "output_dir",  # a moved or renamed run resumes where it is now
                                                 # how the update is split or recomputed: not what it computes
                                                 "micro_batch_tokens", "gradient_checkpointing")),
                     *(f"cluster.{k}" for k in ("address", "rollout_replicas", "replica_cpus", "replica_gpus",
                                                "trainers", "backend", "placement", "strategy", "weight_sync"))}


def flat_settings(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A config as ``{dotted key: value}`` down to the leaves (nested sections and option mappings included)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flat_settings(value, f"{prefix}{key}.") if isinstance(value, dict) and value else
                   {f"{prefix}{key}": value})
    return out


def is_allowed(key: str, allowed: Iterable[str]) -> bool:
    """Whether ``key`` is named in ``allowed`` (``trainer.allow_changes``): itself or a section above it."""
    return any(key == a or key.startswith(a + ".") for a in allowed)


def check_config(cfg: MemRLConfig, workflow: Any = None, *, has_samples: bool = False) -> None:
    """Fail before any work on values that would only break later.

    ``workflow`` (default: the config's) checks its own settings; ``has_samples``: the
    caller brings the training samples, so the workflow's data files are not needed.
    """
    workflow = workflow if workflow is not None else cfg.workflow.build()
    try:
        check_defined(workflow)
        workflow.check(cfg)
        if not has_samples:
            getattr(workflow, "check_data", lambda _cfg: None)(cfg)
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err)) from None
    if cfg.data.eval_file and not Path(cfg.data.eval_file).is_file():
        raise ConfigError(f"data.eval_file: file not found: {cfg.data.eval_file}")
    a, t = cfg.algorithm, cfg.trainer
    if a.n == 1 and _needs_group(a.adv_estimator):
        raise ConfigError(f"algorithm.n=1 gives every episode a group of its own: {a.adv_estimator} "
                          "needs algorithm.n >= 2")
    rows = t.prompts_per_step * a.n  # every episode gives at least one row
    if t.mini_batches > rows:
        raise ConfigError(f"trainer.mini_batches={t.mini_batches} is more than the {rows} rows a step is sure to "
                          f"have (trainer.prompts_per_step={t.prompts_per_step} x algorithm.n={a.n}); "
                          f"use trainer.mini_batches <= {rows}")
    if t.mini_batches > t.prompts_per_step:  # verl: ppo_mini_batch_size (prompts) <= train_batch_size
        raise ConfigError(f"trainer.mini_batches={t.mini_batches} cannot split trainer.prompts_per_step="
                          f"{t.prompts_per_step} prompts into mini-batches of at least one prompt's group each; "
                          f"use trainer.mini_batches <= {t.prompts_per_step}")
    if a.step_rewards and workflow.state_advantage() is None:
        raise ConfigError(f"algorithm.step_rewards needs a workflow that scores turns (rememr1), not "
                          f"{workflow.label}")
    _check_engine(cfg)
    c = cfg.cluster
    if c.weight_sync == "collective" and c.replica_gpus > 0 and (c.placement == "colocate" or c.replica_gpus < 1):
        raise ConfigError("cluster.weight_sync=collective over NCCL needs each replica on whole GPUs of its own "
                          "(cluster.placement=split, cluster.replica_gpus >= 1): NCCL puts one rank per GPU. "
                          "Replicas sharing a GPU sync with cluster.weight_sync=object_store")
    if t.mode == "async":
        _check_async(cfg)
    _check_tracking(cfg)
    check_output_dir(Path(t.output_dir))


def check_dataset_size(cfg: MemRLConfig, count: int, where: str | None = None) -> None:
    """A step must not draw the same prompt several times: more prompts per step than samples is refused."""
    t = cfg.trainer
    where = where or f"data.train_file {cfg.data.train_file}"
    if count == 0:
        raise ConfigError(f"no training samples in {where}")
    if t.prompts_per_step > count:
        raise ConfigError(f"trainer.prompts_per_step={t.prompts_per_step} is more than the {count} samples in "
                          f"{where}: every step would repeat prompts; use trainer.prompts_per_step <= {count}")


def _check_tracking(cfg: MemRLConfig) -> None:
    """The optional loggers are imported only when the tracker starts, after the model loaded: look now."""
    if cfg.trainer.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("trainer.tensorboard=true needs tensorboard: pip install 'memrl[tracking]'")
    if cfg.trainer.wandb_project and importlib.util.find_spec("wandb") is None:
        raise ConfigError("trainer.wandb_project needs wandb: pip install 'memrl[tracking]'")


def check_output_dir(out: Path) -> None:
    """``trainer.output_dir`` must be (or be creatable as) a folder we can write to (probed with a file)."""
    from memrl.data.outdir import OutputDirError, check_writable_dir

    try:
        check_writable_dir(out, flag="trainer.output_dir=")
    except OutputDirError as err:
        raise ConfigError(f"{str(err).replace('= ', '=', 1)}; choose another trainer.output_dir") from None
    for name, want in (("checkpoints", "folder"), ("rollouts", "folder"), ("failures", "folder"),
                       ("metrics.jsonl", "file")):
        path = out / name
        if path.exists() and path.is_dir() != (want == "folder"):  # found at the first save, steps later
            raise ConfigError(f"{path} is a {'file' if want == 'folder' else 'folder'}, where the run writes its "
                              f"{name} {want}; move it away or choose another trainer.output_dir")
    if (out / "eval_config.yaml").is_file():  # its results and a run's rollouts would mix in one viewer
        raise ConfigError(f"trainer.output_dir={out} is an eval folder (memrl eval --out: it holds eval_config.yaml); "
                          "choose another trainer.output_dir")


RUN_CONFIG_HEADER = "# memrl train: the settings this run started with (a resumed run is compared with them)\n"


def check_run_config(cfg: MemRLConfig, run_dir: Path, notice: Callable[[str], None] = print) -> None:
    """A resumed run must keep its config (apart from RESUMABLE_CHANGES and ``trainer.allow_changes``, each
    change of which is told to ``notice``); records the config it runs with.

    A folder without checkpoints has nothing to resume (a first start refused for a bad setting, or
    killed before its first save): its config is replaced, so fixing that setting is not refused. A
    ``config.yaml`` there that memrl did not record (no :data:`RUN_CONFIG_HEADER`: the user's own, say
    ``memrl train exp/config.yaml`` with ``output_dir: exp``) is never replaced: that once turned a
    commented 7-line file into memrl's 211-line dump. Nor is a ``metrics.jsonl`` without one (its rows would go).
    """
    from memrl.train.checkpoint import checkpoints

    path = run_dir / "config.yaml"
    new = cfg.model_dump(mode="json")
    if not path.is_file() and (run_dir / "metrics.jsonl").is_file() and not checkpoints(run_dir):
        raise ConfigError(f"{run_dir / 'metrics.jsonl'} is not a run memrl recorded (no config.yaml beside it; a file "
                          "of yours?) and memrl train would replace its rows: set trainer.output_dir to another "
                          "folder, or move it")
    if path.is_file():
        text = path.read_text(errors="replace")
        if not text.startswith(RUN_CONFIG_HEADER) and not checkpoints(run_dir):
            raise ConfigError(f"{path} is not a config memrl recorded (a file of yours?) and memrl train keeps the "
                              "run's settings under that name: set trainer.output_dir to another folder, or move it")
        try:
            old = yaml.safe_load(text)
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path} is unreadable ({type(err).__name__}); restore it or use another "
                              "trainer.output_dir") from None
        if not isinstance(old, dict):
            raise ConfigError(f"{path} is not a memrl config; restore it or use another trainer.output_dir")
        # an empty mapping holds no setting: adding its first option is a change of that option, not of the map
        was_flat, now_flat = ({k: v for k, v in flat_settings(tree).items() if v != {}}
                              for tree in (_as_run_today(old), new))
        missing = object()  # a key only one side has (an option dropped from workflow.options) is a change too
        changed = {k: (was_flat.get(k, "unset"), now_flat.get(k, "unset (its default)"))
                   for k in {**was_flat, **now_flat}
                   if was_flat.get(k, missing) != now_flat.get(k, missing) and not is_allowed(k, RESUMABLE_CHANGES)}
        if changed and checkpoints(run_dir):
            refused = [k for k in changed if not is_allowed(k, cfg.trainer.allow_changes)]
            if refused:
                keys = ",".join(refused)
                raise ConfigError(f"{run_dir} was started with a different config (changed: {', '.join(refused)}); "
                                  f"to resume with the new values pass --allow-changes {keys} (trainer.allow_changes="
                                  f"[{keys}]), or use another trainer.output_dir to start a new run")
            for key, (was, now) in changed.items():
                notice(f"resuming {run_dir} with {key} changed from {_shown(was)} to {_shown(now)} "
                       "(trainer.allow_changes)")
    with atomic_write(path) as fh:  # a run killed here must not leave a torn config that blocks resuming
        fh.write(RUN_CONFIG_HEADER + yaml.safe_dump(new, sort_keys=False))


def _shown(value: Any) -> str:
    return value if isinstance(value, str) and value.startswith("unset") else repr(value)


def _as_run_today(old: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded config as this version writes it (keys that moved since, defaults filled in), so an
    upgrade alone is not a change; a file that no longer validates is compared as it is."""
    from memrl.config.renames import migrate

    try:
        return MemRLConfig.model_validate(migrate(dict(old))).model_dump(mode="json")
    except Exception:  # noqa: BLE001 - compared key by key below, which names what differs
        return migrate(dict(old))


def _check_engine(cfg: MemRLConfig) -> None:
    """Training pushes new weights into the engine every step: refuse a kind that cannot take them; then the
    kind's own checks of its options (:attr:`~memrl.engines.factory.EngineKind.preflight`)."""
    from memrl.engines.factory import engine_kind, trainable_engine_kinds

    kind = engine_kind(cfg.engine.kind)
    if not kind.receives_weights:
        raise ConfigError(f"engine.kind={cfg.engine.kind} cannot receive weight updates; train with engine.kind="
                          f"{' or '.join(trainable_engine_kinds())}")
    if kind.preflight is not None:
        kind.preflight(cfg)


def _check_async(cfg: MemRLConfig) -> None:
    """What asynchronous training cannot do: generation runs during every update. (Several trainer ranks are
    fine: rank 0 runs the producer and every rank updates its shard of the batch.)"""
    c = cfg.cluster
    if c.rollout_replicas and c.placement == "colocate":
        raise ConfigError("trainer.mode=async generates while the policy updates, so replicas cannot give the "
                          "accelerator back during updates: use cluster.placement=split")


def _needs_group(adv_estimator: str) -> bool:
    """Whether the estimator compares the episodes of a group (rl, and torch, imported only for algorithm.n=1)."""
    from memrl.rl.advantages import get_estimator

    return get_estimator(adv_estimator).needs_group
