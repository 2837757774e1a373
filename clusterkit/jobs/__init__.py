"""Jobs: a job spec (spec.py), environment presets (environment.py) and sbatch rendering (render.py).

Import the submodules directly; this package imports nothing so that the CLI stays fast.
"""
