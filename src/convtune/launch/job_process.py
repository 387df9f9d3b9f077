"""One sweep job in a process of its own, started by the gpus launcher (convtune.launch.pool):

    python -m convtune.launch.job_process <job.pkl> <result.json>

job.pkl holds what Hydra's basic launcher hands to `run_job` for one job (the Hydra context, the task
function and the job's composed config), pickled by the launcher with cloudpickle. The job runs exactly as
under the basic launcher; its return value goes to <result.json>. The process ends with the job: a hang, a
crash or a sticky CUDA error takes no other job with it, and the next job starts in a new process. The pool starts
it through `forked`, from a server that has done the imports once (convtune.forked).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from convtune import interrupts
from convtune.forked import become

interrupts.install()  # first: the job's run is closed KILLED on SIGINT/SIGTERM from here on


def main() -> None:
    import cloudpickle
    from hydra import version
    from hydra.core.utils import configure_log, run_job, setup_globals

    job_file, result_file = Path(sys.argv[1]), Path(sys.argv[2])
    job = cloudpickle.loads(job_file.read_bytes())
    version.setbase(job["version_base"])  # as the sweep's @hydra.main set it (the working-directory rule)
    config = job["config"]
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    ret = run_job(hydra_context=job["hydra_context"], task_function=job["task_function"], config=config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    value = ret.return_value  # raises what the task raised: the launcher reads the traceback from the log
    result_file.write_text(json.dumps({"return_value": value if isinstance(value, (int, float)) else None}))


def forked(argv: list[str], env: dict[str, str], cwd: str, log_file: str) -> None:
    """The job, in a process forked from the preloaded server (convtune.forked): this process is first made what
    `python -m convtune.launch.job_process <argv>` would be if started with `env` in `cwd`, leading a process group of
    its own (setsid), its output going to `log_file`."""
    os.setsid()
    become(env, cwd, log_file)  # CUDA_VISIBLE_DEVICES among the environment, before CUDA starts
    sys.argv = [__file__, *argv]
    interrupts.main_then_exit(main)


if __name__ == "__main__":
    interrupts.main_then_exit(main)
