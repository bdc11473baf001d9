"""``memrl demo``: the job ``make demo`` runs.

Until the RL trainer lands this runs the data pipeline end to end: long-context
synthesis from the HotpotQA sample in ``../shared/data`` with a token report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from memrl.cli.data import synth
from memrl.cli.errors import user_errors

DEFAULT_INPUT = Path("../shared/data/hotpotqa_dev_head53.json")


@user_errors
def demo(
    input: Optional[Path] = typer.Option(None, "--input", help="HotpotQA-schema questions "
                                         f"(default: $MEMRL_DEMO_DATA or {DEFAULT_INPUT})."),
    out: Path = typer.Option(Path("runs/demo/data"), "--out", help="Output folder."),
) -> None:
    """Run the demo: synthesize RULER-HQA-style files (50/100/200/400 docs + an 8K training file)."""
    path = input or Path(os.environ.get("MEMRL_DEMO_DATA", DEFAULT_INPUT))
    if not path.is_file():
        raise FileNotFoundError(f"demo data not found at {path}: pass --input FILE (HotpotQA JSON) "
                                "or set MEMRL_DEMO_DATA")
    synth(input=path, out=out, docs="50,100,200,400", train_tokens="8k", pool=[], tokenizer=None, seed=42,
          allow_repeats=False, question_distractors=True, fmt="json", max_samples=None)
