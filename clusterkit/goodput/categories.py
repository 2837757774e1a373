"""The categories of a run's wall-clock time: every second falls into exactly one.

The per-run ledger (`clusterkit goodput JOB`) and the simulator (`clusterkit goodput simulate`) both
report seconds under these names, in this order, so their tables and JSON line up.
"""

from __future__ import annotations

PRODUCTIVE = "productive"  # training steps whose results were kept
LOST_WORK = "lost_work"  # steps computed, then lost to a failure and computed again
CHECKPOINT_STALL = "checkpoint_stall"  # the training loop blocked by a save (or slowed by a background one)
DETECTION = "detection"  # from a fault to the decision to recover
RECOVERY = "recovery"  # requeue, scheduling, waiting for a replacement, job start, imports, rendezvous, load
QUEUED = "queued"  # waiting in the queue before the first start
HANG = "hang"  # a step that made no progress, until the hang was detected
OTHER = "other"  # whatever the records cannot place

CATEGORIES: tuple[str, ...] = (PRODUCTIVE, LOST_WORK, CHECKPOINT_STALL, DETECTION, RECOVERY, QUEUED, HANG, OTHER)
