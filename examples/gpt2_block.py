# A GPT-2 transformer block (pre-norm: layer norm, causal self-attention, MLP with tanh GELU,
# residuals), batch 2, sequence 64, n_embd 128, 4 heads, written in Thunder's trace format with
# ltorch ops. Weights: build/examples/gpt2_block.safetensors (made at build time by make_weights).
# Run: thunder run examples/gpt2_block.py --input build/examples/gpt2_block.safetensors --random-inputs 0
import thunder
import thunder.torch as ltorch
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def computation(x, ln_1_weight, ln_1_bias, attn_c_attn_weight, attn_c_attn_bias, attn_c_proj_weight, attn_c_proj_bias, ln_2_weight, ln_2_bias, mlp_c_fc_weight, mlp_c_fc_bias, mlp_c_proj_weight, mlp_c_proj_bias):
  # x: "cpu f32[2, 64, 128]"
  # ln_1_weight: "cpu f32[128]"
  # ln_1_bias: "cpu f32[128]"
  # attn_c_attn_weight: "cpu f32[384, 128]"
  # attn_c_attn_bias: "cpu f32[384]"
  # attn_c_proj_weight: "cpu f32[128, 128]"
  # attn_c_proj_bias: "cpu f32[128]"
  # ln_2_weight: "cpu f32[128]"
  # ln_2_bias: "cpu f32[128]"
  # mlp_c_fc_weight: "cpu f32[512, 128]"
  # mlp_c_fc_bias: "cpu f32[512]"
  # mlp_c_proj_weight: "cpu f32[128, 512]"
  # mlp_c_proj_bias: "cpu f32[128]"
  h = ltorch.layer_norm(x, (128,), ln_1_weight, ln_1_bias, 1e-05)  # h: "cpu f32[2, 64, 128]"
  qkv = ltorch.linear(h, attn_c_attn_weight, attn_c_attn_bias)  # qkv: "cpu f32[2, 64, 384]"
  (q, k, v) = ltorch.split(qkv, 128, 2)
  q4 = ltorch.reshape(q, (2, 64, 4, 32))  # q4: "cpu f32[2, 64, 4, 32]"
  k4 = ltorch.reshape(k, (2, 64, 4, 32))  # k4: "cpu f32[2, 64, 4, 32]"
  v4 = ltorch.reshape(v, (2, 64, 4, 32))  # v4: "cpu f32[2, 64, 4, 32]"
  qh = ltorch.transpose(q4, 1, 2)  # qh: "cpu f32[2, 4, 64, 32]"
  kh = ltorch.transpose(k4, 1, 2)  # kh: "cpu f32[2, 4, 64, 32]"
  vh = ltorch.transpose(v4, 1, 2)  # vh: "cpu f32[2, 4, 64, 32]"
  y = ltorch.scaled_dot_product_attention(qh, kh, vh, None, 0.0, True, scale=None)  # y: "cpu f32[2, 4, 64, 32]"
  yt = ltorch.transpose(y, 1, 2)  # yt: "cpu f32[2, 64, 4, 32]"
  yc = ltorch.reshape(yt, (2, 64, 128))  # yc: "cpu f32[2, 64, 128]"
  attn = ltorch.linear(yc, attn_c_proj_weight, attn_c_proj_bias)  # attn: "cpu f32[2, 64, 128]"
  x1 = ltorch.add(x, attn, alpha=None)  # x1: "cpu f32[2, 64, 128]"
  h2 = ltorch.layer_norm(x1, (128,), ln_2_weight, ln_2_bias, 1e-05)  # h2: "cpu f32[2, 64, 128]"
  fc = ltorch.linear(h2, mlp_c_fc_weight, mlp_c_fc_bias)  # fc: "cpu f32[2, 64, 512]"
  g = ltorch.gelu(fc, approximate='tanh')  # g: "cpu f32[2, 64, 512]"
  mlp = ltorch.linear(g, mlp_c_proj_weight, mlp_c_proj_bias)  # mlp: "cpu f32[2, 64, 128]"
  out = ltorch.add(x1, mlp, alpha=None)  # out: "cpu f32[2, 64, 128]"
  return out
