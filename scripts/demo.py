"""The README's main job: a CS-2 installation's workflow, end to end, on a throwaway system.

    python -m scripts.demo [--boot-seconds 2] [--max-steps 20] [--keep]

Every step runs the real command (a `cs`, `csrun_cpu`, `csrun_wse` or `run.py` process) against
a throwaway $CS2_HOME, echoed as the user or admin would type it, followed by what it printed:

1. A user compiles FC-MNIST on a CPU node first (Cerebras' Performance Optimization Practices:
`csrun_cpu python run.py
   --mode=compile_only`) and reads the estimate in compile_report.txt.
2. The user trains it on the CS-2 in pipelined mode with `csrun_wse` (the compile is reused),
   then evaluates the checkpoint on the host.
3. The user tries the Weight Streaming Quickstart's weight-streaming command: the system is
PIPELINED, so it is refused
   before anything is allocated, naming the fix.
4. The admin changes the execution mode in `cs>` (the Weight Streaming Quickstart, Section 1).
5. GPT-J in weight streaming: the real 6B shape is compiled only, on a CPU node, for the
   compiler's estimate; then the user runs the Weight Streaming Quickstart's `csrun_wse ... --cyclic
   python-ws run.py ...` line unchanged but for a small --max_steps and the system's address. Its
   params file is GPT-J's architecture at a small size (a stand-in that trains on this host), and
   the demo says so, with both estimates side by side. The queue view is shown while the job runs.
6. What the runs left in their model_dirs.
7. The same user on today's Wafer-Scale Cluster (appliance mode), four CS-2s in weight
   streaming: `python run.py CSX ... --num_csx 2` (a compile wsjob, then an execute wsjob on two
   systems, run by the cluster management server), then `csctl get jobs -a`.

Output comes in the order things happen (a job's lines as it prints them). All throughput
figures are labelled: `Rate`/`GlobalRate` and samples_per_sec are measured on this host;
est_samples_per_sec is the compiler's CS-2 estimate. The demo's directory (its system, the model
copies and what the runs left) is removed at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

import cs2sim.runtime.modelzoo as modelzoo
from cs2sim.system import knobs
from cs2sim.system.store import default_home

MODELZOO = Path(modelzoo.__file__).resolve().parent
BIN = Path(sys.executable).parent  # the console scripts installed next to this interpreter
IP = "127.0.1.1"  # the built-in cluster's CS-2 (an identifier; nothing is contacted)

# The Weight Streaming Quickstart's command, unchanged but for <CS IP> and <num_train_steps>
QUICKSTART_LINE = (
    "csrun_wse --total-nodes 14 --tasks-per-node 8 --cpus-per-task 16 --single-task-nodes"
    " 2 --cyclic python-ws run.py --model_dir model_dir --cs_ip {ip} --params"
    " configs/params_continuous_pretraining.yaml --mode train --max_steps {steps}"
)

# The Weight Streaming Quickstart, Section 1: (caption, cs command, why it differs from what the
# admin types)
ADMIN_STEPS: list[tuple[str, str, str]] = [
    ("Step 2: check the current execution mode", "config execmode show", ""),
    (
        "Step 3: put the system in STANDBY",
        "system standby --yes",
        "the interactive shell asks: This puts the system in standby. Do you want to proceed?",
    ),
    (
        "Step 4: change the execution mode to Weight Streaming",
        "config execmode setup weight-streaming",
        "the interactive shell shows a menu instead",
    ),
    ("The change is pending until the next activation", "config execmode show", ""),
    ("Step 5: activate: the system reboots into the configured mode", "system activate", ""),
    ("The mode is now active", "config execmode show", ""),
]


class Demo:
    """Runs and echoes the steps; stops at the first unexpected exit code."""

    def __init__(self, home: Path, boot_seconds: float) -> None:
        self.home = home
        self.env = dict(os.environ, CS2_HOME=str(home), CS2_BOOT_SECONDS=f"{boot_seconds:g}")
        self.env.pop("CS2_CLUSTER", None)
        self.env.pop("CS2SIM_FLOW", None)

    def tool(self, word: str) -> str:
        """An installed console script by path (works without activating the venv)."""
        path = BIN / word
        return str(path) if path.exists() else word

    def run(
        self,
        argv: list[str],
        *,
        cwd: Path | None = None,
        expect: int = 0,
        shown: str | None = None,
        prompt: str = "$",
    ) -> subprocess.CompletedProcess[str]:
        """Echo the command as typed, run it, stream its output, check its exit code."""
        print(f"{prompt} {shown or shlex.join(argv)}", flush=True)
        words = [self.tool(argv[0]), *argv[1:]]
        proc = subprocess.run(
            words,
            cwd=cwd,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        if proc.returncode != expect:
            raise DemoStopped(
                f"`{shown or shlex.join(argv)}` exited {proc.returncode} (expected {expect})."
            )
        return proc

    def cs(self, command: str, expect: int = 0) -> None:
        self.run(["cs", "-c", command], expect=expect, shown=command, prompt="cs>")

    def model_copy(self, model: str) -> Path:
        """A user's working copy of a Model Zoo model directory (its run.py and configs)."""
        work = self.home.parent / model
        work.mkdir(exist_ok=True)
        shutil.copy(MODELZOO / model / "run.py", work / "run.py")
        shutil.copytree(MODELZOO / model / "configs", work / "configs", dirs_exist_ok=True)
        return work


class DemoStopped(Exception):
    pass


def show_artifacts(model_dir: Path) -> None:
    """List model_dir (compile directories summarised) and the labelled performance figures."""
    print(f"\n$ ls -R {model_dir.name}")
    for path in sorted(model_dir.rglob("*")):
        rel = path.relative_to(model_dir)
        if path.is_file() and not rel.parts[0].startswith("."):
            print(f"    {rel}  ({path.stat().st_size:,} bytes)")
    perf_files = sorted(model_dir.glob("**/performance.json"))
    if perf_files:
        perf = json.loads(perf_files[-1].read_text())
        host = {k: perf.get(k) for k in ("samples_per_sec", "total_samples", "total_time")}
        print(f"    performance.json, host measurement: {json.dumps(host)}")
        print(
            f"    performance.json, CS-2 estimate: est_samples_per_sec = "
            f"{perf.get('est_samples_per_sec')}"
        )
    print()


def show_report(model_dir: Path, lines: int = 7) -> None:
    """The head of the compile report (the Estimated Overall Performance block)."""
    reports = sorted(model_dir.glob("cs_*/compile_report.txt"))
    if reports:
        rel = reports[-1].relative_to(model_dir.parent)
        print(f"$ head -n {lines} {rel}")
        print("".join(reports[-1].read_text().splitlines(keepends=True)[:lines]))


def queue_view(
    demo: Demo,
    launched: threading.Event,
    proc: subprocess.Popen[str],
    say: Any,
    timeout: float = 120,
) -> None:
    """Once the launcher has launched, show `jobs show` as soon as the job is RUNNING (the queue
    view, as squeue shows it), between the job's own lines as it happens."""
    if not launched.wait(timeout):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run(
            [demo.tool("cs"), "-c", "jobs show"], env=demo.env, text=True, capture_output=True
        ).stdout
        if " R " in out:
            say(f"\n# In another terminal, while the job runs: the queue\ncs> jobs show\n{out}\n")
            return
        time.sleep(0.2)


def launch_live(demo: Demo, line: str, cwd: Path) -> int:
    """Run a launcher line, its output printed as it comes, the queue view in between."""
    print(f"$ {line}", flush=True)
    argv = [demo.tool("csrun_wse"), *shlex.split(line)[1:]]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=demo.env,
        text=True,
        bufsize=1,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lock = threading.Lock()
    launched = threading.Event()

    def say(text: str) -> None:
        with lock:
            sys.stdout.write(text)
            sys.stdout.flush()

    viewer = threading.Thread(target=queue_view, args=(demo, launched, proc, say), daemon=True)
    viewer.start()
    for out_line in proc.stdout or []:
        say(out_line)
        if out_line.startswith("Launching:"):
            launched.set()
    proc.wait()
    launched.set()
    viewer.join()
    return proc.returncode


def shape(params_file: Path) -> str:
    """A GPT model's size in words, from its params file: layers, width, heads, vocabulary."""
    m = yaml.safe_load(params_file.read_text())["model"]
    return (
        f"{m['num_hidden_layers']} layers, width {m['hidden_size']}, {m['num_heads']} heads, "
        f"vocabulary {m['vocab_size']:,}"
    )


def estimate(model_dir: Path) -> float | None:
    """est_samples_per_sec (the compiler's CS-2 estimate) from a model_dir's performance.json."""
    perf = model_dir / "performance" / "performance.json"
    return json.loads(perf.read_text()).get("est_samples_per_sec") if perf.is_file() else None


def story(demo: Demo, steps: int) -> None:
    """The seven steps, in order (the README lists them)."""
    fc = demo.model_copy("fc_mnist")
    gptj = demo.model_copy("gptj")
    pipelined_fc_mnist(demo, fc)
    quickstart = QUICKSTART_LINE.format(ip=IP, steps=steps)
    print(
        "# 3. The Weight Streaming Quickstart's weight-streaming job on a PIPELINED system: "
        "refused, nothing allocated"
    )
    demo.run(shlex.split(quickstart), cwd=gptj, expect=69, shown=quickstart)
    print()

    print(
        "# 4. The administrator changes the execution mode "
        "(the Weight Streaming Quickstart, Section 1)\n"
    )
    for caption, command, note in ADMIN_STEPS:
        print(f"# {caption}" + (f" ({note})" if note else ""))
        demo.cs(command)
        print()
    weight_streaming_gptj(demo, gptj, quickstart)
    print("# 6. The system and its audit log")
    demo.cs("system show; jobs show --all; audit show --last 6")
    appliance(demo, steps)


def pipelined_fc_mnist(demo: Demo, fc: Path) -> None:
    """Steps 1 and 2: compile on a CPU node, train on the CS-2 reusing it, evaluate."""
    print(
        "# 1. Compile on a CPU node first (Cerebras' Performance Optimization Practices): "
        "validate and compile, read the estimate"
    )
    demo.run(
        [
            "csrun_cpu",
            "python",
            "run.py",
            "--mode=compile_only",
            "-p",
            "configs/params_small.yaml",
            "-o",
            "model_dir",
            "--cs_ip",
            IP,
        ],
        cwd=fc,
    )
    show_report(fc / "model_dir")

    print("# 2. Train FC-MNIST on the CS-2 (pipelined): the compile above is reused")
    demo.run(
        [
            "csrun_wse",
            "--total-nodes",
            "3",
            "--tasks-per-node",
            "2",
            "--cpus-per-task",
            "16",
            "python",
            "run.py",
            "--mode",
            "train",
            "-p",
            "configs/params_small.yaml",
            "-o",
            "model_dir",
            "--cs_ip",
            IP,
        ],
        cwd=fc,
    )
    print("\n# ... and evaluate its checkpoint on the host (eval_all and eval run on CPU nodes)")
    demo.run(
        [
            "python",
            "run.py",
            "--mode",
            "eval",
            "-p",
            "configs/params_small.yaml",
            "-o",
            "model_dir",
        ],
        cwd=fc,
        shown="python run.py --mode eval -p configs/params_small.yaml -o model_dir",
    )
    show_artifacts(fc / "model_dir")


def weight_streaming_gptj(demo: Demo, gptj: Path, quickstart: str) -> None:
    """Step 5: the 6B shape compiled only, then the Quickstart's line trains the stand-in."""
    small, real = "configs/params_continuous_pretraining.yaml", "configs/params_gptj_6b.yaml"
    print(
        f"# 5. GPT-J in weight streaming. The Quickstart's params file, {small}, is GPT-J's\n"
        f"#    architecture at a small size ({shape(gptj / small)}): a stand-in that\n"
        f"#    trains on this host. The real 6B shape ({real}: {shape(gptj / real)})\n"
        "#    is compiled only, on a CPU node, for the compiler's estimate:"
    )
    demo.run(
        [
            "csrun_cpu",
            "python-ws",
            "run.py",
            "--mode=compile_only",
            "-p",
            real,
            "-o",
            "model_dir_6b",
            "--cs_ip",
            IP,
        ],
        cwd=gptj,
    )
    print(
        "\n# The Weight Streaming Quickstart's command: 98 tasks (chief, coordinator, 96 input "
        "streamers) train the small stand-in"
    )
    if launch_live(demo, quickstart, gptj):
        raise DemoStopped("the Weight Streaming Quickstart's csrun_wse line exited with an error.")
    est_small, est_real = estimate(gptj / "model_dir"), estimate(gptj / "model_dir_6b")
    print(
        "\n# GPT-J, CS-2 estimates from the compiler (samples/s; the Rate lines above are this "
        "host's):"
    )
    print(f"#    the stand-in trained above ({shape(gptj / small)}): {est_small:,.1f}")
    print(f"#    GPT-J 6B, compiled only ({shape(gptj / real)}): {est_real:,.1f}")
    show_artifacts(gptj / "model_dir")


def appliance(demo: Demo, steps: int) -> None:
    """Step 7: the Wafer-Scale Cluster on a cluster of its own (the four-system example)."""
    from cs2sim.system.cluster import EXAMPLE_PATH

    wsc = Demo(demo.home.parent / "wsc-home", 0)
    wsc.env["CS2_CLUSTER"] = str(EXAMPLE_PATH)
    fc = demo.home.parent / "fc_mnist"
    print(
        "\n# 7. Today's Wafer-Scale Cluster (appliance mode): four CS-2s in weight streaming."
        "\n#    From the user node, run.py talks to the cluster management server (started "
        "on\n#    demand), which runs a compile wsjob and then an execute wsjob on two "
        "systems:"
    )
    try:
        wsc.run(
            [
                "python",
                "run.py",
                "CSX",
                "-p",
                "configs/params_small.yaml",
                "--mode",
                "train",
                "-o",
                "model_dir_csx",
                "--num_csx",
                "2",
                "--max_steps",
                str(steps),
                "--job_labels",
                "name=demo",
            ],
            cwd=fc,
            shown="python run.py CSX -p configs/params_small.yaml --mode train -o "
            f"model_dir_csx --num_csx 2 --max_steps {steps} --job_labels name=demo",
        )
        wsc.run(["csctl", "get", "jobs", "-a"])
    finally:
        wsc.run(["cs-cluster-server", "stop"])


def main(argv: list[str] | None = None) -> int:
    """Run the story; 0 if every step did what it should."""
    p = argparse.ArgumentParser(prog="python -m scripts.demo", description=__doc__.splitlines()[0])
    p.add_argument(
        "--boot-seconds",
        type=float,
        default=2.0,
        help="how long the simulated reboot takes (default 2)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=20,
        help="<num_train_steps> of the Weight Streaming Quickstart's command (default 20)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the demo's directory (its system, model copies and runs) to "
        "continue on it; by default it is removed at the end",
    )
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="cs2demo-"))
    home = root / "cs2home"
    demo = Demo(home, args.boot_seconds)
    fate = "kept (--keep)" if args.keep else "removed at the end; --keep keeps it"
    print(f"cs2sim demo: a CS-2 installation's workflow on a throwaway system in {root} ({fate})\n")
    try:
        story(demo, args.max_steps)
    except DemoStopped as e:
        print(f"The demo stopped: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "\nNow try it yourself in the interactive shell (Tab completes, `?` helps, Ctrl-D leaves):"
    )
    cs_cmd = demo.tool("cs")
    if args.keep:
        print(f"    CS2_HOME={home} {cs_cmd}      # continue on the demo's system")
    own = knobs.raw("CS2_HOME")
    where = f"{default_home()} (your $CS2_HOME)" if own else f"{default_home()}"
    print(f"    {cs_cmd}    # your own system, kept in {where}")
    if not args.keep:
        print(
            f"    (the demo's system was removed with {root}; `python -m scripts.demo --keep` "
            "keeps it to continue on)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
