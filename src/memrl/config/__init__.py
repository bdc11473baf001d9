"""Configuration: pydantic schema, YAML loading, dotted command-line overrides."""

from memrl.config.load import ConfigError, dump_config, load_config, parse_value
from memrl.config.schema import (
    DataConfig,
    EngineConfig,
    MemRLConfig,
    ModelConfig,
    SamplingConfig,
    TrainerConfig,
    WorkflowConfig,
)

__all__ = [
    "ConfigError",
    "DataConfig",
    "EngineConfig",
    "MemRLConfig",
    "ModelConfig",
    "SamplingConfig",
    "TrainerConfig",
    "WorkflowConfig",
    "dump_config",
    "load_config",
    "parse_value",
]
