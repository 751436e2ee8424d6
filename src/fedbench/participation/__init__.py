"""Client participation as a three-layer stochastic process: availability x selection x dropout.

Each layer is a nested config group (``participation/availability``, ``participation/selection``,
``participation/dropout``); ``participation=<preset>`` picks a combination. See ``process.py``.
"""

from fedbench.participation.base import AVAILABILITY, DROPOUT, SELECTION, LayerContext, RoundParticipation
from fedbench.participation import availability as _availability  # noqa: F401  (registers)
from fedbench.participation import dropout as _dropout  # noqa: F401
from fedbench.participation import selection as _selection  # noqa: F401
from fedbench.participation import sampling as _sampling  # noqa: F401
from fedbench.participation import fedsrc as _fedsrc  # noqa: F401
from fedbench.participation import cluster as _cluster  # noqa: F401
from fedbench.participation import power_of_choice as _power_of_choice  # noqa: F401
from fedbench.participation import device_trace as _device_trace  # noqa: F401
from fedbench.participation import device_capacity as _device_capacity  # noqa: F401
from fedbench.participation.process import ParticipationProcess

LAYERS = {"availability": AVAILABILITY, "selection": SELECTION, "dropout": DROPOUT}

__all__ = ["LAYERS", "LayerContext", "ParticipationProcess", "RoundParticipation"]
