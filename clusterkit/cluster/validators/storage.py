"""Shared storage (FSx for Lustre and its data repositories, EFS, FSx for OpenZFS, EBS) and root volumes:
settings, sizes, deletion policies, counts, names, and queues that cannot reach a new file system."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec, LustreSpec
from clusterkit.cluster.validators.common import duplicates, matches, storage_entries, suggest
from clusterkit.findings import Finding, error, warning

LUSTRE_DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
LUSTRE_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
LUSTRE_AUTO_IMPORT_POLICIES = ("NEW", "NEW_CHANGED", "NEW_CHANGED_DELETED")
IMPORTED_FILE_CHUNK_MIB = (1, 512_000)
DRA_POLICY_EVENTS = ("NEW", "CHANGED", "DELETED")
MAX_DATA_REPOSITORY_ASSOCIATIONS = 8
FSX_LUSTRE_ID_RE = r"fs-[0-9a-z]{17}"
EFS_ID_RE = r"fs-[0-9a-z]{8}|fs-[0-9a-z]{17}"
FSX_VOLUME_ID_RE = r"fsvol-[0-9a-f]{17}"
EBS_VOLUME_ID_RE = r"vol-[0-9a-z]{8}|vol-[0-9a-z]{17}"
# Size bounds in GiB per EBS volume type.
EBS_SIZES = {"standard": (1, 1024), "io1": (4, 16_384), "io2": (4, 65_536), "gp2": (1, 16_384),
             "gp3": (1, 16_384), "st1": (500, 16_384), "sc1": (500, 16_384)}
EBS_DEFAULT_SIZE_GIB = 40  # ParallelCluster's, for a new shared volume without a size
ROOT_VOLUME_TYPE = "gp3"
AMI_ROOT_VOLUME_GIB = 45  # ParallelCluster 3.16's official AMIs
EFS_THROUGHPUT_MODES = ("provisioned", "bursting")
EFS_PROVISIONED_MIBPS = (1, 1024)
DELETION_POLICIES = ("Delete", "Retain")
EBS_DELETION_POLICIES = ("Delete", "Retain", "Snapshot")
MAX_NEW_FSX = MAX_NEW_EFS = 1
MAX_EXISTING_FSX = MAX_EXISTING_EFS = 20
MAX_EBS = 5
STORAGE_NAME_MAX = 30
# Storage names become tag values of ParallelCluster's own resources: its stricter rule.
STORAGE_NAME_RE = r"[\w+\-=.:@/]{1,256}"


def _chunk_size_findings(path: str, size: int | None) -> Iterator[Finding]:
    low, high = IMPORTED_FILE_CHUNK_MIB
    if size is not None and not low <= size <= high:
        yield error(path, f"imported_file_chunk_size is {low} to {high:,} MiB", "e.g. 1024", size)


def _lustre_new_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    deployment = fsx.effective_deployment_type
    if deployment not in LUSTRE_DEPLOYMENT_TYPES:
        yield error(f"{path}.deployment_type", f"unknown FSx for Lustre deployment type {deployment!r}",
                    suggest(deployment, LUSTRE_DEPLOYMENT_TYPES), deployment)
        return
    capacity = fsx.effective_capacity_gib
    if deployment == "SCRATCH_1":
        ok, allowed = capacity in (1200, 2400) or (capacity > 0 and capacity % 3600 == 0), "1200, 2400 or n × 3600"
    else:
        ok, allowed = capacity == 1200 or (capacity > 0 and capacity % 2400 == 0), "1200 or n × 2400"
    if not ok:
        yield error(f"{path}.storage_capacity_gib", f"{deployment} capacity must be {allowed} GiB",
                    f"use {allowed} GiB, e.g. 1200 or 4800", capacity)
    throughput = fsx.per_unit_storage_throughput
    if deployment in LUSTRE_THROUGHPUT:
        allowed_throughput = LUSTRE_THROUGHPUT[deployment]
        if throughput is not None and throughput not in allowed_throughput:
            yield error(f"{path}.per_unit_storage_throughput", f"{deployment} takes "
                        f"{', '.join(map(str, allowed_throughput))} MB/s per TiB",
                        f"use one of {', '.join(map(str, allowed_throughput))}", throughput)
    elif throughput is not None:
        yield error(f"{path}.per_unit_storage_throughput", f"{deployment} has no per-unit throughput setting",
                    "remove per_unit_storage_throughput, or use PERSISTENT_2", throughput)
    if fsx.data_compression is not None and fsx.data_compression != "LZ4":
        yield error(f"{path}.data_compression", "FSx for Lustre compresses only with LZ4", "set data_compression: LZ4",
                    fsx.data_compression)
    if fsx.import_path is None:
        for key in ("export_path", "auto_import_policy", "imported_file_chunk_size"):
            if getattr(fsx, key) is not None:
                yield error(f"{path}.{key}", f"{key} needs import_path", "set import_path: s3://BUCKET/PREFIX, or "
                            "use data_repository_associations", getattr(fsx, key))
    yield from _chunk_size_findings(f"{path}.imported_file_chunk_size", fsx.imported_file_chunk_size)
    if fsx.auto_import_policy is not None and fsx.auto_import_policy not in LUSTRE_AUTO_IMPORT_POLICIES:
        yield error(f"{path}.auto_import_policy", f"unknown auto import policy {fsx.auto_import_policy!r}",
                    suggest(fsx.auto_import_policy, LUSTRE_AUTO_IMPORT_POLICIES), fsx.auto_import_policy)
    for key in ("import_path", "export_path"):
        value = getattr(fsx, key)
        if value is not None and not value.startswith("s3://"):
            yield error(f"{path}.{key}", f"{key} must be an S3 URL", "write it as s3://BUCKET/PREFIX", value)
    yield from _dra_findings(path, fsx)


def _dra_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    associations = fsx.data_repository_associations
    if not associations:
        return
    if len(associations) > MAX_DATA_REPOSITORY_ASSOCIATIONS:
        yield error(f"{path}.data_repository_associations", f"{len(associations)} data repository associations; "
                    f"at most {MAX_DATA_REPOSITORY_ASSOCIATIONS}", "merge S3 prefixes", len(associations))
    for key in ("import_path", "export_path"):
        if getattr(fsx, key) is not None:
            yield error(f"{path}.{key}", f"{key} cannot be combined with data_repository_associations",
                        f"remove {key}; describe the S3 link as a data repository association", getattr(fsx, key))
    for d, association in enumerate(associations):
        dra_path = f"{path}.data_repository_associations[{d}]"
        if not association.data_repository_path.startswith("s3://"):
            yield error(f"{dra_path}.data_repository_path", "must be an S3 URL", "write it as s3://BUCKET/PREFIX",
                        association.data_repository_path)
        if not association.file_system_path.startswith("/"):
            yield warning(f"{dra_path}.file_system_path", "a path inside the file system starts with '/'",
                          f"write /{association.file_system_path}", association.file_system_path)
        yield from _chunk_size_findings(f"{dra_path}.imported_file_chunk_size", association.imported_file_chunk_size)
        for key in ("auto_import_policy", "auto_export_policy"):
            for event in getattr(association, key):
                if event not in DRA_POLICY_EVENTS:
                    yield error(f"{dra_path}.{key}", f"unknown event {event!r}", suggest(event, DRA_POLICY_EVENTS),
                                event)
    names = Counter(a.name for a in associations)
    for d, association in enumerate(associations):
        if names[association.name] > 1:
            yield warning(f"{path}.data_repository_associations[{d}].name", f"two associations are named "
                          f"{association.name!r}: a cluster update cannot tell them apart", "give each its own name",
                          association.name)


_LUSTRE_CREATION_FIELDS = ("deployment_type", "storage_capacity_gib", "per_unit_storage_throughput",
                           "data_compression", "import_path", "export_path", "auto_import_policy",
                           "imported_file_chunk_size", "deletion_policy")


def lustre_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, fsx in enumerate(spec.storage.lustre):
        path = f"storage.lustre[{i}]"
        if fsx.is_new:
            yield from _lustre_new_findings(path, fsx)
            continue
        if not matches(FSX_LUSTRE_ID_RE, fsx.file_system_id or ""):
            yield error(f"{path}.file_system_id", "FSx file system ids look like fs-<17 characters>",
                        "copy the id from the FSx console", fsx.file_system_id)
        for key in _LUSTRE_CREATION_FIELDS:
            if getattr(fsx, key) is not None:
                yield error(f"{path}.{key}", f"{key} only applies to a new file system, not to file_system_id",
                            f"remove {key}", getattr(fsx, key))
        if fsx.data_repository_associations:
            yield error(f"{path}.data_repository_associations", "data repository associations only apply to a "
                        "new file system", "manage them on the existing file system",
                        len(fsx.data_repository_associations))


def efs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    low, high = EFS_PROVISIONED_MIBPS
    for i, efs in enumerate(spec.storage.efs):
        path = f"storage.efs[{i}]"
        if not efs.is_new:
            if not matches(EFS_ID_RE, efs.file_system_id or ""):
                yield error(f"{path}.file_system_id", "EFS ids look like fs-<8 or 17 characters>",
                            "copy the id from the EFS console", efs.file_system_id)
            for key in ("throughput_mode", "provisioned_throughput", "deletion_policy"):
                if getattr(efs, key) is not None:
                    yield error(f"{path}.{key}", f"{key} only applies to a new file system", f"remove {key}",
                                getattr(efs, key))
            continue
        mode, throughput = efs.throughput_mode, efs.provisioned_throughput
        if mode is not None and mode not in EFS_THROUGHPUT_MODES:
            yield error(f"{path}.throughput_mode", f"unknown EFS throughput mode {mode!r}",
                        suggest(mode, EFS_THROUGHPUT_MODES), mode)
        elif mode == "provisioned" and throughput is None:
            yield error(f"{path}.provisioned_throughput", "throughput_mode provisioned needs provisioned_throughput",
                        f"set provisioned_throughput in MiB/s ({low}-{high})")
        elif mode != "provisioned" and throughput is not None:
            yield error(f"{path}.provisioned_throughput", "provisioned_throughput needs throughput_mode: provisioned",
                        "set throughput_mode: provisioned, or remove provisioned_throughput", throughput)
        if throughput is not None and not low <= throughput <= high:
            yield error(f"{path}.provisioned_throughput", f"provisioned_throughput is {low} to {high} MiB/s",
                        "e.g. 128", throughput)


def _ebs_size_findings(path: str, volume_type: str, size: int, what: str) -> Iterator[Finding]:
    if volume_type not in EBS_SIZES:
        return
    low, high = EBS_SIZES[volume_type]
    if not low <= size <= high:
        yield error(path, f"{what} {volume_type} volume of {size} GiB; {volume_type} volumes are {low} to "
                    f"{high:,} GiB", f"give a size from {low} to {high:,} GiB", size)


def openzfs_and_ebs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, volume in enumerate(spec.storage.openzfs):
        if not matches(FSX_VOLUME_ID_RE, volume.volume_id):
            yield error(f"storage.openzfs[{i}].volume_id", "FSx volume ids look like fsvol-<17 hex digits>",
                        "copy the volume id from the FSx console", volume.volume_id)
    for i, ebs in enumerate(spec.storage.ebs):
        path = f"storage.ebs[{i}]"
        if ebs.volume_type not in EBS_SIZES:
            yield error(f"{path}.volume_type", f"unknown EBS volume type {ebs.volume_type!r}",
                        suggest(ebs.volume_type, EBS_SIZES), ebs.volume_type)
        if not ebs.is_new:
            if not matches(EBS_VOLUME_ID_RE, ebs.volume_id or ""):
                yield error(f"{path}.volume_id", "EBS volume ids look like vol-<17 characters>",
                            "copy the id from the EC2 console", ebs.volume_id)
            for key in ("size_gib", "deletion_policy"):
                if getattr(ebs, key) is not None:
                    yield warning(f"{path}.{key}", f"{key} is ignored for an existing volume (volume_id)",
                                  f"remove {key}", getattr(ebs, key))
        elif ebs.size_gib is None:
            yield from _ebs_size_findings(f"{path}.size_gib", ebs.volume_type, EBS_DEFAULT_SIZE_GIB,
                                          "no size_gib gives a default")
        else:
            yield from _ebs_size_findings(f"{path}.size_gib", ebs.volume_type, ebs.size_gib, "a")


def deletion_policies(spec: ClusterSpec) -> Iterator[Finding]:
    entries = [(f"storage.lustre[{i}]", s.deletion_policy, DELETION_POLICIES)
               for i, s in enumerate(spec.storage.lustre)]
    entries += [(f"storage.efs[{i}]", s.deletion_policy, DELETION_POLICIES) for i, s in enumerate(spec.storage.efs)]
    entries += [(f"storage.ebs[{i}]", s.deletion_policy, EBS_DELETION_POLICIES)
                for i, s in enumerate(spec.storage.ebs)]
    for path, policy, allowed in entries:
        if policy is not None and policy not in allowed:
            yield error(f"{path}.deletion_policy", f"unknown deletion policy {policy!r}", suggest(policy, allowed),
                        policy)


def storage_counts(spec: ClusterSpec) -> Iterator[Finding]:
    storage = spec.storage
    new_fsx = sum(1 for fsx in storage.lustre if fsx.is_new)
    existing_fsx = len(storage.lustre) - new_fsx + len(storage.openzfs)
    new_efs = sum(1 for efs in storage.efs if efs.is_new)
    existing_efs = len(storage.efs) - new_efs
    limits = (
        ("storage.lustre", new_fsx, MAX_NEW_FSX, "new FSx file systems", "mount the others by file_system_id"),
        ("storage.lustre", existing_fsx, MAX_EXISTING_FSX, "existing FSx file systems and volumes", "mount fewer"),
        ("storage.efs", new_efs, MAX_NEW_EFS, "new EFS file systems", "mount the others by file_system_id"),
        ("storage.efs", existing_efs, MAX_EXISTING_EFS, "existing EFS file systems", "mount fewer"),
        ("storage.ebs", len(storage.ebs), MAX_EBS, "EBS volumes", "use fewer, larger volumes"),
    )
    for path, count, limit, what, fix in limits:
        if count > limit:
            yield error(path, f"{count} {what}; at most {limit} allowed", fix, count)


def storage_names(spec: ClusterSpec) -> Iterator[Finding]:
    entries = storage_entries(spec)
    for path, name, _ in entries:
        if len(name) > STORAGE_NAME_MAX:
            yield error(f"{path}.name", f"storage name is {len(name)} characters; at most {STORAGE_NAME_MAX}",
                        f"shorten it to {STORAGE_NAME_MAX} characters", name)
        if name == "default":
            yield error(f"{path}.name", "'default' is reserved and cannot be a storage name", "pick another name",
                        name)
        if not matches(STORAGE_NAME_RE, name):
            yield error(f"{path}.name", "storage names hold letters, digits and + - = . _ : @ / only",
                        "e.g. 'fsx' or 'home'", name)
    yield from duplicates([name for _, name, _ in entries], lambda i: f"{entries[i][0]}.name", "storage")


def managed_storage_subnets(spec: ClusterSpec) -> Iterator[Finding]:
    """ParallelCluster creates FSx for Lustre in one Availability Zone: not with queues in several."""
    new_lustre = [i for i, fsx in enumerate(spec.storage.lustre) if fsx.is_new]
    if not new_lustre:
        return
    for q, queue in enumerate(spec.queues):
        if len(spec.queue_subnets(queue)) > 1:
            yield error(f"queues[{q}].subnet_ids", "a queue in several subnets cannot reach the FSx for Lustre "
                        f"file system the cluster creates (storage.lustre[{new_lustre[0]}], one Availability Zone)",
                        "give the queue one subnet, or mount an existing file system by file_system_id",
                        spec.queue_subnets(queue))


def volume_sizes(spec: ClusterSpec) -> Iterator[Finding]:
    sizes = [("head_node.root_volume_gb", spec.head_node.root_volume_gb)]
    sizes += [(f"queues[{q}].root_volume_gb", queue.root_volume_gb) for q, queue in enumerate(spec.queues)]
    for path, size in sizes:
        if size is None:
            continue
        if size < AMI_ROOT_VOLUME_GIB and not spec.image.custom_ami:
            yield error(path, f"a root volume of {size} GiB is smaller than the image's ({AMI_ROOT_VOLUME_GIB} GiB "
                        "for ParallelCluster 3.16's AMIs)", f"use at least {AMI_ROOT_VOLUME_GIB} GiB", size)
        else:
            yield from _ebs_size_findings(path, ROOT_VOLUME_TYPE, size, "a root")
