"""Up-front check that the paragraph pool can fill a ``--train-tokens`` budget.

Filling a context stops when no unused paragraph fits, so a pool too small for the budget
used to produce contexts far shorter than asked (6K tokens for ``--train-tokens 1m``) with
nothing but the token report to notice. ``--docs`` already fails before writing when the pool
is too small; this does the same for token budgets and names what the pool can give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrl.data.errors import DataError

if TYPE_CHECKING:
    from memrl.data.synth import Synthesizer


def check_token_budget(synth: Synthesizer, budget: int) -> None:
    """Raise :class:`DataError` for the first question whose distinct paragraphs total under ``budget``.

    A question can use its own paragraphs (gold, plus its distractors when they are included)
    and every pool paragraph that is not its own. Each paragraph is costed as a numbered
    document (separator + ``Document k:`` header + text), with the header of document 2: the
    headers of later documents are no shorter, so the sum is a lower bound of what the pool
    gives and the check never rejects a budget that could be filled. Counting stops as soon
    as the pool clearly suffices for every question, so a large pool costs little.
    """
    if synth.allow_repeats or not synth.questions:
        return
    pool = synth.pool
    cost = lambda pid: synth._doc_tokens(2, pid)  # noqa: E731
    own_cost = {q.row: sum(cost(p) for p in q.own) for q in synth.questions}
    usable_own = {
        q.row: sum(cost(p) for p in (list(q.gold) + (list(q.own_distractors) if synth.include_question_distractors
                                                      else [])))
        for q in synth.questions
    }
    # Enough for everyone once the pool, minus the largest own share, covers the budget.
    need = budget + max(own_cost.values())
    total = 0
    for pid in range(len(pool)):
        total += cost(pid)
        if total >= need:
            return
    for q in synth.questions:
        available = total - own_cost[q.row] + usable_own[q.row]
        if available < budget:
            raise DataError(
                synth.source, q.row, "context",
                f"--train-tokens {budget:,} asks for contexts of {budget:,} tokens but the paragraph pool gives "
                f"at most about {available:,} tokens for this question ({len(pool):,} paragraphs); add distractor "
                "paragraphs with --pool FILE, lower --train-tokens, or pass --allow-repeats",
            )
