"""The catalog keeps up with EC2: every accelerated training type botocore's EC2 model names is known to clusterkit,
and the curated figures agree with EC2's DescribeInstanceTypes (as moto carries it, the table's own source).

botocore's `InstanceType` enum is the list of types the SDK can ask for; a new p5, p6 or trn type appears there
with a botocore release. It must then be curated in `offerings.CURATED` (so jobs, checks and costs know its GPUs or
NeuronCores) or refused with its reason (`validators.instances.UNSUPPORTED_TYPES`), never "does not exist".
"""

from __future__ import annotations

import re
from typing import Any

import boto3
import pytest
from botocore.loaders import Loader
from moto import mock_aws

from clusterkit import offerings
from clusterkit.catalog import INSTANCE_TYPES
from clusterkit.cluster.validators.instances import UNSUPPORTED_TYPES

# p5 and later (a p7 too, when it comes) and every Trainium.
ACCELERATED_TRAINING = r"(p[5-9]|p[1-9][0-9]|trn)[a-z0-9-]*\.[a-z0-9]+"


def botocore_types() -> list[str]:
    """Every instance type name of the installed botocore's EC2 model."""
    model = Loader().load_service_model("ec2", "service-2")
    return list(model["shapes"]["InstanceType"]["enum"])


def accelerated_training_types(names: list[str]) -> list[str]:
    return sorted(name for name in names if re.fullmatch(ACCELERATED_TRAINING, name))


def unknown_to_clusterkit(names: list[str]) -> list[str]:
    """The accelerated training types among `names` that clusterkit neither curates nor refuses with a reason."""
    return [name for name in accelerated_training_types(names)
            if name not in INSTANCE_TYPES and name not in UNSUPPORTED_TYPES]


def test_every_accelerated_training_type_of_botocore_is_known() -> None:
    names = botocore_types()
    assert len(accelerated_training_types(names)) >= 10  # the pattern still finds the families
    assert unknown_to_clusterkit(names) == []


def test_a_new_type_in_botocore_fails_the_check() -> None:
    assert unknown_to_clusterkit([*botocore_types(), "p7.48xlarge", "trn3.48xlarge"]) == ["p7.48xlarge",
                                                                                        "trn3.48xlarge"]


def test_every_accelerated_training_type_of_the_table_is_known() -> None:
    assert unknown_to_clusterkit(offerings.table().names) == []


def _ec2_descriptions(names: list[str]) -> dict[str, dict[str, Any]]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=names)
        return {item["InstanceType"]: item for page in pages for item in page["InstanceTypes"]}


@pytest.mark.usefixtures("aws_env")
def test_curated_figures_agree_with_ec2s_description() -> None:
    """vCPUs, memory, GPUs and their memory, NeuronCores and EFA interfaces as DescribeInstanceTypes gives them.
    (Neuron device memory is left out: moto's copy gives Trainium2 512 GiB per device where AWS documents 96.)"""
    described = _ec2_descriptions(accelerated_training_types(list(INSTANCE_TYPES)))
    assert sorted(described) == accelerated_training_types(list(INSTANCE_TYPES))
    for name, item in described.items():
        facts = INSTANCE_TYPES[name]
        assert facts.vcpus == item["VCpuInfo"]["DefaultVCpus"], name
        assert facts.memory_gib == item["MemoryInfo"]["SizeInMiB"] // 1024, name
        assert facts.efa_interfaces == item["NetworkInfo"].get("EfaInfo", {}).get("MaximumEfaInterfaces", 0), name
        gpus = item.get("GpuInfo", {}).get("Gpus", [])
        neuron = item.get("NeuronInfo", {}).get("NeuronDevices", [])
        if gpus:
            assert facts.accelerator == "gpu" and facts.accelerator_count == sum(g["Count"] for g in gpus), name
            assert facts.accelerator_memory_gib == gpus[0]["MemoryInfo"]["SizeInMiB"] // 1024, name
        else:
            assert facts.accelerator == "neuron", name
            assert facts.accelerator_count == sum(device["Count"] for device in neuron), name
            assert facts.neuron_cores == sum(d["Count"] * d["CoreInfo"]["Count"] for d in neuron), name
