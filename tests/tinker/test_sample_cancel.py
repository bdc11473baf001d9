"""A sample the client gave up on stops decoding, so the one worker serves the next request.

The server advertises ``sample_cancel_enabled``: the SDK then sends ``cancel_future`` when a script
stops waiting for a sample, and counts on it to stop the work. Only queued samples were dropped; a
running one decoded to its end, and one with no ``max_tokens`` on ``tiny`` (a 131,072-token window)
held every other client for over ten minutes, even after its client's session ended.
"""

from __future__ import annotations

import asyncio

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.tinker.conftest import base_model, service_client  # noqa: E402

PROMPT = types.ModelInput.from_ints([5, 6, 7, 8])
ENDLESS = types.SamplingParams(max_tokens=None, stop=[], temperature=1.0)  # to the window's end: many minutes
TWO = types.SamplingParams(max_tokens=2, stop=[], seed=0)  # no EOS stop: ``tiny`` samples its EOS id now and then
pytestmark = pytest.mark.timeout(180)


def test_a_sample_abandoned_by_its_script_stops_decoding(server, client):
    async def go():
        samp = await client.create_sampling_client(base_model=base_model(server))
        endless = samp.sample(PROMPT, 1, ENDLESS)
        with pytest.raises((asyncio.TimeoutError, TimeoutError)):
            await endless.result_async(timeout=3)  # the SDK sends /api/v1/cancel_future
        return await samp.sample(PROMPT, 1, TWO).result_async(timeout=60)

    after = asyncio.run(go())
    assert len(after.sequences[0].tokens) == 2
    assert not server.svc.worker.running


def test_a_closed_session_stops_its_samples(server, client):
    gone = service_client(server.url)
    samp = gone.create_sampling_client(base_model=base_model(server)).result(timeout=60)
    endless = samp.sample(PROMPT, 1, ENDLESS)
    with pytest.raises(Exception):  # noqa: B017 - still decoding: the wait only times out
        endless.result(timeout=3)
    gone.close("success").result(timeout=30)  # its session ends: its sample must not hold the worker
    mine = client.create_sampling_client(base_model=base_model(server)).result(timeout=60)
    after = mine.sample(PROMPT, 1, TWO).result(timeout=60)
    assert len(after.sequences[0].tokens) == 2
