"""A free TCP port for a rendezvous (torch.distributed, a weight-transfer group).

Both the trainer's process groups (:mod:`memrl.dist`) and the engines' weight-sync groups need
one, so it sits in the bottom layer rather than in either.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS reports free on every interface (other nodes may connect to it)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
