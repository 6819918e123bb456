"""runtime/artifacts: what a run leaves in model_dir, and how it is written.

    atomic.py       crash-safe writes: a hidden temp file, fsync, rename
    checkpoint.py   `model-ckpt-<step>.npz` and the `checkpoint` index
    summaries.py    TensorBoard event files (tensorboardX)
    perf.py         `performance/performance.json`

The compile directory and `compile_report.txt` are the compiler's (runtime/compiler/cache.py,
report.py); the run's log is runtime/cli/runlog.py's.
May import only the standard library, numpy, tensorboardX and system.errors.
Everything above it may import it.
"""
