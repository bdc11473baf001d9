"""``memrl tinker``'s limits and refusals, over raw HTTP and through the SDK, on a server with small limits.

The server tells the SDK its batch limit (``fwdbwd_max_chunk_len``), so a script's big batch is split
by the SDK and still trains; a raw request past a limit is answered 400 naming the field, a body past
``--max-body-mb`` 413, a missing or wrong key 401, all in memrl serve's error shape.
"""

from __future__ import annotations

import json

import httpx
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.tinker.conftest import KEY, Running, service_client  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def small(server: Running) -> Running:
    """The shared test server: its limits are small (conftest.LIMITS)."""
    return server


def post(server: Running, path: str, body: object, key: str | None = KEY, **kw) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.post(server.url + path, content=json.dumps(body), headers={**headers,
                      "Content-Type": "application/json"}, timeout=30, **kw)


def test_key_body_and_shapes_over_http(small):
    assert httpx.get(small.url + "/api/v1/healthz", timeout=10).json() == {"status": "ok"}  # public
    for key in (None, "tml-wrong-key"):
        r = post(small, "/api/v1/create_session", {"tags": [], "sdk_version": "x"}, key=key)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = post(small, "/api/v1/asample", {"pad": "x" * (2 * 2**20)})
    assert r.status_code == 413 and "larger than 1 MB" in r.json()["error"]["message"]
    assert post(small, "/api/v1/telemetry", {"events": []}).json() == {"status": "accepted"}
    r = post(small, "/api/v1/retrieve_future", {"request_id": "nope-1"})
    assert r.status_code == 404 and "unknown request_id" in r.json()["error"]["message"]
    r = post(small, "/api/v1/create_custom_loss", {})
    assert r.status_code == 400 and "not served" in r.json()["error"]["message"]
    sid = post(small, "/api/v1/create_session", {"tags": [], "sdk_version": "x"}).json()["session_id"]
    r = post(small, "/api/v1/create_model", {"session_id": sid, "model_seq_id": 0, "base_model": "tiny"})
    assert r.status_code == 400 and "full fine-tuning is not served" in r.json()["error"]["message"]
    r = post(small, "/api/v1/create_model", {"session_id": sid, "model_seq_id": 0, "base_model": "tiny",
                                             "lora_config": {"rank": 2}})
    model_id = f"{sid}:train:0"  # the SDK's own derivation of the id
    assert post(small, "/api/v1/retrieve_future", {"request_id": r.json()["request_id"]}).json()["model_id"] == model_id
    # The SDK's retry of a request (same model and seq_id) maps to the first one: it does not run twice.
    step = {"model_id": model_id, "seq_id": 1, "optim_params": {"learning_rate": 1e-3}}
    assert post(small, "/api/v1/optim_step", step).json() == post(small, "/api/v1/optim_step", step).json()
    # the SDK sends a non-Adam family (DimuonParams) as optimizer_params: refused, not run as a default AdamW step
    dimuon = types.OptimStepRequest(model_id=model_id, seq_id=2, optim_params=types.DimuonParams(learning_rate=0.5))
    r = post(small, "/api/v1/optim_step", dimuon.model_dump(mode="json"))
    if r.status_code == 200:
        r = post(small, "/api/v1/retrieve_future", {"request_id": r.json()["request_id"]})
    assert r.status_code == 400 and "'dimuon' is not served (AdamW only)" in r.json()["error"]["message"], r.text
    nine = {"model_id": model_id, "forward_backward_input": {"loss_fn": "cross_entropy", "data": [
        {"model_input": {"chunks": [{"tokens": [1, 2]}]},
         "loss_fn_inputs": {"target_tokens": {"data": [2, 3], "dtype": "int64", "shape": [2]}}}] * 9}}
    r = post(small, "/api/v1/forward_backward", nine)
    assert r.status_code == 400 and r.json()["error"]["param"] == "data" and "at most 8" in r.json()["error"]["message"]
    one = {**nine, "forward_backward_input": {**nine["forward_backward_input"], "data": [{
        "model_input": {"chunks": [{"tokens": [1, 10**6]}]},
        "loss_fn_inputs": {"target_tokens": {"data": [2, 3], "dtype": "int64", "shape": [2]}}}]}}
    r = post(small, "/api/v1/forward_backward", one)
    assert r.status_code == 400 and "outside the vocabulary" in r.json()["error"]["message"]


def test_sdk_splits_big_batches_and_meets_sampling_limits(small):
    sc = service_client(small.url)
    try:
        tc = sc.create_lora_training_client(base_model="tiny", rank=2).result(timeout=60)
        data = [types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3 + i % 5]),
                            loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]})
                for i in range(20)]
        future = tc.forward_backward(data, "cross_entropy")  # 20 datums: chunks of 8
        try:
            out = future.result(timeout=60)
        except TimeoutError:  # say what the server was doing (a rare hang under CI load, not reproduced alone)
            worker = small.svc.worker
            try:  # read from this thread while the server's loop runs: a copy that may race
                pending = {rid: e.kind for rid, e in list(small.svc.futures._entries.items()) if not e.done.is_set()}
            except RuntimeError:
                pending = "changed while read"
            raise AssertionError(f"no answer in 60 s; the worker queue {[j.rid for j in worker.queue]}, decoding "
                                 f"{list(worker.running)}, its task {worker._task}, pending {pending}") from None
        assert len(out.loss_fn_outputs) == 20 and out.metrics["weights:sum"] == 60
        sampler = tc.save_weights_and_get_sampling_client().result(timeout=60)
        prompt = types.ModelInput.from_ints([1, 2, 3])
        with pytest.raises(tinker.BadRequestError, match="num_samples"):
            sampler.sample(prompt, 5, types.SamplingParams(max_tokens=2)).result(timeout=60)
        with pytest.raises(tinker.BadRequestError, match="exceed the model's window"):
            sampler.sample(prompt, 1, types.SamplingParams(max_tokens=10**7)).result(timeout=60)
    finally:
        sc.close("success").result(timeout=30)
    assert tc.model_id not in small.svc.tenants  # the closed session's adapters were released


def test_a_create_with_an_impossible_id_is_refused_before_it_takes_a_slot(small):
    sid = post(small, "/api/v1/create_session", {"tags": [], "sdk_version": "x"}).json()["session_id"]
    for _ in range(3):  # more than the free slots would allow, were each to hold one
        r = post(small, "/api/v1/create_model", {"session_id": sid, "model_seq_id": 10**250, "base_model": "tiny",
                                                 "lora_config": {"rank": 2}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "model_seq_id"
    r = post(small, "/api/v1/create_model", {"session_id": sid, "model_seq_id": 7, "base_model": "tiny",
                                             "lora_config": {"rank": 2}})
    assert r.status_code == 200 and "request_id" in r.json()


def test_a_checkpoint_record_is_held_to_what_a_request_may_ask():
    from memrl.tinker.tenants import LoraSpec

    assert LoraSpec.from_dict({"rank": 4, "seed": 1, "train_mlp": False}).train_mlp is False
    for bad in ({"rank": 3000}, {"rank": "abc"}, {"rank": True}, {"rank": 4, "train_attn": "yes"},
                {"rank": 4, "seed": 1.5}):
        with pytest.raises(ValueError, match="checkpoint record: lora"):
            LoraSpec.from_dict(bad)


def test_a_foreign_run_record_in_the_state_folder_is_left_out_of_listings(tmp_path):
    import json as _json

    from memrl.tinker.checkpoints import list_runs, write_run

    write_run(tmp_path, "s1:train:0", {"training_run_id": "s1:train:0", "created": 1.0})
    for name, record in (("a", [1, 2]), ("b", {"training_run_id": "../x"}), ("c", {"training_run_id": "ok",
                                                                                    "created": "soon"})):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text(_json.dumps(record))
    assert [r["training_run_id"] for r in list_runs(tmp_path)] == ["s1:train:0"]


def test_an_omitted_max_tokens_means_the_rest_of_the_window():
    """The SDK's ``SamplingParams()`` leaves ``max_tokens`` at None: vLLM reads that as "to the window's end"."""
    from memrl.serve.errors import APIError
    from memrl.tinker.limits import TinkerLimits, check_sampling

    limits = TinkerLimits(max_model_len=32, vocab_size=100)
    assert check_sampling([1, 2, 3], 1, None, 1.0, 1.0, -1, limits) == 29
    assert check_sampling([1, 2, 3], 1, 5, 1.0, 1.0, -1, limits) == 5
    with pytest.raises(APIError, match="fill the model's window"):
        check_sampling([1] * 32, 1, None, 1.0, 1.0, -1, limits)
    with pytest.raises(APIError, match=">= 0"):
        check_sampling([1, 2, 3], 1, -1, 1.0, 1.0, -1, limits)


def test_the_sdk_samples_without_max_tokens(small):
    sc = service_client(small.url)
    try:
        sampler = sc.create_sampling_client(base_model="tiny").result(timeout=60)
        out = sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, types.SamplingParams(seed=3)).result(timeout=60)
        n = len(out.sequences[0].tokens)
        assert 1 <= n <= small.svc.limits.max_model_len - 3 and len(out.sequences[0].logprobs) == n
    finally:
        sc.close("success").result(timeout=30)
