"""Resolve what a cluster spec leaves open, and check what it names, against one AWS account and region.

`resolve(spec, aws, account)` picks a subnet (in the default VPC, in an Availability Zone that offers
every compute instance type and holds the capacity reservations) when the spec has none, or plans
clusterkit's prerequisites stack (a network, an accounting database) where the account has no subnet
that fits or the spec asks for it, reusing such a stack made earlier; it looks up a
custom AMI given by name, names the bucket for clusterkit's node scripts, and checks the named
subnets, capacity reservations and Capacity Blocks, key pair, FSx file systems, S3 buckets, custom
action scripts and custom AMI. Problems are findings on the spec's fields; credential and permission
problems raise AccessProblem from `access.call`. This is the only module here that asks EC2, FSx and
S3 questions; it changes nothing.
"""

from __future__ import annotations

import copy
from dataclasses import field
from typing import Any

from clusterkit import offerings
from clusterkit.cluster.render import policy_arn, render_config
from clusterkit.cluster.node_scripts import uploads
from clusterkit.cluster.prerequisites import LAYOUT, LAYOUT_TAG, Prerequisites, stack_name, with_outputs
from clusterkit.cluster.spec import (
    DEFAULT_NODE_POLICIES,
    DEFAULT_SCRIPTS_BUCKET,
    NETWORK_CREATE,
    NETWORK_EXISTING,
    ClusterSpec,
    ComputeSpec,
    QueueSpec,
)
from clusterkit.findings import Finding, error, has_errors, info, warning
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.aws.access import Aws, call

USABLE_RESERVATION_STATES = ("active", "scheduled")
COMPLETE_STACK_STATES = ("CREATE_COMPLETE", "UPDATE_COMPLETE")


@lean_dataclass
class Resolution:
    """The spec with its open fields filled in, what was chosen, and every problem found."""

    spec: ClusterSpec
    findings: list[Finding] = field(default_factory=list)
    chosen: dict[str, str] = field(default_factory=dict)  # e.g. subnet_id, availability_zone, image_id
    create_scripts_bucket: bool = False  # apply makes the node-scripts bucket before uploading
    # clusterkit's prerequisites stack: the one the cluster uses (`stack`), and what apply creates when it is new.
    stack: str | None = None
    prerequisites: Prerequisites | None = None  # None: nothing to create (none needed, or `stack` made earlier)
    reused: Prerequisites | None = None  # what `stack` holds when it was made earlier
    parameters: dict[str, str] = field(default_factory=dict)
    stand_in: str | None = None  # a subnet of the new network's zone, for ParallelCluster's dry run before it exists

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)


def resolve(spec: ClusterSpec, aws: Aws, account: str) -> Resolution:
    """Fill in the subnet, AMI and scripts bucket, and check every AWS resource the spec names;
    the input spec is not changed. `account` is the caller's (it names the default scripts bucket)."""
    resolution = Resolution(spec=copy.deepcopy(spec))
    lookup = _Lookup(aws)
    reservations = _check_reservations(resolution, lookup)
    _choose_network(resolution, lookup, reservations)
    _check_subnets(resolution, lookup, reservations)
    _plan_database(resolution, lookup)
    _check_key_pair(resolution, lookup)
    _check_security_groups(resolution, lookup)
    _check_storage(resolution, lookup)
    _check_ebs_zones(resolution, lookup)
    _check_image(resolution, lookup)
    _check_placement_groups(resolution, lookup)
    _check_policies_and_secret(resolution, lookup)
    _check_scripts(resolution, lookup, account)
    return resolution


class _Lookup:
    """The EC2/FSx/S3 questions resolution asks, each asked once."""

    def __init__(self, aws: Aws) -> None:
        self.aws = aws
        self.region = aws.region
        self._offerings: dict[str, set[str]] = {}
        self._subnets: dict[str, dict[str, Any] | None] = {}
        self._stacks: list[dict[str, Any]] | None = None

    def azs_offering(self, instance_type: str) -> set[str]:
        if instance_type not in self._offerings:
            zones: set[str] = set()
            params: dict[str, Any] = {"LocationType": "availability-zone",
                                      "Filters": [{"Name": "instance-type", "Values": [instance_type]}]}
            while True:
                page = call(self.aws, "ec2", "describe_instance_type_offerings", **params)
                zones |= {offer["Location"] for offer in page.get("InstanceTypeOfferings", [])}
                if not page.get("NextToken"):
                    break
                params["NextToken"] = page["NextToken"]
            self._offerings[instance_type] = zones
        return self._offerings[instance_type]

    def network_cards(self, instance_type: str) -> int:
        types = call(self.aws, "ec2", "describe_instance_types", InstanceTypes=[instance_type]).get("InstanceTypes", [])
        return int(types[0].get("NetworkInfo", {}).get("MaximumNetworkCards", 1)) if types else 1

    def subnet(self, subnet_id: str) -> dict[str, Any] | None:
        if subnet_id not in self._subnets:
            self._subnets[subnet_id] = _first(self._ask_or_none(
                "ec2", "describe_subnets", "Subnets", ("InvalidSubnetID.NotFound", "InvalidSubnetID.Malformed"),
                SubnetIds=[subnet_id]))
        return self._subnets[subnet_id]

    def default_vpc(self) -> dict[str, Any] | None:
        vpcs = call(self.aws, "ec2", "describe_vpcs", Filters=[{"Name": "is-default", "Values": ["true"]}])
        return _first(vpcs.get("Vpcs", []))

    def zones(self) -> list[str]:
        """The region's Availability Zones (not Local Zones), in name order."""
        found = call(self.aws, "ec2", "describe_availability_zones",
                     Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]).get("AvailabilityZones", [])
        return sorted(zone["ZoneName"] for zone in found if zone.get("State", "available") == "available")

    def prerequisite_stacks(self) -> list[dict[str, Any]]:
        """clusterkit's prerequisites stacks in this region that are complete: name, tags, parameters, outputs."""
        if self._stacks is None:
            self._stacks = []
            params: dict[str, Any] = {}
            while True:
                page = call(self.aws, "cloudformation", "describe_stacks", **params)
                for stack in page.get("Stacks", []):
                    tags = {tag["Key"]: tag["Value"] for tag in stack.get("Tags", [])}
                    if tags.get(LAYOUT_TAG) != LAYOUT or stack.get("StackStatus") not in COMPLETE_STACK_STATES:
                        continue
                    self._stacks.append({
                        "name": stack["StackName"], "tags": tags,
                        "parameters": {p["ParameterKey"]: p.get("ParameterValue", "")
                                       for p in stack.get("Parameters", [])},
                        "outputs": {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}})
                if not page.get("NextToken"):
                    break
                params["NextToken"] = page["NextToken"]
            self._stacks.sort(key=lambda stack: stack["name"])
        return self._stacks

    def subnets_in_zone(self, zone: str) -> list[str]:
        found = call(self.aws, "ec2", "describe_subnets",
                     Filters=[{"Name": "availability-zone", "Values": [zone]}]).get("Subnets", [])
        return sorted(subnet["SubnetId"] for subnet in found if subnet.get("State", "available") == "available")

    def subnets_of(self, vpc_id: str) -> list[dict[str, Any]]:
        return call(self.aws, "ec2", "describe_subnets",
                    Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]).get("Subnets", [])

    def reservation(self, reservation_id: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none(
            "ec2", "describe_capacity_reservations", "CapacityReservations",
            ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"),
            CapacityReservationIds=[reservation_id]))

    def security_group(self, group_id: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none("ec2", "describe_security_groups", "SecurityGroups",
                                        ("InvalidGroup.NotFound", "InvalidGroupId.Malformed"), GroupIds=[group_id]))

    def key_pair(self, name: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none("ec2", "describe_key_pairs", "KeyPairs", ("InvalidKeyPair.NotFound",),
                                        KeyNames=[name]))

    def file_system(self, file_system_id: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none("fsx", "describe_file_systems", "FileSystems", ("FileSystemNotFound",),
                                        FileSystemIds=[file_system_id]))

    def images(self, name_or_id: str) -> list[dict[str, Any]]:
        if name_or_id.startswith("ami-"):
            return self._ask_or_none("ec2", "describe_images", "Images",
                                     ("InvalidAMIID.NotFound", "InvalidAMIID.Malformed"), ImageIds=[name_or_id])
        return call(self.aws, "ec2", "describe_images",
                    Filters=[{"Name": "name", "Values": [name_or_id]}]).get("Images", [])

    def bucket_status(self, bucket: str, expected_owner: str | None = None) -> str:
        """'ok', 'missing' or 'forbidden' (HeadBucket answers 403 for a bucket of another account)."""
        from botocore.exceptions import ClientError

        owner = {"ExpectedBucketOwner": expected_owner} if expected_owner else {}
        try:
            call(self.aws, "s3", "head_bucket", Bucket=bucket, **owner)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket"):
                return "missing"
            if code == "403":
                return "forbidden"
            raise
        return "ok"

    def volume(self, volume_id: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none("ec2", "describe_volumes", "Volumes",
                                        ("InvalidVolume.NotFound", "InvalidVolume.Malformed"), VolumeIds=[volume_id]))

    def placement_group(self, name: str) -> dict[str, Any] | None:
        return _first(self._ask_or_none("ec2", "describe_placement_groups", "PlacementGroups",
                                        ("InvalidPlacementGroup.Unknown",), GroupNames=[name]))

    def policy_exists(self, arn: str) -> bool:
        return bool(self._ask_or_none("iam", "get_policy", "Policy", ("NoSuchEntity", "InvalidInput"), PolicyArn=arn))

    def secret_exists(self, arn: str) -> bool:
        return bool(self._ask_or_none("secretsmanager", "describe_secret", "ARN", ("ResourceNotFoundException",),
                                      SecretId=arn))

    def object_exists(self, bucket: str, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            call(self.aws, "s3", "head_object", Bucket=bucket, Key=key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code", "") in ("404", "403", "NoSuchKey", "NoSuchBucket"):
                return False
            raise
        return True

    def _ask_or_none(self, service: str, operation: str, key: str, not_found: tuple[str, ...],
                     **params: Any) -> list[dict[str, Any]]:
        from botocore.exceptions import ClientError

        try:
            return call(self.aws, service, operation, **params).get(key, [])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in not_found:
                return []
            raise


def _first(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    return items[0] if items else None


def _error(resolution: Resolution, path: str, message: str, fix: str, value: object = None) -> None:
    resolution.findings.append(error(path, message, fix=fix, value=value))


def _compute_resources(spec: ClusterSpec) -> list[tuple[str, QueueSpec, ComputeSpec]]:
    return [(f"queues[{qi}].compute[{ci}]", queue, compute)
            for qi, queue in enumerate(spec.queues) for ci, compute in enumerate(queue.compute)]


# ----- capacity reservations and Capacity Blocks ------------------------------------------------

def _check_reservations(resolution: Resolution, lookup: _Lookup) -> dict[str, dict[str, Any]]:
    """The usable reservations by compute-resource path; mismatches become findings."""
    usable: dict[str, dict[str, Any]] = {}
    region = lookup.region
    for path, queue, compute in _compute_resources(resolution.spec):
        reservation_id = compute.capacity_reservation_id
        if not reservation_id:
            continue
        field_path = f"{path}.capacity_reservation_id"
        reservation = lookup.reservation(reservation_id)
        if reservation is None:
            _error(resolution, field_path, f"capacity reservation {reservation_id} not found in {region}",
                   "check the id and --region (`aws ec2 describe-capacity-reservations`)", reservation_id)
            continue
        kind = "Capacity Block" if reservation.get("ReservationType") == "capacity-block" else "capacity reservation"
        state = reservation.get("State", "unknown")
        problems = len(resolution.findings)
        if state not in USABLE_RESERVATION_STATES:
            _error(resolution, field_path, f"{kind} {reservation_id} in {region} is {state}",
                   f"use an active or scheduled {kind}; this one can no longer launch instances", reservation_id)
        if reservation.get("InstanceType") != compute.instance_type:
            _error(resolution, field_path,
                   f"{kind} {reservation_id} holds {reservation.get('InstanceType')}, but compute resource "
                   f"{compute.name!r} launches {compute.instance_type}",
                   f"set instance_type to {reservation.get('InstanceType')} or use a reservation for "
                   f"{compute.instance_type}", reservation_id)
        total = int(reservation.get("TotalInstanceCount", 0))
        if total < compute.effective_max_count:
            _error(resolution, field_path,
                   f"{kind} {reservation_id} holds {total} instances, but compute resource {compute.name!r} "
                   f"may launch {compute.effective_max_count} (max_count)",
                   f"set max_count to at most {total}, or reserve more capacity", reservation_id)
        if len(resolution.findings) == problems:
            usable[path] = reservation
    return usable


# ----- subnets ------------------------------------------------------------------------------------

def _choose_network(resolution: Resolution, lookup: _Lookup, reservations: dict[str, dict[str, Any]]) -> None:
    """Where the nodes run: the spec's subnets, a private subnet of the default VPC, or clusterkit's prerequisites
    network (made at apply, or one made earlier and tagged)."""
    spec, region = resolution.spec, lookup.region
    # Only the head node and the queues without their own subnet_ids use spec.subnet_id.
    head = spec.head_node.subnet_id is None
    computes = [(path, queue, compute) for path, queue, compute in _compute_resources(spec) if not queue.subnet_ids]
    if spec.network != NETWORK_CREATE and (spec.subnet_id or not (head or computes)):
        return
    types = sorted({compute.instance_type for _, _, compute in computes}
                   | ({spec.head_node.instance_type} if head else set()))
    zones: set[str] | None = None
    for instance_type in types:
        offered = lookup.azs_offering(instance_type)
        zones = offered if zones is None else zones & offered
    reserved = {reservations[path]["AvailabilityZone"] for path, _, _ in computes if path in reservations}
    if reserved:
        zones = (zones or set()) & reserved
    if not zones:
        where = f" together with reservations in {', '.join(sorted(reserved))}" if reserved else ""
        _error(resolution, "subnet_id", f"no Availability Zone in {region} offers {', '.join(types)}{where}",
               "use another region, or give queues with different instance types their own subnet_ids")
        return
    if spec.network != NETWORK_CREATE:
        problem = _choose_default_vpc_subnet(resolution, lookup, zones, types, [c for _, _, c in computes])
        if problem is None:
            return
        if spec.network == NETWORK_EXISTING:
            _error(resolution, "subnet_id", *problem)
            return
        resolution.findings.append(info("network", f"{problem[0]}: clusterkit makes a network for the cluster "
                                        "(its prerequisites stack)",
                                        fix="pass --subnet-id, or set network: existing, to use your own"))
    _plan_network(resolution, lookup, zones)


def _choose_default_vpc_subnet(resolution: Resolution, lookup: _Lookup, zones: set[str], types: list[str],
                               computes: list[ComputeSpec]) -> tuple[str, str] | None:
    """Choose a subnet of the default VPC; (problem, fix) when none fits."""
    spec, region = resolution.spec, lookup.region
    vpc = lookup.default_vpc()
    if vpc is None:
        return (f"no subnet given and {region} has no default VPC",
                f"pass --subnet-id of a subnet in {', '.join(sorted(zones))}")
    candidates = [subnet for subnet in lookup.subnets_of(vpc["VpcId"])
                  if subnet.get("AvailabilityZone") in zones and subnet.get("State", "available") == "available"]
    if not candidates:
        return (f"the default VPC {vpc['VpcId']} in {region} has no subnet in {', '.join(sorted(zones))}, "
                f"where {', '.join(types)} are offered", "create a subnet in one of those zones and pass --subnet-id")
    # Instances with several network interfaces get no public IP: ParallelCluster wants them in a private subnet.
    private_only = _without_public_ip(lookup, computes)
    if private_only:
        candidates = [subnet for subnet in candidates if not subnet.get("MapPublicIpOnLaunch")]
        if not candidates:
            return (f"{', '.join(private_only)} need a private subnet (they get no public IP), and "
                    f"the default VPC {vpc['VpcId']} in {region} has none in {', '.join(sorted(zones))}",
                    "create a private subnet with a route to a NAT gateway there and pass --subnet-id")
    # The most free addresses, then a stable order: the same account always gets the same choice.
    best = min(candidates, key=lambda s: (-int(s.get("AvailableIpAddressCount", 0)), s["AvailabilityZone"],
                                          s["SubnetId"]))
    spec.subnet_id = best["SubnetId"]
    resolution.chosen.update(subnet_id=best["SubnetId"], availability_zone=best["AvailabilityZone"],
                             vpc_id=vpc["VpcId"])
    return None


def _plan_network(resolution: Resolution, lookup: _Lookup, zones: set[str]) -> None:
    """Use a prerequisites stack made earlier whose zone fits, else plan a new one in the first fitting zone."""
    spec = resolution.spec
    accounting = spec.slurm.accounting
    database = accounting is not None and accounting.pending
    for stack in lookup.prerequisite_stacks():
        outputs = stack["outputs"]
        if outputs.get("AvailabilityZone") in zones and (not database or "DatabaseUri" in outputs):
            _use_stack(resolution, stack)
            return
    zone = sorted(zones)[0]
    parameters = {"AvailabilityZone": zone}
    if database:
        others = [z for z in lookup.zones() if z != zone]
        if not others:
            _error(resolution, "slurm.accounting", f"{lookup.region} has one Availability Zone, and the accounting "
                   "database needs subnets in two", "use another region, or an existing database")
            return
        parameters["DatabaseAvailabilityZone"] = others[0]
    resolution.prerequisites = Prerequisites(network=True, database=database)
    resolution.parameters = parameters
    resolution.stand_in = next(iter(lookup.subnets_in_zone(zone)), None)
    resolution.stack = stack_name(spec.name)
    resolution.chosen.update(availability_zone=zone, prerequisites_stack=f"{resolution.stack} (new)")


@lean_dataclass(frozen=True)
class NetworkChoice:
    """clusterkit's prerequisites network for a cluster: a stack made earlier (`outputs` read from it), or one to make
    (`outputs` None) in `zone`."""

    stack: str
    zone: str
    outputs: dict[str, str] | None = None


def network_for(aws: Aws, instance_types: list[str], cluster: str) -> NetworkChoice | None:
    """A network only (no database) for nodes of these EC2 types, the way a ParallelCluster create chooses one: a
    prerequisites stack made earlier whose zone offers them all, else a new stack in the first zone that does. None
    when no zone of the region offers them all."""
    lookup = _Lookup(aws)
    zones = set(lookup.zones())
    for instance_type in instance_types:
        zones &= lookup.azs_offering(instance_type)
    for stack in lookup.prerequisite_stacks():
        outputs = stack["outputs"]
        if outputs.get("AvailabilityZone") in zones and "PrivateSubnetId" in outputs:
            return NetworkChoice(stack["name"], outputs["AvailabilityZone"], dict(outputs))
    return NetworkChoice(stack_name(cluster), sorted(zones)[0]) if zones else None


def _plan_database(resolution: Resolution, lookup: _Lookup) -> None:
    """`accounting: create` in an existing network: a stack of the database alone, in the head node's VPC."""
    spec = resolution.spec
    accounting = spec.slurm.accounting
    if accounting is None or not accounting.pending or resolution.prerequisites is not None:
        return
    head = lookup.subnet(spec.head_subnet()) if spec.head_subnet() else None
    if head is None:
        return  # the subnet checks say why
    vpc = head["VpcId"]
    for stack in lookup.prerequisite_stacks():
        if stack["parameters"].get("VpcId") == vpc and "DatabaseUri" in stack["outputs"]:
            _use_stack(resolution, stack)
            return
    # Two zones (RDS needs them), private subnets first, the head node's zone first.
    subnets = sorted((s for s in lookup.subnets_of(vpc) if s.get("State", "available") == "available"),
                     key=lambda s: (bool(s.get("MapPublicIpOnLaunch")),
                                    s["AvailabilityZone"] != head["AvailabilityZone"],
                                    s["AvailabilityZone"], s["SubnetId"]))
    chosen: dict[str, str] = {}
    for subnet in subnets:
        chosen.setdefault(subnet["AvailabilityZone"], subnet["SubnetId"])
    if len(chosen) < 2:
        _error(resolution, "slurm.accounting", f"the accounting database needs subnets in two Availability Zones, "
               f"and VPC {vpc} has subnets in {len(chosen)}", "add a subnet in another zone, or name an existing "
               "database (slurm.accounting: {uri, user_name, password_secret_arn}), or set accounting: none")
        return
    resolution.prerequisites = Prerequisites(network=False, database=True)
    resolution.parameters = {"VpcId": vpc, "DatabaseSubnetIds": ",".join(list(chosen.values())[:2])}
    resolution.stack = stack_name(spec.name)
    resolution.chosen.update(prerequisites_stack=f"{resolution.stack} (new)")


def _use_stack(resolution: Resolution, stack: dict[str, Any]) -> None:
    resolution.spec = with_outputs(resolution.spec, stack["outputs"])
    resolution.stack = stack["name"]
    resolution.reused = Prerequisites.held_by(stack["outputs"])
    resolution.chosen.update(prerequisites_stack=f"{stack['name']} (made earlier, reused)")
    if "AvailabilityZone" in stack["outputs"]:
        resolution.chosen["availability_zone"] = stack["outputs"]["AvailabilityZone"]


def _without_public_ip(lookup: _Lookup, computes: list[ComputeSpec]) -> list[str]:
    """The instance types (and why) that launch with several network interfaces, which AWS gives no public
    IP: types with several network cards, and every EFA compute resource (ParallelCluster 3.16 adds an
    EFA-only interface even to single-card types)."""
    reasons = {}
    for compute in computes:
        if lookup.network_cards(compute.instance_type) > 1:
            reasons[compute.instance_type] = f"{compute.instance_type} (several network cards)"
        elif compute.efa_enabled:
            reasons.setdefault(compute.instance_type, f"{compute.instance_type} (EFA)")
    return [reasons[name] for name in sorted(reasons)]


def _check_subnets(resolution: Resolution, lookup: _Lookup, reservations: dict[str, dict[str, Any]]) -> None:
    spec, region = resolution.spec, lookup.region
    head_subnet = spec.head_node.subnet_id or spec.subnet_id
    if head_subnet is None:
        return  # choosing failed and said why
    # Each (field, subnet) once, with every instance type that will launch there.
    needs: dict[tuple[str, str], set[str]] = {}
    private: dict[tuple[str, str], list[ComputeSpec]] = {}  # the compute resources each subnet launches
    head_path = "head_node.subnet_id" if spec.head_node.subnet_id else "subnet_id"
    needs.setdefault((head_path, head_subnet), set()).add(spec.head_node.instance_type)
    for p, pool in enumerate(spec.login_nodes):
        pool_path = f"login_nodes[{p}].subnet_id" if pool.subnet_id else head_path
        needs.setdefault((pool_path, pool.subnet_id or head_subnet), set()).add(pool.instance_type)
    for qi, queue in enumerate(spec.queues):
        paths = ([f"queues[{qi}].subnet_ids[{si}]" for si in range(len(queue.subnet_ids))]
                 if queue.subnet_ids else ["subnet_id"])
        for path, subnet_id in zip(paths, spec.queue_subnets(queue)):
            needs.setdefault((path, subnet_id), set()).update(c.instance_type for c in queue.compute)
            private.setdefault((path, subnet_id), []).extend(queue.compute)
    zone_of: dict[str, str] = {}
    for (path, subnet_id), instance_types in needs.items():
        subnet = _check_subnet(resolution, lookup, path, subnet_id, sorted(instance_types),
                               _without_public_ip(lookup, private.get((path, subnet_id), [])))
        if subnet is not None:
            zone_of[subnet_id] = subnet["AvailabilityZone"]

    for qi, queue in enumerate(spec.queues):
        zones = sorted({zone_of[s] for s in spec.queue_subnets(queue) if s in zone_of})
        for ci, compute in enumerate(queue.compute):
            reservation = reservations.get(f"queues[{qi}].compute[{ci}]")
            if reservation is None or not zones or reservation["AvailabilityZone"] in zones:
                continue
            _error(resolution, f"queues[{qi}].compute[{ci}].capacity_reservation_id",
                   f"capacity reservation {compute.capacity_reservation_id} is in {reservation['AvailabilityZone']}, "
                   f"but queue {queue.name!r} launches in {', '.join(zones)} ({region})",
                   f"use a subnet in {reservation['AvailabilityZone']} (--subnet-id), or leave the subnet open "
                   "to have one chosen there", compute.capacity_reservation_id)


def _check_subnet(resolution: Resolution, lookup: _Lookup, path: str, subnet_id: str,
                  instance_types: list[str], private_only: list[str]) -> dict[str, Any] | None:
    """The subnet, when it exists; a finding for each instance type its Availability Zone lacks, and one
    when it gives public IPs to instances that cannot have one."""
    subnet = lookup.subnet(subnet_id)
    if subnet is None:
        _error(resolution, path, f"subnet {subnet_id} not found in {lookup.region}",
               "check the id and --region (`aws ec2 describe-subnets`)", subnet_id)
        return None
    zone = subnet["AvailabilityZone"]
    if private_only and subnet.get("MapPublicIpOnLaunch"):
        _error(resolution, path, f"subnet {subnet_id} gives public IPs, which {', '.join(private_only)} cannot "
               "have", "use a private subnet with a route to a NAT gateway (a public head node can keep "
               "head_node.subnet_id)", subnet_id)
    for instance_type in instance_types:
        offered = lookup.azs_offering(instance_type)
        if zone in offered:
            continue
        elsewhere = (f"it is offered in {', '.join(sorted(offered))}" if offered
                     else f"no zone of {lookup.region} offers it")
        _error(resolution, path, f"{instance_type} is not offered in {zone}, the zone of subnet {subnet_id}; "
               f"{elsewhere}", "choose a subnet in a zone that offers it", subnet_id)
    return subnet


# ----- key pair, storage, image -------------------------------------------------------------------

def _check_key_pair(resolution: Resolution, lookup: _Lookup) -> None:
    spec, region = resolution.spec, lookup.region
    name = spec.ssh.key_name
    if not name:
        return
    key = lookup.key_pair(name)
    if key is None:
        _error(resolution, "ssh.key_name", f"key pair {name!r} not found in {region}",
               f"create it (`aws ec2 create-key-pair --key-type ed25519 --key-name {name} --region {region}`), "
               "import yours, or pass another --key-name", name)
    elif key.get("KeyType") == "rsa" and spec.os == "ubuntu2204":
        _error(resolution, "ssh.key_name", f"key pair {name!r} is an RSA key, which ubuntu2204 does not accept",
               "use an ed25519 key pair", name)


def _check_security_groups(resolution: Resolution, lookup: _Lookup) -> None:
    for index, group in enumerate(resolution.spec.head_node.additional_security_groups):
        if not lookup.security_group(group):
            _error(resolution, f"head_node.additional_security_groups[{index}]",
                   f"security group {group} not found in {lookup.region}",
                   "check the id and --region (`aws ec2 describe-security-groups`)", group)


def _check_storage(resolution: Resolution, lookup: _Lookup) -> None:
    region = lookup.region
    for index, lustre in enumerate(resolution.spec.storage.lustre):
        path = f"storage.lustre[{index}]"
        if lustre.file_system_id:
            found = lookup.file_system(lustre.file_system_id)
            if found is None:
                _error(resolution, f"{path}.file_system_id",
                       f"FSx file system {lustre.file_system_id} not found in {region}",
                       "check the id and --region (`aws fsx describe-file-systems`)", lustre.file_system_id)
            elif found.get("FileSystemType", "LUSTRE") != "LUSTRE":
                _error(resolution, f"{path}.file_system_id",
                       f"FSx file system {lustre.file_system_id} is {found['FileSystemType']}, not Lustre",
                       "name an FSx for Lustre file system", lustre.file_system_id)
        s3_paths = [(f"{path}.import_path", lustre.import_path), (f"{path}.export_path", lustre.export_path)]
        s3_paths += [(f"{path}.data_repository_associations[{ai}].data_repository_path", a.data_repository_path)
                     for ai, a in enumerate(lustre.data_repository_associations)]
        for field_path, url in s3_paths:
            if url and url.startswith("s3://"):
                _check_bucket(resolution, lookup, field_path, url)


def _check_ebs_zones(resolution: Resolution, lookup: _Lookup) -> None:
    """An existing EBS volume attaches to the head node only in the head node's Availability Zone."""
    spec = resolution.spec
    head = lookup.subnet(spec.head_subnet()) if spec.head_subnet() else None
    for index, ebs in enumerate(spec.storage.ebs):
        if ebs.volume_id is None:
            continue
        volume = lookup.volume(ebs.volume_id)
        path = f"storage.ebs[{index}].volume_id"
        if volume is None:
            _error(resolution, path, f"EBS volume {ebs.volume_id} not found in {lookup.region}",
                   "check the id and --region (`aws ec2 describe-volumes`)", ebs.volume_id)
        elif head is not None and volume["AvailabilityZone"] != head["AvailabilityZone"]:
            _error(resolution, path, f"EBS volume {ebs.volume_id} is in {volume['AvailabilityZone']}, the head node "
                   f"in {head['AvailabilityZone']}: a volume attaches only in its own zone",
                   f"put the head node in a subnet of {volume['AvailabilityZone']} (head_node.subnet_id)",
                   ebs.volume_id)


def _check_bucket(resolution: Resolution, lookup: _Lookup, path: str, url: str) -> None:
    bucket = url[len("s3://"):].split("/", 1)[0]
    status = lookup.bucket_status(bucket)
    if status == "missing":
        _error(resolution, path, f"S3 bucket {bucket!r} does not exist", f"create it (`aws s3 mb s3://{bucket} "
               f"--region {lookup.region}`) or fix the path", url)
    elif status == "forbidden":
        _error(resolution, path, f"S3 bucket {bucket!r} exists but this identity may not read it",
               f"grant s3:ListBucket and s3:GetObject on {bucket}, or use a bucket of this account", url)


def _check_image(resolution: Resolution, lookup: _Lookup) -> None:
    """A custom AMI given by name becomes the id of the newest available image of that name."""
    name_or_id = resolution.spec.image.custom_ami
    if not name_or_id:
        return
    images = [image for image in lookup.images(name_or_id) if image.get("State", "available") == "available"]
    if not images:
        _error(resolution, "image.custom_ami", f"AMI {name_or_id!r} not found in {lookup.region}",
               "AMIs are regional: copy it to this region, or check the name or id (`aws ec2 describe-images`)",
               name_or_id)
        return
    newest = max(images, key=lambda image: image.get("CreationDate", ""))
    resolution.spec.image.custom_ami = newest["ImageId"]
    resolution.chosen["image_id"] = newest["ImageId"]
    spec = resolution.spec
    root = next((m.get("Ebs", {}).get("VolumeSize") for m in newest.get("BlockDeviceMappings", [])
                 if m.get("DeviceName") == newest.get("RootDeviceName")), None)
    sizes = [("head_node.root_volume_gb", spec.head_node.root_volume_gb)]
    sizes += [(f"queues[{q}].root_volume_gb", queue.root_volume_gb) for q, queue in enumerate(spec.queues)]
    for path, size in sizes:
        if root and size is not None and size < root:
            _error(resolution, path, f"a root volume of {size} GiB is smaller than the {root} GiB of AMI "
                   f"{newest['ImageId']} ({name_or_id})", f"use at least {root} GiB", size)
    architecture = newest.get("Architecture")
    node_types = [spec.head_node.instance_type] + [compute.instance_type for _, _, compute in _compute_resources(spec)]
    for instance_type in dict.fromkeys(node_types):
        facts = offerings.table().facts(instance_type)
        if architecture and facts is not None and facts.architecture != architecture:
            _error(resolution, "image.custom_ami", f"AMI {newest['ImageId']} ({name_or_id}) is {architecture}, but "
                   f"{instance_type} runs {facts.architecture} images",
                   f"use a {facts.architecture} AMI, or {architecture} instance types", name_or_id)


def _check_placement_groups(resolution: Resolution, lookup: _Lookup) -> None:
    spec = resolution.spec
    groups = [(f"queues[{q}].placement_group", queue.placement_group) for q, queue in enumerate(spec.queues)]
    groups += [(f"{path}.placement_group", compute.placement_group) for path, _, compute in _compute_resources(spec)]
    for path, group in groups:
        if group is None or group.enabled is False or not (group.name or group.id):
            continue
        # ParallelCluster takes `Id` as another spelling of the name.
        if lookup.placement_group(group.name or group.id) is None:
            _error(resolution, path, f"placement group {group.name or group.id!r} not found in {lookup.region}",
                   "create it (`aws ec2 create-placement-group --strategy cluster`), or leave the name out to have "
                   "ParallelCluster make one", group.name or group.id)


def _check_policies_and_secret(resolution: Resolution, lookup: _Lookup) -> None:
    spec = resolution.spec
    holders = [("head_node.iam", spec.head_node.iam)] + [(f"queues[{q}].iam", queue.iam)
                                                        for q, queue in enumerate(spec.queues)]
    holders += [(f"login_nodes[{p}].iam", pool.iam) for p, pool in enumerate(spec.login_nodes)]
    for path, iam in holders:
        for i, policy in enumerate(iam.effective_policies):
            arn = policy_arn(policy, lookup.region)
            if policy in DEFAULT_NODE_POLICIES:
                continue  # AWS's own, always there
            if not lookup.policy_exists(arn):
                _error(resolution, f"{path}.additional_policies[{i}]", f"IAM policy {arn} not found",
                       "check the policy's name or ARN (`aws iam get-policy --policy-arn ...`)", policy)
    accounting = spec.slurm.accounting
    # A database clusterkit makes (or made) has its secret by construction.
    if accounting is not None and not accounting.create and not lookup.secret_exists(accounting.password_secret_arn):
        # Only a warning: the head node's role may read a secret this identity may not describe.
        resolution.findings.append(warning(
            "slurm.accounting.password_secret_arn", f"secret not found in {lookup.region}, or this "
            "identity may not describe it: without it the head node cannot reach the database",
            fix="check the ARN (`aws secretsmanager describe-secret`)", value="<hidden>"))


# ----- custom action scripts and clusterkit's node scripts -----------------------------------------

def _check_scripts(resolution: Resolution, lookup: _Lookup, account: str) -> None:
    """Name the bucket clusterkit's node scripts go to (it must be this account's), and check that every
    s3:// script the spec names exists: a missing script fails the node's bootstrap."""
    spec = resolution.spec
    if spec.scripts_bucket is None:
        spec.scripts_bucket = DEFAULT_SCRIPTS_BUCKET.format(account=account, region=lookup.region)
        resolution.chosen["scripts_bucket"] = spec.scripts_bucket
    config = render_config(spec)
    if uploads(config):
        status = lookup.bucket_status(spec.scripts_bucket, expected_owner=account)
        if status == "missing":
            resolution.create_scripts_bucket = True
        elif status == "forbidden":
            _error(resolution, "scripts_bucket", f"S3 bucket {spec.scripts_bucket!r} belongs to another account, or "
                   "this identity may not use it", "set scripts_bucket to a bucket of this account",
                   spec.scripts_bucket)
    own = set(uploads(config))
    for path, url in _script_urls(spec):
        if url in own or not url.startswith("s3://"):
            continue
        bucket, _, key = url[len("s3://"):].partition("/")
        if not lookup.object_exists(bucket, key):
            _error(resolution, path, f"custom action script {url} not found (or not readable)",
                   f"upload it (`aws s3 cp SCRIPT {url}`), or fix the URL", url)


def _script_urls(spec: ClusterSpec) -> list[tuple[str, str]]:
    actions = [("head_node.custom_actions", spec.head_node.custom_actions)]
    actions += [(f"queues[{q}].custom_actions", queue.custom_actions) for q, queue in enumerate(spec.queues)]
    return [(f"{path}.{event}[{s}].script", script.script) for path, custom in actions if custom is not None
            for event in ("on_node_start", "on_node_configured", "on_node_updated")
            for s, script in enumerate(getattr(custom, event))]
