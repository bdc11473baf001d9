"""The configuration schema: one pydantic model per section.

Every section forbids unknown keys so that a typo (``trainer.lrr``) fails loudly
instead of silently training with a default. Sections grow as features land;
a field appears here only when code reads it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from memrl.config.algorithm import AlgorithmConfig
from memrl.config.engine import EngineConfig, VLLMOptions
from memrl.config.registry import registered
from memrl.config.section import Finite, Section, Seed, external_fields
from memrl.config.sides import AsyncConfig, JudgeConfig, TrainEvalConfig, UserSimConfig
from memrl.config.teacher import TeacherConfig
from memrl.plugins import DOMAINS, REWARDS, WORKFLOWS

__all__ = ["AlgorithmConfig", "EngineConfig", "VLLMOptions", "Section"]  # re-exported: their old home


class ModelConfig(Section):
    """Which model to load (a local Hugging Face folder, a hub id, or a memrl alias)."""

    path: str = Field("tiny", min_length=1, description="HF model folder/id or alias such as 'tiny'.")
    tokenizer: str | None = Field(None, description="Tokenizer path; defaults to the model's.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype: auto = bfloat16 on a GPU that supports it, else float32.")


class DataConfig(Section):
    """Long-context data synthesis (``memrl data synth``) and dataset locations."""

    input: str | None = Field(None, description="Source QA file (HotpotQA JSON, JSONL or parquet).")
    pool: list[str] = Field(default_factory=list, description="Extra distractor paragraph files.")
    out: str = Field("data/synth", description="Output folder for synthesized files.")
    docs: list[int] = Field(
        default_factory=lambda: [50, 100, 200, 400, 800, 1600, 3200, 6400],
        description="Number of documents per eval file (RULER-HQA sizes).",
    )
    train_tokens: int | None = Field(None, description="Token budget of the training file.")
    seed: Seed = 42
    allow_repeats: bool = Field(False, description="memrl data synth: let a document repeat in one context when "
                                "the pool has too few distinct paragraphs.")
    include_question_distractors: bool = Field(True, description="memrl data synth: keep each question's own "
                                               "HotpotQA distractor paragraphs in its context.")
    format: Literal["json", "jsonl", "parquet"] = Field("json", description="memrl data synth: file format of "
                                                        "the eval files.")
    max_samples: int | None = Field(None, description="memrl data synth: at most this many questions per file "
                                    "(null: all).")
    train_file: str | None = Field(None, description="Training samples (any long-context file layout).")
    shuffle: bool = Field(True, description="Visit the training samples in a seeded order per epoch; false: in "
                          "file order every epoch (verl's data.shuffle=False, as MemAgent's and ReMemR1's scripts; "
                          "verl also drops an epoch's last partial batch, memrl carries it into the next epoch).")
    eval_file: str | None = Field(None, description="Held-out samples evaluated every trainer.eval.every steps.")

    @field_validator("docs")
    @classmethod
    def _positive_docs(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if n <= 0]
        if bad:
            raise ValueError(f"document counts must be positive, got {bad}")
        return v


class WorkflowConfig(Section):
    """Which workflow runs an episode (``name``) and its own options (``options``, checked against its model).

    Files written before options existed put a workflow's settings directly here
    (``workflow.chunk_tokens``); they are read as ``workflow.options.chunk_tokens`` with a
    one-line notice, and reading ``cfg.workflow.chunk_tokens`` still finds the option.
    """

    name: registered(WORKFLOWS) = Field(
        "memagent", description="memagent | rememr1 | full_context | tool_agent | agent (any program that talks to "
        "an OpenAI-compatible API: workflow.options.program or command), or your own workflow as "
        "'package.module:ClassName' (a memrl.Workflow subclass).")
    options: dict[str, Any] = Field(default_factory=dict, description="The workflow's options (its Options "
                                    "model; `memrl config schema` lists the built-ins'); unknown keys fail.")

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        from memrl.plugins import workflow_support

        return workflow_support("migrate_workflow_keys")(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _options(self) -> "WorkflowConfig":
        from memrl.plugins import workflow_support

        object.__setattr__(self, "options", workflow_support("checked_options")(self.name, self.options))
        return self

    def build(self) -> Any:
        """The workflow object this section names, with these options (a new one each call)."""
        from memrl.plugins import workflow_support

        return workflow_support("make_workflow")(self.name, self.options)

    @property
    def opts(self) -> Any:
        """The options as the workflow's model (attribute access, defaults filled in)."""
        from memrl.plugins import workflow_support

        return workflow_support("options_model")(self.name, self.options)

    def resolved(self) -> dict[str, Any]:
        """Name and every option, defaults filled in (what decides an episode: eval fingerprints, show)."""
        return {"name": self.name, "options": self.opts.model_dump(mode="json")}

    def __getattr__(self, key: str) -> Any:
        # `cfg.workflow.chunk_tokens` from before options existed: the option of that name
        if not key.startswith("_") and "options" in self.__dict__:
            opts = self.opts
            if key in type(opts).model_fields:
                return getattr(opts, key)
            from memrl.plugins import workflow_support

            legacy = workflow_support("LegacyOptions").model_fields.get(key)
            if legacy is not None:  # another workflow's option, read by old code: its old default
                return legacy.default
        return super().__getattr__(key)  # type: ignore[misc]


class EnvConfig(Section):
    """Tool-agent environment: the domain, its tasks, the user simulator and the NL judge (workflow.name=tool_agent)."""

    section_key: ClassVar[str | None] = "env"

    domain: registered(DOMAINS) = Field(
        "library", description="'library' (built in), a tau2-bench domain (mock, retail, telecom, "
        "telecom-workflow), or your own as 'package.module:factory' (see memrl.envs.domain).")
    data_dir: str | None = Field(None, description="tau2-bench clone or its data/tau2/domains folder "
                                 "(not needed for 'library').")
    train_split: str | None = Field("train", description="Task split trained on (null: all tasks).")
    eval_split: str | None = Field("test", description="Task split evaluated every trainer.eval.every steps.")
    task_ids: list[str] | None = Field(None, description="Evaluate only these tasks of env.eval_split, in the "
                                       "split's order (tau2-bench's --task-ids); an id the split lacks is an error.")
    num_tasks: int | None = Field(None, ge=1, description="Evaluate the first N tasks of env.eval_split, after "
                                  "env.task_ids (tau2-bench's --num-tasks).")
    solo: bool = Field(True, description="Solo mode: the agent gets the ticket and works alone; "
                       "false needs a user simulator (env.user.model).")
    partial_credit: bool = Field(False, description="Reward = mean of component pass rates instead of "
                                 "tau2-bench's all-or-nothing product.")
    reward: registered(REWARDS) = Field(
        "tau2", description="Training reward of tool_agent: tau2 (tau2-bench's) or progress, the fraction of "
        "checks passed (database, env assertions, gold actions, required information; not a tau2-bench number, "
        "see memrl.envs.progress), or your own reward (text, *, sample, grade, **kw) -> float as "
        "'package.module:function'. The tau2-bench reward stays in metrics tau2_reward.")
    user: UserSimConfig = Field(default_factory=UserSimConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    prompts: Literal["memrl", "tau2"] = Field(
        "memrl", description="What the agent reads: memrl (the domain policy as system prompt, memrl's own tool "
        "descriptions; no tau2-bench install needed) or tau2 (tau2-bench's agent system prompt around the policy "
        "and its tool schemas; the user simulator's system prompt and tools and the NL-assertion judge's prompt "
        "likewise; in solo mode tau2-bench's solo agent (the ticket in its prompt, a done tool); imported from "
        "your tau2-bench install: for numbers set beside its leaderboard's).")
    tool_options: dict[str, Any] = Field(default_factory=dict, description="Switches of the domain's tools, e.g. "
                                         "{per_item_variant: true} for retail (tau2-bench's default is false).")


class SamplingConfig(Section):
    """Rollout sampling (greedy when temperature is 0)."""

    temperature: Finite = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, description="Sample among the k most likely tokens (0: off).")
    seed: Seed | None = Field(None, description="memrl eval: the seed each episode's sampling seed derives from "
                              "(null: trainer.seed; training always derives them from trainer.seed).")


class EvalConfig(Section):
    """How ``memrl eval`` scores and samples (see :mod:`memrl.rewards.published` for the protocols)."""

    protocol: Literal["memrl", "memagent", "rememr1"] = Field(
        "memrl", description="memrl: one-way sub-EM, max over golds; memagent / rememr1: the papers' scripts "
        "(bidirectional sub-EM against the first gold, empty answer 0) with their sampling defaults "
        "(temperature 0.7, top_p 0.95 unless sampling.* is set).")
    repeats: int = Field(1, ge=1, description="Samples per question (seeds differ); reports mean accuracy and "
                         "pass@K per document count (MemAgent's --sampling).")
    max_retries: int = Field(0, ge=0, description="tool_agent: a trial that fails (raises: an HTTP error, or "
                             "tau2-bench's invalid messages with workflow.options.invalid_messages=tau2) is run "
                             "again at once, with the same seed, up to this many times (tau2-bench's "
                             "--max-retries, its default 3); one still failing is left out of the metrics and "
                             "tried again by the next run.")
    retry_delay_s: float = Field(1.0, ge=0, description="Seconds between those tries (tau2-bench's --retry-delay).")


class LoraConfig(Section):
    """LoRA through peft; the reference policy is the base model (adapter disabled)."""

    enabled: bool = Field(False, description="Train a LoRA adapter instead of every weight.")
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | str = Field("all-linear", description="Modules that get an adapter: peft's "
                                            "'all-linear', or a list of module names.")


class TrainerConfig(Section):
    """Optimisation, batching and run bookkeeping."""

    section_key: ClassVar[str | None] = "trainer"

    lr: Finite = Field(1e-6, gt=0)
    weight_decay: Finite = Field(0.0, ge=0)
    warmup_steps: int = Field(0, ge=0, description="Linear warmup over this many steps, from lr 0 at the first "
                              "(verl's schedule: step s runs at lr x s / warmup_steps).")
    lr_schedule: Literal["constant", "cosine"] = Field("constant", description="After warmup: constant, or "
                                                       "cosine decay to 0 at total_steps.")
    grad_clip: float = Field(1.0, gt=0)
    seed: Seed = 42
    output_dir: str = Field("runs/default", description="The run's folder (config, checkpoints, metrics, "
                            "rollouts); running the same command again resumes from it.")
    total_steps: int = Field(100, ge=1, description="Steps of the whole run, each a rollout and an update of "
                             "mini_batches x ppo_epochs optimizer steps (a resumed run trains "
                             "until it has this many).")
    save_every: int = Field(10, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    allow_changes: list[str] = Field(default_factory=list, description="Settings (section.key, e.g. trainer.lr) "
                                     "a resumed run may change from its config.yaml (memrl train --allow-changes).")
    prompts_per_step: int = Field(4, ge=1, description="Prompts per step; each is rolled out algorithm.n times.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per PPO epoch (the step's rows split evenly).")
    minibatch_order: Literal["shuffled", "turn_major"] = Field(
        "shuffled", description="How the step's conversations are split into mini-batches: shuffled (each epoch "
        "a seeded permutation), or turn_major as MemAgent's and ReMemR1's trainers lay out a step (every "
        "episode's first conversation, then every second one, ..., the final answers last, unshuffled), split as "
        "they split it on trainer.minibatch_ranks GPUs.")
    minibatch_ranks: int = Field(1, ge=1, description="turn_major: the original run's data-parallel GPUs. Each "
                                 "takes a contiguous slice of the step and cuts it into mini_batches pieces; "
                                 "mini-batch m is every GPU's m-th piece (on 1 GPU the final answers get "
                                 "mini-batches of their own; on MemAgent's 32 each mini-batch mixes every turn).")
    micro_batch_tokens: int = Field(16384, ge=1, description="Token budget of one forward/backward pass.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass: "
                                         "less memory, about a third more compute.")
    max_nan_steps: int = Field(3, ge=1, description="Stop after this many non-finite losses in a row.")
    max_failed_steps: int = Field(3, ge=1, description="Stop (non-zero exit) after this many steps in a row "
                                  "in which every episode failed or nothing was trainable.")
    stop_grace_s: float = Field(30.0, gt=0, description="After a first SIGINT/SIGTERM, seconds the current step's "
                                "episodes (or an eval's) may still run; then the step is not trained (synchronous mode: the "
                                "resumed run does it again) or the eval is abandoned, and the last finished step is "
                                "saved.")
    eval: TrainEvalConfig = Field(default_factory=TrainEvalConfig)
    tensorboard: bool = Field(False, description="Also log metrics to RUN/tensorboard (memrl[tracking]).")
    wandb_project: str | None = Field(None, description="Also log to this Weights & Biases project "
                                      "(memrl[tracking]; WANDB_API_KEY from the environment).")
    rollouts_every: int = Field(1, ge=0, description="Write sampled episodes to RUN/rollouts/ every K steps "
                                "(0: never); memrl sft reads them.")
    rollouts_per_step: int = Field(4, ge=1, description="Episodes written per such step: best, worst, random.")
    mode: Literal["sync", "async"] = Field("sync", description="sync: generate, then update, then sync weights. "
                                           "async: episodes generate continuously while the policy updates "
                                           "(AReaL-style), bounded by trainer.async.max_staleness.")
    async_: AsyncConfig = Field(default_factory=AsyncConfig, alias="async")

    @field_validator("allow_changes")
    @classmethod
    def _allowable(cls, v: list[str]) -> list[str]:
        return check_resume_keys(v)


class ClusterConfig(Section):
    """Scale-out: Ray rollout replicas and data-parallel trainer ranks (optional extra: memrl[ray])."""

    address: str | None = Field(None, description="Ray cluster to join: 'auto' or host:port of 'ray start --head'; "
                                "null starts Ray on this machine when rollout_replicas > 0.")
    rollout_replicas: int = Field(0, ge=0, description="Engine replicas as Ray actors, each an engine.kind "
                                  "(hf or vllm) engine (0: the in-process engine).")
    replica_cpus: Finite = Field(1.0, gt=0, description="CPUs Ray reserves per replica.")
    replica_gpus: Finite = Field(0.0, ge=0, description="GPUs per replica (fractions share a GPU).")
    trainers: int = Field(1, ge=1, description="Data-parallel trainer processes (torch.distributed); "
                          "under torchrun WORLD_SIZE wins.")
    strategy: Literal["ddp", "fsdp"] = Field("ddp", description="ddp: every rank holds the whole model and "
                                             "gradients are all-reduced; fsdp: FSDP2 shards weights, gradients "
                                             "and optimizer state layer by layer (models that do not fit per rank).")
    collective_timeout_s: Finite = Field(3600.0, gt=0, description="How long a trainer rank waits in a collective "
                                         "before the run fails: the other ranks wait for rank 0's rollouts in one, "
                                         "so it must exceed a step's rollout; a rank that hangs is found after it "
                                         "(torch's default: 30 min with gloo, 10 with NCCL).")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="auto: NCCL with CUDA, else gloo.")
    weight_sync: Literal["object_store", "collective"] = Field(
        "object_store", description="How replicas get new weights: object_store (one CPU copy in Ray's store, "
        "every replica reads it) or collective (a gloo/NCCL broadcast from the trainer; NCCL when replicas have "
        "whole GPUs of their own, i.e. placement=split).")
    placement: Literal["colocate", "split"] = Field("split", description="colocate: replicas share the trainer's "
                                                    "devices and sleep (offload) during updates; split: own devices.")


class MemRLConfig(Section):
    """The whole configuration, as printed by ``memrl config show``."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    workflow: WorkflowConfig = Field(default_factory=WorkflowConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

    @model_validator(mode="after")
    def _distillation_keeps_groups(self) -> "MemRLConfig":
        """Dynamic sampling drops groups whose rewards are all equal: under ``teacher.mode=replace`` those groups
        still carry the whole training signal (tinker-cookbook's distillation keeps them on purpose)."""
        if self.teacher.enabled and self.teacher.mode == "replace" and self.algorithm.dynamic_sampling:
            raise ValueError("algorithm.dynamic_sampling would drop the groups whose rewards are all equal, but with "
                             "teacher.mode=replace the teacher's signal trains every group: turn one of them off "
                             "(or use teacher.mode=add)")
        if self.algorithm.ref_sync_every is not None and self.lora.enabled:
            raise ValueError("algorithm.ref_sync_every mixes the policy into a reference copy, but a LoRA run's "
                             "reference is the base model with the adapter off (TRL refuses sync_ref_model with "
                             "PEFT too): use full fine-tuning or leave ref_sync_every unset")
        if self.algorithm.dynamic_sampling_prompts is not None and self.trainer.mode == "async":
            raise ValueError("algorithm.dynamic_sampling_prompts sets the prompts of a synchronous round; an "
                             "asynchronous run refills group by group (leave it unset)")
        return self

    @model_validator(mode="after")
    def _async_correction(self) -> "MemRLConfig":
        """Asynchronous runs (max_staleness >= 1) clip against the policy that drew each sample, unless told otherwise.

        Trained as on-policy (one epoch: the ratio to the recomputed policy is 1, so PPO's clip never acts), a
        sample drawn one version earlier pushes with full weight on tokens the current policy has already moved:
        on the demo's seed 1 the gradient norm jumped from 1.9 to 33.5 the step after a large update and held-out
        accuracy fell from 90.6% to 53.1%. PPO clipped against the engine's log-probs (verl's bypass mode,
        ``ppo_clip``) is the trust region of the behaviour policy; AReaL's decoupled weights alone still collapsed
        on a perturbed seed 1 (docs/guides/async.md). A config that names ``algorithm.off_policy`` or any
        ``algorithm.rollout_correction`` setting keeps its own choice.
        """
        a = self.algorithm
        rc = a.rollout_correction
        if (self.trainer.mode == "async" and self.trainer.async_.max_staleness >= 1
                and "off_policy" not in a.model_fields_set and not rc.model_fields_set):
            if a.replaces_ppo:  # bypass mode is a PPO loss of its own: it would silently replace the chosen one
                raise ValueError(f"asynchronous training clips stale samples with PPO against the engine's log-probs "
                                 f"(rollout_correction.bypass_mode), which policy_loss={a.policy_loss!r} would "
                                 "replace: weight it instead with the rollout correction's decoupled mode "
                                 "(algorithm.rollout_correction.rollout_is=token), or set trainer.async.max_staleness=0")
            rc.bypass_mode = True
        return self


# sections a resumed run can never change, even when asked (trainer.allow_changes)
FIXED_ON_RESUME = ("model", "lora")


def setting_path(key: str) -> str:
    """``key`` as the dotted path of a setting or section (an old flat key read as its new place); ValueError
    when the schema has nothing there. Keys inside a free-form mapping (``workflow.options.*``) pass."""
    from memrl.config.renames import moved_key

    parts = key.split(".")
    moved = moved_key(parts[0], parts[1]) if len(parts) == 2 else None
    if moved is not None:
        parts = [parts[0], *moved]
    model: Any = MemRLConfig
    for depth, part in enumerate(parts):
        info = external_fields(model).get(part) if model is not None else None
        if model is not None and info is None:
            raise ValueError(f"{key!r} is not a setting (section.key, e.g. trainer.lr)")
        if model is None:  # inside a mapping such as workflow.options: any key may be there
            break
        ann = info.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, Section) else None
        if model is None and depth < len(parts) - 1 and not str(ann).startswith("dict"):
            raise ValueError(f"{key!r} is not a setting ({'.'.join(parts[:depth + 1])} has no keys inside)")
    if len(parts) < 2:
        raise ValueError(f"{key!r} is not a setting (section.key, e.g. trainer.lr)")
    return ".".join(parts)


def check_resume_keys(keys: list[str]) -> list[str]:
    """``trainer.allow_changes``: settings (``trainer.lr``, ``trainer.eval.every``) or sections, none whose change
    would not fit the checkpoint."""
    for key in keys:
        path = setting_path(key)
        sec = path.split(".")[0]
        if sec in FIXED_ON_RESUME:
            raise ValueError(f"{key} cannot change on resume: the checkpoint's weights belong to the {sec} "
                             "settings it was started with")
    return [setting_path(k) for k in keys]
