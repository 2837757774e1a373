"""The nccl-tests job: all_reduce_perf (GPU) or nccom-test (Trainium) as a plain job spec, and its submission.

The job is a plain job spec (mpi launcher: one task per GPU, wired up by Slurm's PMIx, `--cpu-bind=none`
as in AWS's nccl-tests sbatch), rendered by the usual job plan (`plan_job`) and submitted with
`submit`. What the test runs and how its output is judged is the stack's (`stack/nccl_tests.py`).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from clusterkit.catalog import InstanceType, resolve_instance_type
from clusterkit.stack.nccl_tests import (ALL_REDUCE_BINARY, PRINT_INSTANCE, BandwidthReport, all_reduce_args,
                                         nccom_test_args, parse_bus_bandwidth)

if TYPE_CHECKING:
    from clusterkit.jobs.handle import JobHandle
    from clusterkit.jobs.plan import JobPlan
    from clusterkit.jobs.spec import JobSpec


def _nccom_command(instance: InstanceType, nodes: int) -> list[str]:
    """nccom-test, started once, on the first node, for all of them: `--hosts` lists the nodes and
    NEURON_RT_ROOT_COMM_ID the first one's address with a port of the job's own (as the AWS nccom-tests
    sbatch does, with the job-derived port of clusterkit's rendezvous)."""
    from clusterkit.jobs.render import RENDEZVOUS_PORT_SHELL

    args = shlex.join(nccom_test_args(instance, nodes))
    if nodes == 1:
        return ["nccom-test", *nccom_test_args(instance, nodes)]
    script = (f'clusterkit_rdzv_port() {{\n{RENDEZVOUS_PORT_SHELL}\n}}\n'
              'if [[ ${SLURM_PROCID:-0} != 0 ]]; then exit 0; fi\n'
              'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")\n'
              'export NEURON_RT_ROOT_COMM_ID="${hosts[0]}:$(clusterkit_rdzv_port)"\n'
              f'exec nccom-test {args} --hosts ${{hosts[@]+"${{hosts[@]}}"}}')
    return ["bash", "-c", script, "nccom-test"]


NCCL_TESTS_JOB = "nccl-tests"  # the job's name, and the $0 of the wrapper that prints each node's instance


def bare_all_reduce_binary(spec: JobSpec) -> str | None:
    """The all_reduce_perf a job made by nccl_test_spec runs from the nodes' own file system (no image), or None."""
    args = spec.command.args
    if (spec.container.runtime == "none" and spec.command.script == "bash" and len(args) > 3
            and args[:3] == ("-c", PRINT_INSTANCE, NCCL_TESTS_JOB)):
        return args[3]
    return None


def nccl_test_spec(nodes: int, *, cluster: str | None = None, instance_type: str | None = None,
                   image: str | None = None, binary: str = ALL_REDUCE_BINARY) -> JobSpec:
    """A job spec running all_reduce_perf (GPU) or nccom-test (Trainium) across `nodes` nodes."""
    from clusterkit.jobs.spec import job_from_dict

    data: dict = {"name": NCCL_TESTS_JOB, "nodes": nodes, "exclusive": True, "requeue": False,
                  "logs": {"output": "logs/%x_%j.out"}}
    if cluster:
        data["cluster"] = cluster
    if instance_type:
        data["instance"] = instance_type
    if image:
        data["container"] = {"runtime": "pyxis", "image": image}
    facts = resolve_instance_type(instance_type) if instance_type else None
    if facts is not None and facts.accelerator == "neuron":
        data.update(launcher="srun", processes_per_node=1, command=_nccom_command(facts, nodes))
    else:
        data.update(launcher={"type": "mpi", "cpu_bind": "none"},
                    command=["bash", "-c", PRINT_INSTANCE, NCCL_TESTS_JOB, binary, *all_reduce_args(facts)])
    return job_from_dict(data)


def run_nccl_test(plan: JobPlan, *, timeout: float | None = None) -> tuple[JobHandle, BandwidthReport]:
    """Submit the test's plan, wait for it, and parse its output."""
    from clusterkit.jobs.submit import submit

    handle = submit(plan)
    handle.wait(timeout=timeout)
    return handle, parse_bus_bandwidth(handle.stdout())
