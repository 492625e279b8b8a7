/* blas_conv.c — prims.convolution in the BLAS executor: oneDNN's convolution primitive (transposed:
 * its deconvolution primitive), float32 and bfloat16 (float32 accumulation, the result rounded to
 * bfloat16, as PyTorch's mkldnn path); oneDNN picks the implementation for the CPU (AVX-512, AMX).
 *
 * A call is described to oneDNN in the tensors' logical layouts:
 *   src (N, C_in, *L) through its strides, dst (N, C_out, *L_o) dense row-major;
 *   weights (C_out, C_in / G, *K) (groups: (G, C_out / G, C_in / G, *K) over the same memory); a
 *   transposed weight (C_in, C_out / G, *K) is the deconvolution's (G, C_out / G, C_in / G, *K) with its
 *   two channel strides swapped, no copy;
 *   bias (C_out) of the operands' dtype;
 *   strides, dilations (oneDNN counts d - 1), padding_l = p and padding_r = p (a convolution: oneDNN
 *   floors the output size as ATen) or p - output_padding (a deconvolution, whose output is then the
 *   size ATen gives; oneDNN takes padding_r > -stride).
 * The primitive itself is created with format `any` for src, weights and dst, so oneDNN chooses its
 * blocked layouts; reorders from the plain tensors into them (and back for dst) run around it, into
 * scratch buffers. A strided src or weight (the backward's transposed views, a channels-last input) is
 * reordered from its strides in the same single pass, by a reorder made for the call; one with a zero
 * or negative stride (a broadcast or flipped view), and a strided bias, are copied to dense first.
 * A primitive and its reorders are cached by the problem (dtype, shapes, parameters) in a small LRU
 * table shared by all programs (a mutex guards lookups; an entry in use is never evicted).
 * On a CPU without a bf16 convolution in oneDNN (no AVX-512: probed once at start; the environment
 * variable THUNDER_TEST_BLAS_CONV_WIDEN=1 makes the probe say so, for the tests), a bf16 call runs the
 * float32 primitive on widened copies of its operands and rounds the result to bf16 once.
 * The checker creates (and so caches) the primitive at compile time: a problem oneDNN refuses stays
 * with the eager executor, as do float64, the integers and empty tensors. */
#include <stdlib.h>
#include <omp.h>
#include <string.h>
#include <threads.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/scalar.h"
#include "executors/blas_conv.h"
#include "runtime/program.h"

/* ---- the problem ------------------------------------------------------------------------------------ */

typedef struct { /* int64 fields only: compared with memcmp */
  int64_t dt;    /* dnnl_data_type_t */
  int64_t transposed, k, has_bias;
  int64_t N, IC, OC, G;
  int64_t L[3], K[3], Lo[3], s[3], d[3], pl[3], pr[3];
  int64_t nthr; /* the OpenMP team the primitive was made for (oneDNN fixes it at creation): set by acquire */
} cv_key;

/* The key of b's call from its operands' metadata (shapes known at compile time), or false when the
 * call is not one this executor runs (dtype, an empty tensor, parameters it cannot read). */
static bool key_of(const th_bsym *b, cv_key *k) {
  memset(k, 0, sizeof *k);
  if (b->nargs < 9 || b->out.kind != TH_ARG_VALUE) return false;
  const th_arg *A = b->args;
  if (A[0].kind != TH_ARG_VALUE || A[1].kind != TH_ARG_VALUE) return false;
  const th_value *x = A[0].u.value, *w = A[1].u.value, *o = b->out.u.value;
  if (!x->is_tensor || !w->is_tensor || !o->is_tensor) return false;
  if ((x->dtype != TH_F32 && x->dtype != TH_BF16) || w->dtype != x->dtype || o->dtype != x->dtype) return false;
  const int nd = w->ndim - 2;
  if (nd < 1 || nd > 3 || x->ndim != w->ndim || o->ndim != w->ndim) return false;
  if (A[2].kind == TH_ARG_VALUE) {
    const th_value *bias = A[2].u.value;
    if (!bias->is_tensor || bias->dtype != x->dtype || bias->ndim != 1) return false;
    k->has_bias = 1;
  } else if (A[2].kind != TH_ARG_NONE) {
    return false;
  }
  for (int i = 0; i < x->ndim; i++)
    if (x->shape[i] == 0 || w->shape[i] == 0 || o->shape[i] == 0) return false;
  int64_t lists[4][3];
  const int which[4] = {3, 4, 5, 7}; /* stride, padding, dilation, output_padding */
  for (int l = 0; l < 4; l++) {
    const th_arg *a = &A[which[l]];
    if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) return false;
    if (a->u.seq.n != 1 && a->u.seq.n != nd) return false;
    for (int i = 0; i < nd; i++) {
      const th_arg *e = &a->u.seq.items[a->u.seq.n == 1 ? 0 : i];
      if (e->kind != TH_ARG_INT) return false;
      lists[l][i] = e->u.i;
    }
  }
  if (A[6].kind != TH_ARG_BOOL || A[8].kind != TH_ARG_INT || A[8].u.i <= 0) return false;
  k->dt = x->dtype == TH_BF16 ? dnnl_bf16 : dnnl_f32;
  k->transposed = A[6].u.b;
  k->k = nd;
  k->N = x->shape[0], k->IC = x->shape[1], k->OC = o->shape[1], k->G = A[8].u.i;
  for (int i = 0; i < nd; i++) {
    k->L[i] = x->shape[2 + i], k->K[i] = w->shape[2 + i], k->Lo[i] = o->shape[2 + i];
    k->s[i] = lists[0][i], k->d[i] = lists[2][i], k->pl[i] = lists[1][i];
    k->pr[i] = k->transposed ? lists[1][i] - lists[3][i] : lists[1][i];
    if (k->pr[i] + k->s[i] <= 0) return false;
  }
  return true;
}

/* ---- engine and primitive cache ----------------------------------------------------------------------- */

static once_flag init_once = ONCE_FLAG_INIT;
static dnnl_engine_t engine;
static mtx_t cache_mtx;

enum { SRC, WEI, BIA, DST };

typedef struct {
  cv_key key;
  dnnl_primitive_t prim;
  dnnl_primitive_t reorder[4];  /* SRC, WEI: user -> primitive; DST: primitive -> user; NULL: none */
  dnnl_memory_desc_t user[4];   /* the tensors' layouts */
  dnnl_memory_desc_t chosen[4]; /* the primitive's */
  size_t scratch[4];            /* bytes of the reorder buffers */
  uint64_t tick;
  int inuse;
  bool cached; /* false: a one-off entry, destroyed after its call */
} cv_entry;

#define CACHE_SIZE 64
static cv_entry cache[CACHE_SIZE];
static uint64_t cache_tick;

static bool bf16_native; /* oneDNN has a bf16 convolution on this CPU (probed once) */

static dnnl_status_t create(const cv_key *k, cv_entry *e);
static void entry_destroy(cv_entry *e);

static void init(void) {
  if (mtx_init(&cache_mtx, mtx_plain) != thrd_success) return;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine = NULL;
    return;
  }
  /* does this CPU have a bf16 convolution? (THUNDER_TEST_BLAS_CONV_WIDEN=1 says no, for the tests) */
  const char *force = getenv("THUNDER_TEST_BLAS_CONV_WIDEN");
  cv_key k = {.dt = dnnl_bf16, .k = 1, .N = 1, .IC = 1, .OC = 1, .G = 1};
  k.L[0] = k.K[0] = k.Lo[0] = k.s[0] = k.d[0] = 1;
  cv_entry e;
  if ((!force || strcmp(force, "1")) && create(&k, &e) == dnnl_success) {
    bf16_native = true;
    entry_destroy(&e);
  }
}

static bool init_ok(void) {
  call_once(&init_once, init);
  return engine != NULL;
}

static th_status dnnl_err(const char *what, dnnl_status_t s) {
  return th_error(s == dnnl_out_of_memory ? TH_ERR_NOMEM : TH_ERR_RUNTIME, "prims.convolution: oneDNN %s failed: %s",
                  what, dnnl_status2str(s));
}

static void entry_destroy(cv_entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  for (int i = 0; i < 4; i++)
    if (e->reorder[i]) dnnl_primitive_destroy(e->reorder[i]);
  e->prim = NULL;
  memset(e->reorder, 0, sizeof e->reorder);
}

/* Dense row-major element strides of an n-D shape. */
static void dense_strides(int n, const int64_t *dims, int64_t *strides) {
  int64_t acc = 1;
  for (int i = n - 1; i >= 0; i--) strides[i] = acc, acc *= dims[i] > 1 ? dims[i] : 1;
}

/* The layout of src (N, C_in, *L) whose element strides are xs. */
static void src_md(const cv_key *k, const int64_t *xs, dnnl_memory_desc_t *md) {
  const int nd = (int)k->k;
  dnnl_dims_t dims, strides;
  dims[0] = k->N, dims[1] = k->IC;
  for (int i = 0; i < nd; i++) dims[2 + i] = k->L[i];
  for (int i = 0; i < nd + 2; i++) strides[i] = xs[i];
  dnnl_memory_desc_init_by_strides(md, nd + 2, dims, (dnnl_data_type_t)k->dt, strides);
}

/* The layout of the weights as oneDNN's (G,) O, I, *K over PyTorch's tensor with element strides ws:
 * (O, I / G, *K) for a convolution, (I, O / G, *K) for a transposed one (its two channel strides swap). */
static void wei_md(const cv_key *k, const int64_t *ws, dnnl_memory_desc_t *md) {
  const int nd = (int)k->k, g = k->G > 1;
  const int64_t G = k->G, Og = k->OC / G, Ig = k->IC / G;
  dnnl_dims_t dims, strides;
  if (g) dims[0] = G;
  dims[g] = Og, dims[g + 1] = Ig;
  for (int i = 0; i < nd; i++) dims[g + 2 + i] = k->K[i], strides[g + 2 + i] = ws[2 + i];
  if (!k->transposed) { /* PyTorch's dim 0 is (G, Og), dim 1 is Ig */
    strides[g] = ws[0], strides[g + 1] = ws[1];
    if (g) strides[0] = Og * ws[0];
  } else { /* PyTorch's dim 0 is (G, Ig), dim 1 is Og */
    strides[g] = ws[1], strides[g + 1] = ws[0];
    if (g) strides[0] = Ig * ws[0];
  }
  dnnl_memory_desc_init_by_strides(md, g + 2 + nd, dims, (dnnl_data_type_t)k->dt, strides);
}

/* The user (plain, dense) layouts of the problem's four tensors. */
static void user_mds(const cv_key *k, dnnl_memory_desc_t md[4]) {
  const int nd = (int)k->k;
  int64_t dims[5], st[5];
  dims[0] = k->N, dims[1] = k->IC;
  for (int i = 0; i < nd; i++) dims[2 + i] = k->L[i];
  dense_strides(nd + 2, dims, st);
  src_md(k, st, &md[SRC]);
  dims[0] = k->transposed ? k->IC : k->OC, dims[1] = k->transposed ? k->OC / k->G : k->IC / k->G;
  for (int i = 0; i < nd; i++) dims[2 + i] = k->K[i];
  dense_strides(nd + 2, dims, st);
  wei_md(k, st, &md[WEI]);
  dnnl_dims_t d;
  d[0] = k->N, d[1] = k->OC;
  for (int i = 0; i < nd; i++) d[2 + i] = k->Lo[i];
  dense_strides(nd + 2, d, st);
  dnnl_dims_t ds;
  for (int i = 0; i < nd + 2; i++) ds[i] = st[i];
  dnnl_memory_desc_init_by_strides(&md[DST], nd + 2, d, (dnnl_data_type_t)k->dt, ds);
  d[0] = k->OC;
  dnnl_memory_desc_init_by_tag(&md[BIA], 1, d, (dnnl_data_type_t)k->dt, dnnl_a);
}

static dnnl_status_t reorder_create(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                    dnnl_primitive_t *out) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL);
  if (s != dnnl_success) return s;
  s = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  return s;
}

static dnnl_status_t create(const cv_key *k, cv_entry *e) {
  memset(e, 0, sizeof *e);
  user_mds(k, e->user);
  const int nd = (int)k->k;
  dnnl_memory_desc_t any[4];
  for (int t = 0; t < 4; t++) {
    if (t == BIA) continue;
    dnnl_memory_desc_init_by_tag(&any[t], e->user[t].ndims, e->user[t].dims, (dnnl_data_type_t)k->dt,
                                 dnnl_format_tag_any);
  }
  dnnl_dims_t strides, dil, pl, pr;
  for (int i = 0; i < nd; i++) strides[i] = k->s[i], dil[i] = k->d[i] - 1, pl[i] = k->pl[i], pr[i] = k->pr[i];
  const dnnl_memory_desc_t *bias = k->has_bias ? &e->user[BIA] : NULL;
  dnnl_status_t s;
  dnnl_primitive_desc_t pd;
  if (k->transposed) {
    dnnl_deconvolution_desc_t d;
    s = dnnl_dilated_deconvolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_deconvolution_direct, &any[SRC],
                                                     &any[WEI], bias, &any[DST], strides, dil, pl, pr);
    if (s != dnnl_success) return s;
    s = dnnl_primitive_desc_create(&pd, &d, NULL, engine, NULL);
  } else {
    dnnl_convolution_desc_t d;
    s = dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct, &any[SRC],
                                                   &any[WEI], bias, &any[DST], strides, dil, pl, pr);
    if (s != dnnl_success) return s;
    s = dnnl_primitive_desc_create(&pd, &d, NULL, engine, NULL);
  }
  if (s != dnnl_success) return s;
  const dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_undef, dnnl_query_dst_md};
  for (int t = 0; t < 4; t++) {
    if (t == BIA) continue;
    e->chosen[t] = *dnnl_primitive_desc_query_md(pd, q[t], 0);
    if (dnnl_memory_desc_equal(&e->chosen[t], &e->user[t])) continue;
    e->scratch[t] = dnnl_memory_desc_get_size(&e->chosen[t]);
    s = t == DST ? reorder_create(&e->chosen[t], &e->user[t], &e->reorder[t])
                 : reorder_create(&e->user[t], &e->chosen[t], &e->reorder[t]);
    if (s != dnnl_success) break;
  }
  if (s == dnnl_success) s = dnnl_primitive_create(&e->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success) entry_destroy(e);
  return s;
}

/* An entry for k: from the cache, or created (and cached when a slot is free). */
static th_status acquire(const cv_key *key, cv_entry **out) {
  cv_key kt = *key;
  kt.nthr = omp_get_max_threads();
  const cv_key *k = &kt;
  if (!init_ok()) return th_error(TH_ERR_RUNTIME, "prims.convolution: the oneDNN CPU engine could not be created");
  mtx_lock(&cache_mtx);
  cv_entry *victim = NULL;
  for (int i = 0; i < CACHE_SIZE; i++) {
    cv_entry *e = &cache[i];
    if (e->prim && !memcmp(&e->key, k, sizeof *k)) {
      e->inuse++;
      e->tick = ++cache_tick;
      mtx_unlock(&cache_mtx);
      *out = e;
      return TH_OK;
    }
    if (!e->inuse && (!victim || !e->prim || (victim->prim && e->tick < victim->tick))) victim = e;
  }
  cv_entry tmp;
  dnnl_status_t s = create(k, &tmp);
  if (s != dnnl_success) {
    mtx_unlock(&cache_mtx);
    return dnnl_err("convolution primitive creation", s);
  }
  tmp.key = *k;
  tmp.inuse = 1;
  tmp.tick = ++cache_tick;
  if (victim) {
    entry_destroy(victim);
    tmp.cached = true;
    *victim = tmp;
    *out = victim;
  } else {
    *out = th_malloc(sizeof tmp);
    if (*out) **out = tmp;
  }
  mtx_unlock(&cache_mtx);
  if (!*out) {
    entry_destroy(&tmp);
    return th_error(TH_ERR_NOMEM, "out of memory caching a oneDNN primitive");
  }
  return TH_OK;
}

static void release(cv_entry *e) {
  if (!e->cached) {
    entry_destroy(e);
    th_free(e);
    return;
  }
  mtx_lock(&cache_mtx);
  e->inuse--;
  mtx_unlock(&cache_mtx);
}

/* ---- execution --------------------------------------------------------------------------------------- */

static dnnl_status_t run_prim(dnnl_stream_t stream, dnnl_primitive_t p, int n, const int *which,
                              const dnnl_memory_desc_t *const *mds, void *const *data) {
  dnnl_exec_arg_t args[4];
  int m = 0;
  dnnl_status_t s = dnnl_success;
  for (int i = 0; i < n && s == dnnl_success; i++) {
    args[m].arg = which[i];
    s = dnnl_memory_create(&args[m].memory, mds[i], engine, data[i]);
    if (s == dnnl_success) m++;
  }
  if (s == dnnl_success) s = dnnl_primitive_execute(p, stream, m, args);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  for (int i = 0; i < m; i++) dnnl_memory_destroy(args[i].memory);
  return s;
}

/* The reorders around the primitive and the primitive itself. data[t] is each tensor's memory; strided[t]
 * (SRC, WEI) the layout of an operand that is not dense, else NULL: such an operand is reordered
 * straight from its strides into the primitive's layout (a one-off reorder, one pass). */
static th_status execute(cv_entry *e, void *data[4], const dnnl_memory_desc_t *strided[2]) {
  th_tensor *buf[4] = {NULL, NULL, NULL, NULL};
  void *prim_data[4] = {data[0], data[1], data[2], data[3]};
  dnnl_stream_t stream = NULL;
  dnnl_status_t s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
  th_status st = TH_OK;
  for (int t = 0; t < 4 && s == dnnl_success; t++) {
    const bool one_off = t < 2 && strided[t];
    if (!e->reorder[t] && !one_off) continue;
    const dnnl_memory_desc_t *to = e->reorder[t] ? &e->chosen[t] : &e->user[t];
    const int64_t bytes = (int64_t)(e->reorder[t] ? e->scratch[t] : dnnl_memory_desc_get_size(to));
    if (!(buf[t] = th_rt_pool_empty(TH_U8, 1, &bytes))) {
      st = th_last_status();
      break;
    }
    prim_data[t] = th_tensor_data(buf[t]);
    if (t == DST) continue;
    const int which[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[2] = {one_off ? strided[t] : &e->user[t], to};
    void *ptrs[2] = {data[t], prim_data[t]};
    dnnl_primitive_t r = e->reorder[t];
    if (one_off && (s = reorder_create(strided[t], to, &r)) != dnnl_success) break;
    s = run_prim(stream, r, 2, which, mds, ptrs);
    if (one_off) dnnl_primitive_destroy(r);
  }
  if (st == TH_OK && s == dnnl_success) {
    const int which[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {e->reorder[SRC] ? &e->chosen[SRC] : &e->user[SRC],
                                        e->reorder[WEI] ? &e->chosen[WEI] : &e->user[WEI],
                                        e->reorder[DST] ? &e->chosen[DST] : &e->user[DST], &e->user[BIA]};
    void *ptrs[4] = {prim_data[SRC], prim_data[WEI], prim_data[DST], data[BIA]};
    s = run_prim(stream, e->prim, e->key.has_bias ? 4 : 3, which, mds, ptrs);
  }
  if (st == TH_OK && s == dnnl_success && e->reorder[DST]) {
    const int which[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[2] = {&e->chosen[DST], &e->user[DST]};
    void *ptrs[2] = {prim_data[DST], data[DST]};
    s = run_prim(stream, e->reorder[DST], 2, which, mds, ptrs);
  }
  if (stream) dnnl_stream_destroy(stream);
  for (int t = 0; t < 4; t++) th_tensor_release(buf[t]);
  if (st == TH_OK && s != dnnl_success) st = dnnl_err("convolution", s);
  return st;
}

/* True when oneDNN reads t through its strides: all positive (a broadcast or flipped view is copied). */
static bool strides_ok(const th_tensor *t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->strides[i] < 1) return false;
  return true;
}

/* The problem the primitive solves: a bf16 call on a CPU without a bf16 convolution runs in float32 on
 * widened operands (*widen), rounded back to bf16 once, as PyTorch's float32-accumulating kernel. */
static bool effective_key(const th_bsym *b, cv_key *k, bool *widen) {
  if (!key_of(b, k) || !init_ok()) return false;
  *widen = k->dt == dnnl_bf16 && !bf16_native;
  if (*widen) k->dt = dnnl_f32;
  return true;
}

/* A dense float32 copy of bf16 tensor t (NULL with an error set). */
static th_tensor *widen_tensor(const th_tensor *t) {
  th_tensor *c = th_tensor_is_contiguous(t) ? NULL : th_tensor_contiguous_copy(t);
  if (!th_tensor_is_contiguous(t) && !c) return NULL;
  const th_tensor *src = c ? c : t;
  th_tensor *f = th_rt_pool_empty(TH_F32, t->ndim, t->shape);
  if (f) {
    const uint16_t *in = th_tensor_data(src);
    float *o = th_tensor_data(f);
    const int64_t n = th_tensor_numel(t);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) o[i] = th_sc_bf16_to_f32(in[i]);
  }
  th_tensor_release(c);
  return f;
}

/* The widened call: float32 copies of the operands, the float32 primitive, the result rounded to bf16. */
static th_status run_widened(cv_entry *e, th_tensor *x, th_tensor *w, th_tensor *bias, th_tensor *out) {
  th_tensor *f[4] = {widen_tensor(x), widen_tensor(w), bias ? widen_tensor(bias) : NULL,
                     th_rt_pool_empty(TH_F32, out->ndim, out->shape)};
  th_status st = TH_OK;
  if (!f[0] || !f[1] || (bias && !f[2]) || !f[3]) {
    st = th_last_status();
  } else {
    void *data[4] = {th_tensor_data(f[0]), th_tensor_data(f[1]), f[2] ? th_tensor_data(f[2]) : NULL,
                     th_tensor_data(f[3])};
    const dnnl_memory_desc_t *strided[2] = {NULL, NULL};
    st = execute(e, data, strided);
  }
  if (st == TH_OK) {
    const float *r = th_tensor_data(f[3]);
    uint16_t *o = th_tensor_data(out);
    const int64_t n = th_tensor_numel(out);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) o[i] = th_sc_f32_to_bf16(r[i]);
  }
  for (int i = 0; i < 4; i++) th_tensor_release(f[i]);
  return st;
}

th_status th_blas_convolution_kernel(th_rt_env *env, const th_bsym *b) {
  cv_key k;
  bool widen;
  if (!effective_key(b, &k, &widen))
    return th_error(TH_ERR_RUNTIME, "prims.convolution: a call the BLAS executor does not run");
  th_tensor *x = th_rt_tensor(env, &b->args[0]), *w = th_rt_tensor(env, &b->args[1]);
  th_tensor *bias = k.has_bias ? th_rt_tensor(env, &b->args[2]) : NULL;
  if (!x || !w || (k.has_bias && !bias)) return th_error(TH_ERR_RUNTIME, "prims.convolution: expected tensor operands");
  th_tensor *out = th_rt_alloc_output(env, b->out.u.value);
  if (!out) return th_last_status();
  cv_entry *e;
  TH_TRY(acquire(&k, &e));
  if (widen) {
    th_status st = run_widened(e, x, w, bias, out);
    release(e);
    return st;
  }
  /* Step 1: operands; a strided input or weight is described by its strides (reordered in one pass), a
   * strided bias (or a negative stride anywhere) copied to a dense tensor */
  th_tensor *owned[3] = {NULL, NULL, NULL}, *ops[3] = {x, w, bias};
  dnnl_memory_desc_t md[2];
  const dnnl_memory_desc_t *strided[2] = {NULL, NULL};
  th_status st = TH_OK;
  for (int i = 0; i < 3 && st == TH_OK; i++) {
    if (!ops[i] || th_tensor_is_contiguous(ops[i])) continue;
    if (i < 2 && strides_ok(ops[i])) {
      if (i == SRC)
        src_md(&k, ops[i]->strides, &md[i]);
      else
        wei_md(&k, ops[i]->strides, &md[i]);
      strided[i] = &md[i];
      continue;
    }
    if (!(owned[i] = ops[i] = th_tensor_contiguous_copy(ops[i]))) st = th_last_status();
  }
  /* Step 2: the reorders and the primitive */
  if (st == TH_OK) {
    void *data[4] = {th_tensor_data(ops[0]), th_tensor_data(ops[1]), ops[2] ? th_tensor_data(ops[2]) : NULL,
                     th_tensor_data(out)};
    st = execute(e, data, strided);
  }
  release(e);
  for (int i = 0; i < 3; i++) th_tensor_release(owned[i]);
  return st;
}

bool th_blas_convolution_checker(const th_bsym *b) {
  cv_key k;
  bool widen;
  if (!effective_key(b, &k, &widen)) return false;
  cv_entry *e;
  if (acquire(&k, &e) != TH_OK) return false;
  release(e);
  return true;
}
