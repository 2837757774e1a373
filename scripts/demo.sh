#!/usr/bin/env bash
# The main job, end to end on this machine, set-up included (idempotent; run as root):
# a real 2-node Slurm cluster at ParallelCluster's own timings (SlurmdTimeout 180 s) that replaces failed
# nodes as its clustermgtd does, a 2-node PyTorch training job under clusterkit's supervisor, a node going
# silent in the middle of it (frozen: no connection reset, as a real loss), found by its liveness beacon in
# seconds and marked DOWN, the node replaced, and the run resuming by itself at full size from its last valid
# checkpoint, ending with weights bit-identical to a run that never stopped; then where its time went (goodput)
# and its timeline (demo-timeline.html, beside this repository's README).
# `--slurm 24.11` runs it on Debian 13's Slurm (built once by scripts/install-slurm.sh) instead of the host's.
set -euo pipefail
slurm=host
case "${1:-}" in
  --slurm) slurm="${2:-}"; shift 2 || true ;;
  --slurm=*) slurm="${1#--slurm=}"; shift ;;
esac
[ $# -eq 0 ] || { echo "usage: bash scripts/demo.sh [--slurm host|24.11]" >&2; exit 2; }
cd "$(dirname "$0")/.."
repo=$(pwd)
setup_log=$(mktemp)
{ bash scripts/setup-dev.sh && bash scripts/install-slurm.sh --slurm "$slurm"; } >"$setup_log" 2>&1 || {
  cat "$setup_log"; exit 1; }
ck() { "$repo/.venv/bin/clusterkit" "$@"; }
field() { "$repo/.venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }

name=demo
ck delete-cluster "$name" >/dev/null 2>&1 || true
ck create-cluster --provider local --name "$name" --nodes 2 --timings parallelcluster --boot-delay 10 --slurm "$slurm"
work=$(mktemp -d)
trap 'ck delete-cluster "$name"; rm -rf "$work"' EXIT
ln -s "$repo/examples" "$work/examples"
cd "$work"

echo; echo "== the job: examples/jobs/local-resilient.yaml (the exact script: clusterkit submit --dry-run)"
job=$(ck submit examples/jobs/local-resilient.yaml --cluster "$name" --output json | field job_id)
log=$(ck status "$job" --cluster "$name" --output json | field stdout)
echo "submitted job $job; log: $log"
for _ in $(seq 600); do grep -q "checkpoint at step 20" "$log" 2>/dev/null && break; sleep 0.2; done
eval "$(ck local env "$name")"  # plain Slurm commands now talk to the demo cluster
victim=$(scontrol show hostnames "$(squeue -h -j "$job" -o %N)" | tail -n 1)

echo; echo "== 3 a.m.: node $victim goes silent (its slurmd and everything it runs stopped, no connection closed)"
ck local freeze-node "$name" "$victim"
for _ in $(seq 300); do
  sinfo -h -n "$victim" -o "%t %E" | grep -q "^down" && break; sleep 0.1
done
echo "Slurm now says $victim is down: $(sinfo -h -n "$victim" -o "%E")"
# The job needs every node: it waits for the replacement (clustermgtd's 60 s loop, then a fresh $victim after
# a 10 s boot).
for _ in $(seq 450); do
  ck status "$job" --cluster "$name" | grep -q "replacement" && break; sleep 0.2
done
ck status "$job" --cluster "$name"
ck watch "$job" --cluster "$name"

echo; echo "== every attempt of job $job, and each recovery explained"
ck status "$job" --cluster "$name"
grep -E "resuming from step|final weights" "$log"

echo; echo "== where every second went, and the run as a picture"
ck goodput "$job" --cluster "$name"
ck timeline "$job" --cluster "$name" --output-file "$repo/demo-timeline.html"

echo; echo "== the same training, never interrupted (torchrun on this machine)"
TRAIN_STEPS=60 STEP_SECONDS=0 CLUSTERKIT_CHECKPOINT_DIR="$work/uninterrupted" \
  "$repo/.venv/bin/torchrun" --standalone --nproc_per_node=2 examples/train_resilient.py 2>/dev/null | tail -n 1
resumed=$(cat runs/resilient/final_weights.sha256)
uninterrupted=$(cat uninterrupted/final_weights.sha256)
if [ "$resumed" = "$uninterrupted" ]; then
  echo "final weights are bit-identical: $resumed"
else
  echo "final weights differ: $resumed vs $uninterrupted" >&2
  exit 1
fi
