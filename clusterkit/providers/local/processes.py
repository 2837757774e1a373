"""Starting, finding and stopping the processes of a local cluster. Effects live here."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from clusterkit.errors import ClusterkitError


def spawn(argv: list[str], log_file: Path, env: dict[str, str] | None = None) -> int:
    """Start a daemon in its own session (it outlives the CLI) and return its pid."""
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, close_fds=True,
        )
    return process.pid


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes: reap it if it is our child, else look at its state.
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.02,
               hint: str = "") -> None:
    """Poll `predicate` until true; raise a clear error naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise ClusterkitError(f"timed out after {timeout:.0f} s waiting for {what}", fix=hint or None)
        time.sleep(interval)


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((host, port)) == 0


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def find_free_port_range(count: int, taken: Iterable[int], start: int = 24000, stop: int = 40000,
                         step: int = 16) -> int:
    """First port p such that p..p+count-1 are free and not reserved by another local cluster."""
    reserved = set(taken)
    for base in range(start, stop, step):
        candidates = range(base, base + count)
        if not reserved.intersection(candidates) and all(port_free(p) for p in candidates):
            return base
    raise ClusterkitError(f"no {count} free TCP ports between {start} and {stop}",
                          fix="delete unused clusters with `clusterkit delete-cluster`")


def start_time(pid: int) -> str | None:
    """When the process started (clock ticks since boot): with the pid, it names one process for good."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def pids_in_mount_namespace(namespace: str) -> list[int]:
    """Every process in a mount namespace: a node's slurmd and all it started (steps, tasks)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and mount_namespace(int(entry)) == namespace:
            found.append(int(entry))
    return found


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_pids(pids: Iterable[int], timeout: float = 8.0) -> list[int]:
    """SIGTERM all at once, wait for all, SIGKILL what is left. Returns the pids that had to be killed."""
    pids = [p for p in pids if pid_alive(p)]
    kill_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.02)
    stubborn = [p for p in pids if pid_alive(p)]
    kill_all(stubborn, signal.SIGKILL)
    for pid in stubborn:
        wait_until(lambda: not pid_alive(pid), 5, f"process {pid} to exit")
    return stubborn
