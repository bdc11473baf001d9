"""``python -m memrl``: the ``memrl`` command, for environments whose scripts folder is not on PATH."""

from memrl.cli.main import main

main()
