"""A tool domain of your own, outside memrl's source tree: a smart-home help desk.

``env.domain=smart_home:SmartHome`` (with this folder's parent on PYTHONPATH) loads it through
memrl's domain registry: :data:`SmartHome` declares the tools (:class:`HomeTools`) and the folder
of τ²-layout files (``files/``: policy, database, tasks, splits). Nothing in memrl is edited.
"""

from __future__ import annotations

from pathlib import Path

from memrl.envs.domain import ToolDomain
from smart_home.tools import HomeTools

SmartHome = ToolDomain("smart_home", HomeTools, folder=Path(__file__).parent / "files")

__all__ = ["HomeTools", "SmartHome"]
