"""``memrl config from-trl``: a TRL GRPO run's settings (config file or launch command) as a memrl config that
trains TRL's algorithm, TRL's GRPOConfig defaults (f2cd577) filling what the run leaves out."""

from __future__ import annotations

import torch
import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.config import load_config
from memrl.config.from_trl import translate_trl
from memrl.config.from_verl import nested
from memrl.config.trl_args import command_arguments, trl_arguments
from memrl.rl import policy_objective
from tests.rl.test_trl_deepseek_losses import batch, trl_loss

DEEPMATH = """\
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
dataset_name: trl-lib/DeepMath-103K
num_generations: 16
per_device_train_batch_size: 16
gradient_accumulation_steps: 8
steps_per_generation: 16
num_iterations: 2
max_steps: 400
epsilon_high: 0.28
mask_truncated_completions: true
use_vllm: true
vllm_importance_sampling_mode: token_truncate
vllm_importance_sampling_clip_max: 2.0
lr_scheduler_type: cosine
warmup_ratio: 0.05
use_peft: true
lora_r: 32
lora_target_modules: [q_proj, v_proj]
bf16: true
"""


def values(fields, processes=1):
    t = translate_trl(fields, processes)
    return {k: v for k, (v, _) in t.settings.items()}, t.skipped


def test_a_config_file_becomes_memrls_steps_batches_and_corrections():
    """8 processes x 16 completions x 16 steps per generation = 2,048 completions = 128 prompts of 16; 16 / 8
    accumulated = 2 optimizer steps an epoch, 2 epochs: TRL's 400 optimizer steps are 100 memrl steps."""
    fields, processes = trl_arguments(DEEPMATH)
    got, skipped = values(fields, 8)
    assert processes is None and got["trainer.prompts_per_step"] == 128 and got["trainer.mini_batches"] == 2
    assert (got["algorithm.ppo_epochs"], got["trainer.total_steps"], got["trainer.warmup_steps"]) == (2, 100, 5)
    assert (got["algorithm.clip_ratio_low"], got["algorithm.clip_ratio_high"], got["algorithm.clip_ratio_c"]) == \
        (0.2, 0.28, 1e9)  # TRL's delta=None: no dual clip
    assert (got["algorithm.adv_estimator"], got["algorithm.epsilon"], got["algorithm.loss_agg_mode"]) == \
        ("grpo", 1e-4, "token-mean")  # scale_rewards="group" adds 1e-4; loss_type="dapo"
    assert got["algorithm.rollout_correction.rollout_is"] == "token"
    assert got["algorithm.rollout_correction.rollout_is_threshold"] == 2.0
    assert got["engine.kind"] == "vllm" and got["lora.r"] == 32 and got["lora.target_modules"] == ["q_proj", "v_proj"]
    assert got["trainer.lr_schedule"] == "cosine" and got["algorithm.mask_truncated_completions"] is True
    assert "workflow" in skipped["dataset_name"] and "autocast" in skipped["bf16"]
    assert got["model.dtype"] == "float32"  # TRL loads a model id in float32 (bf16 is autocast)
    load_config(None, [f"{k}={v}" for k, v in got.items() if not isinstance(v, list)])  # memrl accepts it all


def test_a_launch_command_gives_its_flags_and_the_launchers_process_count():
    text = ("accelerate launch --num_processes 4 --config_file zero3.yaml train_grpo.py \\\n"
            "  --model_name_or_path Qwen/Qwen3-1.7B --max_steps -1 --use_vllm --beta=0.01 \\\n"
            "  --lora_target_modules q_proj k_proj --loss-type grpo  # a comment\n")
    fields, processes = command_arguments(text)
    assert processes == 4
    assert fields["max_steps"] == -1 and fields["use_vllm"] is True and fields["beta"] == 0.01
    assert fields["lora_target_modules"] == ["q_proj", "k_proj"] and fields["loss_type"] == "grpo"
    assert fields["model_name_or_path"] == "Qwen/Qwen3-1.7B"


@pytest.mark.parametrize("fields, want, skipped", [
    ({"loss_type": "cispo", "epsilon_high": 5.0}, {"algorithm.policy_loss": "cispo", "algorithm.clip_ratio_low": 1.0,
                                                   "algorithm.clip_ratio_high": 4.0}, ()),
    ({"loss_type": "cispo"}, {"algorithm.policy_loss": "cispo"}, ("epsilon_high",)),  # TRL's cap would be 0.2
    ({"loss_type": "grpo", "importance_sampling_level": "sequence", "delta": 3.0},
     {"algorithm.policy_loss": "gspo"}, ("delta",)),
    ({"loss_type": "dr_grpo", "max_completion_length": 1024},
     {"algorithm.loss_agg_mode": "seq-mean-token-sum-norm", "algorithm.loss_scale_factor": 1024}, ()),
    ({"scale_rewards": "none"}, {"algorithm.adv_estimator": "dr_grpo"}, ()),
    ({"scale_rewards": "batch"}, {"algorithm.adv_estimator": "grpo_batch_std", "algorithm.epsilon": 1e-4}, ()),
    ({"scale_rewards": "sequence"}, {}, ("scale_rewards",)),  # TRL refuses it
    ({"delta": 2.0}, {"algorithm.clip_ratio_c": 2.0}, ()),
    ({"delta": 1.1}, {"algorithm.clip_ratio_high": 0.1, "algorithm.clip_ratio_c": 1.2}, ()),  # clamp under the clip
    ({"delta": 0.9}, {}, ("delta",)),
    ({"loss_type": "sapo", "epsilon": 0.3, "sapo_temperature_neg": 2.0},
     {"algorithm.policy_loss": "sapo", "algorithm.sapo_tau_neg": 2.0}, ("epsilon",)),
    ({"loss_type": "vespo", "vespo_k_neg": 4.0}, {"algorithm.policy_loss": "vespo", "algorithm.vespo_k_neg": 4.0}, ()),
    ({"vespo_k_neg": 4.0}, {}, ("vespo_k_neg",)),
    ({"use_bias_correction_kl": True}, {}, ("use_bias_correction_kl",)),  # beta 0: no KL to weigh
    ({"loss_type": "luspo", "importance_sampling_level": "sequence", "top_entropy_quantile": 0.2},
     {"algorithm.policy_loss": "luspo"}, ("top_entropy_quantile",)),
    ({"vllm_importance_sampling_mode": "token_mask"}, {}, ("vllm_importance_sampling_mode",)),  # no use_vllm
    ({"per_device_train_batch_size": 3}, {}, ("per_device_train_batch_size",)),  # 3 completions: no group of 8
])
def test_each_trl_choice_becomes_memrls_or_says_why_not(fields, want, skipped):
    got, why = values(fields)
    assert {k: got.get(k) for k in want} == want
    assert all(k in why for k in skipped), why
    load_config(None, [f"{k}={v}" for k, v in got.items()])


def test_the_translated_config_computes_trls_loss():
    """grpo with beta 0.04, epsilon_high 0.28, no delta: the loss of memrl's translated algorithm is TRL's."""
    from memrl.config.schema import MemRLConfig

    t = translate_trl({"loss_type": "grpo", "beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.2})
    algorithm = MemRLConfig.model_validate(nested(t)).algorithm
    g, mask, old, logp, adv = batch(3)
    ref = old + torch.randn(*old.shape, generator=g) * 0.2
    got, _ = policy_objective(logp, old, adv.expand_as(logp).contiguous(), mask, algorithm,
                              entropy=torch.zeros_like(logp), ref_log_prob=ref)
    assert got.item() == pytest.approx(trl_loss(logp, old, adv, mask, "grpo", beta=0.04, ref=ref).item(), rel=1e-5)


def test_the_command_writes_the_config_and_lists_what_it_left_out(tmp_path):
    source = tmp_path / "grpo.yaml"
    source.write_text(DEEPMATH)
    out = tmp_path / "memrl.yaml"
    r = CliRunner().invoke(app, ["config", "from-trl", str(source), "--processes", "8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "translated 17 of 19 TRL settings" in r.output and "dataset_name" in r.output
    assert load_config(out, []).trainer.prompts_per_step == 128
    again = CliRunner().invoke(app, ["config", "from-trl", str(source), "--out", str(out)])
    assert again.exit_code == 2 and "exists: pass --force" in again.output
    empty = tmp_path / "empty.sh"
    empty.write_text("echo hello\n")
    r = CliRunner().invoke(app, ["config", "from-trl", str(empty)])
    assert r.exit_code == 2 and "no TRL settings found" in r.output


def test_audit_cases_entropy_lora_dtype_clip_schedule():
    """Adaptive entropy's floats stay floats; a one-item target list is its string, as TRL's ModelConfig makes it;
    dtype and model_init_kwargs; max_grad_norm 0 is no clipping; constant has no warm-up; a warm-up below 1 is
    a ratio; the process count unknown is said."""
    got, skipped = values({"use_adaptive_entropy": True, "entropy_target": 0.5, "entropy_coef": 0.01}, 1)
    assert (got["algorithm.adaptive_entropy"], got["algorithm.entropy_target"]) == (True, 0.5)
    got, skipped = values({"use_peft": True, "lora_target_modules": ["all-linear"], "lora_modules_to_save": ["lm_head"],
                           "dtype": "bfloat16", "max_grad_norm": 0.0, "lr_scheduler_type": "constant",
                           "warmup_steps": 10, "max_steps": 100}, 1)
    assert got["lora.target_modules"] == "all-linear" and "lora_modules_to_save" in skipped
    assert got["model.dtype"] == "bfloat16" and got["trainer.grad_clip"] == 1e9
    assert "trainer.warmup_steps" not in got and "constant" in skipped["warmup_steps"]
    got, skipped = values({"warmup_steps": 0.1, "max_steps": 100, "lr_scheduler_type": "cosine",
                           "model_init_kwargs": {"dtype": "float16"}, "use_peft": True}, 1)
    assert got["trainer.warmup_steps"] == 10 and got["model.dtype"] == "float16"
    assert "peft's default" in skipped["lora_target_modules (TRL's default)"]
    assert "pass --processes N" in translate_trl({}, None).skipped["(processes)"]


def test_audit_cases_command_parsing():
    """A colon inside a command is not YAML; a quoted '#'; CRLF continuations; variables; --no_ flags; torchrun's
    nodes x processes; a --config file read under the command's flags."""
    fields, processes = trl_arguments('accelerate launch --num_processes 8 t.py --run_name "lr: 3e-6" '
                                      '--learning_rate 3e-6 --num_generations 16')
    assert processes == 8 and fields["learning_rate"] == 3e-6 and fields["num_generations"] == 16
    fields, _ = trl_arguments('LR=5e-7\r\npython t.py --run_name "exp #3" \\\r\n  --learning_rate $LR '
                              '--no_gradient_checkpointing\r\n')
    assert fields["learning_rate"] == 5e-7 and fields["run_name"] == "exp #3"
    assert fields["gradient_checkpointing"] is False
    assert command_arguments("torchrun --nnodes 4 --nproc_per_node 8 t.py")[1] == 32
    assert command_arguments("deepspeed --num_gpus 8 t.py")[1] == 8


def test_a_config_file_named_in_a_command_is_read_under_its_flags(tmp_path):
    (tmp_path / "grpo.yaml").write_text("learning_rate: 1.0e-5\nnum_generations: 4\n")
    fields, _ = trl_arguments("trl grpo --config grpo.yaml --num_generations 16", tmp_path)
    assert fields["learning_rate"] == 1e-5 and fields["num_generations"] == 16 and "config" not in fields


def test_a_python_script_gives_its_grpo_config_keywords():
    script = '''from trl import GRPOConfig, GRPOTrainer
from peft import LoraConfig

steps = 300
args = GRPOConfig(output_dir="out", learning_rate=5e-6, num_generations=4, loss_type="grpo", max_steps=steps,
                  beta=0.02, bf16=True)
trainer = GRPOTrainer(model="Qwen/Qwen2-0.5B-Instruct", reward_funcs=reward_len, args=args)
trainer.train()
'''
    fields, processes = trl_arguments(script)
    assert processes is None and fields["learning_rate"] == 5e-6 and fields["num_generations"] == 4
    got, skipped = values(fields)
    assert got["algorithm.loss_agg_mode"] == "seq-mean-token-mean" and got["algorithm.kl_coef"] == 0.02
    assert got["trainer.prompts_per_step"] == 2  # TRL's default 8 completions a process, groups of 4
    assert "trainer.total_steps" not in got and "'$steps' is not a value" in skipped["max_steps"]  # listed, not guessed


def test_an_entropy_bonus_aggregated_otherwise_than_trls_is_said():
    _, skipped = values({"loss_type": "luspo", "importance_sampling_level": "sequence", "entropy_coef": 0.01})
    assert "summed over each row" in skipped["(entropy bonus)"]
    _, skipped = values({"loss_type": "sapo", "entropy_coef": 0.01})
    assert "seq-mean-token-mean" in skipped["(entropy bonus)"]  # sapo's own aggregation
    for token_mean in ("dapo", "bnpo", "cispo", "vespo"):  # TRL's bonus is memrl's there (bnpo was flagged)
        _, skipped = values({"loss_type": token_mean, "entropy_coef": 0.01, "epsilon_high": 5.0})
        assert "(entropy bonus)" not in skipped, token_mean


def test_second_audit_cases(tmp_path):
    """A script's LoraConfig and GRPOTrainer(model=) and torch dtypes; a --config YAML's num_processes; a missing
    --config named; an unreadable $VAR listed under the field that carried it; a syntax error named."""
    script = '''import torch
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer

peft_config = LoraConfig(r=1, lora_alpha=32, target_modules="all-linear")
args = GRPOConfig(learning_rate=5e-5, model_init_kwargs={"torch_dtype": torch.bfloat16}, max_steps=10)
trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", args=args, peft_config=peft_config)
'''
    got, skipped = values(trl_arguments(script)[0])
    assert got["lora.enabled"] is True and got["lora.r"] == 1 and got["lora.target_modules"] == "all-linear"
    assert got["model.path"] == "Qwen/Qwen3-0.6B" and got["model.dtype"] == "bfloat16"
    assert "model_init_kwargs" not in skipped
    (tmp_path / "grpo.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_processes: 4\n")
    assert trl_arguments("trl grpo --config grpo.yaml", tmp_path)[1] == 4
    with pytest.raises(ValueError, match="--config missing.yaml: no such file"):
        trl_arguments("trl grpo --config missing.yaml --num_generations 16", tmp_path)
    got, skipped = values(command_arguments("python t.py --beta $B --max_steps 100")[0])
    assert "beta" in skipped and "not translated" in skipped["beta"] and "algorithm.kl_coef" not in got
    with pytest.raises(ValueError, match="does not parse \\(line 1"):
        trl_arguments("args = GRPOConfig(learning_rate=1e-5, beta=0.04\n")
    fields, _ = command_arguments("python t.py --run_name a=b --learning_rate 1e-6")
    assert fields["run_name"] == "a=b"


def test_an_accelerate_config_file_gives_the_process_count(tmp_path, monkeypatch):
    """accelerate's --config_file (TRL's --accelerate_config, or accelerate_config: in a TRL YAML) holds the run's
    num_processes; the launcher's own flag wins; distributed_type NO launches one process whatever it says."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero3.yaml").write_text("distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 16\n")
    (tmp_path / "single.yaml").write_text("distributed_type: 'NO'\nnum_processes: 8\n")
    (tmp_path / "bare.yaml").write_text("distributed_type: NO\nnum_processes: 8\n")  # YAML: False
    assert command_arguments("accelerate launch --config_file zero3.yaml t.py --beta 0.1")[1] == 16
    assert command_arguments("accelerate launch --config_file zero3.yaml --num_processes 4 t.py")[1] == 4
    assert command_arguments("accelerate launch --config_file single.yaml t.py")[1] == 1
    assert command_arguments("accelerate launch --config_file bare.yaml t.py")[1] == 1
    assert command_arguments("trl grpo --accelerate_config zero3.yaml --beta 0.1")[1] == 16
    assert trl_arguments("accelerate_config: zero3.yaml\nbeta: 0.1\n")[1] == 16
    fields, processes = command_arguments("accelerate launch --config_file missing.yaml t.py")
    assert processes is None
    _, skipped = values(fields, processes)
    assert "missing.yaml was not found or holds no num_processes" in skipped["(processes)"]


@pytest.mark.parametrize("delta", [1.05, 1.2, 1.28, 1.5, None])
def test_trls_delta_trains_as_the_translated_clip_range(delta):
    """TRL's dapo loss (grpo_trainer.py at f2cd577: coef_2 = clamp(coef_1, 1 - eps, 1 + eps_high); coef_1 clamped
    at delta; -min(coef_1 A, coef_2 A), token mean) against memrl's loss under the translated settings: loss and
    gradient equal on random batches, wherever delta sits against 1 + epsilon_high."""
    import torch

    from memrl.config.algorithm import AlgorithmConfig
    from memrl.rl import policy_objective

    got, skipped = values({"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28, "delta": delta})
    assert "delta" not in skipped
    algorithm = AlgorithmConfig(**{k.split(".", 1)[1]: v for k, v in got.items() if k.startswith("algorithm.")})
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        mask = (torch.rand(4, 9, generator=g) < 0.8).float()
        mask[:, 0] = 1.0
        old = -torch.rand(4, 9, generator=g) * 2
        logp = (old + torch.randn(4, 9, generator=g) * 0.5).clamp(max=-1e-3)
        adv = torch.randn(4, 1, generator=g).expand(4, 9).contiguous()
        x, y = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
        coef_1 = torch.exp(y - old)
        coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.28)
        if delta is not None:
            coef_1 = torch.clamp(coef_1, max=delta)
        want = (-torch.min(coef_1 * adv, coef_2 * adv) * mask).sum() / mask.sum()
        want.backward()
        loss, _ = policy_objective(x, old, adv, mask, algorithm, entropy=torch.zeros_like(logp))
        loss.backward()
        assert loss.item() == pytest.approx(want.item(), rel=1e-6, abs=1e-7), seed
        assert torch.allclose(x.grad, y.grad, rtol=1e-5, atol=1e-7), seed
