"""SSH state that cannot be hijacked, and `connect` that checks every time: the shared local cluster's sshd,
reached from a second clusterkit home with a temporary directory of its own (a laptop)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.providers.local import processes

pytestmark = pytest.mark.slurm
REMOTE = "far"


def clusterkit(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path (a socket's address has ~100 bytes; pytest's tmp_path is longer)."""
    directory = Path(tempfile.mkdtemp(prefix="ck-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def laptop(local_cluster, tmp_path: Path, short_tmp: Path) -> dict[str, str]:  # noqa: ANN001
    """The laptop's environment: its own clusterkit home and TMPDIR, no SLURM_CONF; `far` connected."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env.update(CLUSTERKIT_HOME=str(tmp_path / "home"), TMPDIR=str(short_tmp))
    connected = clusterkit(env, "connect", REMOTE, *target_args(local_cluster), "-o", "json")
    assert connected.returncode == 0, connected.stderr
    return env


def target_args(local_cluster, **changes: str) -> list[str]:  # noqa: ANN001
    target = local_cluster.ssh_target()
    given = {"--ssh": target.destination, "--port": str(target.port), "--identity-file": target.identity_file,
             "--known-hosts": target.known_hosts_file, "--python": sys.executable, **changes}
    return [part for option, value in given.items() if value for part in (option, value)]


def registered(env: dict[str, str]) -> list[str]:
    return [c["name"] for c in json.loads(clusterkit(env, "list-clusters", "-o", "json").stdout)]


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def control_sockets(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)] if directory.is_dir() else []


def _open_to_others(directory: Path) -> None:
    directory.mkdir()
    directory.chmod(0o777)


def _another_users(directory: Path) -> None:
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)  # nobody


def _a_link_to_a_private_directory(directory: Path) -> None:
    (directory.parent / "elsewhere").mkdir(mode=0o700)
    directory.symlink_to(directory.parent / "elsewhere")


def _a_file(directory: Path) -> None:
    directory.write_text("")


@pytest.mark.parametrize("prepare", [_open_to_others, _another_users, _a_link_to_a_private_directory, _a_file])
def test_a_control_directory_that_is_not_the_users_own_and_private_is_refused(local_cluster, tmp_path, short_tmp,
                                                                               prepare):  # noqa: ANN001
    if prepare is _another_users and os.getuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env.update(CLUSTERKIT_HOME=str(tmp_path / "home"), TMPDIR=str(short_tmp))
    planted = short_tmp / f"clusterkit-ssh-{os.getuid()}"
    prepare(planted)
    line = one_line_error(clusterkit(env, "connect", "hijacked", *target_args(local_cluster), "-o", "json"))
    assert f"SSH control directory {planted}" in line and "TMPDIR" in line and f"rm -r {planted}" in line, line
    assert registered(env) == []
    assert control_sockets(planted.resolve()) == []  # no master's socket was put where another could take it


def test_a_long_tmpdir_still_gives_a_socket_address_that_fits(local_cluster, tmp_path, short_tmp):  # noqa: ANN001
    long_tmp = short_tmp / ("t" * 60)  # as macOS's TMPDIR under /var/folders is, with clusterkit's name added
    long_tmp.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env.update(CLUSTERKIT_HOME=str(tmp_path / "home"), TMPDIR=str(long_tmp))
    connected = clusterkit(env, "connect", REMOTE, *target_args(local_cluster), "-o", "json")
    assert connected.returncode == 0, connected.stderr
    assert registered(env) == [REMOTE]


def test_connect_checks_the_host_key_and_the_login_while_a_shared_connection_lives(laptop, local_cluster,
                                                                                    tmp_path):  # noqa: ANN001
    target = local_cluster.ssh_target()
    wrong_key = tmp_path / "wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    other_host_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_host_key)], check=True)
    changed = tmp_path / "known_hosts"
    changed.write_text(f"[127.0.0.1]:{target.port} {' '.join(Path(f'{other_host_key}.pub').read_text().split()[:2])}\n")
    control = Path(laptop["TMPDIR"]) / f"clusterkit-ssh-{os.getuid()}"
    cases = [("--known-hosts", str(changed), "host key of"),
             ("--identity-file", str(tmp_path / "missing"), f"identity file {tmp_path / 'missing'} does not exist"),
             ("--identity-file", str(wrong_key), "refused the login")]
    for index, (option, value, expected) in enumerate(cases):
        assert control_sockets(control), "the shared connection `far` opened should still live"
        result = clusterkit(laptop, "connect", f"bad{index}", *target_args(local_cluster, **{option: value}),
                            "-o", "json")
        assert expected in one_line_error(result), (option, value)
    assert registered(laptop) == [REMOTE]  # nothing registered


@pytest.mark.parametrize(("home_name", "tmp_name"), [("home with spaces", "tmp"), ("home 100% mine", "t m%p")])
def test_a_host_key_accepted_on_first_use_is_kept_in_the_clusters_own_file(local_cluster, tmp_path, short_tmp,
                                                                           home_name, tmp_name):  # noqa: ANN001
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    tmpdir = short_tmp / tmp_name  # the shared connection's socket lives under it: quoted for ssh too
    tmpdir.mkdir()
    env.update(CLUSTERKIT_HOME=str(tmp_path / home_name), TMPDIR=str(tmpdir))
    key = short_tmp / 'keys "100%"' / "id key"
    key.parent.mkdir()
    shutil.copy(local_cluster.ssh_target().identity_file, key)
    connected = clusterkit(env, "connect", "tofu", *target_args(local_cluster, **{"--known-hosts": "",
                                                                                   "--identity-file": str(key)}),
                           "--accept-new-host-key", "-o", "json")
    assert connected.returncode == 0, connected.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [home_name]  # no stray known_hosts file beside it
    kept = (tmp_path / home_name / "clusters" / "tofu" / "known_hosts").read_text()
    host_key = Path(local_cluster.ssh_target().known_hosts_file).read_text().split()[1:3]
    assert [line.split()[1:3] for line in kept.splitlines()] == [host_key]
    assert control_sockets(tmpdir / f"clusterkit-ssh-{os.getuid()}")  # commands share one connection
    described = clusterkit(env, "describe-cluster", "tofu", "-o", "json")
    assert json.loads(described.stdout)["status"] == "running", described.stderr
    # The Slurm of the controller at the far end, through the clients its SSH sessions get (on a Slurm root, its own).
    assert json.loads(described.stdout)["slurm_version"] == local_cluster.slurm().version()


class Forwarder:
    """A TCP relay to the cluster's sshd that can be cut (as a Wi-Fi blip cuts the laptop off) and restored."""

    def __init__(self, port: int) -> None:
        self.target_port = port
        self.port = 0
        self.connections: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        self.listener.listen()
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and end the live ones (shutdown, not close alone: it wakes the threads
        blocked on them and sends the far end its FIN)."""
        assert self.listener is not None
        for end in (self.listener, *self.connections):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
        self.connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.connections += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def blip(local_cluster, tmp_path, short_tmp) -> Iterator[tuple[dict[str, str], Forwarder]]:  # noqa: ANN001
    """A laptop whose cluster `blip` is reached through a relay the test can cut."""
    forwarder = Forwarder(local_cluster.ssh_target().port)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    env.update(CLUSTERKIT_HOME=str(tmp_path / "home"), TMPDIR=str(short_tmp))
    connected = clusterkit(env, "connect", "blip", *target_args(local_cluster, **{"--port": str(forwarder.port),
                                                                                   "--known-hosts": ""}),
                           "--accept-new-host-key", "--runs-dir", str(tmp_path / "runs"), "-o", "json")
    assert connected.returncode == 0, connected.stderr
    yield env, forwarder
    forwarder.down()


def submit_sleeper(env: dict[str, str], tmp_path: Path, seconds: int) -> str:
    spec = tmp_path / "sleeper.yaml"
    spec.write_text(f"name: sleeper\nlauncher: srun\ncommand: [sleep, '{seconds}']\nlogs: {{output: s_%j.out}}\n")
    submitted = clusterkit(env, "submit", str(spec), "--cluster", "blip", "--sync", "sleeper.yaml", "-o", "json",
                           cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    return json.loads(submitted.stdout)["job_id"]


def test_watch_rides_out_a_lost_connection_and_follows_the_job_to_its_end(blip, local_cluster, tmp_path):  # noqa
    env, forwarder = blip
    job_id = submit_sleeper(env, tmp_path, 25)
    watcher = subprocess.Popen([sys.executable, "-m", "clusterkit", "watch", job_id, "--cluster", "blip", "-o",
                                "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        slurm = local_cluster.slurm()
        processes.wait_until(lambda: slurm.queue().get(job_id) == "RUNNING", 60, "the job to run", interval=0.5)
        time.sleep(3)  # the watcher has asked at least once over the shared connection
        forwarder.down()
        time.sleep(10)
        forwarder.up()
        out, err = watcher.communicate(timeout=120)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    result = json.loads(out)
    assert result["state"] == "COMPLETED", result
    lost = [event for event in result["events"] if "cannot reach" in event]
    assert lost and all("trying again in" in event for event in lost), result["events"]


def test_watch_gives_up_after_a_bounded_outage_in_one_line(blip, local_cluster, tmp_path,
                                                           monkeypatch):  # noqa: ANN001
    from clusterkit.jobs.watcher import watch
    from clusterkit.transport import ConnectionProblem

    env, forwarder = blip
    job_id = submit_sleeper(env, tmp_path, 120)
    for name in ("CLUSTERKIT_HOME", "TMPDIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    forwarder.down()
    events: list[str] = []
    started = time.monotonic()
    try:
        with pytest.raises(ConnectionProblem) as raised:
            watch(job_id, "blip", reconnect_for=8, progress=events.append)
    finally:
        local_cluster.slurm().cancel(job_id)
    assert 8 <= time.monotonic() - started < 60
    assert "in a row; watching job" in raised.value.message and len(events) >= 2, events
