"""When to save: every N steps, or `auto`: an interval chosen from what saves cost here and how often GPUs fail.

`auto` measures the step time (between calls of `due`), each save's stall (the time inside `save` or
`save_async`), the background write (until the save committed) and how much slower steps run meanwhile,
and chooses the interval with the goodput model's first-order rule (`goodput.advice.interval_for`:
Young/Daly with the save's effective stall; the simulator's best interval lies within a few percent of it,
tests/goodput). The failure rate comes from the argument, else `$CLUSTERKIT_FAILURES_PER_GPU_HOUR`, else
Llama 3's. Every rank must save at the same step: the schedule changes only at the step after a save,
where every rank is, and the ranks first agree on the measurements (the largest of each), through `agree`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence

from clusterkit import runtime
from clusterkit.errors import ClusterkitError

log = logging.getLogger(__name__)

AUTO = "auto"
BOOTSTRAP_STEPS = 10  # the first save comes this many steps in: nothing about saves is measured before it
RECHOOSE_CHANGE = 0.2  # a new choice replaces the current one only when it differs by more than this
SMOOTHING = 0.3  # weight of each new measurement in the running means

Agree = Callable[[Sequence[float]], Sequence[float]]


MAX_EVERY = 10**9


def parse_every(value: object, label: str = "checkpoint_every") -> int | str:
    """A checkpoint interval as given (a whole number of steps, its digits, or 'auto'), or an error naming `label`."""
    if value == AUTO:
        return AUTO
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= len(str(MAX_EVERY)):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_EVERY:
        raise ClusterkitError(f"{label} {value!r}: must be a whole number of steps from 1 to {MAX_EVERY:,} or "
                              f"{AUTO!r}", fix=f"e.g. {label}: 100, or {AUTO} to have it chosen")
    return value


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds:,.0f} s"


def _mean(previous: float | None, value: float) -> float:
    return value if previous is None else (1 - SMOOTHING) * previous + SMOOTHING * value


class CheckpointSchedule:
    """`due(step)` once per step says whether to save at it; `saved` and `written` report what a save cost."""

    def __init__(self, every: int | str, *, failures_per_gpu_hour: float | None = None, gpus: int | None = None,
                 agree: Agree | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        from clusterkit.goodput.model import LLAMA3_FAILURES_PER_GPU_HOUR, check_parameter

        if every != AUTO and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ClusterkitError(f"checkpoint_every={every!r}: must be a whole number of steps (1 or more) or "
                                  f"{AUTO!r}", fix="e.g. checkpoint_every=100, or 'auto' to have it chosen")
        self.every = every
        source = "given"
        if every != AUTO:
            failures_per_gpu_hour = failures_per_gpu_hour or LLAMA3_FAILURES_PER_GPU_HOUR  # not used
        elif failures_per_gpu_hour is None and os.environ.get(runtime.FAILURES_PER_GPU_HOUR_ENV):
            text = os.environ[runtime.FAILURES_PER_GPU_HOUR_ENV]
            try:
                failures_per_gpu_hour = float(text)
            except ValueError:
                failures_per_gpu_hour = math.nan
            check_parameter("failures_per_gpu_hour", failures_per_gpu_hour, runtime.FAILURES_PER_GPU_HOUR_ENV,
                            repr(text))
            source = f"${runtime.FAILURES_PER_GPU_HOUR_ENV}"
        elif failures_per_gpu_hour is None:
            failures_per_gpu_hour, source = LLAMA3_FAILURES_PER_GPU_HOUR, "Llama 3's, the default"
        check_parameter("failures_per_gpu_hour", failures_per_gpu_hour)
        if gpus is not None:
            check_parameter("gpus", gpus)
        self.failures_per_gpu_hour, self._rate_source = failures_per_gpu_hour, source
        self.gpus = gpus or 1
        self._agree = agree or (lambda values: values)
        self._clock = clock
        self._last_call: float | None = None
        self._saved_since_call = False
        self._step_s: float | None = None  # steps with no background write
        self._step_writing_s: float | None = None  # steps while a background write runs
        self._stall_s: float | None = None
        self._write_s: float | None = None
        self._next: int | None = None  # the step of the next save (auto)
        self._choose_after_save = False
        self.interval_steps: int | None = every if isinstance(every, int) else None
        self.reason = f"every {every} steps, as given" if isinstance(every, int) else "not chosen yet"

    def due(self, step: int, *, writing: bool = False) -> bool:
        now = self._clock()
        if self._last_call is not None and not self._saved_since_call:
            if writing:
                self._step_writing_s = _mean(self._step_writing_s, now - self._last_call)
            else:
                self._step_s = _mean(self._step_s, now - self._last_call)
        self._last_call, self._saved_since_call = now, False
        if isinstance(self.every, int):
            return step % self.every == 0
        if self._next is None:
            self._next = step + BOOTSTRAP_STEPS
        if self._choose_after_save:
            self._choose_after_save = False
            self._choose(step)
        if step < self._next:
            return False
        self._choose_after_save = True
        self._next = step + (self.interval_steps or BOOTSTRAP_STEPS)  # moved by the choice after this save
        return True

    def saved(self, stall_s: float) -> None:
        """A save returned after `stall_s` seconds in the call."""
        self._stall_s = _mean(self._stall_s, stall_s)
        self._saved_since_call = True

    def written(self, write_s: float) -> None:
        """A save's background write finished `write_s` seconds after its call returned (0 for a blocking one)."""
        self._write_s = _mean(self._write_s, write_s)

    def _choose(self, step: int) -> None:
        from clusterkit.goodput.advice import interval_for
        from clusterkit.goodput.model import SaveCost

        slowdown = 0.0
        if self._step_s and self._step_writing_s:
            slowdown = max(0.0, self._step_writing_s / self._step_s - 1.0)
        step_s, stall_s, write_s, slowdown = self._agree(
            [self._step_s or 0.0, self._stall_s or 0.0, self._write_s or 0.0, slowdown])
        if step_s <= 0:
            return  # no step measured yet: keep the bootstrap interval
        mtbf_s = 3600.0 / (self.failures_per_gpu_hour * self.gpus)
        interval_s = interval_for(SaveCost(stall_s, write_s, min(slowdown, 1.0)), mtbf_s)
        steps = max(1, round(interval_s / step_s))
        current = self.interval_steps
        if current is None or abs(steps - current) > RECHOOSE_CHANGE * current:
            self.interval_steps = steps
            self.reason = (
                f"checkpoint every {steps} steps (~{steps * step_s:,.0f} s): a save stalls the loop {stall_s:.2f} s "
                f"and writes for {write_s:.1f} s in the background (steps {slowdown:.0%} slower meanwhile), steps "
                f"take {step_s:.3f} s, and a failure comes every {_duration(mtbf_s)} "
                f"({self.failures_per_gpu_hour:.3g} per GPU-hour, {self._rate_source}, x {self.gpus} GPUs): "
                f"Young/Daly sqrt(2 x stall x MTBF) with the save's effective stall")
            log.info("%s%s", "" if current is None else f"was every {current} steps; now ", self.reason)
        self._next = step - 1 + self.interval_steps  # counted from the save, one step back
