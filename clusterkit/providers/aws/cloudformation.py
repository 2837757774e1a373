"""Follow a CloudFormation stack until an operation ends, showing progress; explain how it failed.

(A CloudFormation stack: AWS's kind. The software stack on the nodes is `clusterkit.stack`.)

ParallelCluster creates, updates and deletes a cluster through one CloudFormation stack named after
the cluster. `follow_stack` polls it (describe_stacks, list_stack_resources, describe_stack_events),
reports "resources done / total, elapsed", and on failure raises StackFailed naming the first
failing resource, AWS's reason and, where we know one, a hint.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.base import Progress, quiet

# Reasons AWS gives, and what to do about them (first match wins, case ignored). The patterns stay text until
# a failure needs them: compiled at import, they cost every CLI start a millisecond.
FAILURE_HINTS: tuple[tuple[str, str], ...] = (
    (r"WaitCondition.*(timed out|timeout)|Failed to receive \d+ resource signal",
     "the head node did not finish its setup: read /var/log/cfn-init.log and /var/log/chef-client.log on it "
     "(`pcluster export-cluster-logs`); a failing custom action or a subnet without a route to the internet "
     "(NAT or public IP) is the usual cause"),
    (r"InsufficientInstanceCapacity|insufficient capacity",
     "AWS has no free capacity of this type in this zone now: try another zone (--subnet-id), a capacity "
     "reservation or Capacity Block, or later"),
    (r"VcpuLimitExceeded|more vCPU capacity",
     "raise the On-Demand vCPU quota of this instance family in Service Quotas (quota names start with "
     "'Running On-Demand')"),
    (r"Unsupported.*(instance|configuration)|not supported in your requested Availability Zone",
     "this zone does not offer the instance type: choose a subnet in a zone that does"),
    (r"CapacityReservation|Capacity Block",
     "check that the reservation is active, in the subnet's zone, for this instance type and large enough"),
    (r"not authorized to perform|AccessDenied|UnauthorizedOperation",
     "the identity creating the cluster lacks a permission: see ParallelCluster's IAM policies"),
    (r"LimitExceeded|limit exceeded|quota",
     "an account quota is reached (VPC, EIP, FSx, ...): raise it in Service Quotas or free some"),
    (r"already exists",
     "a resource with this name is left from an earlier cluster: delete it or choose another cluster name"),
)

_CASCADED = ("Resource creation cancelled", "Resource update cancelled",
             "The following resource(s) failed to create", "The following resource(s) failed to update",
             "The following resource(s) failed to delete")


@lean_dataclass(frozen=True)
class StackFailure:
    resource: str
    resource_type: str
    status: str
    reason: str

    @property
    def hint(self) -> str | None:
        return hint_for(self.reason)


class StackFailed(ClusterkitError):
    """The stack operation ended in failure; `failure` is its first failing resource, when known."""

    def __init__(self, message: str, failure: StackFailure | None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.failure = failure


def hint_for(reason: str) -> str | None:
    for pattern, hint in FAILURE_HINTS:
        if re.search(pattern, reason, re.IGNORECASE):
            return hint
    return None


def first_failure(events: list[dict[str, Any]], stack_name: str) -> StackFailure | None:
    """The earliest resource failure with a reason of its own (not 'cancelled because another failed')."""
    failed = [event for event in sorted(events, key=lambda e: str(e.get("Timestamp", "")))
              if str(event.get("ResourceStatus", "")).endswith("_FAILED")]
    own = [e for e in failed if not str(e.get("ResourceStatusReason", "")).startswith(_CASCADED)]
    resources = [e for e in own if e.get("LogicalResourceId") != stack_name] or own or failed
    if not resources:
        return None
    event = resources[0]
    return StackFailure(resource=event.get("LogicalResourceId", "?"), resource_type=event.get("ResourceType", "?"),
                        status=event.get("ResourceStatus", "?"), reason=event.get("ResourceStatusReason", "") or "")


def _is_failed(status: str, operation: str) -> bool:
    if operation == "CREATE":
        return status == "CREATE_FAILED" or status.startswith("ROLLBACK_") or status == "DELETE_COMPLETE"
    if operation == "UPDATE":
        return status == "UPDATE_FAILED" or status.startswith("UPDATE_ROLLBACK_")
    return status == "DELETE_FAILED"


@lean_dataclass(frozen=True)
class StackResult:
    stack_name: str
    status: str
    resources_done: int
    resources_total: int
    seconds: float


def follow_stack(cloudformation: Any, stack: str, operation: str = "CREATE", progress: Progress = quiet,
                 poll_seconds: float = 15.0, timeout_seconds: float = 3 * 3600,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> StackResult:
    """Poll the stack (name or id) until `operation` (CREATE, UPDATE or DELETE) completes or fails.

    A deleted stack that CloudFormation no longer knows by name counts as DELETE_COMPLETE.
    """
    from botocore.exceptions import ClientError

    started = clock()
    last_report = None
    name = _stack_name(stack)
    while True:
        try:
            status = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        except ClientError as error:
            if operation == "DELETE" and "does not exist" in str(error):
                return StackResult(name, "DELETE_COMPLETE", 0, 0, round(clock() - started, 1))
            raise
        done, total = _resource_counts(cloudformation, stack, operation)
        elapsed = clock() - started
        if status == f"{operation}_COMPLETE":
            progress(f"{name}: {status} ({_duration(elapsed)})")
            return StackResult(name, status, done, total, round(elapsed, 1))
        if _is_failed(status, operation):
            raise _failure(cloudformation, stack, name, operation, status)
        report = (status, done, total)
        if report != last_report:
            progress(f"{name}: {status}, {done}/{total} resources, {_duration(elapsed)}")
            last_report = report
        if elapsed > timeout_seconds:
            raise ClusterkitError(f"stack {name} is still {status} after {_duration(elapsed)}",
                                  fix="follow it in the CloudFormation console, or run describe-cluster later")
        sleep(poll_seconds)


def _resource_counts(cloudformation: Any, stack: str, operation: str) -> tuple[int, int]:
    resources, token = [], None
    while True:
        page = cloudformation.list_stack_resources(StackName=stack, **({"NextToken": token} if token else {}))
        resources += page.get("StackResourceSummaries", [])
        token = page.get("NextToken")
        if not token:
            break
    finished = (f"{operation}_COMPLETE",) if operation != "UPDATE" else ("UPDATE_COMPLETE", "CREATE_COMPLETE")
    done = sum(1 for r in resources if r.get("ResourceStatus") in finished)
    return done, len(resources)


def _stack_events(cloudformation: Any, stack: str) -> list[dict[str, Any]]:
    events, token = [], None
    while True:
        page = cloudformation.describe_stack_events(StackName=stack, **({"NextToken": token} if token else {}))
        events += page.get("StackEvents", [])
        token = page.get("NextToken")
        if not token:
            return events


def _stack_name(stack: str) -> str:
    """The name in a stack id (arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/UUID), or the name itself."""
    return stack.split("/")[1] if stack.startswith("arn:") and stack.count("/") >= 2 else stack


def _failure(cloudformation: Any, stack: str, name: str, operation: str, status: str) -> StackFailed:
    failure = first_failure(_stack_events(cloudformation, stack), name)
    if failure is None:
        return StackFailed(f"stack {name}: {operation.lower()} failed ({status})", None,
                           fix="see the stack's events in the CloudFormation console")
    return StackFailed(
        f"stack {name}: {operation.lower()} failed ({status}) at {failure.resource} ({failure.resource_type}): "
        f"{failure.reason or failure.status}",
        failure, fix=failure.hint)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"
