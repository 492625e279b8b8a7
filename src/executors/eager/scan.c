/* scan.c — eager kernels of the sort and scan prims: sort, topk, kthvalue, cumsum, cumprod,
 * logcumsumexp, cummax, cummin.
 *
 * Every kernel works row by row: a row is the line of elements along the prim's dim at one index of
 * the other dims (any strides, read through byte strides; outputs contiguous). Rows are independent
 * and run on OpenMP threads when there is enough work.
 *
 * The results follow PyTorch's CPU kernels exactly, tie order included:
 *   sort(stable=False) is libstdc++'s std::sort (introsort: median-of-three quicksort, heapsort past the
 *     depth limit, a final insertion sort) of (value, index) pairs with PyTorch's comparators (NaN
 *     greater than every number), which is what ATen's sort kernel calls; stable=True is a merge sort;
 *   topk is ATen's topk_impl_loop: std::partial_sort when k * 64 <= n, else std::nth_element, then
 *     (sorted) std::sort of the first k - 1;
 *   kthvalue is ATen's quick_select_template (Sedgewick's median-of-three partition);
 *   cumsum/cumprod accumulate in double for float32/float64, in float for bfloat16/float16 and in int64
 *     (wrapping) for integers, storing each prefix rounded to the dtype; logcumsumexp is ATen's
 *     _log_add_exp_helper in the same accumulation types; cummax/cummin take the newest element that is
 *     >= (<=) the running one, and a NaN stays once seen (ATen's cummax_cummin_helper). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executors/eager/eager_internal.h"

/* ---- rows ------------------------------------------------------------------------------------------ */

typedef struct rows {
  int nd;                     /* dims other than the row's */
  int64_t shape[TH_MAX_DIMS]; /* their lengths */
  int64_t bs[3][TH_MAX_DIMS]; /* byte strides of up to three tensors along them */
  int64_t nrows, len;         /* number of rows, row length */
  int64_t step[3];            /* byte stride along the row */
  char *base[3];
} rows;

/* Rows of tensors ts[0..nt) along dim d (a 0-dim tensor is one row of one element). Tensors may have
 * another length along d than ts[0] (topk's outputs); len is ts[0]'s. */
static void rows_init(rows *R, int nt, th_tensor *const *ts, int d) {
  memset(R, 0, sizeof *R);
  const th_tensor *t0 = ts[0];
  R->nrows = 1;
  R->len = t0->ndim ? t0->shape[d] : 1;
  for (int k = 0; k < nt; k++) R->base[k] = th_eg_data(ts[k]);
  for (int i = 0; i < t0->ndim; i++) {
    if (i == d) continue;
    R->shape[R->nd] = t0->shape[i];
    R->nrows *= t0->shape[i];
    for (int k = 0; k < nt; k++) R->bs[k][R->nd] = ts[k]->strides[i] * (int64_t)th_dtype_size(ts[k]->dtype);
    R->nd++;
  }
  for (int k = 0; k < nt; k++) R->step[k] = ts[k]->ndim ? ts[k]->strides[d] * (int64_t)th_dtype_size(ts[k]->dtype) : 0;
}

/* Pointers to row r's first element in each tensor. */
static void row_at(const rows *R, int nt, int64_t r, char **p) {
  for (int k = 0; k < nt; k++) p[k] = R->base[k];
  for (int i = R->nd - 1; i >= 0; i--) {
    int64_t n = R->shape[i], q = r % n;
    r /= n;
    for (int k = 0; k < nt; k++) p[k] += q * R->bs[k][i];
  }
}

static bool par(const rows *R) { return R->nrows > 1 && R->nrows * R->len >= TH_EG_PAR_MIN; }

/* ---- (value, index) items and libstdc++'s algorithms --------------------------------------------------- */

typedef struct item {
  double f;    /* floating keys */
  int64_t i;   /* integer and bool keys */
  int64_t idx; /* position in the row */
} item;

typedef bool (*cmp_fn)(const item *a, const item *b);

/* PyTorch's comparators: ascending puts NaN last, descending puts NaN first. */
static bool f_asc(const item *a, const item *b) { return (!isnan(a->f) && isnan(b->f)) || a->f < b->f; }
static bool f_desc(const item *a, const item *b) { return (isnan(a->f) && !isnan(b->f)) || a->f > b->f; }
static bool i_asc(const item *a, const item *b) { return a->i < b->i; }
static bool i_desc(const item *a, const item *b) { return a->i > b->i; }

static void swap_it(item *a, item *b) {
  item t = *a;
  *a = *b;
  *b = t;
}

static void move_median_to_first(item *result, item *a, item *b, item *c, cmp_fn comp) {
  if (comp(a, b)) {
    if (comp(b, c))
      swap_it(result, b);
    else if (comp(a, c))
      swap_it(result, c);
    else
      swap_it(result, a);
  } else if (comp(a, c)) {
    swap_it(result, a);
  } else if (comp(b, c)) {
    swap_it(result, c);
  } else {
    swap_it(result, b);
  }
}

static item *unguarded_partition(item *first, item *last, const item *pivot, cmp_fn comp) {
  for (;;) {
    while (comp(first, pivot)) ++first;
    --last;
    while (comp(pivot, last)) --last;
    if (!(first < last)) return first;
    swap_it(first, last);
    ++first;
  }
}

static item *unguarded_partition_pivot(item *first, item *last, cmp_fn comp) {
  item *mid = first + (last - first) / 2;
  move_median_to_first(first, first + 1, mid, last - 1, comp);
  return unguarded_partition(first + 1, last, first, comp);
}

static void push_heap(item *first, int64_t hole, int64_t top, item value, cmp_fn comp) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && comp(first + parent, &value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

static void adjust_heap(item *first, int64_t hole, int64_t len, item value, cmp_fn comp) {
  const int64_t top = hole;
  int64_t second = hole;
  while (second < (len - 1) / 2) {
    second = 2 * (second + 1);
    if (comp(first + second, first + (second - 1))) second--;
    first[hole] = first[second];
    hole = second;
  }
  if ((len & 1) == 0 && second == (len - 2) / 2) {
    second = 2 * (second + 1);
    first[hole] = first[second - 1];
    hole = second - 1;
  }
  push_heap(first, hole, top, value, comp);
}

static void make_heap(item *first, item *last, cmp_fn comp) {
  int64_t len = last - first;
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; parent--) {
    adjust_heap(first, parent, len, first[parent], comp);
    if (parent == 0) return;
  }
}

static void pop_heap(item *first, item *last, item *result, cmp_fn comp) {
  item value = *result;
  *result = *first;
  adjust_heap(first, 0, last - first, value, comp);
}

static void heap_select(item *first, item *middle, item *last, cmp_fn comp) {
  make_heap(first, middle, comp);
  for (item *i = middle; i < last; ++i)
    if (comp(i, first)) pop_heap(first, middle, i, comp);
}

static void sort_heap(item *first, item *last, cmp_fn comp) {
  while (last - first > 1) {
    --last;
    pop_heap(first, last, last, comp);
  }
}

static void partial_sort(item *first, item *middle, item *last, cmp_fn comp) {
  heap_select(first, middle, last, comp);
  sort_heap(first, middle, comp);
}

static void unguarded_linear_insert(item *last, cmp_fn comp) {
  item val = *last;
  item *next = last - 1;
  while (comp(&val, next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = val;
}

static void insertion_sort(item *first, item *last, cmp_fn comp) {
  if (first == last) return;
  for (item *i = first + 1; i != last; ++i) {
    if (comp(i, first)) {
      item val = *i;
      memmove(first + 1, first, sizeof(item) * (size_t)(i - first));
      *first = val;
    } else {
      unguarded_linear_insert(i, comp);
    }
  }
}

static void final_insertion_sort(item *first, item *last, cmp_fn comp) {
  if (last - first > 16) {
    insertion_sort(first, first + 16, comp);
    for (item *i = first + 16; i != last; ++i) unguarded_linear_insert(i, comp);
  } else {
    insertion_sort(first, last, comp);
  }
}

static int64_t lg2(int64_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

static void introsort_loop(item *first, item *last, int64_t depth, cmp_fn comp) {
  while (last - first > 16) {
    if (depth == 0) {
      partial_sort(first, last, last, comp);
      return;
    }
    --depth;
    item *cut = unguarded_partition_pivot(first, last, comp);
    introsort_loop(cut, last, depth, comp);
    last = cut;
  }
}

/* std::sort */
static void std_sort(item *first, item *last, cmp_fn comp) {
  if (first == last) return;
  introsort_loop(first, last, lg2(last - first) * 2, comp);
  final_insertion_sort(first, last, comp);
}

/* std::nth_element */
static void nth_element(item *first, item *nth, item *last, cmp_fn comp) {
  if (first == last || nth == last) return;
  int64_t depth = lg2(last - first) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(first, nth + 1, last, comp);
      swap_it(first, nth);
      return;
    }
    --depth;
    item *cut = unguarded_partition_pivot(first, last, comp);
    if (cut <= nth)
      first = cut;
    else
      last = cut;
  }
  insertion_sort(first, last, comp);
}

/* A stable merge sort (ties keep their order); tmp holds n items. */
static void merge_sort(item *a, item *tmp, int64_t n, cmp_fn comp) {
  for (int64_t i = 0; i + 1 < n; i += 2)
    if (comp(&a[i + 1], &a[i])) swap_it(&a[i], &a[i + 1]);
  for (int64_t w = 2; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      if (mid >= hi) continue;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = comp(&a[j], &a[i]) ? a[j++] : a[i++];
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
      memcpy(a + lo, tmp + lo, sizeof(item) * (size_t)(hi - lo));
    }
  }
}

/* ATen's quick_select_template with gt_or_nan (the descending comparator): afterwards a[k] is the
 * element of rank k in ascending order. */
static void quick_select(item *a, int64_t n, int64_t k, cmp_fn gt) {
  int64_t L = 0, R = n - 1;
  for (;;) {
    if (R <= L) return;
    if (R == L + 1) {
      if (gt(&a[L], &a[R])) swap_it(&a[L], &a[R]);
      return;
    }
    int64_t P = (L + R) >> 1;
    swap_it(&a[P], &a[L + 1]);
    if (gt(&a[L + 1], &a[R])) swap_it(&a[L + 1], &a[R]);
    if (gt(&a[L], &a[R])) swap_it(&a[L], &a[R]);
    if (gt(&a[L + 1], &a[L])) swap_it(&a[L + 1], &a[L]);
    int64_t i = L + 1, j = R;
    item piv = a[L];
    for (;;) {
      do i++;
      while (gt(&piv, &a[i]));
      do j--;
      while (gt(&a[j], &piv));
      if (j < i) break;
      swap_it(&a[i], &a[j]);
    }
    swap_it(&a[L], &a[j]);
    if (j <= k) L = i;
    if (j >= k) R = j - 1;
  }
}

/* Loads the row (n elements from p, byte stride s) as items. */
static void load_items(item *it, const char *p, int64_t s, int64_t n, th_dtype dt) {
  bool fl = th_dtype_is_float(dt);
  for (int64_t j = 0; j < n; j++) {
    const char *q = p + j * s;
    it[j].idx = j;
    if (fl)
      it[j].f = th_load_f64(q, dt);
    else
      it[j].i = th_load_i64(q, dt);
  }
}

/* Writes items [0, n) of a row: values as the input's elements (bytes), indices as int64. */
static void store_items(const item *it, int64_t n, const char *src, int64_t ss, size_t esz, char *vo, int64_t vs,
                        char *io, int64_t is) {
  for (int64_t j = 0; j < n; j++) {
    memcpy(vo + j * vs, src + it[j].idx * ss, esz);
    th_sc_st_i64(io + j * is, it[j].idx);
  }
}

/* ---- sort / topk / kthvalue -------------------------------------------------------------------------------- */

typedef enum sel_kind { SEL_SORT, SEL_TOPK, SEL_KTH } sel_kind;

static th_status select_kernel(th_rt_env *env, const th_bsym *b, sel_kind kind) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dim, k = 0, f1 = 0, f2 = 0;
  int da = kind == SEL_SORT ? 1 : 2;
  TH_TRY(th_eg_int_arg(env, b, da, &dim));
  if (kind != SEL_SORT) TH_TRY(th_eg_int_arg(env, b, 1, &k));
  if (kind != SEL_KTH) {
    TH_TRY(th_eg_int_arg(env, b, kind == SEL_SORT ? 2 : 3, &f1)); /* descending / largest */
    TH_TRY(th_eg_int_arg(env, b, kind == SEL_SORT ? 3 : 4, &f2)); /* stable / sorted */
  }
  th_tensor *vo = th_eg_alloc_out(env, b, 0);
  if (!vo) return th_last_status();
  th_tensor *io = th_eg_alloc_out(env, b, 1);
  if (!io) return th_last_status();
  int d = (int)dim;
  int64_t len = t->ndim ? t->shape[d] : 1;
  if (th_tensor_numel(t) == 0 || th_tensor_numel(vo) == 0) return TH_OK;
  rows R;
  th_tensor *ts[3] = {t, vo, io};
  if (kind == SEL_KTH) { /* outputs lack the dim: view them with a length-1 stride-0 dim there */
    rows_init(&R, 1, ts, d);
    int64_t ostr[TH_MAX_DIMS];
    th_eg_tensor_bstrides(vo, ostr);
    int64_t istr[TH_MAX_DIMS];
    th_eg_tensor_bstrides(io, istr);
    for (int i = 0; i < R.nd; i++) {
      R.bs[1][i] = ostr[i];
      R.bs[2][i] = istr[i];
    }
    R.base[1] = th_eg_data(vo);
    R.base[2] = th_eg_data(io);
    R.step[1] = R.step[2] = 0;
  } else {
    rows_init(&R, 3, ts, d);
  }
  bool fl = th_dtype_is_float(t->dtype);
  cmp_fn asc = fl ? f_asc : i_asc, desc = fl ? f_desc : i_desc;
  size_t esz = th_dtype_size(t->dtype);
  bool failed = false;
#pragma omp parallel if (par(&R))
  {
    item *buf = malloc(sizeof(item) * (size_t)(2 * len));
    if (!buf) {
#pragma omp atomic write
      failed = true;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R.nrows; r++) {
      if (!buf) continue;
      char *p[3];
      row_at(&R, 3, r, p);
      load_items(buf, p[0], R.step[0], len, t->dtype);
      int64_t nout = len;
      if (kind == SEL_SORT) {
        cmp_fn c = f1 ? desc : asc;
        if (f2)
          merge_sort(buf, buf + len, len, c);
        else
          std_sort(buf, buf + len, c);
      } else if (kind == SEL_TOPK) {
        cmp_fn c = f1 ? desc : asc;
        nout = k;
        if (k * 64 <= len) {
          partial_sort(buf, buf + k, buf + len, c);
        } else {
          nth_element(buf, buf + k - 1, buf + len, c);
          if (f2) std_sort(buf, buf + k - 1, c);
        }
      } else {
        quick_select(buf, len, k - 1, desc);
        buf[0] = buf[k - 1];
        nout = 1;
      }
      store_items(buf, nout, p[0], R.step[0], esz, p[1], R.step[1], p[2], R.step[2]);
    }
    free(buf);
  }
  if (failed) return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  return TH_OK;
}

th_status th_eg_sort_ref(th_rt_env *env, const th_bsym *b) { return select_kernel(env, b, SEL_SORT); }
th_status th_eg_topk_ref(th_rt_env *env, const th_bsym *b) { return select_kernel(env, b, SEL_TOPK); }
th_status th_eg_kthvalue_ref(th_rt_env *env, const th_bsym *b) { return select_kernel(env, b, SEL_KTH); }

/* ---- scans ---------------------------------------------------------------------------------------------------- */

typedef enum scan_kind { SCAN_SUM, SCAN_PROD, SCAN_LSE } scan_kind;

/* ATen's _log_add_exp_helper */
static double log_add_exp(double x, double y) {
  double mn = isnan(y) ? y : (x < y ? x : y), mx = isnan(y) ? y : (x > y ? x : y);
  if (mn != mx || isfinite(mn)) return log1p(exp(mn - mx)) + mx;
  return x;
}
static float log_add_expf(float x, float y) {
  float mn = isnan(y) ? y : (x < y ? x : y), mx = isnan(y) ? y : (x > y ? x : y);
  if (mn != mx || isfinite(mn)) return log1pf(expf(mn - mx)) + mx;
  return x;
}

static void scan_row(scan_kind kind, th_dtype dt, const char *p, int64_t ps, char *o, int64_t os, int64_t n) {
  if (dt == TH_F64 || dt == TH_F32) {
    double acc = kind == SCAN_SUM ? 0.0 : kind == SCAN_PROD ? 1.0 : -INFINITY;
    for (int64_t j = 0; j < n; j++) {
      double x = th_load_f64(p + j * ps, dt);
      acc = kind == SCAN_SUM ? acc + x : kind == SCAN_PROD ? acc * x : log_add_exp(x, acc);
      th_store_f64(o + j * os, dt, acc);
    }
  } else if (th_dtype_is_float(dt)) {
    float acc = kind == SCAN_SUM ? 0.0f : kind == SCAN_PROD ? 1.0f : -INFINITY;
    for (int64_t j = 0; j < n; j++) {
      float x = th_load_f32(p + j * ps, dt);
      acc = kind == SCAN_SUM ? acc + x : kind == SCAN_PROD ? acc * x : log_add_expf(x, acc);
      th_store_f32(o + j * os, dt, acc);
    }
  } else {
    uint64_t acc = kind == SCAN_SUM ? 0 : 1; /* wrapping int64 arithmetic */
    for (int64_t j = 0; j < n; j++) {
      uint64_t x = (uint64_t)th_load_i64(p + j * ps, dt);
      acc = kind == SCAN_SUM ? acc + x : acc * x;
      th_store_i64(o + j * os, dt, (int64_t)acc);
    }
  }
}

static th_status scan_kernel(th_rt_env *env, const th_bsym *b, scan_kind kind) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 1, &dim));
  th_tensor *o = th_eg_alloc_out(env, b, 0);
  if (!o) return th_last_status();
  if (th_tensor_numel(t) == 0) return TH_OK;
  rows R;
  th_tensor *ts[2] = {t, o};
  rows_init(&R, 2, ts, (int)dim);
#pragma omp parallel for schedule(static) if (par(&R))
  for (int64_t r = 0; r < R.nrows; r++) {
    char *p[2];
    row_at(&R, 2, r, p);
    scan_row(kind, t->dtype, p[0], R.step[0], p[1], R.step[1], R.len);
  }
  return TH_OK;
}

th_status th_eg_cumsum_ref(th_rt_env *env, const th_bsym *b) { return scan_kernel(env, b, SCAN_SUM); }
th_status th_eg_cumprod_ref(th_rt_env *env, const th_bsym *b) { return scan_kernel(env, b, SCAN_PROD); }
th_status th_eg_logcumsumexp_ref(th_rt_env *env, const th_bsym *b) { return scan_kernel(env, b, SCAN_LSE); }

/* cummax / cummin */
static th_status cumext_kernel(th_rt_env *env, const th_bsym *b, bool max) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 1, &dim));
  th_tensor *vo = th_eg_alloc_out(env, b, 0);
  if (!vo) return th_last_status();
  th_tensor *io = th_eg_alloc_out(env, b, 1);
  if (!io) return th_last_status();
  if (th_tensor_numel(t) == 0) return TH_OK;
  rows R;
  th_tensor *ts[3] = {t, vo, io};
  rows_init(&R, 3, ts, (int)dim);
  th_dtype dt = t->dtype;
  bool fl = th_dtype_is_float(dt);
  size_t esz = th_dtype_size(dt);
#pragma omp parallel for schedule(static) if (par(&R))
  for (int64_t r = 0; r < R.nrows; r++) {
    char *p[3];
    row_at(&R, 3, r, p);
    int64_t idx = 0;
    double of = fl ? th_load_f64(p[0], dt) : 0;
    int64_t oi = fl ? 0 : th_load_i64(p[0], dt);
    for (int64_t j = 0; j < R.len; j++) {
      const char *q = p[0] + j * R.step[0];
      bool take;
      if (fl) {
        double x = th_load_f64(q, dt);
        take = isnan(x) || (!isnan(of) && (max ? x >= of : x <= of));
        if (take) of = x;
      } else {
        int64_t x = th_load_i64(q, dt);
        take = max ? x >= oi : x <= oi;
        if (take) oi = x;
      }
      if (take) idx = j;
      memcpy(p[1] + j * R.step[1], p[0] + idx * R.step[0], esz);
      th_sc_st_i64(p[2] + j * R.step[2], idx);
    }
  }
  return TH_OK;
}

th_status th_eg_cummax_ref(th_rt_env *env, const th_bsym *b) { return cumext_kernel(env, b, true); }
th_status th_eg_cummin_ref(th_rt_env *env, const th_bsym *b) { return cumext_kernel(env, b, false); }
