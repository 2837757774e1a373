"""clusterkit's prerequisites stack: the network and the Slurm accounting database a cluster needs. Pure.

ParallelCluster 3.16 puts EFA nodes only in subnets that give no public IP, so a training cluster needs a
private subnet with a route to a NAT gateway, which a new account's default VPC does not have. The AWS
reference architecture ships a "prerequisites" stack for it; this is clusterkit's, rendered from the spec:

- network: a VPC, a public subnet with an internet gateway and a NAT gateway (the head node), a private subnet
  routed through the NAT (the queues), both in the Availability Zone chosen at create (a template parameter:
  one that offers every instance type of the spec and holds its reservations), and an S3 gateway endpoint;
- database (`slurm.accounting: create`): RDS for MySQL, small and encrypted, in private subnets of two zones
  (RDS needs two), reachable on 3306 only from a client security group the head node joins, its password
  generated into Secrets Manager. A delete keeps a final snapshot and the secret.

`template(...)` is the CloudFormation template; `with_outputs(spec, outputs)` is the spec with the stack's
outputs filled in (subnets, the database's address, user, secret and client security group).
"""

from __future__ import annotations

import copy
from typing import Any

from clusterkit.cluster.spec import NETWORK_CREATE, NETWORK_EXISTING, ClusterSpec
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.yaml_text import yaml_text

# Tags of every prerequisites stack: clusterkit reuses a stack carrying LAYOUT_TAG with this layout.
LAYOUT_TAG = "clusterkit:prerequisites"
LAYOUT = "1"
CREATED_FOR_TAG = "clusterkit:created-for"  # the cluster whose create made the stack
STACK_NAME = "clusterkit-prerequisites-{name}"

VPC_CIDR = "10.0.0.0/16"
PUBLIC_CIDR = "10.0.0.0/24"
DATABASE_CIDR = "10.0.1.0/24"  # the database's second zone
PRIVATE_CIDR = "10.0.64.0/18"  # 16k addresses: every EFA interface of every node takes one

DATABASE_USER = "clusterkit"
DATABASE_CLASS = "db.t4g.small"
DATABASE_STORAGE_GIB = 20
DATABASE_PORT = 3306
MYSQL_VERSION = "8.0"

# us-east-1 list prices (USD), as dated in clusterkit.catalog: what the stack costs while it exists.
NAT_GATEWAY_PER_HOUR = 0.045
PUBLIC_IPV4_PER_HOUR = 0.005
DATABASE_PER_HOUR = 0.032  # db.t4g.small, MySQL, single-AZ
DATABASE_STORAGE_PER_GIB_MONTH = 0.115  # gp3
HOURS_PER_MONTH = 730

Template = dict[str, Any]


@lean_dataclass(frozen=True)
class Prerequisites:
    """What the stack holds: a network of its own, an accounting database, or both."""

    network: bool
    database: bool

    @property
    def needed(self) -> bool:
        return self.network or self.database

    def cost_per_hour(self) -> dict[str, float]:
        """What the stack costs per hour while it exists, by item."""
        costs = {}
        if self.network:
            costs["NAT gateway and its public IPv4 address"] = round(NAT_GATEWAY_PER_HOUR + PUBLIC_IPV4_PER_HOUR, 3)
        if self.database:
            storage = DATABASE_STORAGE_GIB * DATABASE_STORAGE_PER_GIB_MONTH / HOURS_PER_MONTH
            costs[f"accounting database ({DATABASE_CLASS}, {DATABASE_STORAGE_GIB} GiB)"] = round(
                DATABASE_PER_HOUR + storage, 3)
        return costs

    def to_dict(self) -> dict[str, bool]:
        return {"network": self.network, "database": self.database}

    @classmethod
    def held_by(cls, outputs: dict[str, str]) -> Prerequisites:
        """What a stack made earlier holds, from its outputs."""
        return cls(network="PrivateSubnetId" in outputs, database="DatabaseUri" in outputs)


def planned(spec: ClusterSpec) -> Prerequisites:
    """What a create of this spec makes, as far as the spec alone tells: with `network` unset and no subnet
    given, the network is made unless the account turns out to have a private subnet that fits (resolve)."""
    network = spec.network == NETWORK_CREATE or (spec.network != NETWORK_EXISTING and not _names_subnets(spec))
    accounting = spec.slurm.accounting
    return Prerequisites(network=network, database=accounting is not None and accounting.pending)


def _names_subnets(spec: ClusterSpec) -> bool:
    return bool(spec.subnet_id or spec.head_node.subnet_id or any(queue.subnet_ids for queue in spec.queues))


def stack_name(cluster: str) -> str:
    return STACK_NAME.format(name=cluster)


def template(prerequisites: Prerequisites, cluster: str) -> Template:
    """The CloudFormation template. Parameters: AvailabilityZone (and DatabaseAvailabilityZone) with a network of
    its own; VpcId and DatabaseSubnetIds for a database in an existing network."""
    parameters: Template = {}
    resources: Template = {}
    outputs: Template = {}
    if prerequisites.network:
        parameters["AvailabilityZone"] = {"Type": "AWS::EC2::AvailabilityZone::Name",
                                          "Description": "where the cluster's nodes run"}
        resources.update(_network(cluster, prerequisites.database))
        outputs.update({
            "VpcId": _output({"Ref": "Vpc"}, "the VPC"),
            "PublicSubnetId": _output({"Ref": "PublicSubnet"}, "the head node's subnet (public IPs, internet gateway)"),
            "PrivateSubnetId": _output({"Ref": "PrivateSubnet"}, "the queues' subnet (no public IPs, NAT)"),
            "AvailabilityZone": _output({"Ref": "AvailabilityZone"}, "the zone of both subnets"),
        })
        vpc: Any = {"Ref": "Vpc"}
        database_subnets: Any = [{"Ref": "PrivateSubnet"}, {"Ref": "DatabaseSubnet"}]
    else:
        parameters["VpcId"] = {"Type": "AWS::EC2::VPC::Id", "Description": "the cluster's VPC"}
        parameters["DatabaseSubnetIds"] = {"Type": "List<AWS::EC2::Subnet::Id>",
                                           "Description": "subnets of the VPC in two Availability Zones"}
        vpc, database_subnets = {"Ref": "VpcId"}, {"Ref": "DatabaseSubnetIds"}
    if prerequisites.database:
        if prerequisites.network:
            parameters["DatabaseAvailabilityZone"] = {
                "Type": "AWS::EC2::AvailabilityZone::Name",
                "Description": "a second zone, for the database's subnet group (RDS needs two)"}
        resources.update(_database(cluster, vpc, database_subnets))
        outputs.update({
            "DatabaseUri": _output({"Fn::Join": [":", [{"Fn::GetAtt": ["Database", "Endpoint.Address"]},
                                                       {"Fn::GetAtt": ["Database", "Endpoint.Port"]}]]},
                                   "Slurm accounting database, host:port"),
            "DatabaseUserName": _output(DATABASE_USER, "the database's user"),
            "DatabaseSecretArn": _output({"Ref": "DatabaseSecret"}, "the database's password (Secrets Manager)"),
            "DatabaseClientSecurityGroupId": _output({"Ref": "DatabaseClientSecurityGroup"},
                                                     "the security group the head node joins to reach it"),
        })
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"clusterkit prerequisites for cluster {cluster}: "
                       + ", ".join(part for part, wanted in (("network", prerequisites.network),
                                                             ("accounting database", prerequisites.database))
                                   if wanted),
        "Parameters": parameters,
        "Resources": resources,
        "Outputs": outputs,
    }


def template_text(prerequisites: Prerequisites, cluster: str) -> str:
    """The template as the YAML file `--output-prerequisites` writes and CloudFormation receives."""
    header = (f"# CloudFormation template of clusterkit's prerequisites for cluster '{cluster}'.\n"
              "# Generated by clusterkit from the cluster spec; parameters are chosen at create.\n")
    return header + yaml_text(template(prerequisites, cluster))


def _output(value: Any, description: str) -> Template:
    return {"Description": description, "Value": value}


def _name_tag(cluster: str, what: str) -> list[dict[str, str]]:
    return [{"Key": "Name", "Value": f"clusterkit-{cluster}-{what}"}]


def _subnet(cluster: str, what: str, cidr: str, zone: str, public: bool) -> Template:
    return {"Type": "AWS::EC2::Subnet", "Properties": {
        "VpcId": {"Ref": "Vpc"}, "CidrBlock": cidr, "AvailabilityZone": {"Ref": zone},
        "MapPublicIpOnLaunch": public, "Tags": _name_tag(cluster, what)}}


def _network(cluster: str, database: bool) -> Template:
    resources: Template = {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {
            "CidrBlock": VPC_CIDR, "EnableDnsSupport": True, "EnableDnsHostnames": True,
            "Tags": _name_tag(cluster, "vpc")}},
        "InternetGateway": {"Type": "AWS::EC2::InternetGateway", "Properties": {
            "Tags": _name_tag(cluster, "igw")}},
        "InternetGatewayAttachment": {"Type": "AWS::EC2::VPCGatewayAttachment", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "InternetGatewayId": {"Ref": "InternetGateway"}}},
        "PublicSubnet": _subnet(cluster, "public", PUBLIC_CIDR, "AvailabilityZone", public=True),
        "PrivateSubnet": _subnet(cluster, "private", PRIVATE_CIDR, "AvailabilityZone", public=False),
        "PublicRouteTable": {"Type": "AWS::EC2::RouteTable", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "Tags": _name_tag(cluster, "public")}},
        "PublicDefaultRoute": {"Type": "AWS::EC2::Route", "DependsOn": "InternetGatewayAttachment", "Properties": {
            "RouteTableId": {"Ref": "PublicRouteTable"}, "DestinationCidrBlock": "0.0.0.0/0",
            "GatewayId": {"Ref": "InternetGateway"}}},
        "PublicSubnetRoutes": {"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
            "SubnetId": {"Ref": "PublicSubnet"}, "RouteTableId": {"Ref": "PublicRouteTable"}}},
        "NatAddress": {"Type": "AWS::EC2::EIP", "DependsOn": "InternetGatewayAttachment", "Properties": {
            "Domain": "vpc", "Tags": _name_tag(cluster, "nat")}},
        "NatGateway": {"Type": "AWS::EC2::NatGateway", "Properties": {
            "SubnetId": {"Ref": "PublicSubnet"}, "AllocationId": {"Fn::GetAtt": ["NatAddress", "AllocationId"]},
            "Tags": _name_tag(cluster, "nat")}},
        "PrivateRouteTable": {"Type": "AWS::EC2::RouteTable", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "Tags": _name_tag(cluster, "private")}},
        "PrivateDefaultRoute": {"Type": "AWS::EC2::Route", "Properties": {
            "RouteTableId": {"Ref": "PrivateRouteTable"}, "DestinationCidrBlock": "0.0.0.0/0",
            "NatGatewayId": {"Ref": "NatGateway"}}},
        "PrivateSubnetRoutes": {"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
            "SubnetId": {"Ref": "PrivateSubnet"}, "RouteTableId": {"Ref": "PrivateRouteTable"}}},
        # S3 traffic (node scripts, images, data) stays off the NAT gateway, which charges per GB.
        "S3Endpoint": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {
            "VpcId": {"Ref": "Vpc"}, "VpcEndpointType": "Gateway",
            "ServiceName": {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"},
            "RouteTableIds": [{"Ref": "PrivateRouteTable"}, {"Ref": "PublicRouteTable"}]}},
    }
    if database:
        resources["DatabaseSubnet"] = _subnet(cluster, "database", DATABASE_CIDR, "DatabaseAvailabilityZone",
                                              public=False)
        resources["DatabaseSubnetRoutes"] = {"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
            "SubnetId": {"Ref": "DatabaseSubnet"}, "RouteTableId": {"Ref": "PrivateRouteTable"}}}
    return resources


def _database(cluster: str, vpc: Any, subnets: Any) -> Template:
    return {
        "DatabaseClientSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": f"clusterkit {cluster}: members reach the Slurm accounting database",
            "VpcId": vpc, "Tags": _name_tag(cluster, "database-client")}},
        "DatabaseSecurityGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
            "GroupDescription": f"clusterkit {cluster}: the Slurm accounting database, from its clients only",
            "VpcId": vpc,
            "SecurityGroupIngress": [{"IpProtocol": "tcp", "FromPort": DATABASE_PORT, "ToPort": DATABASE_PORT,
                                      "SourceSecurityGroupId": {"Ref": "DatabaseClientSecurityGroup"},
                                      "Description": "MySQL from the head node"}],
            "Tags": _name_tag(cluster, "database")}},
        "DatabaseSubnetGroup": {"Type": "AWS::RDS::DBSubnetGroup", "Properties": {
            "DBSubnetGroupDescription": f"clusterkit {cluster}: Slurm accounting database", "SubnetIds": subnets}},
        # The password: generated, kept with a deleted database's snapshot, never in a template or config.
        "DatabaseSecret": {"Type": "AWS::SecretsManager::Secret", "DeletionPolicy": "Retain",
                           "UpdateReplacePolicy": "Retain", "Properties": {
                               "Description": f"clusterkit {cluster}: Slurm accounting database password",
                               "GenerateSecretString": {"PasswordLength": 32, "ExcludePunctuation": True}}},
        # A delete keeps a final snapshot: the accounting history outlives the stack as a data store.
        "Database": {"Type": "AWS::RDS::DBInstance", "DeletionPolicy": "Snapshot", "UpdateReplacePolicy": "Snapshot",
                     # RDS takes the major version and starts its current minor one; cfn-lint knows only minor
                     # versions, and a pinned minor version fails creates once AWS retires it.
                     "Metadata": {"cfn-lint": {"config": {"ignore_checks": ["E3691"]}}},
                     "Properties": {
                         "Engine": "mysql", "EngineVersion": MYSQL_VERSION, "DBInstanceClass": DATABASE_CLASS,
                         "AllocatedStorage": str(DATABASE_STORAGE_GIB), "StorageType": "gp3",
                         "StorageEncrypted": True, "PubliclyAccessible": False, "MultiAZ": False,
                         "DBSubnetGroupName": {"Ref": "DatabaseSubnetGroup"},
                         "VPCSecurityGroups": [{"Ref": "DatabaseSecurityGroup"}],
                         "MasterUsername": DATABASE_USER,
                         "MasterUserPassword": {"Fn::Sub": "{{resolve:secretsmanager:${DatabaseSecret}}}"},
                         "BackupRetentionPeriod": 7, "CopyTagsToSnapshot": True, "AutoMinorVersionUpgrade": True,
                         "Port": str(DATABASE_PORT)}},
    }


def with_outputs(spec: ClusterSpec, outputs: dict[str, str]) -> ClusterSpec:
    """A copy of the spec placed in the stack's network and pointed at its database."""
    spec = copy.deepcopy(spec)
    if "PrivateSubnetId" in outputs:
        spec.subnet_id = outputs["PrivateSubnetId"]  # the queues without their own subnets
        spec.head_node.subnet_id = spec.head_node.subnet_id or outputs["PublicSubnetId"]
    accounting = spec.slurm.accounting
    if accounting is not None and accounting.pending and "DatabaseUri" in outputs:
        accounting.uri = outputs["DatabaseUri"]
        accounting.user_name = outputs["DatabaseUserName"]
        accounting.password_secret_arn = outputs["DatabaseSecretArn"]
        group = outputs["DatabaseClientSecurityGroupId"]
        if group not in spec.head_node.additional_security_groups:
            spec.head_node.additional_security_groups.append(group)
    return spec
