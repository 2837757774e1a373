"""clusterkit: train large models on AWS with Slurm.

Kept import-light on purpose: `clusterkit --help` must not pull in boto3, submitit or jinja2.
"""

__version__ = "0.1.0"
