"""Datasets, partitioners and the in-memory federated dataset."""

from fedbench.data.federated import FederatedData, build_federated

__all__ = ["FederatedData", "build_federated"]
