"""The training loop with small stand-in parts: resume, guards, callbacks, the bounded queue.

The stand-ins (a linear model with a dropout-like RNG, SGD, a halving loss scaler, a seeded
stream) follow the runtime contract, so these tests pin the loop's behaviour without depending
on the real models; test_cli.py runs the real fc_mnist end to end.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.executors.cpu import CpuExecutor
from cs2sim.runtime.training.trainer import NAN_MESSAGE, Components, Trainer
from cs2sim.system.errors import ConfigError, ResourceError, RuntimeFailure

# -- stand-ins following the runtime contract --------------------------------------------------


class FakeModel:
    """y = x @ w + noise (noise from the model's own generator, like dropout); L2 loss."""

    training = True

    def __init__(self, model_params: dict, policy: object, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.w = rng.standard_normal((4,)).astype(np.float32)  # (4,)
        self.gw = np.zeros_like(self.w)
        self.noise = np.random.default_rng(seed + 1)
        self.nan_at = set(model_params.get("nan_at", ()))
        self.overflow_at = set(model_params.get("overflow_at", ()))
        self.forward_calls = 0

    @staticmethod
    def param_bytes_estimate(model_params: dict) -> int:
        return int(model_params.get("need_bytes", 1024))

    def parameters(self) -> dict[str, np.ndarray]:
        return {"w": self.w}

    def rng_state(self) -> dict:
        return self.noise.bit_generator.state

    def set_rng_state(self, state: dict) -> None:
        self.noise.bit_generator.state = state

    def grads(self) -> dict[str, np.ndarray]:
        return {"w": self.gw}

    def zero_grad(self) -> None:
        self.gw.fill(0)

    def num_params(self) -> int:
        return self.w.size

    def train(self, mode: bool = True) -> FakeModel:
        self.training = mode
        return self

    def eval(self) -> FakeModel:
        return self.train(False)

    def forward_loss(self, batch: dict[str, np.ndarray]) -> float:
        self.forward_calls += 1
        x, t = batch["x"], batch["y"]  # (B, 4), (B,)
        noise = self.noise.standard_normal(len(t)).astype(np.float32) * 0.01
        self.x, self.err = x, x @ self.w + noise - t  # (B,)
        loss = float(np.mean(self.err**2) / 2)
        return float("nan") if self.forward_calls in self.nan_at else loss

    def backward(self, loss_scale: float = 1.0) -> None:
        self.gw += np.float32(loss_scale) * (self.x.T @ self.err) / len(self.err)
        if self.forward_calls in self.overflow_at:
            self.gw[0] = np.inf

    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        err = batch["x"] @ self.w - batch["y"]
        return {
            "loss_sum": float(np.sum(err**2) / 2),
            "count": float(len(err)),
            "correct": float(np.sum(np.abs(err) < 0.5)),
        }


class FakeSGD:
    def __init__(self, params: dict[str, np.ndarray], lr: float) -> None:
        self.params, self.lr, self.updates = params, lr, 0

    def step(self, grads: dict[str, np.ndarray], step: int) -> None:
        for k, p in self.params.items():
            p -= np.float32(self.lr) * grads[k]
        self.updates += 1

    def lr_at(self, step: int) -> float:
        return self.lr

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, d: dict) -> None:
        self.updates = int(d["updates"])


class FakeScaler:
    """Dynamic loss scaling in miniature: halve on overflow, state in the checkpoint."""

    def __init__(self) -> None:
        self.scale = 256.0

    def unscale_(self, grads: dict[str, np.ndarray]) -> tuple[bool, float]:
        norm = 0.0
        for g in grads.values():
            g /= np.float32(self.scale)
            norm += float(np.sum(g.astype(np.float64) ** 2))
        return bool(np.isfinite(norm)), float(np.sqrt(norm))

    def update(self, isfinite: bool) -> None:
        if not isfinite:
            self.scale /= 2

    def state_dict(self) -> dict:
        return {"scale": self.scale}

    def load_state_dict(self, d: dict) -> None:
        self.scale = float(d["scale"])


class FakeStream:
    """64 samples of a linear target, shuffled per epoch from the seed; position = state."""

    batch_size = 8
    samples_per_epoch = 64
    source = "64 synthetic samples"

    def __init__(self, seed: int, split: str) -> None:
        rng = np.random.default_rng(123)
        self.x = rng.standard_normal((64, 4)).astype(np.float32)
        self.y = (self.x @ np.array([1, -2, 0.5, 3], np.float32)).astype(np.float32)
        self.seed, self.split, self.g, self.closed = seed, split, 0, False

    def __next__(self) -> dict[str, np.ndarray]:
        epoch, i = divmod(self.g, 8)
        order = np.random.default_rng([self.seed, epoch]).permutation(64)
        idx = order[i * 8 : (i + 1) * 8]
        self.g += 1
        return {"x": self.x[idx], "y": self.y[idx]}

    def state_dict(self) -> dict:
        return {"g": self.g}

    def load_state_dict(self, d: dict) -> None:
        self.g = int(d["g"])

    def close(self) -> None:
        self.closed = True


class FakeComponents(Components):
    def model_class(self) -> type:
        return FakeModel

    def model(self, seed: int) -> FakeModel:
        return FakeModel(self.params["model"], None, seed)

    def optimizer(self, model: FakeModel) -> FakeSGD:
        return FakeSGD(model.parameters(), self.params["optimizer"]["learning_rate"])

    def scaler(self) -> FakeScaler:
        return FakeScaler()

    def stream(self, split: str, seed: int) -> FakeStream:
        return FakeStream(seed, split)


def make_params(**runconfig) -> dict:
    rc = {"log_steps": 5, "checkpoint_steps": 10, "keep_checkpoint_max": 0, "seed": 3}
    rc.update(runconfig)
    model = rc.pop("model", {})
    return {"model": model, "optimizer": {"learning_rate": 0.05}, "runconfig": rc}


def make_trainer(model_dir: Path, executor=None, **runconfig) -> Trainer:
    params = make_params(**runconfig)
    return Trainer(
        "fake",
        params,
        model_dir,
        executor=executor,
        components=FakeComponents("fake", params, "float32"),
    )


# -- tests ---------------------------------------------------------------------------------------


def test_resume_is_bit_identical_and_counts_only_its_own_samples(tmp_path):
    full = make_trainer(tmp_path / "full", max_steps=20).train()
    first = make_trainer(tmp_path / "split", max_steps=10).train()
    second = make_trainer(tmp_path / "split", max_steps=20).train()
    assert sorted(full.losses) == list(range(1, 21))
    assert (first.start_step, first.end_step, second.start_step) == (0, 10, 10)
    resumed = {**first.losses, **second.losses}
    assert resumed == full.losses  # exact float equality: same data order, RNG, weights
    w_full = ckpt.load_latest(tmp_path / "full").model["w"]
    w_split = ckpt.load_latest(tmp_path / "split").model["w"]
    np.testing.assert_array_equal(w_full, w_split)
    assert second.total_samples == 10 * FakeStream.batch_size  # GlobalRate: this run's only
    assert second.perf.start_step == 10


def test_steps_runs_n_more_and_max_steps_is_incremental(tmp_path):
    assert make_trainer(tmp_path, steps=4).train().end_step == 4
    assert make_trainer(tmp_path, steps=4).train().end_step == 8
    assert make_trainer(tmp_path, max_steps=10).train().end_step == 10
    done = make_trainer(tmp_path, max_steps=10).train()
    assert done.total_samples == 0 and done.end_step == 10


def test_checkpoints_every_n_and_at_end_log_every_n_and_at_end(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        result = make_trainer(tmp_path, max_steps=23).train()
    assert [ckpt._step_of(p) for p in result.checkpoints] == [10, 20, 23]
    lines = [r.getMessage() for r in caplog.records]
    train_lines = [m for m in lines if m.startswith("| Train Device=cpu, Step=")]
    assert [int(m.split("Step=")[1].split(",")[0]) for m in train_lines] == [5, 10, 15, 20, 23]
    assert "global_step = 23, loss = " + str(np.float32(result.losses[23])) in lines
    assert lines.count("Saving checkpoint at global step 20") == 1
    assert 'No checkpoints were found in "' + str(tmp_path) + '".' in lines
    assert any(
        m.startswith("Training finished with 184 samples in ") and m.endswith(" samples/second.")
        for m in lines
    )
    assert f"Loss for final step: {np.float32(result.losses[23])!s}." in lines
    # Rate / GlobalRate formatting
    import re

    assert re.fullmatch(
        r"\| Train Device=cpu, Step=5, Loss=\d+\.\d{5}, Rate=\d+\.\d\d "
        r"samples/sec, GlobalRate=\d+\.\d\d samples/sec",
        train_lines[0],
    )


def test_found_latest_checkpoint_message(tmp_path, caplog):
    make_trainer(tmp_path, max_steps=10).train()
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        make_trainer(tmp_path, max_steps=12).train()
    assert f'Found latest checkpoint at "{tmp_path / "model-ckpt-10.npz"}".' in caplog.messages


def test_autoload_off_starts_from_zero(tmp_path):
    make_trainer(tmp_path, max_steps=10).train()
    again = make_trainer(tmp_path, steps=3, autoload_last_checkpoint=False).train()
    assert (again.start_step, again.end_step) == (0, 3)


def test_pretrained_checkpoint_path_is_a_warm_start_of_the_weights(tmp_path):
    source = make_trainer(tmp_path / "pre", max_steps=10).train().checkpoints[-1]
    warm = make_trainer(
        tmp_path / "cont",
        steps=1,
        checkpoint_path=str(source),
        is_pretrained_checkpoint=True,
        log_steps=1,
    ).train()
    assert (warm.start_step, warm.end_step) == (0, 1)
    # the first step's loss is that of the trained weights, not of a fresh init
    fresh = make_trainer(tmp_path / "fresh", steps=1, log_steps=1).train()
    trained = make_trainer(tmp_path / "pre", steps=1, log_steps=1).train()
    assert warm.losses[1] < fresh.losses[1]
    assert warm.losses[1] != trained.losses[11]  # data order restarts: a warm start


def test_checkpoint_path_resumes_as_in_the_pytorch_flow(tmp_path, caplog):
    """Without --is_pretrained_checkpoint a checkpoint path resumes (PyTorch flow)."""
    full = make_trainer(tmp_path / "full", max_steps=14).train()
    source = make_trainer(tmp_path / "pre", max_steps=10).train().checkpoints[-1]
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        resumed = make_trainer(
            tmp_path / "other", max_steps=14, checkpoint_path=str(source)
        ).train()
    assert (resumed.start_step, resumed.end_step) == (10, 14)
    assert {s: resumed.losses[s] for s in range(11, 15)} == {
        s: full.losses[s] for s in range(11, 15)
    }  # weights, optimizer and data position
    assert any(
        m.startswith(f'Resuming from checkpoint "{source}" at global step 10')
        for m in caplog.messages
    )


def test_eval_without_checkpoint_is_an_error_unless_asked(tmp_path, caplog):
    with pytest.raises(RuntimeFailure, match=r"No checkpoint to evaluate in .*--eval_random_"):
        make_trainer(tmp_path / "none", eval_steps=1).eval()
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        res = make_trainer(tmp_path / "none", eval_steps=1, eval_random_weights=True).eval()
    assert res.checkpoint is None and "Evaluation completed successfully!" in caplog.messages


def test_tf_flow_logs_console_and_summaries_at_their_own_intervals(tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with caplog.at_level(logging.INFO, logger="cs2sim"):
        make_trainer(tmp_path, max_steps=12, log_steps=3, save_summary_steps=4).train()
    steps = [
        int(m.split("Step=")[1].split(",")[0])
        for m in caplog.messages
        if m.startswith("| Train Device=")
    ]
    assert steps == [3, 6, 9, 12]
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss")] == [4, 8, 12]


def test_damaged_latest_checkpoint_resumes_from_previous(tmp_path):
    make_trainer(tmp_path, max_steps=20).train()
    latest = tmp_path / "model-ckpt-20.npz"
    latest.write_bytes(latest.read_bytes()[:100])
    again = make_trainer(tmp_path, max_steps=21).train()
    assert again.start_step == 10


def test_nan_guard_message_and_no_checkpoint_of_the_bad_step(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=20, model={"nan_at": [13]})
    with pytest.raises(RuntimeFailure) as e:
        trainer.train()
    assert str(e.value) == NAN_MESSAGE.format("NaN")
    assert str(e.value).startswith("NaN loss detected. This could potentially be due to")
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["model-ckpt-10.npz"]


def test_nan_guard_off(tmp_path):
    result = make_trainer(
        tmp_path, max_steps=5, check_loss_values=False, model={"nan_at": [2]}
    ).train()
    assert np.isnan(result.losses[2])


def test_dls_skipped_step_leaves_weights_unchanged(tmp_path):
    result = make_trainer(
        tmp_path, max_steps=6, checkpoint_steps=1, model={"overflow_at": [4]}
    ).train()
    w = {s: ckpt.load_checkpoint(tmp_path / f"model-ckpt-{s}.npz") for s in (3, 4, 5)}
    np.testing.assert_array_equal(w[3].model["w"], w[4].model["w"])  # step 4 skipped
    assert not np.array_equal(w[4].model["w"], w[5].model["w"])
    assert w[3].loss_scaler["scale"] == 256.0 and w[4].loss_scaler["scale"] == 128.0
    assert w[4].optimizer["updates"] == 3  # the optimizer never saw step 4
    assert result.end_step == 6  # a skipped step still counts as a global step


def test_host_memory_refusal_names_need_capacity_and_alternatives(tmp_path):
    params = make_params(max_steps=1, model={"need_bytes": 97 * 2**30})
    trainer = Trainer(
        "gptj",
        params,
        tmp_path,
        memory_capacity=23 * 2**30,
        components=FakeComponents("gptj", params, "float32"),
    )
    with pytest.raises(ResourceError) as e:
        trainer.train()
    msg = str(e.value)
    assert msg.startswith(
        "Training gptj on the host needs about 97 GiB of memory but this "
        "machine has 23 GiB; compile it for the CS-2 instead (--mode "
        "compile_only), or run configs/params_continuous_pretraining.yaml"
    )
    assert "configs/params_continuous_pretraining.yaml" in msg
    assert not (tmp_path / "model-ckpt-1.npz").exists()


def test_callbacks_receive_load_steps_logs_checkpoints_end(tmp_path):
    events: list[tuple[str, object]] = []
    trainer = make_trainer(tmp_path, max_steps=10)
    for name in ("on_load", "on_step", "on_step_logged", "on_checkpoint", "on_end"):
        trainer.add_callback(name, lambda payload, name=name: events.append((name, payload)))
    trainer.train()
    kinds = [k for k, _ in events]
    assert kinds[0] == "on_load" and kinds[-1] == "on_end"
    assert kinds.count("on_step") == 10 and kinds.count("on_step_logged") == 2
    load = events[0][1]
    assert (load.device, load.start_step, load.stop_step, load.num_params) == ("cpu", 0, 10, 4)
    logged = [p for k, p in events if k == "on_step_logged"]
    assert [p.step for p in logged] == [5, 10]
    assert logged[0].rate == pytest.approx(logged[0].global_rate)  # first Rate == GlobalRate
    assert [p.name for k, p in events if k == "on_checkpoint"] == ["model-ckpt-10.npz"]


def test_performance_json_written(tmp_path):
    import json

    make_trainer(tmp_path, max_steps=10).train()
    perf = json.loads((tmp_path / "performance" / "performance.json").read_text())
    assert perf["total_samples"] == 80 and perf["device"] == "cpu"
    assert perf["compile_time"] is None and "host measurements" in perf["measurement"]
    assert perf["samples_per_sec"] == pytest.approx(80 / perf["total_time"], rel=1e-3)
    assert isinstance(perf["suspected_input_bottleneck"], bool)


def test_executor_keeps_computing_while_user_node_saves_a_checkpoint(tmp_path):
    """The bounded queue: during a slow checkpoint the producer runs ahead until it is full."""
    depth = 4
    trainer = make_trainer(tmp_path, max_steps=30, executor=CpuExecutor(queue_depth=depth))
    model_holder: dict = {}
    trainer.add_callback("on_load", lambda info: model_holder.update(m=trainer.executor.model))
    seen: list[int] = []

    def slow_checkpoint(path: Path) -> None:
        m = model_holder["m"]
        deadline = time.monotonic() + 300  # a hang guard, generous for a loaded host
        # wait until the producer is blocked on a full queue (no timing assertion: just wait)
        while m.forward_calls < 10 + depth + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # had it not been bounded, it would now be further ahead
        seen.append(m.forward_calls)

    trainer.add_callback("on_checkpoint", slow_checkpoint)
    trainer.train()
    assert seen[0] == 10 + depth + 1  # depth outputs queued + one computed, waiting to be put


def test_global_rate_excludes_input_startup_and_event_file_opening(tmp_path, monkeypatch):
    """Cerebras' "Measure throughput of your model" (docs/sources.md): GlobalRate counts from the
    executable being loaded. Bringing up the input workers and opening the event file happen before;
    on a virtual clock they take 100 s and
    50 s, the steps 1 s each, so the first log step's GlobalRate must be 5 steps / 5 s."""
    import cs2sim.runtime.training.trainer as T

    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731

    class SlowStart(FakeStream):
        started = False

        def start(self) -> None:  # spawning workers, loading data
            now[0] += 100.0
            self.started = True

        def __next__(self) -> dict:
            if not self.started:  # lazily, as before start() existed
                self.start()
            now[0] += 1.0  # one step's worth of time, on the virtual clock
            return super().__next__()

    class Parts(FakeComponents):
        def stream(self, split: str, seed: int) -> FakeStream:
            return SlowStart(seed, split)

    class SlowOpen(T.Summaries):
        def __init__(self, *a, **kw) -> None:  # importing tensorboardX, creating the file
            now[0] += 50.0
            super().__init__(*a, **kw)

    monkeypatch.setattr(T, "Summaries", SlowOpen)
    params = make_params(max_steps=5)
    logged: list = []
    trainer = Trainer(
        "fake",
        params,
        tmp_path,
        clock=clock,
        executor=CpuExecutor(queue_depth=1),
        components=Parts("fake", params, "float32"),
    )
    trainer.add_callback("on_step_logged", logged.append)
    result = trainer.train()
    B = FakeStream.batch_size
    assert logged[0].global_rate == pytest.approx(5 * B / 5.0)
    assert result.total_time == pytest.approx(5.0)


def test_event_files_hold_every_log_step_up_to_a_checkpoint_when_it_is_written(tmp_path):
    """A kill -9 loses nothing TensorBoard needs: the resume purges events past the checkpoint,
    so every event up to it must be on disk when the checkpoint is."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    seen: dict[str, list[int]] = {}

    def read_events(path: Path) -> None:
        acc = EventAccumulator(str(tmp_path))
        acc.Reload()
        seen[path.name] = [e.step for e in acc.Scalars("loss")] if acc.Tags()["scalars"] else []

    trainer = make_trainer(tmp_path, max_steps=25, log_steps=5, checkpoint_steps=10)
    trainer.add_callback("on_checkpoint", read_events)
    trainer.train()
    assert seen["model-ckpt-10.npz"] == [5, 10]
    assert seen["model-ckpt-20.npz"] == [5, 10, 15, 20]


def test_memory_check_uses_the_batch_of_the_mode(tmp_path):
    class PerSample(FakeModel):
        @staticmethod
        def param_bytes_estimate(model_params: dict, batch_size: int = 1) -> int:
            return batch_size * 2**30  # 1 GiB per sample

    class Parts(FakeComponents):
        def model_class(self) -> type:
            return PerSample

    params = make_params(max_steps=1)
    params["train_input"], params["eval_input"] = {"batch_size": 64}, {"batch_size": 2}
    trainer = Trainer(
        "fake",
        params,
        tmp_path,
        memory_capacity=16 * 2**30,
        components=Parts("fake", params, "float32"),
    )
    trainer.check_host_memory("eval")  # 2 GiB: fits
    for mode in ("train", "train_and_eval"):
        with pytest.raises(ResourceError, match="^Training fake on the host needs about 64 GiB"):
            trainer.check_host_memory(mode)


def test_producer_error_reaches_the_user_node(tmp_path):
    class Exploding(FakeComponents):
        def stream(self, split: str, seed: int) -> FakeStream:
            s = FakeStream(seed, split)
            real = s.__next__

            def boom() -> dict:
                if s.g == 3:
                    raise ConfigError("train_input.data_dir is broken; fix it.")
                return real()

            s.__next__ = boom  # type: ignore[method-assign]
            return _Wrap(s)

    class _Wrap:
        def __init__(self, s: FakeStream) -> None:
            self.s = s
            self.batch_size, self.samples_per_epoch = s.batch_size, s.samples_per_epoch

        def __next__(self) -> dict:
            return self.s.__next__()

        def __getattr__(self, name: str) -> object:
            return getattr(self.s, name)

    params = make_params(max_steps=10)
    with pytest.raises(ConfigError, match="data_dir is broken"):
        Trainer("fake", params, tmp_path, components=Exploding("fake", params, "float32")).train()
    assert not [t for t in threading.enumerate() if t.name == "cpu-executor"]  # joined


def test_ctrl_c_stops_the_executor_and_keeps_the_last_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=30)

    def interrupt(out) -> None:
        if out.step == 15:
            raise KeyboardInterrupt

    trainer.add_callback("on_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert not [t for t in threading.enumerate() if t.name == "cpu-executor"]
    assert ckpt.load_latest(tmp_path).step == 10
    assert make_trainer(tmp_path, max_steps=30).train().start_step == 10


def test_eval_and_eval_all(tmp_path, caplog):
    make_trainer(tmp_path, max_steps=20).train()
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        res = make_trainer(tmp_path, eval_steps=3).eval()
    assert res.step == 20 and res.samples == 24
    assert 0 <= res.metrics["accuracy"] <= 1
    assert "Evaluation completed successfully!" in caplog.messages
    assert f"Avg Eval Loss: {res.avg_loss}" in caplog.messages
    assert f"Metric: accuracy = {res.metrics['accuracy']}" in caplog.messages
    results = make_trainer(tmp_path, eval_steps=2).eval_all()
    assert [r.step for r in results] == [10, 20]
    assert results[1].avg_loss == pytest.approx(res.avg_loss, rel=0.5)  # same weights
    with pytest.raises(RuntimeFailure, match="No checkpoints were found"):
        make_trainer(tmp_path / "empty").eval_all()


def test_train_and_eval_keeps_eval_time_out_of_the_rate(tmp_path):
    import json

    tr, ev = make_trainer(tmp_path, max_steps=10, eval_steps=2).train_and_eval()
    assert ev.step == 10
    perf = json.loads((tmp_path / "performance" / "performance.json").read_text())
    assert perf["eval_time"] > 0
    assert perf["total_time"] == pytest.approx(tr.total_time, abs=1e-4)


def test_missing_run_length_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="neither max_steps nor num_epochs"):
        make_trainer(tmp_path).train()
    with pytest.raises(ConfigError, match="both steps and max_steps"):
        make_trainer(tmp_path, steps=2, max_steps=3).train()
    assert make_trainer(tmp_path, num_epochs=1).train().end_step == 8  # 64 samples / 8


# -- the same properties through the real models, optimizers, loss scalers and data ----------------


@pytest.fixture
def one_blas_thread():
    """One BLAS thread: on a shared, loaded machine OpenBLAS's spinning threads cost ~10x."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def real_trainer(
    model_name: str,
    model_dir: Path,
    model: dict,
    optimizer: dict,
    train_input: dict,
    inject=None,
    **runconfig,
) -> Trainer:
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision
    from cs2sim.runtime.params import validate_params

    raw = {
        "train_input": train_input,
        "model": model,
        "optimizer": optimizer,
        "runconfig": {"log_steps": 5, "checkpoint_steps": 10, "seed": 7, **runconfig},
    }
    params, _ = validate_params(raw, model_name)
    half, _ = resolve_precision(params)

    class Injecting(Components):
        def model(self, seed: int):
            m = super().model(seed)
            if inject:
                inject(m)
            return m

    return Trainer(
        model_name, params, model_dir, half=half, components=Injecting(model_name, params, half)
    )


FC = dict(
    model={"hidden_sizes": [32], "dropout": 0.2, "mixed_precision": True, "fp16_type": "cbfloat16"},
    optimizer={"optimizer_type": "adam", "learning_rate": 0.003, "loss_scaling_factor": "dynamic"},
    train_input={"batch_size": 16},
)
GPTJ = dict(
    model={
        "vocab_size": 257,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_heads": 2,
        "rotary_dim": 4,
        "filter_size": 64,
        "max_position_embeddings": 16,
        "dropout_rate": 0.1,
    },
    optimizer={"optimizer_type": "adamw", "learning_rate": 0.003, "max_gradient_norm": 1.0},
    train_input={"batch_size": 4, "max_sequence_length": 16, "vocab_size": 257},
)


BERT = dict(
    model={
        "vocab_size": 260,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_heads": 2,
        "filter_size": 64,
        "max_position_embeddings": 32,
        "dropout_rate": 0.1,
        "mixed_precision": True,
        "fp16_type": "cbfloat16",
    },
    optimizer={
        "optimizer_type": "adamw",
        "learning_rate": 0.003,
        "max_gradient_norm": 1.0,
        "loss_scaling_factor": "dynamic",
    },
    train_input={
        "batch_size": 4,
        "max_sequence_length": 32,
        "max_predictions_per_seq": 5,
        "dynamic_mlm_scale": True,
    },
)
LLAMA = dict(
    model={
        "vocab_size": 257,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_heads": 4,
        "filter_size": 48,
        "max_position_embeddings": 16,
        "attention_module": "multiquery_attention",
        "extra_attention_params": {"num_kv_groups": 2},
        "dropout_rate": 0.1,
    },
    optimizer={"optimizer_type": "adamw", "learning_rate": 0.003},
    train_input={"batch_size": 4, "max_sequence_length": 16, "vocab_size": 257},
)


@pytest.mark.parametrize(
    ("name", "cfg"), [("fc_mnist", FC), ("gptj", GPTJ), ("bert", BERT), ("llama", LLAMA)]
)
def test_real_models_resume_bit_identical(tmp_path, name, cfg, one_blas_thread):
    """Dropout RNG, Adam moments, the loss scale and the data position all come back."""
    full = real_trainer(name, tmp_path / "full", max_steps=16, **cfg).train()
    real_trainer(name, tmp_path / "split", max_steps=10, **cfg).train()
    second = real_trainer(name, tmp_path / "split", max_steps=16, **cfg).train()
    assert second.start_step == 10
    assert {s: full.losses[s] for s in range(11, 17)} == second.losses
    a = ckpt.load_latest(tmp_path / "full")
    b = ckpt.load_latest(tmp_path / "split")
    for k in a.model:
        np.testing.assert_array_equal(a.model[k], b.model[k])
    assert a.loss_scaler == b.loss_scaler and a.data == b.data


def test_real_dls_skipped_step_leaves_weights_unchanged(tmp_path, one_blas_thread):
    def overflow_on_third_backward(model) -> None:
        real, calls = model.backward, {"n": 0}

        def backward(loss_scale: float = 1.0) -> None:
            real(loss_scale)
            calls["n"] += 1
            if calls["n"] == 3:
                next(iter(model.grads().values()))[0] = np.inf

        model.backward = backward

    real_trainer(
        "fc_mnist",
        tmp_path,
        max_steps=4,
        checkpoint_steps=1,
        inject=overflow_on_third_backward,
        **FC,
    ).train()
    s = {k: ckpt.load_checkpoint(tmp_path / f"model-ckpt-{k}.npz") for k in (2, 3, 4)}
    for name in s[2].model:
        np.testing.assert_array_equal(s[2].model[name], s[3].model[name])  # skipped
    assert any(not np.array_equal(s[3].model[n], s[4].model[n]) for n in s[3].model)
    assert s[3].loss_scaler["loss_scale"] == s[2].loss_scaler["loss_scale"] / 2


def test_rates_below_one_are_printed_with_two_significant_digits(tmp_path, caplog):
    """Model Zoo 2.x prints a rate < 1 with `.2g` (our lines used `.2f` always)."""
    t = iter(range(0, 10**9, 3000))  # every clock reading is 3000 s after the previous one
    params = make_params(max_steps=5)
    trainer = Trainer(
        "fake",
        params,
        tmp_path,
        clock=lambda: float(next(t)),
        components=FakeComponents("fake", params, "float32"),
    )
    with caplog.at_level(logging.INFO, logger="cs2sim"):
        trainer.train()
    line = next(m for m in caplog.messages if m.startswith("| Train Device=cpu, Step=5,"))
    import re

    assert re.search(r", Rate=0\.0\d\d samples/sec, GlobalRate=0\.0\d\d samples/sec$", line), line
