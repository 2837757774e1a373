"""The checkpoint interval and the spare nodes chosen for a run.

The interval starts from Young/Daly's first-order optimum, sqrt(2 x stall x MTBF), with the stall a save
really costs the loop (for async saves: the copy, the slowdown while the write runs, and any wait for the
previous write), then is refined against the simulator: a coarse scan of the simulated goodput around it,
then a fine one around the best, every interval meeting the same failures (one seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterkit.goodput.model import Policy, SaveCost, Scenario, save_cost
from clusterkit.goodput.simulator import PolicyResult, simulate

REFINE_RUNS = 32  # runs per interval while refining: common random numbers keep the comparison steady
COARSE_STEPS, COARSE_SPAN = 17, 4.0  # intervals from first-order / 4 to x 4
FINE_STEPS, FINE_SPAN = 13, 1.15  # then within 15% of the best of those
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


def _scan(scenario: Scenario, policy: Policy, low: float, high: float, steps: int, seed: int
          ) -> list[PolicyResult]:
    ratio = (high / low) ** (1 / (steps - 1))
    return [simulate(scenario, policy, max(1.0, low * ratio**i), runs=REFINE_RUNS, seed=seed) for i in range(steps)]


def choose_interval(scenario: Scenario, policy: Policy, *, seed: int = 0) -> float:
    """The interval (seconds of steps between saves) with the best simulated goodput near Young/Daly's."""
    start = first_order_interval(scenario, policy)
    coarse = max(_scan(scenario, policy, start / COARSE_SPAN, start * COARSE_SPAN, COARSE_STEPS, seed),
                 key=lambda r: r.goodput)
    fine = max(_scan(scenario, policy, coarse.interval_s / FINE_SPAN, coarse.interval_s * FINE_SPAN, FINE_STEPS,
                     seed), key=lambda r: r.goodput)
    return fine.interval_s


def paid_goodput(result: PolicyResult, scenario: Scenario) -> float:
    """Goodput per GPU paid for: spare nodes in the allocation are paid while they wait."""
    paid = scenario.gpus + scenario.spares * scenario.gpus_per_node
    return result.goodput * scenario.gpus / paid


@dataclass(frozen=True)
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
