"""fedbench's Hydra plugins: the tuning sweeper (``hydra/sweeper=tune``)."""
