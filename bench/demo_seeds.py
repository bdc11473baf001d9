"""The demo over several seeds: held-out accuracy before -> after GRPO, the lift, wall time, min/median.

A result that depends on learning is reported over seeds, never one run. Each seed runs the real
command (``memrl demo --seed S --out WORK/seedS --fresh``) in its own process, one at a time, and
its ``summary.json`` is read back; nothing is recomputed here.

    python bench/demo_seeds.py --seeds 0 1 2 3 4                   # the needle demo (README table)
    python bench/demo_seeds.py --task tools --seeds 0 1 2           # the tool-agent demo
    python bench/demo_seeds.py --seeds 0 1 2 -- --async             # the needle demo, asynchronous GRPO stage
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def run_seed(task: str, seed: int, work: Path, extra: list[str]) -> dict[str, float]:
    asynchronous = "--async" in extra  # the demo writes summary_async.json (and rl_async/) for that stage
    out = work / f"{task}_seed{seed}{'_async' if asynchronous else ''}"
    cmd = [sys.executable, "-m", "memrl.cli.main", "demo", "--task", task, "--seed", str(seed), "--out", str(out),
           "--fresh", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"seed {seed}: memrl demo exited {proc.returncode}: {tail}")
    return json.loads((out / ("summary_async.json" if asynchronous else "summary.json")).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="needle", choices=("needle", "tools"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--work", type=Path, default=Path("runs/demo_seeds"))
    ap.add_argument("extra", nargs="*", help="further memrl demo flags, after --")
    args = ap.parse_args()
    rows = []
    print(f"{'seed':>4}  {'before':>7}  {'after':>7}  {'lift':>7}  {'wall s':>7}  {'CPU s':>7}  {'extra SFT rounds':>16}"
          f"  {'GRPO steps':>10}", flush=True)
    for seed in args.seeds:
        s = run_seed(args.task, seed, args.work, args.extra)
        before, after = s["heldout_before"], s["heldout_after"]
        rows.append((before, after, after - before, s["seconds"], s["cpu_seconds"]))
        print(f"{seed:>4}  {before:6.1f}%  {after:6.1f}%  {after - before:+6.1f}  {s['seconds']:7.0f}  "
              f"{s['cpu_seconds']:7.0f}  {s.get('warm_start_extra_rounds', '-'):>16}  {s.get('rl_steps', '-'):>10}",
              flush=True)  # '-': no check (tools)
    for name, fn in (("min", min), ("median", statistics.median)):
        c = [fn(r[i] for r in rows) for i in range(5)]
        print(f"{name:>6}  {c[0]:5.1f}%  {c[1]:6.1f}%  {c[2]:+6.1f}  {c[3]:7.0f}  {c[4]:7.0f}")


if __name__ == "__main__":
    main()
