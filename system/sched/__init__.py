"""The embedded Slurm-style scheduler and task launcher behind csrun_wse / csrun_cpu.

* request.py  JobRequest / Component and the srun command line (one builder for both backends)
* layout.py   where each task runs and its SLURM_* environment
* fit.py      the pure scheduling decision (FIFO, exclusive nodes, GRES)
* queue.py    jobs and allocations in the system store, reaping of dead launchers
* runner.py   the step: forked / exec'ed tasks, merged output, kill-on-bad-exit
* backend.py  the Backend interface and the embedded implementation
* flags.py    the csrun_wse / csrun_cpu command lines (Model Zoo's user scripts, docs/sources.md)
"""
