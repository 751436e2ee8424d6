"""fedbench: a Hydra-configured benchmark suite for federated learning under partial participation."""

__version__ = "0.1.0"
