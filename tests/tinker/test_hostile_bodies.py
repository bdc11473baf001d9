"""Bodies that cost the server more than they weigh, or are shaped wrong: a 400 before any work (found by an
audit: a 140-byte sparse tensor made the server allocate 2 GB; malformed JSON bodies were 500s)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinker")
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402

from memrl.serve.errors import APIError  # noqa: E402
from memrl.tinker.app import _json  # noqa: E402
from memrl.tinker.schemas import AdamParamsBody  # noqa: E402
from memrl.tinker.wire import MAX_TENSOR_ELEMENTS, _tensor, parse_forward_backward_json  # noqa: E402


def sparse(shape: list[int]) -> pb.Tensor:
    csr = pb.SparseCsr(values=np.array([1.0], np.float32).tobytes(),
                       crow_indices=np.array([0] + [1] * shape[0], np.int64).tobytes(),
                       col_indices=np.array([0], np.int64).tobytes())
    return pb.Tensor(sparse_csr=csr, dtype=pb.DTYPE_FLOAT32, shape=shape)


def test_a_small_sparse_tensor_unpacks_as_before():
    dense = _tensor(sparse([2, 3]), "w")
    assert dense.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("shape", [[1, 2**31], [1, 2**40], [4096, 4097]])
def test_a_sparse_tensor_past_what_a_body_holds_is_refused_before_it_is_allocated(shape):
    assert shape[0] * shape[1] > MAX_TENSOR_ELEMENTS
    with pytest.raises(APIError, match="unpacks to more than") as err:
        _tensor(sparse(shape), "data[0].loss_fn_inputs.weights")
    assert err.value.status == 400


@pytest.mark.parametrize("body", [{"forward_backward_input": [1]}, {"forward_backward_input": {"data": [5]}},
                                  {"forward_backward_input": {"data": [{"model_input": {"chunks": [5]}}]}},
                                  {"forward_backward_input": {"data": [{"model_input": {"chunks": [
                                      {"tokens": ["abc"]}]}}]}},
                                  {"forward_backward_input": {"data": [{"model_input": {"chunks": [{"tokens": [1]}]},
                                   "loss_fn_inputs": {"w": {"data": [1.0, 2.0], "shape": [3]}}}]}},
                                  {"forward_backward_input": {"loss_fn_config": "abc"}}])
def test_a_malformed_json_forward_backward_is_a_400(body):
    with pytest.raises(APIError) as err:
        parse_forward_backward_json(body, forward_only=False)
    assert err.value.status == 400 and err.value.param == "forward_backward_input"


def test_json_nested_past_the_stack_is_a_400():
    with pytest.raises(APIError) as err:
        _json(b"[" * 100_000 + b"]" * 100_000)
    assert err.value.status == 400


@pytest.mark.parametrize("field", ["learning_rate", "grad_clip_norm", "eps", "weight_decay"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_adam_params_must_be_finite(field, value):
    with pytest.raises(ValueError):
        AdamParamsBody(**{field: value})
