"""memrl: RL for multi-conversation LLM agents."""
__version__ = "0.1.0"
