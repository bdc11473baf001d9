"""Two conversations per episode and an option: write a note, then answer from the note alone.

    PYTHONPATH=examples/custom_workflow memrl train examples/custom_workflow/recall.yaml

The second conversation does not extend the first (only the note is carried over), which is
the shape of a memory agent: each conversation is trained on with the episode's advantage.
"""

from pydantic import BaseModel

from memrl import Episode, Workflow


class Recall(Workflow):
    class Options(BaseModel):
        note_tokens: int = 8  # how long the note may be (workflow.options.note_tokens)

    async def run(self, ep: Episode) -> None:
        word = ep.sample["word"]
        note = await ep.generate(f"Remember the word {word}. Note:", max_new_tokens=self.options.note_tokens)
        answer = await ep.generate(f"Your note: {note}\nThe word was:", max_new_tokens=4)
        ep.reward(float(word in answer.lower()))
        ep.metric("note_kept_word", float(word in note.lower()))
        ep.info["note"] = str(note)
