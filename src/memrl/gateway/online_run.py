"""The agent workflow's online mode: the run's long-lived endpoint, and one episode run by an external agent.

The session key authenticates agents for the whole run. It comes from ``$MEMRL_SESSION_KEY``, or
is made here and printed once on the terminal (stderr); it is never written to the run's files
(the config dump, metrics, ``online.json``), which are shared more widely than the terminal.
``RUN/online.json`` says where the endpoint is, so a script started beside the run can find it.

An episode waits for an agent as long as it takes (the run has nothing else to do with it; a
stopping run cuts it after ``trainer.stop_grace_s``); once handed out, it has
``episode_timeout_s`` to get its reward, or it is dropped: it fails like a program that hung,
and its GRPO group goes on without it (the group's other episodes are normalised among
themselves; a group left with one episode teaches nothing).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from typing import Any

from memrl.gateway.online import OnlineEpisodes
from memrl.io.endpoint_file import write_address
from memrl.gateway.online_rewards import Outcome
from memrl.gateway.server import Gateway
from memrl.gateway.sessions import CallSettings, Session

KEY_ENV = "MEMRL_SESSION_KEY"


class OnlineEpisodeError(RuntimeError):
    """An online episode that ends without a reward (dropped after its timeout); only that episode fails."""


def open_online_gateway(options: Any, config: Any) -> Gateway:
    """The run's gateway with ``/rl/*`` on ``options.host:options.port``; says where, and with which key."""
    key = os.environ.get(KEY_ENV) or "sk-rl-" + secrets.token_urlsafe(24)
    try:
        gateway = Gateway(options.served_name, host=options.host, port=options.port, online=OnlineEpisodes(key))
    except ValueError as exc:
        raise ValueError(str(exc).replace("--port", "workflow.options.port").replace("--host", "workflow.options.host")
                         ) from None
    episodes = f"http://{options.host}:{gateway.port}/rl/episodes"
    shown = f"${KEY_ENV}" if os.environ.get(KEY_ENV) else key
    print(f"memrl online: agents ask for episodes with POST {episodes} ('Authorization: Bearer {shown}')",
          file=sys.stderr, flush=True)
    run_dir = getattr(getattr(config, "trainer", None), "output_dir", None)
    if run_dir is not None:
        path = write_address(run_dir, {"url": gateway.url, "episodes": f"{gateway.url}/rl/episodes",
                                       "status": f"{gateway.url}/rl/status", "host": options.host,
                                       "port": gateway.port, "key_env": KEY_ENV})
        gateway.address_file = path
    return gateway


async def _claimed_unless_stopping(claimed: asyncio.Future[float]) -> None:
    """Wait for an agent to take the episode. Once the run is asked to stop, an episode no agent has taken ends
    at once: the stop's grace (trainer.stop_grace_s) is for work in progress, and an unclaimed episode has none
    (a Ctrl-C before any agent connected waited 30 s, then filed every waiting episode as a failure)."""
    from memrl.train.rollout import EpisodeStopped
    from memrl.train.signals import stop_requested_at

    while not claimed.done():
        if stop_requested_at() is not None:
            raise EpisodeStopped("the run is stopping and no agent had taken this episode")
        await asyncio.wait({claimed}, timeout=0.5)
    claimed.result()


async def run_online(ep: Any, gateway: Gateway, settings: CallSettings, timeout_s: float) -> tuple[Outcome, Session]:
    """Offer ``ep`` to the next agent that asks; its posted outcome, once it comes within ``timeout_s``."""
    online = gateway.online
    if online is None:
        raise OnlineEpisodeError("workflow.options.mode online needs the run's gateway (memrl train / memrl eval, "
                                 "or services=workflow.build_services(config))")
    loop = asyncio.get_running_loop()
    with gateway.episode(ep, settings) as endpoint:
        record = online.offer(endpoint.session)
        offered = loop.time()
        try:
            await _claimed_unless_stopping(record.claimed)
            started = loop.time()
            ep.metric("online_wait_s", started - offered)
            try:
                async with asyncio.timeout(timeout_s) as scope:
                    outcome = await asyncio.shield(record.outcome)
            except TimeoutError:
                if not scope.expired():
                    raise  # the run's own deadline (it is stopping), not this episode's
                if online.expire(record):
                    raise OnlineEpisodeError(f"online episode {record.id}: no reward came within {timeout_s:g} s of "
                                             "its hand-out (workflow.options.episode_timeout_s); dropped") from None
                outcome = await record.outcome  # the reward came as the time ran out: it counts
        finally:
            online.withdraw(record)
    ep.metric("online_agent_s", loop.time() - started)
    return outcome, endpoint.session
