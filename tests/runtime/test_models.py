"""The three models: whole-model gradients, training behaviour, schemas, sizes, determinism."""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from gradcheck import check_layer
from threadpoolctl import threadpool_limits

from cs2sim.runtime import registry
from cs2sim.runtime.modelzoo.fc_mnist.model import FcMnistModel
from cs2sim.runtime.modelzoo.gpt2.model import GPT2Model
from cs2sim.runtime.modelzoo.gptj.model import GPTJModel
from cs2sim.runtime.nn.spec import KINDS
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.system.errors import ConfigError

FP32 = Policy("float32")


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """Tiny matmuls: extra BLAS threads only add wake-up latency (50x on a busy 2-core host)."""
    with threadpool_limits(1):
        yield


TINY_LM = {
    "vocab_size": 11,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_heads": 2,
    "filter_size": 12,
    "max_position_embeddings": 6,
}
TINY_GPTJ = {**TINY_LM, "rotary_dim": 2}


def lm_batch(B: int, T: int, V: int, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    ids = r.integers(0, V, (B, T + 1)).astype(np.int32)
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}


TINY_BERT = {**TINY_LM, "dropout_rate": 0.0, "layer_norm_epsilon": 1e-5}
TINY_LLAMA = {**TINY_LM, "num_heads": 2, "rotary_dim": 4}


def bert_batch(B: int, T: int, V: int, P: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    pos = np.sort(
        np.stack([r.choice(np.arange(1, T), P, replace=False) for _ in range(B)]), axis=1
    ).astype(np.int32)
    ids = r.integers(0, V, (B, T)).astype(np.int32)
    return {
        "input_ids": ids,
        "token_type_ids": (np.arange(T) >= T // 2)[None].repeat(B, 0).astype(np.int32),
        "masked_lm_positions": pos,
        "masked_lm_ids": r.integers(0, V, (B, P)).astype(np.int32),
        "masked_lm_weights": np.ones((B, P), np.float32),
        "next_sentence_label": r.integers(0, 2, B).astype(np.int32),
        "labels": r.integers(0, 2, B).astype(np.int32),
    }


def mnist_batch(B: int, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {"x": r.random((B, 784), dtype=np.float32), "y": r.integers(0, 10, B).astype(np.int32)}


class Adam:
    """The textbook update, enough to train the tiny models here (runtime/numerics/optim.py is
    H4's)."""

    def __init__(self, params: dict[str, np.ndarray], lr: float) -> None:
        self.params, self.lr, self.t = params, lr, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, p in self.params.items():
            g = grads[k]
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            mhat, vhat = self.m[k] / (1 - 0.9**self.t), self.v[k] / (1 - 0.999**self.t)
            p -= self.lr * mhat / (np.sqrt(vhat) + 1e-8)  # in place: the model keeps its arrays


def train(model: Any, batches: list[dict[str, np.ndarray]], steps: int, lr: float) -> list[float]:
    opt = Adam(model.parameters(), lr)
    losses = []
    for i in range(steps):
        model.zero_grad()
        losses.append(model.forward_loss(batches[i % len(batches)]))
        model.backward()
        opt.step(model.grads())
    return losses


def loss_check(
    model_factory: Any, batch: dict[str, np.ndarray], tol: float = 1e-5
) -> dict[str, float]:
    """Whole-model gradient check of forward_loss / backward (float64, every parameter).

    Some gradients of a freshly initialised model are ~1e-6, so the step is 1e-4 (the loss is
    smooth; truncation error ~1e-8 relative) to keep round-off out of the comparison.
    """
    b64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in batch.items()}
    return check_layer(
        model_factory,
        [],
        inputs=[],
        grad_inputs=[],
        tol=tol,
        eps=1e-4,
        forward=lambda m, xs: m.forward_loss(b64),
        backward=lambda m, w: (m.backward(w), ())[1],
    )


# ---------------------------------------------------------------------------------------------
# whole-model gradients
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", ["relu", "tanh", "selu"])
def test_fc_mnist_gradients(act: str) -> None:
    errs = loss_check(
        lambda: FcMnistModel({"hidden_sizes": [3, 4], "activation_fn": act}, FP32, 0),
        mnist_batch(5),
    )
    assert set(errs) == {
        "fc0.weight",
        "fc0.bias",
        "fc1.weight",
        "fc1.bias",
        "logits.weight",
        "logits.bias",
    }


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"loss_scaling": "batch_size", "loss_weight": 0.25},
        {"position_embedding_type": "fixed"},
        {"use_bias_in_output": True},
    ],
)
@pytest.mark.slow
def test_gpt2_gradients(extra: dict) -> None:
    errs = loss_check(lambda: GPT2Model({**TINY_LM, **extra}, FP32, 0), lm_batch(2, 5, 11))
    assert "embed.wte.weight" in errs and "head.out.emb.weight" not in errs


@pytest.mark.parametrize("extra", [{}, {"use_untied_layer_norm": True}])
@pytest.mark.slow
def test_gptj_gradients(extra: dict) -> None:
    errs = loss_check(lambda: GPTJModel({**TINY_GPTJ, **extra}, FP32, 0), lm_batch(2, 5, 11))
    assert {"head.out.weight", "head.out.bias"} <= set(errs) and "embed.wpe.weight" not in errs


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
def test_fc_mnist_learns_a_separable_problem() -> None:
    r = np.random.default_rng(0)
    centres = r.random((10, 784), dtype=np.float32)  # one prototype image per class
    y = r.integers(0, 10, 256).astype(np.int32)
    x = np.clip(centres[y] + 0.1 * r.standard_normal((256, 784)).astype(np.float32), 0, 1)
    batches = [{"x": x[i : i + 64], "y": y[i : i + 64]} for i in range(0, 256, 64)]
    model = FcMnistModel({"hidden_sizes": [32], "dropout": 0.1}, FP32, 0)
    losses = train(model, batches, 40, 1e-3)
    assert losses[-1] < 0.1 * losses[0]
    sums = model.eval_metrics({"x": x, "y": y})
    assert FcMnistModel.summarize_metrics(sums)["accuracy"] == 1.0
    assert model.training  # eval_metrics restores the mode


def test_tiny_gpt2_overfits_a_repeated_text() -> None:
    text = "the quick brown fox jumps over the lazy dog. " * 8
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], dtype=np.int32)
    T = 16
    starts = np.arange(0, len(ids) - T - 1, 7)
    batch = {
        "input_ids": np.stack([ids[s : s + T] for s in starts]),
        "labels": np.stack([ids[s + 1 : s + T + 1] for s in starts]),
    }
    cfg = {
        "vocab_size": len(chars),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_heads": 4,
        "filter_size": 64,
        "max_position_embeddings": T,
    }
    model = GPT2Model(cfg, FP32, 0)
    losses = train(model, [batch], 120, 3e-3)
    assert losses[0] > 2.5 and losses[-1] < 0.3, (losses[0], losses[-1])
    ppl = GPT2Model.summarize_metrics(model.eval_metrics(batch))["perplexity"]
    assert ppl < 1.5


def test_tiny_gptj_learns_too() -> None:
    batch = lm_batch(4, 8, 11)
    losses = train(
        GPTJModel({**TINY_GPTJ, "max_position_embeddings": 8}, FP32, 0), [batch], 60, 1e-2
    )
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "name,batch",
    [("fc_mnist", mnist_batch(16)), ("gpt2", lm_batch(2, 6, 11)), ("gptj", lm_batch(2, 6, 11))],
)
def test_cbfloat16_stays_close_to_fp32(name: str, batch: dict) -> None:
    mp = {"fc_mnist": {"hidden_sizes": [64, 32]}, "gpt2": TINY_LM, "gptj": TINY_GPTJ}[name]
    cls = registry.get(name)
    a, b = cls(mp, FP32, 3), cls(mp, Policy("cbfloat16"), 3)
    la, lb = a.forward_loss(batch), b.forward_loss(batch)
    assert la != lb and abs(la - lb) < 1e-2 * abs(la)
    a.backward(), b.backward(1024.0)  # a loss scale, as with dynamic loss scaling
    ga = np.concatenate([g.ravel() for g in a.grads().values()])
    gb = np.concatenate([g.ravel() for g in b.grads().values()]) / 1024.0
    cos = ga @ gb / (np.linalg.norm(ga) * np.linalg.norm(gb))
    assert cos > 0.999
    for k, p in a.parameters().items():  # masters stay fp32 and identical (same seed)
        np.testing.assert_array_equal(p, b.parameters()[k])


# ---------------------------------------------------------------------------------------------
# tied weights, determinism, rng state
# ---------------------------------------------------------------------------------------------
def test_tied_weights_are_one_array() -> None:
    m = GPT2Model(TINY_LM, FP32, 0)
    wte = m.parameters()["embed.wte.weight"]
    assert (
        m.head.out.emb.p["weight"] is wte
        and m.head.out.emb.g["weight"] is m.grads()["embed.wte.weight"]
    )
    assert not any("head.out" in k for k in m.parameters())
    batch = lm_batch(2, 6, 11)
    before = m.forward_loss(batch)
    wte += 0.5  # an in-place optimizer update reaches both uses
    assert m.forward_loss(batch) != before
    j = GPTJModel(TINY_GPTJ, FP32, 0)
    assert j.parameters()["head.out.weight"].shape == (8, 11)


@pytest.mark.parametrize("name", registry.names())
def test_backward_accumulates_until_zero_grad(name: str) -> None:
    mp, batch = {
        "fc_mnist": ({"hidden_sizes": [8]}, mnist_batch(4)),
        "gpt2": (TINY_LM, lm_batch(2, 4, 11)),
        "gptj": (TINY_GPTJ, lm_batch(2, 4, 11)),
        "llama": (TINY_LLAMA, lm_batch(2, 4, 11)),
        "bert": (TINY_BERT, bert_batch(2, 6, 11)),
        "bert_classifier": ({**TINY_BERT, "task_dropout": 0.0}, bert_batch(2, 6, 11)),
    }[name]
    m = registry.get(name)(mp, FP32, 0)
    m.forward_loss(batch)
    m.backward(2.0)  # the gradient of 2 * loss
    once = {k: g.copy() for k, g in m.grads().items()}
    m.forward_loss(batch)
    m.backward(2.0)
    for k, g in m.grads().items():
        np.testing.assert_allclose(g, 2 * once[k], rtol=1e-5, atol=1e-7, err_msg=k)
    m.zero_grad()
    m.forward_loss(batch)
    m.backward(1.0)
    for k, g in m.grads().items():
        np.testing.assert_allclose(2 * g, once[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_same_seed_same_init_and_dropout_masks() -> None:
    mp = {**TINY_LM, "dropout_rate": 0.3}
    a, b, c = GPT2Model(mp, FP32, 7), GPT2Model(mp, FP32, 7), GPT2Model(mp, FP32, 8)
    for k, v in a.parameters().items():
        np.testing.assert_array_equal(v, b.parameters()[k])
    assert not np.array_equal(
        a.parameters()["h0.attn.qkv.weight"], c.parameters()["h0.attn.qkv.weight"]
    )
    batch = lm_batch(2, 6, 11)
    assert [a.forward_loss(batch) for _ in range(3)] == [b.forward_loss(batch) for _ in range(3)]


def test_rng_state_round_trip_reproduces_dropout() -> None:
    m = FcMnistModel({"hidden_sizes": [16], "dropout": 0.5}, FP32, 0)
    batch = mnist_batch(8)
    state = m.rng_state()
    first = [m.forward_loss(batch) for _ in range(2)]
    assert first[0] != first[1]  # fresh masks each step
    m.set_rng_state(state)
    assert [m.forward_loss(batch) for _ in range(2)] == first
    m.eval()
    assert m.forward_loss(batch) == m.forward_loss(batch)  # no dropout in eval


def test_eval_metrics_sums_and_summaries() -> None:
    m = FcMnistModel({"hidden_sizes": [16]}, FP32, 0)
    batch = mnist_batch(10)
    sums = m.eval_metrics(batch)
    assert sums["count"] == 10 and 0 <= sums["correct"] <= 10
    assert sums["loss_sum"] / 10 == pytest.approx(m.forward_loss(batch), rel=1e-6)
    g = GPT2Model(TINY_LM, FP32, 0)
    s = GPT2Model.summarize_metrics(g.eval_metrics(lm_batch(3, 4, 11)))
    assert s["perplexity"] == pytest.approx(math.exp(s["loss"]))
    assert g.eval_metrics(lm_batch(3, 4, 11))["count"] == 12  # tokens


def test_loss_scalings_coincide_when_loss_weight_is_one_over_length() -> None:
    batch = lm_batch(3, 6, 11)
    a = GPT2Model({**TINY_LM, "loss_scaling": "num_tokens"}, FP32, 0).forward_loss(batch)
    b = GPT2Model(
        {**TINY_LM, "loss_scaling": "batch_size", "loss_weight": 1 / 6}, FP32, 0
    ).forward_loss(batch)
    c = GPT2Model({**TINY_LM, "loss_scaling": "batch_size"}, FP32, 0).forward_loss(batch)
    assert a == pytest.approx(b, rel=1e-6) and c == pytest.approx(6 * a, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# schemas and configuration forms
# ---------------------------------------------------------------------------------------------
# the model-section keys of the Model Zoo files (Model Zoo's params files, docs/sources.md, GPT-J 6B
# TF and PyTorch)
YAML_MODEL_KEYS = {
    "fc_mnist": {
        "hidden_sizes",
        "dropout",
        "activation_fn",
        "name",
        "mixed_precision",
        "depth",
        "hidden_size",
        "to_float16",
    },
    "gpt2": {
        "vocab_size",
        "hidden_size",
        "use_position_embedding",
        "position_embedding_type",
        "share_embedding_weights",
        "max_position_embeddings",
        "num_hidden_layers",
        "dropout_rate",
        "layer_norm_epsilon",
        "num_heads",
        "attention_type",
        "attention_dropout_rate",
        "use_projection_bias_in_attention",
        "use_ffn_bias_in_attention",
        "filter_size",
        "nonlinearity",
        "use_ffn_bias",
        "use_bias_in_output",
        "loss_scaling",
        "loss_weight",
        "mixed_precision",
        "boundary_casting",
        "tf_summary",
        "use_vsl",
        "fp16_type",
    },
    "gptj": {
        "vocab_size",
        "position_embedding_type",
        "embedding_dropout_rate",
        "share_embedding_weights",
        "hidden_size",
        "num_heads",
        "num_hidden_layers",
        "max_position_embeddings",
        "attention_type",
        "use_projection_bias_in_attention",
        "use_ffn_bias_in_attention",
        "use_ffn_bias",
        "filter_size",
        "nonlinearity",
        "attention_dropout_rate",
        "residual_dropout_rate",
        "rotary_dim",
        "layer_norm_epsilon",
        "use_bias_in_output",
        "initializer_range",
        "loss_scaling",
        "loss_weight",
        "embedding_initializer",
        "initializer",
        "output_layer_initializer",
        "mixed_precision",
        "precision_opt_level",
        "boundary_casting",
        "tf_summary",
    },
}
# the model sections of the published BERT (TF R1.7.1 params_bert_large_msl128.yaml, PyTorch
# bert_base_MSL128.yaml, RoBERTa, the R1.8 weight-streaming and R2.0 variants) and LLaMA
# (Release 1.9.1 params_llama_7b.yaml, Release 2.0 params_llama2_70b.yaml) configs
YAML_MODEL_KEYS["bert"] = {
    "hidden_size",
    "use_position_embedding",
    "use_segment_embedding",
    "position_embedding_type",
    "max_position_embeddings",
    "share_embedding_weights",
    "num_hidden_layers",
    "dropout_rate",
    "layer_norm_epsilon",
    "num_heads",
    "attention_dropout_rate",
    "filter_size",
    "encoder_nonlinearity",
    "use_ffn_bias",
    "use_vsl",
    "mixed_precision",
    "boundary_casting",
    "tf_summary",
    "vocab_size",
    "mlm_loss_weight",
    "enable_vts",
    "disable_nsp",
    "attention_kernel",
    "pooler_nonlinearity",
    "mlm_loss_scaling",
    "use_nsp_bias",
}
YAML_MODEL_KEYS["bert_classifier"] = YAML_MODEL_KEYS["bert"] | {
    "task_dropout",
    "problem_type",
    "num_labels",
    "compute_eval_metrics",
}
YAML_MODEL_KEYS["llama"] = YAML_MODEL_KEYS["gpt2"] - {"use_vsl"} | {
    "rotary_dim",
    "use_rms_norm",
    "norm_type",
    "attention_module",
    "extra_attention_params",
    "embedding_dropout_rate",
    "use_bfloat16",
}


@pytest.mark.parametrize("name", registry.names())
def test_schema_accepts_every_model_zoo_key(name: str) -> None:
    entry = registry.get(name)
    assert entry.NAME == name
    assert YAML_MODEL_KEYS[name] <= set(entry.SCHEMA)
    assert (
        entry.family
        == {
            "fc_mnist": "mnist",
            "gpt2": "lm",
            "gptj": "lm",
            "llama": "lm",
            "bert": "mlm",
            "bert_classifier": "pairs",
        }[name]
    )
    for key, spec in entry.SCHEMA.items():
        assert spec.doc, key
        assert spec.default is None or spec.choices is None or spec.default in spec.choices, key


def test_gptj_model_zoo_initializer_forms_build() -> None:
    tf_form = {
        "embedding_initializer": [{"name": "scaled_init_normal", "key": "vocab_size"}],
        "initializer": [{"name": "variance_scaling", "scale": 1.0}],
        "output_layer_initializer": [{"name": "variance_scaling", "scale_type": "wang_init"}],
    }
    pt_form = {
        "embedding_initializer": {"name": "truncated_normal", "mean": 0.0, "std": 0.3},
        "initializer": {"name": "truncated_normal", "mean": 0.0, "std": 0.2},
        "output_layer_initializer": {"name": "truncated_normal", "mean": 0.0, "std": 0.1},
    }
    for form in (tf_form, pt_form):
        m = GPTJModel({**TINY_GPTJ, **form}, FP32, 0)
        assert np.isfinite(m.forward_loss(lm_batch(1, 4, 11)))
    w = GPTJModel({**TINY_GPTJ, **pt_form}, FP32, 0).parameters()["embed.wte.weight"]
    assert abs(w.std() - 0.3 * 0.88) < 0.05 and np.abs(w).max() <= 0.6 + 1e-6  # truncated at 2 std
    with pytest.raises(ConfigError, match="model.initializer"):
        GPTJModel({**TINY_GPTJ, "initializer": {"name": "kaiming"}}, FP32, 0)


def test_fc_mnist_both_forms() -> None:
    tf = FcMnistModel({"hidden_sizes": [500, 300]}, FP32, 0)
    assert (
        tf.hidden == [500, 300]
        and tf.num_params() == 784 * 500 + 500 + 500 * 300 + 300 + 300 * 10 + 10
    )
    pt = FcMnistModel({"depth": 3, "hidden_size": 50}, FP32, 0)
    assert pt.hidden == [50, 50, 50]
    assert FcMnistModel({"depth": 3, "hidden_size": 50, "hidden_sizes": [7]}, FP32, 0).hidden == [7]
    assert FcMnistModel({}, FP32, 0).hidden == [500, 300]
    with pytest.raises(ConfigError, match="depth and model.hidden_size"):
        FcMnistModel({"depth": 2}, FP32, 0)
    w = tf.parameters()["fc0.weight"]
    assert np.abs(w).max() <= math.sqrt(6 / (784 + 500))  # glorot uniform
    assert tf.parameters()["fc0.bias"].sum() == 0


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"hidden_size": 9}, "divisible by model.num_heads"),
        ({"vocab_size": None}, "vocab_size is not set"),
        ({"position_embedding_type": "rotary", "rotary_dim": 6}, "rotary_dim"),
    ],
)
def test_inconsistent_lm_configs_are_config_errors(bad: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GPT2Model({**TINY_LM, **bad}, FP32, 0)


def test_too_long_sequences_are_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match="exceed model.max_position_embeddings"):
        GPT2Model(TINY_LM, FP32, 0).forward_loss(lm_batch(1, 7, 11))


# ---------------------------------------------------------------------------------------------
# sizes, graph, flops
# ---------------------------------------------------------------------------------------------
def test_true_shape_parameter_counts_without_allocating() -> None:
    gpt2_small = {"vocab_size": 50257}  # every other default is GPT-2 small's
    assert GPT2Model.param_count(gpt2_small) == 124_439_808  # the published 124M
    tracemalloc.start()
    n = GPTJModel.param_count({"vocab_size": 50400})
    need = GPTJModel.param_bytes_estimate(
        {"vocab_size": 50400, "mixed_precision": True}, batch_size=1, seq_len=2048
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert 6.0e9 < n < 6.1e9 and peak < 1 << 20
    assert need > 16 * n > 24 * 2**30  # far beyond a 24 GiB host
    gpt3_xl = {
        "vocab_size": 50257,
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_heads": 16,
        "filter_size": 8192,
        "max_position_embeddings": 2048,
    }
    assert 1.3e9 < GPT2Model.param_count(gpt3_xl) < 1.35e9


@pytest.mark.parametrize(
    "name,mp",
    [
        ("fc_mnist", {"hidden_sizes": [20, 10], "dropout": 0.2}),
        ("gpt2", TINY_LM),
        ("gptj", TINY_GPTJ),
    ],
)
def test_param_count_and_layer_graph_agree_with_the_model(name: str, mp: dict) -> None:
    cls = registry.get(name)
    m = cls(mp, FP32, 0)
    assert cls.param_count(mp) == m.num_params() == sum(v.size for v in m.parameters().values())
    assert cls.param_bytes_estimate(mp) > 16 * m.num_params()
    graph = m.layer_graph(4)
    params = m.parameters()
    assert all(s.kind in KINDS for s in graph) and graph[-1].kind == "softmax_ce"
    assert all(n in params for s in graph for n in s.param_names)
    used = {n for s in graph for n in s.param_names}
    assert used == set(params)  # every weight is read by some kernel
    assert all(s.out_shape[0] == 4 for s in graph)
    assert m.flops_per_sample() == pytest.approx(3 * sum(s.fwd_flops for s in m.layer_graph(1)))


def test_layer_graph_contents() -> None:
    fc = FcMnistModel({"hidden_sizes": [500, 300], "dropout": 0.2}, FP32, 0)
    kinds = [s.kind for s in fc.layer_graph(256)]
    assert kinds == ["dense", "relu", "dropout", "dense", "relu", "dropout", "dense", "softmax_ce"]
    dense = fc.layer_graph(256)[0]
    assert (
        dense.fwd_flops == 2 * 784 * 500 + 500
        and dense.out_shape == (256, 500)
        and dense.attr("n_in") == 784
    )
    # ~3 x 2 x 545k multiply-adds per image for training
    assert fc.flops_per_sample() == pytest.approx(6 * 545_000, rel=0.01)
    g = GPT2Model(TINY_LM, FP32, 0)
    graph = g.layer_graph(2, seq_len=4)
    tied = [s for s in graph if "embed.wte.weight" in s.param_names]
    assert [s.kind for s in tied] == [
        "embedding",
        "dense",
    ]  # the tied weight, named once, read twice
    attn = next(s for s in graph if s.kind == "attention")
    assert attn.attr("heads") == 2 and attn.attr("seq") == 4 and attn.out_shape == (2, 4, 8)
    j = GPTJModel(TINY_GPTJ, FP32, 0)
    assert next(s for s in j.layer_graph(1) if s.kind == "attention").attr("rotary_dim") == 2
    assert g.flops_per_sample(seq_len=6) > g.flops_per_sample(seq_len=3)


def test_the_graph_helpers_live_once_on_the_model_base():
    """input_shape / layer_graph / flops_per_sample are Model's; a sequence model says only its
    sequence_length, so GPT-2, GPT-J, LLaMA and BERT share one definition of each."""
    from cs2sim.runtime.modelzoo.bert.model import BertModel
    from cs2sim.runtime.nn.decoder import DecoderLM
    from cs2sim.runtime.nn.model import Model

    for cls in (DecoderLM, BertModel):
        for helper in ("input_shape", "layer_graph", "flops_per_sample"):
            assert helper not in vars(cls), f"{cls.__name__} redefines {helper}"
        assert "sequence_length" in vars(cls)
    assert Model.sequence_length(object.__new__(Model)) is None
