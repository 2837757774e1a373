"""The goodput simulator: every second in one category, the same seed the same run, Young/Daly where it holds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit.errors import ClusterkitError
from clusterkit.goodput.advice import choose_interval, first_order_interval, young_daly
from clusterkit.goodput.categories import CATEGORIES
from clusterkit.goodput.model import (
    LLAMA3_FAILURES_PER_GPU_HOUR,
    LLAMA3_ROOT_CAUSES,
    MANIFESTATIONS,
    SOFTWARE,
    Scenario,
    Span,
    clusterkit_policy,
    manifestation_mix,
    save_cost,
    slurm_alone,
)
from clusterkit.goodput.simulator import simulate, simulate_runs

POLICIES = (slurm_alone(), clusterkit_policy("free_nodes", 120.0), clusterkit_policy("spares", 120.0))


def test_llama3_rate_and_mix_are_the_papers_arithmetic():
    assert sum(kind.count for kind in LLAMA3_ROOT_CAUSES) == 419
    assert LLAMA3_FAILURES_PER_GPU_HOUR == pytest.approx(419 / 21_233_664)
    assert LLAMA3_FAILURES_PER_GPU_HOUR == pytest.approx(1.97e-5, rel=0.01)
    assert Scenario().mtbf_s / 3600 == pytest.approx(3.09, abs=0.01)  # "one every ~3.1 h"
    mix = manifestation_mix()
    assert list(mix) == list(MANIFESTATIONS) and sum(mix.values()) == pytest.approx(1.0)
    assert mix["device"] == pytest.approx(268 / 419)


@settings(max_examples=40, deadline=None)
@given(gpus=st.integers(1, 50_000), days=st.floats(0.01, 30), rate=st.floats(1e-7, 1e-3),
       gib=st.floats(0.1, 10_000), gbps=st.floats(0.5, 500), interval=st.floats(1, 20_000),
       restart=st.floats(0, 600), spares=st.integers(0, 3), policy=st.sampled_from(POLICIES),
       seed=st.integers(0, 2**32))
def test_categories_never_overlap_or_leave_a_gap(gpus, days, rate, gib, gbps, interval, restart, spares, policy,
                                                   seed):
    scenario = Scenario(gpus=gpus, days=days, failures_per_gpu_hour=min(rate, 50_000 / (gpus * days * 24)),
                        checkpoint_gib=gib, save_gbps=gbps, restart_s=restart, spares=spares)
    totals, failures = simulate_runs(scenario, policy, interval, runs=3, seed=seed)
    assert totals.shape == (3, len(CATEGORIES))
    assert (totals >= -1e-6).all()
    assert totals.sum(axis=1) == pytest.approx([scenario.horizon_s] * 3, abs=1e-3)


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    scenario = Scenario(days=5)
    first = simulate(scenario, POLICIES[2], 200, runs=4, seed=11)
    assert simulate(scenario, POLICIES[2], 200, runs=4, seed=11) == first
    assert simulate(scenario, POLICIES[2], 200, runs=4, seed=12).goodputs != first.goodputs


def test_failures_arrive_at_the_scenarios_rate():
    scenario = Scenario()  # 16,384 GPUs, 54 days: 419 expected
    result = simulate(scenario, POLICIES[2], 200, runs=50, seed=3)
    assert result.failures == pytest.approx(419, rel=0.03)


def test_young_daly_holds_where_its_assumptions_do():
    # Blocking saves of 10 s, failures rare (MTBF 1e5 s), no detection or recovery cost beyond a restart of 0:
    # the waste is stall / interval + interval / (2 x MTBF) to first order, least at sqrt(2 x stall x MTBF).
    only_software = {m: float(m == SOFTWARE) for m in MANIFESTATIONS}
    scenario = Scenario(gpus=1000, days=200, failures_per_gpu_hour=3600 / 1e5 / 1000, checkpoint_gib=10 * 100e9 / 2**30,
                        save_gbps=100, restart_s=0, mix=only_software)
    policy = slurm_alone()
    assert save_cost(scenario, blocking=True).stall_s == pytest.approx(10.0)
    optimum = young_daly(10.0, scenario.mtbf_s)
    assert optimum == pytest.approx(math.sqrt(2e6)) and first_order_interval(scenario, policy) == pytest.approx(optimum)
    result = simulate(scenario, policy, optimum, runs=40, seed=5)
    in_place = policy.detection.software.mean + policy.in_place_path.mean
    predicted = 1 - 10.0 / (optimum + 10.0) - ((optimum + 10.0) / 2 + in_place) / scenario.mtbf_s
    assert result.goodput == pytest.approx(predicted, abs=0.002)
    grid = [optimum * 2 ** (k / 4) for k in range(-6, 7)]
    best = max(grid, key=lambda i: simulate(scenario, policy, i, runs=40, seed=6).goodput)
    assert 0.8 * optimum <= best <= 1.25 * optimum


def test_the_chosen_interval_is_the_simulators_best_and_beats_a_tenth_and_tenfold():
    scenario = Scenario(days=20)
    policy = clusterkit_policy("spares", 120.0)
    chosen = choose_interval(scenario, policy, seed=0)
    start = first_order_interval(scenario, policy)
    grid = [start * 2 ** (k / 16) for k in range(-16, 17)]  # 4.4% steps from half to twice first order
    scores = {i: simulate(scenario, policy, i, runs=48, seed=99).goodput for i in grid}  # another seed
    best = max(scores, key=scores.__getitem__)
    assert abs(chosen - best) <= 0.10 * best
    at = {f: simulate(scenario, policy, chosen * f, runs=48, seed=99).goodput for f in (0.1, 1.0, 10.0)}
    assert at[1.0] > at[0.1] and at[1.0] > at[10.0]


def test_at_llama3_scale_clusterkit_passes_95_percent_and_slurm_alone_does_not():
    scenario = Scenario()
    slurm, requeue, spares = (simulate(scenario, p, first_order_interval(scenario, p), runs=8, seed=0)
                              for p in POLICIES)
    assert spares.goodput >= 0.95 and requeue.goodput >= 0.95
    assert slurm.goodput < 0.90 < requeue.goodput  # Llama 3 reported > 90%
    assert spares.seconds["recovery"] < requeue.seconds["recovery"] < slurm.seconds["recovery"]
    assert spares.seconds["detection"] < slurm.seconds["detection"]


def test_a_spare_saves_the_wait_for_a_replacement():
    scenario = Scenario(days=10, replacement=Span(600, 600), restart_s=0)
    policy = clusterkit_policy("spares", 120.0)
    none, one = (simulate(scenario.with_spares(n), policy, 200, runs=8, seed=1) for n in (0, 1))
    hardware = none.failures * (1 - scenario.mix["software"] - scenario.mix["hang"])
    saved = none.seconds["recovery"] - one.seconds["recovery"]
    assert saved == pytest.approx(hardware * 600, rel=0.05)


@pytest.mark.parametrize(("field", "value"), [
    ("gpus", 0), ("gpus", -1), ("gpus", 1.5), ("days", 0), ("days", math.nan), ("failures_per_gpu_hour", math.inf),
    ("checkpoint_gib", -1.0), ("save_gbps", 0), ("spares", 65), ("gpus", True),
])
def test_a_scenario_refuses_values_outside_its_limits(field, value):
    with pytest.raises(ClusterkitError, match=field):
        Scenario(**{field: value})


@pytest.mark.parametrize("mix", [{}, {"device": 1.0}, {m: 0.0 for m in MANIFESTATIONS},
                                 {m: math.nan for m in MANIFESTATIONS}, {**manifestation_mix(), "hang": -1.0}])
def test_a_mix_must_share_out_every_manifestation(mix):
    with pytest.raises(ClusterkitError, match="mix"):
        Scenario(mix=mix)


def test_a_hang_timeout_of_0_leaves_hangs_to_the_nccl_watchdog():
    assert clusterkit_policy("spares", 0).detection.hang == slurm_alone().detection.hang
    only_hangs = {m: float(m == "hang") for m in MANIFESTATIONS}
    off, on = (simulate(Scenario(days=3, mix=only_hangs), clusterkit_policy("spares", h), 200, runs=4, seed=2)
               for h in (0, 120))
    assert off.seconds["hang"] == pytest.approx(on.seconds["hang"] * 630 / 135, rel=0.1)


def test_a_scenario_too_big_to_simulate_is_refused_before_it_runs():
    with pytest.raises(ClusterkitError, match="too many to simulate"):
        Scenario(gpus=10_000_000, days=3650, failures_per_gpu_hour=1e-3)
