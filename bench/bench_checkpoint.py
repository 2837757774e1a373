"""Checkpoint saving, loading and background saving, against baselines measured in the same run.

    PYTHONPATH=. python bench/bench_checkpoint.py [--only save,load,dcp,async] [--rounds 5] [--dir DIR]

Baselines: `torch.save` + fsync, `torch.load`, a `dd` of random bytes with fsync, and the checkpoint
code as it was before issue 15 (`--baseline-ref`, read from git: SHA-256 per piece, a second read
to verify, deletion on the save's path), so "today's" CPU cost is measured, not remembered.

Every round runs each contender once, in a rotating order; a shared disk is noisy, so ratios are
taken within a round and the median over rounds is reported, with each round's figure.

1. save: 1 GiB as 20 tensors, 1 GiB as 1,992 tensors (a transformer's state dict), 500 MiB as
   2,000 tensors of 256 KiB. Targets: >= 1.2x torch.save+fsync, >= 0.9x dd, CPU s/GiB <= 0.6x
   the baseline code's.
2. load: `latest()` + `load()` (every piece verified) against `torch.load`, cold (the files
   dropped from the page cache) and warm. Target <= 1.2x.
3. save_dcp against torch.save+fsync, both 1 GiB states. Target >= 1.0x.
4. 20 training steps of an MLP (two 4096x4096 layers, SGD with momentum, a batch of `--batch`)
   whose state (weights and momentum) is 256 MiB, with `save_async` every 5 steps, the last save's
   write included, against the same loop without saves. Target <= 1.15x.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from clusterkit.resilience.checkpoint import CheckpointManager

REPO_ROOT = Path(__file__).resolve().parents[1]
BEFORE_ISSUE_15 = "93ab65ba5b7252976358dab2ab6cbcce530a1da5"
GiB = 2**30


# ----- states -----------------------------------------------------------------------------------


def few_large(total: int = GiB, count: int = 20) -> dict[str, torch.Tensor]:
    """Random float32 tensors (random so nothing on the way can compress them)."""
    return {f"layer{i}.weight": torch.randn(total // 4 // count) for i in range(count)}


def transformer(width: int = 366, layers: int = 166) -> dict[str, torch.Tensor]:
    """A transformer's state dict: 12 tensors per block, 1,992 in all, about 1 GiB; many are tiny."""
    state = {}
    for block in range(layers):
        shapes = {
            "ln1.weight": (width,), "ln1.bias": (width,),
            "attn.qkv.weight": (3 * width, width), "attn.qkv.bias": (3 * width,),
            "attn.proj.weight": (width, width), "attn.proj.bias": (width,),
            "ln2.weight": (width,), "ln2.bias": (width,),
            "mlp.fc1.weight": (4 * width, width), "mlp.fc1.bias": (4 * width,),
            "mlp.fc2.weight": (width, 4 * width), "mlp.fc2.bias": (width,),
        }
        state.update({f"blocks.{block}.{name}": torch.randn(shape) for name, shape in shapes.items()})
    return state


def many_small(count: int = 2000, size: int = 256 << 10) -> dict[str, torch.Tensor]:
    return {f"t{i}": torch.randn(size // 4) for i in range(count)}


def nbytes(state: dict[str, torch.Tensor]) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in state.values())


# ----- measuring --------------------------------------------------------------------------------


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measure(action: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its children) of one call."""
    start, cpu = time.perf_counter(), cpu_seconds() + cpu_seconds(resource.RUSAGE_CHILDREN)
    action()
    return time.perf_counter() - start, cpu_seconds() + cpu_seconds(resource.RUSAGE_CHILDREN) - cpu


def drop_from_cache(path: Path) -> None:
    """Evict one file from the page cache (the whole-machine drop_caches would disturb others)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def baseline_module(ref: str) -> types.ModuleType | None:
    """clusterkit/resilience/checkpoint.py as it was at `ref`, loaded under another name."""
    shown = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{ref}:clusterkit/resilience/checkpoint.py"],
                           capture_output=True, text=True)
    if shown.returncode != 0:
        print(f"baseline code at {ref} not available ({shown.stderr.strip()}); baseline columns skipped")
        return None
    module = types.ModuleType("checkpoint_before_issue_15")
    module.__file__ = f"{ref}:clusterkit/resilience/checkpoint.py"
    sys.modules[module.__name__] = module
    exec(compile(shown.stdout, module.__file__, "exec"), module.__dict__)
    return module


class Table:
    """Seconds (and CPU seconds) per contender per round; ratios within rounds."""

    def __init__(self, title: str, size: int) -> None:
        self.title, self.size = title, size
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.wall.setdefault(name, []).append(wall)
        self.cpu.setdefault(name, []).append(cpu)

    def print_rates(self) -> None:
        print(f"\n== {self.title}: {self.size / 2**20:.0f} MiB; MB/s (median, then each round); CPU s/GiB ==")
        for name, seconds in self.wall.items():
            runs = " ".join(f"{self.size / s / 1e6:.0f}" for s in seconds)
            cpu = statistics.median(self.cpu[name]) / (self.size / GiB)
            print(f"  {name:30s} {self.size / statistics.median(seconds) / 1e6:6.0f}   [{runs}]   cpu {cpu:.2f}")

    def print_seconds(self) -> None:
        print(f"\n== {self.title}: {self.size / 2**20:.0f} MiB; seconds (median, then each round) ==")
        for name, seconds in self.wall.items():
            print(f"  {name:30s} {statistics.median(seconds):6.3f}   [{' '.join(f'{s:.3f}' for s in seconds)}]")

    def ratio(self, label: str, numerator: str, denominator: str, target: str, *, of: str = "wall",
              speed: bool = False) -> float:
        """Median over rounds of numerator/denominator (their speeds' ratio when `speed`)."""
        values = self.wall if of == "wall" else self.cpu
        ratios = [(d / n if speed else n / d) for n, d in zip(values[numerator], values[denominator])]
        median = statistics.median(ratios)
        verdict = ""
        if target:
            bound = float(target.split()[1])
            verdict = "met" if (median >= bound if target.startswith(">=") else median <= bound) else "NOT met"
        print(f"  {label:50s} {median:5.2f}  {target:7s} {verdict:7s} [{' '.join(f'{r:.2f}' for r in ratios)}]")
        return median


def rotate(items: list[Any], round_index: int) -> list[Any]:
    shift = round_index % len(items)
    return items[shift:] + items[:shift]


# ----- 1. save ----------------------------------------------------------------------------------


def bench_save(name: str, state: dict[str, torch.Tensor], work: Path, rounds: int, old: Any) -> None:
    size = nbytes(state)
    source = work / "random.bin"
    with open(source, "wb") as f:  # random bytes of the same size; dd reads them from the page cache
        for _ in range(0, size, 64 << 20):
            f.write(os.urandom(min(64 << 20, size - f.tell())))
    table = Table(f"save, {name}", size)

    def run_dd() -> None:
        subprocess.run(["dd", f"if={source}", f"of={work / 'dd.bin'}", "bs=4M", "conv=fsync"],
                       check=True, capture_output=True)

    def run_torch_save() -> None:
        torch.save(state, work / "plain.pt")
        fsync_file(work / "plain.pt")

    managers = {"new": CheckpointManager(work / "new", keep=1)}
    contenders: list[tuple[str, Callable[[], object], Path]] = [
        ("dd (random bytes, fsync)", run_dd, work / "dd.bin"),
        ("torch.save+fsync", run_torch_save, work / "plain.pt"),
        ("CheckpointManager.save", lambda: managers["new"].save(1, state), work / "new"),
    ]
    if old is not None:
        managers["old"] = old.CheckpointManager(work / "old", keep=1)
        contenders.append(("before issue 15 (sha256)", lambda: managers["old"].save(1, state), work / "old"))
    for round_index in range(rounds):
        for label, action, output in rotate(contenders, round_index):
            table.add(label, *measure(action))
            for manager in managers.values():
                manager.close()  # deletion after the commit is not part of the save
            shutil.rmtree(output) if output.is_dir() else output.unlink()
    source.unlink()
    table.print_rates()
    table.ratio("save / torch.save+fsync (speed)", "CheckpointManager.save", "torch.save+fsync", ">= 1.2", speed=True)
    table.ratio("save / dd (speed)", "CheckpointManager.save", "dd (random bytes, fsync)", ">= 0.9", speed=True)
    if old is not None:
        table.ratio("save / before issue 15 (speed)", "CheckpointManager.save", "before issue 15 (sha256)", "",
                    speed=True)
        table.ratio("CPU seconds: save / before issue 15", "CheckpointManager.save", "before issue 15 (sha256)",
                    "<= 0.6", of="cpu")


# ----- 2. load ----------------------------------------------------------------------------------


def bench_load(name: str, state: dict[str, torch.Tensor], work: Path, rounds: int, old: Any) -> None:
    plain = work / "plain.pt"
    torch.save(state, plain)
    new = CheckpointManager(work / "new", keep=1)
    new.save(1, state)
    new_file = work / "new" / "step-00000001" / "rank-00000.pt"
    contenders: list[tuple[str, Callable[[], object], Path]] = [
        ("torch.load", lambda: torch.load(plain), plain),
        ("latest() + load()", lambda: new.load(new.latest()), new_file),
    ]
    if old is not None:
        baseline = old.CheckpointManager(work / "old", keep=1)
        baseline.save(1, state)
        contenders.append(("before issue 15", lambda: baseline.load(baseline.latest()),
                           work / "old" / "step-00000001" / "rank-00000.pt"))
    table = Table(f"load, {name}", nbytes(state))
    for round_index in range(rounds):
        for label, action, path in rotate(contenders, round_index):
            drop_from_cache(path)
            table.add(f"{label}, cold", *measure(action))
            warm(path)
            table.add(f"{label}, warm", *measure(action))
    new.close()
    table.print_seconds()
    for temperature in ("cold", "warm"):
        table.ratio(f"latest()+load() / torch.load, {temperature} (time)", f"latest() + load(), {temperature}",
                    f"torch.load, {temperature}", "<= 1.2")
        if old is not None:
            table.ratio(f"before issue 15 / torch.load, {temperature} (time)", f"before issue 15, {temperature}",
                        f"torch.load, {temperature}", "")
    for path in (plain, work / "new", work / "old"):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


# ----- 3. save_dcp ------------------------------------------------------------------------------


def bench_dcp(name: str, state: dict[str, torch.Tensor], work: Path, rounds: int, old: Any) -> None:
    def run_torch_save() -> None:
        torch.save(state, work / "plain.pt")
        fsync_file(work / "plain.pt")

    managers = {"new": CheckpointManager(work / "new", keep=1)}
    contenders: list[tuple[str, Callable[[], object], Path]] = [
        ("torch.save+fsync", run_torch_save, work / "plain.pt"),
        ("save_dcp", lambda: managers["new"].save_dcp(1, state), work / "new"),
    ]
    if old is not None:
        managers["old"] = old.CheckpointManager(work / "old", keep=1)
        contenders.append(("save_dcp before issue 15", lambda: managers["old"].save_dcp(1, state), work / "old"))
    table = Table(f"save_dcp, {name}", nbytes(state))
    for round_index in range(rounds):
        for label, action, output in rotate(contenders, round_index):
            table.add(label, *measure(action))
            for manager in managers.values():
                manager.close()
            shutil.rmtree(output) if output.is_dir() else output.unlink()
    table.print_rates()
    table.ratio("save_dcp / torch.save+fsync (speed)", "save_dcp", "torch.save+fsync", ">= 1.0", speed=True)
    if old is not None:
        table.ratio("before issue 15 / torch.save+fsync (speed)", "save_dcp before issue 15", "torch.save+fsync", "",
                    speed=True)


# ----- 4. save_async in a training loop ---------------------------------------------------------


def bench_async(work: Path, rounds: int, old: Any, batch: int, steps: int = 20, every: int = 5) -> None:
    torch.manual_seed(0)
    width = 4096
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    inputs, targets = torch.randn(batch, width), torch.randn(batch, width)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()  # creates the momentum buffers: the state is now weights + momentum
    state_size = sum(t.numel() * 4 for t in model.state_dict().values()) * 2

    def loop(manager_class: Any | None) -> None:
        manager = manager_class(work / "async", keep=2) if manager_class else None
        for index in range(steps):
            step()
            if manager is not None and index % every == 0:
                manager.save_async(index, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if manager is not None:
            manager.close()  # the last save's write counts too

    contenders: list[tuple[str, Callable[[], object]]] = [
        ("no saves", lambda: loop(None)),
        ("save_async every 5", lambda: loop(CheckpointManager)),
    ]
    if old is not None:
        contenders.append(("save_async before issue 15", lambda: loop(old.CheckpointManager)))
    table = Table(f"{steps} training steps (batch {batch}), state {state_size / 2**20:.0f} MiB", state_size)
    for round_index in range(rounds):
        for label, action in rotate(contenders, round_index):
            table.add(label, *measure(action))
            shutil.rmtree(work / "async", ignore_errors=True)
    table.print_seconds()
    table.ratio("loop with save_async / without (time)", "save_async every 5", "no saves", "<= 1.15")
    table.ratio("the same, CPU seconds (less sensitive to other load)", "save_async every 5", "no saves", "",
                of="cpu")
    if old is not None:
        table.ratio("before issue 15 / without (time)", "save_async before issue 15", "no saves", "")
        table.ratio("before issue 15 / without (CPU seconds)", "save_async before issue 15", "no saves", "",
                    of="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="save,load,dcp,async", help="sections to run (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory on the disk to test (default: a temporary one)")
    parser.add_argument("--baseline-ref", default=BEFORE_ISSUE_15, help="git ref of the baseline code ('' for none)")
    parser.add_argument("--batch", type=int, default=64, help="batch size of the training steps in section 4")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # save_dcp in one process
    sections = set(args.only.split(","))
    old = baseline_module(args.baseline_ref) if args.baseline_ref else None
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.dir))
    print(f"directory {work}; {args.rounds} rounds; torch {torch.__version__}, {torch.get_num_threads()} threads;"
          f" load: {os.getloadavg()}")
    try:
        states = {"1 GiB as 20 tensors": few_large, "1 GiB as 1,992 tensors": transformer}
        if "save" in sections:
            for name, make in {**states, "500 MiB as 2,000 tensors of 256 KiB": many_small}.items():
                bench_save(name, make(), work, args.rounds, old)
        if "load" in sections:
            for name, make in states.items():
                bench_load(name, make(), work, args.rounds, old)
        if "dcp" in sections:
            for name, make in states.items():
                bench_dcp(name, make(), work, args.rounds, old)
        if "async" in sections:
            bench_async(work, args.rounds, old, args.batch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
