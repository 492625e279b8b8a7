# A small LLaMA-style block: RMSNorm, attention with rotary position embedding (rotate-half form,
# cos/sin tables given as inputs), causal softmax attention, RMSNorm, SwiGLU MLP, residuals;
# batch 2, sequence 64, dim 128, 4 heads of 32, hidden 352, no biases.
# Weights and rotary tables: build/examples/llama_block.safetensors (made at build time).
# Run: thunder run examples/llama_block.py --input build/examples/llama_block.safetensors --random-inputs 0
import thunder
import thunder.torch as ltorch
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(x, attention_norm_weight, wq, wk, wv, wo, ffn_norm_weight, w1, w2, w3, rope_cos, rope_sin):
  # x: "cpu f32[2, 64, 128]"
  # attention_norm_weight: "cpu f32[128]"
  # wq: "cpu f32[128, 128]"
  # wk: "cpu f32[128, 128]"
  # wv: "cpu f32[128, 128]"
  # wo: "cpu f32[128, 128]"
  # ffn_norm_weight: "cpu f32[128]"
  # w1: "cpu f32[352, 128]"
  # w2: "cpu f32[128, 352]"
  # w3: "cpu f32[352, 128]"
  # rope_cos: "cpu f32[64, 32]"
  # rope_sin: "cpu f32[64, 32]"
  h = ltorch.rms_norm(x, (128,), attention_norm_weight, 1e-06)  # h: "cpu f32[2, 64, 128]"
  q = ltorch.linear(h, wq, None)  # q: "cpu f32[2, 64, 128]"
  k = ltorch.linear(h, wk, None)  # k: "cpu f32[2, 64, 128]"
  v = ltorch.linear(h, wv, None)  # v: "cpu f32[2, 64, 128]"
  q4 = ltorch.reshape(q, (2, 64, 4, 32))  # q4: "cpu f32[2, 64, 4, 32]"
  k4 = ltorch.reshape(k, (2, 64, 4, 32))  # k4: "cpu f32[2, 64, 4, 32]"
  v4 = ltorch.reshape(v, (2, 64, 4, 32))  # v4: "cpu f32[2, 64, 4, 32]"
  qh = ltorch.transpose(q4, 1, 2)  # qh: "cpu f32[2, 4, 64, 32]"
  kh = ltorch.transpose(k4, 1, 2)  # kh: "cpu f32[2, 4, 64, 32]"
  vh = ltorch.transpose(v4, 1, 2)  # vh: "cpu f32[2, 4, 64, 32]"
  q1 = ltorch.getitem(qh, (..., slice(None, 16, None)))  # q1: "cpu f32[2, 4, 64, 16]"
  q2 = ltorch.getitem(qh, (..., slice(16, None, None)))  # q2: "cpu f32[2, 4, 64, 16]"
  nq2 = ltorch.neg(q2)  # nq2: "cpu f32[2, 4, 64, 16]"
  qrot = ltorch.cat([nq2, q1], -1)  # qrot: "cpu f32[2, 4, 64, 32]"
  qc = ltorch.mul(qh, rope_cos)  # qc: "cpu f32[2, 4, 64, 32]"
  qs = ltorch.mul(qrot, rope_sin)  # qs: "cpu f32[2, 4, 64, 32]"
  qr = ltorch.add(qc, qs, alpha=None)  # qr: "cpu f32[2, 4, 64, 32]"
  k1 = ltorch.getitem(kh, (..., slice(None, 16, None)))  # k1: "cpu f32[2, 4, 64, 16]"
  k2 = ltorch.getitem(kh, (..., slice(16, None, None)))  # k2: "cpu f32[2, 4, 64, 16]"
  nk2 = ltorch.neg(k2)  # nk2: "cpu f32[2, 4, 64, 16]"
  krot = ltorch.cat([nk2, k1], -1)  # krot: "cpu f32[2, 4, 64, 32]"
  kc = ltorch.mul(kh, rope_cos)  # kc: "cpu f32[2, 4, 64, 32]"
  ks = ltorch.mul(krot, rope_sin)  # ks: "cpu f32[2, 4, 64, 32]"
  kr = ltorch.add(kc, ks, alpha=None)  # kr: "cpu f32[2, 4, 64, 32]"
  y = ltorch.scaled_dot_product_attention(qr, kr, vh, None, 0.0, True, scale=None)  # y: "cpu f32[2, 4, 64, 32]"
  yt = ltorch.transpose(y, 1, 2)  # yt: "cpu f32[2, 64, 4, 32]"
  yc = ltorch.reshape(yt, (2, 64, 128))  # yc: "cpu f32[2, 64, 128]"
  attn = ltorch.linear(yc, wo, None)  # attn: "cpu f32[2, 64, 128]"
  x1 = ltorch.add(x, attn, alpha=None)  # x1: "cpu f32[2, 64, 128]"
  h2 = ltorch.rms_norm(x1, (128,), ffn_norm_weight, 1e-06)  # h2: "cpu f32[2, 64, 128]"
  a = ltorch.linear(h2, w1, None)  # a: "cpu f32[2, 64, 352]"
  sa = ltorch.silu(a, False)  # sa: "cpu f32[2, 64, 352]"
  b = ltorch.linear(h2, w3, None)  # b: "cpu f32[2, 64, 352]"
  gated = ltorch.mul(sa, b)  # gated: "cpu f32[2, 64, 352]"
  mlp = ltorch.linear(gated, w2, None)  # mlp: "cpu f32[2, 64, 128]"
  out = ltorch.add(x1, mlp, alpha=None)  # out: "cpu f32[2, 64, 128]"
  return out
