"""Turn-level credit on the demos: GiGPO against GRPO over seeds, and how often GiGPO's anchors repeat.

Each (seed, estimator) runs the real command, one at a time, in one folder per seed, so every estimator
trains from the same data and warm start (the demo reuses finished stages)::

    memrl demo --task TASK --seed S --out WORK/TASK_seedS [--estimator E]

and its summary (``summary.json`` for grpo, ``summary_<E>.json`` otherwise) is read back; a run whose
summary exists is not run again. With ``--record turns`` (tools only) the RL stage records each model call
as its own conversation anchored at the database and context (``workflow.options.record=turns``, what gives
GiGPO turns to credit); those runs go to ``rl[_<E>]_turns`` and ``summary[_<E>]_turns.json`` beside the
episode-recorded ones, which are kept. Besides before -> after and the lift, the table gives

* needle: the first step whose held-out accuracy (the trainer's eval, every 10 steps on 32 held-out
  documents) reaches 90%, and the first step whose training reward (mean of the step's 64 episodes)
  reaches 0.9;
* tools: held-out success (the demo's own measure, 33 test tickets, greedy) of every checkpoint (every
  10 steps; the demo keeps them all), and the first checkpoint at 90% or more.

``--anchors`` then samples one training step's worth of episodes (8 prompts x 8, temperature 1) from the
warm start and from the gigpo run's last checkpoint, and counts how many conversations share their anchor
state with another of their group: where none do, GiGPO's step term is empty and it is GRPO.

    python bench/turn_credit.py --task needle --seeds 0 1 2 --anchors
    python bench/turn_credit.py --task tools --seeds 0 1 2 --anchors
    python bench/turn_credit.py --task tools --seeds 0 1 2 --record turns --anchors
    python bench/distill_demo.py --seeds 0 1 2     # on-policy distillation against GRPO (needle)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

GRPO = "grpo"  # the demo's default estimator: its summary is summary.json, its run rl/


def stage(estimator: str, record: str = "episode") -> tuple[str, str]:
    from memrl_demo.run import rl_stage

    return rl_stage(estimator, record=record)


def run_one(task: str, seed: int, estimator: str, work: Path, record: str = "episode") -> dict[str, Any]:
    """The demo's summary for (seed, estimator), running ``memrl demo`` first unless it exists."""
    out = work / f"{task}_seed{seed}"
    path = out / stage(estimator, record)[1]
    if not path.is_file():
        cmd = [sys.executable, "-m", "memrl.cli.main", "demo", "--task", task, "--seed", str(seed), "--out", str(out),
               "--estimator", estimator, *(["--record", record] if record != "episode" else [])]
        print("$ " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SystemExit(f"seed {seed} {estimator}: memrl demo exited {proc.returncode}: {tail}")
    return json.loads(path.read_text())


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def first_step(rows: list[dict[str, Any]], key: str, at_least: float) -> int | None:
    return next((int(r["step"]) for r in rows if key in r and r[key] >= at_least), None)


def tools_curve(out: Path, run: Path) -> dict[int, float]:
    """Held-out success of every kept checkpoint of ``run`` (cached in ``run/heldout_curve.json``)."""
    cache = run / "heldout_curve.json"
    if cache.is_file():
        return {int(k): v for k, v in json.loads(cache.read_text()).items()}
    from memrl.config.schema import WorkflowConfig
    from memrl.envs.domain import load_domain
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl_demo.run import deterministic
    from memrl_demo.tools_eval import heldout
    from memrl_demo.tools_run import WORKFLOW

    tok, domain = load_tokenizer(str(out / "sft_model")), load_domain("library", out / "data")
    curve = {}
    for ckpt in sorted((run / "checkpoints").glob("step_*")):
        with deterministic(0):
            curve[int(ckpt.name.split("_")[1])] = heldout(load_model(str(ckpt / "model"), device="cpu"), tok, domain,
                                                          WorkflowConfig(**WORKFLOW).opts)["success"]
    cache.write_text(json.dumps(curve))
    return curve


def row(task: str, seed: int, estimator: str, work: Path, record: str = "episode") -> dict[str, Any]:
    s = run_one(task, seed, estimator, work, record)
    out = work / f"{task}_seed{seed}"
    run = out / stage(estimator, record)[0]
    m = metrics(run)
    label = estimator if record == "episode" else f"{estimator} ({record})"
    r = {"seed": seed, "estimator": label, "before": s["heldout_before"], "after": s["heldout_after"],
         "lift": s["lift"], "seconds": s["seconds"], "cpu": s["cpu_seconds"]}
    if task == "needle":
        r["to90"] = first_step(m, "eval/accuracy", 90.0)
        r["reward_to90"] = first_step(m, "reward", 0.9)
        r["reward_1_20"] = statistics.fmean(x["reward"] for x in m if "reward" in x and x["step"] <= 20)
        r["curve"] = {int(x["step"]): x["eval/accuracy"] for x in m if "eval/accuracy" in x}
    else:
        curve = tools_curve(out, run)
        r["curve"], r["to90"] = curve, next((k for k, v in sorted(curve.items()) if v >= 90.0), None)
        rewards = [x["reward"] for x in m if "reward" in x]
        r["reward_first_last10"] = (statistics.fmean(rewards[:10]), statistics.fmean(rewards[-10:]))
    return r


def fmt_step(v: int | None) -> str:
    return "never" if v is None else str(v)


def print_table(task: str, rows: list[dict[str, Any]]) -> None:
    extra = "first step with reward >= 0.9; mean reward steps 1-20" if task == "needle" \
        else "train reward first/last 10"
    print(f"| seed | estimator | held-out before -> after | lift | steps to 90% held-out | {extra} | "
          "held-out along the run | wall (CPU) s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        ex = f"{fmt_step(r['reward_to90'])}; {r['reward_1_20']:.3f}" if task == "needle" \
            else "%.3f -> %.3f" % r["reward_first_last10"]
        curve = " ".join(f"{v:.0f}" for _, v in sorted(r["curve"].items()))
        print(f"| {r['seed']} | {r['estimator']} | {r['before']:.1f}% -> {r['after']:.1f}% | {r['lift']:+.1f} | "
              f"{fmt_step(r['to90'])} | {ex} | {curve} | {r['seconds']:.0f} ({r['cpu']:.0f}) |")
    for est in dict.fromkeys(r["estimator"] for r in rows):
        mine = [r for r in rows if r["estimator"] == est]
        lifts, afters = [r["lift"] for r in mine], [r["after"] for r in mine]
        steps = [r["to90"] if r["to90"] is not None else float("inf") for r in mine]
        print(f"| min / median | {est} | after {min(afters):.1f}% / {statistics.median(afters):.1f}% | "
              f"{min(lifts):+.1f} / {statistics.median(lifts):+.1f} | {fmt_step(_int(max(steps)))} (worst) / "
              f"{fmt_step(_int(statistics.median(steps)))} (median) | | | |")


def _int(v: float) -> int | None:
    return None if v == float("inf") else int(v)


async def _needle_batch(out: Path, model_dir: Path, seed: int, prompts: int, n: int) -> list[tuple[int, Any]]:
    from memrl.config.schema import WorkflowConfig
    from memrl.data import read_samples
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.workflows.memagent import memagent
    from memrl_demo.run import WORKFLOW

    tok = load_tokenizer(str(out / "sft_model"))
    samples = list(read_samples(out / "data" / "train.jsonl"))[:prompts]
    eng = HFEngine(load_model(str(model_dir), device="cpu"), pad_token_id=tok.pad_token_id)
    wf = WorkflowConfig(**WORKFLOW).opts
    jobs = [(g, memagent(s, eng, tok, wf, sampling=SamplingParams(seed=seed * 10_000 + g * n + k)))
            for g, s in enumerate(samples) for k in range(n)]
    trajs = await asyncio.gather(*(j for _, j in jobs))
    await eng.close()
    return [(g, t) for (g, _), t in zip(jobs, trajs)]


async def _tools_batch(out: Path, model_dir: Path, seed: int, prompts: int, n: int,
                       record: str = "episode") -> list[tuple[int, Any]]:
    from memrl.config.schema import WorkflowConfig
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    from memrl.envs.domain import load_domain
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.workflows.tool_agent import TaskSample, tool_agent
    from memrl_demo.tools_run import WORKFLOW

    tok, domain = load_tokenizer(str(out / "sft_model")), load_domain("library", out / "data")
    tasks = domain.get_tasks("train")[:prompts]
    eng = HFEngine(load_model(str(model_dir), device="cpu"), pad_token_id=tok.pad_token_id)
    wf = WorkflowConfig(name="tool_agent", options={**WORKFLOW["options"], "record": record}).opts
    jobs = [(g, tool_agent(TaskSample(domain, t, solo=True), eng, tok, wf,
                           sampling=SamplingParams(seed=seed * 10_000 + g * n + k)))
            for g, t in enumerate(tasks) for k in range(n)]
    trajs = await asyncio.gather(*(j for _, j in jobs))
    await eng.close()
    return [(g, t) for (g, _), t in zip(jobs, trajs)]


def anchor_stats(batch: list[tuple[int, Any]], gamma: float = 1.0) -> dict[str, float]:
    """How GiGPO's anchor groups look on one batch: turns, anchors, turns sharing theirs, and the turns whose
    step term is non-zero and differs from the episode term (what GiGPO adds to GRPO), and the cosine between
    GiGPO's per-turn advantages and GRPO's (its episode's on every turn): 1.0 is GRPO rescaled."""
    import torch

    from memrl.rl.advantages import group_normalize
    from memrl.rl.turn_credit import TurnRows, group_norm

    ep, turn, group, state = [], [], [], []
    for e, (g, t) in enumerate(batch):
        for k, c in enumerate(t.conversations):
            ep.append(e), turn.append(k), group.append(g), state.append(c.state)
    rows = TurnRows(episode=ep, turn=turn, group=group, state=state, scores=[t.reward for _, t in batch],
                    turn_rewards=[[float(c.reward or 0.0) for c in t.conversations] for _, t in batch])
    keys = rows.anchors()
    sizes = {k: keys.count(k) for k in set(keys)}
    step = group_norm(rows.step_returns(gamma), keys)
    episode = group_norm(torch.tensor([float(rows.scores[e]) for e in ep]), group)
    grpo = group_normalize(torch.tensor([float(s) for s in rows.scores]), [g for g, _ in batch])[ep]
    gigpo = episode + step
    cos = float(torch.nn.functional.cosine_similarity(gigpo, grpo, dim=0)) if grpo.abs().sum() > 0 else float("nan")
    shared = [sizes[k] > 1 for k in keys]
    return {"turns": len(keys), "anchors": len(sizes), "shared": sum(shared) / len(keys),
            "mean_size": statistics.fmean(sizes[k] for k in keys),
            "step_nonzero": float((step != 0).float().mean()),
            "step_differs": float(((step - episode).abs() > 1e-4).float().mean()),
            "first_turn_size": statistics.fmean(sizes[k] for k, t in zip(keys, turn) if t == 0), "cosine": cos}


def anchors(task: str, seeds: list[int], work: Path, estimator: str, record: str = "episode") -> None:
    from memrl_demo.run import deterministic

    print("\n| seed | policy | turns | anchor states | turns sharing their anchor | mean anchor group (per turn) | "
          "first turn's anchor group | step term non-zero | step term differs from episode term | "
          "cosine(GiGPO, GRPO) over the turns |\n|---|---|---|---|---|---|---|---|---|---|")
    sample = _needle_batch if task == "needle" else partial(_tools_batch, record=record)
    for seed in seeds:
        out = work / f"{task}_seed{seed}"
        last = sorted((out / stage(estimator, record)[0] / "checkpoints").glob("step_*"))
        for name, model in (("warm start", out / "sft_model"), (f"{estimator} {last[-1].name}", last[-1] / "model")):
            with deterministic(seed):
                st = anchor_stats(asyncio.run(sample(out, model, seed, 8, 8)))
            print(f"| {seed} | {name} | {st['turns']} | {st['anchors']} | {100 * st['shared']:.0f}% | "
                  f"{st['mean_size']:.1f} | {st['first_turn_size']:.1f} | {100 * st['step_nonzero']:.0f}% | "
                  f"{100 * st['step_differs']:.0f}% | {st['cosine']:.3f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="needle", choices=("needle", "tools"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--estimators", nargs="+", default=[GRPO, "gigpo"])
    ap.add_argument("--work", type=Path, default=Path("runs/turn_credit"))
    ap.add_argument("--anchors", action="store_true", help="also count anchor-group sizes (last estimator's runs)")
    ap.add_argument("--record", default="episode", choices=("episode", "turns"),
                    help="tools: the RL stage's workflow.options.record (turns: one conversation per model call, "
                    "in rl[_<estimator>]_turns beside the episode runs)")
    args = ap.parse_args()
    if args.record != "episode" and args.task != "tools":
        ap.error("--record turns applies to --task tools only")
    rows = [row(args.task, seed, est, args.work, args.record) for seed in args.seeds for est in args.estimators]
    print_table(args.task, rows)
    if args.anchors:
        anchors(args.task, args.seeds, args.work, args.estimators[-1], args.record)


if __name__ == "__main__":
    main()
