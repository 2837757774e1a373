"""CloudFormation resource types that moto 5.2 cannot create, filled in as moto models.

moto's CloudFormation skips a resource type it has no model for (and a `Ref` to it then fails). For
clusterkit's prerequisites stack that is AWS::SecretsManager::Secret; this model creates the secret in
moto's Secrets Manager as CloudFormation would (a generated password when GenerateSecretString asks for
one; `Ref` is the ARN), and deletes it unless its DeletionPolicy is Retain (which moto honours).
moto also leaves a stack's AWS::EC2::RouteTable, AWS::EC2::NatGateway (and its network interface) and
AWS::EC2::EIP behind on delete (so its VPC cannot go); here they are deleted as CloudFormation deletes them.
A NAT gateway's network interface is of type `nat_gateway`, as on AWS (moto says `interface`).
moto deletes an RDS instance whose DeletionPolicy is Snapshot without taking the snapshot; tests say so.
moto's CloudFormation ignores an AWS::EC2::Subnet's MapPublicIpOnLaunch; here the subnet gets it.
For an RDS instance without DBInstanceIdentifier, CloudFormation generates a lowercase identifier of at most
63 characters; moto joins the stack name, logical id and a suffix uncut, which RDS then refuses for long names.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

from moto.cloudformation import parsing
from moto.core.common_models import CloudFormationModel
from moto.ec2.models import ec2_backends
from moto.ec2.models.elastic_ip_addresses import ElasticAddress
from moto.ec2.models.nat_gateways import NatGateway
from moto.ec2.models.route_tables import RouteTable
from moto.ec2.models.subnets import Subnet
from moto.secretsmanager.models import secretsmanager_backends


class _Secret(CloudFormationModel):
    def __init__(self, account_id: str, region: str, arn: str, name: str) -> None:
        self.account_id, self.region, self.arn, self.name = account_id, region, arn, name

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::SecretsManager::Secret"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    @classmethod
    def create_from_cloudformation_json(cls, resource_name: str, cloudformation_json: Any, account_id: str,
                                        region_name: str, **kwargs: Any) -> _Secret:
        properties = cloudformation_json.get("Properties", {})
        value = properties.get("SecretString")
        generate = properties.get("GenerateSecretString")
        if value is None and generate is not None:
            alphabet = string.ascii_letters + string.digits
            if not generate.get("ExcludePunctuation"):
                alphabet += "!#%&*+-.:=?^_~"
            value = "".join(secrets.choice(alphabet) for _ in range(int(generate.get("PasswordLength", 32))))
        backend = secretsmanager_backends[account_id][region_name]
        created = backend.create_secret(name=resource_name, secret_string=value, secret_binary=None,
                                        description=properties.get("Description"), tags=properties.get("Tags"),
                                        kms_key_id=None, client_request_token=None, replica_regions=[],
                                        force_overwrite=False)
        import json

        arn = json.loads(created)["ARN"] if isinstance(created, str) else created["ARN"]
        return cls(account_id, region_name, arn, resource_name)

    def delete(self, account_id: str, region_name: str) -> None:
        secretsmanager_backends[account_id][region_name].delete_secret(
            self.arn, recovery_window_in_days=None, force_delete_without_recovery=True)


def _delete_route_table(self: RouteTable, account_id: str, region_name: str) -> None:
    ec2_backends[account_id][region_name].delete_route_table(self.id)


_nat_init = NatGateway.__init__


def _nat_gateway_init(self: NatGateway, *args: Any, **kwargs: Any) -> None:
    _nat_init(self, *args, **kwargs)
    self._eni.interface_type = "nat_gateway"
    self._eni.description = f"Interface for NAT Gateway {self.id}"


def _delete_nat_gateway(self: NatGateway, account_id: str, region_name: str) -> None:
    backend = ec2_backends[account_id][region_name]
    for address in backend.addresses:
        if address.eni is self._eni:
            backend.disassociate_address(address=address.public_ip)
    backend.delete_nat_gateway(self.id)
    backend.delete_network_interface(self._eni.id)


def _release_address(self: ElasticAddress, account_id: str, region_name: str) -> None:
    ec2_backends[account_id][region_name].release_address(allocation_id=self.allocation_id)


_create_subnet = Subnet.create_from_cloudformation_json


def _subnet_from_cloudformation(resource_name: str, cloudformation_json: Any, account_id: str, region_name: str,
                                **kwargs: Any) -> Subnet:
    subnet = _create_subnet(resource_name, cloudformation_json, account_id, region_name, **kwargs)
    public = cloudformation_json["Properties"].get("MapPublicIpOnLaunch", False)
    subnet.map_public_ip_on_launch = str(public).lower() == "true"
    return subnet


_generate_resource_name = parsing.generate_resource_name
RDS_IDENTIFIER_LIMIT = 63


def _generated_name(resource_type: str, stack_name: str, logical_id: str) -> str:
    name = _generate_resource_name(resource_type, stack_name, logical_id)
    if resource_type != "AWS::RDS::DBInstance":
        return name
    suffix = name.rsplit("-", 1)[1]
    return f"{stack_name}-{logical_id}"[:RDS_IDENTIFIER_LIMIT - len(suffix) - 1].rstrip("-").lower() + f"-{suffix}"


def fill() -> None:
    """Make moto's CloudFormation know the models above (its type map is computed once and cached)."""
    RouteTable.delete = _delete_route_table  # type: ignore[attr-defined]
    NatGateway.__init__ = _nat_gateway_init  # type: ignore[method-assign]
    NatGateway.delete = _delete_nat_gateway  # type: ignore[attr-defined]
    ElasticAddress.delete = _release_address  # type: ignore[attr-defined]
    parsing.generate_resource_name = _generated_name
    Subnet.create_from_cloudformation_json = staticmethod(_subnet_from_cloudformation)  # type: ignore[assignment]
    parsing.get_model_list.cache_clear()
    parsing.get_model_map.cache_clear()
    parsing.get_name_type_map.cache_clear()
    assert parsing.get_model_map()["AWS::SecretsManager::Secret"] is _Secret
