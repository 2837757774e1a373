"""Where a cluster's commands run and its files live: this machine, or a login node reached over SSH.

`Slurm`, job handles and the preflight go through a Transport, so every job verb works the same
from a head node and from a laptop. `SshTransport` uses the OpenSSH client and the user's own
`~/.ssh/config` (ProxyJump, agents, SSM proxy commands, known hosts) with connection reuse
(ControlMaster), so that a session pays for one connection; it never prompts (BatchMode) and turns
SSH's failures into one line that names the problem.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

from clusterkit.errors import ClusterkitError, MissingDependency
from clusterkit.lean_dataclass import lean_dataclass

CONTROL_PERSIST_S = 600  # an idle shared connection stays this long


class ConnectionProblem(ClusterkitError):
    """The far side could not be reached, refused us, or is not who it was."""


class Transport(Protocol):
    label: str  # where commands run, for messages: "this machine", "root@10.0.0.5:22"
    remote: bool

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, input_bytes: bytes | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run `argv` there; `env` adds variables to the far side's own environment."""
        ...


@lean_dataclass(frozen=True)
class LocalTransport:
    label: str = "this machine"
    remote: bool = False

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, input_bytes: bytes | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(argv, env={**os.environ, **(env or {})}, input=input_bytes, capture_output=True,
                              timeout=timeout)


LOCAL = LocalTransport()


@lean_dataclass(frozen=True)
class SshTarget:
    """How to reach a cluster's login (head) node. Everything not given comes from ~/.ssh/config."""

    host: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    options: tuple[str, ...] = ()  # more `-o KEY=VALUE` (e.g. a ProxyCommand through SSM)
    known_hosts_file: str | None = None  # a cluster's own known_hosts (clusterkit's local clusters)

    @classmethod
    def parse(cls, destination: str, **extra: object) -> SshTarget:
        """`[USER@]HOST` as `ssh` takes it."""
        user, _, host = destination.rpartition("@")
        if not host or any(char.isspace() or ord(char) < 32 for char in destination) or host.startswith("-"):
            raise ClusterkitError(f"{destination!r} is not an SSH destination", fix="write [USER@]HOST, e.g. "
                                  "ubuntu@10.0.0.5 or a Host alias from ~/.ssh/config")
        return cls(host=host, user=user or None, **extra)  # type: ignore[arg-type]

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def to_dict(self) -> dict[str, object]:
        return {"host": self.host, "user": self.user, "port": self.port, "identity_file": self.identity_file,
                "options": list(self.options), "known_hosts_file": self.known_hosts_file}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> SshTarget:
        return cls(host=str(data["host"]), user=data.get("user") or None,  # type: ignore[arg-type]
                   port=int(data["port"]) if data.get("port") else None,  # type: ignore[arg-type]
                   identity_file=data.get("identity_file") or None,  # type: ignore[arg-type]
                   options=tuple(data.get("options") or ()),  # type: ignore[arg-type]
                   known_hosts_file=data.get("known_hosts_file") or None)  # type: ignore[arg-type]


# A master's socket is made at ControlPath plus ".XXXXXXXXXXXXXXXX" and must fit a socket address (108 bytes, the
# NUL included): with %C (40 bytes) the directory may take 107 - 1 - 40 - 17 bytes.
CONTROL_DIR_MAX_BYTES = 49


def control_dir() -> Path:
    """Where the shared connections' sockets live: short enough for a socket address, and this user's alone
    (whoever may write there can swap a master's socket and so see or forge every remote command)."""
    name = f"clusterkit-ssh-{os.getuid()}"
    directory = Path(tempfile.gettempdir()) / name
    if len(os.fsencode(directory)) > CONTROL_DIR_MAX_BYTES:  # e.g. macOS's TMPDIR under /var/folders
        directory = Path("/tmp") / name
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise ClusterkitError(f"cannot make the SSH control directory {directory}: {error.strerror}",
                              fix="set TMPDIR to a directory of yours") from None
    info = directory.lstat()  # not stat: a symbolic link could lead anywhere, later elsewhere
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory"
    elif info.st_uid != os.getuid():
        problem = f"belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    elif info.st_mode & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):04o}, open to others (it must be 0700)"
    else:
        return directory
    raise ClusterkitError(f"the SSH control directory {directory} {problem}: another user could take over "
                          "clusterkit's SSH connections, so it is not used",
                          fix=f"remove it (rm -r {shlex.quote(str(directory))}) if nothing of yours uses it, "
                              "or set TMPDIR to a private directory")


def ssh_option_value(text: str) -> str:
    """`text` as one value of an `ssh -o` option: ssh splits a value on white space unless it is in double
    quotes (where \\ and \\" escape), then expands %-tokens in file names (%% is a percent sign)."""
    escaped = text.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@lean_dataclass(frozen=True)
class SshTransport:
    target: SshTarget
    remote: bool = True
    connect_timeout_s: int = 10

    @property
    def label(self) -> str:
        return self.target.destination + (f":{self.target.port}" if self.target.port else "")

    def ssh_argv(self, remote_command: str, *, shared: bool = True) -> list[str]:
        """The `ssh` command line that runs `remote_command` (one shell-quoted string) there: through the
        shared connection, or (`shared=False`) over a connection of its own that checks the host key and
        the login afresh."""
        target = self.target
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        if shared:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={ssh_option_value(str(control_dir()))}/%C",
                     "-o", f"ControlPersist={CONTROL_PERSIST_S}"]
        else:  # first value wins in ssh: ~/.ssh/config cannot bring a master back
            argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        argv += ["-o", "ServerAliveInterval=15"]
        if target.port:
            argv += ["-p", str(target.port)]
        if target.identity_file:  # not -i: ssh checks its path as given but then reads it %-expanded
            argv += ["-o", f"IdentityFile={ssh_option_value(target.identity_file)}", "-o", "IdentitiesOnly=yes"]
        for option in target.options:  # the first value of an option wins in ssh: the caller's first
            argv += ["-o", option]
        if target.known_hosts_file:
            argv += ["-o", f"UserKnownHostsFile={ssh_option_value(target.known_hosts_file)}",
                     "-o", "StrictHostKeyChecking=yes"]
        return [*argv, "--", target.destination, remote_command]

    def verify(self) -> None:
        """Log in over a connection of its own, whatever shared one lives: the host key, the key and the
        login are checked now. Raises ConnectionProblem, or ClusterkitError for a missing key file."""
        key = self.target.identity_file
        if key and not os.access(Path(key).expanduser(), os.R_OK):
            raise ClusterkitError(f"the identity file {key} does not exist or cannot be read",
                                  fix="give the private key's path with --identity-file")
        self._ssh(self.ssh_argv("true", shared=False), None, None)

    def close(self) -> None:
        """End the shared connection (the next command opens a new one and checks the host key again)."""
        argv = self.ssh_argv("true")
        subprocess.run([*argv[: argv.index("--")], "-O", "exit", self.target.destination], capture_output=True)

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, input_bytes: bytes | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        exports = [f"{name}={value}" for name, value in (env or {}).items()]
        command = shlex.join(["env", *exports, *argv] if exports else argv)
        return self._ssh(self.ssh_argv(command), input_bytes, timeout)

    def _ssh(self, ssh_argv: list[str], input_bytes: bytes | None,
             timeout: float | None) -> subprocess.CompletedProcess[bytes]:
        if shutil.which("ssh") is None:  # not a ConnectionProblem: no waiting makes it work
            raise MissingDependency("the OpenSSH client (ssh) is not installed",
                                    fix="install it (apt-get install openssh-client)")
        result = subprocess.run(ssh_argv, input=input_bytes, capture_output=True, timeout=timeout)
        if result.returncode == 255:  # ssh's own failure, not the command's
            raise connection_problem(result.stderr.decode(errors="replace"), self.label)
        return result


_PROBLEMS: tuple[tuple[str, str, str], ...] = (
    (r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed",
     "the host key of {label} has changed since it was last seen: this may not be the cluster you know",
     "if the cluster was rebuilt, remove its old key (ssh-keygen -R HOST) and connect again"),
    (r"Host key verification failed|No .* host key is known",
     "{label} is not in known_hosts, so its identity cannot be checked",
     "ssh to it once by hand to check and accept its host key, then retry"),
    (r"Permission denied|Too many authentication failures",
     "{label} refused the login: no key it accepts",
     "check the user and --identity-file (or your ssh-agent and ~/.ssh/config)"),
    (r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution",
     "cannot resolve the host name of {label}", "check the host name, or its Host entry in ~/.ssh/config"),
    (r"Connection refused|Connection timed out|No route to host|Network is unreachable|timed out|"
     r"Connection closed|Connection reset|kex_exchange_identification",
     "cannot reach {label}", "check that it is up and that its SSH port is open to you (and the VPN, if any)"),
)


def connection_problem(stderr: str, label: str) -> ConnectionProblem:
    """SSH's failure as one line that names the problem; the raw message (without secrets) otherwise."""
    for pattern, message, fix in _PROBLEMS:
        if re.search(pattern, stderr, re.IGNORECASE):
            return ConnectionProblem(message.format(label=label), fix=fix)
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "no message")
    return ConnectionProblem(f"ssh to {label} failed: {last}", fix="try `ssh` to it by hand to see more")


# ----- files, on this machine or the far side ----------------------------------------------------

def read_bytes(transport: Transport, path: str | Path, offset: int = 0) -> bytes | None:
    """The file's bytes from `offset` on; None when it does not exist (yet)."""
    if not transport.remote:
        try:
            with open(path, "rb") as stream:
                stream.seek(offset)
                return stream.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
    result = transport.run(["sh", "-c", 'test -f "$1" && exec tail -c "+$2" "$1"', "sh", str(path), str(offset + 1)])
    return result.stdout if result.returncode == 0 else None


def make_dirs(transport: Transport, path: str | Path) -> None:
    if not transport.remote:
        Path(path).mkdir(parents=True, exist_ok=True)
        return
    _check(transport.run(["mkdir", "-p", "--", str(path)]), f"cannot make directory {path} on {transport.label}")


def write_bytes(transport: Transport, path: str | Path, data: bytes) -> None:
    """Write a whole file there (its directory made first)."""
    if not transport.remote:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return
    result = transport.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", str(path)], input_bytes=data)
    _check(result, f"cannot write {path} on {transport.label}")


def can_create(transport: Transport, directory: str | Path) -> bool:
    """Whether `directory` exists writable, or its nearest existing parent is a writable directory."""
    if not transport.remote:
        existing = next((p for p in (Path(directory), *Path(directory).parents) if p.exists()), None)
        return existing is not None and existing.is_dir() and os.access(existing, os.W_OK)
    script = 'd="$1"; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; [ -d "$d" ] && [ -w "$d" ]'
    return transport.run(["sh", "-c", script, "sh", str(directory)]).returncode == 0


def exists(transport: Transport, path: str | Path) -> bool:
    if not transport.remote:
        return Path(path).exists()
    return transport.run(["test", "-e", str(path)]).returncode == 0


def is_readable_file(transport: Transport, path: str | Path) -> bool:
    if not transport.remote:
        return Path(path).is_file() and os.access(path, os.R_OK)
    return transport.run(["test", "-f", str(path), "-a", "-r", str(path)]).returncode == 0


def home(transport: Transport) -> str:
    if not transport.remote:
        return str(Path.home())
    result = transport.run(["sh", "-c", 'printf %s "$HOME"'])
    _check(result, f"cannot read the home directory on {transport.label}")
    return result.stdout.decode()


def upload(transport: Transport, source: Path, names: list[str], destination: str,
           also_make: tuple[str, ...] = (), piece_bytes: int = 8 << 20) -> None:
    """Copy the files `names` (relative to `source`; links stay links, nothing but regular files and links
    goes) into `destination` there as one tar archive, and make the directories `also_make` on the way.
    The archive is spooled to a temporary file here and sent in pieces of `piece_bytes`, appended to a
    spool file there and unpacked with the last one: no more than one piece is ever in memory."""
    import tarfile

    def plain(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        # A file swapped for a FIFO or a device since it was planned is left out, never opened.
        return member if member.isreg() or member.issym() else None

    there = '"$1/.clusterkit-upload.tar.gz"'
    with tempfile.TemporaryFile() as spool:
        with tarfile.open(fileobj=spool, mode="w:gz") as archive:
            for name in names:
                archive.add(source / name, arcname=name, recursive=False, filter=plain)
        size, sent = spool.tell(), 0
        spool.seek(0)
        while sent < size:  # an archive is never empty: one piece at least
            piece = spool.read(piece_bytes)
            append = f'mkdir -p "$@" && cat {">>" if sent else ">"} {there}'
            sent += len(piece)
            # The files belong to whoever unpacks them there (--no-same-owner), never to a uid from here; the
            # spool goes whatever happens.
            script = (f'{append} && tar -xzf {there} --no-same-owner -C "$1"; s=$?; rm -f -- {there}; exit $s'
                      if sent >= size else f'{append} || {{ s=$?; rm -f -- {there}; exit $s; }}')
            result = transport.run(["sh", "-c", script, "sh", destination, *also_make], input_bytes=piece,
                                   timeout=600)
            _check(result, f"cannot unpack the job's files into {destination} on {transport.label}")


def _check(result: subprocess.CompletedProcess[bytes], what: str) -> None:
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise ClusterkitError(f"{what}: {detail[-1] if detail else f'exit {result.returncode}'}")
