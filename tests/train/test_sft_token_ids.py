"""``memrl sft`` / ``rft`` refuse bad token ids with file:line:field, before they reach torch."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.data.errors import DataError
from memrl.io.record_check import record_problem
from memrl.io.records import read_trajectories


def record(ids: list, mask: list | None = None) -> dict:
    conv = {"token_ids": ids, "loss_mask": mask if mask is not None else [0] + [1] * (len(ids) - 1),
            "logprobs": [0.0] * len(ids), "reward": None, "meta": {}}
    good = {"token_ids": [1, 2], "loss_mask": [0, 1], "logprobs": [0.0, -0.5]}
    return {"conversations": [good, conv], "reward": 1.0, "sample_id": "s", "group_id": "g"}


def write(tmp_path, *records) -> object:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.mark.parametrize("bad, why", [
    (-3, "token id -3 is negative"),
    (10**12, "token id 1000000000000 is outside the range of token ids"),
    (2**31, "token id 2147483648 is outside the range of token ids"),
    (7.5, "token id 7.5 is not an integer"),
    ("7", "token id '7' is not an integer"),
    (True, "token id True is not an integer"),
])
def test_a_bad_token_id_names_its_line_and_field(tmp_path, bad, why):
    path = write(tmp_path, record([5, 6, 7]), record([5, 6, bad, 8]))
    with pytest.raises(DataError) as err:
        read_trajectories(path)
    assert str(err.value).startswith(f"{path}:2:conversations[1].token_ids[2]: {why}")


def test_a_line_that_is_not_utf8_names_its_line(tmp_path):
    path = write(tmp_path, record([5, 6, 7]), record([5, 6, 7]))
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[1].replace(b'"s"', b'"\xe9"')] + lines[2:]))
    with pytest.raises(DataError, match=r"t.jsonl:2: not UTF-8 text \(byte 0xe9 at offset \d+ of this line\)"):
        read_trajectories(path)


def test_ids_at_the_limits_are_read_and_the_vocabulary_bounds_them_when_given(tmp_path):
    path = write(tmp_path, record([0, 2**31 - 1]))
    assert read_trajectories(path)[0].conversations[1].token_ids.tolist() == [0, 2**31 - 1]
    with pytest.raises(DataError, match=r":1:conversations\[1\].token_ids\[1\]: token id 2147483647 is outside "
                                        r"the vocabulary \(100 ids\)"):
        read_trajectories(path, vocab_size=100)
    assert record_problem(record([0, 99]), vocab_size=100) is None


@pytest.mark.parametrize("rec, where, why", [
    ([1, 2], None, "a rollout record is a JSON object, got a list"),
    ({"conversations": {}}, "conversations", "must be a list"),
    (record([5, 6, 7], mask=[0, 1]), "conversations[1].loss_mask", "has 2 entries for 3 token ids"),
    (record([5, 6], mask=[0, 2]), "conversations[1].loss_mask", "holds 2 at [1]; expected 0 or 1"),
    ({**record([5]), "conversations": [{"token_ids": [1], "loss_mask": [1], "logprobs": [None]}]},
     "conversations[0].logprobs", "holds None at [0]; expected numbers"),
])
def test_malformed_records_are_named_by_field(rec, where, why):
    field, message = record_problem(rec)
    assert field == where and why in message


@pytest.mark.parametrize("command", ["sft", "rft"])
@pytest.mark.parametrize("bad, why", [(-3, "is negative"), (10**12, "outside the range"),
                                      (500, "outside the vocabulary (387 ids); the rollouts were sampled")])
def test_cli_says_one_line(tmp_path, command, bad, why):
    path = write(tmp_path, record([5, 6, 7]), record([5, 6, bad, 8]))
    args = (["sft", "--trajectories", str(path)] if command == "sft" else ["rft", str(path), "--min-reward", "0"])
    r = CliRunner().invoke(app, [*args, "--model", "tiny", "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert lines[-1].startswith(f"error: {path}:2:conversations[1].token_ids[2]: token id {bad} ")
    assert why in lines[-1] and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
