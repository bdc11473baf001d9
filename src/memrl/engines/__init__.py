"""Inference engines behind one async token-in/token-out protocol."""

from memrl.engines.base import Engine, EngineError, GenerationResult, SamplingParams

__all__ = ["Engine", "EngineError", "GenerationResult", "SamplingParams"]
