"""What a plug-in's ``load_samples`` raises reaches the user as one line naming the workflow and the split."""

from __future__ import annotations

import pydantic
import pytest

from memrl import Episode, Workflow
from memrl.workflows import samples_of


class Row(pydantic.BaseModel):
    question: str
    difficulty: int


class Loads(Workflow):
    rows: list = []

    def load_samples(self, split: str) -> list:
        return [Row.model_validate(r) for r in self.rows]

    async def run(self, ep: Episode) -> None:
        ep.reward(0.0)


def test_a_validation_error_is_its_first_error_in_one_line():
    wf = Loads()
    wf.rows = [{"question": "q", "difficulty": 1}, {"question": "q", "difficulty": "hard"}]
    with pytest.raises(ValueError) as err:
        samples_of(wf, "train")
    text = str(err.value)
    assert "\n" not in text and "load_samples('train'): difficulty: Input should be a valid integer" in text


def test_a_bug_in_a_loader_names_the_workflow_and_split_and_a_value_error_passes_as_written():
    class Buggy(Loads):
        def load_samples(self, split: str) -> list:
            return [{}["answer"]]

    with pytest.raises(ValueError, match=r"workflow '.*Buggy.*': load_samples\('eval'\) raised KeyError: 'answer'"):
        samples_of(Buggy(), "eval")

    class Plain(Loads):
        def load_samples(self, split: str) -> list:
            raise ValueError("rows.csv:5:difficulty: not a number")

    with pytest.raises(ValueError, match=r"^rows.csv:5:difficulty: not a number$"):
        samples_of(Plain(), "train")
