"""Cluster presets from one word: a sensible training (or dev) cluster per accelerator family.

Each preset is a complete ClusterSpec; `cluster-configs/<preset>.yaml` spells out the same spec as a
commented YAML file (a test keeps the two equal). EFA and placement groups (on for every EFA-capable
type), pyxis/enroot, GPU health checks on GPU queues, the Neuron driver on Trainium queues, SSM and
read-only ECR for every node role, storage kept on delete, clusterkit on the nodes and (with no subnet given)
a network of clusterkit's own come from the spec defaults, so the presets state only what differs. Every
preset has a Slurm accounting database of clusterkit's own (`accounting: create`).
"""

from __future__ import annotations

from collections.abc import Callable

from clusterkit.catalog import PRESET_INSTANCE_TYPES
from clusterkit.cluster.spec import (
    DEFAULT_REGION,
    AccountingSpec,
    ClusterSpec,
    ComputeSpec,
    HeadNodeSpec,
    LustreSpec,
    QueueSpec,
    SlurmSpec,
    StorageSpec,
)
from clusterkit.errors import NotFound
from clusterkit.findings import similar_names
from clusterkit.lean_dataclass import lean_dataclass


@lean_dataclass(frozen=True)
class Preset:
    """A named cluster spec (p4de, p5, ...): what `--preset NAME` builds."""

    name: str
    description: str
    build: Callable[[], ClusterSpec]


# Training defaults of AWS's reference clusters: idle dynamic nodes stay an hour (a crashed or requeued
# job finds them again instead of waiting for new ones), and a queue change drains running jobs first.
TRAINING_SCALEDOWN_MINUTES = 60
# Where EC2 offers p5e.48xlarge and trn2.48xlarge (the instance table: not in us-east-1) besides few others.
OHIO = "us-east-2"


def _training_slurm() -> SlurmSpec:
    return SlurmSpec(scaledown_idletime=TRAINING_SCALEDOWN_MINUTES, queue_update_strategy="DRAIN",
                     accounting=_accounting())


def _accounting() -> AccountingSpec:
    """A database of clusterkit's own: sacct, and with it clusterkit's job tracking, watch and preflight."""
    return AccountingSpec(create=True)


def _cpu_queue() -> QueueSpec:
    """Dynamic CPU nodes for data preparation and container builds, so GPUs are not held for them.
    They have no NVMe: enroot's data goes on the root volume, hence its size."""
    return QueueSpec(name="cpu", root_volume_gb=200,
                     compute=[ComputeSpec(name="c5-4xl", instance_type="c5.4xlarge", max_count=4)])


def _training_cluster(name: str, compute_name: str, max_count: int, fsx_capacity_gib: int,
                      fsx_throughput: int, region: str = DEFAULT_REGION) -> ClusterSpec:
    """A training cluster of the preset's instance type (the catalog's, so jobs mean the same machine), in a
    region that offers it (EC2 offers p5e and trn2 in few regions, us-east-1 not among them)."""
    instance_type = PRESET_INSTANCE_TYPES[name]
    return ClusterSpec(
        name=name,
        region=region,
        head_node=HeadNodeSpec(instance_type="c5.9xlarge", root_volume_gb=500),
        queues=[
            QueueSpec(
                name="train",
                exclusive=True,
                root_volume_gb=200,
                compute=[ComputeSpec(name=compute_name, instance_type=instance_type, min_count=0,
                                     max_count=max_count)],
            ),
            _cpu_queue(),
        ],
        storage=StorageSpec(lustre=[LustreSpec(
            name="fsx", mount_dir="/fsx", deployment_type="PERSISTENT_2", storage_capacity_gib=fsx_capacity_gib,
            per_unit_storage_throughput=fsx_throughput, data_compression="LZ4",
        )]),
        slurm=_training_slurm(),
    )


def _g5() -> ClusterSpec:
    return ClusterSpec(
        name="g5",
        head_node=HeadNodeSpec(instance_type="c5.2xlarge", root_volume_gb=200),
        queues=[QueueSpec(name="gpu", root_volume_gb=200, compute=[
            ComputeSpec(name="g5-12xl", instance_type=PRESET_INSTANCE_TYPES["g5"], min_count=0, max_count=4),
        ])],
        # Scratch storage: cheapest for dev work whose data also lives in S3.
        storage=StorageSpec(lustre=[LustreSpec(
            name="fsx", mount_dir="/fsx", deployment_type="SCRATCH_2", storage_capacity_gib=1200,
            data_compression="LZ4",
        )]),
        slurm=SlurmSpec(accounting=_accounting()),
    )


PRESETS: dict[str, Preset] = {
    preset.name: preset for preset in (
        Preset("p4de", "8× A100 80 GB per node, 4 EFA (400 Gbps); training",
               lambda: _training_cluster("p4de", "p4de-24xl", 4, 4800, 250)),
        Preset("p4d", "8× A100 40 GB per node, 4 EFA (400 Gbps); training",
               lambda: _training_cluster("p4d", "p4d-24xl", 4, 4800, 250)),
        Preset("p5", "8× H100 80 GB per node, 32 EFA (3200 Gbps); large-scale training",
               lambda: _training_cluster("p5", "p5-48xl", 8, 9600, 500)),
        Preset("p5e", "8× H200 141 GB per node, 32 EFA (3200 Gbps); large-scale training (us-east-2)",
               lambda: _training_cluster("p5e", "p5e-48xl", 8, 9600, 500, region=OHIO)),
        Preset("p5en", "8× H200 141 GB per node, 16 EFA (3200 Gbps); large-scale training",
               lambda: _training_cluster("p5en", "p5en-48xl", 8, 9600, 500)),
        Preset("p6-b200", "8× B200 179 GB per node, 8 EFA (3200 Gbps); large-scale training",
               lambda: _training_cluster("p6-b200", "p6-b200-48xl", 8, 9600, 500)),
        Preset("trn1", "16 Trainium (32 NeuronCores) per node, 8 EFA (800 Gbps); training",
               lambda: _training_cluster("trn1", "trn1-32xl", 4, 4800, 250)),
        Preset("trn1n", "16 Trainium (32 NeuronCores) per node, 16 EFA (1600 Gbps); training",
               lambda: _training_cluster("trn1n", "trn1n-32xl", 4, 4800, 250)),
        Preset("trn2", "16 Trainium2 (128 NeuronCores: 64 ranks at the default LNC=2) per node, 16 EFA "
               "(3200 Gbps); large-scale training (us-east-2)",
               lambda: _training_cluster("trn2", "trn2-48xl", 8, 9600, 500, region=OHIO)),
        Preset("g5", "4× A10G 24 GB per node, 1 EFA; development and inference", _g5),
    )
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str) -> ClusterSpec:
    """A fresh ClusterSpec for the preset; change it freely, presets are never shared."""
    try:
        return PRESETS[name].build()
    except KeyError:
        close = similar_names(name, PRESETS)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise NotFound(f"unknown preset {name!r}", fix=f"{hint}presets: {', '.join(PRESETS)}") from None
