"""An event-driven Monte Carlo of a training run under failures: where each second of wall-clock goes.

The run trains in cycles: `interval` seconds of steps, then a save. Failures arrive while it trains, at
the scenario's rate per GPU-hour across the job's GPUs (a Poisson process, so the time to the next one is
exponential). A failure loses the progress made since the last *committed* checkpoint (an async save
commits once its background write is done), then costs its detection (per manifestation and policy),
the wait for a ready node when it took one out (a spare, a free node, or its own replacement), the
recovery path, the restart and the checkpoint load. Steps are never partial: the model works in seconds.

Runs are simulated side by side with numpy, one failure of every run per loop step, so a 54-day run of
16,384 GPUs (about 420 failures) takes milliseconds. The random draws come in the same order whatever the
policy or interval, so policies and intervals compared with one seed meet the same failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from clusterkit.goodput.categories import (
    CATEGORIES,
    CHECKPOINT_STALL,
    DETECTION,
    HANG,
    LOST_WORK,
    PRODUCTIVE,
    RECOVERY,
)
from clusterkit.goodput.model import HANG as HANG_KIND
from clusterkit.goodput.model import (
    MANIFESTATIONS,
    REPLACES_NODE,
    Policy,
    Scenario,
    check_parameter,
    load_s,
    save_cost,
)
from clusterkit.lean_dataclass import lean_dataclass

if TYPE_CHECKING:
    import numpy as np


@lean_dataclass(frozen=True)
class PolicyResult:
    """One policy's simulated runs: the mean seconds per category and the goodput of each run."""

    policy: Policy
    interval_s: float
    runs: int
    seconds: Mapping[str, float]  # mean over runs; the categories sum to the horizon
    goodputs: tuple[float, ...]
    failures: float  # mean failures per run

    @property
    def goodput(self) -> float:
        return sum(self.goodputs) / len(self.goodputs)

    @property
    def wall_s(self) -> float:
        return sum(self.seconds.values())


def simulate(scenario: Scenario, policy: Policy, interval_s: float, *, runs: int = 1, seed: int = 0,
             ) -> PolicyResult:
    """Simulate `runs` runs of the scenario under the policy, saving every `interval_s` seconds of steps."""
    totals, failures = simulate_runs(scenario, policy, interval_s, runs=runs, seed=seed)
    horizon = scenario.horizon_s
    seconds = {name: float(totals[:, i].mean()) for i, name in enumerate(CATEGORIES)}
    goodputs = tuple(float(x) for x in totals[:, CATEGORIES.index(PRODUCTIVE)] / horizon)
    return PolicyResult(policy, interval_s, runs, seconds, goodputs, float(failures.mean()))


def simulate_runs(scenario: Scenario, policy: Policy, interval_s: float, *, runs: int, seed: int,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per category of each run (an array of runs x CATEGORIES) and each run's failure count."""
    import numpy as np

    check_parameter("interval", interval_s)
    check_parameter("runs", runs)
    check_parameter("seed", seed)
    rng = np.random.default_rng(seed)
    horizon = scenario.horizon_s
    cost = save_cost(scenario, policy.blocking_saves)
    interval, write, slowdown = float(interval_s), cost.write_s, cost.slowdown
    # One cycle: `interval` of steps (slowed while the previous save is written), a wait for that write when
    # it outlasts the steps, then the stall of the next save.
    cycle = interval + max(0.0, write - interval) + cost.stall_s
    progress = interval - slowdown * min(write, interval)  # seconds of useful steps per cycle
    restart = scenario.restart_s + load_s(scenario)
    rate = scenario.failure_rate_per_s
    mix = np.array([scenario.mix[m] for m in MANIFESTATIONS], dtype=float)
    mix_edges = np.cumsum(mix / mix.sum())
    detect_low = np.array([policy.detection.of(m).low for m in MANIFESTATIONS])
    detect_width = np.array([policy.detection.of(m).high - policy.detection.of(m).low for m in MANIFESTATIONS])
    takes_node = np.array([REPLACES_NODE[m] for m in MANIFESTATIONS])
    is_hang = np.array([m == HANG_KIND for m in MANIFESTATIONS])
    pool_size = scenario.spares if policy.pool == "spares" else scenario.free_nodes

    k = len(CATEGORIES)
    col = {name: CATEGORIES.index(name) for name in CATEGORIES}
    totals = np.zeros((runs, k))
    failures = np.zeros(runs, dtype=np.int64)
    now = np.zeros(runs)
    ready = np.zeros((runs, pool_size))  # when each spare or free node is ready (0: from the start)
    active = np.ones(runs, dtype=bool)

    def spend(seconds, category: str, mask) -> None:
        """Add up to `seconds` to a category for the runs in `mask`, never past the horizon."""
        take = np.where(mask, np.minimum(seconds, horizon - now), 0.0)
        totals[:, col[category]] += take
        now[:] += take

    while active.any():
        # The same draws every loop step whatever the policy: common random numbers across comparisons.
        to_failure = rng.exponential(1.0 / rate, runs)
        kind = np.searchsorted(mix_edges, rng.random(runs), side="right").clip(0, len(MANIFESTATIONS) - 1)
        detect = detect_low[kind] + detect_width[kind] * rng.random(runs)
        replacement = scenario.replacement.low + (scenario.replacement.high - scenario.replacement.low) * (
            rng.random(runs))
        path_u = rng.random(runs)

        # Training until the failure or the horizon.
        ends = active & (now + to_failure >= horizon)
        fails = active & ~ends
        steps = np.where(ends, horizon - now, to_failure)
        full = np.floor(steps / cycle)
        rest = steps - full * cycle
        in_steps = rest <= interval
        partial = np.where(in_steps, rest - slowdown * np.minimum(rest, write), progress)
        # The last committed save: the one at the end of cycle `full`, once its write is done; else the one before.
        committed = np.where((full >= 1) & (full * cycle + write <= steps), full, np.maximum(full - 1, 0))
        kept = np.where(ends, full * progress + partial, committed * progress)
        lost = np.where(ends, 0.0, (full - committed) * progress + partial)
        stall = steps - kept - lost
        totals[:, col[PRODUCTIVE]] += np.where(active, kept, 0.0)
        totals[:, col[LOST_WORK]] += np.where(active, lost, 0.0)
        totals[:, col[CHECKPOINT_STALL]] += np.where(active, stall, 0.0)
        now[:] = np.where(active, now + steps, now)
        active &= ~ends
        failures += fails

        # Detection: a hang's time until it is seen is the hang's; the rest is detection.
        spend(detect, HANG, fails & is_hang[kind])
        spend(detect, DETECTION, fails & ~is_hang[kind])
        decided = now.copy()

        # A node taken out goes to replacement; the run continues on the earliest node ready among the pool
        # and that replacement.
        needs_node = fails & takes_node[kind]
        candidates = np.sort(np.concatenate([ready, (decided + replacement)[:, None]], axis=1), axis=1)
        wait = np.where(needs_node, np.maximum(0.0, candidates[:, 0] - decided), 0.0)
        ready = np.where(needs_node[:, None], candidates[:, 1:], ready)
        node_path = policy.node_path.low + (policy.node_path.high - policy.node_path.low) * path_u
        in_place = policy.in_place_path.low + (policy.in_place_path.high - policy.in_place_path.low) * path_u
        recovery = wait + np.where(needs_node, node_path, in_place) + restart
        spend(recovery, RECOVERY, fails)
        active &= now < horizon
    return totals, failures
