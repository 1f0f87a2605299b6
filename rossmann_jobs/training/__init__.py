"""Training internals of the train job: optimizer, shard input, LR schedule, checkpoints, worker loop, report."""
