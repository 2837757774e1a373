"""Facts per EC2 instance type: the one catalog every part of clusterkit reads.

Figures follow the EC2 instance-type data (DescribeInstanceTypes, as moto 5.2 also carries it).
Prices are on-demand Linux list prices in us-east-1, USD per hour, as of PRICE_TABLE_DATE; they
are estimates for planning, not a bill.
"""

from __future__ import annotations

from clusterkit.errors import NotFound
from clusterkit.lean_dataclass import lean_dataclass

PRICE_TABLE_DATE = "2025-06-05"
PRICE_TABLE_REGION = "us-east-1"


@lean_dataclass(frozen=True)
class InstanceType:
    """An instance type as jobs see it: CPUs, memory and accelerators per node."""

    name: str
    vcpus: int
    memory_gib: int
    accelerator: str = "none"  # "gpu", "neuron" or "none"
    accelerator_model: str = ""
    accelerator_count: int = 0  # GPUs, or Trainium/Inferentia chips
    accelerator_memory_gib: int = 0  # per accelerator
    neuron_cores: int = 0  # physical NeuronCores per instance
    # The logical NeuronCore sizes the Neuron runtime takes (NEURON_LOGICAL_NC_CONFIG: physical cores per
    # logical one), its default first. Trainium2 groups two by default (AWS Neuron, "Logical NeuronCore
    # configuration": a trn2.48xlarge presents 64 NeuronCores); earlier chips have only 1.
    logical_nc_configs: tuple[int, ...] = (1,)
    efa_interfaces: int = 0  # maximum EFA network cards
    network_gbps: int = 0
    nvme_gb: int = 0
    nvswitch: bool = False  # needs the NVIDIA fabric manager
    device_rdma: bool = False  # EFA reads and writes accelerator memory directly (GPUDirect/Neuron RDMA)
    price_per_hour: float | None = None

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def processes_per_node(self) -> int:
        """Training processes per node: one per GPU or NeuronCore (logical, at the default size), else one."""
        return self.processes()

    def processes(self, logical_nc_config: int | None = None) -> int:
        """Training processes per node with NeuronCores of `logical_nc_config` physical ones (None: the
        default size): one per GPU or NeuronCore the runtime exposes, else one."""
        if self.accelerator == "neuron":
            return self.neuron_cores // (logical_nc_config or self.logical_nc_configs[0])
        return self.accelerator_count or 1


def _types(*items: InstanceType) -> dict[str, InstanceType]:
    return {item.name: item for item in items}


INSTANCE_TYPES: dict[str, InstanceType] = _types(
    InstanceType("p4d.24xlarge", 96, 1152, "gpu", "A100", 8, 40, efa_interfaces=4, network_gbps=400,
                 nvme_gb=8000, nvswitch=True, device_rdma=True, price_per_hour=21.96),
    InstanceType("p4de.24xlarge", 96, 1152, "gpu", "A100", 8, 80, efa_interfaces=4, network_gbps=400,
                 nvme_gb=8000, nvswitch=True, device_rdma=True, price_per_hour=27.45),
    InstanceType("p5.48xlarge", 192, 2048, "gpu", "H100", 8, 80, efa_interfaces=32, network_gbps=3200,
                 nvme_gb=30400, nvswitch=True, device_rdma=True, price_per_hour=55.04),
    InstanceType("p5e.48xlarge", 192, 2048, "gpu", "H200", 8, 141, efa_interfaces=32, network_gbps=3200,
                 nvme_gb=30400, nvswitch=True, device_rdma=True, price_per_hour=None),
    InstanceType("p5en.48xlarge", 192, 2048, "gpu", "H200", 8, 141, efa_interfaces=16, network_gbps=3200,
                 nvme_gb=30400, nvswitch=True, device_rdma=True, price_per_hour=63.30),
    InstanceType("p6-b200.48xlarge", 192, 2048, "gpu", "B200", 8, 179, efa_interfaces=8, network_gbps=3200,
                 nvme_gb=30400, nvswitch=True, device_rdma=True, price_per_hour=None),
    InstanceType("trn1.2xlarge", 8, 32, "neuron", "Trainium", 1, 32, neuron_cores=2, network_gbps=12,
                 nvme_gb=474, price_per_hour=1.34),
    InstanceType("trn1.32xlarge", 128, 512, "neuron", "Trainium", 16, 32, neuron_cores=32, efa_interfaces=8,
                 network_gbps=800, nvme_gb=7600, device_rdma=True, price_per_hour=21.50),
    InstanceType("trn1n.32xlarge", 128, 512, "neuron", "Trainium", 16, 32, neuron_cores=32, efa_interfaces=16,
                 network_gbps=1600, nvme_gb=7600, device_rdma=True, price_per_hour=24.78),
    InstanceType("trn2.48xlarge", 192, 2048, "neuron", "Trainium2", 16, 96, neuron_cores=128, logical_nc_configs=(2, 1),
                 efa_interfaces=16, network_gbps=3200, nvme_gb=7600, device_rdma=True, price_per_hour=None),
    InstanceType("g5.xlarge", 4, 16, "gpu", "A10G", 1, 24, network_gbps=10, nvme_gb=250, price_per_hour=1.006),
    InstanceType("g5.8xlarge", 32, 128, "gpu", "A10G", 1, 24, efa_interfaces=1, network_gbps=25, nvme_gb=900,
                 price_per_hour=2.448),
    InstanceType("g5.12xlarge", 48, 192, "gpu", "A10G", 4, 24, efa_interfaces=1, network_gbps=40, nvme_gb=3800,
                 price_per_hour=5.672),
    InstanceType("g5.48xlarge", 192, 768, "gpu", "A10G", 8, 24, efa_interfaces=1, network_gbps=100, nvme_gb=7600,
                 price_per_hour=16.288),
    InstanceType("inf2.48xlarge", 192, 768, "neuron", "Inferentia2", 12, 32, neuron_cores=24, network_gbps=100,
                 price_per_hour=12.98),
    InstanceType("c5.large", 2, 4, network_gbps=10, price_per_hour=0.085),
    InstanceType("c5.2xlarge", 8, 16, network_gbps=10, price_per_hour=0.34),
    InstanceType("c5.4xlarge", 16, 32, network_gbps=10, price_per_hour=0.68),
    InstanceType("c5.9xlarge", 36, 72, network_gbps=10, price_per_hour=1.53),
    InstanceType("c5n.18xlarge", 72, 192, efa_interfaces=1, network_gbps=100, price_per_hour=3.888),
    InstanceType("m5.2xlarge", 8, 32, network_gbps=10, price_per_hour=0.384),
    InstanceType("m5.8xlarge", 32, 128, network_gbps=10, price_per_hour=1.536),
)


# Short names for the instance types people train on: a cluster preset builds its nodes of this type,
# and a job spec, doctor, recipes and nccl-test mean the same machine by the same word.
PRESET_INSTANCE_TYPES: dict[str, str] = {
    "p4d": "p4d.24xlarge",
    "p4de": "p4de.24xlarge",
    "p5": "p5.48xlarge",
    "trn1": "trn1.32xlarge",
    "trn1n": "trn1n.32xlarge",
    "g5": "g5.12xlarge",
}


def resolve_instance_type(name_or_preset: str) -> InstanceType | None:
    """An instance type by its EC2 name or preset short name (`p5`), or None when unknown."""
    return INSTANCE_TYPES.get(PRESET_INSTANCE_TYPES.get(name_or_preset, name_or_preset))


def instance_type(name: str) -> InstanceType:
    """Look up an instance type; unknown names get an error that lists what is known."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise NotFound(f"unknown instance type {name!r}", fix=f"use one of: {known}") from None


def find_instance_type(name: str) -> InstanceType | None:
    return INSTANCE_TYPES.get(name)
