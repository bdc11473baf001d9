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


# --- packed per-token fields: the list behaviour callers rely on, and the memory they take ---

import asyncio  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from memrl.packed import MIN_GAP, PackedInts, SparseFloats  # noqa: E402


def _conv() -> Conversation:
    c = Conversation()
    c.append(list(range(10, 60)), generated=False)
    c.append([7, 8], generated=True, logprobs=[-0.1, -2.5e-7])
    c.append([3] * 20, generated=False)
    c.append([9], generated=True, logprobs=[-0.0])
    return c


def test_packed_fields_read_like_lists():
    c = _conv()
    ids, mask, lps = list(c.token_ids), list(c.loss_mask), list(c.logprobs)
    assert len(ids) == len(mask) == len(lps) == len(c.token_ids) == 73
    assert c.token_ids == ids and ids == c.token_ids and c.token_ids != ids[:-1]
    assert c.logprobs == lps and c.loss_mask == [0] * 50 + [1, 1] + [0] * 20 + [1]
    assert c.token_ids[50:52] == [7, 8] and isinstance(c.token_ids[50:52], list)
    assert c.token_ids[-1] == 9 and c.logprobs[51] == -2.5e-7 and c.logprobs[-2] == 0.0 and c.logprobs[0] == 0.0
    assert c.logprobs[-1] == 0.0 and str(c.logprobs[-1]) == "-0.0"  # a sampled -0.0 stays -0.0
    assert c.logprobs[::-1] == lps[::-1] and c.logprobs[49:53] == [0.0, -0.1, -2.5e-7, 0.0]
    with pytest.raises(IndexError):
        c.logprobs[73]
    assert [type(v) for v in (c.token_ids[0], c.loss_mask[0], c.logprobs[50])] == [int, int, float]
    assert all(type(t) is int for t in c.token_ids) and all(type(v) is float for v in c.logprobs)
    assert c.token_ids + [1] == ids + [1] and [1] + c.loss_mask == [1] + mask
    assert repr(Conversation.from_prompt_response([1, 2], [3]).logprobs) == "[0.0, 0.0, 0.0]"
    assert 8 in c.token_ids and 99 not in c.token_ids
    assert c.prompt_length == 50 and c.num_generated == 3 and c.generated_ids() == [7, 8, 9]
    assert torch.tensor(c.token_ids).tolist() == ids
    assert torch.tensor(c.logprobs, dtype=torch.float32).equal(torch.tensor(lps, dtype=torch.float32))
    assert sum(c.loss_mask) == 3 and [t for t, m in zip(c.token_ids, c.loss_mask) if m] == [7, 8, 9]


def test_packed_fields_round_trip_exactly():
    c = _conv()
    c.reward, c.meta = 0.25, {"kind": "memory"}
    text = json.dumps(c.to_dict())
    d = json.loads(text)
    assert all(type(d[k]) is list for k in ("token_ids", "loss_mask", "logprobs"))
    back = Conversation.from_dict(d)
    assert back == c and json.dumps(back.to_dict()) == text
    assert d["logprobs"][-1] == 0.0 and str(d["logprobs"][-1]) == "-0.0"
    assert d["logprobs"][50:52] == [-0.1, -2.5e-7]  # float64 kept: no float32 rounding
    assert pickle.loads(pickle.dumps(c)) == c and copy.deepcopy(c) == c
    assert Conversation.from_dict(d) != Conversation.from_prompt_response([1], [2], [-0.1])


def test_assigning_lists_packs_them_and_checks_them():
    c = _conv()
    c.token_ids, c.loss_mask, c.logprobs = [1, 2], [0, 1], [0.0, -0.5]
    assert isinstance(c.token_ids, PackedInts) and isinstance(c.logprobs, SparseFloats)
    assert c.generated_ids() == [2] and c.logprobs == [0.0, -0.5]
    c.loss_mask = c.token_ids[:0] + [1, 1]
    c.token_ids = c.loss_mask  # another packed type: converted, not shared
    assert c.token_ids == [1, 1] and c.token_ids is not c.loss_mask and c.generated_ids() == [1, 1]
    with pytest.raises(ValueError, match="loss_mask values must be 0 or 1, got 300"):
        Conversation(token_ids=[1], loss_mask=[300], logprobs=[0.0])
    with pytest.raises(OverflowError):
        Conversation(token_ids=[2**40], loss_mask=[0], logprobs=[0.0])


def test_sparse_floats_built_from_a_list_keep_long_zero_runs_as_gaps():
    values = [0.0] * 1000 + [-0.5, 0.0, -0.25] + [0.0] * (MIN_GAP - 1) + [-1.0] + [0.0] * 500
    s = SparseFloats(values)
    assert s == values and s.tolist() == values and list(s) == values
    assert [s[i] for i in range(len(values))] == values
    assert s.nbytes <= 8 * (3 + MIN_GAP) + 16  # one stored run: the short zero run stays inside it
    assert SparseFloats([]) == [] and SparseFloats([0.0] * 5).nbytes == 0
    assert SparseFloats([-0.0] * 3).tolist() == [-0.0] * 3 and str(SparseFloats([-0.0])[0]) == "-0.0"


def _episode_convs(turns: int, chunk: int) -> list[Conversation]:
    """A MemAgent-shaped episode: each memory turn's prompt holds a chunk, the reply is 16 tokens."""
    return [Conversation.from_prompt_response([(k * 7 + i) % 151_000 for i in range(chunk + 64)],
                                              [5] * 16, [-0.25] * 16) for k in range(turns)]


def test_a_long_episode_costs_a_few_bytes_per_token():
    convs = _episode_convs(turns=40, chunk=4096)
    tokens = sum(c.num_tokens for c in convs)
    # what the objects hold, allocation slack included (sys.getsizeof of each array and container)
    held = sum(sys.getsizeof(c.token_ids._a) + sys.getsizeof(c.loss_mask._a)
               + sum(sys.getsizeof(r) for r in c.logprobs._runs) for c in convs)
    as_lists = sum(sys.getsizeof(c.token_ids.tolist()) * 3 for c in convs)  # three lists' pointers alone
    assert held / tokens <= 6.0  # 4-byte ids + 1-byte mask + 8 bytes per generated log-prob
    assert sum(c.nbytes for c in convs) <= held
    assert as_lists / held >= 4
    assert len(pickle.dumps(convs)) / tokens <= 6.0  # Ray ships the packed arrays, not lists of numbers


def test_sparse_floats_slices_match_the_list():
    values = [0.0] * 40 + [-0.5, -0.25] + [0.0] * 3 + [-1.0] * 5 + [0.0] * 30 + [-2.0]
    s = SparseFloats(values)
    cuts = [None, -100, -41, -1, 0, 1, 39, 40, 41, 45, 50, 80, 81, 200]
    for a in cuts:
        for b in cuts:
            for step in (None, 1, 3, -1):
                assert s[a:b:step] == values[a:b:step], (a, b, step)


def test_a_long_sequence_prints_short():
    ids = PackedInts("i", range(100_000))
    text = repr(ids)
    assert len(text) < 600 and text.startswith("[0, 1, 2,") and text.endswith("99998, 99999]")
    assert "99936 more" in text and repr(PackedInts("i", [1, 2])) == "[1, 2]"
    # asyncio.run prints the finished task (result included) when it restores SIGINT handling:
    # an episode's repr must stay small however long its conversations are
    async def episode() -> Trajectory:
        return Trajectory(_episode_convs(turns=8, chunk=4096), 1.0, "s", "g")

    assert len(repr(asyncio.run(episode()))) < 20_000
