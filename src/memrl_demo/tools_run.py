"""``memrl demo --task tools``: a tool agent that visibly learns, on a 2-core CPU in minutes.

1. Tickets generated from the built-in ``library`` database (:mod:`memrl_demo.tools_tasks`), split
   into training and held-out test tickets; a tiny model and a tokenizer built from a config.
2. Warm start: SFT on episodes of a sloppy teacher that plays the gold tool calls through the real
   ``tool_agent`` workflow but, on four kinds of ticket, slips more often than not
   (:mod:`memrl_demo.tools_teacher`).
3. Held-out success (greedy, τ²-bench reward: database and required information) before RL.
4. GRPO with memrl's Trainer (workflow ``tool_agent``) on the training tickets, rewarded with
   τ²-bench's reward or, with ``--reward progress``, the fraction of checks passed
   (:mod:`memrl.envs.progress`).
5. Held-out success after RL, tool-call validity, turns per episode, a reward curve and summary.json.

Every stage is skipped when its output exists, so an interrupted demo resumes. Determinism is the
needle demo's (:func:`memrl_demo.run.deterministic`): the same seed prints the same numbers on a
given machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from memrl.config import MemRLConfig
from memrl.config.schema import WorkflowConfig
from memrl.cli.common import counted
from memrl.io.atomic import atomic_write
from memrl.io.console import log_console
from memrl_demo.run import DEFAULT_ESTIMATOR, DEMO_THREADS, deterministic, rl_stage
from memrl_demo.spent import TIMES
from memrl_demo.tools_tasks import library_files, read_plans, write_domain

WORKFLOW = dict(name="tool_agent", options=dict(max_turns=5, turn_tokens=40, max_total_tokens=1024,
                                                tool_format="qwen", tool_parser="hermes"))
# Top-level entries the tools demo writes in --out: --fresh deletes these and nothing else.
DEMO_OUTPUTS = ("data", "model_init", "sft_model", "rl", "summary.json")
REWARDS = ("tau2", "progress")
RECORDS = ("episode", "turns")  # workflow.options.record of the RL stage


@dataclass(frozen=True)
class ToolsScale:
    """How big each stage is. The defaults are the demo; tests shrink them to check the same code fast."""

    test_per_kind: int = 8
    train_per_kind: int = 24
    slip_p: float = 0.8
    teacher_repeats: int = 4  # teacher episodes per training ticket (each draws its own slips)
    # One optimizer over all epochs: copying ids into calls appears only after several hundred steps
    # (a jump in accuracy, as induction-style circuits do); restarting Adam each epoch delays it.
    sft_epochs: int = 20
    sft_lr: float = 3e-3
    sft_batch_rows: int = 8  # small batches: more updates for the same CPU time
    prompts_per_step: int = 8
    episodes_per_prompt: int = 8
    rl_lr: float = 3e-4  # 1e-3 let the tiny model's call format decay within 60 steps
    vocab_size: int = 3000


def _console() -> Console:
    return log_console()


def run_tools_demo(out: Path, *, rl_steps: int = 60, seed: int = 0, reward: str = "tau2",
                   console: Console | None = None, scale: ToolsScale = ToolsScale(),
                   threads: int = DEMO_THREADS, estimator: str = DEFAULT_ESTIMATOR,
                   record: str = "episode") -> dict[str, Any]:
    """The whole tools demo in ``out`` (resumes stage by stage); returns the summary it writes.

    ``estimator``: ``algorithm.adv_estimator`` of the RL stage; another than the default trains in its own
    folder (``out/rl_<estimator>``, summary ``summary_<estimator>.json``) from the same warm start.
    ``record``: the RL stage's ``workflow.options.record``; ``turns`` (each model call its own conversation,
    what gives gigpo turns to credit) trains in ``out/rl[_<estimator>]_turns``, summary
    ``summary[_<estimator>]_turns.json``."""
    from memrl.data.outdir import record_outputs
    from memrl_demo.folder import claim_folder

    if reward not in REWARDS:
        raise ValueError(f"--reward must be one of {', '.join(REWARDS)}, not {reward!r}")
    if record not in RECORDS:
        raise ValueError(f"--record must be one of {', '.join(RECORDS)}, not {record!r}")
    record_outputs(out, (*DEMO_OUTPUTS, *rl_stage(estimator, record=record), TIMES), by="memrl demo")
    claim_folder(out, "tools", seed, DEMO_OUTPUTS)
    with deterministic(seed, threads):
        return _run(out, rl_steps, seed, reward, console or _console(), scale, estimator, record)


def _warm_start(out: Path, init: Path, domain: Any, train: list[Any], tok: Any, seed: int, scale: ToolsScale,
                console: Console) -> Path:
    from memrl_demo.tools_data import teacher_trajectories
    from memrl.models.resolve import load_model
    from memrl.train.policy import export_model
    from memrl.train.sft import sft

    sft_dir = out / "sft_model"
    if (sft_dir / "config.json").is_file():
        return sft_dir
    model = load_model(str(init), device="cpu")
    with console.status(f"warm start: SFT on a sloppy teacher (slips {scale.slip_p:.0%} of the time on 4 of 6 "
                        "kinds of ticket)"):
        trajs = teacher_trajectories(domain, train, tok, WorkflowConfig(**WORKFLOW).opts, slip_p=scale.slip_p,
                                     seed=seed, repeats=scale.teacher_repeats)
        losses = sft(model, trajs, epochs=scale.sft_epochs, lr=scale.sft_lr, batch_rows=scale.sft_batch_rows,
                     pad_id=tok.pad_token_id, seed=seed * 1000)
    teacher = sum(t.reward for t in trajs) / len(trajs)
    console.print(f"warm start: {len(trajs)} teacher episodes (teacher success {100 * teacher:.1f}%), "
                  f"{len(losses)} SFT steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    export_model(model, tok, sft_dir)
    return sft_dir


def rl_config(out: Path, sft_dir: Path, rl_steps: int, seed: int, reward: str, scale: ToolsScale,
              estimator: str = DEFAULT_ESTIMATOR, record: str = "episode") -> MemRLConfig:
    """The Trainer's config: GRPO (or ``estimator``) on the training tickets of the demo's library copy,
    each episode recorded as one conversation or (``record="turns"``) one per model call.

    Every checkpoint is kept (a few MB each), so held-out success can be measured along the run afterwards
    (``bench/turn_credit.py``)."""
    workflow = WORKFLOW if record == "episode" else {**WORKFLOW, "options": {**WORKFLOW["options"], "record": record}}
    return MemRLConfig.model_validate({
        "model": {"path": str(sft_dir)},
        "workflow": workflow,
        "env": {"domain": "library", "data_dir": str(out / "data"), "train_split": "train", "eval_split": "test",
                "solo": True, **({} if reward == "tau2" else {"reward": reward})},
        "sampling": {"temperature": 1.0},
        "algorithm": {"adv_estimator": estimator, "n": scale.episodes_per_prompt, "loss_agg_mode": "token-mean"},
        "trainer": {"lr": scale.rl_lr, "total_steps": rl_steps, "prompts_per_step": scale.prompts_per_step,
                    "save_every": 10, "keep_checkpoints": max(1, -(-rl_steps // 10)), "eval": {"every": 0},
                    "seed": seed, "output_dir": str(out / rl_stage(estimator, record=record)[0]),
                    "micro_batch_tokens": 32768},
        "engine": {"max_batch_size": 64, "device": "cpu"},
    })


def _line(name: str, s: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {v:.0f}%" for k, v in s["by_kind"].items())
    valid = s["tool_call_validity"]
    validity = "no tool call made" if valid is None else f"tool-call validity {valid:.1f}%"
    return (f"{name}: success [bold]{s['success']:.1f}%[/bold], {validity}, "
            f"{s['turns']:.2f} turns/episode ({kinds})")


def _run(out: Path, rl_steps: int, seed: int, reward: str, console: Console, scale: ToolsScale,
         estimator: str, record: str = "episode") -> dict[str, Any]:
    from memrl_demo.spent import StageClock, show_finished

    rl_name, summary_name = rl_stage(estimator, record=record)
    asked = {"seed": seed, "reward": reward, "estimator": estimator, "record": record, "rl_steps": rl_steps}
    done = show_finished(out, summary_name, rl_name, console, _headline, **asked)
    if done is not None:  # re-running a finished demo shows its result; re-evaluating would only cost time
        return done
    clock = StageClock(out)
    with clock.stage("warm_start"):
        domain, train, test, tok, sft_dir = _prepare(out, seed, reward, console, scale)
    with clock.stage(rl_name):
        summary, curve = _rl(out, domain, tok, sft_dir, rl_steps, seed, reward, console, scale, estimator, record)
    wall, cpu = clock.total("warm_start", rl_name)
    summary = {"task": "tools", **asked, **summary, "seconds": wall, "cpu_seconds": cpu,
               "resumed": clock.resumed("warm_start", rl_name), "heldout_tickets": len(test),
               "train_tickets": len(train), "scale": asdict(scale)}
    with atomic_write(out / summary_name) as fh:
        json.dump(summary, fh, indent=2)
    _headline(console, summary, curve)
    return summary


def _headline(console: Console, summary: dict[str, Any], curve: Path) -> None:
    runs = " (all runs in this folder)" if summary.get("resumed") else ""
    console.print(f"\n[bold]held-out success (tau2 reward, {summary['heldout_tickets']} test tickets never trained "
                  f"on): {summary['heldout_before']:.1f}% -> {summary['heldout_after']:.1f}% "
                  f"({summary['lift']:+.1f} points)[/bold] in {summary['seconds']:.0f} s wall, "
                  f"{summary['cpu_seconds']:.0f} s CPU{runs}\nreward curve: {curve}")


def _prepare(out: Path, seed: int, reward: str, console: Console, scale: ToolsScale
             ) -> tuple[Any, list[Any], list[Any], Any, Path]:
    """Stages 1-3 (tickets, tiny model, warm start), each reused when it exists: (domain, train, test,
    tokenizer, warm-started model folder)."""
    from memrl_demo.tools_data import corpus
    from memrl_demo.tools_model import build_model
    from memrl.envs.domain import load_domain
    from memrl.models.resolve import load_tokenizer

    data = out / "data"
    if not (data / "library" / "split_tasks.json").is_file():
        write_domain(data, seed, scale.test_per_kind, scale.train_per_kind)
    train, test = read_plans(data)
    domain = load_domain("library", data)
    init = out / "model_init"
    if not (init / "config.json").is_file():
        from memrl.io.atomic import atomic_dir

        db = json.loads((library_files() / "db.json").read_text())
        with atomic_dir(init) as tmp:
            build_model(Path(tmp), corpus(domain, train), db, seed, scale.vocab_size)
    tok = load_tokenizer(str(init))
    console.print(f"[bold]memrl demo --task tools[/bold]: library help desk, solo mode. Tiny model ({init}); "
                  f"{len(train)} training tickets, {len(test)} held-out test tickets; reward {reward}; seed {seed}")
    sft_dir = _warm_start(out, init, domain, train, tok, seed, scale, console)
    return domain, train, test, tok, sft_dir


def _rl(out: Path, domain: Any, tok: Any, sft_dir: Path, rl_steps: int, seed: int, reward: str, console: Console,
        scale: ToolsScale, estimator: str, record: str) -> tuple[dict[str, Any], Path]:
    """The RL stage from the warm start: (held-out results before and after, reward-curve PNG)."""
    from memrl_demo.tools_eval import heldout
    from memrl.models.resolve import load_model
    from memrl.train.tracking import plot_run
    from memrl.train.trainer import Trainer

    workflow = WorkflowConfig(**WORKFLOW).opts
    before = heldout(load_model(str(sft_dir), device="cpu"), tok, domain, workflow)
    console.print(_line("held-out before RL", before))
    cfg = rl_config(out, sft_dir, rl_steps, seed, reward, scale, estimator, record)
    rl_dir = Path(cfg.trainer.output_dir)
    what = "tau2-bench reward" if reward == "tau2" else "progress reward (fraction of checks passed, not tau2)"
    how = estimator + (", each model call its own conversation" if record == "turns" else "")
    console.print(f"RL ({how}) on {what}: {counted(rl_steps, 'step')} x {scale.prompts_per_step} tickets x "
                  f"{scale.episodes_per_prompt} episodes (run folder {rl_dir})")
    trainer = Trainer(cfg, tracker_console=console)
    trainer.run()
    after = heldout(trainer.policy, tok, domain, workflow)
    console.print(_line("held-out after RL ", after))
    curve = plot_run(rl_dir, keys=("reward", "tool_call_validity", "turns", "response_tokens"))
    return {"heldout_before": before["success"], "heldout_after": after["success"],
            "lift": after["success"] - before["success"], "before": before, "after": after}, curve
