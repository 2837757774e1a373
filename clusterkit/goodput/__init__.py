"""Goodput: where a run's wall-clock time goes, and what it would be at scale.

`categories` names the one set of categories every second of a run falls into (shared by the per-run
ledger and the simulator); `model` holds the failure mix and the default costs, each with its source;
`simulator` is the Monte Carlo of a run of N GPUs for D days under a recovery policy; `advice` chooses
the checkpoint interval and the number of spare nodes. Pure and offline: numpy is imported inside the
simulator's functions only, so the CLI starts without it.
"""
