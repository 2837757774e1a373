#!/usr/bin/env bash
# The main job, end to end on the local provider, set-up included (idempotent):
# a real 4-node Slurm cluster on this machine, a 2-node job on it, then the cluster is deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh >/dev/null
ck() { .venv/bin/clusterkit "$@"; }
name=demo
ck delete-cluster "$name" >/dev/null 2>&1 || true
ck create-cluster --provider local --name "$name" --nodes 4 --gpus-per-node 8
trap 'ck delete-cluster "$name"' EXIT
ck describe-cluster "$name"
eval "$(ck local env "$name")"
out=$(mktemp -d)/hello.out
chmod 777 "$(dirname "$out")"
job=$(sbatch --parsable --nodes=2 --gpus-per-node=8 --output="$out" \
  --wrap 'srun bash -c "echo hello from \$SLURMD_NODENAME with GPUs \$CUDA_VISIBLE_DEVICES"')
echo "submitted job $job"
for _ in $(seq 150); do
  state=$(sacct -n -X -P -o State -j "$job" | tail -n 1)
  case "$state" in COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL) break ;; esac
  sleep 0.2
done
echo "job $job: $state"
sort "$out"
[ "$state" = COMPLETED ]
