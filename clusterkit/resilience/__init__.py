"""Surviving failures: checkpoints that are always valid, heartbeats, a run id that outlives requeues.

Import-light: torch is imported inside the functions that need it.
"""

from clusterkit.resilience.checkpoint import Checkpoint, CheckpointManager, DamagedCheckpoint, verify_checkpoint
from clusterkit.resilience.heartbeat import heartbeat, read_heartbeats, stop_requested
from clusterkit.resilience.run_identity import RunIdentity, run_identity

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "DamagedCheckpoint",
    "RunIdentity",
    "heartbeat",
    "read_heartbeats",
    "run_identity",
    "stop_requested",
    "verify_checkpoint",
]
