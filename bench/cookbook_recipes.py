"""tinker-cookbook's ``sl_loop``, ``rl_loop`` and multi-turn recipes, unchanged, against ``memrl tinker`` locally.

The recipes are run as their own modules (``python -m tinker_cookbook.recipes.sl_loop key=value ...``)
with only their documented chz arguments; nothing of the cookbook is edited or imported here. What
they would fetch from the hub is supplied locally, by their own lookup paths:

* **Data.** ``sl_loop`` calls ``datasets.load_dataset("HuggingFaceH4/no_robots")`` and ``rl_loop``
  ``load_dataset("openai/gsm8k", "main")``. With ``HF_DATASETS_OFFLINE=1`` the datasets library
  answers those names from its cache (``HF_DATASETS_CACHE/<org>___<name>/<config>/<version>/<hash>/``,
  an Arrow file per split and ``dataset_info.json``), so this script writes that layout under
  ``WORK/hf_datasets`` from local data with the columns the recipes read: ``messages`` for SL
  (a copy task: "Repeat after me: <sentence>" -> the sentence, sentences from ``shared/data``'s
  Wikipedia paragraphs), ``question``/``answer`` for RL (one-digit additions in GSM8K's
  ``... #### N`` answer format; the recipe's reward wants ``\\boxed{N}``).
* **Model name.** The recipe passes ``model_name`` to the cookbook's renderer table (which knows only
  names like ``meta-llama/Llama-3.2-1B``) and to ``get_tokenizer``, which loads a *local folder* of
  that name before trying the hub. So ``WORK/meta-llama/Llama-3.2-1B`` is a symlink to the served
  model (SmolLM2-135M-Instruct by default) and the recipe runs with ``cwd=WORK``: its tokenizer is
  the served model's, and the renderer is the table's ``role_colon`` (``User: ...\\n\\nAssistant:``).
  The server is started on the same path, so client and server agree on every token id.
* **Multi-turn.** ``multiplayer_rl.guess_number`` (guess a hidden integer in [0, 1024) in up to 10
  turns, told "Too low"/"Too high"; reward 1 for the right number, -1 for a reply not of the form
  ``Guess: N``) needs no data set. Its command line has no ``base_url``, so the SDK's own
  ``TINKER_BASE_URL`` points it at the server, and ``renderer_name=role_colon`` replaces its Qwen
  renderer; it trains through the cookbook's ``rl.train`` (``importance_sampling``, LoRA rank 32).

Run it with an interpreter that has memrl, ``tinker`` and tinker-cookbook (0.6.1 pins
``tml-renderers>=0.4.1``, which is not on PyPI here, so it is installed with ``--no-deps``: see
docs/guides/tinker.md, "Running the cookbook"); the server runs under the same interpreter. Prints the loss at the first and
last step of ``sl_loop`` and the reward of every ``rl_loop`` step, read from the recipes' own
``metrics.jsonl``.

    .venv-tinker/bin/python bench/cookbook_recipes.py
    .venv-tinker/bin/python bench/cookbook_recipes.py --recipes rl --rl-steps 10 --rl-loss cispo
    .venv-tinker/bin/python bench/cookbook_recipes.py --model tiny --recipes sl rl guess
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ALIAS = "meta-llama/Llama-3.2-1B"  # a role_colon base model in the cookbook's table (model_info.py)
API_KEY = "tml-memrl-local"  # the SDK requires the tml- prefix


def write_cached_dataset(cache: Path, repo_id: str, config: str, rows: list[dict[str, Any]]) -> Path:
    """One ``train`` split in the datasets cache layout that ``load_dataset(repo_id, config)`` reads offline."""
    import datasets
    from datasets.arrow_writer import ArrowWriter
    from datasets.naming import camelcase_to_snakecase

    org, name = repo_id.split("/")
    name = camelcase_to_snakecase(name)
    folder = cache / f"{org}___{name}" / config / "0.0.0" / "memrl-local"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    ds = datasets.Dataset.from_list(rows)
    with ArrowWriter(features=ds.features, path=str(folder / f"{name}-train.arrow")) as writer:
        writer.write_table(ds.data.table)
        n, nbytes = writer.finalize()
    splits = datasets.SplitDict(dataset_name=name)
    splits.add(datasets.SplitInfo(name="train", num_bytes=nbytes, num_examples=n, dataset_name=name))
    info = datasets.DatasetInfo(features=ds.features, dataset_name=name, config_name=config, splits=splits)
    info.write_to_directory(str(folder))
    return folder


def copy_task_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """No Robots' shape (``messages``): repeat a Wikipedia sentence, a task whose NLL visibly falls in a few steps."""
    src = Path(os.environ.get("MEMRL_SHARED_DATA", ROOT.parent / "shared" / "data")) / "wiki_paragraphs.jsonl"
    if not src.is_file():
        raise SystemExit(f"{src} is missing: the SL data is built from it (set MEMRL_SHARED_DATA)")
    sentences = []
    for line in src.read_text(encoding="utf-8").splitlines():
        for s in json.loads(line)["text"].split(". "):
            if 40 <= len(s) <= 120:
                sentences.append(s.rstrip(".") + ".")
    rng = random.Random(seed)
    picked = rng.sample(sentences, n)
    return [{"messages": [{"role": "user", "content": f"Repeat after me: {s}"},
                          {"role": "assistant", "content": s}]} for s in picked]


def addition_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """GSM8K's shape (``question``, ``answer`` ending ``#### N``): one-digit additions a 135M model sometimes gets."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        rows.append({"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"})
    return rows


def prepare(work: Path, model: str, sl_rows: int, rl_rows: int, seed: int) -> Path:
    """The datasets cache and the model-name symlink under ``work``; returns the served model folder."""
    from memrl.models.resolve import resolve_model_path

    path = Path(resolve_model_path(model)).resolve()
    cache = work / "hf_datasets"
    write_cached_dataset(cache, "HuggingFaceH4/no_robots", "default", copy_task_rows(sl_rows, seed))
    write_cached_dataset(cache, "openai/gsm8k", "main", addition_rows(rl_rows, seed))
    link = work / ALIAS
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(path, target_is_directory=True)
    return path


def start_server(work: Path, port: int, log: Path) -> subprocess.Popen:
    """``memrl tinker`` on the aliased folder (so its tokenizer is the client's), ready when /api/v1/healthz answers."""
    import httpx

    cmd = [sys.executable, "-m", "memrl.cli.main", "tinker", "--model", ALIAS, "--port", str(port),
           "--host", "127.0.0.1", "--api-key", API_KEY, "--state-dir", str(work / "state")]
    print("$", " ".join(cmd), f"  (cwd {work})", flush=True)
    out = log.open("w")
    proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=_env(work))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"memrl tinker exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code < 500:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.terminate()
    raise SystemExit(f"memrl tinker did not answer in 300 s; see {log}")


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_CACHE=str(work / "hf_datasets"), TINKER_API_KEY=API_KEY,
               TOKENIZERS_PARALLELISM="false", TINKER_COOKBOOK_RUNS_DIR=str(work / "runs"))
    return env


def run_recipe(python: str, work: Path, recipe: str, args: dict[str, Any],
               env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run ``tinker_cookbook.recipes.<recipe>`` with chz ``key=value`` arguments; its metrics.jsonl rows."""
    name = recipe.split(".")[-2] if recipe.endswith(".train") else recipe
    log_path = work / "runs" / name
    if log_path.exists():
        shutil.rmtree(log_path)  # the recipes resume from a log_path's checkpoints
    argv = [python, "-m", f"tinker_cookbook.recipes.{recipe}", f"log_path={log_path}",
            *(f"{k}={v}" for k, v in args.items())]
    print("$", " ".join(argv), flush=True)
    t0 = time.monotonic()
    with (work / f"{name}.log").open("w") as out:
        rc = subprocess.run(argv, cwd=work, env=_env(work) | (env or {}), stdout=out,
                            stderr=subprocess.STDOUT).returncode
    print(f"  exit {rc} in {time.monotonic() - t0:.0f} s (log {work / f'{name}.log'})", flush=True)
    rows_file = log_path / "metrics.jsonl"
    rows = [json.loads(x) for x in rows_file.read_text().splitlines()] if rows_file.is_file() else []
    if rc != 0:
        tail = (work / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
        print("  " + "\n  ".join(tail))
    return rows


def report(recipe: str, rows: list[dict[str, Any]]) -> None:
    """The numbers the docs quote: SL loss at the first and last step; RL reward per step."""
    if not rows:
        print(f"{recipe}: no metrics")
        return
    if recipe == "sl_loop":
        nll = [r["train_mean_nll"] for r in rows if "train_mean_nll" in r]
        print(f"sl_loop: {len(nll)} steps, train_mean_nll {nll[0]:.3f} -> {nll[-1]:.3f} "
              f"(per step: {', '.join(f'{x:.3f}' for x in nll)})")
    else:
        key = "env/all/reward/total" if recipe == "guess_number" else "reward/total"
        rewards = [r[key] for r in rows if key in r]
        print(f"{recipe}: {len(rewards)} steps, {key} per step: {', '.join(f'{x:.3f}' for x in rewards)}"
              f" (first half mean {_mean(rewards[: len(rewards) // 2]):.3f},"
              f" second half {_mean(rewards[len(rewards) // 2:]):.3f})")
    seconds = [r["time_total"] if "time_total" in r else r.get("time/total") for r in rows]
    seconds = [s for s in seconds if s is not None]
    if seconds:
        print(f"  seconds per step: median {sorted(seconds)[len(seconds) // 2]:.1f}")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="memrl model alias or folder")
    p.add_argument("--cookbook-python", default=sys.executable,
                   help="the interpreter that runs the recipes (default: this one)")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "tinker_cookbook")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--recipes", nargs="+", choices=["sl", "rl", "guess"], default=["sl", "rl"],
                   help="guess: multiplayer_rl.guess_number, the multi-turn recipe (no data set)")
    p.add_argument("--sl-steps", type=int, default=12)
    p.add_argument("--sl-batch", type=int, default=8)
    p.add_argument("--sl-lr", type=float, default=1e-3)
    p.add_argument("--rl-steps", type=int, default=10)
    p.add_argument("--rl-batch", type=int, default=4, help="problems per step")
    p.add_argument("--rl-group", type=int, default=8, help="samples per problem")
    p.add_argument("--rl-lr", type=float, default=4e-4)
    p.add_argument("--rl-loss", default="importance_sampling",
                   choices=["importance_sampling", "cispo"], help="rl_loop's loss_fn (its default, "
                   "stable_reinforce, is refused by memrl tinker)")
    p.add_argument("--rl-max-tokens", type=int, default=48)
    p.add_argument("--guess-steps", type=int, default=6)
    p.add_argument("--guess-batch", type=int, default=2, help="games (hidden numbers) per step")
    p.add_argument("--guess-group", type=int, default=4, help="plays of each game per step")
    p.add_argument("--guess-lr", type=float, default=4e-4)
    p.add_argument("--guess-max-tokens", type=int, default=16, help="tokens per turn")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    served = prepare(work, a.model, sl_rows=a.sl_steps * a.sl_batch, rl_rows=a.rl_steps * a.rl_batch, seed=a.seed)
    print(f"served model {served} as {ALIAS}; data in {work / 'hf_datasets'}", flush=True)
    server = start_server(work, a.port, work / "server.log")
    common = {"base_url": f"http://127.0.0.1:{a.port}", "model_name": ALIAS, "lora_rank": a.lora_rank,
              "save_every": 0}
    try:
        if "sl" in a.recipes:
            rows = run_recipe(a.cookbook_python, work, "sl_loop", {
                **common, "batch_size": a.sl_batch, "learning_rate": a.sl_lr, "max_length": 256})
            report("sl_loop", rows)
        if "rl" in a.recipes:
            rows = run_recipe(a.cookbook_python, work, "rl_loop", {
                **common, "batch_size": a.rl_batch, "group_size": a.rl_group, "learning_rate": a.rl_lr,
                "max_tokens": a.rl_max_tokens, "loss_fn": a.rl_loss})
            report("rl_loop", rows)
        if "guess" in a.recipes:
            rows = run_recipe(a.cookbook_python, work, "multiplayer_rl.guess_number.train", {
                "model_name": ALIAS, "renderer_name": "role_colon", "batch_size": a.guess_batch,
                "group_size": a.guess_group, "learning_rate": a.guess_lr, "max_tokens": a.guess_max_tokens,
                "max_steps": a.guess_steps, "eval_every": 0, "save_every": 0,
                "behavior_if_log_dir_exists": "delete"}, env={"TINKER_BASE_URL": common["base_url"]})
            report("guess_number", rows)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
