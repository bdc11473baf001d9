"""Training: rollout -> reward -> advantage -> update -> weight sync, with checkpoints."""
