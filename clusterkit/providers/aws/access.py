"""Talking to AWS: one boto3 session per region, and AWS's refusals turned into one clear line each.

Messages name the operation, the region and the missing permission; they never include keys or
tokens (botocore's own messages for credential problems are not repeated either).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError

if TYPE_CHECKING:
    import boto3

# "User: arn:aws:iam::1:user/bob is not authorized to perform: ec2:DescribeSubnets on resource ..."
_DENIED_ACTION = re.compile(r"not authorized to perform:?\s*([a-z0-9-]+:[A-Za-z0-9*]+)")
_EXPIRED = {"ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"}
_INVALID_CREDENTIALS = {"InvalidClientTokenId", "SignatureDoesNotMatch", "AuthFailure", "UnrecognizedClientException",
                        "InvalidAccessKeyId"}
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden"}


class AccessProblem(ClusterkitError):
    """AWS refused the caller: no credentials, expired or invalid ones, or a missing permission."""


class Aws:
    """A boto3 session bound to one region, with one client per service (tests reach the clients' events)."""

    def __init__(self, region: str, session: boto3.Session | None = None) -> None:
        if session is None:
            import boto3  # lazy: keep CLI start fast

            session = boto3.Session(region_name=region)
        self.region = region
        self.session = session
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.region)
        return self._clients[service]


def call(aws: Aws, service: str, operation: str, **params: Any) -> dict[str, Any]:
    """`client.operation(**params)`; access problems become AccessProblem, other ClientErrors pass through."""
    try:
        return getattr(aws.client(service), operation)(**params)
    except Exception as error:
        problem = access_problem(error, aws.region)
        if problem is not None:
            raise problem from None
        raise


def access_problem(error: BaseException, region: str) -> AccessProblem | None:
    """The one-line explanation of a credentials, permission or connection error; None for anything else."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
        TokenRetrievalError,
    )

    if isinstance(error, NoCredentialsError):
        return AccessProblem("no AWS credentials found",
                             fix="run `aws configure` or `aws sso login`, or set AWS_PROFILE")
    if isinstance(error, PartialCredentialsError):
        return AccessProblem("incomplete AWS credentials (a key without its secret, or the reverse)",
                             fix="check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile")
    if isinstance(error, ProfileNotFound):
        return AccessProblem(f"AWS profile {error.kwargs.get('profile')!r} not found",
                             fix="see `aws configure list-profiles`, or unset AWS_PROFILE")
    if isinstance(error, TokenRetrievalError):
        return AccessProblem("the AWS SSO session has expired", fix="run `aws sso login`")
    if isinstance(error, NoRegionError):
        return AccessProblem("no AWS region given", fix="pass --region or set AWS_DEFAULT_REGION")
    if isinstance(error, EndpointConnectionError):
        return AccessProblem(f"cannot reach AWS in region {region}",
                             fix="check the network, proxy settings and the region name")
    if not isinstance(error, ClientError):
        return None
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "") or ""
    operation = getattr(error, "operation_name", "") or "the call"
    if code in _EXPIRED:
        return AccessProblem("the AWS session token has expired",
                             fix="refresh the credentials (`aws sso login`, or new temporary keys) and retry")
    if code in _INVALID_CREDENTIALS:
        return AccessProblem("AWS does not accept these credentials (unknown key or wrong secret)",
                             fix="check the access key, secret and profile in use (`aws sts get-caller-identity`)")
    if code in _DENIED or code.endswith("AccessDenied"):
        return AccessProblem(denied_message(message, operation, region),
                             fix=f"grant {denied_action(message) or operation} to this identity in IAM")
    return None


def denied_action(message: str) -> str | None:
    """The IAM action AWS names in an access-denied message, e.g. `ec2:DescribeSubnets`."""
    match = _DENIED_ACTION.search(message)
    return match.group(1) if match else None


def denied_message(message: str, operation: str, region: str) -> str:
    action = denied_action(message)
    if action:
        return f"permission denied in {region}: this identity may not call {action}"
    return f"permission denied in {region} for {operation}"


def check_caller(aws: Aws) -> dict[str, str]:
    """Who we are (account, ARN), asked first so that credential problems show before any other step."""
    identity = call(aws, "sts", "get_caller_identity")
    return {"account": identity["Account"], "arn": identity["Arn"]}
