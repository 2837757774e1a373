"""All-reduce one tensor across every rank with gloo (CPU), started by torchrun.

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the default `env://` init reads them.
Rank r contributes r + 1, so the sum is n(n+1)/2 for n ranks. Rank 0 prints it and checks it.
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    expected = world_size * (world_size + 1) / 2
    if rank == 0:
        host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
        print(f"all-reduce over {world_size} ranks on {host}: {tensor.tolist()} (expected {expected})", flush=True)
        assert torch.all(tensor == expected), f"all-reduce gave {tensor.tolist()}, expected {expected}"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
