"""τ²-bench's ``telecom`` domain: a dual-control tech-support domain (agent back office + user's phone).

The agent's tools (``TelecomTools``) work on the carrier's records; the user's
tools (``TelecomUserTools``) work on the user's phone. After every call the
line's state is synchronised into the user's surroundings
(``TelecomTools.sync_user_state``). Data and policies are the user's copy of
τ²-bench's ``telecom`` folder; ``compose_policy`` builds the agent's system
prompt the way τ²-bench does (main policy plus the tech-support manual).
"""

from __future__ import annotations

from memrl.envs.domains.telecom.agent_tools import TelecomTools
from memrl.envs.domains.telecom.device import TelecomUserTools
from memrl.envs.domains.telecom.policy import compose_policy

__all__ = ["TelecomTools", "TelecomUserTools", "compose_policy"]
