"""Submitting Python functions with submitit on a cluster reached over SSH.

This file's source is sent as the program of `PYTHON -c SOURCE COMMAND ...` on the cluster's login
node, so it needs nothing there but Python, submitit and cloudpickle (which the nodes need anyway to
run the functions); clusterkit itself need not be installed there. It imports nothing of clusterkit.

    submit FOLDER     stdin: a cloudpickled request {"python", "parameters", "calls" | "items" + "function"};
                      stdout: JSON, one {"job_id", "stdout", "stderr"} per job
    result FOLDER ID  stdout: the job's result pickle as submitit wrote it (("success"|"error", value))
    versions          stdout: JSON of the Python and package versions there (for the preflight)
"""

import json
import sys


def submit(folder: str) -> None:
    import cloudpickle
    import submitit

    request = cloudpickle.loads(sys.stdin.buffer.read())
    executor = submitit.SlurmExecutor(folder=folder, python=request["python"])
    executor.update_parameters(**request["parameters"])
    if "items" in request:
        jobs = executor.map_array(request["function"], request["items"])
    else:
        jobs = [executor.submit(function, *args, **kwargs) for function, args, kwargs in request["calls"]]
    json.dump([{"job_id": str(job.job_id), "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
               for job in jobs], sys.stdout)


def result(folder: str, job_id: str) -> None:
    import submitit

    job = submitit.SlurmJob(folder=folder, job_id=job_id)
    with open(job.paths.result_pickle, "rb") as stream:
        sys.stdout.buffer.write(stream.read())


def versions() -> None:
    found = {"python": "%d.%d" % sys.version_info[:2]}
    for package in ("submitit", "cloudpickle"):
        try:
            found[package] = __import__(package).__version__
        except ImportError:
            found[package] = None
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"submit": submit, "result": result, "versions": versions}[command](*arguments)
