"""`clusterkit goodput ...`: what a run's goodput would be at scale, and the checkpoint interval for it.

Numbers arrive as text and are checked here against the model's limits, so a bad value is one line naming
its flag (argparse's own errors print the usage too). The simulator loads numpy only when it runs.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import TYPE_CHECKING

from clusterkit.cli.output import print_json, print_table, progress
from clusterkit.errors import ClusterkitError
from clusterkit.goodput.categories import CATEGORIES

if TYPE_CHECKING:
    from clusterkit.goodput.model import Policy, Scenario
    from clusterkit.goodput.simulator import PolicyResult

# Scenario flags: (flag, Scenario field or LIMITS name, help). Read by simulate and advise alike.
SCENARIO_FLAGS = (
    ("--gpus", "gpus", "GPUs the job trains on (default 16384, Llama 3 405B's)"),
    ("--days", "days", "days of wall-clock to simulate (default 54)"),
    ("--failures-per-gpu-hour", "failures_per_gpu_hour",
     "failure rate (default 1.97e-5: Llama 3's 419 unexpected interruptions in 54 days on 16,384 GPUs)"),
    ("--checkpoint-gib", "checkpoint_gib", "size of the whole checkpoint in GiB (default 5281: 405B parameters "
                                           "with fp32 master weights and Adam)"),
    ("--save-gbps", "save_gbps", "storage's aggregate write and read bandwidth in GB/s (default 100)"),
    ("--restart-s", "restart_s", "job start, imports and rendezvous after a recovery, seconds (default 60)"),
    ("--replacement-s", "replacement_s", "seconds until a failed node's replacement is ready (default 45-95, "
                                         "measured with a 10-30 s boot)"),
    ("--hang-timeout", "hang_timeout", "clusterkit's supervise.hang_timeout, seconds (default 120)"),
    ("--gpus-per-node", "gpus_per_node", "GPUs per node (default 8)"),
    ("--spares", "spares", "spare nodes in the allocation for clusterkit-spares (default 1)"),
    ("--free-nodes", "free_nodes", "idle nodes of the cluster a requeued job may start on (default 0)"),
)


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    goodput = subparsers.add_parser("goodput", help="goodput at scale and the checkpoint interval chosen for you")
    verbs = goodput.add_subparsers(dest="goodput_command", metavar="VERB", required=True)
    job = verbs.add_parser(
        "job", parents=[common], help="where every second of a run went (also: clusterkit goodput JOB_ID)",
        description="The run's goodput ledger: every second from its submission to its end in one category "
                    "(productive, lost work, checkpoint stall, detection, recovery, queued, hang, other), from what "
                    "the supervised run recorded.")
    job.add_argument("job_id", metavar="JOB_ID")
    job.add_argument("--cluster", metavar="NAME", help="cluster to use (default: $CLUSTERKIT_CLUSTER, or the only one)")
    job.set_defaults(handler=run_ledger)

    scenario = argparse.ArgumentParser(add_help=False)
    for flag, _, text in SCENARIO_FLAGS:
        scenario.add_argument(flag, metavar="N", help=text)
    scenario.add_argument("--instance-type", metavar="TYPE",
                          help="the nodes' instance type or preset (p5, trn1, ...): its accelerators per node")
    scenario.add_argument("--seed", default="0", metavar="N", help="random seed (default 0): same seed, same result")
    scenario.add_argument("--runs", default="8", metavar="K",
                          help="runs to average (default 8; advise takes more where failures are rare)")

    simulate = verbs.add_parser(
        "simulate", parents=[common, scenario], help="simulate a run's goodput under each recovery policy",
        description="A Monte Carlo of a run under failures: Slurm alone at ParallelCluster's timings with "
                    "blocking saves, clusterkit with requeue, clusterkit with spare nodes. Prints each policy's "
                    "goodput and where the rest of the time went (docs/goodput.md).")
    simulate.add_argument("--interval", default="auto", metavar="S|auto",
                          help="seconds of steps between checkpoints, or auto: each policy's chosen interval")
    simulate.set_defaults(handler=run_simulate)

    advise = verbs.add_parser(
        "advise", parents=[common, scenario],
        help="the checkpoint interval, the spare nodes that pay off and the expected goodput",
        description="Choose the checkpoint interval (Young/Daly, refined against the simulator) and the number "
                    "of spare nodes with the most goodput per GPU paid for, for clusterkit with async saves.")
    advise.set_defaults(handler=run_advise)


def run_ledger(args: argparse.Namespace) -> int:
    from clusterkit.jobs.submit import job_handle
    from clusterkit.slurm import checked_job_id

    ledger = job_handle(checked_job_id(args.job_id), args.cluster).goodput()
    if args.output == "json":
        print_json(ledger.to_dict())
        return 0
    seconds = ledger.categories
    print(f"job {ledger.job_id}: goodput {ledger.goodput:.1%} of {ledger.wall_s:.0f} s")
    print_table(["category", "seconds", "share"],
                [[name, f"{value:.1f}", f"{value / ledger.wall_s:.1%}" if ledger.wall_s else "-"]
                 for name, value in seconds.items()])
    return 0


# Plain decimal numbers only: float() would also take spaces, U+2028, underscores and "infinity".
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf)", re.ASCII)


def _number(flag: str, name: str, text: str) -> float:
    """A flag's text as a number within its limits, or one line naming the flag."""
    from clusterkit.goodput.model import LIMITS, check_parameter

    if not NUMBER.fullmatch(text):
        raise ClusterkitError(f"{flag} {text!r}: not a number", fix=f"give {flag} {LIMITS[name].describe()}")
    value: float = float(text)
    if LIMITS[name].integer and math.isfinite(value) and value == int(value):
        value = int(value)
    check_parameter(name, value, flag, repr(text))
    return value


def scenario_from(args: argparse.Namespace) -> Scenario:
    from clusterkit.goodput.model import Scenario, Span

    values = {}
    for flag, name, _ in SCENARIO_FLAGS:
        text = getattr(args, name)
        if text is None:
            continue
        value = _number(flag, name, text)
        values["replacement" if name == "replacement_s" else name] = (
            Span(value, value) if name == "replacement_s" else value)
    if args.instance_type is not None:
        if "gpus_per_node" in values:
            raise ClusterkitError("--instance-type and --gpus-per-node both say how many GPUs a node has",
                                  fix="give one of them")
        values["gpus_per_node"] = _accelerators_per_node(args.instance_type)
    return Scenario(**values)


def _accelerators_per_node(name: str) -> int:
    from clusterkit.catalog import PRESET_INSTANCE_TYPES, instance_type

    found = instance_type(PRESET_INSTANCE_TYPES.get(name, name))
    if not found.accelerator_count:
        raise ClusterkitError(f"--instance-type {name!r}: {found.name} has no accelerators",
                              fix="give a GPU or Trainium type, e.g. p5 or trn1")
    return found.accelerator_count


def _run_options(args: argparse.Namespace) -> tuple[int, int]:
    return int(_number("--runs", "runs", args.runs)), int(_number("--seed", "seed", args.seed))


def _policies(scenario: Scenario) -> tuple[Policy, ...]:
    from clusterkit.goodput.model import clusterkit_policy, slurm_alone

    return (slurm_alone(), clusterkit_policy("free_nodes", scenario.hang_timeout),
            clusterkit_policy("spares", scenario.hang_timeout))


def _scenario_json(scenario: Scenario) -> dict:
    return {"gpus": scenario.gpus, "nodes": scenario.nodes, "days": scenario.days,
            "failures_per_gpu_hour": scenario.failures_per_gpu_hour, "expected_failures": scenario.expected_failures,
            "mtbf_s": scenario.mtbf_s, "checkpoint_gib": scenario.checkpoint_gib, "save_gbps": scenario.save_gbps,
            "restart_s": scenario.restart_s,
            "replacement_s": [scenario.replacement.low, scenario.replacement.high],
            "hang_timeout": scenario.hang_timeout, "spares": scenario.spares, "free_nodes": scenario.free_nodes,
            "failure_mix": dict(scenario.mix)}


def _scenario_line(scenario: Scenario, runs: int, seed: int) -> str:
    return (f"{scenario.gpus:,} GPUs ({scenario.nodes:,} nodes) for {scenario.days:g} days at "
            f"{scenario.failures_per_gpu_hour:.3g} failures per GPU-hour: {scenario.expected_failures:,.1f} "
            f"failures expected (one every {scenario.mtbf_s / 3600:.2f} h); checkpoint {scenario.checkpoint_gib:,g} "
            f"GiB at {scenario.save_gbps:g} GB/s; {runs} runs, seed {seed}")


LLAMA3_LINE = "Llama 3 405B (16,384 GPUs, 54 days) reported > 90% effective training time"


def run_simulate(args: argparse.Namespace) -> int:
    from clusterkit.goodput.advice import choose_interval
    from clusterkit.goodput.model import LLAMA3_REPORTED_GOODPUT
    from clusterkit.goodput.simulator import simulate

    scenario = scenario_from(args)
    runs, seed = _run_options(args)
    fixed = None if args.interval == "auto" else _number("--interval", "interval", args.interval)
    results = []
    for policy in _policies(scenario):
        if fixed is None and args.output == "table":
            progress(f"choosing {policy.name}'s checkpoint interval ...")
        interval = fixed if fixed is not None else choose_interval(scenario, policy, seed=seed)
        results.append(simulate(scenario, policy, interval, runs=runs, seed=seed))
    if args.output == "json":
        print_json({"scenario": _scenario_json(scenario), "runs": runs, "seed": seed,
                    "interval": "auto" if fixed is None else fixed,
                    "policies": [_result_json(r) for r in results],
                    "llama3_reported_goodput": LLAMA3_REPORTED_GOODPUT})
        return 0
    print(_scenario_line(scenario, runs, seed))
    print_table(["policy", "every", "goodput", *(f"{c} h" for c in CATEGORIES)],
                [[r.policy.name, f"{r.interval_s:,.0f} s", f"{r.goodput:.1%}",
                  *(f"{r.seconds[c] / 3600:,.1f}" for c in CATEGORIES)] for r in results])
    for result in results:
        print(f"{result.policy.name}: {result.policy.description}")
    print(LLAMA3_LINE)
    return 0


def _result_json(result: PolicyResult) -> dict:
    return {"name": result.policy.name, "description": result.policy.description, "interval_s": result.interval_s,
            "goodput": result.goodput, "goodput_min": min(result.goodputs), "goodput_max": max(result.goodputs),
            "wall_s": result.wall_s, "failures": result.failures, "categories": dict(result.seconds)}


def run_advise(args: argparse.Namespace) -> int:
    from clusterkit.goodput.advice import choose_interval, choose_spares, first_order_interval, steady_runs
    from clusterkit.goodput.model import LLAMA3_REPORTED_GOODPUT, clusterkit_policy, save_cost, slurm_alone
    from clusterkit.goodput.simulator import simulate

    scenario = scenario_from(args)
    runs, seed = _run_options(args)
    runs = max(runs, steady_runs(scenario))  # a few runs of rare failures cannot compare spare counts
    policy = clusterkit_policy("spares", scenario.hang_timeout)
    if args.output == "table":
        progress("choosing the checkpoint interval and the spare nodes ...")
    first_order = first_order_interval(scenario, policy)
    interval = choose_interval(scenario, policy, seed=seed)
    options = choose_spares(scenario, policy, interval, runs=runs, seed=seed)
    best = options[0]
    chosen = scenario.with_spares(best.spares)
    tenth, tenfold = (simulate(chosen, policy, max(1.0, interval * f), runs=runs, seed=seed).goodput
                      for f in (0.1, 10.0))
    slurm = slurm_alone()
    slurm_result = simulate(scenario, slurm, choose_interval(scenario, slurm, seed=seed), runs=runs, seed=seed)
    cost = save_cost(scenario, blocking=False)
    by_count = sorted(options, key=lambda o: o.spares)
    if args.output == "json":
        print_json({"scenario": _scenario_json(chosen), "runs": runs, "seed": seed, "interval_s": interval,
                    "first_order_interval_s": first_order, "spares": best.spares, "goodput": best.result.goodput,
                    "paid_goodput": best.paid_goodput,
                    "spare_options": [{"spares": o.spares, "goodput": o.result.goodput, "paid_goodput": o.paid_goodput}
                                      for o in by_count],
                    "goodput_at_tenth_interval": tenth, "goodput_at_tenfold_interval": tenfold,
                    "slurm_alone": _result_json(slurm_result), "llama3_reported_goodput": LLAMA3_REPORTED_GOODPUT})
        return 0
    print(_scenario_line(chosen, runs, seed))
    print(f"checkpoint every {interval:,.0f} s of steps (Young/Daly first order: {first_order:,.0f} s; a save "
          f"stalls {cost.stall_s:.2f} s, then writes for {cost.write_s:,.0f} s in the background at "
          f"{cost.slowdown:.0%} slower steps)")
    print(f"spare nodes: {best.spares} (goodput per GPU paid for "
          + ", ".join(f"{o.spares}: {o.paid_goodput:.2%}" for o in by_count) + ")")
    nodes = "spare node" if best.spares == 1 else "spare nodes"
    print(f"expected goodput: {best.result.goodput:.1%} with clusterkit ({best.spares} {nodes}); "
          f"{tenth:.1%} at 0.1x the interval, {tenfold:.1%} at 10x")
    print(f"Slurm alone at ParallelCluster's timings, blocking saves every {slurm_result.interval_s:,.0f} s: "
          f"{slurm_result.goodput:.1%}; {LLAMA3_LINE}")
    return 0
