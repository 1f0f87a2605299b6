"""Training internals of the train job: model, shard input, LR schedule, checkpoints, worker loop, report."""
