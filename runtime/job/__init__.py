"""runtime/job: a run.py process as part of a launched job and of a CS-2 system.

    roles.py          which task of a csrun_wse job this process is (chief, coordinator,
                      input streamer), from Slurm's environment only
    channel.py        the chief's channel: frames over system/wire.py, the secret, the proofs
    door.py           the chief's door: handshakes under one deadline, lanes evicted oldest-first
    hub.py            the chief's hub: its listener, one link per streamer, sessions
    remote_stream.py  the chief's input stream (RemoteStream), fed by the streamers in order
    client.py         a task's connection to its chief (rendezvous, handshake, orders)
    streamers.py      the input streamer tasks (ShardProducer, the streaming loop)
    coordinator.py    coordinator tasks: they end with the chief's outcome
    ended.py          the chief's ended record (ended.json), for tasks not connected to it
    rendezvous.py     where a job's tasks find their chief (0700 directory, 0600 files)
    input_measure.py  the input pipeline measured alone (cs_input_analyzer)
    cs_run.py         the `--cs_ip` path: the system's gate, the job record, the executors
    flow.py           which wrapper started the run (`python` / `python-ws` / `python-pt`)
    bootstrap.py      lets `python run.py` find the project and its venv (stdlib only)

May import training/, executors/, compiler/, data/ and below, and system/.
Imported by runtime/cli and scripts/; never by training/ or anything below it.
"""
