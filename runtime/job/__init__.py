"""runtime/job: a run.py process as part of a launched job and of a CS-2 system.

    roles.py          which task of a csrun_wse job this process is (chief, coordinator,
                      input streamer), from Slurm's environment only
    streamers.py      the input streamer tasks and the chief's hub they feed over TCP
    channel.py        that channel frame by frame: bounded frames, the job's secret, the
                      handshake
    rendezvous.py     where a job's tasks find their chief (under model_dir)
    input_measure.py  the input pipeline measured alone (cs_input_analyzer)
    cs_run.py         the `--cs_ip` path: the system's gate, the job record, the executors
    flow.py           which wrapper started the run (`python` / `python-ws` / `python-pt`)
    bootstrap.py      lets `python run.py` find the project and its venv (stdlib only)

May import training/, executors/, compiler/, data/ and below, and system/.
Imported by runtime/cli and scripts/; never by training/ or anything below it.
"""
