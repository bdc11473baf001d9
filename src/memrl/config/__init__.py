"""Configuration: pydantic schema, YAML loading, dotted command-line overrides."""

from memrl.config.load import ConfigError, dump_config, load_config, parse_value
from memrl.config.schema import DataConfig, MemRLConfig, ModelConfig, TrainerConfig

__all__ = [
    "ConfigError",
    "DataConfig",
    "MemRLConfig",
    "ModelConfig",
    "TrainerConfig",
    "dump_config",
    "load_config",
    "parse_value",
]
