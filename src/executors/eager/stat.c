/* stat.c — the eager kernel of prims.mode, ATen's CPU mode kernel: each row's (value, index) pairs
 * are sorted by value alone with std::sort (libstdc++'s introsort, ported here: median-of-three
 * quicksort above 16 elements, heapsort past the depth limit 2 log2(n), a final insertion sort), then
 * scanned for runs of equal values; the first longest run wins, and its last pair (in the sorted
 * order) gives the value and the index. std::sort is not stable, so among ties the index is the one
 * this exact algorithm leaves last, as eager PyTorch's. Values compare as C compares them (NaN is
 * unordered and equal to nothing, so each NaN is a run of its own). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executors/eager/eager_internal.h"

typedef struct pair {
  double f;    /* floating keys */
  int64_t i;   /* integer and bool keys */
  int64_t idx; /* position in the row */
} pair;

typedef bool (*less_fn)(const pair *a, const pair *b);

static bool f_less(const pair *a, const pair *b) { return a->f < b->f; }
static bool i_less(const pair *a, const pair *b) { return a->i < b->i; }

static void swap_p(pair *a, pair *b) {
  pair t = *a;
  *a = *b;
  *b = t;
}

static void move_median_to_first(pair *result, pair *a, pair *b, pair *c, less_fn lt) {
  if (lt(a, b)) {
    if (lt(b, c))
      swap_p(result, b);
    else if (lt(a, c))
      swap_p(result, c);
    else
      swap_p(result, a);
  } else if (lt(a, c)) {
    swap_p(result, a);
  } else if (lt(b, c)) {
    swap_p(result, c);
  } else {
    swap_p(result, b);
  }
}

/* The unguarded loops of libstdc++ rely on the pivot as a sentinel; lo/hi bound them so that an
 * inconsistent order (NaN) cannot run past the row, where the C++ code has undefined behaviour. */
static pair *unguarded_partition(pair *lo, pair *hi, pair *first, pair *last, const pair *pivot, less_fn lt) {
  for (;;) {
    while (first < hi - 1 && lt(first, pivot)) ++first;
    --last;
    while (last > lo && lt(pivot, last)) --last;
    if (!(first < last)) return first;
    swap_p(first, last);
    ++first;
  }
}

static void adjust_heap(pair *first, int64_t hole, int64_t len, pair value, less_fn lt) {
  const int64_t top = hole;
  int64_t second = hole;
  while (second < (len - 1) / 2) {
    second = 2 * (second + 1);
    if (lt(first + second, first + (second - 1))) second--;
    first[hole] = first[second];
    hole = second;
  }
  if ((len & 1) == 0 && second == (len - 2) / 2) {
    second = 2 * (second + 1);
    first[hole] = first[second - 1];
    hole = second - 1;
  }
  int64_t parent = (hole - 1) / 2;
  while (hole > top && lt(first + parent, &value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

/* std::partial_sort(first, last, last): make_heap, then sort_heap */
static void heap_sort(pair *first, pair *last, less_fn lt) {
  int64_t len = last - first;
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; parent--) {
    adjust_heap(first, parent, len, first[parent], lt);
    if (parent == 0) break;
  }
  while (last - first > 1) {
    --last;
    pair value = *last;
    *last = *first;
    adjust_heap(first, 0, last - first, value, lt);
  }
}

static void linear_insert(pair *lo, pair *last, less_fn lt) {
  pair val = *last;
  pair *next = last - 1;
  while (last > lo && lt(&val, next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = val;
}

static void insertion_sort(pair *first, pair *last, less_fn lt) {
  if (first == last) return;
  for (pair *i = first + 1; i != last; ++i) {
    if (lt(i, first)) {
      pair val = *i;
      memmove(first + 1, first, sizeof(pair) * (size_t)(i - first));
      *first = val;
    } else {
      linear_insert(first, i, lt);
    }
  }
}

static void introsort_loop(pair *lo, pair *first, pair *last, int64_t depth, less_fn lt) {
  while (last - first > 16) {
    if (depth == 0) {
      heap_sort(first, last, lt);
      return;
    }
    --depth;
    pair *mid = first + (last - first) / 2;
    move_median_to_first(first, first + 1, mid, last - 1, lt);
    pair *cut = unguarded_partition(first, last, first + 1, last, first, lt);
    introsort_loop(lo, cut, last, depth, lt);
    last = cut;
  }
}

static void std_sort(pair *first, pair *last, less_fn lt) {
  int64_t n = last - first;
  if (n < 2) return;
  introsort_loop(first, first, last, 2 * (63 - __builtin_clzll((unsigned long long)n)), lt);
  if (n > 16) {
    insertion_sort(first, first + 16, lt);
    for (pair *i = first + 16; i != last; ++i) linear_insert(first, i, lt);
  } else {
    insertion_sort(first, last, lt);
  }
}

static bool differ(const pair *a, const pair *b, bool fl) { return fl ? a->f != b->f : a->i != b->i; }

th_status th_eg_mode_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 1, &dim));
  th_tensor *vo = th_eg_alloc_out(env, b, 0);
  if (!vo) return th_last_status();
  th_tensor *io = th_eg_alloc_out(env, b, 1);
  if (!io) return th_last_status();
  int d = (int)dim;
  int64_t len = t->ndim ? t->shape[d] : 1, nrows = th_tensor_numel(vo);
  if (nrows == 0 || len == 0) return TH_OK;
  int64_t ibs[TH_MAX_DIMS], vbs[TH_MAX_DIMS], obs[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  th_eg_tensor_bstrides(t, ibs);
  th_eg_tensor_bstrides(vo, vbs);
  th_eg_tensor_bstrides(io, obs);
  int nd = 0;
  int64_t rbs[TH_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++)
    if (i != d) {
      shape[nd] = t->shape[i];
      rbs[nd++] = ibs[i];
    }
  int64_t step = t->ndim ? ibs[d] : 0;
  const char *src = th_eg_data(t);
  char *vd = th_eg_data(vo), *id = th_eg_data(io);
  size_t esz = th_dtype_size(t->dtype);
  bool fl = th_dtype_is_float(t->dtype);
  less_fn lt = fl ? f_less : i_less;
  bool failed = false;
#pragma omp parallel if (nrows > 1 && nrows * len >= TH_EG_PAR_MIN)
  {
    pair *buf = malloc(sizeof(pair) * (size_t)len);
    if (!buf) {
#pragma omp atomic write
      failed = true;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < nrows; r++) {
      if (!buf) continue;
      const char *p = src;
      char *pv = vd, *pi = id;
      for (int64_t q = r, i = nd - 1; i >= 0; i--) {
        int64_t k = q % shape[i];
        q /= shape[i];
        p += k * rbs[i];
        pv += k * vbs[i];
        pi += k * obs[i];
      }
      for (int64_t j = 0; j < len; j++) {
        buf[j].idx = j;
        if (fl)
          buf[j].f = th_load_f64(p + j * step, t->dtype);
        else
          buf[j].i = th_load_i64(p + j * step, t->dtype);
      }
      std_sort(buf, buf + len, lt);
      int64_t modei = 0, freq = 0, max_freq = 0;
      for (int64_t j = 0; j < len; j++) {
        freq++;
        if (j == len - 1 || differ(&buf[j], &buf[j + 1], fl)) {
          if (freq > max_freq) {
            modei = buf[j].idx;
            max_freq = freq;
          }
          freq = 0;
        }
      }
      memcpy(pv, p + modei * step, esz);
      th_sc_st_i64(pi, modei);
    }
    free(buf);
  }
  if (failed) return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  return TH_OK;
}
