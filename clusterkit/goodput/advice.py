"""The checkpoint interval and the spare nodes chosen for a run.

The interval starts from Young/Daly's first-order optimum, sqrt(2 x stall x MTBF), with the stall a save
really costs the loop (for async saves: the copy, the slowdown while the write runs, and any wait for the
previous write), then is refined against the simulator: the simulated goodput over intervals from half to twice that,
every interval meeting the same failures (one seed), fitted with the first-order shape.
"""

from __future__ import annotations

import math

from clusterkit.goodput.model import Policy, SaveCost, Scenario, save_cost
from clusterkit.goodput.simulator import PolicyResult, simulate
from clusterkit.lean_dataclass import lean_dataclass

# Runs per interval while refining: enough for REFINE_FAILURES failures in all (a run of few failures says
# little), within REFINE_RUNS; common random numbers keep the comparison between intervals steady.
REFINE_FAILURES, REFINE_RUNS = 20_000, (32, 1000)
REFINE_STEPS, REFINE_SPAN = 13, 2.0  # intervals from first-order / 2 to x 2
MAX_SPARES = 4


def young_daly(stall_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum interval between checkpoints: sqrt(2 x stall x MTBF)."""
    return math.sqrt(2.0 * stall_s * mtbf_s)


def interval_for(cost: SaveCost, mtbf_s: float) -> float:
    """Young/Daly with the save's effective stall, found as a fixed point (the stall depends on the interval
    when an async write outlasts it)."""
    interval = young_daly(max(cost.effective_stall(math.inf), 1e-6), mtbf_s)
    for _ in range(20):
        interval = young_daly(max(cost.effective_stall(interval), 1e-6), mtbf_s)
    return interval


def first_order_interval(scenario: Scenario, policy: Policy) -> float:
    """The first-order interval for the simulator, which takes 1 s or more."""
    return max(1.0, interval_for(save_cost(scenario, policy.blocking_saves), scenario.mtbf_s))


def steady_runs(scenario: Scenario) -> int:
    """Runs enough for REFINE_FAILURES failures in all, within REFINE_RUNS."""
    low, high = REFINE_RUNS
    return max(low, min(high, math.ceil(REFINE_FAILURES / scenario.expected_failures)))


def choose_interval(scenario: Scenario, policy: Policy, *, seed: int = 0) -> float:
    """The interval (seconds of steps between saves) with the best simulated goodput near Young/Daly's.

    Near its best the goodput curve is flat, so the argmax of noisy simulations wanders; instead the
    simulated goodput over the scan is fitted with the first-order shape `a + b / I + c x I` (the save's
    cost per interval, and the work lost, growing with the interval), whose best is `sqrt(b / c)`."""
    import numpy as np

    start = first_order_interval(scenario, policy)
    intervals = np.unique(np.maximum(1.0, start * REFINE_SPAN ** np.linspace(-1.0, 1.0, REFINE_STEPS)))
    runs = steady_runs(scenario)
    goodputs = np.array([simulate(scenario, policy, float(i), runs=runs, seed=seed).goodput for i in intervals])
    if len(intervals) < 3:
        return float(intervals[int(np.argmax(goodputs))])
    design = np.column_stack([np.ones_like(intervals), 1.0 / intervals, intervals])
    _, b, c = np.linalg.lstsq(design, goodputs, rcond=None)[0]
    if b >= 0 or c >= 0:  # not the first-order shape (e.g. saves slower than the interval): the best scanned
        return float(intervals[int(np.argmax(goodputs))])
    return float(np.clip(np.sqrt(b / c), intervals[0], intervals[-1]))


def paid_goodput(result: PolicyResult, scenario: Scenario) -> float:
    """Goodput per GPU paid for: spare nodes in the allocation are paid while they wait."""
    paid = scenario.gpus + scenario.spares * scenario.gpus_per_node
    return result.goodput * scenario.gpus / paid


@lean_dataclass(frozen=True)
class SpareChoice:
    spares: int
    result: PolicyResult
    paid_goodput: float


def choose_spares(scenario: Scenario, policy: Policy, interval_s: float, *, runs: int, seed: int = 0
                  ) -> list[SpareChoice]:
    """Each number of spares from 0 to MAX_SPARES, best first: the most goodput per GPU paid for."""
    choices = []
    for spares in range(MAX_SPARES + 1):
        with_spares = scenario.with_spares(spares)
        result = simulate(with_spares, policy, interval_s, runs=runs, seed=seed)
        choices.append(SpareChoice(spares, result, paid_goodput(result, with_spares)))
    return sorted(choices, key=lambda c: (-c.paid_goodput, c.spares))
