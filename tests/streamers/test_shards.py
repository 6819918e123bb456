"""A data_dir LIST is sharded across the streamers in order, as across input workers.

Needs the zoo's runtime/data/shards.py (data_dir lists); skipped on a tree without it."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from cs2sim.runtime.data import build_input
from cs2sim.runtime.job.hub import ChiefHub
from cs2sim.runtime.job.remote_stream import RemoteStream, for_streamers
from cs2sim.runtime.job.roles import task_info
from streamers.conftest import GPT2_TINY, Job, chief_params, slurm_env

pytest.importorskip("cs2sim.runtime.data.shards")


def test_a_data_dir_list_is_sharded_across_streamers_like_input_workers(tmp_path, jobs):
    dirs = []
    rng = np.random.default_rng(3)
    for k in range(4):  # 4 shard directories of different sizes, each its own train.bin
        d = tmp_path / f"shard{k}"
        d.mkdir()
        rng.integers(0, 256, 4000 + 1000 * k).astype(np.uint16).tofile(d / "train.bin")
        dirs.append(str(d))
    with open(GPT2_TINY) as f:
        doc = yaml.safe_load(f)
    doc["train_input"]["data_dir"] = dirs
    cfg = tmp_path / "params.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    argv = ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md")]
    params = chief_params("gpt2", argv)
    seed = params["runconfig"]["seed"]
    sizes = (1, 2)  # chief + 2 streamers
    hub = ChiefHub(task_info(slurm_env("931", 0, sizes)), tmp_path / "md")
    jobs.append(Job("gpt2", argv, sizes, tmp_path, job="931", procids=[1, 2]))
    # what 2 input workers of a plain run make: the zoo's ShardPlan over 2 shards of 2 dirs each
    local = build_input(for_streamers(params, "train", 2), "train", "gpt2", seed)
    assert hasattr(local.plan, "shard_of") and local.plan.n == 2
    remote = RemoteStream(
        hub, build_input(for_streamers(params, "train", 2), "train", "gpt2", seed), "train"
    )
    try:
        for g in range(2 * local.batches_per_epoch + 3):
            want, got = next(local), next(remote)
            assert all(np.array_equal(want[k], got[k]) for k in want), f"batch {g}"
            assert remote.last_streamer == g % 2  # streamer r reads shard r's directories only
    finally:
        remote.close()
        local.close()
        hub.end(0)
    assert jobs[-1].wait(300) == [0, 0]  # a hang guard, generous for a loaded host
