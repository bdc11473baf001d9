"""Scale-out on existing engines: Ray rollout replicas and torch.distributed data-parallel training."""
