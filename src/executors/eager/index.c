/* index.c — the eager kernels of the indexing prims (ops/prims/index.c): take_along_axis, scatter,
 * scatter_add, scatter_reduce, index_add, masked_scatter, masked_select_pad, searchsorted, tri_indices.
 *
 * Every operand may be strided (expanded indices have stride 0). An index outside [0, size) is an
 * IndexError naming the value, the dim and its size; the output of a failing call is discarded. The
 * gathers run in parallel over their output rows, checking each index as they copy. The scatters check
 * every index first, copy `a` to the output, then run in parallel over the index's positions with the
 * scatter dim removed ("columns"): two positions of different columns never write the same output
 * element, so each column walks its entries along dim in order, sequentially (the last write wins for
 * scatter, the sums accumulate in index order as ATen's CPU kernel does: each step rounds to the dtype).
 * Columns go in tiles of neighbours walked together entry by entry, so rows contiguous in memory are
 * read and written whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "executors/eager/eager_internal.h"

/* An operand over a loop shape: base pointer and element strides (0 where it broadcasts). */
typedef struct eg_view {
  char *base;
  th_dtype dtype;
  int64_t es; /* element size */
  int64_t st[TH_MAX_DIMS];
} eg_view;

/* t seen with rank nd (a 0-dim tensor as [1]). */
static void view_of(const th_tensor *t, int nd, eg_view *v) {
  v->base = th_eg_data(t);
  v->dtype = t->dtype;
  v->es = (int64_t)th_dtype_size(t->dtype);
  for (int d = 0; d < nd; d++) v->st[d] = t->ndim ? t->strides[d] : 0;
}

static int rank1(const th_tensor *t) { return t->ndim ? t->ndim : 1; }

static void shape_of(const th_tensor *t, int64_t *shape) {
  if (!t->ndim) shape[0] = 1;
  for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
}

static inline void copy_elem(char *dst, const char *src, int64_t es) {
  switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
  }
}

/* Offset (elements) of flat row-major position `flat` of `shape` through strides st. */
static int64_t unravel(int64_t flat, int nd, const int64_t *shape, const int64_t *st) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t c = flat % shape[d];
    flat /= shape[d];
    off += c * st[d];
  }
  return off;
}

/* The same with the coordinate along dim `zero` left out of the offset. */
static int64_t unravel_zero(int64_t flat, int nd, const int64_t *shape, const int64_t *st, int zero) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t c = flat % shape[d];
    flat /= shape[d];
    if (d != zero) off += c * st[d];
  }
  return off;
}

/* Offset of position `c` of `shape` with dim `skip` removed (the columns of a scatter). */
static int64_t unravel_col(int64_t c, int nd, const int64_t *shape, const int64_t *st, int skip) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    if (d == skip) continue;
    off += (c % shape[d]) * st[d];
    c /= shape[d];
  }
  return off;
}

/* An index element: int64 loaded directly, other integer dtypes through th_load_i64. */
static inline int64_t load_index(const char *p, th_dtype dt) {
  if (dt == TH_I64) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
  }
  return th_load_i64(p, dt);
}

static th_status index_error(const char *op, int64_t bad, int dim, int64_t n) {
  return th_error(TH_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with size %lld", op, (long long)bad,
                  dim, (long long)n);
}

/* Every index in [0, n): the first offending value otherwise (checked over the loop shape, row by row
 * along its last dim). */
static th_status check_indices(const char *op, const eg_view *ix, int nd, const int64_t *shape, int64_t numel, int dim,
                               int64_t n) {
  int64_t bad = 0, last = shape[nd - 1], rows = numel / last, st = ix->st[nd - 1] * ix->es;
  bool found = false;
#pragma omp parallel for if (numel > TH_EG_PAR_MIN) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const char *p = ix->base + unravel(r * last, nd, shape, ix->st) * ix->es;
    for (int64_t j = 0; j < last; j++) {
      int64_t i = load_index(p + j * st, ix->dtype);
      if (i < 0 || i >= n) {
#pragma omp critical(th_eg_index_bad)
        if (!found) {
          found = true;
          bad = i;
        }
        break;
      }
    }
  }
  return found ? index_error(op, bad, dim, n) : TH_OK;
}

/* ---- take_along_axis ------------------------------------------------------------------------------------ */

th_status th_eg_take_along_axis_ref(th_rt_env *env, const th_bsym *b) {
  const char *op = th_eg_name(b);
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *index = th_eg_tensor_arg(env, b, 1);
  if (!a || !index) return th_last_status();
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 2, &dim));
  int nd = rank1(a);
  if (dim < 0) dim += nd;
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int64_t numel = th_tensor_numel(index);
  if (numel == 0) return TH_OK;
  int64_t shape[TH_MAX_DIMS], ashape[TH_MAX_DIMS];
  shape_of(index, shape);
  shape_of(a, ashape);
  eg_view av, iv;
  view_of(a, nd, &av);
  view_of(index, nd, &iv);
  char *o = th_eg_data(out);
  const int64_t es = av.es, last = shape[nd - 1], rows = numel / last, n = ashape[dim];
  const int64_t ist = iv.st[nd - 1] * iv.es, ast = (nd - 1 == dim ? 0 : av.st[nd - 1]), dst = av.st[dim];
  int64_t bad = 0;
  bool found = false;
  /* row by row along the last dim; an out-of-range index is reported (the output is then discarded) */
#pragma omp parallel for if (numel > TH_EG_PAR_MIN) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const char *ip = iv.base + unravel(r * last, nd, shape, iv.st) * iv.es;
    int64_t ao = unravel_zero(r * last, nd, shape, av.st, (int)dim);
    char *op_ = o + r * last * es;
    for (int64_t j = 0; j < last; j++) {
      int64_t i = load_index(ip + j * ist, iv.dtype);
      if (i < 0 || i >= n) {
#pragma omp critical(th_eg_index_bad)
        if (!found) {
          found = true;
          bad = i;
        }
        break;
      }
      copy_elem(op_ + j * es, av.base + (ao + j * ast + i * dst) * es, es);
    }
  }
  return found ? index_error(op, bad, (int)dim, n) : TH_OK;
}

/* ---- the scatters ----------------------------------------------------------------------------------------- */

typedef enum eg_reduce { R_COPY, R_ADD, R_PROD, R_MEAN, R_AMAX, R_AMIN } eg_reduce;

static eg_reduce reduce_of(const char *s) {
  if (!strcmp(s, "sum")) return R_ADD;
  if (!strcmp(s, "prod")) return R_PROD;
  if (!strcmp(s, "mean")) return R_MEAN;
  if (!strcmp(s, "amax")) return R_AMAX;
  return R_AMIN;
}

typedef struct eg_scatter {
  eg_view out, ix, src; /* src.base NULL: the number `num` */
  double numf;
  int64_t numi;
  int nd, dim;
  int64_t shape[TH_MAX_DIMS]; /* the loop (index) shape */
  eg_reduce r;
  bool include_self;
  int64_t n_out; /* the output's size along dim */
} eg_scatter;

static inline bool is_float(th_dtype dt) { return th_dtype_is_float(dt); }

/* The identity of a reduction in the output's dtype, written at p. */
static void store_identity(char *p, th_dtype dt, eg_reduce r) {
  if (r == R_PROD) {
    th_store_i64(p, dt, 1);
  } else if (r == R_AMAX || r == R_AMIN) {
    bool mx = r == R_AMAX;
    if (is_float(dt)) {
      th_store_f64(p, dt, mx ? -INFINITY : INFINITY);
    } else {
      int64_t lo, hi;
      switch (dt) {
        case TH_BOOL: lo = 0, hi = 1; break;
        case TH_U8: lo = 0, hi = 255; break;
        case TH_I8: lo = INT8_MIN, hi = INT8_MAX; break;
        case TH_I16: lo = INT16_MIN, hi = INT16_MAX; break;
        case TH_I32: lo = INT32_MIN, hi = INT32_MAX; break;
        default: lo = INT64_MIN, hi = INT64_MAX; break;
      }
      th_store_i64(p, dt, mx ? lo : hi);
    }
  } else {
    th_store_i64(p, dt, 0);
  }
}

/* out element at p combined with the src element at s (or the number). */
static inline void combine(const eg_scatter *S, char *p, const char *s) {
  th_dtype dt = S->out.dtype;
  if (S->r == R_COPY) {
    if (s)
      copy_elem(p, s, S->out.es);
    else if (is_float(dt))
      th_store_f64(p, dt, S->numf);
    else
      th_store_i64(p, dt, S->numi);
    return;
  }
  if (is_float(dt)) {
    double x = th_load_f64(p, dt), y = th_load_f64(s, dt), z;
    switch (S->r) {
      case R_PROD: z = x * y; break;
      case R_AMAX: z = isnan(y) ? y : (x < y ? y : x); break;
      case R_AMIN: z = isnan(y) ? y : (y < x ? y : x); break;
      default: z = x + y; break;
    }
    th_store_f64(p, dt, z);
  } else {
    int64_t x = th_load_i64(p, dt), y = th_load_i64(s, dt), z;
    switch (S->r) {
      case R_PROD: z = (int64_t)((uint64_t)x * (uint64_t)y); break;
      case R_AMAX: z = x < y ? y : x; break;
      case R_AMIN: z = y < x ? y : x; break;
      default: z = (int64_t)((uint64_t)x + (uint64_t)y); break;
    }
    th_store_i64(p, dt, z);
  }
}

/* The scatter of every reduction but mean, tile by tile: each thread takes a contiguous range of columns,
 * cut into tiles of EG_TILE columns; a tile walks its entries along dim in order, the tile's columns
 * innermost, so neighbouring columns (contiguous in memory when dim is not the innermost dim) are read
 * and written together. Each output element still sees its column's entries in index order. */
#define EG_TILE 256
static void scatter_tiles(const eg_scatter *S, int64_t ncols) {
  const int nd = S->nd, d = S->dim;
  const int64_t len = S->shape[d];
  const int64_t ixd = S->ix.st[d], od = S->out.st[d], sd = S->src.st[d];
#pragma omp parallel if (ncols * len > TH_EG_PAR_MIN)
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t per = (ncols + nt - 1) / nt, c0 = t * per, c1 = c0 + per < ncols ? c0 + per : ncols;
    int64_t io[EG_TILE], oo[EG_TILE], so[EG_TILE];
    for (int64_t cb = c0; cb < c1; cb += EG_TILE) {
      int64_t nc = c1 - cb < EG_TILE ? c1 - cb : EG_TILE;
      for (int64_t c = 0; c < nc; c++) {
        io[c] = unravel_col(cb + c, nd, S->shape, S->ix.st, d);
        oo[c] = unravel_col(cb + c, nd, S->shape, S->out.st, d);
        so[c] = S->src.base ? unravel_col(cb + c, nd, S->shape, S->src.st, d) : 0;
      }
      if (!S->include_self && S->r != R_COPY)
        for (int64_t k = 0; k < len; k++)
          for (int64_t c = 0; c < nc; c++) {
            int64_t i = load_index(S->ix.base + (io[c] + k * ixd) * S->ix.es, S->ix.dtype);
            store_identity(S->out.base + (oo[c] + i * od) * S->out.es, S->out.dtype, S->r);
          }
      for (int64_t k = 0; k < len; k++)
        for (int64_t c = 0; c < nc; c++) {
          int64_t i = load_index(S->ix.base + (io[c] + k * ixd) * S->ix.es, S->ix.dtype);
          combine(S, S->out.base + (oo[c] + i * od) * S->out.es,
                  S->src.base ? S->src.base + (so[c] + k * sd) * S->src.es : NULL);
        }
    }
  }
}

/* mean: column by column, with a per-thread count of the entries per output position */
static th_status scatter_columns(const eg_scatter *S, int64_t ncols) {
  const int nd = S->nd, d = S->dim;
  const int64_t len = S->shape[d];
  bool failed = false;
#pragma omp parallel if (ncols * len > TH_EG_PAR_MIN)
  {
    int64_t *count = NULL;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < ncols; c++) {
      /* c enumerates the positions of the loop shape with dim d removed */
      int64_t io = unravel_col(c, nd, S->shape, S->ix.st, d), oo = unravel_col(c, nd, S->shape, S->out.st, d);
      int64_t so = S->src.base ? unravel_col(c, nd, S->shape, S->src.st, d) : 0;
      if (!S->include_self && S->r != R_COPY)
        for (int64_t k = 0; k < len; k++) {
          int64_t i = th_load_i64(S->ix.base + (io + k * S->ix.st[d]) * S->ix.es, S->ix.dtype);
          store_identity(S->out.base + (oo + i * S->out.st[d]) * S->out.es, S->out.dtype, S->r);
        }
      for (int64_t k = 0; k < len; k++) {
        int64_t i = th_load_i64(S->ix.base + (io + k * S->ix.st[d]) * S->ix.es, S->ix.dtype);
        char *p = S->out.base + (oo + i * S->out.st[d]) * S->out.es;
        combine(S, p, S->src.base ? S->src.base + (so + k * S->src.st[d]) * S->src.es : NULL);
      }
      if (S->r == R_MEAN) {
        /* divide by the number of values reduced (self counts once when included); count[] is back to
         * zeros after each column */
        if (!count) count = calloc((size_t)S->n_out, sizeof(int64_t));
        if (!count) {
          failed = true;
          continue;
        }
        for (int64_t k = 0; k < len; k++)
          count[th_load_i64(S->ix.base + (io + k * S->ix.st[d]) * S->ix.es, S->ix.dtype)]++;
        for (int64_t k = 0; k < len; k++) {
          int64_t i = th_load_i64(S->ix.base + (io + k * S->ix.st[d]) * S->ix.es, S->ix.dtype);
          if (!count[i]) continue; /* divided at its first occurrence */
          int64_t cnt = count[i] + (S->include_self ? 1 : 0);
          count[i] = 0;
          char *p = S->out.base + (oo + i * S->out.st[d]) * S->out.es;
          th_dtype dt = S->out.dtype;
          if (is_float(dt)) {
            th_store_f64(p, dt, th_load_f64(p, dt) / (double)cnt);
          } else {
            int64_t x = th_load_i64(p, dt), q = x / cnt;
            if (x % cnt != 0 && x < 0) q--; /* floor division, as ATen's integer mean */
            th_store_i64(p, dt, q);
          }
        }
      }
    }
    free(count);
  }
  return failed ? th_error(TH_ERR_NOMEM, "out of memory") : TH_OK;
}

/* Binds (a, index, src, dim) and runs mode r. `index_1d`: index is a 1-D index along dim (index_add),
 * laid over src's shape with stride 0 elsewhere. */
static th_status scatter_common(th_rt_env *env, const th_bsym *b, eg_reduce r, bool include_self, bool index_1d) {
  const char *op = th_eg_name(b);
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *index = th_eg_tensor_arg(env, b, 1);
  if (!a || !index) return th_last_status();
  th_tensor *src = th_rt_tensor(env, &b->args[2]);
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 3, &dim));
  eg_scatter S;
  memset(&S, 0, sizeof S);
  S.nd = rank1(a);
  if (dim < 0) dim += S.nd;
  S.dim = (int)dim;
  S.r = r;
  S.include_self = include_self;
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_copy_tensor(out, a);
  view_of(out, S.nd, &S.out);
  if (index_1d) {
    if (!src) return th_error(TH_ERR_TYPE, "%s: expected source to be a tensor", op);
    shape_of(src, S.shape);
    S.ix.base = th_eg_data(index);
    S.ix.dtype = index->dtype;
    S.ix.es = (int64_t)th_dtype_size(index->dtype);
    for (int d = 0; d < S.nd; d++) S.ix.st[d] = 0;
    S.ix.st[dim] = index->ndim ? index->strides[0] : 0;
  } else {
    shape_of(index, S.shape);
    view_of(index, S.nd, &S.ix);
  }
  if (src) {
    view_of(src, S.nd, &S.src);
  } else {
    double f;
    TH_TRY(th_eg_float_arg(env, b, 2, &f));
    S.numf = f;
    S.numi = (int64_t)f;
    if (b->args[2].kind == TH_ARG_INT) S.numi = b->args[2].u.i;
    if (b->args[2].kind == TH_ARG_BOOL) S.numi = b->args[2].u.b;
  }
  int64_t numel = 1;
  for (int d = 0; d < S.nd; d++) numel *= S.shape[d];
  if (numel == 0) return TH_OK;
  int64_t oshape[TH_MAX_DIMS];
  shape_of(out, oshape);
  S.n_out = oshape[dim];
  TH_TRY(check_indices(op, &S.ix, S.nd, S.shape, numel, S.dim, oshape[dim]));
  if (S.r != R_MEAN) {
    scatter_tiles(&S, numel / S.shape[dim]);
    return TH_OK;
  }
  return scatter_columns(&S, numel / S.shape[dim]);
}

th_status th_eg_scatter_ref(th_rt_env *env, const th_bsym *b) {
  switch (b->sym->id) {
    case TH_OP_prims_scatter: return scatter_common(env, b, R_COPY, true, false);
    case TH_OP_prims_scatter_add: return scatter_common(env, b, R_ADD, true, false);
    case TH_OP_prims_index_add: return scatter_common(env, b, R_ADD, true, true);
    default: {
      if (b->args[4].kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected reduce to be a str", th_eg_name(b));
      bool incl = b->args[5].kind == TH_ARG_BOOL ? b->args[5].u.b : b->args[5].u.i != 0;
      return scatter_common(env, b, reduce_of(b->args[4].u.s), incl, false);
    }
  }
}

/* ---- masked_scatter / masked_select_pad ------------------------------------------------------------------ */

th_status th_eg_masked_scatter_ref(th_rt_env *env, const th_bsym *b) {
  const char *op = th_eg_name(b);
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *mask = th_eg_tensor_arg(env, b, 1), *src = th_eg_tensor_arg(env, b, 2);
  if (!a || !mask || !src) return th_last_status();
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_copy_tensor(out, a);
  int nd = rank1(a);
  int64_t shape[TH_MAX_DIMS], numel = th_tensor_numel(a), nsrc = th_tensor_numel(src);
  shape_of(a, shape);
  eg_view mv, ov, sv;
  view_of(mask, nd, &mv);
  view_of(out, nd, &ov);
  int snd = rank1(src);
  int64_t sshape[TH_MAX_DIMS];
  shape_of(src, sshape);
  view_of(src, snd, &sv);
  int64_t k = 0;
  for (int64_t e = 0; e < numel; e++) {
    if (!mv.base[unravel(e, nd, shape, mv.st)]) continue;
    if (k >= nsrc) return th_error(TH_ERR_RUNTIME, "%s: Number of elements of source < number of ones in mask", op);
    copy_elem(ov.base + unravel(e, nd, shape, ov.st) * ov.es, sv.base + unravel(k, snd, sshape, sv.st) * sv.es, ov.es);
    k++;
  }
  return TH_OK;
}

th_status th_eg_masked_select_pad_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *mask = th_eg_tensor_arg(env, b, 1);
  if (!a || !mask) return th_last_status();
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int nd = rank1(a);
  int64_t shape[TH_MAX_DIMS], numel = th_tensor_numel(a), n = th_tensor_numel(out);
  shape_of(a, shape);
  eg_view mv, av;
  view_of(mask, nd, &mv);
  view_of(a, nd, &av);
  char *o = th_eg_data(out);
  memset(o, 0, (size_t)(n * av.es)); /* zero bits are 0 in every dtype */
  int64_t k = 0;
  for (int64_t e = 0; e < numel && k < n; e++) {
    if (!mv.base[unravel(e, nd, shape, mv.st)]) continue;
    copy_elem(o + k * av.es, av.base + unravel(e, nd, shape, av.st) * av.es, av.es);
    k++;
  }
  return TH_OK;
}

/* ---- searchsorted ----------------------------------------------------------------------------------------- */

th_status th_eg_searchsorted_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *seq = th_eg_tensor_arg(env, b, 0), *vals = th_eg_tensor_arg(env, b, 1);
  if (!seq || !vals) return th_last_status();
  bool right = b->args[2].kind == TH_ARG_BOOL && b->args[2].u.b;
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int64_t nv = th_tensor_numel(vals), len = seq->shape[seq->ndim - 1];
  int vnd = rank1(vals);
  int64_t vshape[TH_MAX_DIMS];
  shape_of(vals, vshape);
  eg_view vv, sv;
  view_of(vals, vnd, &vv);
  view_of(seq, seq->ndim, &sv);
  int64_t inner = vals->ndim ? vshape[vnd - 1] : 1, sstep = sv.st[seq->ndim - 1];
  char *o = th_eg_data(out);
  th_dtype odt = out->dtype, dt = seq->dtype;
  bool flt = is_float(dt);
#pragma omp parallel for if (nv > TH_EG_PAR_MIN / 16) schedule(static)
  for (int64_t k = 0; k < nv; k++) {
    /* the row of seq: row k / inner of the leading dims (seq 1-D: the only row) */
    int64_t row_off = seq->ndim == 1 ? 0 : unravel(k / inner, seq->ndim - 1, seq->shape, sv.st);
    const char *v = vv.base + unravel(k, vnd, vshape, vv.st) * vv.es;
    int64_t lo = 0, hi = len;
    if (flt) {
      double x = th_load_f64(v, dt);
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        double y = th_load_f64(sv.base + (row_off + mid * sstep) * sv.es, dt);
        /* ATen's cus_lower_bound / cus_upper_bound: NaN values and boundaries compare as ATen's do */
        bool go_right = right ? !(y > x) : !(y >= x);
        if (go_right)
          lo = mid + 1;
        else
          hi = mid;
      }
    } else {
      int64_t x = th_load_i64(v, dt);
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int64_t y = th_load_i64(sv.base + (row_off + mid * sstep) * sv.es, dt);
        if (right ? y <= x : y < x)
          lo = mid + 1;
        else
          hi = mid;
      }
    }
    th_store_i64(o + k * (int64_t)th_dtype_size(odt), odt, lo);
  }
  return TH_OK;
}

/* ---- tri_indices ------------------------------------------------------------------------------------------- */

th_status th_eg_tri_indices_ref(th_rt_env *env, const th_bsym *b) {
  int64_t row, col, offset;
  TH_TRY(th_eg_int_arg(env, b, 0, &row));
  TH_TRY(th_eg_int_arg(env, b, 1, &col));
  TH_TRY(th_eg_int_arg(env, b, 2, &offset));
  bool upper = b->args[3].kind == TH_ARG_BOOL && b->args[3].u.b;
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int64_t n = out->shape[1], k = 0, es = (int64_t)th_dtype_size(out->dtype);
  char *o = th_eg_data(out);
  for (int64_t r = 0; r < row && k < n; r++) {
    int64_t c0 = upper ? (r + offset < 0 ? 0 : r + offset) : 0;
    int64_t c1 = upper ? col : (r + offset + 1 > col ? col : r + offset + 1);
    for (int64_t c = c0; c < c1 && k < n; c++, k++) {
      th_store_i64(o + k * es, out->dtype, r);
      th_store_i64(o + (n + k) * es, out->dtype, c);
    }
  }
  return TH_OK;
}
