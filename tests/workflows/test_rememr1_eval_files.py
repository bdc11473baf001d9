"""ReMemR1's eval file names (eval_{dataset}_{N}.json, ..._min_distance_{D}.json) beside memrl's eval_{N}."""

import pytest

from memrl.eval.files import match_eval_file


def touch(folder, *names):
    for name in names:
        (folder / name).write_text("[]")


def test_memrl_names_come_first(tmp_path):
    touch(tmp_path, "eval_50.json", "eval_hotpotqa_50.json", "eval_100.parquet")
    assert match_eval_file(tmp_path, 50) == tmp_path / "eval_50.json"
    assert match_eval_file(tmp_path, 100) == tmp_path / "eval_100.parquet"
    assert match_eval_file(tmp_path, 200) is None


def test_one_released_dataset_in_a_folder(tmp_path):
    touch(tmp_path, "eval_hotpotqa_400.json", "eval_hotpotqa_6400.json", "eval_hotpotqa_400_min_distance_100.json")
    assert match_eval_file(tmp_path, 400) == tmp_path / "eval_hotpotqa_400.json"
    assert match_eval_file(tmp_path, 6400) == tmp_path / "eval_hotpotqa_6400.json"
    assert match_eval_file(tmp_path, 100) is None  # a min-distance file is not an N=100 file
    assert match_eval_file(tmp_path, 800) is None


def test_two_datasets_need_a_prefix(tmp_path):
    touch(tmp_path, "eval_hotpotqa_50.json", "eval_2wikimultihopqa_50.json")
    with pytest.raises(ValueError, match="several datasets.*eval_2wikimultihopqa_50.json, eval_hotpotqa_50.json"):
        match_eval_file(tmp_path, 50)
    assert match_eval_file(tmp_path / "eval_hotpotqa", 50) == tmp_path / "eval_hotpotqa_50.json"
    assert match_eval_file(tmp_path / "eval_2wikimultihopqa", 50) == tmp_path / "eval_2wikimultihopqa_50.json"
    assert match_eval_file(tmp_path / "eval_hotpotqa", 100) is None
    assert match_eval_file(tmp_path / "missing" / "eval_hotpotqa", 50) is None


def test_a_pattern_names_min_distance_files(tmp_path):
    touch(tmp_path, "eval_hotpotqa_800.json", "eval_hotpotqa_800_min_distance_400.json")
    pattern = tmp_path / "eval_hotpotqa_{n}_min_distance_400.json"
    assert match_eval_file(pattern, 800) == tmp_path / "eval_hotpotqa_800_min_distance_400.json"
    assert match_eval_file(pattern, 1600) is None
