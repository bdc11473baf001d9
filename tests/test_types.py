import pytest

from memrl.types import Conversation, Trajectory


def test_prompt_response_masks_and_logprobs():
    c = Conversation.from_prompt_response([1, 2, 3], [4, 5], [-0.5, -1.0])
    assert c.token_ids == [1, 2, 3, 4, 5]
    assert c.loss_mask == [0, 0, 0, 1, 1]
    assert c.logprobs == [0.0, 0.0, 0.0, -0.5, -1.0]
    assert c.prompt_length == 3 and c.num_generated == 2
    assert c.generated_ids() == [4, 5]


def test_multi_turn_append_keeps_only_model_tokens_trainable():
    c = Conversation()
    c.append([1, 2], generated=False)
    c.append([3], generated=True, logprobs=[-0.1])
    c.append([9, 9], generated=False, logprobs=[-7.0, -7.0])  # tool output: logprobs dropped
    c.append([4], generated=True, logprobs=[-0.2])
    assert c.loss_mask == [0, 0, 1, 0, 0, 1]
    assert c.logprobs == [0.0, 0.0, -0.1, 0.0, 0.0, -0.2]
    assert c.generated_ids() == [3, 4]


def test_validation_errors():
    with pytest.raises(ValueError, match="lengths differ"):
        Conversation(token_ids=[1, 2], loss_mask=[0], logprobs=[0.0, 0.0])
    with pytest.raises(ValueError, match="0 or 1"):
        Conversation(token_ids=[1], loss_mask=[2], logprobs=[0.0])
    with pytest.raises(ValueError, match="logprobs"):
        Conversation().append([1, 2], generated=True, logprobs=[0.0])
    with pytest.raises(TypeError):
        Trajectory(conversations=[], reward="1", sample_id="s", group_id="g")  # type: ignore[arg-type]


def test_trajectory_roundtrip():
    convs = [Conversation.from_prompt_response([1], [2], [-0.3], reward=0.5),
             Conversation.from_prompt_response([1, 2], [3, 4], [-0.1, -0.2])]
    t = Trajectory(convs, reward=1, sample_id="s1", group_id="g1", metrics={"turns": 2.0}, info={"answer": "x"})
    assert t.reward == 1.0 and isinstance(t.reward, float)
    assert t.num_conversations == 2 and t.num_generated_tokens == 3
    assert t.step_rewards == [0.5, None]
    back = Trajectory.from_dict(t.to_dict())
    assert back.to_dict() == t.to_dict()
