/* creation.c — reference kernels of the creation prims: full, iota, uniform.
 *
 * full stores the fill value once in the output dtype (PyTorch's cast) and replicates those bytes.
 * iota computes start + i * step in int64 (wrapping) and casts each value to the output dtype.
 * uniform draws from the run's Philox stream (th_rt_random4, four 32-bit words per draw) in element
 * order, so a program run is reproducible for a seed: float64 elements take 53 random bits (two words),
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

th_status th_eg_uniform_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the bounds. */
  double lo, hi;
  TH_TRY(th_eg_float_arg(env, b, 1, &lo));
  TH_TRY(th_eg_float_arg(env, b, 2, &hi));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  size_t size = th_dtype_size(out->dtype);
  int64_t n = th_tensor_numel(out);
  char *p = th_eg_data(out);
  uint32_t w[4];
  if (out->dtype == TH_F64) {
    /* Step 2a: float64: 53 bits from two words, two elements per draw. */
    for (int64_t k = 0; k < n; k++) {
      if (k % 2 == 0) th_rt_random4(env, w);
      int j = (int)(k % 2) * 2;
      uint64_t bits = (((uint64_t)w[j] << 32) | w[j + 1]) >> 11;
      double u = (double)bits * 0x1p-53;
      th_store_f64(p + (size_t)k * size, TH_F64, u * (hi - lo) + lo);
    }
    return TH_OK;
  }
  /* Step 2b: everything else: 24 bits per element, four per draw, computed in float. */
  float flo = (float)lo, fhi = (float)hi;
  for (int64_t k = 0; k < n; k++) {
    if (k % 4 == 0) th_rt_random4(env, w);
    float u = (float)(w[k % 4] >> 8) * 0x1p-24f;
    th_store_f32(p + (size_t)k * size, out->dtype, u * (fhi - flo) + flo);
  }
  return TH_OK;
}
