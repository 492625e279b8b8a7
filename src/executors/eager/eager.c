/* eager.c — the eager executor: its table (one reference kernel per prim) and the machinery every
 * kernel shares: the strided N-d iterator, operand binding, argument readers and the converting copy.
 *
 * The iterator (see eager_internal.h) first simplifies the loop: size-1 dims go, and a dim merges into
 * its outer neighbour when every operand steps through both as one (outer stride == inner stride *
 * inner size), so contiguous operands make a single row. A flat range of the loop is then walked row
 * by row with an odometer over the outer dims, advancing each operand's pointer incrementally. For
 * parallel loops the flat range is cut into equal chunks, one OpenMP iteration each; a chunk may start
 * or end in the middle of a row, so row functions see arbitrary n. */
#include <string.h>

#include <omp.h>

#include "executors/eager/eager_internal.h"

/* ---- the executor table --------------------------------------------------------------------------- */
/* Every prim of ops.def except the utility prims (python_return, python_del, comment), which compute
 * nothing and are handled by the runtime itself. test_eager_kernels checks the table stays complete. */
static const th_operator_impl eager_impls[] = {
/* elementwise unary: the prims of ops/unary.def */
#define TH_UNARY(name, ...) {TH_OP_prims_##name, th_eg_unary_ref, NULL},
#include "ops/unary.def"
#undef TH_UNARY
/* elementwise binary: the prims of ops/binary.def (comparisons: kind CMP) */
#define EG_BINARY_REF_MATH th_eg_binary_ref
#define EG_BINARY_REF_FLOAT th_eg_binary_ref
#define EG_BINARY_REF_ALL th_eg_binary_ref
#define EG_BINARY_REF_EXACT th_eg_binary_ref
#define EG_BINARY_REF_CMP th_eg_compare_ref
#define TH_BINARY(name, kind, ...) {TH_OP_prims_##name, EG_BINARY_REF_##kind, NULL},
#include "ops/binary.def"
#undef TH_BINARY
#undef EG_BINARY_REF_MATH
#undef EG_BINARY_REF_FLOAT
#undef EG_BINARY_REF_ALL
#undef EG_BINARY_REF_EXACT
#undef EG_BINARY_REF_CMP
  /* elementwise ternary */
  {TH_OP_prims_where, th_eg_where_ref, NULL},
  /* conversion and data movement */
  {TH_OP_prims_convert_element_type, th_eg_convert_element_type_ref, NULL},
  {TH_OP_prims_device_put, th_eg_device_put_ref, NULL},
  /* creation */
  {TH_OP_prims_full, th_eg_full_ref, NULL},
  {TH_OP_prims_iota, th_eg_iota_ref, NULL},
  {TH_OP_prims_uniform, th_eg_uniform_ref, NULL},
  {TH_OP_prims_uniform_philox, th_eg_uniform_philox_ref, NULL},
  {TH_OP_prims_get_and_update_rng_state, th_eg_get_and_update_rng_state_ref, NULL},
  /* shape and layout */
  {TH_OP_prims_broadcast_in_dim, th_eg_broadcast_in_dim_ref, NULL},
  {TH_OP_prims_reshape, th_eg_reshape_ref, NULL},
  {TH_OP_prims_transpose, th_eg_transpose_ref, NULL},
  {TH_OP_prims_slice_prim, th_eg_slice_ref, NULL},
  {TH_OP_prims_squeeze, th_eg_squeeze_ref, NULL},
  {TH_OP_prims_flip, th_eg_flip_ref, NULL},
  {TH_OP_prims_cat, th_eg_cat_ref, NULL},
  {TH_OP_prims_take, th_eg_take_ref, NULL},
  {TH_OP_prims_clone, th_eg_clone_ref, NULL},
  {TH_OP_prims_stride_order, th_eg_stride_order_ref, NULL},
  {TH_OP_prims_update_aliases, th_eg_update_aliases_ref, NULL},
  {TH_OP_prims_shallow_copy, th_eg_shallow_copy_ref, NULL},
  /* reductions */
  {TH_OP_prims_sum, th_eg_reduce_ref, NULL},
  {TH_OP_prims_prod, th_eg_reduce_ref, NULL},
  {TH_OP_prims_amax, th_eg_reduce_ref, NULL},
  {TH_OP_prims_amin, th_eg_reduce_ref, NULL},
  {TH_OP_prims_var, th_eg_reduce_ref, NULL},
  {TH_OP_prims_var_mean, th_eg_reduce_ref, NULL},
  {TH_OP_prims_argmax, th_eg_argminmax_ref, NULL},
  {TH_OP_prims_argmin, th_eg_argminmax_ref, NULL},
  /* linear algebra */
  {TH_OP_prims_matmul, th_eg_matmul_ref, NULL},
  {TH_OP_prims_linear, th_eg_linear_ref, NULL},
  {TH_OP_prims_scaled_mm, th_eg_scaled_mm_ref, NULL},
  /* memory */
  {TH_OP_prims_copy_, th_eg_copy__ref, NULL},

  /* conv */
  {TH_OP_prims_convolution, th_eg_convolution_ref, NULL},

  /* norm */

  /* pool */
  {TH_OP_prims_max_pool, th_eg_max_pool_ref, NULL},
  {TH_OP_prims_adaptive_max_pool, th_eg_adaptive_max_pool_ref, NULL},
  {TH_OP_prims_pool_scatter_add, th_eg_pool_scatter_add_ref, NULL},
  {TH_OP_prims_pool_gather, th_eg_pool_gather_ref, NULL},
  {TH_OP_prims_avg_pool, th_eg_avg_pool_ref, NULL},
  {TH_OP_prims_avg_pool_backward, th_eg_avg_pool_backward_ref, NULL},
  {TH_OP_prims_adaptive_avg_pool, th_eg_adaptive_avg_pool_ref, NULL},
  {TH_OP_prims_adaptive_avg_pool_backward, th_eg_adaptive_avg_pool_backward_ref, NULL},
  {TH_OP_prims_resample, th_eg_resample_ref, NULL},
  {TH_OP_prims_resample_backward, th_eg_resample_backward_ref, NULL},
  {TH_OP_prims_im2col, th_eg_im2col_ref, NULL},
  {TH_OP_prims_col2im, th_eg_col2im_ref, NULL},

  /* index */
  {TH_OP_prims_take_along_axis, th_eg_take_along_axis_ref, NULL},
  {TH_OP_prims_scatter, th_eg_scatter_ref, NULL},
  {TH_OP_prims_scatter_add, th_eg_scatter_ref, NULL},
  {TH_OP_prims_scatter_reduce, th_eg_scatter_ref, NULL},
  {TH_OP_prims_index_add, th_eg_scatter_ref, NULL},
  {TH_OP_prims_masked_scatter, th_eg_masked_scatter_ref, NULL},
  {TH_OP_prims_masked_select_pad, th_eg_masked_select_pad_ref, NULL},
  {TH_OP_prims_searchsorted, th_eg_searchsorted_ref, NULL},
  {TH_OP_prims_tri_indices, th_eg_tri_indices_ref, NULL},

  /* scan */
  {TH_OP_prims_sort, th_eg_sort_ref, NULL},
  {TH_OP_prims_topk, th_eg_topk_ref, NULL},
  {TH_OP_prims_kthvalue, th_eg_kthvalue_ref, NULL},
  {TH_OP_prims_cumsum, th_eg_cumsum_ref, NULL},
  {TH_OP_prims_cumprod, th_eg_cumprod_ref, NULL},
  {TH_OP_prims_logcumsumexp, th_eg_logcumsumexp_ref, NULL},
  {TH_OP_prims_cummax, th_eg_cummax_ref, NULL},
  {TH_OP_prims_cummin, th_eg_cummin_ref, NULL},

  /* attention */
  {TH_OP_prims_scaled_dot_product_flash_attention, th_eg_sdpa_flash_ref, NULL},
  {TH_OP_prims_scaled_dot_product_flash_attention_backward, th_eg_sdpa_flash_backward_ref, NULL},

  /* random */

  /* stat */
  {TH_OP_prims_mode, th_eg_mode_ref, NULL},

  /* linalg: decompositions and solves (linalg_lapack.c) */
  {TH_OP_prims_linalg_solve, th_eg_linalg_lapack_ref, NULL},
  {TH_OP_prims_linalg_slogdet, th_eg_linalg_lapack_ref, NULL},
  {TH_OP_prims_linalg_cholesky, th_eg_linalg_lapack_ref, NULL},
  {TH_OP_prims_linalg_eigh, th_eg_linalg_lapack_ref, NULL},
  {TH_OP_prims_linalg_svd, th_eg_linalg_lapack_ref, NULL},
};

const th_executor_desc th_eager_executor = {"eager", (int)(sizeof eager_impls / sizeof eager_impls[0]), eager_impls};

/* ---- strided iteration ------------------------------------------------------------------------------ */

void th_eg_iter_init(th_eg_iter *it, int nops, int ndim, const int64_t *shape, char *const *base,
                     const int64_t (*bstrides)[TH_MAX_DIMS]) {
  memset(it, 0, sizeof *it);
  it->nops = nops;
  for (int k = 0; k < nops; k++) it->base[k] = base[k];
  /* Step 1: the element count; an empty loop is one dim of size 0. */
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= shape[d];
  it->numel = numel;
  if (numel == 0) {
    it->ndim = 1;
    return;
  }
  /* Step 2: walk the dims outer to inner, dropping size-1 dims and merging a dim into the previous
   * kept one when, for every operand, outer stride == inner stride * inner size. */
  int m = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    bool merge = m > 0;
    for (int k = 0; merge && k < nops; k++)
      if (it->bs[m - 1][k] != bstrides[k][d] * shape[d]) merge = false;
    if (merge) {
      it->shape[m - 1] *= shape[d];
      for (int k = 0; k < nops; k++) it->bs[m - 1][k] = bstrides[k][d];
    } else {
      it->shape[m] = shape[d];
      for (int k = 0; k < nops; k++) it->bs[m][k] = bstrides[k][d];
      m++;
    }
  }
  /* Step 3: a single element is a loop of one row of length 1. */
  if (m == 0) {
    it->shape[0] = 1;
    m = 1;
  }
  it->ndim = m;
}

void th_eg_iter_range(const th_eg_iter *it, int64_t begin, int64_t end, th_eg_row_fn fn, void *ctx) {
  th_eg_iter_range_from(it, it->base, begin, end, fn, ctx);
}

void th_eg_iter_range_from(const th_eg_iter *it, char *const *base, int64_t begin, int64_t end, th_eg_row_fn fn,
                           void *ctx) {
  if (begin >= end) return;
  int m = it->ndim, nops = it->nops;
  int64_t inner = it->shape[m - 1];
  /* Step 1: the multi-index of `begin` (row-major) and each operand's pointer there. */
  int64_t idx[TH_MAX_DIMS];
  char *p[TH_EG_MAX_OPS];
  int64_t rest = begin;
  for (int d = m - 1; d >= 0; d--) {
    idx[d] = rest % it->shape[d];
    rest /= it->shape[d];
  }
  for (int k = 0; k < nops; k++) {
    p[k] = base[k];
    for (int d = 0; d < m; d++) p[k] += idx[d] * it->bs[d][k];
  }
  /* Step 2: one (possibly partial) row at a time, then advance the odometer. */
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = inner - idx[m - 1];
    if (n > end - pos) n = end - pos;
    fn(ctx, p, it->bs[m - 1], n);
    pos += n;
    if (pos >= end) break;
    idx[m - 1] += n;
    for (int k = 0; k < nops; k++) p[k] += n * it->bs[m - 1][k];
    for (int d = m - 1; d > 0 && idx[d] == it->shape[d]; d--) {
      /* carry: rewind dim d, step dim d-1 */
      for (int k = 0; k < nops; k++) p[k] += it->bs[d - 1][k] - it->shape[d] * it->bs[d][k];
      idx[d] = 0;
      idx[d - 1]++;
    }
  }
}

void th_eg_iter_run(const th_eg_iter *it, th_eg_row_fn fn, void *ctx, bool parallel) {
  int64_t n = it->numel;
  if (n == 0) return;
  if (!parallel || n <= TH_EG_PAR_MIN || omp_get_max_threads() == 1) {
    th_eg_iter_range(it, 0, n, fn, ctx);
    return;
  }
  /* Chunks of at least TH_EG_PAR_MIN / 4 elements, a few per thread for balance. */
  int64_t nchunks = (int64_t)omp_get_max_threads() * 4;
  if (nchunks > n / (TH_EG_PAR_MIN / 4)) nchunks = n / (TH_EG_PAR_MIN / 4);
  if (nchunks < 1) nchunks = 1;
  int64_t q = n / nchunks, r = n % nchunks;
#pragma omp parallel for schedule(static) if (n > TH_EG_PAR_MIN)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t begin = c * q + (c < r ? c : r);
    int64_t end = begin + q + (c < r ? 1 : 0);
    th_eg_iter_range(it, begin, end, fn, ctx);
  }
}

/* ---- operands --------------------------------------------------------------------------------------- */

/* "[2, 3]" into buf. */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = 0;
  buf[0] = '\0';
  len += (size_t)snprintf(buf + len, n - len, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
  return buf;
}

char *th_eg_data(const th_tensor *t) { return (char *)th_tensor_data(t); }

/* An empty tensor is never read or written, and its strides may be anything its sizes allow (a size-0
 * dim next to one of extent 2^62), so its byte strides are left 0 rather than multiplied out. A
 * non-empty tensor's byte strides fit in int64: its whole extent in bytes does (th_tensor_view). */
static bool empty_tensor(const th_tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] == 0) return true;
  return false;
}

void th_eg_tensor_bstrides(const th_tensor *t, int64_t *bs) {
  int64_t size = (int64_t)th_dtype_size(t->dtype);
  bool empty = empty_tensor(t);
  for (int d = 0; d < t->ndim; d++) bs[d] = empty || t->shape[d] == 1 ? 0 : t->strides[d] * size;
}

th_status th_eg_bind_tensor(const th_tensor *t, int ndim, const int64_t *shape, const char *who, th_eg_operand *o) {
  memset(o, 0, sizeof *o);
  o->dtype = t->dtype;
  o->base = th_eg_data(t);
  int lead = ndim - t->ndim;
  bool ok = lead >= 0;
  int64_t size = (int64_t)th_dtype_size(t->dtype);
  bool empty = empty_tensor(t); /* nothing is read: byte strides stay 0 (see th_eg_tensor_bstrides) */
  /* Right-aligned: equal sizes step with the tensor's stride, size-1 and missing dims stay at 0. */
  for (int d = 0; ok && d < ndim; d++) {
    if (d < lead) continue;
    int64_t ts = t->shape[d - lead];
    if (ts == shape[d])
      o->bs[d] = ts == 1 || empty ? 0 : t->strides[d - lead] * size;
    else if (ts != 1)
      ok = false;
  }
  if (!ok) {
    char a[160], b[160];
    return th_error(TH_ERR_RUNTIME, "%s: expected a tensor of shape %s, but got one of shape %s", who,
                    shape_str(a, sizeof a, ndim, shape), shape_str(b, sizeof b, t->ndim, t->shape));
  }
  return TH_OK;
}

th_status th_eg_bind(th_rt_env *env, const th_bsym *b, int argi, int ndim, const int64_t *shape, th_dtype num_dtype,
                     th_eg_operand *o) {
  if (argi >= b->nargs) return th_error(TH_ERR_TYPE, "%s: missing argument %d", th_eg_name(b), argi);
  const th_arg *a = &b->args[argi];
  th_tensor *t = th_rt_tensor(env, a);
  if (t) return th_eg_bind_tensor(t, ndim, shape, th_eg_name(b), o);
  double f = 0;
  int64_t i = 0;
  bool is_float = false;
  if (!th_rt_number(env, a, &f, &i, &is_float))
    return th_error(TH_ERR_TYPE, "%s: argument %d must be a tensor or a number", th_eg_name(b), argi);
  memset(o, 0, sizeof *o);
  o->is_number = true;
  o->number_is_float = is_float;
  o->base = (char *)o->num.bytes;
  /* A number is one element of its own dtype with stride 0 everywhere. */
  if (num_dtype == TH_DTYPE_COUNT) {
    o->dtype = is_float ? TH_F64 : TH_I64;
    if (is_float)
      o->num.f = f;
    else
      o->num.i = i;
  } else {
    o->dtype = num_dtype;
    if (is_float)
      th_store_f64(o->num.bytes, num_dtype, f);
    else
      th_store_i64(o->num.bytes, num_dtype, i);
  }
  return TH_OK;
}

/* ---- arguments and outputs -------------------------------------------------------------------------- */

const char *th_eg_name(const th_bsym *b) { return b->sym && b->sym->qualname ? b->sym->qualname : "eager kernel"; }

const th_value *th_eg_out_value(const th_bsym *b, int k) {
  const th_arg *o = &b->out;
  if (o->kind == TH_ARG_VALUE) return k == 0 ? o->u.value : NULL;
  if ((o->kind == TH_ARG_TUPLE || o->kind == TH_ARG_LIST) && k >= 0 && k < o->u.seq.n &&
      o->u.seq.items[k].kind == TH_ARG_VALUE)
    return o->u.seq.items[k].u.value;
  return NULL;
}

th_tensor *th_eg_alloc_out(th_rt_env *env, const th_bsym *b, int k) {
  /* A number output (a number proxy of unknown value) is produced as a 0-dim tensor of its Python
   * type (bool/int64/float64), which is how the runtime holds run-time numbers. */
  const th_value *v = th_eg_out_value(b, k);
  if (!v) {
    th_error(TH_ERR_RUNTIME, "%s: output %d is not a value", th_eg_name(b), k);
    return NULL;
  }
  return th_rt_alloc_output(env, v);
}

th_tensor *th_eg_tensor_arg(th_rt_env *env, const th_bsym *b, int i) {
  th_tensor *t = i < b->nargs ? th_rt_tensor(env, &b->args[i]) : NULL;
  if (!t) {
    const char *pname = NULL;
    if (b->sym && i < b->sym->schema.nparams && b->sym->schema.params) pname = b->sym->schema.params[i].name;
    th_error(TH_ERR_TYPE, "%s: expected argument %d%s%s%s to be a tensor", th_eg_name(b), i, pname ? " (" : "",
             pname ? pname : "", pname ? ")" : "");
  }
  return t;
}

/* An int from one arg (a constant or a known number proxy). */
static th_status int_of(th_rt_env *env, const th_bsym *b, const th_arg *a, int64_t *v) {
  double f;
  bool is_float;
  if (!th_rt_number(env, a, &f, v, &is_float) || is_float)
    return th_error(TH_ERR_TYPE, "%s: expected an int argument", th_eg_name(b));
  return TH_OK;
}

th_status th_eg_int_arg(th_rt_env *env, const th_bsym *b, int i, int64_t *v) {
  if (i >= b->nargs) return th_error(TH_ERR_TYPE, "%s: missing argument %d", th_eg_name(b), i);
  return int_of(env, b, &b->args[i], v);
}

th_status th_eg_float_arg(th_rt_env *env, const th_bsym *b, int i, double *v) {
  int64_t iv;
  bool is_float;
  if (i >= b->nargs || !th_rt_number(env, &b->args[i], v, &iv, &is_float))
    return th_error(TH_ERR_TYPE, "%s: expected argument %d to be a number", th_eg_name(b), i);
  if (!is_float) *v = (double)iv;
  return TH_OK;
}

th_status th_eg_int_list_arg(th_rt_env *env, const th_bsym *b, int i, int64_t *v, int max, int *n) {
  if (i >= b->nargs) return th_error(TH_ERR_TYPE, "%s: missing argument %d", th_eg_name(b), i);
  const th_arg *a = &b->args[i];
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    if (a->u.seq.n > max)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: argument %d has %d entries, more than %d", th_eg_name(b), i,
                      a->u.seq.n, max);
    for (int k = 0; k < a->u.seq.n; k++) TH_TRY(int_of(env, b, &a->u.seq.items[k], &v[k]));
    *n = a->u.seq.n;
    return TH_OK;
  }
  /* a bare int stands for a one-element list (as PyTorch's int[] accepts) */
  if (max < 1) return th_error(TH_ERR_TYPE, "%s: argument %d must be a list", th_eg_name(b), i);
  TH_TRY(int_of(env, b, a, &v[0]));
  *n = 1;
  return TH_OK;
}

/* ---- copy with conversion ------------------------------------------------------------------------------ */

typedef struct copy_ctx {
  th_dtype dst, src;
} copy_ctx;

/* p[0] = dst, p[1] = src. */
static void copy_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const copy_ctx *c = vctx;
  char *d = p[0];
  const char *s = p[1];
  int64_t bd = bs[0], bsrc = bs[1];
  if (c->dst == c->src) {
    /* same dtype: bytes */
    size_t size = th_dtype_size(c->dst);
    if (bd == (int64_t)size && bsrc == (int64_t)size) {
      memcpy(d, s, (size_t)n * size);
      return;
    }
    switch (size) {
      case 1:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * bd, s + i * bsrc, 1);
        break;
      case 2:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * bd, s + i * bsrc, 2);
        break;
      case 4:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * bd, s + i * bsrc, 4);
        break;
      default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * bd, s + i * bsrc, 8);
        break;
    }
    return;
  }
  /* the common float conversions, each a tight loop */
  if (c->src == TH_F32 && c->dst == TH_BF16) {
    for (int64_t i = 0; i < n; i++) th_sc_st_u16(d + i * bd, th_sc_f32_to_bf16(th_sc_ld_f32(s + i * bsrc)));
  } else if (c->src == TH_F32 && c->dst == TH_F16) {
    for (int64_t i = 0; i < n; i++) th_sc_st_u16(d + i * bd, th_sc_f32_to_f16(th_sc_ld_f32(s + i * bsrc)));
  } else if (c->src == TH_BF16 && c->dst == TH_F32) {
    for (int64_t i = 0; i < n; i++) th_sc_st_f32(d + i * bd, th_sc_bf16_to_f32(th_sc_ld_u16(s + i * bsrc)));
  } else if (c->src == TH_F16 && c->dst == TH_F32) {
    for (int64_t i = 0; i < n; i++) th_sc_st_f32(d + i * bd, th_sc_f16_to_f32(th_sc_ld_u16(s + i * bsrc)));
  } else if (c->src == TH_F32 && c->dst == TH_F64) {
    for (int64_t i = 0; i < n; i++) th_sc_st_f64(d + i * bd, (double)th_sc_ld_f32(s + i * bsrc));
  } else if (c->src == TH_F64 && c->dst == TH_F32) {
    for (int64_t i = 0; i < n; i++) th_sc_st_f32(d + i * bd, (float)th_sc_ld_f64(s + i * bsrc));
  } else if (!th_dtype_is_float(c->src)) {
    /* from bool/integers: exact through int64 */
    for (int64_t i = 0; i < n; i++) th_store_i64(d + i * bd, c->dst, th_load_i64(s + i * bsrc, c->src));
  } else {
    /* from floats: exact through float64, then PyTorch's cast */
    for (int64_t i = 0; i < n; i++) th_store_f64(d + i * bd, c->dst, th_load_f64(s + i * bsrc, c->src));
  }
}

void th_eg_copy(char *dst, th_dtype dst_dt, const int64_t *dst_bs, const char *src, th_dtype src_dt,
                const int64_t *src_bs, int ndim, const int64_t *shape) {
  int64_t bstr[2][TH_MAX_DIMS];
  for (int d = 0; d < ndim; d++) {
    bstr[0][d] = dst_bs[d];
    bstr[1][d] = src_bs[d];
  }
  char *base[2] = {dst, (char *)src};
  th_eg_iter it;
  th_eg_iter_init(&it, 2, ndim, shape, base, (const int64_t(*)[TH_MAX_DIMS])bstr);
  copy_ctx c = {dst_dt, src_dt};
  th_eg_iter_run(&it, copy_row, &c, true);
}

void th_eg_copy_tensor(th_tensor *dst, const th_tensor *src) {
  int64_t dbs[TH_MAX_DIMS], sbs[TH_MAX_DIMS];
  th_eg_tensor_bstrides(dst, dbs);
  th_eg_tensor_bstrides(src, sbs);
  th_eg_copy(th_eg_data(dst), dst->dtype, dbs, th_eg_data(src), src->dtype, sbs, dst->ndim, dst->shape);
}
