"""Test helpers that are useful to users too (deterministic engines)."""

from memrl.testing.scripted import ScriptedEngine

__all__ = ["ScriptedEngine"]
