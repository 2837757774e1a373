"""Starting, finding and stopping the processes of a local cluster. Effects live here."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.pids import pid_alive


def spawn(argv: list[str], log_file: Path, env: dict[str, str] | None = None) -> int:
    """Start a daemon in its own session (it outlives the CLI) and return its pid."""
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, close_fds=True,
        )
    return process.pid


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


# Port ranges local clusters hold, machine-wide (clusters of every $CLUSTERKIT_HOME): one file per
# range, named by its first port, holding the directory of the cluster that holds it.
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / "clusterkit-ports"


def reserved_ports() -> set[int]:
    """Ports of every range a live local cluster on this machine holds (a deleted cluster's is free)."""
    try:
        entries = list(PORT_RESERVATIONS.iterdir())
    except FileNotFoundError:
        return set()
    ports: set[int] = set()
    for entry in entries:
        first, _, last = entry.name.partition("-")
        owner = _reservation_owner(entry)
        if first.isdigit() and last.isdigit() and owner is not None and owner.is_dir():
            ports.update(range(int(first), int(last) + 1))
    return ports


def reserve_ports(base: int, count: int, owner: Path) -> None:
    """Hold ports base..base+count-1 for the cluster in `owner`, or fail if another live cluster does.

    The look and the claim happen under one machine-wide lock: two creates at once (two test sessions starting
    together) could otherwise both claim one range, and the later one's slurmd fails to bind its port."""
    PORT_RESERVATIONS.mkdir(mode=0o755, exist_ok=True)
    entry = PORT_RESERVATIONS / f"{base}-{base + count - 1}"
    with open(PORT_RESERVATIONS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if reserved_ports().intersection(range(base, base + count)) - _held_by(owner):
            raise ClusterkitError(f"ports {base}-{base + count - 1} were taken by another local cluster since this "
                                  "one was planned", fix="create it again: a new plan picks free ports")
        temporary = entry.with_name(f".{entry.name}.{os.getpid()}")
        temporary.write_text(f"{owner}\n")
        os.replace(temporary, entry)


def release_ports(owner: Path) -> None:
    for entry in _entries_of(owner):
        entry.unlink(missing_ok=True)


def _held_by(owner: Path) -> set[int]:
    ports: set[int] = set()
    for entry in _entries_of(owner):
        first, _, last = entry.name.partition("-")
        ports.update(range(int(first), int(last) + 1))
    return ports


def _entries_of(owner: Path) -> list[Path]:
    try:
        return [entry for entry in PORT_RESERVATIONS.iterdir()
                if not entry.name.startswith(".") and _reservation_owner(entry) == owner]
    except FileNotFoundError:
        return []


def _reservation_owner(entry: Path) -> Path | None:
    try:
        return Path(entry.read_text().strip())
    except OSError:
        return None


def find_free_port_range(count: int, taken: Iterable[int], start: int = 24000, stop: int = 40000,
                         step: int = 16) -> int:
    """First port p such that p..p+count-1 are free and not reserved by another local cluster."""
    reserved = set(taken) | reserved_ports()
    for base in range(start, stop, step):
        candidates = range(base, base + count)
        if not reserved.intersection(candidates) and all(port_free(p) for p in candidates):
            return base
    raise ClusterkitError(f"no {count} free TCP ports between {start} and {stop}",
                          fix="delete unused clusters with `clusterkit delete-cluster`")


def pid_from_file(path: Path) -> int | None:
    """The pid a daemon wrote to its pid file, if the file holds one and that process runs."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def belongs_to(pid: int, marker: str) -> bool:
    """Whether the process's command line or environment names `marker` (a cluster's directory)."""
    for part in ("cmdline", "environ"):
        try:
            if marker.encode() in Path(f"/proc/{pid}/{part}").read_bytes():
                return True
        except OSError:
            continue
    return False


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


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def signal_until_all(namespace: str, sig: int, passes: int = 5) -> list[int]:
    """Send `sig` to every process of a mount namespace, again while new ones appear (a process may fork
    between the listing and the signal); returns every pid signalled."""
    signalled: list[int] = []
    for _ in range(passes):
        new = [pid for pid in pids_in_mount_namespace(namespace) if pid not in signalled]
        if not new:
            break
        kill_all(new, sig)
        signalled += new
    return signalled


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


def root_mount_is_shared() -> bool:
    """Whether / propagates mounts to the namespaces that follow it (mountinfo's `shared:N` tag)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[4] == "/":
            optional = fields[6:fields.index("-")] if "-" in fields else []
            return any(tag.startswith("shared:") for tag in optional)
    return False


SHARE_ROOT_COMMAND = ["mount", "--make-rshared", "/"]


def share_root_mount() -> None:
    """Make / (recursively) a shared mount, as systemd does at boot, so that file systems mounted later
    reach the local nodes' namespaces (which follow it as slaves)."""
    result = subprocess.run(SHARE_ROOT_COMMAND, capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterkitError(f"cannot make / a shared mount: {result.stderr.strip() or result.returncode}",
                              fix="run as root with CAP_SYS_ADMIN; without it, mounts made after the cluster "
                                  "started are not visible to its nodes")
