"""``memrl tinker`` through the real ``tinker`` SDK: training clients, sampling clients, checkpoints.

One server (the ``tiny`` model, in this process) serves the whole module; every test opens its own
``ServiceClient`` session, as separate scripts would. Numbers are checked against the server's own
definitions: the NLL a training loop lowers is the ``loss:sum`` ``forward`` reports, a sampled token's
log-prob equals ``forward``'s log-prob of that token under the same weights (memrl's definition at
temperature 1), and an importance-sampling step on a fresh sample sees ratios of exactly 1.
"""

from __future__ import annotations

import os
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.tinker.conftest import service_client  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog."
pytestmark = pytest.mark.timeout(120)


def datum(ids: list[int], weights: list[float] | None = None) -> types.Datum:
    """Next-token prediction over ``ids``: input ids[:-1], targets ids[1:]."""
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": ids[1:], "weights": weights or [1.0] * (len(ids) - 1)})


def nll(tc, d: types.Datum) -> float:
    return tc.forward([d], "cross_entropy").result(timeout=60).metrics["loss:sum"]


def test_info_capabilities_and_tokenizer(server, client):
    caps = tinker.RestClient(base_url=server.url, api_key="tml-test-key-123").get_server_capabilities().result(30)
    assert [m.model_name for m in caps.supported_models] == ["tiny"]  # the name it is served under
    tc = client.create_lora_training_client(base_model="tiny", rank=4).result(timeout=60)
    info = tc.get_info()  # cookbook scripts compare its model_name with the base_model they asked for
    assert info.is_lora and info.lora_rank == 4 and info.model_data.model_name == "tiny"
    assert info.model_data.tokenizer_id == server.svc.tokenizer_id and os.path.isabs(info.model_data.tokenizer_id)
    tok = tc.get_tokenizer()  # AutoTokenizer from the path the server names: no hub
    assert tok.decode(tok.encode(TEXT)) == TEXT


def test_cross_entropy_steps_lower_the_nll(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=8, seed=0).result(timeout=60)
    ids = tc.get_tokenizer().encode(TEXT)
    d = datum(ids)
    before = nll(tc, d)
    for _ in range(8):
        fb = tc.forward_backward([d], "cross_entropy")
        opt = tc.optim_step(types.AdamParams(learning_rate=5e-3))
        out = fb.result(timeout=60)
        assert opt.result(timeout=60).metrics["grad_norm"] > 0
    logprobs = out.loss_fn_outputs[0]["logprobs"].tolist()
    assert len(logprobs) == len(ids) - 1
    assert out.metrics["loss:sum"] == pytest.approx(-sum(logprobs), rel=1e-4)  # before the last step
    after = nll(tc, d)
    assert after < before - 1.0, (before, after)


def test_sampling_logprobs_match_forward_and_is_step(client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=1).result(timeout=60)
    tok = tc.get_tokenizer()
    prompt = tok.encode("Memory: the key is")
    sampler = tc.save_weights_and_get_sampling_client().result(timeout=60)
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7, stop=[])
    res = sampler.sample(types.ModelInput.from_ints(prompt), 2, params).result(timeout=60)
    assert len(res.sequences) == 2 and all(len(s.tokens) == 6 and s.stop_reason == "length" for s in res.sequences)
    assert res.sequences[0].tokens != res.sequences[1].tokens or res.sequences[0].logprobs != res.sequences[1].logprobs
    again = sampler.sample(types.ModelInput.from_ints(prompt), 2, params).result(timeout=60)
    assert [s.tokens for s in again.sequences] == [s.tokens for s in res.sequences]  # seeded: repeatable
    seq = res.sequences[0]
    full = prompt + seq.tokens
    n = len(prompt)
    # The training side scores the same tokens under the same weights: memrl's log-prob at temperature 1.
    fwd = tc.forward([datum(full)], "cross_entropy").result(timeout=60).loss_fn_outputs[0]["logprobs"].tolist()
    assert fwd[n - 1:] == pytest.approx(seq.logprobs, abs=1e-4)
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(full)).result(timeout=60)
    assert scored[0] is None and scored[1:] == pytest.approx(fwd, abs=1e-4)
    # Importance sampling on that sample: target == sampler weights, so every ratio is 1.
    is_datum = types.Datum(model_input=types.ModelInput.from_ints(full[:-1]), loss_fn_inputs={
        "target_tokens": full[1:], "logprobs": [0.0] * (n - 1) + list(seq.logprobs),
        "advantages": [0.0] * (n - 1) + [1.0] * len(seq.tokens)})
    out = tc.forward_backward([is_datum], "importance_sampling").result(timeout=60)
    assert out.metrics["ratio:max"] == pytest.approx(1.0, abs=1e-3)
    assert out.metrics["loss:sum"] == pytest.approx(-len(seq.tokens), abs=1e-2)
    tc.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=60)


def test_stops_prompt_logprobs_and_base_sampler(server, client):
    from memrl.tinker.sampling import engine_params

    tok = server.svc.host.tokenizer
    sampler = client.create_sampling_client(base_model="tiny").result(timeout=60)
    prompt = types.ModelInput.from_ints(tok.encode("0 1 2 3"))
    res = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, temperature=0.0),
                         include_prompt_logprobs=True, topk_sample_logprobs=3).result(timeout=60)
    seq = res.sequences[0]
    greedy = seq.tokens
    assert res.prompt_logprobs[0] is None and len(res.prompt_logprobs) == prompt.length
    assert len(seq.topk_logprobs) == len(greedy) and seq.topk_logprobs[0][0][0] == greedy[0]
    stop_at = greedy[2]
    cut = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[stop_at]))
    cut_seq = cut.result(timeout=60).sequences[0]
    assert cut_seq.tokens == greedy[: greedy.index(stop_at) + 1] and cut_seq.stop_reason == "stop"
    # a stop string: cut after the token completing it; the engine is asked to stop decoding there, reading
    # the text as the cut does (with special tokens), and can, having the tokenizer
    text = tok.decode(greedy[5:8]).strip()
    worded = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[text]))
    kept = worded.result(timeout=60).sequences[0].tokens
    assert kept == greedy[:len(kept)] and text in tok.decode(kept) and text not in tok.decode(kept[:-1])
    (params,) = engine_params({"max_tokens": 12}, 1, (), 0, [text])
    assert (params.stop, params.skip_special_tokens) == ((text,), False)
    assert server.svc.engine.tokenizer is tok


def test_two_tenants_keep_their_own_weights(client):
    a = client.create_lora_training_client(base_model="tiny", rank=4, seed=2).result(timeout=60)
    b = client.create_lora_training_client(base_model="tiny", rank=2, seed=3, train_unembed=False).result(timeout=60)
    d = datum(a.get_tokenizer().encode(TEXT))
    b_before = nll(b, d)
    for _ in range(3):
        a.forward_backward([d], "cross_entropy")
        a.optim_step(types.AdamParams(learning_rate=1e-2))
    assert nll(a, d) < b_before - 0.5
    assert nll(b, d) == pytest.approx(b_before, abs=1e-4)  # b's adapter and optimizer never moved


def test_save_and_load_with_optimizer(server, client):
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=4).result(timeout=60)
    d = datum(tc.get_tokenizer().encode(TEXT))
    for _ in range(2):
        tc.forward_backward([d], "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=1e-2))
    path = tc.save_state("two-steps").result(timeout=60).path
    assert path == f"tinker://{tc.model_id}/weights/two-steps"
    with_opt = client.create_training_client_from_state_with_optimizer(path).result(timeout=60)
    without = client.create_training_client_from_state(path).result(timeout=60)
    assert nll(with_opt, d) == pytest.approx(nll(tc, d), abs=1e-4)
    results = []
    for c in (tc, with_opt, without):  # one more step each: Adam's moments decide where it lands
        c.forward_backward([d], "cross_entropy")
        c.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
        results.append(nll(c, d))
    assert results[1] == pytest.approx(results[0], abs=1e-3)
    assert abs(results[2] - results[0]) > 1e-3
    rest = tinker.RestClient(base_url=server.url, api_key="tml-test-key-123")
    info = rest.get_weights_info_by_tinker_path(path).result(timeout=30)
    assert info.lora_rank == 4 and info.base_model == server.svc.base_name
    names = [c.checkpoint_id for c in rest.list_checkpoints(tc.model_id).result(timeout=30).checkpoints]
    assert names == ["weights/two-steps"]
    with pytest.raises(Exception, match="exists already"):
        tc.save_state("two-steps").result(timeout=60)


def test_refusals_name_the_problem(server, client):
    with pytest.raises(tinker.BadRequestError, match="not served here"):
        client.create_lora_training_client(base_model="Qwen/Qwen3-8B").result(timeout=60)
    tc = client.create_lora_training_client(base_model="tiny", rank=2).result(timeout=60)
    d = datum(tc.get_tokenizer().encode(TEXT))
    with pytest.raises(tinker.BadRequestError, match="'gspo' is not supported"):
        tc.forward_backward([d], "gspo").result(timeout=60)
    with pytest.raises(tinker.BadRequestError, match="kind: 'inflight' is not served here"):  # was a snapshot
        tc.save_weights_and_get_sampling_client(kind="inflight").result(timeout=60)
    with pytest.raises(tinker.BadRequestError, match="'stable_reinforce' is not supported.*pass "
                                                     "loss_fn='importance_sampling'"):
        tc.forward_backward([d], "stable_reinforce").result(timeout=60)
    recording = client.create_sampling_client(base_model="tiny", record_stability_info=True).result(timeout=60)
    with pytest.raises(tinker.BadRequestError, match="record_stability_info: .*loss_fn='importance_sampling'"):
        recording.sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2)).result(60)
    bad = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]), loss_fn_inputs={"target_tokens": [2, 3]})
    with pytest.raises(tinker.BadRequestError, match=r"data\[0\]\.loss_fn_inputs\.target_tokens"):
        client.create_lora_training_client(base_model="tiny", rank=2).result(timeout=60).forward_backward(
            [bad], "cross_entropy").result(timeout=60)
    with pytest.raises(tinker.AuthenticationError):
        service_client(server.url, key="tml-not-the-key").create_lora_training_client(base_model="tiny").result(30)


def test_custom_loss_runs_through_cross_entropy(client):
    """The SDK runs ``forward_backward_custom`` as forward + cross_entropy with weights -dL/dlogprobs."""
    tc = client.create_lora_training_client(base_model="tiny", rank=4, seed=5).result(timeout=60)
    d = datum(tc.get_tokenizer().encode(TEXT))
    before = nll(tc, d)

    def mean_nll(data, logprobs):
        loss = -sum(lp.sum() for lp in logprobs) / sum(len(lp) for lp in logprobs)
        return loss, {"mean_nll": float(loss)}

    out = tc.forward_backward_custom([d], mean_nll).result(timeout=60)
    assert out.metrics["mean_nll"] == pytest.approx(before / (len(d.loss_fn_inputs["target_tokens"].tolist())),
                                                    rel=1e-4)
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)
    assert nll(tc, d) < before


def test_stop_strings_cut_after_the_token_that_completes_them(server):
    from memrl.engines.base import GenerationResult
    from memrl.tinker.sampling import cut_at_strings, stops

    tok = server.svc.host.tokenizer
    eos = (tok.eos_token_id,)
    assert stops(None, tok, eos) == (eos, []) and stops([], tok, eos) == ((), [])
    assert stops([5, 7], tok, eos) == ((5, 7), [])
    ids = tok.encode(" lazy dog. The quick")
    one_token = tok.decode(ids[:1])
    ids_stop, strings = stops([one_token, "dog. The"], tok, eos)
    assert ids_stop == (*eos, ids[0]) and strings == ["dog. The"]
    seq = cut_at_strings(GenerationResult(ids, [-1.0] * len(ids), "length"), strings, tok)
    assert seq.stop_reason == "stop" and "dog. The" in tok.decode(seq.tokens)
    assert "dog. The" not in tok.decode(seq.tokens[:-1]) and len(seq.logprobs) == len(seq.tokens)


def test_checkpoint_ttls_order_and_unserved_rest_calls(server, client):
    """A TTL is reported, changed and honoured (an expired checkpoint is gone); the newest of two saves in one
    second is the last; publishing sets the listing's flag; REST calls this server does not serve say so in one
    line and change nothing."""
    import json

    tc = client.create_lora_training_client(base_model="tiny", rank=2).result(timeout=60)
    rest = tinker.RestClient(base_url=server.url, api_key="tml-test-key-123")
    tc.save_state("zz").result(timeout=60)
    kept = tc.save_state("aa", ttl_seconds=7200).result(timeout=60).path
    run = rest.get_training_run(tc.model_id).result(timeout=30)
    assert run.last_checkpoint.checkpoint_id == "weights/aa"  # not "zz", which sorts last by name
    assert run.last_checkpoint.expires_at is not None
    with pytest.raises(tinker.BadRequestError, match="ttl_seconds"):  # the SDK's range: 1 hour to 10 years
        tc.save_state("brief", ttl_seconds=5).result(timeout=60)
    rest.set_checkpoint_ttl_from_tinker_path(kept, None).result(timeout=30)
    points = {c.checkpoint_id: c for c in rest.list_checkpoints(tc.model_id).result(timeout=30).checkpoints}
    assert points["weights/aa"].expires_at is None
    gone = tc.save_state("gone", ttl_seconds=3600).result(timeout=60).path
    meta = server.svc.state_dir / "runs" / tc.model_id.replace(":", "_") / "weights" / "gone" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "expires_at": 1.0}))  # as if an hour had passed
    assert "weights/gone" not in [c.checkpoint_id for c in rest.list_checkpoints(tc.model_id).result(30).checkpoints]
    with pytest.raises(Exception, match="expired"):
        client.create_training_client_from_state(gone).result(timeout=60)
    tc.save_state("next").result(timeout=60)  # a save deletes what expired
    assert not meta.parent.exists()
    rest.publish_checkpoint_from_tinker_path(kept).result(timeout=30)  # a flag the listing shows (tutorial 204)
    points = {c.checkpoint_id: c for c in rest.list_checkpoints(tc.model_id).result(timeout=30).checkpoints}
    assert points["weights/aa"].public and not points["weights/next"].public
    rest.publish_checkpoint_from_tinker_path(kept).result(timeout=30)  # again: no 409, which the SDK retries 5 min
    rest.unpublish_checkpoint_from_tinker_path(kept).result(timeout=30)
    points = {c.checkpoint_id: c for c in rest.list_checkpoints(tc.model_id).result(timeout=30).checkpoints}
    assert not points["weights/aa"].public
    with pytest.raises(tinker.BadRequestError, match="not served"):
        rest.list_sessions().result(timeout=30)
    assert "weights/aa" in [c.checkpoint_id for c in rest.list_checkpoints(tc.model_id).result(30).checkpoints]


def test_a_session_ttl_under_the_sdks_heartbeat_is_refused():
    """A script that never closes its ServiceClient frees its LoRA slots after --session-ttl-s without a
    heartbeat; one shorter than the SDK's 10 s beat would end live scripts."""
    from typer.testing import CliRunner

    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["tinker", "--model", "tiny", "--session-ttl-s", "5"])
    assert r.exit_code == 2 and "--session-ttl-s 5.0: must be at least 30" in r.output


def test_a_checkpoint_fits_by_name_or_by_its_base_folder(server):
    """Checkpoints record the name served under and the folder: a server started under another alias (or a
    relative path from elsewhere) still loads them; another model's are refused."""
    svc = server.svc
    assert svc.serves({"base_model": "tiny"})
    assert svc.serves({"base_model": "./some/other/spelling", "base_path": svc.tokenizer_id})
    assert not svc.serves({"base_model": "another-model", "base_path": "/elsewhere/another-model"})


def test_a_failed_forward_backward_leaves_no_gradient_behind(client):
    """A request failing on a later micro-batch had added the earlier ones' gradients: a script retrying it
    (the SDK reports the whole request failed) had its next optim_step apply them twice."""
    import random

    rng = random.Random(0)
    big = datum([rng.randrange(3, 380) for _ in range(1501)])  # 1500 positions: a micro-batch of its own
    bad = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]), loss_fn_inputs={"target_tokens": [6, 7, 8]})
    adam = types.AdamParams(learning_rate=1e-3)
    retried = client.create_lora_training_client(base_model="tiny", rank=4, seed=3).result(timeout=60)
    fresh = client.create_lora_training_client(base_model="tiny", rank=4, seed=3).result(timeout=60)
    with pytest.raises(Exception, match="weights"):  # cross_entropy needs weights: found while running
        retried.forward_backward([big, bad], "cross_entropy").result(timeout=60)
    retried.forward_backward([big], "cross_entropy").result(timeout=60)
    fresh.forward_backward([big], "cross_entropy").result(timeout=60)
    norms = [tc.optim_step(adam).result(timeout=60).metrics["grad_norm"] for tc in (retried, fresh)]
    assert norms[0] == pytest.approx(norms[1], rel=1e-5) and norms[1] > 0
