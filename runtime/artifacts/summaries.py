"""TensorBoard event files, written with tensorboardX (a maintained writer).

Training summaries go to `<model_dir>` (the Weight Streaming Quickstart: "Tensorboard event files
are stored in <model_dir> directory"), evaluation summaries to `<model_dir>/eval/`. Tags (Model
Zoo's TensorBoard
tags, docs/sources.md):

    training   loss, local_samples_per_sec (Rate), avg_samples_per_sec (GlobalRate),
               avg_steps_per_sec (GlobalRate / batch size), lr, loss_scale
    eval       loss (the average eval loss) and each metric by name (accuracy, perplexity)

Each logged step's event carries the wall time of the clock reading its Rate and GlobalRate were
computed at, so the values can be recomputed from the file. A resumed run passes `purge_step`
so TensorBoard discards events a crashed run wrote past the checkpoint it resumes from, and the
step axis continues without a fold.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.atomic import ensure_dir

__all__ = ["Summaries", "TRAIN_TAGS", "EVAL_DIR"]

TRAIN_TAGS = (
    "loss",
    "local_samples_per_sec",
    "avg_samples_per_sec",
    "avg_steps_per_sec",
    "lr",
    "loss_scale",
)
EVAL_DIR = "eval"

# tensorboardX warns "NaN or Inf found in input tensor." for every such scalar, through a logger
# nobody configured (so Python prints it raw); the trainer reports a non-finite loss itself.
logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)


def _summary_writer_class() -> Any:
    """tensorboardX's SummaryWriter, imported without torch.

    tensorboardX imports torch, when it is installed (bench/ installs it), only to accept torch
    tensors; we log Python floats, and importing torch costs seconds at every run.py start. A
    None in sys.modules makes that `import torch` fail as if torch were absent, which
    tensorboardX handles; if torch is already loaded there is nothing to save.
    """
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter
    else:
        sys.modules["torch"] = None  # type: ignore[assignment]  # None: "not importable"
        try:
            from tensorboardX import SummaryWriter
        finally:
            del sys.modules["torch"]
    return SummaryWriter


class Summaries:
    """One TensorBoard event file in `logdir`; scalars by step."""

    def __init__(
        self,
        logdir: Path,
        purge_step: int | None = None,
        flush_secs: int = 30,
        within: Path | None = None,
    ) -> None:
        # below `within` (model_dir), a symlink or a file in logdir's place is refused: the
        # event file is opened by tensorboardX, so the directory is checked before it is
        self.logdir = ensure_dir(Path(logdir), within)
        # tensorboardX names files by the second; the suffix keeps two runs within one second
        # apart and in order (TensorBoard reads a directory's files in name order)
        self._writer = _summary_writer_class()(
            logdir=str(self.logdir),
            purge_step=purge_step,
            flush_secs=flush_secs,
            filename_suffix=f".{time.time_ns()}",
        )

    def scalars(self, step: int, values: dict[str, float], walltime: float | None = None) -> None:
        """Write one scalar per tag at `step` (and `walltime`, seconds since the epoch)."""
        for tag, value in values.items():
            self._writer.add_scalar(tag, float(value), global_step=step, walltime=walltime)

    def flush(self) -> None:
        """Push buffered events to disk."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def __enter__(self) -> Summaries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
