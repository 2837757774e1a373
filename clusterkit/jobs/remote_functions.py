"""Python functions on a cluster reached over SSH, through stock submitit running on its login node.

The function and its arguments are cloudpickled here (a notebook's functions by value), sent over
the SSH connection to `submitit_agent.py` (its source runs as `PYTHON -c`), which submits them with
submitit into a folder on the cluster's shared storage. A result comes back as the pickle submitit
wrote, and is read here.
"""

from __future__ import annotations

import functools
import json
import pickle
from pathlib import Path
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import Slurm
from clusterkit.transport import Transport

AGENT = Path(__file__).with_name("submitit_agent.py")


@functools.lru_cache(maxsize=1)
def agent_source() -> str:
    return AGENT.read_text()


def run_agent(slurm: Slurm, python: str, *arguments: str, payload: bytes | None = None,
              timeout: float = 300) -> bytes:
    """Run the agent with `python` on the cluster's login node; its stdout, or a one-line error."""
    result = slurm.transport.run([python, "-c", agent_source(), *arguments], env=slurm.env, input_bytes=payload,
                                 timeout=timeout)
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise ClusterkitError(f"submitit on {slurm.transport.label} ({python} {arguments[0]}) failed: "
                              f"{detail[-1] if detail else f'exit {result.returncode}'}",
                              fix=f"check that {python} there has submitit and cloudpickle (pip install submitit)")
    return result.stdout


def submit_calls(slurm: Slurm, folder: str, python: str, parameters: dict[str, Any], *,
           calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] | None = None, function: Any = None,
           items: list[Any] | None = None) -> list[dict[str, str]]:
    """Submit the calls (or one array of `function` over `items`); one {"job_id", "stdout", "stderr"} each."""
    import cloudpickle

    request: dict[str, Any] = {"python": python, "parameters": parameters}
    if items is not None:
        request.update(function=function, items=items)
    else:
        request["calls"] = calls
    return json.loads(run_agent(slurm, python, "submit", folder, payload=cloudpickle.dumps(request)))


def versions(slurm: Slurm, python: str) -> dict[str, str | None]:
    """The Python and package versions of `python` on the login node."""
    return json.loads(run_agent(slurm, python, "versions", timeout=60))


@lean_dataclass(frozen=True)
class RemoteResult:
    """What a JobHandle needs of a submitit job on the far side: its result."""

    slurm: Slurm
    python: str
    folder: str
    job_id: str

    @property
    def transport(self) -> Transport:
        return self.slurm.transport

    def result(self) -> Any:
        data = run_agent(self.slurm, self.python, "result", self.folder, self.job_id)
        outcome, value = pickle.loads(data)  # noqa: S301 - the pickle submitit wrote for our own job
        if outcome == "success":
            return value
        last = str(value).strip().splitlines()
        raise ClusterkitError(f"the function raised on the cluster: {last[-1] if last else value}")
