"""The future store's long poll: answered when the job finishes, released when draining, timings recorded."""

from __future__ import annotations

import asyncio

import pytest

from memrl.tinker.futures import FutureStore, timing_line


def test_a_held_poll_is_answered_by_the_resolve_not_by_its_timeout() -> None:
    async def go() -> tuple[object, int]:
        store = FutureStore()
        rid, _ = store.create("forward_backward")
        store.started(rid)
        poll = asyncio.ensure_future(store.wait(rid, 3600.0))
        await asyncio.sleep(0)
        store.resolve(rid, json={"ok": 1})
        # If the resolve did not wake the poll, this wait_for would raise long before the hour is up.
        entry = await asyncio.wait_for(poll, 60.0)
        return entry, len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

    entry, leftover = asyncio.run(go())
    assert entry is not None and entry.json == {"ok": 1}
    assert leftover == 0  # the poll's waiter is gone with it
    assert entry.created <= entry.started <= entry.finished <= entry.retrieved_at


def test_pending_poll_gives_up_on_timeout_or_stop_and_a_done_one_answers_even_when_stopping() -> None:
    async def go() -> None:
        store = FutureStore()
        rid, _ = store.create("optim_step")
        assert await store.wait(rid, 0.01) is None
        assert await asyncio.wait_for(store.wait(rid, 3600.0, stop=lambda: True), 60.0) is None
        store.fail(rid, "bad", "user")
        entry = await store.wait(rid, 3600.0, stop=lambda: True)
        assert entry is not None and entry.error == "bad"
        with pytest.raises(KeyError):
            await store.wait("nope", 1.0)

    asyncio.run(go())


def test_retrieval_reports_its_timing_line_once() -> None:
    seen: list[str] = []

    async def go() -> None:
        store = FutureStore()
        store.on_retrieved = lambda rid, entry: seen.append(timing_line(rid, entry))
        rid, _ = store.create("sample")
        store.started(rid)
        store.resolve(rid, proto=b"x")
        await store.wait(rid, 1.0)
        await store.wait(rid, 1.0)

    asyncio.run(go())
    assert len(seen) == 1
    assert seen[0].startswith("memrl tinker: sample ") and "queued" in seen[0] and "fetched" in seen[0]
