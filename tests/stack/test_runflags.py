"""Container run flags from a fake system root."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from clusterkit.cli import common_options
from clusterkit.cli import stack as stack_cli
from clusterkit.errors import ClusterkitError
from clusterkit.stack.runflags import NodeDevices, discover_devices, run_flags

from tests.stack.nodes import build_root, p4d_devices

COMMON = ["--network", "host", "--ipc", "host", "--ulimit", "memlock=-1:-1", "--ulimit", "stack=67108864"]


def test_p4d_docker_flags(tmp_path: Path) -> None:
    devices = discover_devices(build_root(tmp_path, devices=p4d_devices()))
    assert devices.gpus == tuple(f"/dev/nvidia{i}" for i in range(8))  # nvidiactl, nvidia-uvm are not GPUs
    assert run_flags(devices) == ["--gpus", "all", "--device", "/dev/infiniband/uverbs0",
                                  "--device", "/dev/infiniband/uverbs1", "--device", "/dev/infiniband/uverbs2",
                                  "--device", "/dev/infiniband/uverbs3", *COMMON]


def test_trn1_devices_in_numeric_order(tmp_path: Path) -> None:
    root = build_root(tmp_path, devices=[f"/dev/neuron{i}" for i in range(16)] + ["/dev/infiniband/uverbs0"])
    flags = run_flags(discover_devices(root))
    devices = [flags[i + 1] for i, word in enumerate(flags) if word == "--device"]
    assert devices[:11] == [f"/dev/neuron{i}" for i in range(11)]
    assert devices[-1] == "/dev/infiniband/uverbs0"
    assert "--gpus" not in flags


def test_apptainer_flags() -> None:
    assert run_flags(NodeDevices(gpus=("/dev/nvidia0",)), "apptainer") == ["--nv"]
    assert run_flags(NodeDevices(neuron=("/dev/neuron0",)), "apptainer") == []


def test_node_without_devices_gets_only_the_common_flags(tmp_path: Path) -> None:
    assert run_flags(discover_devices(tmp_path)) == COMMON


def test_unknown_runtime() -> None:
    with pytest.raises(ClusterkitError, match="podman"):
        run_flags(NodeDevices(), "podman")


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_root(tmp_path, devices=p4d_devices(gpus=2, efa=1))
    parser = argparse.ArgumentParser()
    stack_cli.register(parser.add_subparsers(dest="command"), common_options())
    args = parser.parse_args(["container", "run-flags", "--root", str(tmp_path), "--output", "json"])
    assert args.handler(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["accelerator"] == "gpu" and report["efa"] == ["/dev/infiniband/uverbs0"]
    assert report["flags"][:2] == ["--gpus", "all"]
