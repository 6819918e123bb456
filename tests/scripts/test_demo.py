"""The README's main job (`python -m scripts.demo`) runs end to end and shows what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_tells_the_whole_story(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.demo", "--boot-seconds", "0.2", "--max-steps", "4"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    # in this order: compile on CPU, pipelined training reusing it, eval, the refused WS job,
    # the seed's mode change (exact strings), the seed's csrun_wse line training, the queue view
    story = [
        "$ csrun_cpu python run.py --mode=compile_only",
        "Running: srun --pty --nodes=1",
        "Estimated Overall Performance",
        "Launching: srun --unbuffered --kill-on-bad-exit",
        "Reusing existing compilation in model_dir/cs_",
        "Waiting for 5 streamer(s) to prime the data pipeline",
        "| Train Device=CSX, Step=300",
        "Metric: accuracy = 0.9",
        "error: System cs2-1 is ACTIVE in PIPELINED mode but this job needs WEIGHT_STREAMING",
        "Configured Execution Mode : PIPELINED",
        "Selected execution mode configuration: ✔ Weight Streaming",
        "System activated in Weight Streaming mode.",
        "Configured Execution Mode : WEIGHT_STREAMING",
        "$ csrun_wse --total-nodes 14 --tasks-per-node 8 --cpus-per-task 16 --single-task-nodes 2"
        " --cyclic python-ws run.py --model_dir model_dir --cs_ip 127.0.1.1 --params"
        " configs/params_continuous_pretraining.yaml --mode train --max_steps 4",
        "cs> jobs show",
        "Saving checkpoint at global step 0",
        "Waiting for 96 streamer(s) to prime the data pipeline",
        "Streamers are ready",
        "Loss for final step:",
    ]
    at = 0
    for text in story:
        found = out.find(text, at)
        assert found >= 0, f"{text!r} missing after position {at}:\n{out[at:at + 3000]}"
        at = found + len(text)
    assert re.search(r"\n\S+\s+python-ws\s+root\s+R\s", out), "the queue view shows the job running"
    for artifact in ("model-ckpt-300.npz", "model-ckpt-4.npz", "compile_report.txt",
                     "wafer_map.png", "performance/performance.json", "train/params_train.yaml",
                     "CS-2 estimate: est_samples_per_sec"):
        assert artifact in out
    assert "Traceback" not in out + proc.stderr
