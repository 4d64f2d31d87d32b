"""Training: typed batches, the one generic training loop, atomic checkpoints, the `train` CLI."""
