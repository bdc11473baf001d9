"""Where a ``memrl tinker`` training step's time goes: server compute vs the client's wall time per step.

Starts ``memrl tinker --access-log`` as a subprocess (its own process, as a user runs it) and drives it
with the official ``tinker`` SDK the way the cookbook's ``sl_loop`` does: per step, ``forward_backward``
(cross_entropy) and ``optim_step`` submitted back to back, then both results awaited. For every step it
prints the client's wall time next to what the server's timing lines say about the same two requests:
milliseconds queued, running, and between finishing and being fetched by the client's poll. The last
one is the overhead of the futures protocol: if it is large, the client is sleeping while the result is
ready. It also counts the SDK's "Retrying request ... because of try_again" warnings (one per poll the
server answered without a result).

    .venv/bin/python bench/tinker_latency.py --model smollm2-135m-instruct --steps 6
    .venv/bin/python bench/tinker_latency.py --model tiny --batch 8 --tokens 226

No number here is asserted anywhere; on a shared machine the absolute times are upper bounds, and the
comparison that matters is within one run (server ran vs client wall).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

API_KEY = "tml-memrl-latency"
LINE = re.compile(r"memrl tinker: (\w+) (\S+): queued (\S+) ms, ran (\S+) ms, fetched (\S+) ms after")


class TryAgainCounter(logging.Handler):
    """Counts the SDK's try_again warnings (tinker.lib.api_future_impl logs one per unanswered poll)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "try_again" in record.getMessage():
            self.count += 1


def start_server(model: str, port: int, state: Path, lines: list[str]) -> subprocess.Popen:
    """``memrl tinker --access-log``; its stderr is collected into ``lines`` by a reader thread."""
    import httpx

    cmd = [sys.executable, "-m", "memrl.cli.main", "tinker", "--model", model, "--port", str(port),
           "--api-key", API_KEY, "--state-dir", str(state), "--access-log"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("memrl tinker exited:\n" + "".join(lines[-20:]))
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("memrl tinker did not start in 300 s")


def batch(vocab: int, n: int, tokens: int, seed: int) -> list[Any]:
    """``n`` datums of ``tokens`` random ids, loss on the second half (an SFT-shaped batch)."""
    import numpy as np
    import tinker

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(10, vocab - 10, size=tokens + 1).tolist()
        weights = [0.0] * (tokens // 2) + [1.0] * (tokens - tokens // 2)
        out.append(tinker.Datum(model_input=tinker.ModelInput.from_ints(ids[:-1]),
                                loss_fn_inputs={"target_tokens": ids[1:], "weights": weights}))
    return out


def run_steps(url: str, steps: int, n: int, tokens: int, counter: TryAgainCounter) -> list[dict[str, float]]:
    """The sl_loop pattern; per step the client's wall seconds and how many try_again polls it saw."""
    import tinker

    sc = tinker.ServiceClient(base_url=url, api_key=API_KEY)
    rest = tinker.RestClient(base_url=url, api_key=API_KEY)
    base = rest.get_server_capabilities().result().supported_models[0].model_name
    tc = sc.create_lora_training_client(base_model=base, rank=8).result()
    vocab = len(tc.get_tokenizer())
    rows = []
    for step in range(steps):
        data = batch(vocab, n, tokens, step)
        before = counter.count
        t0 = time.monotonic()
        fb = tc.forward_backward(data, "cross_entropy")
        opt = tc.optim_step(tinker.AdamParams(learning_rate=1e-4))
        fb.result()
        t1 = time.monotonic()
        opt.result()
        t2 = time.monotonic()
        rows.append({"fwd_bwd_s": t1 - t0, "step_s": t2 - t0, "try_again": counter.count - before})
    sc.close("success").result(timeout=30)
    return rows


def server_rows(lines: list[str]) -> dict[str, list[tuple[float, float, float]]]:
    """Per request kind, in order: (queued, ran, fetched-after) milliseconds from the server's timing lines."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for line in lines:
        m = LINE.search(line)
        if m:
            kind = m.group(1)
            out.setdefault(kind, []).append(tuple(float(x) if x != "-" else float("nan") for x in m.group(3, 4, 5)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=226)
    p.add_argument("--port", type=int, default=8767)
    p.add_argument("--state", type=Path, default=Path("runs/tinker_latency"))
    a = p.parse_args()
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    counter = TryAgainCounter()
    logging.getLogger("tinker").addHandler(counter)
    lines: list[str] = []
    proc = start_server(a.model, a.port, a.state, lines)
    try:
        rows = run_steps(f"http://127.0.0.1:{a.port}", a.steps, a.batch, a.tokens, counter)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    srv = server_rows(lines)
    fb, opt = srv.get("forward_backward", []), srv.get("optim_step", [])
    print(f"model {a.model}, {a.batch} datums x {a.tokens} tokens, {a.steps} steps; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("step  client_step_ms  client_fwdbwd_ms  server_fwdbwd_ran_ms  server_optim_ran_ms  "
          "queued_ms(fb,opt)  fetched_after_ms(fb,opt)  try_again")
    for i, r in enumerate(rows):
        f = fb[i] if i < len(fb) else (float("nan"),) * 3
        o = opt[i] if i < len(opt) else (float("nan"),) * 3
        print(f"{i:4d}  {r['step_s'] * 1000:14.0f}  {r['fwd_bwd_s'] * 1000:16.0f}  {f[1]:20.0f}  {o[1]:19.0f}  "
              f"{f[0]:7.0f},{o[0]:7.0f}  {f[2]:11.0f},{o[2]:11.0f}  {r['try_again']:9d}")
    wall = sum(r["step_s"] for r in rows) * 1000
    ran = sum(x[1] for x in fb[: len(rows)]) + sum(x[1] for x in opt[: len(rows)])
    print(f"total: client {wall:.0f} ms, server ran {ran:.0f} ms, overhead {wall - ran:.0f} ms "
          f"({(wall - ran) / max(1, len(rows)):.0f} ms per step)")


if __name__ == "__main__":
    main()
