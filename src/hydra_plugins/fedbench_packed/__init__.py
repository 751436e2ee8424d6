"""fedbench's Hydra plugins: the packed launcher (``hydra/launcher=packed``)."""
