"""The files memrl writes and reads back: atomic writes, rollout records, metrics rows.

The bottom layer (beside :mod:`memrl.types`): training writes these files and eval, ``memrl view``
and ``memrl sft`` read them, so the code lives below all of them rather than in ``memrl.train``.
It imports nothing from memrl but :mod:`memrl.types` / :mod:`memrl.packed`.
"""
