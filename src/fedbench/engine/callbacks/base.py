"""The callback API: every object that observes a run (evaluation, divergence, checkpoints, the CSV / W&B logger,
pictures, the summary) is a ``Callback`` composed into the run (``fedbench.engine.callbacks.compose``), in the
spirit of Lightning's and pfl-research's callbacks. The round loop (``Simulation.run``) only trains, aggregates and
updates state, calling, in list order::

    on_run_start(sim)                 # before the first round (also on a resumed run: ``sim.resumed``)
    on_round_end(sim, record)         # after each round, with its ``RoundRecord``
    on_evaluate(sim, record)          # after each evaluation, with its ``EvalRecord`` (sent by ``Evaluation``)
    on_run_end(sim)                   # after the last round run (completed, diverged or interrupted)

``sim`` is the running ``fedbench.engine.simulation.Simulation`` (not imported here: the loop imports the
callbacks, never the other way round). A callback stops the run with ``sim.request_stop(status, reason)``; the loop ends after the current round. State
that must survive a checkpoint is the callback's ``state_dict`` (flat keys, merged into the run's checkpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

if TYPE_CHECKING:
    from fedbench.engine.metrics import EvalRecord, RoundRecord


class Callback:
    def on_run_start(self, sim: Any) -> None:
        pass

    def on_round_end(self, sim: Any, record: "RoundRecord") -> None:
        pass

    def on_evaluate(self, sim: Any, record: "EvalRecord") -> None:
        pass

    def on_run_end(self, sim: Any) -> None:
        pass

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass
