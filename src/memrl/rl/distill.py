"""On-policy distillation as pure tensor functions: the teacher's per-token signal on the student's samples.

The student samples a response; a teacher scores the same tokens in the same context. The per-token
reverse KL estimate ``log pi_student(x_t) - log pi_teacher(x_t)`` is an unbiased single-sample estimate of
KL(student || teacher) at that position, so its negative is a dense reward that the policy gradient turns
into "move towards what the teacher would have said here" (Thinking Machines' on-policy distillation,
tinker-cookbook ``distillation/train_on_policy.py:incorporate_kl_penalty``; TRL's GKD with ``lmbda=1``,
``beta=1`` is the same reverse KL on student samples). The signal is an advantage, not a loss term:
it passes through the same clipped policy objective as any RL advantage, so it can stand alone or be
added to the outcome advantage.
"""

from __future__ import annotations

import torch


def discounted_future_sum(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """``out[..., t] = sum_k gamma^k x[..., t+k]`` along the last dimension (tinker's
    ``discounted_future_sum_vectorized``, batched): a token is credited with the KL it causes later too."""
    out = torch.empty_like(x)
    running = torch.zeros_like(x[..., 0])
    for t in range(x.shape[-1] - 1, -1, -1):
        running = x[..., t] + gamma * running
        out[..., t] = running
    return out


def distill_advantages(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, mask: torch.Tensor, *,
                       coef: float = 1.0, discount: float = 0.0) -> torch.Tensor:
    """Per-token advantage ``-coef * (log pi_student - log pi_teacher)`` on ``mask`` positions, 0 elsewhere.

    Tensors are ``[..., T]`` over target positions. ``discount`` > 0 replaces each token's value by the
    discounted sum of its own and later tokens' values (tinker's ``kl_discount_factor``; the discount counts
    positions, masked ones included, as tinker's does); positions outside ``mask`` stay 0, since memrl's loss
    reads response tokens only.
    """
    mask = mask.to(student_logprobs.dtype)
    adv = -coef * mask * (student_logprobs - teacher_logprobs)
    if discount > 0:
        adv = discounted_future_sum(adv, discount) * mask
    return adv


def reverse_kl(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over ``mask`` tokens of ``log pi_student - log pi_teacher`` (tinker's ``teacher_kl``); 0 without any."""
    mask = mask.to(student_logprobs.dtype)
    n = float(mask.sum())
    return float(((student_logprobs - teacher_logprobs) * mask).sum()) / n if n else 0.0
