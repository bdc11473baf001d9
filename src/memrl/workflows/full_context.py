"""Baseline: the whole document in one prompt, centre-truncated to the model window."""

from __future__ import annotations

from typing import Any

from memrl.config.schema import WorkflowConfig
from memrl.data.longctx import LongContextSample
from memrl.engines.base import Engine, SamplingParams
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import centre_truncate, encode_text, qa_trajectory, stop_token_ids
from memrl.workflows.templates import TokenTemplate, load_prompts

DEFAULT_PROMPTS = {
    "context": (
        "Read the document and answer the question.\n\n"
        "Document:\n{context}\n\n"
        "Question:\n{question}\n\n"
        "Reply with a short answer inside \\boxed{}, for example \\boxed{Paris}."
    ),
}


async def full_context(
    sample: LongContextSample,
    engine: Engine,
    tokenizer: Any,
    config: WorkflowConfig,
    *,
    sampling: SamplingParams | None = None,
    sample_id: str | None = None,
    group_id: str | None = None,
) -> Trajectory:
    """One conversation; the document is cut in the middle when the window is too small."""
    sampling = sampling or SamplingParams(greedy=True)
    template = TokenTemplate(load_prompts(config.prompts, DEFAULT_PROMPTS)["context"], tokenizer)
    stops = stop_token_ids(tokenizer)
    question = encode_text(tokenizer, sample.question)[: config.question_tokens]
    context = encode_text(tokenizer, sample.context)
    room = config.max_context_tokens - config.final_tokens - template.overhead - len(question)
    if room <= 0:
        raise ValueError(f"workflow.max_context_tokens={config.max_context_tokens} leaves no room for the document")
    kept = centre_truncate(context, room)
    prompt = template.render(context=kept, question=question)
    res = await engine.generate(prompt, sampling.with_(max_new_tokens=config.final_tokens, stop_token_ids=stops))
    conv = Conversation.from_prompt_response(prompt, res.token_ids, res.logprobs,
                                             meta={"kind": "final", "finish": res.finish_reason})
    return qa_trajectory(
        sample, tokenizer, [conv], res, stops, config.reward, sample_id=sample_id, group_id=group_id,
        metrics={"context_tokens": float(len(kept)), "context_tokens_original": float(len(context)),
                 "context_truncated": float(len(kept) < len(context))},
        info={}, answer_format=config.answer_format,
    )
