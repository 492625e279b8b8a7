/* make_weights.c — writes the example programs' weights as .safetensors files, deterministically.
 *
 * Run at build time: make_weights OUTDIR writes OUTDIR/gpt2_block.safetensors and
 * OUTDIR/llama_block.safetensors. Values come from a fixed splitmix64 stream turned into normal
 * samples (Box-Muller): linear weights ~ N(0, 0.02^2) as GPT-2's initialization, biases ~ N(0,
 * 0.01^2), norm weights 1 + N(0, 0.1^2), norm biases N(0, 0.1^2) so every parameter matters. The
 * LLaMA file also holds the rotary tables rope_cos/rope_sin [seq 64, head_dim 32] (theta 10000,
 * rotate-half layout: frequency i < 16 repeated at i + 16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "thunder/thunder.h"

static uint64_t rng_state = 0x5eed2026ull;

static double uniform01(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return ((double)(z >> 11) + 0.5) * 0x1.0p-53; /* (0, 1) */
}

static double normal(void) {
  double u1 = uniform01(), u2 = uniform01();
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct {
  const char *name;
  int ndim;
  int64_t shape[2];
  double mean, std;
} spec;

static th_tensor *make(const spec *s) {
  th_tensor *t = th_tensor_empty(TH_F32, s->ndim, s->shape);
  if (!t) return NULL;
  float *p = th_tensor_data(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) p[i] = (float)(s->mean + s->std * normal());
  return t;
}

static int write_file(const char *dir, const char *file, const spec *specs, int n, th_tensor **extra,
                      const char **extra_names, int nextra) {
  th_tensor *ts[32];
  const char *names[32];
  int k = 0;
  for (int i = 0; i < n; i++, k++) {
    ts[k] = make(&specs[i]);
    names[k] = specs[i].name;
    if (!ts[k]) return 1;
  }
  for (int i = 0; i < nextra; i++, k++) {
    ts[k] = extra[i];
    names[k] = extra_names[i];
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  th_status st = th_safetensors_write(path, k, names, ts);
  for (int i = 0; i < k; i++) th_tensor_release(ts[i]);
  if (st != TH_OK) {
    fprintf(stderr, "make_weights: %s\n", th_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_weights OUTDIR\n");
    return 2;
  }
  const spec gpt2[] = {
    {"ln_1_weight", 1, {128}, 1.0, 0.1},
    {"ln_1_bias", 1, {128}, 0.0, 0.1},
    {"attn_c_attn_weight", 2, {384, 128}, 0.0, 0.02},
    {"attn_c_attn_bias", 1, {384}, 0.0, 0.01},
    {"attn_c_proj_weight", 2, {128, 128}, 0.0, 0.02},
    {"attn_c_proj_bias", 1, {128}, 0.0, 0.01},
    {"ln_2_weight", 1, {128}, 1.0, 0.1},
    {"ln_2_bias", 1, {128}, 0.0, 0.1},
    {"mlp_c_fc_weight", 2, {512, 128}, 0.0, 0.02},
    {"mlp_c_fc_bias", 1, {512}, 0.0, 0.01},
    {"mlp_c_proj_weight", 2, {128, 512}, 0.0, 0.02},
    {"mlp_c_proj_bias", 1, {128}, 0.0, 0.01},
  };
  if (write_file(argv[1], "gpt2_block.safetensors", gpt2, (int)(sizeof gpt2 / sizeof gpt2[0]), NULL, NULL, 0)) return 1;

  const spec llama[] = {
    {"attention_norm_weight", 1, {128}, 1.0, 0.1},
    {"wq", 2, {128, 128}, 0.0, 0.02},
    {"wk", 2, {128, 128}, 0.0, 0.02},
    {"wv", 2, {128, 128}, 0.0, 0.02},
    {"wo", 2, {128, 128}, 0.0, 0.02},
    {"ffn_norm_weight", 1, {128}, 1.0, 0.1},
    {"w1", 2, {352, 128}, 0.0, 0.02},
    {"w2", 2, {128, 352}, 0.0, 0.02},
    {"w3", 2, {352, 128}, 0.0, 0.02},
  };
  int64_t rshape[2] = {64, 32};
  th_tensor *cosv = th_tensor_empty(TH_F32, 2, rshape), *sinv = th_tensor_empty(TH_F32, 2, rshape);
  if (!cosv || !sinv) return 1;
  float *c = th_tensor_data(cosv), *s = th_tensor_data(sinv);
  for (int pos = 0; pos < 64; pos++)
    for (int i = 0; i < 32; i++) {
      double freq = pow(10000.0, -(double)(2 * (i % 16)) / 32.0);
      c[pos * 32 + i] = (float)cos(pos * freq);
      s[pos * 32 + i] = (float)sin(pos * freq);
    }
  th_tensor *extra[2] = {cosv, sinv};
  const char *extra_names[2] = {"rope_cos", "rope_sin"};
  return write_file(argv[1], "llama_block.safetensors", llama, (int)(sizeof llama / sizeof llama[0]), extra,
                    extra_names, 2);
}
