"""Lines memrl prints to a log file or CI stay whole: one grep finds the whole error or step line."""

from __future__ import annotations

from memrl.io.console import log_console
from memrl.train.tracking import Tracker, print_warning


def test_a_piped_warning_naming_a_file_stays_on_one_line(capsys):
    where = "/data/" + "very_long_folder_name/" * 12 + "eval_4096.json:17"
    print_warning(log_console(), f"{where}: answers[0]: expected a string, got int 12")
    err = capsys.readouterr().err
    assert err == f"warning: {where}: answers[0]: expected a string, got int 12\n"


def test_a_step_line_with_every_metric_is_one_line_in_a_log(tmp_path, capsys):
    tracker = Tracker(tmp_path, 0, total_steps=1000)  # its own console: stderr is captured, so not a terminal
    names = ["reward", "eval/accuracy", "num_conversations", "turns", "tool_call_validity", "response_tokens", "kl",
             "entropy", "clipfrac", "grad_norm", "tokens_per_s", "time/rollout", "time/logprob", "time/update",
             "time/sync"]
    tracker.log(1, {name: 1234.5678 for name in names})
    tracker.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "step 1/1000" in line]
    assert len(lines) == 1 and lines[0].endswith("sync 1234.57s") and len(lines[0]) > 160
