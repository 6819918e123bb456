"""runtime/nn: numpy layers with forward and backward side by side, and the `Model` base class.

One concept per file: module.py (the `Module` base), dense.py, activations.py, dropout.py,
embedding.py (+ position tables, tied output projection), layernorm.py, rmsnorm.py, rotary.py,
attention.py (causal or bidirectional, grouped-query), glu.py (SwiGLU), loss.py (softmax
cross-entropy), transformer.py (decoder blocks), encoder.py (BERT's embedding, encoder block and
heads), model.py (`Model`, the base of the models in runtime/modelzoo and of a user's own,
docs/own-model.md), decoder.py (`DecoderLM`: GPT-2 / GPT-J / LLaMA), spec.py (`LayerSpec`,
the compiler's view), init.py (initializers), malloc.py (a host performance knob), parallel.py
(kernels split over the runtime's worker threads, runtime/threads.py).
"""

from cs2sim.runtime.nn.activations import ACTIVATIONS, Activation
from cs2sim.runtime.nn.attention import CausalSelfAttention, SelfAttention
from cs2sim.runtime.nn.decoder import DecoderConfig, DecoderLM
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.embedding import Embedding, FixedPositions, LearnedPositions, TiedProjection
from cs2sim.runtime.nn.encoder import BertEmbedding, BertHead, EncoderBlock, MLMHead, NSPHead
from cs2sim.runtime.nn.glu import GatedMLP
from cs2sim.runtime.nn.layernorm import LayerNorm
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.rmsnorm import RMSNorm
from cs2sim.runtime.nn.rotary import Rotary
from cs2sim.runtime.nn.spec import KINDS, LayerSpec
from cs2sim.runtime.nn.transformer import MLP, Block, LMEmbedding, LMHead

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "BertEmbedding",
    "BertHead",
    "Block",
    "CausalSelfAttention",
    "DecoderConfig",
    "DecoderLM",
    "Dense",
    "Dropout",
    "Embedding",
    "EncoderBlock",
    "FP32",
    "GatedMLP",
    "FixedPositions",
    "KINDS",
    "LMEmbedding",
    "LMHead",
    "LayerNorm",
    "LayerSpec",
    "LearnedPositions",
    "MLMHead",
    "MLP",
    "Model",
    "Module",
    "NSPHead",
    "RMSNorm",
    "Rotary",
    "SelfAttention",
    "SoftmaxCrossEntropy",
    "TiedProjection",
]
