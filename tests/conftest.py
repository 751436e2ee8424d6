import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedbench.cli import _compose  # noqa: E402
from fedbench.config import register_configs  # noqa: E402

register_configs()


def compose(*overrides: str):
    """The composed config for ``overrides`` (as run.py would see it), with local-files-only logging."""
    return _compose(["logger=none", *overrides])


TINY = ("dataset=digits", "partition=iid", "partition.num_clients=10", "model=logreg", "rounds=4", "eval_every=2",
        "participation.selection.clients_per_round=4", "client.lr=0.1")


@pytest.fixture
def tiny_cfg():
    def make(*overrides):
        base = TINY
        if any(o.startswith("participation=") for o in overrides):  # presets bring their own selection
            base = tuple(o for o in TINY if not o.startswith("participation."))
        return compose(*base, *overrides)

    return make
