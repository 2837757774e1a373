"""The local provider: a real Slurm cluster (munged, MariaDB, slurmdbd, slurmctld, N slurmd) on one machine."""

from clusterkit.providers.local.cluster import LocalCluster, LocalProvider

__all__ = ["LocalCluster", "LocalProvider"]
