"""The demo job (``memrl demo`` / ``make demo``): warm start, then MemAgent GRPO, on a 2-core CPU.

1. Build a tiny Qwen2-architecture model and a tokenizer for the needle task.
2. Warm start: SFT on trajectories of a sloppy teacher (it forgets the code
   75% of the time on chunks without the needle), with extra rounds while the
   model cannot tell the codes apart (memrl_demo.warm_check).
3. Held-out accuracy (greedy) on documents 2-4x longer than any training document.
4. MemAgent GRPO on the training documents; reward is exact match of the boxed code.
5. Held-out accuracy again, a reward-curve PNG, and a summary.

Every stage is skipped when its output exists, so an interrupted demo resumes.

The printed numbers are the same on every run on a given machine: everything is
seeded from ``--seed`` (data, model init, teacher, SFT order, RL sampling), torch
runs with deterministic algorithms and a fixed thread count (how a reduction is
split across threads can change its rounding; on the 2-core CPU it was measured
on, 1, 2 and 4 threads gave bit-identical weights, but larger kernels elsewhere
may not), and every stage reads its inputs in a fixed order. Two full runs under
very different CPU load printed identical metrics at every step: batching that
depends on timing does not change the sampled tokens here. Other machines and
library versions (transformers, tokenizers are not pinned) can print other numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from memrl.config import MemRLConfig
from memrl.config.algorithm import AlgorithmConfig
from memrl.config.schema import WorkflowConfig
from memrl.data import write_samples
from memrl.cli.common import counted
from memrl.io.atomic import atomic_write
from memrl.io.console import log_console
from memrl_demo.needle import make_split, tokenizer_corpus
from memrl_demo.spent import TIMES
from memrl_demo.teacher import TeacherEngine
from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.workflows.memagent import memagent

PROMPTS = str(Path(__file__).with_name("prompts.yaml"))
WORKFLOW = dict(name="memagent", options=dict(chunk_tokens=12, memory_tokens=4, final_tokens=8, question_tokens=32,
                                              reward="em", prompts=PROMPTS))
# Top-level entries the demo writes in --out: --fresh deletes these and nothing else.
DEMO_OUTPUTS = ("data", "model_init", "sft_model", "rl", "rl_async", "summary.json", "summary_async.json")
# What a demo folder written before the manifest existed looks like (see memrl.data.outdir.clear_outputs).
LEGACY_DEMO = (DEMO_OUTPUTS, "model_init/config.json")
FORGET_P = 0.75  # the teacher forgets a remembered code on 75% of the chunks that do not mention it
SFT_BATCH = 32
# GRPO learning rate, from a sweep over seeds 0-4 (README): at 1e-3 one seed's early updates broke the answer
# format (\\boxed{ lost its brace), every episode then scored 0 and GRPO had nothing left to learn from.
RL_LR = 3e-4
RL_STEPS = 40  # GRPO steps of the demo (then up to DemoScale.settle_steps more: memrl_demo.settle)
DEMO_THREADS = 2  # the README's numbers are measured with 2 threads (make demo's 2-core target)
DEFAULT_ESTIMATOR: str = AlgorithmConfig.model_fields["adv_estimator"].default
WARM_REPORT = "warm_check.json"  # in sft_model/: what memrl_demo.warm_check measured, extra rounds run


def estimator_suffix(estimator: str) -> str:
    """``""`` for the default estimator, else ``_<name>`` with characters a folder name should not hold as ``_``."""
    return "" if estimator == DEFAULT_ESTIMATOR else "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", estimator)


@dataclass(frozen=True)
class SftPhase:
    """One warm-start phase: ``passes`` x ``docs`` fresh documents of ``sentences`` filler sentences, at ``lr``.

    Every pass draws new documents and re-rolls the teacher's forgetting, so the model cannot memorise which
    documents the teacher forgot: it converges to the teacher's *rates* (keeps a remembered code ~40% of the
    time, copies a needle it reads), a fixed point that does not depend on floating-point rounding.
    """

    name: str
    lr: float
    passes: int
    docs: int
    sentences: tuple[int, int]


# Why this warm start (measured, seeds 0-4): the old one (5 short epochs + 1 epoch of 2-5 sentences) stopped before
# the model learned to copy the remembered code (it kept the *right* code ~3% of the time instead of the
# teacher's 40%), so GRPO saw almost no successful episodes and learned by luck. Trained to convergence on a
# teacher keeping 40%, the model's keep rate still landed anywhere in 0.20-0.48 across seeds, and near 0.5 greedy
# decoding already keeps (seed 2 started at 56% held-out). Hence a teacher keeping 25% and a last low-lr phase:
# the warm start lands well below the greedy threshold on every seed, and GRPO has to do the rest.
SFT_PHASES = (SftPhase("spot the code", 3e-3, 3, 1024, (0, 1)),
              SftPhase("carry it across chunks", 1e-3, 4, 512, (2, 5)),
              SftPhase("settle", 3e-4, 2, 512, (2, 5)))


@dataclass(frozen=True)
class DemoScale:
    """How big each stage is. The defaults are the demo; tests shrink them to check the same code fast."""

    train_docs: int = 256
    heldout_docs: int = 64
    sft_phases: tuple[SftPhase, ...] = SFT_PHASES
    prompts_per_step: int = 8
    episodes_per_prompt: int = 8
    eval_samples: int = 32
    # At most this many extra rounds (one pass of each phase after the first) while the warm start fails
    # memrl_demo.warm_check; 0 skips the check.
    check_rounds: int = 6
    # At most this many GRPO steps after the demo's own, 10 at a time, while training has not settled
    # (memrl_demo.settle); not with an explicit step count (memrl demo --steps N trains N steps).
    settle_steps: int = 20


@contextlib.contextmanager
def deterministic(seed: int, threads: int = DEMO_THREADS) -> Iterator[None]:
    """Seed every RNG, fix the thread count and turn on torch's deterministic algorithms; restore after.

    Restoring matters because the demo also runs inside other processes (tests), whose
    torch settings are theirs.
    """
    import numpy as np
    import torch

    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=before[2])


def build_data(out: Path, seed: int, scale: DemoScale = DemoScale()) -> dict[str, Path]:
    """Training docs (2-5 filler sentences, ~2-5 chunks) and held-out docs (12-14 sentences, ~11-13 chunks:
    longer than anything trained on). The warm start draws its own documents (see :class:`SftPhase`)."""
    paths = {name: out / "data" / f"{name}.jsonl" for name in ("train", "heldout")}
    if not paths["heldout"].is_file():
        write_samples(make_split(seed + 1, scale.train_docs, (2, 5)), paths["train"], fmt="jsonl")
        write_samples(make_split(seed + 2, scale.heldout_docs, (12, 14)), paths["heldout"], fmt="jsonl")
    return paths


def build_model(out: Path, seed: int) -> Path:
    from memrl.models.tiny import build_tiny_model

    path = out / "model_init"
    if not (path / "config.json").is_file():
        from memrl.io.atomic import atomic_dir

        with atomic_dir(path) as tmp:
            build_tiny_model(tmp, tokenizer_corpus(), vocab_size=600, hidden_size=128, num_layers=2, num_heads=4,
                             num_kv_heads=2, intermediate_size=384, max_position_embeddings=4096, seed=seed)
    return path


async def teacher_trajectories(samples: list[Any], tokenizer: Any, forget_p: float, seed: int) -> list[Any]:
    wf = WorkflowConfig(**WORKFLOW).opts
    rng = random.Random(seed)
    out = []
    for s in samples:
        eng = TeacherEngine(tokenizer, s.answers[0], wf.final_tokens, forget_p, rng)
        out.append(await memagent(s, eng, tokenizer, wf))
    return out


async def accuracy(model: Any, tokenizer: Any, samples: list[Any]) -> float:
    eng = HFEngine(model, pad_token_id=tokenizer.pad_token_id)
    wf = WorkflowConfig(**WORKFLOW).opts
    trajs = await asyncio.gather(*(memagent(s, eng, tokenizer, wf, sampling=SamplingParams(greedy=True))
                                   for s in samples))
    await eng.close()
    return 100.0 * statistics.fmean(t.reward for t in trajs)


def run_demo(out: Path, *, rl_steps: int | None = None, seed: int = 0, console: Console | None = None,
             scale: DemoScale = DemoScale(), threads: int = DEMO_THREADS, asynchronous: bool = False,
             max_staleness: int = 1, estimator: str = DEFAULT_ESTIMATOR) -> dict[str, float]:
    """The whole demo in ``out`` (resumes stage by stage); returns the summary it writes.

    ``asynchronous``: the RL stage runs with ``trainer.mode=async`` (η = ``max_staleness``) in
    ``out/rl_async``, after the same data, model and warm start. Its numbers can differ a little
    from run to run: which episodes finish first, and so which are trained at each step, depends on timing.
    ``estimator``: ``algorithm.adv_estimator`` of the RL stage; another than the default trains in its own
    folder (``out/rl_<estimator>``, summary ``summary_<estimator>.json``) from the same warm start.
    ``rl_steps``: None trains the demo's 40 steps and up to ``scale.settle_steps`` more while training has not
    settled (:mod:`memrl_demo.settle`); a number trains exactly that many.
    """
    from memrl.data.outdir import record_outputs
    from memrl_demo.folder import claim_folder

    if rl_steps is None:
        rl_steps, settle = RL_STEPS, scale.settle_steps
    else:
        settle = 0

    stage = rl_stage(estimator, asynchronous)
    record_outputs(out, (*DEMO_OUTPUTS, *stage, TIMES), by="memrl demo", legacy=LEGACY_DEMO)  # an older demo resumes
    claim_folder(out, "needle", seed, DEMO_OUTPUTS)
    with deterministic(seed, threads):
        return _run(out, rl_steps, seed, console or log_console(),
                    scale, max_staleness if asynchronous else None, estimator, settle)


def rl_stage(estimator: str, asynchronous: bool = False, record: str = "episode") -> tuple[str, str]:
    """(RL folder, summary file) of a run: ``rl``/``summary.json`` with the default estimator, else
    suffixed by the estimator's name (an import path's odd characters as ``_``), ``_async`` first;
    ``_turns`` last for the tools demo's turn-by-turn recording (``--record turns``)."""
    suffix = ("_async" if asynchronous else "") + estimator_suffix(estimator)
    suffix += "_turns" if record == "turns" else ""
    return f"rl{suffix}", f"summary{suffix}.json"


def warm_start(out: Path, seed: int, console: Console, scale: DemoScale = DemoScale()
               ) -> tuple[Path, Any, dict[str, Path], list[Any]]:
    """Stages 1-2 (data, tiny model, SFT on the sloppy teacher): (warm-started model folder, tokenizer,
    data files, held-out samples). Each output is reused when it exists."""
    from memrl.data import read_samples
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.train.policy import export_model

    paths = build_data(out, seed, scale)
    init = build_model(out, seed)
    tok = load_tokenizer(str(init))
    train, held = (list(read_samples(paths[k])) for k in ("train", "heldout"))
    console.print(f"[bold]memrl demo[/bold]: find the secret code in filler text. Tiny model ({init}); "
                  f"{len(train)} training docs of 2-5 chunks, {len(held)} held-out docs of 11-13 chunks; seed {seed}")

    sft_dir = out / "sft_model"
    if not (sft_dir / "config.json").is_file():
        model = load_model(str(init), device="cpu")
        losses: list[float] = []
        for index, phase in enumerate(scale.sft_phases):
            losses += _sft_phase(model, tok, phase, seed * 100 + 10 * index, console)
        report = _until_checked(model, tok, seed, scale, console, losses)
        console.print(f"warm start: {len(losses)} SFT steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        export_model(model, tok, sft_dir, extra_files={WARM_REPORT: json.dumps(report, indent=2)})
    return sft_dir, tok, paths, held


def _until_checked(model: Any, tok: Any, seed: int, scale: DemoScale, console: Console,
                   losses: list[float]) -> dict[str, Any]:
    """Extra rounds (one pass of every phase after the first, on fresh documents) while the warm start
    fails :mod:`memrl_demo.warm_check`, at most ``scale.check_rounds``; returns what was measured."""
    from memrl_demo.warm_check import describe, skill_scores, weakest

    report: dict[str, Any] = {"extra_rounds": 0}
    if scale.check_rounds <= 0:
        return report
    again = [SftPhase(p.name, p.lr, 1, p.docs, p.sentences) for p in scale.sft_phases[1:] or scale.sft_phases]
    workflow = WorkflowConfig(**WORKFLOW).opts
    for r in range(scale.check_rounds + 1):
        scores = skill_scores(model, tok, workflow, seed=seed * 100 + 7)
        low = weakest(scores)
        report.update(extra_rounds=r, scores=scores, passed=low is None)
        console.print(f"warm start check: {describe(scores)}" + ("" if low is None else
                      f"; {low[0]} {low[1]} at {low[2]:.2f}" + (", one more round" if r < scale.check_rounds else "")))
        if low is None or r == scale.check_rounds:
            return report
        for index, phase in enumerate(again):
            losses += _sft_phase(model, tok, phase, seed * 100 + 1000 * (r + 1) + 10 * index, console)
    return report


def _sft_phase(model: Any, tok: Any, phase: SftPhase, seed: int, console: Console) -> list[float]:
    """Teacher trajectories on fresh documents for every pass, trained in one ``sft`` call (one optimizer)."""
    from memrl.cli.progress import progress
    from memrl.train.batch import rows_from_trajectories
    from memrl.train.sft import sft

    trajs: list[Any] = []
    for p in range(phase.passes):
        docs = make_split(seed + p + 11, phase.docs, phase.sentences)
        trajs += asyncio.run(teacher_trajectories(docs, tok, forget_p=FORGET_P, seed=seed + p))
    label = f"warm start, {phase.name}: SFT on a sloppy teacher (forgets the code {FORGET_P:.0%} of the time)"
    steps = -(-len(rows_from_trajectories(trajs)) // SFT_BATCH)
    with progress(console, label, total=steps, noun="steps") as bar:
        return sft(model, trajs, epochs=1, lr=phase.lr, batch_rows=SFT_BATCH, pad_id=tok.pad_token_id,
                   seed=seed, on_step=lambda step, _loss: bar.update(completed=step))


def rl_config(out: Path, sft_dir: Path, paths: dict[str, Path], rl_steps: int, seed: int, scale: DemoScale,
              staleness: int | None, estimator: str = DEFAULT_ESTIMATOR) -> MemRLConfig:
    """The RL stage's config (``staleness``: None for synchronous training, else η of asynchronous)."""
    return MemRLConfig.model_validate({
        "model": {"path": str(sft_dir)},
        "data": {"train_file": str(paths["train"]), "eval_file": str(paths["heldout"])},
        "workflow": WORKFLOW,
        "sampling": {"temperature": 1.0},
        "algorithm": {"adv_estimator": estimator, "n": scale.episodes_per_prompt, "loss_agg_mode": "token-mean"},
        "trainer": {"lr": RL_LR, "total_steps": rl_steps, "prompts_per_step": scale.prompts_per_step,
                    "save_every": 10, "eval": {"every": 10, "samples": scale.eval_samples}, "seed": seed,
                    "output_dir": str(out / rl_stage(estimator, staleness is not None)[0]),
                    "micro_batch_tokens": 32768,
                    **({} if staleness is None else {"mode": "async", "async": {"max_staleness": staleness}})},
        "engine": {"max_batch_size": 64, "device": "cpu"},
    })


def _extra_rounds(sft_dir: Path) -> int:
    report = sft_dir / WARM_REPORT  # absent in a warm start written before the check existed
    return int(json.loads(report.read_text())["extra_rounds"]) if report.is_file() else 0


def _run(out: Path, rl_steps: int, seed: int, console: Console, scale: DemoScale,
         staleness: int | None, estimator: str, settle: int) -> dict[str, float]:
    """``settle``: at most this many GRPO steps after ``rl_steps`` while training has not settled."""
    from memrl_demo.spent import StageClock, show_finished

    rl_name, summary_name = rl_stage(estimator, staleness is not None)
    asked = {"seed": seed, "estimator": estimator, "requested_rl_steps": rl_steps,
             **({} if staleness is None else {"max_staleness": staleness})}
    done = show_finished(out, summary_name, rl_name, console, _headline, **asked)
    if done is not None:  # re-running a finished demo shows its result; re-evaluating would only cost time
        return done
    clock = StageClock(out)
    with clock.stage("warm_start"):
        sft_dir, tok, paths, held = warm_start(out, seed, console, scale)
    with clock.stage(rl_name):
        summary, curve = _rl(out, sft_dir, tok, paths, held, rl_steps, seed, console, scale, staleness, estimator,
                             settle)
    wall, cpu = clock.total("warm_start", rl_name)
    summary = {**summary, "seconds": wall, "cpu_seconds": cpu, "resumed": clock.resumed("warm_start", rl_name),
               **asked}
    with atomic_write(out / summary_name) as fh:
        json.dump(summary, fh, indent=2)
    _headline(console, summary, curve)
    return summary


def _headline(console: Console, summary: dict[str, Any], curve: Path) -> None:
    before, after = summary["heldout_before"], summary["heldout_after"]
    runs = " (all runs in this folder)" if summary.get("resumed") else ""
    console.print(f"\n[bold]held-out accuracy (docs ~3x longer than training): {before:.1f}% -> {after:.1f}% "
                  f"({after - before:+.1f} points)[/bold] in {summary['seconds']:.0f} s wall, "
                  f"{summary['cpu_seconds']:.0f} s CPU{runs}\nreward curve: {curve}")


def _rl(out: Path, sft_dir: Path, tok: Any, paths: dict[str, Path], held: list[Any], rl_steps: int, seed: int,
        console: Console, scale: DemoScale, staleness: int | None, estimator: str, settle: int
        ) -> tuple[dict[str, Any], Path]:
    """The RL stage from the warm start: (summary without its times, reward-curve PNG)."""
    from memrl.models.resolve import load_model
    from memrl.train.tracking import plot_run
    from memrl_demo.settle import train_until_settled

    before = asyncio.run(accuracy(load_model(str(sft_dir), device="cpu"), tok, held))
    console.print(f"held-out accuracy after the warm start: [bold]{before:.1f}%[/bold]")
    cfg = rl_config(out, sft_dir, paths, rl_steps, seed, scale, staleness, estimator)
    rl_dir = Path(cfg.trainer.output_dir)
    mode = "" if staleness is None else f", asynchronous with max staleness {staleness}"
    console.print(f"MemAgent RL ({estimator}): {counted(rl_steps, 'step')} x {scale.prompts_per_step} prompts x "
                  f"{scale.episodes_per_prompt} episodes{mode} (run folder {rl_dir})")
    trainer, extra = train_until_settled(cfg, console, settle)
    after = asyncio.run(accuracy(trainer.policy, tok, held))
    curve = plot_run(rl_dir, keys=("reward", "eval/accuracy", "response_tokens", "grad_norm"))
    summary = {"heldout_before": before, "heldout_after": after, "lift": after - before,
               "rl_steps": rl_steps + extra, "extra_rl_steps": extra, "heldout_docs": len(held),
               "warm_start_extra_rounds": _extra_rounds(sft_dir),
               "mode": "sync" if staleness is None else "async"}
    return summary, curve
