"""Optimizers, sorted in order of increasing complexity: SGD (momentum), Adam, AdamW.

They update the model's float32 master arrays in place. State is allocated once (np.zeros_like)
and the update runs block by block (256K elements) with a preallocated block-sized scratch buffer
per thread, so a step on ~100M floats allocates nothing and its passes stay in cache. The blocks
are independent, so the runtime's worker threads (runtime/threads.py) share them out; every
element gets the same arithmetic whichever thread updates it.
`step(grads, step)` takes the global step counted BEFORE this update (0 for the first), as TF's
global_step and PyTorch's scheduler do; the learning rate is the schedule's value there.

The update rules follow Model Zoo (R1.6 TF `Trainer.py`, PyTorch `optim/AdamBase.py`):

    SGD       buf = momentum * buf + g;  p -= lr * buf   (Nesterov: p -= lr * (g + momentum * buf))
    Adam      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
              p -= lr * c_t * m / (sqrt(v) + eps),  c_t = sqrt(1 - b2^t) / (1 - b1^t)
              (c_t = 1 when correct_bias is False; t counts the updates applied)
    AdamW     Adam plus decoupled weight decay: p -= lr * (c_t * m / (sqrt(v) + eps) + wd * p)

`weight_decay_rate` for SGD and Adam is L2 regularisation (g += wd * p), as Model Zoo's SGD and
Adam classes do with their `weight_decay`; AdamW decouples it. Defaults by optimizer: SGD momentum
0 (optimizer_type "momentum", TF's MomentumOptimizer, defaults to 0.9); Adam corrects its bias
(TF AdamOptimizer, torch Adam) while AdamW does not unless `correct_bias: True` (Model Zoo's
AdamW default, False; the GPT-2 PyTorch YAML sets True); epsilon 1e-8, or 1e-5 for mixed
precision (TF Trainer).

Weight decay is not applied to biases and normalisation parameters, as Model Zoo groups them
(PyTorch: "bias" and the names of LayerNorm-type modules; TF: LayerNorm, layer_norm, bias).
Our rule, on the parameter's dotted name in lower case: no decay when any dotted component
contains "bias" or "norm" (layer_norm, layernorm, ln_norm...), or is "ln" optionally followed by
up to two characters ("ln", "ln_1", "ln_f", "ln1"). So "h.0.ln_1.weight", "blocks.2.attn.bias" and
"final_layer_norm.weight" are not decayed; "h.0.attn.c_attn.weight" and "wte.weight" are. An
explicit `exclude_from_weight_decay: [regex, ...]` (TF key) replaces the rule: names any regex
matches (re.search) are not decayed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cs2sim.runtime.numerics.clipping import check_clipping
from cs2sim.runtime.numerics.loss_scale import build_loss_scaler
from cs2sim.runtime.numerics.schedules import Schedule, build_schedule, check_learning_rate
from cs2sim.runtime.schema import REQUIRED, Key, Range, Schema, non_negative, unit_interval
from cs2sim.runtime.threads import run_chunks, workers
from cs2sim.system.errors import ConfigError, RuntimeFailure

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "OPTIMIZERS",
    "OPTIMIZER_SCHEMA",
    "decays",
    "build_optimizer",
    "check_optimizer_params",
]

# Elements updated at a time. The five arrays' blocks (p, g, two moments, scratch: 5 MB) sit in
# L3 between the update's ~13 passes; smaller blocks that fit L2 cost more in numpy calls and
# thread hand-overs than they save (measured, AdamW over the GPT's 3.3M weights on 2 threads:
# 64K 7.0 ms, 128K 6.2 ms, 256K 5.7 ms, 1M 5.7 ms; fc_mnist's Adam 1.07 -> 0.88 ms).
_BLOCK = 1 << 18
_NO_DECAY_PART = re.compile(r"bias|norm|^ln.{0,2}$")


def decays(name: str, exclude: Sequence[str] | None = None) -> bool:
    """Whether weight decay applies to the parameter `name` (rule in the module docstring)."""
    if exclude is not None:
        return not any(re.search(pattern, name) for pattern in exclude)
    return not any(_NO_DECAY_PART.search(part) for part in name.lower().split("."))


def _check(ok: bool, key: str, allowed: str, v: Any) -> None:
    if not ok:
        raise ConfigError(f"optimizer.{key} must be {allowed}, not {v}.")


class Optimizer:
    """Base: the parameters, the schedule, the update count, weight decay and the scratch buffer."""

    SLOTS: tuple[str, ...] = ()  # per-parameter state arrays, e.g. ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        lr: Schedule | Callable[[int], float] | float,
        weight_decay_rate: float = 0.0,
        exclude_from_weight_decay: Sequence[str] | None = None,
    ) -> None:
        if not callable(lr):
            _check(math.isfinite(lr) and lr >= 0, "learning_rate", ">= 0", lr)
            value = float(lr)
            lr = Schedule(lambda t: value, f"constant {value:g}")
        _check(weight_decay_rate >= 0, "weight_decay_rate", ">= 0", weight_decay_rate)
        for pattern in exclude_from_weight_decay or ():
            try:
                re.compile(pattern)
            except (re.error, TypeError):
                raise ConfigError(
                    "optimizer.exclude_from_weight_decay must be a list of regexes; "
                    f"{pattern!r} is not one."
                ) from None
        self.params = dict(params)
        self.lr = lr
        self.num_updates = 0  # updates applied (skipped overflow steps do not count)
        self.decay = {
            n: float(weight_decay_rate) if decays(n, exclude_from_weight_decay) else 0.0
            for n in self.params
        }
        self.state = {s: {n: np.zeros_like(p) for n, p in self.params.items()} for s in self.SLOTS}
        largest = max((p.size for p in self.params.values()), default=0)
        self._scratch = np.empty(min(largest, _BLOCK), np.float32)
        self._scratches = [self._scratch]  # one per worker thread, by slot (see step)

    def lr_at(self, step: int) -> float:
        """The learning rate used for the update at global step `step`."""
        return float(self.lr(step))

    def step(self, grads: Mapping[str, np.ndarray], step: int) -> None:
        """Update every parameter in place from `grads` (same names) at global step `step`."""
        lr = self.lr_at(step)
        self.num_updates += 1
        blocks: list[tuple[str, list[np.ndarray]]] = []  # (name, [p, g, *state] block views)
        for name, p in self.params.items():
            arrays = (p, grads[name], *(self.state[slot][name] for slot in self.SLOTS))
            if not all(a.flags.c_contiguous for a in arrays):  # rare: strided views
                self._update(name, lr, np.empty(p.shape, np.float32), *arrays)
                continue
            # Block by block: the update's ~13 passes then run on cache-resident data (2x faster
            # than whole-array passes on large parameters) with a block-sized scratch.
            flat = [a.reshape(-1) for a in arrays]  # (n,) views
            blocks += [(name, [a[i : i + _BLOCK] for a in flat]) for i in range(0, p.size, _BLOCK)]

        while len(self._scratches) < workers():  # one scratch per worker thread
            self._scratches.append(np.empty_like(self._scratch))

        def update(i: int, slot: int) -> None:  # blocks are disjoint: any thread takes any
            name, views = blocks[i]
            self._update(name, lr, self._scratches[slot][: views[0].size], *views)

        run_chunks(update, len(blocks), slots=True)  # spread over the runtime's worker threads

    def _update(
        self, name: str, lr: float, s: np.ndarray, p: np.ndarray, g: np.ndarray, *slots: np.ndarray
    ) -> None:
        """Update p in place from g and this optimizer's state arrays; s is scratch (same shape)."""
        raise NotImplementedError

    def _l2(self, name: str, p: np.ndarray, g: np.ndarray, s: np.ndarray) -> np.ndarray:
        """g + wd * p in the scratch when this parameter decays, else g itself (never modified)."""
        wd = self.decay[name]
        if not wd:
            return g
        np.multiply(p, wd, out=s)
        s += g
        return s

    def state_dict(self, copy: bool = True) -> dict[str, np.ndarray | float | int]:
        """{"num_updates": t, "<slot>/<param name>": array, ...}; copies unless copy=False."""
        d: dict[str, np.ndarray | float | int] = {"num_updates": self.num_updates}
        for slot, arrays in self.state.items():
            for n, a in arrays.items():
                d[f"{slot}/{n}"] = a.copy() if copy else a
        return d

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restore `state_dict()` into the preallocated arrays (exactly, bit for bit)."""
        expected = {"num_updates"} | {f"{s}/{n}" for s in self.state for n in self.params}
        if set(d) != expected:
            diff = sorted(set(d) ^ expected)
            raise RuntimeFailure(
                "the checkpoint's optimizer state does not fit a "
                f"{type(self).__name__} optimizer for "
                f"this model (differs in {', '.join(diff[:3])}{', ...' if len(diff) > 3 else ''}); "
                "resume with the optimizer_type and model it was saved with, "
                "or start a new model_dir."
            )
        for slot, arrays in self.state.items():
            for n, a in arrays.items():
                src = np.asarray(d[f"{slot}/{n}"])
                if src.shape != a.shape:
                    raise RuntimeFailure(
                        f"the checkpoint's optimizer state for {n} has shape {src.shape}, not "
                        f"{a.shape}; resume with the model it was saved with, "
                        "or start a new model_dir."
                    )
                np.copyto(a, src)
        self.num_updates = int(d["num_updates"])


class SGD(Optimizer):
    """Stochastic gradient descent with (optional) momentum and Nesterov momentum."""

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        lr: Schedule | Callable[[int], float] | float,
        momentum: float = 0.0,
        nesterov: bool = False,
        **kw: Any,
    ) -> None:
        _check(0 <= momentum < 1, "momentum", "in [0, 1)", momentum)
        self.SLOTS = ("momentum",) if momentum else ()
        super().__init__(params, lr, **kw)
        self.momentum, self.nesterov = float(momentum), bool(nesterov)

    def _update(
        self, name: str, lr: float, s: np.ndarray, p: np.ndarray, g: np.ndarray, *slots: np.ndarray
    ) -> None:
        # 1) the gradient, with L2 weight decay
        g = self._l2(name, p, g, s)
        if not self.momentum:  # 2) plain descent
            np.multiply(g, lr, out=s)
            p -= s
            return
        # 2) momentum buffer
        (buf,) = slots
        buf *= self.momentum
        buf += g
        # 3) step: p -= lr * buf, or lr * (g + momentum * buf) for Nesterov
        if self.nesterov:
            np.multiply(g, lr, out=s)
            p -= s
            np.multiply(buf, lr * self.momentum, out=s)
        else:
            np.multiply(buf, lr, out=s)
        p -= s


class Adam(Optimizer):
    """Adam with bias correction (Model Zoo AdamBase form: eps added before the correction)."""

    SLOTS = ("exp_avg", "exp_avg_sq")
    DECOUPLED = False  # weight decay as L2 on the gradient; AdamW decouples it

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        lr: Schedule | Callable[[int], float] | float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        correct_bias: bool = True,
        **kw: Any,
    ) -> None:
        _check(0 <= beta1 < 1, "beta1", "in [0, 1)", beta1)
        _check(0 <= beta2 < 1, "beta2", "in [0, 1)", beta2)
        _check(math.isfinite(epsilon) and epsilon >= 0, "epsilon", ">= 0", epsilon)
        super().__init__(params, lr, **kw)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)
        self.correct_bias = bool(correct_bias)

    def step(self, grads: Mapping[str, np.ndarray], step: int) -> None:
        """One update; the bias correction uses t = this update's number (1 for the first)."""
        t = self.num_updates + 1
        c = math.sqrt(1.0 - self.beta2**t) / (1.0 - self.beta1**t) if self.correct_bias else 1.0
        self._step_size = c  # read by _update for every parameter of this step
        super().step(grads, step)

    def _update(
        self, name: str, lr: float, s: np.ndarray, p: np.ndarray, g: np.ndarray, *slots: np.ndarray
    ) -> None:
        m, v = slots
        b1, b2, wd = self.beta1, self.beta2, self.decay[name]
        l2 = 0.0 if self.DECOUPLED else wd  # Adam: g + wd * p, never stored (one scratch only)
        # 1) first moment: m = b1 m + (1 - b1) (g + l2 p). Not as a lerp m += (1 - b1)(g - m):
        #    that cancels catastrophically for v when 1 - b2 is small.
        m *= b1
        np.multiply(g, 1.0 - b1, out=s)
        m += s
        if l2:
            np.multiply(p, (1.0 - b1) * l2, out=s)
            m += s
        # 2) second moment: v = b2 v + (1 - b2) (g + l2 p)^2
        if l2:
            np.multiply(p, l2, out=s)
            s += g
            s *= s
        else:
            np.multiply(g, g, out=s)
        s *= 1.0 - b2
        v *= b2
        v += s
        # 3) direction: m / (sqrt(v) + eps)
        np.sqrt(v, out=s)
        s += self.epsilon
        np.divide(m, s, out=s)
        # 4) step, with decoupled decay: p -= lr * (c_t * dir + wd * p)
        if self.DECOUPLED and wd:
            p *= 1.0 - lr * wd
        s *= lr * self._step_size
        p -= s


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter); no bias correction by default."""

    DECOUPLED = True

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        lr: Schedule | Callable[[int], float] | float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        correct_bias: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(params, lr, beta1, beta2, epsilon, correct_bias, **kw)


# -- from the params YAML -------------------------------------------------------------------------

OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "momentum": SGD, "adam": Adam, "adamw": AdamW}


def _type_phrase(v: Any) -> str | None:
    ok = isinstance(v, str) and v.strip().lower() in OPTIMIZERS
    return None if ok else f"must be one of {', '.join(OPTIMIZERS)} (any case)"


def _scale_phrase(v: Any) -> str | None:
    if isinstance(v, str) and v.strip().lower() in ("dynamic", "tf_dynamic"):
        return None
    try:
        ok = not isinstance(v, bool) and float(v) > 0 and math.isfinite(float(v))
    except (TypeError, ValueError):
        ok = False
    return None if ok else "must be a positive number or 'dynamic'"


def _epsilon_phrase(v: Any) -> str | None:
    """Adam's epsilon keeps m / (sqrt(v) + eps) finite: 0 < eps <= 1 (0 gives 0/0 = NaN)."""
    try:
        x = float(v)
        ok = not isinstance(v, bool) and math.isfinite(x) and 0 < x <= 1.0
    except (TypeError, ValueError):
        ok = False
    return None if ok else "must be a number in (0, 1] (Adam divides by sqrt(v) + epsilon)"


def _closed(lo: float, hi: float, why: str) -> Range:
    """Schema check: lo <= v <= hi, with the reason shown."""
    phrase = f"must be in [{lo:g}, {hi:g}] ({why})"
    return Range(lo, hi, below=phrase, above=phrase)


MAX_LOSS_SCALE = 2.0**64  # past this a float32 gradient times the scale overflows at once
MAX_STEPS_PER_INCREASE = 10**9
MAX_GRAD_ACCUM = 2**16


_NUM = (int, float)
OPTIMIZER_SCHEMA: Schema = {
    "optimizer_type": Key(
        str, "adam", "sgd | momentum | adam | adamw (any case)", check=_type_phrase
    ),
    "learning_rate": Key(
        (int, float, str, dict, list),
        REQUIRED,
        "a number, a schedule dict, or a list of them run in turn",
        check=check_learning_rate,
    ),
    "disable_lr_steps_reset": Key(
        bool, False, "later schedules of a list see the global step, not their own"
    ),
    "momentum": Key(
        _NUM, None, "SGD momentum (default 0; 0.9 for optimizer_type momentum)", check=unit_interval
    ),
    "use_nesterov": Key(bool, False, "Nesterov momentum for SGD"),
    "beta1": Key(_NUM, 0.9, "Adam first-moment decay", check=unit_interval),
    "beta2": Key(_NUM, 0.999, "Adam second-moment decay", check=unit_interval),
    "betas": Key(list, None, "[beta1, beta2] (Model Zoo 2.x spelling; overrides beta1/beta2)"),
    "epsilon": Key(
        (int, float, str),
        None,
        "Adam epsilon (default 1e-8; 1e-5 with mixed precision)",
        check=_epsilon_phrase,
    ),
    "eps": Key(
        (int, float, str),
        None,
        "Adam epsilon (PyTorch spelling; overrides epsilon)",
        check=_epsilon_phrase,
    ),
    "correct_bias": Key(
        bool, None, "Adam bias correction (default True for adam, False for adamw)"
    ),
    "use_bias_correction": Key(bool, None, "TF spelling of correct_bias"),
    "weight_decay_rate": Key(
        _NUM,
        0.0,
        "decoupled (adamw) or L2 (sgd, adam) weight decay",
        check=_closed(0, 1, "a fraction of the weights per step"),
    ),
    "weight_decay": Key(
        _NUM,
        None,
        "weight_decay_rate (Model Zoo 2.x spelling; overrides it)",
        check=_closed(0, 1, "a fraction of the weights per step"),
    ),
    "exclude_from_weight_decay": Key(
        list, None, "regexes of parameter names not decayed (default: biases and norms)"
    ),
    "max_gradient_norm": Key(
        _NUM, None, "clip gradients by global norm (None or 0 = off)", check=non_negative
    ),
    "max_gradient_value": Key(
        _NUM, None, "clip gradients to [-v, v] (None or 0 = off)", check=non_negative
    ),
    "grad_accum_steps": Key(
        int,
        1,
        "input batches whose gradients are summed into one "
        "optimizer step (runtime/executors/accumulate.py)",
        check=_closed(1, MAX_GRAD_ACCUM, "micro-batches per step"),
    ),
    "use_cs_grad_accum": Key(bool, None, "older spelling of runconfig.use_cs_grad_accum"),
    "loss_scaling_factor": Key(
        (int, float, str), 1.0, "a number (static) or 'dynamic'", check=_scale_phrase
    ),
    "initial_loss_scale": Key(
        _NUM,
        None,
        "dynamic loss scale at the start (2**15; 2**31 for cbfloat16)",
        check=_closed(2.0**-64, MAX_LOSS_SCALE, "a power-of-two-like scale of the loss"),
    ),
    "steps_per_increase": Key(
        int,
        2000,
        "steps between loss scale doublings",
        check=_closed(1, MAX_STEPS_PER_INCREASE, "steps"),
    ),
    "min_loss_scale": Key(
        _NUM,
        None,
        "smallest dynamic loss scale (2**-14)",
        check=_closed(2.0**-64, MAX_LOSS_SCALE, "a scale of the loss"),
    ),
    "max_loss_scale": Key(
        _NUM,
        None,
        "largest dynamic loss scale (2**15; 2**31 for cbfloat16)",
        check=_closed(2.0**-64, MAX_LOSS_SCALE, "a scale of the loss"),
    ),
    "overflow_tolerance": Key(
        _NUM,
        0.05,
        "overflowed-step ratio beyond which the loss scale halves",
        check=_closed(0, 1, "a ratio of steps"),
    ),
    "log_summaries": Key(
        bool,
        False,
        "also write the global and per-layer-group gradient "
        "and weight norms (grad_norm/<group>, weight_norm/<group>) to the "
        "event file; lr and loss_scale are always written",
    ),
}


def _float(opt: Mapping[str, Any], key: str, default: float) -> float:
    v = opt.get(key)
    if v is None:
        return default
    try:
        if isinstance(v, bool):
            raise ValueError
        return float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"optimizer.{key} must be a number, not {v!r}.") from None


def _hyper(opt: Mapping[str, Any], kind: str, half: str) -> dict[str, Any]:
    """The constructor arguments of OPTIMIZERS[kind] for an optimizer section (aliases resolved)."""
    wd = _float(opt, "weight_decay", _float(opt, "weight_decay_rate", 0.0))
    common: dict[str, Any] = {
        "weight_decay_rate": wd,
        "exclude_from_weight_decay": opt.get("exclude_from_weight_decay"),
    }
    if kind in ("sgd", "momentum"):
        momentum = _float(opt, "momentum", 0.9 if kind == "momentum" else 0.0)
        return {**common, "momentum": momentum, "nesterov": bool(opt.get("use_nesterov", False))}
    beta1, beta2 = _float(opt, "beta1", 0.9), _float(opt, "beta2", 0.999)
    betas = opt.get("betas")
    if betas is not None:
        if not (isinstance(betas, list | tuple) and len(betas) == 2):
            raise ConfigError(f"optimizer.betas must be a list of two numbers, not {betas!r}.")
        beta1, beta2 = (
            _float({"beta1": betas[0]}, "beta1", 0.9),
            _float({"beta2": betas[1]}, "beta2", 0.999),
        )
    eps = _float(opt, "eps", _float(opt, "epsilon", 1e-5 if half != "float32" else 1e-8))
    correct = opt.get("correct_bias", opt.get("use_bias_correction"))
    if correct is None:
        correct = kind == "adam"
    return {**common, "beta1": beta1, "beta2": beta2, "epsilon": eps, "correct_bias": bool(correct)}


def _kind(opt: Mapping[str, Any]) -> str:
    kind = opt.get("optimizer_type", "adam")
    if _type_phrase(kind):
        raise ConfigError(
            f"optimizer.optimizer_type must be one of {', '.join(OPTIMIZERS)} (any case), "
            f"not {kind!r}."
        )
    return str(kind).strip().lower()


def build_optimizer(
    opt_params: Mapping[str, Any], params: Mapping[str, np.ndarray], half: str = "float32"
) -> Optimizer:
    """The optimizer an optimizer section asks for, over `params` (float32 master arrays).

    `half` (the mixed-precision format, "float32" when off) only sets epsilon's default.
    """
    if "learning_rate" not in opt_params:
        raise ConfigError("optimizer.learning_rate is required: set a number or a schedule.")
    kind = _kind(opt_params)
    lr = build_schedule(
        opt_params["learning_rate"],
        disable_lr_steps_reset=bool(opt_params.get("disable_lr_steps_reset")),
    )
    return OPTIMIZERS[kind](params, lr, **_hyper(opt_params, kind, half))


def check_optimizer_params(opt_params: Mapping[str, Any], half: str = "float32") -> None:
    """The cross-key checks a per-key schema cannot make; ConfigError for the first problem.

    Builds (and discards) the schedule, the clipping and the loss scaler, and checks the
    optimizer's hyperparameters, so a params file fails at validation, not at step 1.
    """
    kind = _kind(opt_params)
    build_schedule(
        opt_params.get("learning_rate"),
        disable_lr_steps_reset=bool(opt_params.get("disable_lr_steps_reset")),
    )
    check_clipping(
        _float(opt_params, "max_gradient_norm", 0.0), _float(opt_params, "max_gradient_value", 0.0)
    )
    build_loss_scaler(opt_params, half)
    # the bounds must agree even when a static scale leaves them unused (the initial scale is
    # clamped into them, as in TF)
    from cs2sim.runtime.numerics.loss_scale import loss_scale_defaults

    bounds = {
        **loss_scale_defaults(half),
        **{
            k: opt_params[k]
            for k in ("min_loss_scale", "max_loss_scale")
            if opt_params.get(k) is not None
        },
    }
    lo, hi = float(bounds["min_loss_scale"]), float(bounds["max_loss_scale"])
    if not lo <= hi:
        raise ConfigError(
            f"optimizer.min_loss_scale ({lo:g}) is above optimizer.max_loss_scale "
            f"({hi:g}); the smallest loss scale must not exceed the largest."
        )
    hyper = _hyper(opt_params, kind, half)
    for i, beta in enumerate(("beta1", "beta2")):
        if beta in hyper and opt_params.get("betas") is not None and not 0 <= hyper[beta] < 1:
            raise ConfigError(
                f"optimizer.betas[{i}] ({beta}) must be in [0, 1), not {hyper[beta]!r}."
            )
    OPTIMIZERS[kind]({}, 0.0, **hyper)
