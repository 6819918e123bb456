"""The task a layout case runs under srun: records what Slurm told this task.

Usage: python3 task_env.py OUT_DIR
Writes OUT_DIR/task-<het offset>-<procid>.json with every SLURM* variable (SLURMD_NODENAME
included) and the host name. A file per task, not stdout, so --unbuffered output from many tasks
cannot interleave.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("SLURM")}
    record = {"hostname": socket.gethostname(), "env": env}
    name = f"task-{env.get('SLURM_HET_JOB_OFFSET', 'x')}-{env.get('SLURM_PROCID', 'x')}.json"
    tmp = out / (name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.rename(out / name)


if __name__ == "__main__":
    main()
