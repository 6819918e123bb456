"""runtime/nn: numpy layers with forward and backward side by side, and the `Model` base class.

One concept per file: module.py (the `Module` base), dense.py, activations.py, dropout.py,
embedding.py (+ position tables, tied output projection), layernorm.py, rotary.py, attention.py,
loss.py (softmax cross-entropy), transformer.py (decoder blocks), model.py (`Model`, the base of
the models in runtime/modelzoo), decoder.py (`DecoderLM`: GPT-2 / GPT-J), spec.py (`LayerSpec`,
the compiler's view), init.py (initializers), malloc.py (a host performance knob), parallel.py
(kernels split over the runtime's worker threads, runtime/threads.py).
"""

from runtime.nn.activations import ACTIVATIONS, Activation
from runtime.nn.attention import CausalSelfAttention
from runtime.nn.decoder import DecoderConfig, DecoderLM
from runtime.nn.dense import Dense
from runtime.nn.dropout import Dropout
from runtime.nn.embedding import Embedding, FixedPositions, LearnedPositions, TiedProjection
from runtime.nn.layernorm import LayerNorm
from runtime.nn.loss import SoftmaxCrossEntropy
from runtime.nn.model import Model
from runtime.nn.module import FP32, Module
from runtime.nn.rotary import Rotary
from runtime.nn.spec import KINDS, LayerSpec
from runtime.nn.transformer import MLP, Block, LMEmbedding, LMHead

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "Block",
    "CausalSelfAttention",
    "DecoderConfig",
    "DecoderLM",
    "Dense",
    "Dropout",
    "Embedding",
    "FP32",
    "FixedPositions",
    "KINDS",
    "LMEmbedding",
    "LMHead",
    "LayerNorm",
    "LayerSpec",
    "LearnedPositions",
    "MLP",
    "Model",
    "Module",
    "Rotary",
    "SoftmaxCrossEntropy",
    "TiedProjection",
]
