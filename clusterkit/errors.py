"""Errors a user can act on. The CLI prints them as one line (traceback only with --debug)."""

from __future__ import annotations


class ClusterkitError(Exception):
    """A failure with a message that names what went wrong and how to fix it."""

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


class NotFound(ClusterkitError):
    """A named cluster, job or resource does not exist."""


class AlreadyExists(ClusterkitError):
    """Creating something that is already there."""


class MissingDependency(ClusterkitError):
    """A program or package clusterkit needs is not installed."""
