"""``memrl eval`` on one file of samples (``--data FILE`` or ``data.eval_file``): any workflow, yours too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from memrl.cli.eval_common import prepare_out, run_with_progress


def eval_file(cfg: Any, data: Path | None, out: Path, restart: bool, console: Console, rollouts: bool,
              max_samples: int | None = None) -> None:
    """Mean reward, accuracy and pass^k of the config's workflow over the file's samples (the first
    ``max_samples``)."""
    from memrl.data.outdir import refuse_foreign
    from memrl.engines.factory import build_engine
    from memrl.eval.files import data_record
    from memrl.eval.workflow_eval import WORKFLOW_EVAL_OUTPUTS, eval_samples, run_workflow_eval
    from memrl.models.resolve import config_tokenizer
    from memrl.workflows import build_workflow

    if data is not None:
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"eval_file": str(data)})})
    # what a run keeps in its folder (an online gateway's online.json) goes to --out, not to runs/default
    cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"output_dir": str(out)})})
    refuse_foreign(out, ["online.json"])  # an online workflow writes its endpoint there as it starts
    workflow = build_workflow(cfg)
    try:
        samples = eval_samples(cfg, workflow, max_samples)  # before any model loads: a bad row costs nothing
        source = Path(cfg.data.eval_file)  # results of another file (or of this one, changed) must not mix in
        written = [n for n in ("online.json",) if (out / n).exists()]  # the online workflow's, just written
        prepare_out(out, restart, WORKFLOW_EVAL_OUTPUTS, cfg, data_record(source) if source.is_file() else None,
                    written)
        tokenizer = config_tokenizer(cfg.model)
        eng = build_engine(cfg)
        console.print(f"eval {cfg.workflow.name} · model {cfg.model.path} · engine {cfg.engine.kind} · "
                      f"{cfg.data.eval_file} · {cfg.eval.repeats} repeat(s)", highlight=False)
        results = run_with_progress(console, out, eng, lambda started, advance: run_workflow_eval(
            cfg, eng, tokenizer, workflow, out, on_start=started, on_episode=advance, rollouts=rollouts,
            samples=samples))
    finally:
        workflow.close()
    passes = " ".join(f"pass^{k} {v:.3f}" for k, v in results["pass_hat_k"].items())
    console.print(f"mean reward {results['mean_reward']} · accuracy {results['accuracy']}% · {passes} · "
                  f"{results['failed']} failed; results in {out / 'results.md'}", highlight=False)
