/* creation.c — reference kernels of the creation prims: full, iota, uniform, uniform_philox, and
 * get_and_update_rng_state.
 *
 * full stores the fill value once in the output dtype (PyTorch's cast) and replicates those bytes.
 * iota computes start + i * step in int64 (wrapping) and casts each value to the output dtype.
 * uniform draws from the program's Philox stream at its offset (th_rt_random4, four 32-bit words per
 * block) in element order; uniform_philox reads the blocks offset, offset + 1, ... of the stream its
 * seed argument keys (a pure function of its arguments), and get_and_update_rng_state hands out the
 * program's (seed, offset) and advances the offset. float64 elements take 53 random bits (two words),
 * every other dtype 24 bits (one word); u = bits * 2^-bits is in [0, 1) and the element is
 * u * (maxval - minval) + minval computed in the element's precision (float for f32/f16/bf16, as
 * PyTorch's uniform_real_distribution), then stored. The device argument is not consulted: the
 * runtime places every tensor on the CPU. */
#include <string.h>

#include "executors/eager/eager_internal.h"

th_status th_eg_full_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the fill value, cast once to the output dtype. */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  double f = 0;
  int64_t i = 0;
  bool is_float = false;
  if (b->nargs < 2 || !th_rt_number(env, &b->args[1], &f, &i, &is_float))
    return th_error(TH_ERR_TYPE, "%s: fill_value must be a number", th_eg_name(b));
  unsigned char elem[8];
  if (is_float)
    th_store_f64(elem, out->dtype, f);
  else
    th_store_i64(elem, out->dtype, i);
  /* Step 2: replicate it over the contiguous output. */
  size_t size = th_dtype_size(out->dtype);
  int64_t n = th_tensor_numel(out);
  char *p = th_eg_data(out);
  for (int64_t k = 0; k < n; k++) memcpy(p + (size_t)k * size, elem, size);
  return TH_OK;
}

th_status th_eg_iota_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: length, start and step (ints). */
  int64_t length, start, step;
  TH_TRY(th_eg_int_arg(env, b, 0, &length));
  TH_TRY(th_eg_int_arg(env, b, 1, &start));
  TH_TRY(th_eg_int_arg(env, b, 2, &step));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  /* Step 2: start + k * step for every element of the output (its shape is (length,), or () when
   * length is 0 in Thunder's meta). */
  size_t size = th_dtype_size(out->dtype);
  int64_t n = th_tensor_numel(out);
  char *p = th_eg_data(out);
  for (int64_t k = 0; k < n; k++)
    th_store_i64(p + (size_t)k * size, out->dtype, (int64_t)((uint64_t)start + (uint64_t)k * (uint64_t)step));
  return TH_OK;
}

/* Samples n elements of dtype dt into p from the blocks block0, block0 + 1, ... of the stream keyed by
 * seed: float64 elements take 53 bits (two words), two per block; every other dtype 24 bits (one
 * word), four per block. */
static void uniform_fill(char *p, th_dtype dt, int64_t n, double lo, double hi, uint64_t seed, uint64_t block0,
                         th_rt_env *env) {
  size_t size = th_dtype_size(dt);
  uint32_t w[4];
  int per = dt == TH_F64 ? 2 : 4;
  for (int64_t k = 0; k < n; k++) {
    if (k % per == 0) {
      if (env)
        th_rt_random4(env, w);
      else
        th_rt_philox_block(seed, block0 + (uint64_t)(k / per), w);
    }
    if (dt == TH_F64) {
      int j = (int)(k % 2) * 2;
      uint64_t bits = (((uint64_t)w[j] << 32) | w[j + 1]) >> 11;
      th_store_f64(p + (size_t)k * size, TH_F64, (double)bits * 0x1p-53 * (hi - lo) + lo);
    } else {
      float u = (float)(w[k % 4] >> 8) * 0x1p-24f, flo = (float)lo, fhi = (float)hi;
      th_store_f32(p + (size_t)k * size, dt, u * (fhi - flo) + flo);
    }
  }
}

th_status th_eg_uniform_ref(th_rt_env *env, const th_bsym *b) {
  double lo, hi;
  TH_TRY(th_eg_float_arg(env, b, 1, &lo));
  TH_TRY(th_eg_float_arg(env, b, 2, &hi));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  uniform_fill(th_eg_data(out), out->dtype, th_tensor_numel(out), lo, hi, 0, 0, env);
  return TH_OK;
}

/* A generator word argument of uniform_philox: an int, or a 0-dim integer tensor read as its bits. */
static th_status rng_word(th_rt_env *env, const th_bsym *b, int i, uint64_t *v) {
  const th_arg *a = &b->args[i];
  if (a->kind == TH_ARG_VALUE && a->u.value->is_tensor) {
    th_tensor *t = th_eg_tensor_arg(env, b, i);
    if (!t) return th_last_status();
    *v = (uint64_t)th_load_i64(th_eg_data(t), t->dtype);
    return TH_OK;
  }
  int64_t x;
  TH_TRY(th_eg_int_arg(env, b, i, &x));
  *v = (uint64_t)x;
  return TH_OK;
}

th_status th_eg_uniform_philox_ref(th_rt_env *env, const th_bsym *b) {
  double lo, hi;
  uint64_t seed, offset;
  TH_TRY(th_eg_float_arg(env, b, 1, &lo));
  TH_TRY(th_eg_float_arg(env, b, 2, &hi));
  TH_TRY(rng_word(env, b, 5, &seed));
  TH_TRY(rng_word(env, b, 6, &offset));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  uint64_t per = out->dtype == TH_F64 ? 2 : 4, blocks = ((uint64_t)th_tensor_numel(out) + per - 1) / per;
  if (offset + blocks < offset)
    return th_error(TH_ERR_RUNTIME, "%s: offset: %llu + %llu blocks passes the end of the stream (2^64 blocks)",
                    th_eg_name(b), (unsigned long long)offset, (unsigned long long)blocks);
  uniform_fill(th_eg_data(out), out->dtype, th_tensor_numel(out), lo, hi, seed, offset, NULL);
  return TH_OK;
}

th_status th_eg_get_and_update_rng_state_ref(th_rt_env *env, const th_bsym *b) {
  int64_t blocks;
  TH_TRY(th_eg_int_arg(env, b, 0, &blocks));
  th_tensor *seed = th_eg_alloc_out(env, b, 0);
  if (!seed) return th_last_status();
  th_tensor *offset = th_eg_alloc_out(env, b, 1);
  if (!offset) return th_last_status();
  uint64_t s, o;
  th_rt_rng_state(env, 0, &s, &o);
  if (o + (uint64_t)blocks < o)
    return th_error(TH_ERR_RUNTIME,
                    "%s: blocks: the generator's offset %llu + %lld blocks passes the end of the stream (2^64 "
                    "blocks)",
                    th_eg_name(b), (unsigned long long)o, (long long)blocks);
  th_rt_rng_state(env, (uint64_t)blocks, &s, &o);
  int64_t si = (int64_t)s, oi = (int64_t)o;
  memcpy(th_eg_data(seed), &si, sizeof si);
  memcpy(th_eg_data(offset), &oi, sizeof oi);
  return TH_OK;
}
