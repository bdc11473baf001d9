"""``engine.device`` / ``teacher.device``: a bad name is refused when the config loads, a device this torch cannot
use before any weight loads; both in one line (they ended in 76-line tracebacks from deep inside model loading)."""

from __future__ import annotations

import re

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.models.resolve import DeviceUnavailableError, check_device_present, load_model


@pytest.mark.parametrize("override, message", [
    ("engine.device=gpu", "engine.device='gpu' is not a device; use cpu, cuda, cuda:N or mps (did you mean cuda?)"),
    ("teacher.device=cuda:x", "teacher.device='cuda:x' is not a device"),
])
def test_a_bad_device_name_is_refused_at_load(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_good_device_names_load():
    for name in ("cpu", "cuda", "cuda:1", "mps"):
        assert load_config(None, [f"engine.device={name}"]).engine.device == name


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_cuda_on_a_cpu_only_torch_is_one_line_before_loading():
    with pytest.raises(DeviceUnavailableError, match=r"device 'cuda': torch .* sees no CUDA device"):
        check_device_present("cuda")
    with pytest.raises(DeviceUnavailableError, match="sees no CUDA device"):
        load_model("no-such-model-folder", device="cuda:0")  # refused before the (missing) model is looked up
    check_device_present("cpu")
