"""BERT's layers: the embedding block, the post-LN encoder block and the pretraining heads.

  embed   x = dropout(LN(token[ids] + position[:T] + segment[token_type_ids]))      (B, T, C)
          and the batch's attention_mask (or TF's input_mask) into the model's KeyPadding
  block   a = LN_1(x + drop(attn(x)));  out = LN_2(a + drop(mlp(a)))   bidirectional attention
          over the real (unpadded) keys: a padded position changes nothing at a real one
  heads   masked LM: the hidden states at the masked positions (B, P, C) -> dense -> act -> LN
          -> output layer (tied to the token embedding where the config says) -> CE weighted by
          masked_lm_weights; next sentence: tanh(dense(h[:, 0])) -> dense to 2 -> CE.
  loss    (1/B) sum over rows and predictions of weight * CE_mlm  +  (1/B) sum of CE_nsp

The loss is a sum over rows divided by the rows of the batch, so shards and micro-batches of a
batch add up to the batch's gradient (runtime/executors/replicas.py): every scaling of the MLM
loss (mlm_loss_weight, the number of masked tokens of the batch) is folded into the weights by
the input pipeline (runtime/data/mlm.py), which sees the whole batch.

Without dropout the encoder block runs its residual adds and layer norms inside the products
before them (as transformer.Block does): forward, the first residual and LN_1 on each row block
of the attention's output projection and the second with LN_2 on the MLP's; backward, LN_1's
backward on each row block of the MLP's dx product.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cs2sim.runtime.nn.activations import Activation
from cs2sim.runtime.nn.attention import KeyPadding, SelfAttention
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.embedding import Embedding, TiedProjection, scatter_add_rows
from cs2sim.runtime.nn.init import Init
from cs2sim.runtime.nn.layernorm import LayerNorm
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import needs_rows
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.nn.transformer import MLP, POSITIONS
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["BertEmbedding", "EncoderBlock", "MLMHead", "NSPHead", "BertHead", "ClassifierHead"]


class BertEmbedding(Module):
    """{"input_ids": (B, T), "token_type_ids": (B, T), "attention_mask": (B, T)} (or the ids
    alone) -> (B, T, C); the mask (1 real, 0 padding) goes to `padding` for the encoder."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        rng: np.random.Generator,
        drop_rng: np.random.Generator,
        init: Init,
        *,
        position: str | None = "learned",
        max_positions: int = 512,
        num_segments: int = 2,
        eps: float = 1e-12,
        dropout: float = 0.0,
        policy: Policy = FP32,
        padding: KeyPadding | None = None,
    ) -> None:
        super().__init__(policy)
        self.padding = padding
        self.wte = Embedding(vocab, dim, rng, init, policy)
        make = POSITIONS.get(position or "")
        self.wpe = make(max_positions, dim, rng, init, policy) if make else None
        self.tte = Embedding(num_segments, dim, rng, init, policy) if num_segments else None
        self.ln = LayerNorm(dim, eps, policy)
        self.drop = Dropout(dropout, drop_rng, policy)

    def forward(self, x: Any) -> np.ndarray:
        """ids (B, T) int, or {"input_ids", "token_type_ids"} -> (B, T, C)."""
        ids = x["input_ids"] if isinstance(x, dict) else x
        if self.padding is not None:
            self.padding.set(x.get("attention_mask") if isinstance(x, dict) else None)
        e = self.wte.forward(ids)  # (B, T, C)
        s = self.buf("sum", e.shape, e.dtype)  # (B, T, C)
        np.copyto(s, e)
        if self.wpe is not None:
            s += self.wpe.forward(ids.shape[1])  # (T, C) broadcast over the batch
        if self.tte is not None:
            seg = x["token_type_ids"] if isinstance(x, dict) else np.zeros_like(ids)
            s += self.tte.forward(seg)  # (B, T, C)
        self.policy.cast(s, out=s)
        return self.drop.forward(self.ln.forward(s))

    def backward(self, dy: np.ndarray) -> None:
        """Accumulate the three tables' gradients; token ids have none."""
        d = self.ln.backward(self.drop.backward(dy))  # (B, T, C)
        if self.wpe is not None:
            self.wpe.backward(d)
        if self.tte is not None:
            self.tte.backward(d)
        self.wte.backward(d)
        return None

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """Token, position and segment "embedding"s, the "layernorm", dropout."""
        s = self.wte.specs(f"{name}.wte", in_shape, names)
        out = s[-1].out_shape
        if self.wpe is not None:
            attrs = (("vocab", self.wpe.max_positions), ("dim", self.wpe.dim), ("positions", True))
            s.append(
                make_spec(
                    f"{name}.wpe", "embedding", out, 1, tuple(self.wpe.p.values()), names, attrs
                )
            )
        if self.tte is not None:
            s.append(
                make_spec(
                    f"{name}.tte",
                    "embedding",
                    out,
                    1,
                    (self.tte.p["weight"],),
                    names,
                    (("vocab", self.tte.vocab), ("dim", self.tte.dim)),
                )
            )
        s += self.ln.specs(f"{name}.ln", out, names)
        return s + self.drop.specs(f"{name}.drop", out, names)


class EncoderBlock(Module):
    """BERT's post-LN encoder block: bidirectional attention, then the MLP, each + LN."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        filter_size: int,
        act: str,
        rng: np.random.Generator,
        drop_rng: np.random.Generator,
        *,
        eps: float = 1e-12,
        qkv_bias: bool = True,
        attn_out_bias: bool = True,
        ffn_bias: bool = True,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        scaled: bool = True,
        init: Init,
        out_init: Init,
        policy: Policy = FP32,
        padding: KeyPadding | None = None,
    ) -> None:
        super().__init__(policy)
        self.attn = SelfAttention(
            dim,
            num_heads,
            rng,
            drop_rng,
            qkv_bias=qkv_bias,
            out_bias=attn_out_bias,
            dropout=attn_dropout,
            scaled=scaled,
            init=init,
            out_init=out_init,
            policy=policy,
            causal=False,
            padding=padding,
        )
        self.drop_attn = Dropout(resid_dropout, drop_rng, policy)
        self.ln_1 = LayerNorm(dim, eps, policy)
        self.mlp = MLP(dim, filter_size, act, rng, ffn_bias, init, out_init, policy)
        self.drop_mlp = Dropout(resid_dropout, drop_rng, policy)
        self.ln_2 = LayerNorm(dim, eps, policy)

    def _fusable(self) -> bool:
        """Residual adds and layer norms inside the products: only without residual dropout
        (its mask is drawn for the whole array at once)."""
        return not self.drop_attn.active and not self.drop_mlp.active

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(B, T, C) -> (B, T, C)."""
        if self._fusable():
            return self._forward_fused(x)
        a = self.buf("a", x.shape, x.dtype)  # (B, T, C)
        np.add(x, self.drop_attn.forward(self.attn.forward(x)), out=a)  # residual 1
        h = self.ln_1.forward(a)  # (B, T, C)
        m = self.buf("m", x.shape, x.dtype)  # (B, T, C)
        np.add(h, self.drop_mlp.forward(self.mlp.forward(h)), out=m)  # residual 2
        return self.ln_2.forward(m)

    def _forward_fused(self, x: np.ndarray) -> np.ndarray:
        C = x.shape[-1]
        x2 = x.reshape(-1, C)  # (N, C)
        a2 = self.buf("a", x.shape, x.dtype).reshape(-1, C)  # (N, C)
        h2 = self.ln_1.begin_forward(a2)  # (N, C), filled row block by row block

        def residual_ln_1(blk: np.ndarray, rows: slice, cols: slice) -> None:
            np.add(x2[rows], blk, out=a2[rows])  # residual 1
            self.ln_1.forward_rows(rows.start, rows.stop)

        self.attn.forward(x, epilogue=needs_rows(residual_ln_1))
        m2 = self.buf("m", x.shape, x.dtype).reshape(-1, C)  # (N, C)
        out2 = self.ln_2.begin_forward(m2)  # (N, C)

        def residual_ln_2(blk: np.ndarray, rows: slice, cols: slice) -> None:
            np.add(h2[rows], blk, out=m2[rows])  # residual 2
            self.ln_2.forward_rows(rows.start, rows.stop)

        self.mlp.forward(h2.reshape(x.shape), epilogue=needs_rows(residual_ln_2))
        return out2.reshape(x.shape)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        """(B, T, C) -> (B, T, C)."""
        if self._fusable():
            return self._backward_fused(dout)
        dm = self.ln_2.backward(dout)  # (B, T, C) gradient at residual 2
        dh = self.buf("dh", dout.shape, dout.dtype)  # (B, T, C)
        np.add(dm, self.mlp.backward(self.drop_mlp.backward(dm)), out=dh)
        da = self.ln_1.backward(dh)  # (B, T, C) gradient at residual 1
        dx = self.buf("dx", dout.shape, dout.dtype)  # (B, T, C)
        np.add(da, self.attn.backward(self.drop_attn.backward(da)), out=dx)
        self.policy.cast(dx, out=dx)
        return dx

    def _backward_fused(self, dout: np.ndarray) -> np.ndarray:
        C = dout.shape[-1]
        dm2 = self.ln_2.backward(dout).reshape(-1, C)  # (N, C) gradient at residual 2
        dh2 = self.buf("dh", dout.shape, dout.dtype).reshape(-1, C)  # (N, C)
        da2 = self.ln_1.begin_backward(dh2)  # (N, C), LN_1's rows as the MLP's dx comes

        def mlp_back(blk: np.ndarray, rows: slice, cols: slice) -> None:
            np.add(dm2[rows], blk, out=dh2[rows])  # + the residual path
            self.ln_1.backward_rows(rows.start, rows.stop)

        self.mlp.backward(dm2.reshape(dout.shape), dx_epilogue=needs_rows(mlp_back))
        self.ln_1.end_backward()
        dx = self.buf("dx", dout.shape, dout.dtype)  # (B, T, C)
        dx2 = dx.reshape(-1, C)

        def attn_back(blk: np.ndarray, rows: slice, cols: slice) -> None:
            np.add(da2[rows, cols], blk, out=dx2[rows, cols])  # + the residual path

        self.attn.backward(da2.reshape(dout.shape), dx_epilogue=attn_back)
        self.policy.cast(dx, out=dx)
        return dx

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """The block's kernels in execution order."""
        C = in_shape[-1]
        s = self.attn.specs(f"{name}.attn", in_shape, names)
        s += self.drop_attn.specs(f"{name}.drop_attn", in_shape, names)
        s.append(make_spec(f"{name}.add_attn", "add", in_shape, C))
        s += self.ln_1.specs(f"{name}.ln_1", in_shape, names)
        s += self.mlp.specs(f"{name}.mlp", in_shape, names)
        s += self.drop_mlp.specs(f"{name}.drop_mlp", in_shape, names)
        s.append(make_spec(f"{name}.add", "add", in_shape, C))
        return s + self.ln_2.specs(f"{name}.ln_2", in_shape, names)


class MLMHead(Module):
    """h (B, T, C), positions (B, P) -> logits (B * P, V) of the gathered positions."""

    def __init__(
        self,
        dim: int,
        vocab: int,
        rng: np.random.Generator,
        *,
        act: str,
        eps: float,
        tied_to: Embedding | None,
        ffn_bias: bool,
        out_bias: bool,
        init: Init,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.dense = Dense(dim, dim, rng, bias=ffn_bias, init=init, policy=policy)
        self.act = Activation(act, policy)
        self.ln = LayerNorm(dim, eps, policy)
        self.out: TiedProjection | Dense
        if tied_to is not None:
            self.out = TiedProjection(tied_to, bias=out_bias, policy=policy)
        else:
            self.out = Dense(dim, vocab, rng, bias=out_bias, init=init, policy=policy)

    def forward(self, h: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """(B, T, C), (B, P) int -> (B * P, V)."""
        B, T, C = h.shape
        rows = (positions + T * np.arange(B)[:, None]).reshape(-1)  # (B * P,) rows of (B * T)
        g = np.take(
            h.reshape(-1, C), rows, axis=0, out=self.buf("g", (rows.size, C), h.dtype)
        )  # (B * P, C)
        self._rows, self._shape = rows, h.shape
        return self.out.forward(self.ln.forward(self.act.forward(self.dense.forward(g))))

    def backward(self, dlogits: np.ndarray) -> np.ndarray:
        """(B * P, V) -> dh (B, T, C): the gathered rows' gradients scattered back (summed
        where a position is gathered twice: the padding predictions all point at 0)."""
        dg = self.dense.backward_dx(
            self.act.backward(self.ln.backward(self.out.backward_dx(dlogits)))
        )
        dh = self.buf("dh", self._shape, dg.dtype)  # (B, T, C)
        dh.fill(0)
        scatter_add_rows(dh.reshape(-1, self._shape[-1]), self._rows, dg)
        return dh

    def specs(
        self, name: str, in_shape: tuple[int, ...], predictions: int, names: dict[int, str]
    ) -> list[LayerSpec]:
        """The "gather" of P positions, dense, act, layernorm, output "dense"."""
        B, T, C = in_shape
        g_shape = (B, predictions, C)
        s = [make_spec(f"{name}.gather", "gather", g_shape, 1, attrs=(("rows", predictions),))]
        s += self.dense.specs(f"{name}.dense", g_shape, names)
        s += self.act.specs(f"{name}.act", g_shape, names)
        s += self.ln.specs(f"{name}.ln", g_shape, names)
        return s + self.out.specs(f"{name}.out", g_shape, names)


class NSPHead(Module):
    """h (B, T, C) -> next-sentence logits (B, 2): tanh(pooler(h[:, 0])) @ W + b."""

    def __init__(
        self,
        dim: int,
        rng: np.random.Generator,
        *,
        init: Init,
        bias: bool = True,
        classes: int = 2,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.pooler = Dense(dim, dim, rng, bias=True, init=init, policy=policy)
        self.act = Activation("tanh", policy)
        self.cls = Dense(dim, classes, rng, bias=bias, init=init, policy=policy)

    def forward(self, h: np.ndarray) -> np.ndarray:
        """(B, T, C) -> (B, classes)."""
        self._shape = h.shape
        first = np.ascontiguousarray(h[:, 0])  # (B, C) the [CLS] position
        return self.cls.forward(self.act.forward(self.pooler.forward(first)))

    def backward(self, dlogits: np.ndarray) -> np.ndarray:
        """(B, classes) -> dh (B, T, C), nonzero at position 0 only."""
        d0 = self.pooler.backward_dx(self.act.backward(self.cls.backward_dx(dlogits)))  # (B, C)
        dh = self.buf("dh", self._shape, d0.dtype)  # (B, T, C)
        dh.fill(0)
        dh[:, 0] = d0
        return dh

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """The "gather" of the [CLS] position, pooler dense + tanh, classifier dense."""
        B, T, C = in_shape
        s = [make_spec(f"{name}.gather", "gather", (B, C), 1, attrs=(("rows", 1),))]
        s += self.pooler.specs(f"{name}.pooler", (B, C), names)
        s += self.act.specs(f"{name}.act", (B, C), names)
        return s + self.cls.specs(f"{name}.cls", (B, C), names)


class BertHead(Module):
    """The pretraining loss head: masked LM (+ next sentence unless disabled).

    labels: masked_lm_positions (B, P) int, masked_lm_ids (B, P) int, masked_lm_weights (B, P)
    float (0 for padding; every loss scaling folded in), next_sentence_label (B,) int.
    """

    def __init__(
        self, mlm: MLMHead, nsp: NSPHead | None, policy: Policy = FP32, predictions: int = 20
    ) -> None:
        super().__init__(policy)
        self.mlm, self.nsp = mlm, nsp
        self.predictions = predictions  # P of the compiler's graph (the input's, when known)
        self.mlm_ce = SoftmaxCrossEntropy(policy)
        self.nsp_ce = SoftmaxCrossEntropy(policy) if nsp is not None else None

    def forward(self, h: np.ndarray, labels: dict[str, np.ndarray]) -> float:
        """h (B, T, C) -> loss = (1/B) sum w CE_mlm + (1/B) sum CE_nsp."""
        B = h.shape[0]
        logits = self.mlm.forward(h, labels["masked_lm_positions"])  # (B * P, V)
        loss = self.mlm_ce.forward(
            logits, labels["masked_lm_ids"], 1.0 / B, weights=labels["masked_lm_weights"]
        )
        self.mlm_loss, self.nsp_loss = loss, 0.0
        if self.nsp is not None and self.nsp_ce is not None:  # both or neither
            self.nsp_loss = self.nsp_ce.forward(
                self.nsp.forward(h), labels["next_sentence_label"], 1.0 / B
            )
            loss += self.nsp_loss
        self._h_shape, self._mask = h.shape, labels["masked_lm_weights"].reshape(-1) > 0
        return float(np.float32(loss)) if h.dtype == np.float32 else loss

    def backward(self, loss_scale: float = 1.0) -> np.ndarray:
        """-> dh (B, T, C)."""
        dh = self.mlm.backward(self.mlm_ce.backward(loss_scale))  # (B, T, C), a buffer
        if self.nsp is not None and self.nsp_ce is not None:  # both or neither
            dh += self.nsp.backward(self.nsp_ce.backward(loss_scale))
        self.policy.cast(dh, out=dh)
        return dh

    def metric_sums(self) -> dict[str, float]:
        """Sums for eval: MLM CE and accuracy over the real predictions, NSP accuracy."""
        ce, mask = self.mlm_ce, self._mask
        assert ce.probs is not None, "metric_sums needs a forward first"
        correct = (ce.probs.argmax(axis=1) == ce.labels) & mask
        out = {
            "mlm_ce_sum": float(ce.row_ce[mask].sum()),
            "mlm_count": float(mask.sum()),
            "mlm_correct": float(correct.sum()),
        }
        if self.nsp_ce is not None:
            out["nsp_correct"] = float(self.nsp_ce.num_correct())
            out["nsp_count"] = float(self.nsp_ce.count)
        return out

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """The MLM head's kernels and loss (P = self.predictions), then the NSP head's."""
        predictions = self.predictions
        s = self.mlm.specs(f"{name}.mlm", in_shape, predictions, names)
        V = s[-1].out_shape[-1]
        s.append(
            LayerSpec(
                f"{name}.mlm_ce",
                "softmax_ce",
                0,
                5.0 * V * predictions,
                1,
                (),
                (in_shape[0],),
                (("classes", V),),
            )
        )
        if self.nsp is not None:
            s += self.nsp.specs(f"{name}.nsp", in_shape, names)
            s.append(
                LayerSpec(
                    f"{name}.nsp_ce",
                    "softmax_ce",
                    0,
                    10.0,
                    1,
                    (),
                    (in_shape[0],),
                    (("classes", 2),),
                )
            )
        return s


class ClassifierHead(Module):
    """Fine-tuning's loss head (Model Zoo's BertForSequenceClassification): the [CLS] row ->
    pooler dense + tanh -> dropout(task_dropout) -> dense to num_labels -> mean cross-entropy.
    labels: (B,) int."""

    def __init__(
        self,
        dim: int,
        num_labels: int,
        rng: np.random.Generator,
        drop_rng: np.random.Generator,
        *,
        init: Init,
        dropout: float = 0.0,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.pooler = Dense(dim, dim, rng, bias=True, init=init, policy=policy)
        self.act = Activation("tanh", policy)
        self.drop = Dropout(dropout, drop_rng, policy)
        self.cls = Dense(dim, num_labels, rng, bias=True, init=init, policy=policy)
        self.ce = SoftmaxCrossEntropy(policy)

    def forward(self, h: np.ndarray, labels: np.ndarray) -> float:
        """h (B, T, C), labels (B,) -> mean CE."""
        self._shape = h.shape
        first = np.ascontiguousarray(h[:, 0])  # (B, C) the [CLS] position
        z = self.cls.forward(self.drop.forward(self.act.forward(self.pooler.forward(first))))
        return self.ce.forward(z, labels)

    def backward(self, loss_scale: float = 1.0) -> np.ndarray:
        """-> dh (B, T, C), nonzero at position 0 only."""
        d = self.drop.backward(self.cls.backward_dx(self.ce.backward(loss_scale)))
        d0 = self.pooler.backward_dx(self.act.backward(d))  # (B, C)
        dh = self.buf("dh", self._shape, d0.dtype)  # (B, T, C)
        dh.fill(0)
        dh[:, 0] = d0
        return dh

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """ "gather" of [CLS], pooler, tanh, dropout, classifier, "softmax_ce"."""
        B, T, C = in_shape
        s = [make_spec(f"{name}.gather", "gather", (B, C), 1, attrs=(("rows", 1),))]
        s += self.pooler.specs(f"{name}.pooler", (B, C), names)
        s += self.act.specs(f"{name}.act", (B, C), names)
        s += self.drop.specs(f"{name}.drop", (B, C), names)
        s += self.cls.specs(f"{name}.cls", (B, C), names)
        return s + self.ce.specs(f"{name}.ce", s[-1].out_shape, names)
