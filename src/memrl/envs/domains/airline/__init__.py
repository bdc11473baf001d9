"""τ²-bench's ``airline`` domain: flights, users and reservations of an airline's customer service.

The agent's tools are :class:`AirlineTools`; the user has none. The files are the user's copy of
τ²-bench's ``airline`` folder (``db.json``, ``tasks.json``, ``policy.md``, ``split_tasks.json``:
train 30 / test 20 / base 50). As in τ²-bench there is no solo mode: the agent talks to a user
simulator (``env.solo=false`` with ``env.user.model``), and ``new_env(solo=True)`` refuses.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from memrl.envs.domain import Domain, ToolDomain
from memrl.envs.domains.airline.tools import AirlineTools
from memrl.envs.environment import Environment

__all__ = ["AIRLINE", "AirlineDomain", "AirlineTools"]

NO_SOLO = ("Airline domain does not support solo mode (as in tau2-bench): set env.solo=false and a user "
           "simulator (env.user.model)")


@dataclasses.dataclass
class AirlineDomain(Domain):
    """The airline domain read from its files; environments are always dual-control."""

    def new_env(self, solo: bool = False) -> Environment:
        if solo:
            raise ValueError(NO_SOLO)
        return super().new_env(solo=False)


@dataclasses.dataclass(frozen=True)
class _AirlineSpec(ToolDomain):
    """:class:`ToolDomain` that hands back an :class:`AirlineDomain`."""

    def __call__(self, data_dir: str | Path | None = None,
                 tool_options: dict[str, Any] | None = None) -> AirlineDomain:
        base = super().__call__(data_dir, tool_options)
        return AirlineDomain(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})


AIRLINE = _AirlineSpec("airline", AirlineTools)
