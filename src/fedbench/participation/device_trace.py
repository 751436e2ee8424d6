"""Availability replayed from a FedScale behaviour trace on the simulated clock (``availability=device_trace``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from fedbench.errors import ConfigError, require
from fedbench.options import option
from fedbench.participation import traces
from fedbench.participation.base import AVAILABILITY, Availability, LayerConfig

KEY = "participation.availability"


class DeviceMapping(Enum):
    order = "order"  # client i -> the i-th device (ids sorted), FedScale's own mapping
    random = "random"  # a random assignment, from the stream (seed, "participation/availability/mapping")


@AVAILABILITY.register("device_trace")
class DeviceTrace(Availability):
    """Client i, replaying device j, is available in the round that starts at simulated time t iff
    tau = (t + start_s) mod finish_j lies in one of j's online intervals [active_k, inactive_k) (FedScale's
    ``isActive``: the trace repeats with period ``finish_time``). ``online_for`` is the time left in that interval
    (continued across the period's end when the next period opens online), which ``dropout=device_capacity`` needs
    to know whether a client stays online until it finishes.

    ``path=""`` replays synthetic devices (``traces.synth_behaviour``, one per client, drawn from the stream
    (seed, "participation/availability/devices")); a file is FedScale's ``client_behave_trace`` pickle, or the same
    content as JSON or Parquet (``fedbench.participation.traces``). With fewer devices than clients the run is
    refused unless ``reuse=true``, which maps client i to device i mod D (``order``) or repeats random
    permutations of the devices (``random``).
    """

    deterministic = True  # given the clock, round t's mask is fixed before anything is drawn
    uses_clock = True

    @dataclass
    class Config(LayerConfig):
        path: str = ""  # FedScale client_behave_trace (pickle, JSON or Parquet); "": synthetic devices
        mapping: DeviceMapping = DeviceMapping.order
        reuse: bool = False  # several clients may replay one device when the trace has fewer devices than clients
        start_s: float = option(0.0, ge=0)  # trace time at which the run's clock starts (e.g. 3600 x hour of day)
        synth_days: float = option(7.0, gt=0)  # path="": the synthetic trace's period in days

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        n = ctx.num_clients
        if cfg.path:
            try:
                trace = traces.behaviour(traces.read_records(cfg.path), cfg.path)
            except traces.TraceError as exc:
                raise ConfigError(f"{KEY}.path", str(exc), "give a FedScale client_behave_trace (pickle, JSON or "
                                  "Parquet), or path='' for synthetic devices (fedbench-traces synth writes files).") \
                    from None
        else:
            trace = traces.synth_behaviour(n, ctx.rng("availability/devices"), cfg.synth_days)
        d = trace.num_devices
        require(d >= n or cfg.reuse, f"{KEY}.path", f"the trace has {d} devices for {n} clients.",
                f"set {KEY}.reuse=true to let several clients replay one device, or use at most {d} clients.")
        if DeviceMapping(cfg.mapping) == DeviceMapping.order:
            device = np.arange(n) % d
        else:
            rng = ctx.rng("availability/mapping")
            device = np.concatenate([rng.permutation(d) for _ in range(-(-n // d))])[:n]
        self.trace = trace
        self.device = device.astype(np.int64)  # client -> row of the trace
        ctx.devices = [trace.ids[j] for j in self.device]  # client -> device id (the capacity file's key)
        # intervals laid end to end, device j's shifted by j x width, so one sorted search serves every client
        width = float(trace.finish.max()) + 1.0
        owner = np.repeat(np.arange(d), np.diff(trace.offsets))
        self._flat_start = owner * width + trace.starts
        self._flat_end = owner * width + trace.ends
        self._base = self.device * width
        self._lo, self._hi = trace.offsets[self.device], trace.offsets[self.device + 1]
        self._period = trace.finish[self.device]
        # an interval that ends at the period's end continues into the next period's first one if that starts at 0
        self._wrap = np.zeros(n)
        if trace.starts.size:
            first = np.minimum(self._lo, trace.starts.size - 1)
            opens = (self._hi > self._lo) & (trace.starts[first] == 0.0)
            self._wrap = np.where(opens, trace.ends[first], 0.0)
        self._cache: tuple = (None, None)

    def _online(self) -> np.ndarray:
        """Seconds left online for each client at the clock's now (0 where offline)."""
        now = self.ctx.clock.now
        if self._cache[0] == now:
            return self._cache[1]
        tau = np.mod(now + self.cfg.start_s, self._period)
        q = self._base + tau
        k = np.searchsorted(self._flat_start, q, side="right") - 1
        inside = (k >= self._lo) & (k < self._hi)
        kk = np.clip(k, 0, max(self._flat_end.size - 1, 0))
        end = self._flat_end[kk] if self._flat_end.size else q
        on = inside & (q < end)
        left = np.where(on, end - q, 0.0)
        at_end = on & (np.abs(end - self._base - self._period) < 1e-9)
        left = np.where(at_end, left + self._wrap, left)
        self._cache = (now, left)
        return left

    def mask(self, t, rng):
        return self._online() > 0

    def online_for(self):
        return self._online()

    def long_run(self):
        return self.trace.online_fraction()[self.device]
