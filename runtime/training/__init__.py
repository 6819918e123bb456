"""runtime/training: the training loop, the "user node" of a run.

    trainer.py      train / eval / eval_all / train_and_eval over an executor
    runconfig.py    the loop's view of `runconfig` and the parts it builds (model, optimizer,
                    loss scaler, input streams)
    callbacks.py    the events a run reports while it runs
    metrics.py      Rate and GlobalRate, as Model Zoo computes them
    host_memory.py  refuses up front a run the host cannot hold

May import executors/, data/, params, nn/, numerics/, artifacts/ and system/.
Imported by runtime/job and runtime/cli; never by executors/, compiler/ or below.
"""
