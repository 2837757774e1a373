"""Cluster providers: `local` (a real Slurm cluster on this machine) and `aws` (ParallelCluster)."""
