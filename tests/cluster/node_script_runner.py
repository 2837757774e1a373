"""Run clusterkit's node scripts the way ParallelCluster does, on a scratch "node": real bash, fake commands.

ParallelCluster's custom-action executor runs `[script] + Args` (no shell), with its environment plus
`cfn_<event>` and `cfn_<event>_args`, the latter a bash-array text it builds by wrapping each argument in
double quotes without escaping. The scripts' effects land under CLUSTERKIT_NODE_ROOT; the commands they
call (scontrol, systemctl, apt-get, curl, ...) are fakes on PATH that record their arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Commands the node scripts call that change a real machine: each fake appends its argv to calls.log.
FAKE_COMMANDS = ("scontrol", "systemctl", "apt-get", "apt-mark", "curl", "gpg", "rpm", "dnf", "yum", "modprobe",
                 "nvidia-ctk", "usermod", "getent")
# Real tools the scripts need (found on this machine), offered without the rest of PATH.
REAL_TOOLS = ("bash", "sed", "tr", "grep", "install", "mv", "chmod", "cat", "mkdir", "dirname", "env", "cp",
              "id", "stat", "mountpoint",
              "touch", "rm", "sh")  # touch and sh: what an injected command would use
PARALLELCLUSTER_EXAMPLES = {
    "enroot/enroot.conf": "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)\nENROOT_DATA_PATH /tmp/enroot-data\n"
                          "ENROOT_CACHE_PATH /var/enroot-cache\nENROOT_CONFIG_PATH ${HOME}/.config/enroot\n"
                          "ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates\nENROOT_MOUNT_HOME n\n",
    "spank/plugstack.conf": "include /opt/slurm/etc/plugstack.conf.d/*\n",
    "pyxis/pyxis.conf": "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis\n",
}


@dataclass
class Node:
    root: Path  # the node's file system, as the scripts see it
    bin: Path  # fake commands and the real tools, the whole PATH
    log: Path

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.split("\x1f") for line in self.log.read_text().splitlines()]


def make_node(base: Path, apt: bool = True, os_release: str = "ID=ubuntu\nVERSION_CODENAME=jammy\n") -> Node:
    """A scratch node of ParallelCluster >= 3.11 (its pyxis/enroot examples), Ubuntu (apt) or a yum/dnf OS."""
    root, bin_dir = base / "root", base / "bin"
    for relative, text in PARALLELCLUSTER_EXAMPLES.items():
        path = root / "opt/parallelcluster/examples" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text(os_release)
    bin_dir.mkdir(parents=True)
    log = base / "calls.log"
    for name in FAKE_COMMANDS:
        if not apt and name.startswith("apt"):
            continue
        fake = bin_dir / name
        # Records its argv, one field per unit separator; never evaluates them.
        fake.write_text(f'#!/bin/bash\nIFS=$\'\\x1f\'; printf \'%s\\n\' "{name}$IFS$*" >> "{log}"\n')
        fake.chmod(0o755)
    # python3: records its argv too; `-m venv DIR` makes DIR/bin/python (this fake again) and DIR/pyvenv.cfg, as
    # venv does; `-c` succeeds.
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/bash\nIFS=$\'\\x1f\'; printf \'%s\\n\' "python3$IFS$*" >> "{log}"\n'
                      'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && '
                      'echo "home = /usr/bin" > "$3/pyvenv.cfg"; fi\n')
    python.chmod(0o755)
    if apt:  # dpkg: the node's architecture, as Ubuntu on x86_64 prints it
        dpkg = bin_dir / "dpkg"
        dpkg.write_text("#!/bin/bash\necho amd64\n")
        dpkg.chmod(0o755)
    uname = bin_dir / "uname"
    uname.write_text("#!/bin/bash\necho 6.8.0-1021-aws\n")
    uname.chmod(0o755)
    for tool in REAL_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the node scripts"
        (bin_dir / tool).symlink_to(found)
    return Node(root=root, bin=bin_dir, log=log)


def parallelcluster_env(event: str, url: str, args: list[str]) -> dict[str, str]:
    """The variables ParallelCluster's executor adds for a custom action (legacy event names)."""
    legacy = {"OnNodeStart": "preinstall", "OnNodeConfigured": "postinstall", "OnNodeUpdated": "postupdate"}[event]
    return {f"cfn_{legacy}": f'"{url}"', f"cfn_{legacy}_args": "(" + " ".join(f'"{arg}"' for arg in args) + ")"}


def run_script(node: Node, script: Path, args: list[str], event: str = "OnNodeConfigured",
               url: str = "s3://bucket/script.sh") -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(node.bin), "HOME": str(node.root / "root"), "CLUSTERKIT_NODE_ROOT": str(node.root),
           **parallelcluster_env(event, url, args)}
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=60,
                          cwd=node.root)


def shipped(name: str) -> Path:
    from clusterkit.cluster.node_scripts import node_script

    path = node_script(name).path
    assert os.access(path, os.X_OK), f"{path} must be executable (ParallelCluster runs it directly)"
    return path
