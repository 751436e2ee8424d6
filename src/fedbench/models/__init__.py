"""The model zoo: one file per family, each model a factory registered with ``@MODELS.register`` (``base``)."""

from fedbench.models.base import MODELS, SeededDropout, ZooModel, build_model
from fedbench.models import cnn, linear, resnet, vgg  # noqa: F401  (registers)

__all__ = ["MODELS", "SeededDropout", "ZooModel", "build_model"]
