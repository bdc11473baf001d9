"""Tool environments (τ²-bench compatible): domains, tools, tasks, grading, user simulators."""

from memrl.envs.domain import Domain, load_domain
from memrl.envs.environment import Environment
from memrl.envs.evaluate import RewardInfo, evaluate, evaluate_async, replay_gold, run_calls
from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import Task, read_tasks
from memrl.envs.toolkit import Tool, ToolError, Toolkit, tool

__all__ = ["Domain", "Environment", "Message", "RewardInfo", "Task", "Tool", "ToolCall", "ToolError", "Toolkit",
           "evaluate", "evaluate_async", "load_domain", "read_tasks", "replay_gold", "run_calls", "tool"]
