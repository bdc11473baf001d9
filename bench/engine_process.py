"""An HF engine in a child process of its own, reached over a pipe: the lean stand-in for a remote engine.

The child loads the model, pins itself to one core with one torch thread and runs memrl's
:class:`~memrl.engines.hf.HFEngine` on its own event loop (its own interpreter: its compute
never takes the trainer's interpreter lock). The parent's :class:`ProcessEngine` has the
``Engine`` interface: ``generate`` sends ``(prompt ids, sampling params)`` and awaits the
``GenerationResult``; ``update_weights`` sends the state dict (``torch.save`` bytes, loaded
with ``weights_only=True``) and returns once the child has loaded it.

Why not a Ray replica (``memrl.dist.pool``): on a 2-core machine the engine's core is also its
host. A Ray actor call costs ~1 ms of Python on the actor's side and ~0.4 ms on the caller's,
more than the tiny model's own compute per request, so the replica's core saturates on
overhead and the trainer's interpreter spends a share of every step on the client. A pipe and
pickle cost a few tens of microseconds a request.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import multiprocessing as mp
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.engines.base import EngineDeadError, GenerationResult, SamplingParams


def _serve(conn: Any, model_path: str, max_batch_size: int, seed: int, core: int | None) -> None:
    """The child: one HF engine answering the pipe until told to close (or the parent goes away)."""
    if core is not None:
        os.sched_setaffinity(0, {core})
        # The engine's compute stands in for a device. On its core it yields to the trainer's host threads
        # (workflows, request client), which real hardware gives cores of their own: a host thread preempted
        # here while it holds the trainer's interpreter lock would stall the update on the other core.
        os.nice(19)
    import torch

    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    torch.set_num_threads(1)
    model = load_model(model_path, device="cpu")
    model.eval()
    pad = getattr(model.config, "pad_token_id", None)
    engine = HFEngine(model, pad_token_id=0 if pad is None else pad, max_batch_size=max_batch_size, seed=seed)
    asyncio.run(_answer(conn, engine))


async def _answer(conn: Any, engine: Any) -> None:
    import torch

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(kind: str, rid: int, payload: Any) -> None:
        try:
            if kind == "generate":
                reply: Any = await engine.generate(*payload)
            else:
                await engine.update_weights(torch.load(io.BytesIO(payload), weights_only=True))
                reply = None
            conn.send((rid, True, reply))
        except Exception as err:  # noqa: BLE001 (the caller raises it)
            conn.send((rid, False, f"{type(err).__name__}: {err}"))

    def start(msg: tuple[str, int, Any]) -> None:
        task = loop.create_task(handle(*msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def read() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = ("close", 0, None)
            if msg[0] == "close":
                loop.call_soon_threadsafe(done.set)
                return
            loop.call_soon_threadsafe(start, msg)

    threading.Thread(target=read, daemon=True).start()
    conn.send((0, True, os.getpid()))
    await done.wait()
    await engine.close()


class ProcessEngine:
    """The parent's side: the ``Engine`` protocol over the pipe to a :func:`_serve` child."""

    def __init__(self, model_path: str, *, max_batch_size: int, seed: int, core: int | None) -> None:
        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of the trainer's state is inherited
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, model_path, max_batch_size, seed, core), daemon=True)
        self.proc.start()
        child.close()
        self.ids = itertools.count(1)
        self.pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self.send_lock = threading.Lock()
        self.pid = self.conn.recv()[2]  # the child is ready (it has loaded the model)
        self.reader = threading.Thread(target=self._read, name="engine-process-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                rid, ok, payload = self.conn.recv()
            except (EOFError, OSError):
                break
            _answer_to(*self.pending.pop(rid), ok, payload)
        for loop, fut in list(self.pending.values()):  # the child is gone: nobody will answer these
            _answer_to(loop, fut, False, "the engine process exited")

    async def _call(self, kind: str, payload: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        rid = next(self.ids)
        self.pending[rid] = (loop, fut)
        with self.send_lock:
            self.conn.send((kind, rid, payload))
        return await fut

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        return await self._call("generate", (list(prompt_ids), params))

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        import torch

        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, buf)
        await self._call("weights", buf.getvalue())

    async def close(self) -> None:
        if self.proc.is_alive():
            with self.send_lock:
                self.conn.send(("close", 0, None))
            self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.terminate()
        self.conn.close()


def _answer_to(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], ok: bool, payload: Any) -> None:
    """Settle ``fut`` on its loop; a caller whose loop has closed (a run that ended) gave up on it."""
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_settle, fut, ok, payload)
        except RuntimeError:  # closed meanwhile
            pass


def _settle(fut: asyncio.Future[Any], ok: bool, payload: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(payload)
    else:
        fut.set_exception(EngineDeadError(payload) if "exited" in str(payload) else RuntimeError(payload))
