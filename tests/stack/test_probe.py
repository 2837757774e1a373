"""The system probe: commands, files under a root, globs and library loading on this machine."""

from __future__ import annotations

import sys
from pathlib import Path

from clusterkit.stack.probe import RecordedProbe, SystemProbe, probe_for_root, strip_source


def test_files_and_globs_are_read_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "dev" / "infiniband").mkdir(parents=True)
    for index in (0, 1):
        (tmp_path / "dev" / "infiniband" / f"uverbs{index}").touch()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text("ID=ubuntu\n")
    probe = SystemProbe(tmp_path)
    assert probe.glob("/dev/infiniband/uverbs*") == ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"]
    assert probe.read_text("/etc/os-release") == "ID=ubuntu\n"
    assert probe.read_text("/etc/missing") is None


def test_commands_run_or_are_absent(tmp_path: Path) -> None:
    probe = SystemProbe(tmp_path)
    assert probe.run(["clusterkit-no-such-program"]) is None
    assert probe.run([sys.executable, "-c", "print('hello')"]) == "hello\n"


def test_library_loading_is_guarded(tmp_path: Path) -> None:
    fake = tmp_path / "libnccl-net.so"
    fake.write_text("not a shared object")
    probe = SystemProbe(tmp_path)
    assert probe.load_library("/libnccl-net.so")  # an error message, not a crash
    assert probe.load_library("/missing.so")


def test_recorded_probe_strips_the_source_line(tmp_path: Path) -> None:
    (tmp_path / ".commands").mkdir()
    (tmp_path / ".commands" / "neuron-ls").write_text("SOURCE: somewhere\ninstance-type: trn1.32xlarge\n")
    (tmp_path / ".environ").write_text("LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib\n")
    probe = probe_for_root(tmp_path)
    assert isinstance(probe, RecordedProbe)
    assert probe.run(["neuron-ls"]) == "instance-type: trn1.32xlarge\n"
    assert probe.run(["nvidia-smi"]) is None
    assert probe.environ == {"LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib"}
    assert strip_source("no header\n") == "no header\n"


def test_the_real_root_gets_the_system_probe() -> None:
    assert isinstance(probe_for_root("/"), SystemProbe)
