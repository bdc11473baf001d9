"""A workflow of your own, loaded by import path (nothing in memrl is edited).

    PYTHONPATH=examples/custom_workflow memrl train examples/custom_workflow/config.yaml

One conversation: the model is asked to say a word and is rewarded when it does. ``ep.generate``
records the exact tokens, their sampling log-probs and the loss mask; the trainer needs nothing else.
"""

from memrl import Episode, Workflow


class SayWord(Workflow):
    async def run(self, ep: Episode) -> None:
        word = ep.sample["word"]
        text = await ep.generate([{"role": "user", "content": f"Say only the word {word}."}], max_new_tokens=8)
        ep.reward(mentions_word(text, sample=ep.sample))


def mentions_word(text: str, *, sample: dict, **kw) -> float:
    """A reward (TRL's shape): 1 if the sample's word appears in the response, case-insensitive."""
    return float(sample["word"].lower() in text.lower())
