"""Atomic file writes now live in :mod:`memrl.io.atomic` (the bottom layer, so ``memrl.models`` may use them).

This name stays for the importers that have not moved yet; new code imports ``memrl.io.atomic``.
"""

from memrl.io.atomic import (  # noqa: F401  (re-exported)
    atomic_dir,
    atomic_path,
    atomic_write,
    remove_stale_temps,
    staging_dir,
    temp_name,
    temp_target,
)
