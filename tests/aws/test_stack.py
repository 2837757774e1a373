"""Following a CloudFormation stack (moto), with states and events injected where moto finishes at once."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from clusterkit.providers.aws import Aws
from clusterkit.providers.aws.cloudformation import StackFailed, first_failure, follow_stack, hint_for

from .conftest import answer
from .fake_backend import TEMPLATE

STACK = "train"


def _event(minute: int, resource: str, resource_type: str, status: str, reason: str = "") -> dict[str, Any]:
    return {"StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/train/1", "EventId": f"e{minute}",
            "StackName": STACK, "LogicalResourceId": resource, "ResourceType": resource_type,
            "Timestamp": dt.datetime(2026, 1, 1, 12, minute, tzinfo=dt.timezone.utc), "ResourceStatus": status,
            "ResourceStatusReason": reason}


HEAD_NODE_TIMEOUT = [  # newest first, as CloudFormation returns them
    _event(40, STACK, "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS",
           "The following resource(s) failed to create: [HeadNodeWaitCondition]."),
    _event(35, "ComputeFleet", "AWS::CloudFormation::Stack", "CREATE_FAILED", "Resource creation cancelled"),
    _event(34, "HeadNodeWaitCondition", "AWS::CloudFormation::WaitCondition", "CREATE_FAILED",
           "Failed to receive 1 resource signal(s) within the specified duration"),
    _event(5, "HeadNode", "AWS::EC2::Instance", "CREATE_COMPLETE"),
    _event(1, STACK, "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated"),
]


def _statuses(cloudformation: Any, *statuses: str) -> None:
    """describe_stacks answers these statuses in turn (the last one from then on)."""
    remaining = list(statuses)

    def respond() -> dict[str, Any]:
        status = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return {"Stacks": [{"StackName": STACK, "StackStatus": status,
                            "CreationTime": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}]}

    answer(cloudformation, "DescribeStacks", respond)


def test_a_stack_that_completes_reports_progress(aws: Aws) -> None:
    cloudformation = aws.client("cloudformation")
    stack_id = cloudformation.create_stack(StackName=STACK, TemplateBody=TEMPLATE)["StackId"]
    messages: list[str] = []
    result = follow_stack(cloudformation, stack_id, "CREATE", messages.append, sleep=lambda _: None)
    assert result.status == "CREATE_COMPLETE" and (result.resources_done, result.resources_total) == (2, 2)
    assert messages[-1].startswith(f"{STACK}: CREATE_COMPLETE (")


def test_progress_counts_resources_and_elapsed_time(aws: Aws) -> None:
    cloudformation = aws.client("cloudformation")
    cloudformation.create_stack(StackName=STACK, TemplateBody=TEMPLATE)
    _statuses(cloudformation, "CREATE_IN_PROGRESS", "CREATE_IN_PROGRESS", "CREATE_COMPLETE")
    clock = iter(range(0, 1000, 30))
    messages: list[str] = []
    follow_stack(cloudformation, STACK, "CREATE", messages.append, sleep=lambda _: None, clock=lambda: next(clock))
    assert messages == ["train: CREATE_IN_PROGRESS, 2/2 resources, 30s", "train: CREATE_COMPLETE (1m30s)"]


def test_a_failed_stack_names_the_first_failing_resource_its_reason_and_a_hint(aws: Aws) -> None:
    cloudformation = aws.client("cloudformation")
    cloudformation.create_stack(StackName=STACK, TemplateBody=TEMPLATE)
    _statuses(cloudformation, "CREATE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS")
    answer(cloudformation, "DescribeStackEvents", lambda: {"StackEvents": HEAD_NODE_TIMEOUT})
    with pytest.raises(StackFailed) as raised:
        follow_stack(cloudformation, STACK, "CREATE", sleep=lambda _: None)
    failed = raised.value
    assert failed.failure.resource == "HeadNodeWaitCondition"
    assert failed.message == ("stack train: create failed (ROLLBACK_IN_PROGRESS) at HeadNodeWaitCondition "
                              "(AWS::CloudFormation::WaitCondition): Failed to receive 1 resource signal(s) within "
                              "the specified duration")
    assert "head node did not finish its setup" in failed.fix


def test_a_deleted_stack_counts_as_deleted(aws: Aws) -> None:
    cloudformation = aws.client("cloudformation")
    cloudformation.create_stack(StackName=STACK, TemplateBody=TEMPLATE)
    cloudformation.delete_stack(StackName=STACK)
    assert follow_stack(cloudformation, STACK, "DELETE", sleep=lambda _: None).status == "DELETE_COMPLETE"


def test_a_stack_that_takes_too_long(aws: Aws) -> None:
    cloudformation = aws.client("cloudformation")
    cloudformation.create_stack(StackName=STACK, TemplateBody=TEMPLATE)
    _statuses(cloudformation, "CREATE_IN_PROGRESS")
    clock = iter(range(0, 10**6, 600))
    with pytest.raises(Exception, match="still CREATE_IN_PROGRESS after"):
        follow_stack(cloudformation, STACK, "CREATE", sleep=lambda _: None, clock=lambda: next(clock),
                     timeout_seconds=3600)


@pytest.mark.parametrize(("reason", "expected"), [
    ("We currently do not have sufficient p4de.24xlarge capacity (InsufficientInstanceCapacity)", "another zone"),
    ("You have requested more vCPU capacity than your current vCPU limit of 0 allows", "vCPU quota"),
    ("Something nobody has seen before", None),
])
def test_hints_for_known_reasons(reason: str, expected: str | None) -> None:
    hint = hint_for(reason)
    assert (hint is None) if expected is None else (expected in hint)


def test_first_failure_skips_cancelled_resources() -> None:
    events = [_event(3, "Fleet", "AWS::EC2::LaunchTemplate", "CREATE_FAILED", "Resource creation cancelled"),
              _event(2, "Fsx", "AWS::FSx::FileSystem", "CREATE_FAILED", "LimitExceeded: file system quota")]
    assert first_failure(events, STACK).resource == "Fsx"
