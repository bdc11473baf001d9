"""memrl's four workflows as :class:`~memrl.workflows.api.Workflow` objects.

Each wraps the agent loop of its module, which assembles the Trajectory itself
(token-level prompt splicing that the published numbers depend on); what the object
adds is the options model, the sample reader and the settings the trainer asks a
workflow about (response length, per-turn scores, config checks, services).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from pydantic import BaseModel

from memrl.engines.base import Engine, SamplingParams
from memrl.types import Trajectory
from memrl.workflows.api import Workflow, check_train_file
from memrl.workflows.options import FullContextOptions, MemAgentOptions, RememR1Options, ToolAgentOptions


class _LoopWorkflow(Workflow):
    """A workflow whose module-level agent loop ``loop(sample, engine, tokenizer, options, *, sampling, ...)``
    returns the whole Trajectory."""

    loop_path: ClassVar[str] = ""

    async def episode(self, sample: Any, *, engine: Engine, tokenizer: Any, sampling: SamplingParams,
                      services: Mapping[str, Any] | None = None, sample_id: str | None = None,
                      group_id: str | None = None) -> Trajectory:
        sample = self.prepare(sample, self.services if services is None else services)
        ids = {k: v for k, v in (("sample_id", sample_id), ("group_id", group_id)) if v is not None}
        return await self.loop()(sample, engine, tokenizer, self.options, sampling=sampling, **ids)

    def loop(self) -> Any:
        """The agent loop this workflow runs (``loop_path``, imported when first needed)."""
        from memrl.plugins import load_object

        return load_object(self.loop_path, "workflow loop")

    def prepare(self, sample: Any, services: Mapping[str, Any]) -> Any:
        """The sample as the loop takes it (with the run's services attached where it needs them)."""
        return sample


class QAWorkflow(_LoopWorkflow):
    """Long-context question answering: samples are ``data.train_file`` / ``data.eval_file`` in any layout
    ``memrl data`` reads (context, question, answers)."""

    def load_samples(self, split: str) -> list[Any]:
        from memrl.data import read_samples

        path = self.data_file(split)
        return [] if path is None else list(read_samples(path))

    def norm_tokens(self) -> int | None:
        return max(getattr(self.options, "memory_tokens", 0), self.options.final_tokens)

    def check_data(self, config: Any) -> None:
        if not config.data.train_file:
            raise ValueError("data.train_file is required for training (a file from memrl data synth or the demo)")
        check_train_file(config.data.train_file,
                         "give the training file in it (memrl data synth writes train_<N>k.parquet)")
        if config.trainer.eval.every and not config.data.eval_file:
            raise ValueError("trainer.eval.every > 0 needs data.eval_file")


class MemAgent(QAWorkflow):
    name = "memagent"
    Options: ClassVar[type[BaseModel]] = MemAgentOptions
    loop_path = "memrl.workflows.memagent:memagent"


class RememR1(QAWorkflow):
    name = "rememr1"
    Options: ClassVar[type[BaseModel]] = RememR1Options
    loop_path = "memrl.workflows.rememr1:rememr1"

    def state_advantage(self) -> tuple[float, float] | None:
        o = self.options
        return o.state_reward_alpha, 2.0 if o.rememr1_variant == "released" else 1.0


class FullContext(QAWorkflow):
    name = "full_context"
    Options: ClassVar[type[BaseModel]] = FullContextOptions
    loop_path = "memrl.workflows.full_context:full_context"

    def norm_tokens(self) -> int | None:
        return self.options.final_tokens


class ToolAgent(_LoopWorkflow):
    """τ²-bench tasks of ``env.domain``; the user simulator and NL judge are services built once per run."""

    name = "tool_agent"
    Options: ClassVar[type[BaseModel]] = ToolAgentOptions
    uses_env = True
    loop_path = "memrl.workflows.tool_agent:tool_agent"

    def load_samples(self, split: str) -> list[Any]:
        from memrl.workflows.tool_agent import task_samples

        env = self.config.env
        return task_samples(self.config, env.train_split if split == "train" else env.eval_split,
                            side_models=False, evaluating=split != "train")

    def build_services(self, config: Any) -> dict[str, Any]:
        from memrl.envs.nl_judge import build_nl_judge
        from memrl.workflows.tool_agent import build_user_simulator

        return {"user": None if config.env.solo else build_user_simulator(config), "judge": build_nl_judge(config)}

    def prepare(self, sample: Any, services: Mapping[str, Any]) -> Any:
        if sample.user is None and services.get("user") is not None or \
                sample.nl_judge is None and services.get("judge") is not None:
            return replace(sample, user=sample.user or services.get("user"),
                           nl_judge=sample.nl_judge or services.get("judge"))
        return sample

    def norm_tokens(self) -> int | None:
        return self.options.max_total_tokens

    def check(self, config: Any) -> None:
        from memrl.workflows.tool_budget import check_env

        check_env(config)
        keys = getattr(getattr(config, "algorithm", None), "gdpo_reward_keys", None) or []
        if "tool_call_validity" in keys:  # an episode that made no call has no share of valid calls
            raise ValueError("algorithm.gdpo_reward_keys: tool_call_validity is not logged for an episode that made "
                             "no tool call; use made_tool_call, or tool_calls and invalid_tool_calls")

    def check_samples(self, config: Any, tokenizer: Any, samples: list[Any], warn: Any) -> None:
        from memrl.workflows.tool_budget import check_tool_prompt_budget

        check_tool_prompt_budget(config, tokenizer, samples, warn)

    def data_source(self, config: Any, split: str) -> str:
        env = config.env
        return f"split {env.train_split if split == 'train' else env.eval_split!r} of env.domain={env.domain}"
