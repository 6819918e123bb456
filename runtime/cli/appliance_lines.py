"""What `python run.py CSX` prints, in the order the real appliance client prints it.

The lines and their order are the Cerebras appliance client's, as ALCF's user guide shows a
whole run (argonne-lcf/user-guides, docs/ai-testbed/cerebras/running-a-model-or-program.md and
example-programs.md, R1.9-R2.x). The client (runtime/cli/appliance.py) prints only through this
table, and the test of the client's output reads it: a line is never printed before one above
it. `repeat` lines may come several times (the queue's status while a job waits, a training
step); `compile` lines belong to a compile job, `cached` replaces them when a complete compile
with the same hash exists already. `after` names the event of the job's log (a regular
expression over the chief's lines) that lets a line be printed, None for the client's own steps;
an `optional` line is printed only when its event is seen (a checkpoint loaded or saved), with
the pattern's named groups as its values. Lines of one `loop` (a training step, a checkpoint
saved at it) alternate as the run goes. "Ingress is ready" is the client's last poll of a
job's ingress once it runs (the compile job's and the execute job's, before the staging lines);
"Effective batch size" comes first.

The job's own WARNING and ERROR lines (stand-in data, a data error, a refusal) are not this
table's: the client forwards them as the job logged them, in order (runtime/cli/appliance.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Line", "LINES", "BY_KEY", "render"]


@dataclass(frozen=True)
class Line:
    key: str
    template: str
    repeat: bool = False
    after: str | None = None  # a pattern of the execute job's log that must be seen first
    optional: bool = False  # printed only when its `after` event is seen (else skipped)
    loop: str = ""  # lines of one loop (a step, a checkpoint) may alternate


LINES: tuple[Line, ...] = (
    Line("effective_batch", "Effective batch size is {batch}."),
    # an eval of a named checkpoint (each of eval_all's): the run.py of the user node loads it
    # before its first step is compiled (Model Zoo's run_cstorch_flow.py `load_checkpoint`)
    Line("eval_checkpoint", "Loading weights from checkpoint {path}"),
    Line("compiling", "Compiling the model. This may take a few minutes."),
    Line("cached", 'Found existing cached compile with hash: "{hash}"'),
    Line("compile_init", "Initiating a new compile wsjob against the cluster server."),
    Line("compile_id", "compile job id: {id}, remote log path: {path}"),
    Line(
        "compile_queued",
        "Poll ingress status: Waiting for job running, current job status: "
        "Queueing, msg: job is queueing. Job queue status: {note}. For more information, "
        "please run 'csctl get jobs'.",
        repeat=True,
    ),
    Line(
        "compile_scheduled",
        "Poll ingress status: Waiting for job running, current job "
        "status: Scheduled, msg: job is scheduled.",
    ),
    Line("compile_ingress", "Ingress is ready: Job ingress ready, poll ingress success."),
    Line(
        "compile_written",
        "Compile artifacts successfully written to remote compile "
        "directory. Compile hash is: {hash}",
    ),
    Line("compile_ok", "Compile was successful!"),
    Line(
        "programming",
        "Programming Cerebras Wafer Scale Cluster for execution. This may take a few minutes.",
    ),
    Line("execute_init", "Initiating a new execute wsjob against the cluster server."),
    Line("execute_id", "execute job id: {id}, remote log path: {path}"),
    Line(
        "execute_queued",
        "Poll ingress status: Waiting for job running, current job status: "
        "Queueing, msg: job is queueing. Job queue status: {note}. For more information, "
        "please run 'csctl get jobs'.",
        repeat=True,
    ),
    Line(
        "execute_scheduled",
        "Poll ingress status: Waiting for job running, current job "
        "status: Scheduled, msg: job is scheduled.",
    ),
    Line("ingress_ready", "Ingress is ready: Job ingress ready, poll ingress success."),
    Line("preparing", "Preparing to execute using {n} CSX"),
    Line("weights", "About to send initial weights"),
    Line(
        "weights_done",
        "Finished sending initial weights",
        after=r"Completed weight initialization|Loading CPU pre-initialized|Programming CS-2 "
        r"fabric",
    ),
    Line("finalizing", "Finalizing appliance staging for the run"),
    Line("programming_wait", "Waiting for device programming to complete"),
    Line(
        "checkpoint_found",
        'Found latest checkpoint at "{path}"; the run resumes from it.',
        after=r'Found latest checkpoint at "(?P<path>[^"]+)"',
        optional=True,
    ),
    Line(
        "checkpoint_given",
        'Loading checkpoint "{path}" (--checkpoint_path).',
        after=r'(?:Resuming from|Initialized weights from) checkpoint "(?P<path>[^"]+)"',
        optional=True,
    ),
    Line(
        "programming_done",
        "Device programming is complete",
        after=r"Loading CPU pre-initialized|Fabric programmed|\| Train Device",
    ),
    Line("network", "Using network type: ROCE"),
    Line("priming", "Waiting for input workers to prime the data pipeline and begin streaming ..."),
    Line(
        "streaming",
        "Input workers have begun streaming input data",
        after=r"Streamers are ready|\| Train Device",
    ),
    Line("staging_done", "Appliance staging is complete"),
    Line("beginning", "Beginning appliance run"),
    Line(
        "train",
        "| Train Device=CSX, Step={step}, Loss={loss}, Rate={rate}, GlobalRate={global_rate}",
        repeat=True,
        loop="run",
    ),
    Line(
        "checkpoint_saving",
        "Saving checkpoint at step {step}",
        repeat=True,
        after=r"Saving checkpoint at global step (?P<step>\d+)",
        optional=True,
        loop="run",
    ),
    Line(
        "checkpoint_saved",
        "Saved checkpoint {path}",
        repeat=True,
        after=r'Saved checkpoint "(?P<path>[^"]+)"',
        optional=True,
        loop="run",
    ),
    Line("completed", "Training completed successfully!"),
    # an eval job's results (Model Zoo's run_cstorch_flow.py `run_cstorch_eval`)
    Line(
        "eval",
        "| Eval Device=CSX, Step={step}, Loss={loss}, Rate={rate}, GlobalRate={global_rate}",
        repeat=True,
    ),
    Line("eval_metric", "Metric: {name} = {value}", repeat=True),
    Line("eval_loss", "Avg Eval Loss: {loss}"),
    Line("eval_completed", "Evaluation completed successfully!"),
    Line("processed", "Processed {samples} sample(s) in {seconds:.2f} seconds."),
)
BY_KEY = {line.key: line for line in LINES}


def render(key: str, **values: object) -> str:
    return BY_KEY[key].template.format(**values)
