"""Credentials and permissions: one clear line each, and never a secret in the output."""

from __future__ import annotations

import pytest

from clusterkit.cli import main
from clusterkit.providers.aws import AccessProblem, Aws, check_caller
from clusterkit.providers.aws.access import denied_action

from .conftest import FAKE_SECRET, REGION, refuse


def test_no_credentials(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without keys botocore fails while signing, before anything is sent.
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable)
    with pytest.raises(AccessProblem, match=r"^no AWS credentials found \(run `aws configure`"):
        check_caller(Aws(REGION))


@pytest.mark.parametrize("code", ["ExpiredToken", "ExpiredTokenException"])
def test_expired_token(aws: Aws, code: str) -> None:
    refuse(aws.client("sts"), "GetCallerIdentity", code, "The security token included in the request is expired")
    with pytest.raises(AccessProblem, match="^the AWS session token has expired"):
        check_caller(aws)


def test_access_denied_without_a_named_action(aws: Aws) -> None:
    refuse(aws.client("sts"), "GetCallerIdentity", "AccessDenied", "Access Denied")
    with pytest.raises(AccessProblem, match=f"^permission denied in {REGION} for GetCallerIdentity"):
        check_caller(aws)


def test_the_caller_is_known_under_moto(aws: Aws) -> None:
    assert check_caller(aws)["account"] == "123456789012"


@pytest.mark.parametrize(("message", "action"), [
    ("User: arn:aws:iam::1:user/bob is not authorized to perform: ec2:DescribeSubnets on resource: *",
     "ec2:DescribeSubnets"),
    ("User: arn:aws:sts::1:assumed-role/r/s is not authorized to perform: cloudformation:CreateStack because no "
     "identity-based policy allows the cloudformation:CreateStack action", "cloudformation:CreateStack"),
    ("Access Denied", None),
])
def test_the_denied_action_is_read_from_the_message(message: str, action: str | None) -> None:
    assert denied_action(message) == action


def _create(capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str, str]:
    code = main(["create-cluster", "--preset", "p4de", "--name", "train", "--region", REGION, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_without_credentials_is_one_line_and_shows_no_secret(aws_env: None, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")  # a secret without its key is no credentials at all
    code, out, err = _create(capsys)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("error: no AWS credentials found")
    assert FAKE_SECRET not in out + err


def test_cli_with_a_denied_permission_names_it_and_shows_no_secret(mocked: None, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    from clusterkit.providers.aws import access

    original = access.Aws.client

    def client(self: Aws, service: str):  # noqa: ANN202
        made = original(self, service)
        if service == "ec2":
            refuse(made, "DescribeVpcs", "UnauthorizedOperation",
                   "You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/bob is "
                   "not authorized to perform: ec2:DescribeVpcs")
        return made

    monkeypatch.setattr(access.Aws, "client", client)
    for output in ("table", "json"):
        code, out, err = _create(capsys, "--output", output)
        assert code == 1
        assert err.strip().splitlines()[-1] == (f"error: permission denied in {REGION}: this identity may not call "
                                                "ec2:DescribeVpcs (grant ec2:DescribeVpcs to this identity in IAM)")
        assert FAKE_SECRET not in out + err
