"""Software-stack verbs: container (dockerfile, import, run-flags), doctor, nccl-test."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from clusterkit.cli.output import JSON_ON_STDOUT, print_json, print_table, progress, write_stdout
from clusterkit.errors import ClusterkitError
from clusterkit.files import STDOUT, check_outputs, probe_writable, write_user_file


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    container = subparsers.add_parser("container", help="container recipes, image import and run flags")
    verbs = container.add_subparsers(dest="container_command", metavar="VERB", required=True)
    _register_dockerfile(verbs, common)
    _register_import(verbs)
    run_flags = verbs.add_parser("run-flags", parents=[common],
                                 help="docker/apptainer flags for this node's GPUs, Neuron and EFA devices")
    run_flags.add_argument("--runtime", choices=("docker", "apptainer"), default="docker")
    run_flags.add_argument("--root", default="/", metavar="PATH", help="system root to look for /dev in (default /)")
    run_flags.set_defaults(handler=print_run_flags)

    doctor = subparsers.add_parser("doctor", parents=[common], help="check each layer of the stack on this node",
                                   description="Check driver, fabric manager, container toolkit, EFA, libfabric, "
                                               "NCCL and aws-ofi-nccl, CUDA, the framework (or the Neuron stack) "
                                               "on this node or inside the container this runs in.")
    doctor.add_argument("--accelerator", choices=("auto", "gpu", "neuron"), default="auto")
    doctor.add_argument("--expect-instance-type", metavar="TYPE",
                        help="instance type (or preset) whose GPU/EFA counts to expect; default: from DMI")
    doctor.add_argument("--root", default="/", metavar="PATH",
                        help="a recorded node: a system root with .commands/ outputs (default: this machine)")
    doctor.set_defaults(handler=run_doctor)

    nccl = subparsers.add_parser("nccl-test", parents=[common],
                                 help="run nccl-tests all_reduce_perf (nccom-test on Trainium) and check bandwidth",
                                 description="Run all_reduce_perf (one MPI task per GPU, --cpu-bind=none, sizes up to "
                                             "what the GPU holds, 100 iterations) or nccom-test across the nodes, "
                                             "print which EC2 instance each node is, and compare the peak bus "
                                             "bandwidth with the floor for the instance type and node count.")
    nccl.add_argument("--cluster", metavar="NAME", help="cluster to use (default: $CLUSTERKIT_CLUSTER or the only one)")
    nccl.add_argument("--nodes", type=int, default=2, help="nodes to span (default 2)")
    nccl.add_argument("--instance-type", metavar="TYPE", help="instance type or preset (sets GPUs and the floor)")
    nccl.add_argument("--image", metavar="IMAGE", help="run inside this pyxis image (.sqsh or registry reference)")
    nccl.add_argument("--binary", metavar="PATH",
                      help="all_reduce_perf to run, in the image or on the nodes (default: where clusterkit's GPU "
                      "recipe builds it, /opt/nccl-tests/build)")
    nccl.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    nccl.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the job (default 3600)")
    nccl.set_defaults(handler=run_nccl_test)


def _register_dockerfile(verbs: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    dockerfile = verbs.add_parser("dockerfile", parents=[common], help="render a training image's Dockerfile",
                                  description="Render a Dockerfile for GPU (CUDA, GDRCopy, EFA, NCCL, nccl-tests, "
                                              "torch) or Neuron (EFA, Neuron runtime, tools, compiler, torch-neuronx).")
    dockerfile.add_argument("--accelerator", choices=("gpu", "neuron"), required=True)
    dockerfile.add_argument("--base", choices=("nvidia", "dlc"), default="nvidia",
                            help="nvidia: CUDA devel image; dlc: AWS Deep Learning Container (fewer layers)")
    dockerfile.add_argument("--instance", metavar="TYPE", help="check versions against this instance type or preset")
    dockerfile.add_argument("--region", default="us-east-1", help="dlc base: the registry's region")
    for name, what in (("cuda", "CUDA"), ("ubuntu", "Ubuntu"), ("gdrcopy", "GDRCopy"),
                       ("efa-installer", "EFA installer"), ("nccl", "NCCL, e.g. 2.29.3-1"),
                       ("nccl-tests", "nccl-tests"), ("aws-ofi-nccl", "aws-ofi-nccl (default: the EFA installer's)"),
                       ("torch", "torch"), ("neuron-runtime", "aws-neuronx-runtime-lib"),
                       ("neuron-collectives", "aws-neuronx-collectives"), ("neuron-tools", "aws-neuronx-tools"),
                       ("neuronx-cc", "neuronx-cc"), ("torch-neuronx", "torch-neuronx"),
                       ("neuronx-distributed", "neuronx-distributed")):
        dockerfile.add_argument(f"--{name}", metavar="V", help=f"{what} version")
    dockerfile.add_argument("--output-file", metavar="FILE", help="write the Dockerfile here instead of stdout")
    dockerfile.set_defaults(handler=render_dockerfile)


def _register_import(verbs: argparse._SubParsersAction) -> None:
    # No shared options here: --output names the .sqsh file, as enroot's -o does.
    image_import = verbs.add_parser("import", help="convert an image to a .sqsh file with enroot")
    image_import.add_argument("image", metavar="IMAGE", help="image reference, e.g. my-train:1.0 (local docker)")
    image_import.add_argument("--output", "-o", required=True, metavar="PATH.sqsh",
                              help="squashfs file to write, e.g. /fsx/images/NAME.sqsh")
    image_import.add_argument("--dry-run", action="store_true", help="print the enroot command; run nothing")
    image_import.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    image_import.set_defaults(handler=import_image)


def render_dockerfile(args: argparse.Namespace) -> int:
    from clusterkit.stack.recipes import RecipeOptions, check_recipe
    from clusterkit.stack.recipes import render_dockerfile as render

    versions = {name: getattr(args, name) for name in (
        "cuda", "ubuntu", "gdrcopy", "efa_installer", "nccl", "nccl_tests", "aws_ofi_nccl", "torch",
        "neuron_runtime", "neuron_collectives", "neuron_tools", "neuronx_cc", "torch_neuronx", "neuronx_distributed")}
    options = RecipeOptions(accelerator=args.accelerator, base=args.base, instance=args.instance, region=args.region,
                            **versions)
    check_outputs([("--output-file", args.output_file)], stdout_busy=JSON_ON_STDOUT if args.output == "json" else None)
    for finding in check_recipe(options):
        if finding.level.value != "error":
            progress(str(finding))
    text = render(options)  # raises on errors: nothing is written
    if args.output_file not in (None, STDOUT):
        write_user_file(args.output_file, text)
        progress(f"wrote {args.output_file}")
    elif args.output == "json":
        print_json({"accelerator": args.accelerator, "base": args.base, "dockerfile": text})
    else:
        write_stdout(text)
    return 0


def import_image(args: argparse.Namespace) -> int:
    from clusterkit.stack.images import enroot_import_command
    from clusterkit.stack.images import import_image as run_import

    command = enroot_import_command(args.image, args.output)  # an --output of "" or - is no .sqsh file: refused
    if args.dry_run:
        print(shlex.join(command))
        return 0
    probe_writable(args.output)  # enroot's own failure would come after pulling and converting the image
    run_import(args.image, args.output)
    progress(f"wrote {args.output}")
    return 0


def print_run_flags(args: argparse.Namespace) -> int:
    from clusterkit.stack.runflags import discover_devices, run_flags

    devices = discover_devices(args.root)
    flags = run_flags(devices, args.runtime)
    if args.output == "json":
        print_json({"runtime": args.runtime, "accelerator": devices.accelerator, "gpus": list(devices.gpus),
                    "neuron": list(devices.neuron), "efa": list(devices.efa), "flags": flags})
    else:
        print(shlex.join(flags))
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from clusterkit.stack.doctor import NO_ACCELERATOR, check_slurm, checks_for_node, examine_node, failed
    from clusterkit.stack.probe import probe_for_root

    if not Path(args.root).is_dir():
        raise ClusterkitError(f"--root {args.root!r} is not a directory", fix="pass / or a node's root file system")
    probe = probe_for_root(args.root)
    node = examine_node(probe, args.accelerator, args.expect_instance_type)
    results = [*checks_for_node(probe, node), check_slurm(probe)]  # the doctor's own: not the node health check's
    if args.output == "json":
        print_json({"accelerator": node.accelerator,
                    "instance_type": node.instance.name if node.instance else None,
                    "in_container": node.in_container, "checks": [r.to_dict() for r in results]})
    else:
        if node.accelerator == "none":
            print(NO_ACCELERATOR)
        else:
            where = "inside a container" if node.in_container else "on the host"
            instance = node.instance.name if node.instance else "unknown instance type"
            print(f"{node.accelerator} node ({instance}, {node.instance_source}), {where}")
        print_table(["check", "layer", "status", "detail", "fix"],
                    [[r.name, r.layer, r.status.value.upper(), r.detail, r.fix] for r in results])
    return 1 if failed(results) else 0


def run_nccl_test(args: argparse.Namespace) -> int:
    from clusterkit.jobs.nccl_tests import nccl_test_spec
    from clusterkit.jobs.nccl_tests import run_nccl_test as run_test
    from clusterkit.jobs.plan import plan_job
    from clusterkit.stack.nccl_tests import judge_bandwidth

    from clusterkit.stack.nccl_tests import ALL_REDUCE_BINARY

    spec = nccl_test_spec(args.nodes, cluster=args.cluster, instance_type=args.instance_type, image=args.image,
                          binary=args.binary or ALL_REDUCE_BINARY)
    plan = plan_job(spec, args.cluster, need_cluster=not args.dry_run, preflight=not args.dry_run)
    if args.dry_run:
        from clusterkit.cli.jobs import print_plan

        return print_plan(plan, args.output)
    handle, report = run_test(plan, timeout=args.timeout)
    verdict = judge_bandwidth(report, plan.spec.instance_facts if plan.spec else None, args.nodes)
    if args.output == "json":
        print_json({"job_id": handle.job_id, "state": handle.state, "stdout": str(handle.stdout_path),
                    "peak_busbw_gb_s": report.peak_busbw_gb_s, "average_busbw_gb_s": report.average_busbw_gb_s,
                    "instances": dict(report.instances), "check": verdict.to_dict()})
    else:
        print(f"job {handle.job_id}: {verdict.status.value.upper()}: {verdict.detail}")
        for node, instance in report.instances:
            print(f"  {node}: {instance}")
        if verdict.fix:
            print(f"fix: {verdict.fix}")
    return 1 if verdict.status.value == "fail" else 0
