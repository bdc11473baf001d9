"""Up-front check that the paragraph pool can fill a ``--train-tokens`` budget.

Filling a context stops when no unused paragraph fits, so a pool too small for the budget
used to produce contexts far shorter than asked (6K tokens for ``--train-tokens 1m``) with
nothing but the token report to notice. ``--docs`` already fails before writing when the pool
is too small; this does the same for token budgets and names what the pool can give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memrl.data.errors import DataError
from memrl.data.questions import Question


def check_token_budget(questions: Sequence[Question], pool_size: int, doc_tokens: Callable[[int], int], budget: int,
                       *, include_question_distractors: bool, source: str) -> None:
    """Raise :class:`DataError` for the first question whose distinct paragraphs total under ``budget``.

    A question can use its own paragraphs (gold, plus its distractors when they are included)
    and every pool paragraph that is not its own. ``doc_tokens(pid)`` costs paragraph ``pid`` as
    a numbered document (separator + ``Document k:`` header + text) with the header of document 2:
    the headers of later documents are no shorter, so the sum is a lower bound of what the pool
    gives and the check never rejects a budget that could be filled. Counting stops as soon
    as the pool clearly suffices for every question, so a large pool costs little. The caller
    skips the check when paragraphs may repeat. Takes the pieces rather than the synthesizer so
    that :mod:`memrl.data.synth` imports this module and not the other way round.
    """
    if not questions:
        return
    own_cost = {q.row: sum(doc_tokens(p) for p in q.own) for q in questions}
    def usable(q: Question) -> list[int]:
        return list(q.gold) + (list(q.own_distractors) if include_question_distractors else [])

    usable_own = {q.row: sum(doc_tokens(p) for p in usable(q)) for q in questions}
    # Enough for everyone once the pool, minus the largest own share, covers the budget.
    need = budget + max(own_cost.values())
    total = 0
    for pid in range(pool_size):
        total += doc_tokens(pid)
        if total >= need:
            return
    for q in questions:
        available = total - own_cost[q.row] + usable_own[q.row]
        if available < budget:
            raise DataError(
                source, q.row, "context",
                f"--train-tokens {budget:,} asks for contexts of {budget:,} tokens but the paragraph pool gives "
                f"at most about {available:,} tokens for this question ({pool_size:,} paragraphs); add distractor "
                "paragraphs with --pool FILE, lower --train-tokens, or pass --allow-repeats",
            )
