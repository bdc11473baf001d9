"""``memrl config from-verl``: a verl launch script's overrides as a memrl config, verl's defaults filling gaps."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.config import load_config
from memrl.config.from_verl import overrides_of, translate

A = "actor_rollout_ref.actor."
SCRIPT = """#!/bin/bash
set -x
ENGINE=${1:-vllm}
N=${N:-5}
export LR=2e-6
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    algorithm.norm_adv_by_std_in_grpo=False \\
    data.train_batch_size=64 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen3-8B \\
    actor_rollout_ref.model.lora_rank=32 \\
    actor_rollout_ref.actor.optim.lr=$LR \\
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.actor.kl_loss_type=k3 \\
    actor_rollout_ref.actor.clip_ratio=0.3 \\
    actor_rollout_ref.actor.clip_ratio_high=0.28 \\
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \\
    actor_rollout_ref.actor.loss_agg_mode=token-mean \\
    actor_rollout_ref.rollout.name=$ENGINE \\
    actor_rollout_ref.rollout.n=$N \\
    actor_rollout_ref.rollout.top_k=-1 \\
    actor_rollout_ref.rollout.val_kwargs.do_sample=False \\
    +algorithm.rollout_correction.rollout_is=token \\
    algorithm.rollout_correction.rollout_is_threshold=0.5_5.0 \\
    trainer.logger='["console","wandb"]' \\
    trainer.project_name=gsm8k \\
    trainer.save_freq=-1 \\
    trainer.test_freq=5 \\
    trainer.total_epochs=15 \\
    trainer.default_local_dir=$CKPT $@   # a comment
"""


def test_the_scripts_overrides_with_its_variables():
    flags, unresolved = overrides_of(SCRIPT)
    assert flags[A + "optim.lr"] == "2e-6" and flags["actor_rollout_ref.rollout.name"] == "vllm"
    assert flags["actor_rollout_ref.rollout.n"] == "5" and flags["trainer.logger"] == '["console","wandb"]'
    assert flags["algorithm.rollout_correction.rollout_is"] == "token"  # "+key" is the key
    assert flags["trainer.default_local_dir"] == "$CKPT" and unresolved == ["CKPT"]
    assert len(flags) == 27


def test_translation_values_and_verl_defaults():
    t = translate(overrides_of(SCRIPT)[0])
    got = {k: v for k, (v, _) in t.settings.items()}
    assert got["algorithm.adv_estimator"] == "dr_grpo"  # grpo without the std division
    assert got["trainer.prompts_per_step"] == 64 and got["trainer.mini_batches"] == 4 and got["algorithm.n"] == 5
    assert got["algorithm.kl_coef"] == 0.001 and got["algorithm.kl_estimator"] == "k3"  # verl's default coefficient
    assert got["trainer.weight_decay"] == 0.01 and got["trainer.lr"] == 2e-6  # verl's AdamW decay, not memrl's 0
    assert got["algorithm.clip_ratio_low"] == 0.2 and got["algorithm.clip_ratio_high"] == 0.28
    assert got["lora.enabled"] and got["lora.r"] == 32 and got["lora.alpha"] == 16
    assert got["sampling.top_k"] == 0 and got["trainer.eval.temperature"] == 0.0 and got["trainer.eval.every"] == 5
    assert got["engine.kind"] == "vllm" and got["trainer.wandb_project"] == "gsm8k"
    assert got["algorithm.rollout_correction.rollout_is_threshold"] == "0.5_5.0"
    assert "algorithm.loss_agg_mode" not in got  # gspo aggregates per sequence whatever verl's loss_agg_mode says
    assert t.settings["trainer.lr"][1] == f"{A}optim.lr=2e-6"
    assert t.settings["trainer.weight_decay"][1] == "verl's default"
    why = t.skipped
    assert "clip_ratio_low/high" in why[A + "clip_ratio"] and "total_steps" in why["trainer.total_epochs"]
    assert "sizes these itself" in why[A + "ppo_micro_batch_size_per_gpu"]
    assert "budgets" in why["data.max_response_length"] and "never" in why["trainer.save_freq"]
    assert "per sequence" in why[A + "loss_agg_mode"]


def test_a_rule_reading_an_unreadable_value_names_it_not_a_python_error():
    t = translate(overrides_of("python -m verl.trainer.main_ppo data.train_batch_size=abc")[0])
    assert "not all arguments converted" not in str(t.skipped)
    assert t.skipped["(batches)"] == "not translated: it needs data.train_batch_size, which memrl could not read (above)"


def test_verl_agents_group_size_and_default_mode():
    """verl-agent's scripts set the group with env.rollout.n (examples/gigpo_trainer/run_alfworld.sh) and
    leave actor_rollout_ref.rollout.n at 1; its GiGPO mode defaults to mean_norm (ppo_trainer.yaml)."""
    t = translate({"algorithm.adv_estimator": "gigpo", "env.rollout.n": "8", "data.train_batch_size": "16",
                   "actor_rollout_ref.actor.ppo_mini_batch_size": "16"})
    assert t.settings["algorithm.n"] == (8, "env.rollout.n=8")
    assert t.settings["algorithm.turn_norm"][0] == "mean" and "env.rollout.n" not in t.skipped
    grpo = translate({"algorithm.adv_estimator": "grpo", "env.rollout.n": "0", "actor_rollout_ref.rollout.n": "4"})
    assert grpo.settings["algorithm.n"][0] == 4 and "algorithm.turn_norm" not in grpo.settings


def test_verl_agents_gigpo_settings():
    t = translate({"algorithm.adv_estimator": "gigpo", "algorithm.gamma": "0.95",
                   "algorithm.gigpo.step_advantage_w": "1.0", "algorithm.gigpo.mode": "mean_norm",
                   "algorithm.gigpo.enable_similarity": "True", "env.max_steps": "50"})
    got = {k: v for k, (v, _) in t.settings.items()}
    assert (got["algorithm.adv_estimator"], got["algorithm.gamma"], got["algorithm.step_weight"],
            got["algorithm.turn_norm"]) == ("gigpo", 0.95, 1.0, "mean")
    assert got["algorithm.state_similarity"] == 0.95  # verl-agent's default threshold, the script giving none
    assert t.settings["algorithm.state_similarity"][1] == "algorithm.gigpo.enable_similarity=True"
    assert "workflow" in t.skipped["env.max_steps"]
    search = translate({"algorithm.adv_estimator": "gigpo", "algorithm.gigpo.enable_similarity": "True",
                        "algorithm.gigpo.similarity_thresh": "0.9"})  # examples/gigpo_trainer/run_search.sh
    assert search.settings["algorithm.state_similarity"][0] == 0.9
    off = translate({"algorithm.adv_estimator": "gigpo", "algorithm.gigpo.enable_similarity": "False",
                     "algorithm.gigpo.similarity_thresh": "0.9"})
    assert "algorithm.state_similarity" not in off.settings
    assert "enable_similarity" in off.skipped["algorithm.gigpo.similarity_thresh"]


def test_dr_grpo_loss_scale_factor_carries_over_and_sets_the_divisor(tmp_path):
    t = translate({A + "loss_agg_mode": "seq-mean-token-sum-norm", A + "loss_scale_factor": "4096"})
    got = {k: v for k, (v, _) in t.settings.items()}
    assert got["algorithm.loss_scale_factor"] == 4096 and got["algorithm.loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert "algorithm.loss_scale_factor" not in {k for k, (v, _) in translate({}).settings.items()}


def test_calculate_sum_pi_squared_turns_the_variance_proxies_on_for_any_estimator():
    t = translate({"algorithm.adv_estimator": "grpo", A + "calculate_sum_pi_squared": "True"})
    assert t.settings["algorithm.variance_proxy"][0] is True and A + "calculate_sum_pi_squared" not in t.skipped
    assert "algorithm.variance_proxy" not in translate({}).settings  # not given: memrl's default (off)


def test_gae_and_unknown_losses_are_left_out_with_the_reason():
    t = translate({"algorithm.adv_estimator": "gae", A + "policy_loss.loss_mode": "bypass_mode",
                   "data.train_batch_size": "0"})
    assert "critic" in t.skipped["algorithm.adv_estimator"]
    assert "needs algorithm.rollout_correction.bypass_mode=True" in t.skipped[A + "policy_loss.loss_mode"]
    bypass = translate({A + "policy_loss.loss_mode": "bypass_mode", "algorithm.rollout_correction.bypass_mode": "True"})
    assert bypass.settings["algorithm.rollout_correction.bypass_mode"][0] is True
    assert "translated there" in bypass.skipped[A + "policy_loss.loss_mode"]
    assert "algorithm.policy_loss" not in bypass.settings or bypass.settings["algorithm.policy_loss"][0] == "vanilla"
    assert any("refuses 0" in why for why in t.skipped.values())  # a 0 batch: memrl's config refuses it, said so
    assert "trainer.prompts_per_step" not in t.settings


def test_a_losss_own_settings_go_with_it_and_only_with_it():
    t = translate({A + "policy_loss.loss_mode": "kl_cov", A + "policy_loss.kl_cov_ratio": "0.002",
                   A + "policy_loss.dro_beta": "0.3", A + "tau_pos": "2"})
    got = {k: v for k, (v, _) in t.settings.items()}
    assert got["algorithm.policy_loss"] == "kl_cov" and got["algorithm.kl_cov_ratio"] == 0.002
    assert "algorithm.dro_beta" not in got and "sapo_tau_pos" not in str(got)
    assert "another policy loss" in t.skipped[A + "policy_loss.dro_beta"] and A + "tau_pos" in t.skipped
    cfg = load_config(None, [f"{k}={v}" for k, v in got.items() if k.startswith("algorithm.")])
    assert cfg.algorithm.kl_cov_ratio == 0.002 and cfg.algorithm.kl_cov_coef == 0.1  # verl's ppo_kl_coef default
    dro = {k: v for k, (v, _) in translate({A + "policy_loss.loss_mode": "dro",
                                            A + "policy_loss.dro_beta": "0.3"}).settings.items()}
    assert dro["algorithm.dro_beta"] == 0.3


def test_the_cli_writes_a_config_memrl_loads(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    out = tmp_path / "from_verl.yaml"
    r = CliRunner().invoke(app, ["config", "from-verl", str(script), "--out", str(out)])
    assert r.exit_code == 0, r.output
    cfg = load_config(out, [])
    assert cfg.algorithm.policy_loss == "gspo" and cfg.algorithm.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.algorithm.adv_estimator == "dr_grpo" and cfg.trainer.mini_batches == 4 and cfg.lora.r == 32
    assert "# actor_rollout_ref.actor.optim.lr=2e-6" in out.read_text()
    assert "translated 21 of 27 verl flags" in r.output and "$CKPT" in r.output
    r = CliRunner().invoke(app, ["config", "from-verl", str(script), "--out", str(out)])
    assert r.exit_code == 2 and "exists: pass --force" in r.output
    before = script.read_text()
    r = CliRunner().invoke(app, ["config", "from-verl", str(script), "--out", str(script), "--force"])
    assert r.exit_code == 2 and "is the script being translated" in r.output and script.read_text() == before
    r = CliRunner().invoke(app, ["config", "from-verl", "-"], input="echo nothing here\n")
    assert r.exit_code == 2 and "not a verl launch script" in r.output
    memrl_words = "memrl train trainer.total_steps=3 algorithm.n=4 workflow.options.max_turns=2\n"
    r = CliRunner().invoke(app, ["config", "from-verl", "-"], input=memrl_words)  # memrl's own keys, not verl's
    assert r.exit_code == 2 and "not a verl launch script (no actor_rollout_ref" in " ".join(r.output.split())


def test_the_count_is_of_the_scripts_own_flags():
    """A flag verl's defaults decide (adv_estimator gae, which memrl cannot run) is reported as a default, not
    counted among the script's flags."""
    script = "python -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Q actor_rollout_ref.rollout.n=4 \\\n"
    script += "  trainer.n_gpus_per_node=8\n"
    r = CliRunner().invoke(app, ["config", "from-verl", "-"], input=script)
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "translated 2 of 3 verl flags; 1 left out" in said and "algorithm.adv_estimator (verl's default)" in said


VERL = os.environ.get("MEMRL_VERL_REPO")


@pytest.mark.skipif(not VERL, reason="set MEMRL_VERL_REPO to a verl checkout to translate its example scripts")
def test_every_verl_example_script_translates_into_a_config_that_loads(tmp_path):
    names = subprocess.run(["git", "-C", str(VERL), "ls-tree", "-r", "--name-only", "v0.9.0", "examples"],
                           capture_output=True, text=True, check=True).stdout.split()
    scripts = [n for n in names if n.endswith(".sh")]
    translated = 0
    for name in scripts:
        text = subprocess.run(["git", "-C", str(VERL), "show", f"v0.9.0:{name}"], capture_output=True, text=True,
                              check=True).stdout
        flags, _ = overrides_of(text)
        if not any(k.startswith(("actor_rollout_ref.", "algorithm.")) for k in flags):
            continue  # SFT scripts, config-file launches
        out = tmp_path / f"{translated}.yaml"
        r = CliRunner().invoke(app, ["config", "from-verl", "-", "--out", str(out)], input=text)
        assert r.exit_code == 0, (name, r.output[-500:])
        load_config(out, [])
        translated += 1
    assert translated > 80


def test_overrides_gathered_in_a_multi_line_variable_are_the_scripts():
    """verl's example scripts (e.g. run_qwen3_5-122b-a10b_veomni.sh) collect overrides in a quoted variable
    spanning lines and expand it in the command; an unclosed quote leaves the other lines readable."""
    script = ('lr=1e-6\nmode=gspo\nACTOR="\n    actor_rollout_ref.actor.optim.lr=$lr \\\n'
              '    actor_rollout_ref.actor.policy_loss.loss_mode=${mode}"\n'
              'python3 -m verl.trainer.main_ppo $ACTOR algorithm.adv_estimator=grpo  # a "comment\n')
    flags, unresolved = overrides_of(script)
    assert flags == {A + "optim.lr": "1e-6", A + "policy_loss.loss_mode": "gspo", "algorithm.adv_estimator": "grpo"}
    assert unresolved == []
    broken = 'echo "never closed\ntrainer.total_training_steps=5\n'
    assert overrides_of(broken)[0] == {"trainer.total_training_steps": "5"}


def test_the_memory_agent_forks_grpo_use_adv_and_alpha():
    """MemAgent's and ReMemR1's verl forks read algorithm.grpo_use_adv instead of norm_adv_by_std_in_grpo (both
    scripts set it False: Dr.GRPO); ReMemR1's algorithm.alpha is named with the workflow settings it needs."""
    t = translate({"algorithm.adv_estimator": "grpo", "algorithm.grpo_use_adv": "False", "algorithm.alpha": "0.8"})
    assert t.settings["algorithm.adv_estimator"][0] == "dr_grpo"
    assert "algorithm.grpo_use_adv=False" in t.settings["algorithm.adv_estimator"][1]
    assert "state_reward_alpha=0.8" in t.skipped["algorithm.alpha"] and "grpo_use_adv" not in t.skipped
    assert translate({"data.shuffle": "False"}).settings["data.shuffle"] == (False, "data.shuffle=False")
    on = translate({"algorithm.adv_estimator": "grpo", "algorithm.grpo_use_adv": "True"})
    assert on.settings["algorithm.adv_estimator"][0] == "grpo"
    assert "state_reward_alpha" not in translate({"algorithm.alpha": "1.0"}).skipped.get("algorithm.alpha", "")  # no mix


def test_the_memory_agent_forks_scripts_name_their_workflow_and_batch_layout():
    """recurrent.enable=memory is MemAgent's fork (memory_revisit.py: ReMemR1's); their trainers lay out a step
    turn by turn on nnodes x n_gpus_per_node GPUs; verl's actor keeps fp32 weights."""
    flags = {"recurrent.enable": "memory", "recurrent.memory.config.chunk_size": "5000", "trainer.nnodes": "4",
             "trainer.n_gpus_per_node": "8", "recurrent.memory.path": "recurrent/impls/memory_revisit.py",
             "algorithm.alpha": "0.8"}
    got = {k: v for k, (v, _) in translate(flags).settings.items()}
    assert (got["workflow.name"], got["workflow.options.rememr1_variant"], got["workflow.options.chunk_tokens"]) == \
        ("rememr1", "released", 5000)
    assert (got["trainer.minibatch_order"], got["trainer.minibatch_ranks"]) == ("turn_major", 32)
    assert (got["algorithm.step_rewards"], got["workflow.options.state_reward_alpha"]) == (True, 0.8)
    assert got["model.dtype"] == "float32"
    plain = {k: v for k, (v, _) in translate({"recurrent.enable": "memory"}).settings.items()}
    assert plain["workflow.name"] == "memagent" and plain["trainer.minibatch_ranks"] == 8  # verl's 1 x 8
    unset = translate({"recurrent.enable": "memory", "trainer.nnodes": "$SLURM_NNODES"})
    assert "trainer.minibatch_ranks" not in unset.settings and "minibatch_ranks" in unset.skipped["trainer.nnodes"]


DAPO = """
max_response_length=$((1024 * 20))
overlong_buffer_len=$((1024 * 4))
train_prompt_bsz=512
gen_prompt_bsz=$((train_prompt_bsz * 3))
RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}
TRAIN_FILE=${TRAIN_FILE:-"${RAY_DATA_HOME}/data/dapo-math-17k.parquet"}
python3 -m recipe.dapo.main_dapo \\
    data.train_files="${TRAIN_FILE}" \\
    data.max_response_length=${max_response_length} \\
    data.gen_batch_size=${gen_prompt_bsz} \\
    data.train_batch_size=${train_prompt_bsz} \\
    actor_rollout_ref.rollout.n=16 \\
    algorithm.filter_groups.enable=True \\
    algorithm.filter_groups.metric=acc \\
    reward_model.overlong_buffer.enable=True \\
    reward_model.overlong_buffer.len=${overlong_buffer_len} \\
    reward_model.overlong_buffer.penalty_factor=1.0 \\
    actor_rollout_ref.actor.grad_clip=0.5 \\
    actor_rollout_ref.actor.optim.clip_grad=2.0
"""


def test_a_dapo_scripts_arithmetic_and_nested_defaults_are_read_as_bash_reads_them():
    flags, unresolved = overrides_of(DAPO)
    assert flags["data.max_response_length"] == "20480" and flags["data.gen_batch_size"] == "1536"
    assert flags["data.train_files"] == "${HOME}/verl/data/dapo-math-17k.parquet" and unresolved == ["HOME"]
    assert overrides_of("A=$((x / 2))\npython a.b=$A")[0]["a.b"] == "$((x/2))"  # unreadable: one word, unresolved
    bash = overrides_of("A=$((-7 / 2))\nB=$((-7 % 2))\nC=4\nD=$((${C} * 2))\npython a.b=$A c.d=$B e.f=$D")[0]
    assert (bash["a.b"], bash["c.d"], bash["e.f"]) == ("-3", "-1", "8")  # bash truncates toward zero


def test_dapos_generation_batch_filter_metric_overlong_buffer_and_clip_carry_over():
    t = translate(overrides_of(DAPO)[0])
    got = {k: v for k, (v, _) in t.settings.items()}
    assert got["algorithm.dynamic_sampling_prompts"] == 1536 and got["algorithm.dynamic_sampling_metric"] == "score"
    assert got["algorithm.overlong_buffer"] == 4096 and got["algorithm.overlong_max_tokens"] == 20480
    assert got["algorithm.overlong_penalty_factor"] == 1.0
    assert got["algorithm.max_gen_batches"] == 0  # verl's default: no limit
    assert got["trainer.grad_clip"] == 2.0 and "not read" in t.skipped[A + "grad_clip"]  # verl 0.9: optim.clip_grad
    plain = translate(overrides_of("python x.py data.gen_batch_size=96 algorithm.filter_groups.metric=acc")[0])
    assert "filter_groups.enable=True only" in plain.skipped["data.gen_batch_size"]
    assert "algorithm.dynamic_sampling_prompts" not in plain.settings


def test_an_explicit_null_threshold_keeps_verls_meaning_no_weights():
    """verl computes importance weights only when rollout_is and rollout_is_threshold are both set; memrl's
    default threshold (2.0) applied instead of the script's null weighted every token."""
    rc = "algorithm.rollout_correction."
    t = translate({rc + "rollout_is": "token", rc + "rollout_is_threshold": "null", rc + "rollout_rs": "seq_mean_k1",
                   rc + "rollout_rs_threshold": "0.999_1.001"})
    assert t.settings[rc + "rollout_is"][0] is None and t.settings[rc + "rollout_rs"][0] == "seq_mean_k1"
    assert rc + "rollout_is_threshold" not in t.settings and rc + "rollout_is_threshold" not in t.skipped
    other = translate({"trainer.total_training_steps": "null"})  # memrl's key refuses null: left out, saying so
    assert "trainer.total_steps" not in other.settings
    assert any("total_steps refuses None" in why for why in other.skipped.values()), other.skipped
    kept = translate({rc + "rollout_rs": "null"})  # memrl's default is null already: taken as given
    assert kept.settings[rc + "rollout_rs"][0] is None and not any(rc in k for k in kept.skipped)
