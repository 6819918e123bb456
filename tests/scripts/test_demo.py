"""The README's main job (`python -m scripts.demo`) runs end to end and shows what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_tells_the_whole_story(tmp_path):
    mine = tmp_path / "mine"  # the user's own system: the demo never touches it, and says where
    env = dict(os.environ, TMPDIR=str(tmp_path), CS2_HOME=str(mine))
    proc = subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.demo", "--boot-seconds", "0.2", "--max-steps", "4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    # in this order: compile on CPU, pipelined training reusing it, eval, the refused WS job,
    # the Quickstart's mode change (exact strings), its csrun_wse line training, the queue view
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
        # the GPT-J step says its config is a small stand-in and compiles the real 6B shape
        "is GPT-J's\n#    architecture at a small size (2 layers, width 128, 4 heads, vocabulary"
        " 257): a stand-in",
        "The real 6B shape (configs/params_gptj_6b.yaml: 28 layers, width 4096",
        "$ csrun_cpu python-ws run.py --mode=compile_only -p configs/params_gptj_6b.yaml",
        "Compilation for WEIGHT_STREAMING finished",
        "$ csrun_wse --total-nodes 14 --tasks-per-node 8 --cpus-per-task 16 --single-task-nodes 2"
        " --cyclic python-ws run.py --model_dir model_dir --cs_ip 127.0.1.1 --params"
        " configs/params_continuous_pretraining.yaml --mode train --max_steps 4",
        "Launching: srun --unbuffered --kill-on-bad-exit --exclusive",  # before the queue view
        "cs> jobs show",
        "Loss for final step:",
        "# GPT-J, CS-2 estimates from the compiler",
        "#    the stand-in trained above (2 layers, width 128",
        "#    GPT-J 6B, compiled only (28 layers, width 4096",
        "model-ckpt-4.npz",
        "performance/performance.json",
        "# 6. The system and its audit log",
        # the appliance flow on the four-system cluster: compile wsjob, execute on two, csctl
        "# 7. Today's Wafer-Scale Cluster (appliance mode)",
        "$ python run.py CSX -p configs/params_small.yaml --mode train",
        "compile job id: wsjob-",
        "Compile was successful!",
        "execute job id: wsjob-",
        "Preparing to execute using 2 CSX",
        "Training completed successfully!",
        "$ csctl get jobs -a",
        "SUCCEEDED  cs2-1,cs2-2",
        f"# your own system, kept in {mine} (your $CS2_HOME)",  # the CS2_HOME in force
    ]
    at = 0
    for text in story:
        found = out.find(text, at)
        assert found >= 0, f"{text!r} missing after position {at}:\n{out[at : at + 3000]}"
        at = found + len(text)
    assert re.search(r"\n\S+\s+python-ws\s+root\s+R\s", out), "the queue view shows the job running"
    launch = out.find("Launching: srun --unbuffered --kill-on-bad-exit --exclusive")
    # the Weight Streaming Quickstart's exact line, end to end: 98 real tasks, the CS-2 steps
    for text in (
        "Saving checkpoint at global step 0",
        "Waiting for 96 streamer(s) to prime the data pipeline",
        "Streamers are ready",
        "| Train Device=CSX, Step=4,",
    ):
        assert launch < out.find(text, launch) < out.rfind("Loss for final step:"), text
    for line in out.splitlines():  # the estimates are computed numbers, both of them
        if line.startswith(("#    the stand-in trained above", "#    GPT-J 6B, compiled only")):
            assert float(line.rsplit(": ", 1)[1].replace(",", "")) > 0, line
    assert "Input streamer" not in out  # the chief speaks for its 96 streamers
    assert "~/.cs2sim" not in out and not mine.exists()
    # the demo's directory is gone (no --keep), and its hint says so instead of a dead path
    assert not list(tmp_path.glob("cs2demo-*"))
    assert "--keep` keeps it to continue on" in out and "continue on the demo's system" not in out
    for artifact in (
        "model-ckpt-300.npz",
        "model-ckpt-4.npz",
        "compile_report.txt",
        "wafer_map.png",
        "performance/performance.json",
        "train/params_train.yaml",
        "CS-2 estimate: est_samples_per_sec",
    ):
        assert artifact in out
    assert "Traceback" not in out + proc.stderr
