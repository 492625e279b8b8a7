/* blas.c — the BLAS executor ("blas"): prims.matmul and prims.linear through oneDNN's matmul primitive.
 *
 * Every call becomes one oneDNN matmul dst(B, M, N) = src(B, M, K) @ wei(B, K, N) [+ bias(1, 1, N)],
 * described with strided memory descriptors straight over the tensors' memory:
 *   matmul  ND @ ND  identical batch dims, collapsed into one batch dim B (when their strides allow)
 *           1D @ ND  src is a row vector (1, 1, K), broadcast over the batch
 *           ND @ 1D  wei is a column vector (1, K, 1)
 *   linear  a(..., K) @ w(N, K)^T + bias(N): a's leading dims collapse into M, wei is w's transposed
 *           view (strides swapped, no copy), bias is oneDNN's bias argument
 * A matrix operand must be row- or column-major (one of its two inner strides 1; size-1 dims take
 * whatever stride makes that true); anything else (a slice with a step in both dims, a broadcast
 * with stride 0, batch dims that do not collapse) is first copied to a contiguous tensor. Without
 * batch (B = 1 everywhere) the problem is 2-D. The output is the contiguous tensor the runtime
 * allocates.
 *
 * dtypes: f32, and bf16 (f32 accumulation, result rounded to bf16 like PyTorch). oneDNN 2.6 has no
 * bf16 matmul on CPUs without AVX-512 (probed once at start); there bf16 operands are widened to f32,
 * multiplied by the f32 primitive and rounded back, which gives the same result up to the order of
 * the f32 accumulation. Widening is the copy: an operand in a layout oneDNN does not take (attention's
 * head-split views of the fused qkv output) is gathered straight from its strided bf16 view into f32,
 * keeping a transposed view column-major, instead of a contiguous bf16 copy followed by a widening. oneDNN's CPU matmul has no f64 at all, so the checker leaves f64 (and every
 * other dtype) to the eager executor.
 *
 * prims.scaled_mm (the fp8 GEMM of torch._scaled_mm) is claimed here too: both fp8 operands are decoded
 * exactly to float32 (a 256-entry table per format, OpenMP over rows; b keeps its row- or column-major
 * orientation, so a transposed weight needs no gather) and multiplied by oneDNN's sgemm with
 * alpha = scale_a * scale_b; the bias and the rounding to the output dtype follow in one pass. oneDNN's
 * tuned f32 GEMM beats any fp8-decoding micro-kernel on CPUs without fp8 arithmetic; the price is a
 * float32 copy of both operands for the duration of the call (the eager executor's kernel,
 * executors/eager/scaled_mm.c, decodes into cache-sized panels instead and needs none).
 *
 * prims.convolution is claimed too, by the kernel and checker of blas_conv.c (oneDNN's convolution and
 * deconvolution primitives).
 *
 * A GEMM with an epilogue (a dynamic bsym the execution transform makes, "GEMM epilogues" below) runs
 * the same way, with oneDNN post-ops and dst in the chain's output dtype.
 *
 * Primitives are cached by (dtype, rank, layouts of src/wei/bias/dst, dst dtype, post-ops) in a small
 * LRU table shared by all programs (a mutex guards lookups; a primitive in use is never evicted; oneDNN
 * primitives may run concurrently). oneDNN threads with its default OpenMP runtime. */
#include <omp.h>
#include <string.h>
#include <threads.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/scalar.h"
#include "executors/blas_conv.h"
#include "executors/kernel.h"
#include "runtime/program.h"

/* ---- operand layouts ----------------------------------------------------------------------------- */

/* A 3-D view (batch, rows, cols) in elements over some tensor's data. */
typedef struct {
  int64_t dims[3];
  int64_t strides[3];
} layout;

typedef enum {
  V_MAT,    /* (..., r, c): batch dims collapse into one */
  V_ROWS,   /* (..., K) as (1, prod(...), K): linear's input */
  V_ROWVEC, /* 1-D (n) as (1, 1, n) */
  V_COLVEC, /* 1-D (n) as (1, n, 1) */
  V_WT,     /* 2-D w (N, K) as w^T (1, K, N) */
} view_kind;

/* Collapses dims [lo, hi) into one strided dim (size-1 dims ignored). False if they do not form one
 * run with a single stride. An empty or all-ones range gives size 1, stride 0. */
static bool collapse(const th_tensor *t, int lo, int hi, int64_t *size, int64_t *stride) {
  int64_t sz = 1, st = 0;
  for (int i = hi - 1; i >= lo; i--) {
    if (t->shape[i] == 1) continue;
    if (sz == 1) {
      sz = t->shape[i];
      st = t->strides[i];
    } else if (t->strides[i] == st * sz) {
      sz *= t->shape[i];
    } else {
      return false;
    }
  }
  *size = sz;
  *stride = st;
  return true;
}

/* Gives size-1 dims strides that make the matrix plainly row-major where possible (else column-major:
 * oneDNN's gemm takes both, its fallback for anything else is slow), and checks that it is one of
 * the two. The batch stride of a single batch is the matrix's span. */
static bool normalize(layout *l) {
  int64_t r = l->dims[1], c = l->dims[2];
  int64_t *rs = &l->strides[1], *cs = &l->strides[2];
  if (c == 1) *cs = 1;
  if (r == 1) *rs = *cs == 1 ? c : 1;
  if (*rs < 1 || *cs < 1) return false;
  if (!((*cs == 1 && *rs >= c) || (*rs == 1 && *cs >= r))) return false;
  if (l->dims[0] == 1) l->strides[0] = (r - 1) * *rs + (c - 1) * *cs + 1;
  return l->strides[0] >= 1;
}

static bool describe(const th_tensor *t, view_kind k, layout *l) {
  int nd = t->ndim;
  int64_t b = 1, bs = 0, r, rs, c, cs;
  switch (k) {
    case V_MAT:
      if (!collapse(t, 0, nd - 2, &b, &bs)) return false;
      r = t->shape[nd - 2], rs = t->strides[nd - 2], c = t->shape[nd - 1], cs = t->strides[nd - 1];
      break;
    case V_ROWS:
      if (!collapse(t, 0, nd - 1, &r, &rs)) return false;
      c = t->shape[nd - 1], cs = t->strides[nd - 1];
      break;
    case V_ROWVEC: r = 1, rs = 0, c = t->shape[0], cs = t->strides[0]; break;
    case V_COLVEC: r = t->shape[0], rs = t->strides[0], c = 1, cs = 0; break;
    case V_WT: r = t->shape[1], rs = t->strides[1], c = t->shape[0], cs = t->strides[0]; break;
    default: return false;
  }
  *l = (layout){{b, r, c}, {bs, rs, cs}};
  return normalize(l);
}

static layout dense(int64_t b, int64_t r, int64_t c) {
  layout l = {{b, r, c}, {r * c, c, 1}};
  normalize(&l);
  return l;
}

/* ---- engine, probe, primitive cache ------------------------------------------------------------------ */

static once_flag init_once = ONCE_FLAG_INIT;
static dnnl_engine_t engine;
static bool bf16_native;
static mtx_t cache_mtx;

typedef struct { /* no padding: compared with memcmp */
  int64_t dt;    /* dnnl_data_type_t */
  int64_t ndims;
  int64_t has_bias;
  layout src, wei, bias, dst;
  int64_t dst_dt; /* dnnl_data_type_t of dst; 0 (undef): dt */
  int64_t npost;  /* post-ops (a GEMM epilogue): post_key's rows */
  int64_t post[TH_BLAS_EPI_MAX][3];
  int64_t nthr; /* the OpenMP team the primitive was made for (oneDNN fixes it at creation): set by acquire */
} mm_key;

typedef struct {
  mm_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[4]; /* src wei bias dst */
  uint64_t tick;
  int inuse;
  bool cached; /* false: a one-off primitive, destroyed after its call */
} mm_entry;

#define CACHE_SIZE 64 /* a program's GEMM shapes, for two team sizes (the team follows the load) */
static mm_entry cache[CACHE_SIZE];
static uint64_t cache_tick;

static void md_init(dnnl_memory_desc_t *md, int64_t ndims, int64_t dt, const layout *l) {
  int off = 3 - (int)ndims;
  dnnl_dims_t dims, strides;
  for (int i = 0; i < ndims; i++) {
    dims[i] = l->dims[off + i];
    strides[i] = l->strides[off + i];
  }
  dnnl_memory_desc_init_by_strides(md, (int)ndims, dims, (dnnl_data_type_t)dt, strides);
}

static dnnl_status_t post_attr(const mm_key *k, dnnl_primitive_attr_t *attr);

static dnnl_status_t create(const mm_key *k, mm_entry *e) {
  md_init(&e->md[0], k->ndims, k->dt, &k->src);
  md_init(&e->md[1], k->ndims, k->dt, &k->wei);
  if (k->has_bias) md_init(&e->md[2], k->ndims, k->dt, &k->bias);
  md_init(&e->md[3], k->ndims, k->dst_dt ? k->dst_dt : k->dt, &k->dst);
  dnnl_matmul_desc_t d;
  dnnl_status_t s = dnnl_matmul_desc_init(&d, &e->md[0], &e->md[1], k->has_bias ? &e->md[2] : NULL, &e->md[3]);
  if (s != dnnl_success) return s;
  dnnl_primitive_attr_t attr = NULL;
  if (k->npost && (s = post_attr(k, &attr)) != dnnl_success) return s;
  dnnl_primitive_desc_t pd;
  s = dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success) return s;
  s = dnnl_primitive_create(&e->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  return s;
}

static void init(void) {
  if (mtx_init(&cache_mtx, mtx_plain) != thrd_success) return;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine = NULL;
    return;
  }
  /* does this CPU have a bf16 matmul? */
  mm_key k = {dnnl_bf16, 2, 0, dense(1, 2, 2), dense(1, 2, 2), dense(1, 1, 1), dense(1, 2, 2), 0, 0, {{0}}, 0};
  mm_entry e = {0};
  if (create(&k, &e) == dnnl_success) {
    bf16_native = true;
    dnnl_primitive_destroy(e.prim);
  }
}

static th_status dnnl_err(const char *what, dnnl_status_t s) {
  return th_error(s == dnnl_out_of_memory ? TH_ERR_NOMEM : TH_ERR_RUNTIME, "oneDNN %s failed: %s", what,
                  dnnl_status2str(s));
}

/* A primitive for k: from the cache, or created (and cached when a slot is free). */
static th_status acquire(const mm_key *key, mm_entry **out) {
  mm_key kt = *key;
  kt.nthr = omp_get_max_threads();
  const mm_key *k = &kt;
  mtx_lock(&cache_mtx);
  mm_entry *victim = NULL;
  for (int i = 0; i < CACHE_SIZE; i++) {
    mm_entry *e = &cache[i];
    if (e->prim && !memcmp(&e->key, k, sizeof *k)) {
      e->inuse++;
      e->tick = ++cache_tick;
      mtx_unlock(&cache_mtx);
      *out = e;
      return TH_OK;
    }
    if (!e->inuse && (!victim || !e->prim || (victim->prim && e->tick < victim->tick))) victim = e;
  }
  mm_entry tmp = {0};
  dnnl_status_t s = create(k, &tmp);
  if (s != dnnl_success) {
    mtx_unlock(&cache_mtx);
    return dnnl_err("matmul primitive creation", s);
  }
  tmp.key = *k;
  tmp.inuse = 1;
  tmp.tick = ++cache_tick;
  if (victim) {
    if (victim->prim) dnnl_primitive_destroy(victim->prim);
    tmp.cached = true;
    *victim = tmp;
    *out = victim;
  } else {
    *out = th_malloc(sizeof tmp);
    if (*out) **out = tmp;
  }
  mtx_unlock(&cache_mtx);
  if (!*out) {
    dnnl_primitive_destroy(tmp.prim);
    return th_error(TH_ERR_NOMEM, "out of memory caching a oneDNN primitive");
  }
  return TH_OK;
}

static void release(mm_entry *e) {
  if (!e->cached) {
    dnnl_primitive_destroy(e->prim);
    th_free(e);
    return;
  }
  mtx_lock(&cache_mtx);
  e->inuse--;
  mtx_unlock(&cache_mtx);
}

/* post_src[i]: the operand of binary post-op i (NULL for the others, or no post-ops at all) */
static th_status execute(mm_entry *e, void *src, void *wei, void *bias, void *dst, void *const *post_src) {
  void *data[4] = {src, wei, bias, dst};
  static const int which[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  dnnl_exec_arg_t args[4 + TH_BLAS_EPI_MAX];
  int n = 0;
  dnnl_status_t s = dnnl_success;
  dnnl_stream_t stream = NULL;
  for (int i = 0; i < 4 && s == dnnl_success; i++) {
    if (i == 2 && !e->key.has_bias) continue;
    args[n].arg = which[i];
    s = dnnl_memory_create(&args[n].memory, &e->md[i], engine, data[i]);
    if (s == dnnl_success) n++;
  }
  for (int i = 0; post_src && i < e->key.npost && s == dnnl_success; i++) {
    if (!post_src[i]) continue;
    dnnl_memory_desc_t md;
    md_init(&md, e->key.ndims, e->key.post[i][2], &e->key.dst);
    args[n].arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1;
    s = dnnl_memory_create(&args[n].memory, &md, engine, post_src[i]);
    if (s == dnnl_success) n++;
  }
  if (s == dnnl_success) s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
  if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, stream, n, args);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  if (stream) dnnl_stream_destroy(stream);
  for (int i = 0; i < n; i++) dnnl_memory_destroy(args[i].memory);
  return s == dnnl_success ? TH_OK : dnnl_err("matmul", s);
}

/* ---- one problem ------------------------------------------------------------------------------------ */

typedef struct {
  th_tensor *t; /* the tensor (borrowed), or a contiguous/widened copy (owned) */
  bool owned;
  view_kind kind;
  layout l;
} operand;

static void op_drop(operand *o) {
  if (o->owned) th_tensor_release(o->t);
  o->owned = false;
}

/* Describes o, copying its tensor to a contiguous one first if its layout is not one oneDNN takes. */
static th_status op_prepare(operand *o) {
  if (describe(o->t, o->kind, &o->l)) return TH_OK;
  th_tensor *c = th_tensor_contiguous_copy(o->t);
  if (!c) return th_last_status();
  op_drop(o);
  o->t = c;
  o->owned = true;
  TH_ASSERT(describe(o->t, o->kind, &o->l));
  return TH_OK;
}

/* dst = f32 of the bf16 elements of an ndim-D strided view (shape, strides in elements), gathered so
 * that the source's unit-stride dim is innermost in dst: dst is dense in the view's order, except
 * that with `swap` the last two dims are stored swapped (dst is then the dense [..., c, r] buffer of
 * a column-major view). Rows of the innermost dim are spread over the OpenMP team. */
static void gather_f32(float *dst, const uint16_t *src, int ndim, const int64_t *shape, const int64_t *strides,
                       bool swap) {
  int64_t sh[TH_MAX_DIMS], st[TH_MAX_DIMS];
  for (int i = 0; i < ndim; i++) sh[i] = shape[i], st[i] = strides[i];
  if (swap) {
    int64_t t = sh[ndim - 1];
    sh[ndim - 1] = sh[ndim - 2], sh[ndim - 2] = t;
    t = st[ndim - 1];
    st[ndim - 1] = st[ndim - 2], st[ndim - 2] = t;
  }
  const int64_t inner = ndim ? sh[ndim - 1] : 1, is = ndim ? st[ndim - 1] : 0;
  int64_t rows = 1;
  for (int i = 0; i < ndim - 1; i++) rows *= sh[i];
#pragma omp parallel for schedule(static) if (rows * inner > 65536)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = 0, q = r;
    for (int i = ndim - 2; i >= 0; i--) {
      off += (q % sh[i]) * st[i];
      q /= sh[i];
    }
    const uint16_t *s = src + off;
    float *d = dst + r * inner;
    if (is == 1) {
#pragma omp simd
      for (int64_t j = 0; j < inner; j++) d[j] = th_sc_bf16_to_f32(s[j]);
    } else {
      for (int64_t j = 0; j < inner; j++) d[j] = th_sc_bf16_to_f32(s[j * is]);
    }
  }
}

/* bf16 (strided, layout l) -> a new f32 (B, r, c) tensor. When the layout is (nearly) dense, the
 * storage it spans is widened in one linear pass and the layout kept (a transposed weight stays
 * transposed: no strided gather); otherwise the elements are gathered into a dense tensor, in the
 * source's orientation (column-major stays column-major, so both sides read and write in order). */
static th_tensor *widen(const th_tensor *t, const layout *l) {
  const int64_t *d = l->dims, *st = l->strides;
  int64_t numel = d[0] * d[1] * d[2];
  int64_t span = (d[0] - 1) * st[0] + (d[1] - 1) * st[1] + (d[2] - 1) * st[2] + 1;
  const uint16_t *s = th_tensor_data(t);
  if (span <= numel + numel / 4) {
    th_tensor *flat = th_rt_pool_empty(TH_F32, 1, &span);
    if (!flat) return NULL;
    float *f = th_tensor_data(flat);
#pragma omp parallel for simd schedule(static) if (span > 65536)
    for (int64_t i = 0; i < span; i++) f[i] = th_sc_bf16_to_f32(s[i]);
    th_tensor *v = th_tensor_view(flat, 3, d, st, 0);
    th_tensor_release(flat);
    return v;
  }
  const bool swap = st[2] != 1 && st[1] == 1;
  th_tensor *w = th_rt_pool_empty(TH_F32, 1, &numel);
  if (!w) return NULL;
  gather_f32(th_tensor_data(w), s, 3, d, st, swap);
  const int64_t ds[3] = {d[1] * d[2], swap ? 1 : d[2], swap ? d[1] : 1};
  th_tensor *v = th_tensor_view(w, 3, d, ds, 0);
  th_tensor_release(w);
  return v;
}

/* A bf16 tensor whose layout oneDNN does not take (batch dims that do not collapse: a head-split
 * view of the fused qkv output) -> a new f32 tensor of the same shape, gathered in one pass (no bf16
 * contiguous copy first). A matrix whose second-to-last dim has unit stride (a transposed view) is
 * stored column-major; linear's input and vectors are stored row-major (their view kinds need it). */
static th_tensor *widen_nd(const th_tensor *t, view_kind kind) {
  const int nd = t->ndim;
  const bool swap =
    kind == V_MAT && nd >= 2 && t->strides[nd - 1] != 1 && t->strides[nd - 2] == 1 && t->shape[nd - 2] > 1;
  const int64_t numel = th_tensor_numel(t);
  th_tensor *w = th_rt_pool_empty(TH_F32, 1, &numel);
  if (!w) return NULL;
  gather_f32(th_tensor_data(w), th_tensor_data(t), nd, t->shape, t->strides, swap);
  int64_t ds[TH_MAX_DIMS], acc = 1;
  for (int i = nd - 1; i >= 0; i--) {
    ds[i] = acc;
    acc *= t->shape[i];
  }
  if (swap) { /* storage [..., c, r]: element (..., i, j) at i + j * r */
    ds[nd - 2] = 1;
    ds[nd - 1] = t->shape[nd - 2];
  }
  th_tensor *v = th_tensor_view(w, nd, t->shape, ds, 0);
  th_tensor_release(w);
  return v;
}

static void narrow(const float *s, uint16_t *d, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) d[i] = th_sc_f32_to_bf16(s[i]);
}

static th_status run(th_dtype dt, operand *src, operand *wei, operand *bias, th_tensor *out);

/* A GEMM epilogue for the primitive: post-op rows as mm_key's (alg, alpha's bits, binary operand's
 * dnnl dtype), each binary post-op's operand, and dst's dtype. */
typedef struct {
  int n;
  int64_t rows[TH_BLAS_EPI_MAX][3];
  int op_of[TH_BLAS_EPI_MAX]; /* the epilogue op of each row */
  void *data[TH_BLAS_EPI_MAX];
  int64_t dst_dt;
} mm_post;

static th_status run_post(th_dtype dt, operand *src, operand *wei, operand *bias, const mm_post *post, th_tensor *out);

/* oneDNN's post-ops for k's rows: eltwise (alpha from the row's bits, beta 0) or a binary add whose
 * operand is laid out as dst (a dense tensor of the output's shape). */
static dnnl_status_t post_attr(const mm_key *k, dnnl_primitive_attr_t *attr) {
  dnnl_post_ops_t ops;
  dnnl_status_t s = dnnl_post_ops_create(&ops);
  if (s != dnnl_success) return s;
  for (int i = 0; i < k->npost && s == dnnl_success; i++) {
    const dnnl_alg_kind_t alg = (dnnl_alg_kind_t)k->post[i][0];
    if (alg == dnnl_binary_add) {
      dnnl_memory_desc_t md;
      md_init(&md, k->ndims, k->post[i][2], &k->dst);
      s = dnnl_post_ops_append_binary(ops, alg, &md);
    } else {
      uint32_t bits = (uint32_t)k->post[i][1];
      float alpha;
      memcpy(&alpha, &bits, sizeof alpha);
      s = dnnl_post_ops_append_eltwise(ops, 1.0f, alg, alpha, 0.0f);
    }
  }
  if (s == dnnl_success && (s = dnnl_primitive_attr_create(attr)) == dnnl_success &&
      (s = dnnl_primitive_attr_set_post_ops(*attr, ops)) != dnnl_success) {
    dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
  }
  dnnl_post_ops_destroy(ops);
  return s;
}

/* The epilogue's part of the cache key: dst's dtype (0 when it is the operands') and the rows. */
static void post_key(mm_key *k, const mm_post *p) {
  k->dst_dt = p->dst_dt == k->dt ? 0 : p->dst_dt;
  k->npost = p->n;
  memcpy(k->post, p->rows, sizeof k->post);
}

/* bf16 on a CPU without a bf16 matmul: widen to f32, multiply, round back to bf16. An operand oneDNN
 * takes as it is is widened through its 3-D layout; any other is gathered straight from its strided
 * bf16 view into f32 (one pass, where a contiguous bf16 copy and then a widening would be two). */
static th_status run_widened(operand *src, operand *wei, operand *bias, th_tensor *out) {
  operand *ops[3] = {src, wei, bias};
  for (int i = 0; i < 3; i++) {
    if (!ops[i]) continue;
    const bool described = describe(ops[i]->t, ops[i]->kind, &ops[i]->l);
    th_tensor *w = described ? widen(ops[i]->t, &ops[i]->l) : widen_nd(ops[i]->t, ops[i]->kind);
    if (!w) return th_last_status();
    op_drop(ops[i]);
    ops[i]->t = w;
    ops[i]->owned = true;
    if (described) ops[i]->kind = V_MAT;
  }
  th_tensor *tmp = th_rt_pool_empty(TH_F32, out->ndim, out->shape);
  if (!tmp) return th_last_status();
  th_status st = run(TH_F32, src, wei, bias, tmp);
  if (st == TH_OK) narrow(th_tensor_data(tmp), th_tensor_data(out), th_tensor_numel(out));
  th_tensor_release(tmp);
  return st;
}

/* dst (B, M, N) = src @ wei [+ bias]; out is contiguous, so dense (B, M, N) describes it in every
 * case (1-D operands make M or N 1). Owned copies in the operands are released by the caller. */
static th_status run(th_dtype dt, operand *src, operand *wei, operand *bias, th_tensor *out) {
  return run_post(dt, src, wei, bias, NULL, out);
}

static th_status run_post(th_dtype dt, operand *src, operand *wei, operand *bias, const mm_post *post, th_tensor *out) {
  if (dt == TH_BF16 && !bf16_native) {
    if (post) return th_error(TH_ERR_RUNTIME, "a bf16 GEMM epilogue needs oneDNN's bf16 matmul");
    return run_widened(src, wei, bias, out);
  }
  TH_TRY(op_prepare(src));
  TH_TRY(op_prepare(wei));
  if (bias) TH_TRY(op_prepare(bias));
  mm_key k;
  memset(&k, 0, sizeof k); /* padding too: the key is compared with memcmp */
  k.dt = dt == TH_BF16 ? dnnl_bf16 : dnnl_f32;
  k.src = src->l;
  k.wei = wei->l;
  k.has_bias = bias != NULL;
  if (bias) k.bias = bias->l;
  int64_t B = src->l.dims[0] > wei->l.dims[0] ? src->l.dims[0] : wei->l.dims[0];
  k.dst = dense(B, src->l.dims[1], wei->l.dims[2]);
  k.ndims = src->l.dims[0] == 1 && wei->l.dims[0] == 1 ? 2 : 3;
  if (post) post_key(&k, post);
  mm_entry *e;
  th_status st = acquire(&k, &e);
  if (st != TH_OK) {
    /* a layout oneDNN refused (an unusual stride; a batch stride smaller than the matrix, as in an
     * overlapping as_strided view, also once widened from bf16): retry on contiguous copies of the
     * operands that are not contiguous already, which oneDNN always takes (so this recurses once) */
    operand *ops[3] = {src, wei, bias};
    bool copied = false;
    for (int i = 0; i < 3; i++) {
      if (!ops[i] || th_tensor_is_contiguous(ops[i]->t)) continue;
      th_tensor *c = th_tensor_contiguous_copy(ops[i]->t);
      if (!c) return th_last_status();
      op_drop(ops[i]);
      ops[i]->t = c;
      ops[i]->owned = true;
      TH_ASSERT(describe(c, ops[i]->kind, &ops[i]->l));
      copied = true;
    }
    if (copied) return run_post(dt, src, wei, bias, post, out);
  }
  TH_TRY(st);
  st = execute(e, th_tensor_data(src->t), th_tensor_data(wei->t), bias ? th_tensor_data(bias->t) : NULL,
               th_tensor_data(out), post ? post->data : NULL);
  release(e);
  return st;
}

/* ---- kernels ------------------------------------------------------------------------------------ */

static bool init_ok(void) {
  call_once(&init_once, init);
  return engine != NULL;
}

bool th_blas_has_native_bf16(void) { return init_ok() && bf16_native; }

/* Zero output, plus the bias broadcast over rows: the K == 0 case, which oneDNN does not take. */
static void fill_empty_k(th_tensor *out, const th_tensor *bias) {
  int64_t n = th_tensor_numel(out);
  memset(th_tensor_data(out), 0, (size_t)n * th_dtype_size(out->dtype));
  if (!bias) return;
  int64_t N = bias->shape[0], bs = bias->strides[0];
  size_t es = th_dtype_size(out->dtype);
  char *d = th_tensor_data(out);
  const char *b = th_tensor_data(bias);
  for (int64_t i = 0; i < n; i++) memcpy(d + (size_t)i * es, b + (size_t)((i % N) * bs) * es, es);
}

static th_status finish(th_status st, operand *a, operand *b, operand *c) {
  op_drop(a);
  op_drop(b);
  if (c) op_drop(c);
  return st;
}

/* out = x @ y for batched operands (ndim >= 3, equal ranks, out contiguous of the broadcast shape).
 * Operands whose batch dims collapse into one stride are one oneDNN call. When one does not (the heads
 * of an attention projection split from one fused qkv tensor: [B, H, T, D] with strides (T * 3C, D,
 * 3C, 1)), the leading dim is split into one call per index on views, recursively, instead of copying
 * the whole operand to a contiguous buffer first (a serial strided copy per operand and call), when
 * that makes at most 256 calls of at least 2^20 multiply-adds each. bf16 without a native bf16 GEMM
 * takes the widening path, which gathers any strides in one pass anyway. */
static th_status matmul_batched(th_tensor *x, th_tensor *y, th_tensor *out) {
  operand a = {x, false, V_MAT, {{0}, {0}}};
  operand w = {y, false, V_MAT, {{0}, {0}}};
  int64_t b, bs, n0 = out->ndim ? out->shape[0] : 1;
  /* Worth it only for a few large calls: oneDNN costs a few microseconds per call, so [20000, 2, 4, 4]
   * is faster as one copy and one call; 2^20 multiply-adds per call outweigh that cost many times. */
  int64_t macs = n0 ? th_tensor_numel(out) / n0 * x->shape[x->ndim - 1] : 0;
  bool split = x->ndim >= 4 && x->ndim == y->ndim && x->ndim == out->ndim && (x->dtype != TH_BF16 || bf16_native) &&
               (!collapse(x, 0, x->ndim - 2, &b, &bs) || !collapse(y, 0, y->ndim - 2, &b, &bs)) && n0 <= 256 &&
               macs >= (int64_t)1 << 20;
  if (!split) return finish(run(x->dtype, &a, &w, NULL, out), &a, &w, NULL);
  th_status st = TH_OK;
  for (int64_t i = 0; i < out->shape[0] && st == TH_OK; i++) {
    th_tensor *xs =
      th_tensor_view(x, x->ndim - 1, x->shape + 1, x->strides + 1, x->shape[0] > 1 ? i * x->strides[0] : 0);
    th_tensor *ys =
      th_tensor_view(y, y->ndim - 1, y->shape + 1, y->strides + 1, y->shape[0] > 1 ? i * y->strides[0] : 0);
    th_tensor *os = th_tensor_view(out, out->ndim - 1, out->shape + 1, out->strides + 1, i * out->strides[0]);
    st = xs && ys && os ? matmul_batched(xs, ys, os) : th_last_status();
    th_tensor_release(xs);
    th_tensor_release(ys);
    th_tensor_release(os);
  }
  return st;
}

static th_status matmul_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *x = th_rt_tensor(env, &b->args[0]), *y = th_rt_tensor(env, &b->args[1]);
  if (!x || !y || b->out.kind != TH_ARG_VALUE) return th_error(TH_ERR_RUNTIME, "expected two tensor operands");
  if (!init_ok()) return th_error(TH_ERR_RUNTIME, "the oneDNN CPU engine could not be created");
  th_tensor *out = th_rt_alloc_output(env, b->out.u.value);
  if (!out) return th_last_status();
  if (th_tensor_numel(out) == 0) return TH_OK;
  int64_t K = x->shape[x->ndim - 1];
  if (K == 0) {
    fill_empty_k(out, NULL);
    return TH_OK;
  }
  if (x->ndim >= 3 && y->ndim >= 3) return matmul_batched(x, y, out);
  operand a = {x, false, x->ndim == 1 ? V_ROWVEC : V_MAT, {{0}, {0}}};
  operand w = {y, false, y->ndim == 1 ? V_COLVEC : V_MAT, {{0}, {0}}};
  return finish(run(x->dtype, &a, &w, NULL, out), &a, &w, NULL);
}

static th_status linear_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *x = th_rt_tensor(env, &b->args[0]), *y = th_rt_tensor(env, &b->args[1]);
  th_tensor *z = th_rt_tensor(env, &b->args[2]);
  if (!x || !y || b->out.kind != TH_ARG_VALUE) return th_error(TH_ERR_RUNTIME, "expected tensor operands");
  if (!init_ok()) return th_error(TH_ERR_RUNTIME, "the oneDNN CPU engine could not be created");
  th_tensor *out = th_rt_alloc_output(env, b->out.u.value);
  if (!out) return th_last_status();
  if (th_tensor_numel(out) == 0) return TH_OK;
  if (y->shape[1] == 0) {
    fill_empty_k(out, z);
    return TH_OK;
  }
  operand a = {x, false, x->ndim == 1 ? V_ROWVEC : V_ROWS, {{0}, {0}}};
  operand w = {y, false, V_WT, {{0}, {0}}};
  operand c = {z, false, V_ROWVEC, {{0}, {0}}};
  return finish(run(x->dtype, &a, &w, z ? &c : NULL, out), &a, &w, z ? &c : NULL);
}

/* ---- prims.scaled_mm: decode to float32, then oneDNN's sgemm ----------------------------------------- */

static float fp8_tab[2][256]; /* e4m3fn, e5m2: the exact value of every code */
static once_flag fp8_once = ONCE_FLAG_INIT;

static void fp8_tables(void) {
  for (int i = 0; i < 256; i++) {
    fp8_tab[0][i] = th_sc_e4m3fn_to_f32((uint8_t)i);
    fp8_tab[1][i] = th_sc_e5m2_to_f32((uint8_t)i);
  }
}

/* dst[r * cols + c] = decode(src[r * rs + c * cs]) for an r x c view of fp8 codes (element strides). */
static void decode_rows(float *dst, const uint8_t *src, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                        const float *tab) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = src + r * rs;
    float *d = dst + r * cols;
    if (cs == 1) {
      for (int64_t c = 0; c < cols; c++) d[c] = tab[row[c]];
    } else {
      for (int64_t c = 0; c < cols; c++) d[c] = tab[row[c * cs]];
    }
  }
}

static th_status scaled_mm_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *x = th_rt_tensor(env, &b->args[0]), *y = th_rt_tensor(env, &b->args[1]);
  th_tensor *sx = th_rt_tensor(env, &b->args[2]), *sy = th_rt_tensor(env, &b->args[3]);
  th_tensor *bias = th_rt_tensor(env, &b->args[4]);
  if (!x || !y || !sx || !sy || b->out.kind != TH_ARG_VALUE || !th_dtype_is_fp8(x->dtype) ||
      !th_dtype_is_fp8(y->dtype) || sx->dtype != TH_F32 || sy->dtype != TH_F32)
    return th_error(TH_ERR_RUNTIME, "expected fp8 operands and float32 scales");
  call_once(&fp8_once, fp8_tables);
  th_tensor *out = th_rt_alloc_output(env, b->out.u.value);
  if (!out) return th_last_status();
  const int64_t M = out->shape[0], N = out->shape[1], K = x->shape[1];
  if (M * N == 0) return TH_OK;
  const float alpha = th_sc_ld_f32(th_tensor_data(sx)) * th_sc_ld_f32(th_tensor_data(sy));
  const float *ta = fp8_tab[x->dtype == TH_F8E5M2], *tb = fp8_tab[y->dtype == TH_F8E5M2];
  /* Step 1: float32 operands; b stays column-major (as w.t() is) when its columns are contiguous */
  const bool bt = y->strides[0] == 1 && y->strides[1] != 1;
  float *a32 = th_malloc(sizeof(float) * (size_t)(M * K > 0 ? M * K : 1));
  float *b32 = th_malloc(sizeof(float) * (size_t)(K * N > 0 ? K * N : 1));
  float *c = out->dtype == TH_F32 ? th_tensor_data(out) : th_malloc(sizeof(float) * (size_t)(M * N));
  th_status st = TH_OK;
  if (!a32 || !b32 || !c) {
    st = th_error(TH_ERR_NOMEM, "out of memory decoding fp8 operands");
    goto done;
  }
  decode_rows(a32, th_tensor_data(x), M, K, x->strides[0], x->strides[1], ta);
  if (bt)
    decode_rows(b32, th_tensor_data(y), N, K, y->strides[1], y->strides[0], tb); /* [N, K] */
  else
    decode_rows(b32, th_tensor_data(y), K, N, y->strides[0], y->strides[1], tb); /* [K, N] */
  /* Step 2: c = alpha * a @ b (float32 accumulation) */
  if (K == 0) {
    memset(c, 0, sizeof(float) * (size_t)(M * N));
  } else {
    dnnl_status_t ds = dnnl_sgemm('N', bt ? 'T' : 'N', M, N, K, alpha, a32, K, b32, bt ? K : N, 0.0f, c, N);
    if (ds != dnnl_success) {
      st = dnnl_err("sgemm", ds);
      goto done;
    }
  }
  /* Step 3: bias and the output dtype, in one pass */
  if (bias || c != th_tensor_data(out)) {
    const char *bd = bias ? th_tensor_data(bias) : NULL;
    const int64_t bstride = bias ? bias->strides[0] * (int64_t)th_dtype_size(bias->dtype) : 0;
    const th_dtype odt = out->dtype, bdt = bias ? bias->dtype : TH_F32;
    const size_t osz = th_dtype_size(odt);
    char *o = th_tensor_data(out);
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float v = c[i * N + j];
        if (bd) v += th_load_f32(bd + j * bstride, bdt);
        if (odt == TH_F32)
          c[i * N + j] = v;
        else
          th_store_f32(o + (size_t)(i * N + j) * osz, odt, v);
      }
  }
done:
  th_free(a32);
  th_free(b32);
  if (c && c != th_tensor_data(out)) th_free(c);
  return st;
}

/* ---- checkers ---------------------------------------------------------------------------------------- */

static const th_value *tensor_arg(const th_bsym *b, int i) {
  if (i >= b->nargs || b->args[i].kind != TH_ARG_VALUE || !b->args[i].u.value->is_tensor) return NULL;
  return b->args[i].u.value;
}

static bool dtype_ok(th_dtype dt) { return dt == TH_F32 || dt == TH_BF16; }

static bool matmul_checker(const th_bsym *b) {
  const th_value *x = tensor_arg(b, 0), *y = tensor_arg(b, 1);
  if (!x || !y || !dtype_ok(x->dtype) || y->dtype != x->dtype || x->ndim < 1 || y->ndim < 1) return false;
  if (x->ndim >= 2 && y->ndim >= 2) { /* identical batch dims (the prim's rule; no broadcasting) */
    if (x->ndim != y->ndim) return false;
    for (int i = 0; i < x->ndim - 2; i++)
      if (x->shape[i] != y->shape[i]) return false;
  }
  return true;
}

static bool linear_checker(const th_bsym *b) {
  const th_value *x = tensor_arg(b, 0), *y = tensor_arg(b, 1), *z = tensor_arg(b, 2);
  if (!x || !y || !dtype_ok(x->dtype) || y->dtype != x->dtype || x->ndim < 1 || y->ndim != 2) return false;
  if (b->nargs < 3) return false;
  if (b->args[2].kind == TH_ARG_NONE) return true;
  return z && z->dtype == x->dtype && z->ndim == 1;
}

/* ---- GEMM epilogues ------------------------------------------------------------------------------------
 * A bsym of a dynamic symbol (`linear_gelu0`), claimed by "blas", whose subsymbols are a GEMM (prims or
 * ltorch linear/matmul) and the chain of epilogue ops the execution transform folded into it
 * (passes.c); its arguments are the GEMM's operands and the residuals. The kernel reads the chain from
 * the subsymbols and runs one oneDNN matmul with the ops as post-ops: GELU (tanh, erf), SiLU (swish,
 * alpha 1) and ReLU as eltwise post-ops, a scale as eltwise linear (alpha s, beta 0), a residual add as
 * a binary add of a tensor laid out as dst, and a conversion as dst's dtype. oneDNN computes the chain
 * on the float32 accumulator and rounds once, to dst's dtype; the unfused bf16 path rounds the GEMM's
 * result to bf16 (and each op's) first, so bf16 epilogues agree with it to about one bf16 rounding. */

static bool gemm_is_linear(const th_bsym *g) {
  return g->sym->id == TH_OP_prims_linear || g->sym->id == TH_OP_ltorch_linear;
}

bool th_blas_epilogue_gemm(const th_bsym *g) {
  if (g->out.kind != TH_ARG_VALUE || !g->out.u.value->is_tensor) return false;
  const th_value *x = tensor_arg(g, 0), *y = tensor_arg(g, 1), *o = g->out.u.value;
  if (!x || !y || o->dtype != x->dtype || (x->dtype == TH_BF16 && !th_blas_has_native_bf16())) return false;
  switch (g->sym->id) {
    case TH_OP_prims_linear:
    case TH_OP_ltorch_linear:
      if (g->nargs != 3 || !linear_checker(g)) return false;
      return y->shape[1] > 0;
    case TH_OP_prims_matmul:
      if (g->nargs != 2 || !matmul_checker(g) || (x->ndim >= 3 && y->ndim >= 3)) return false;
      return x->shape[x->ndim - 1] > 0;
    case TH_OP_ltorch_matmul:
      if (g->nargs != 2 || x->ndim != 2 || y->ndim != 2 || !matmul_checker(g)) return false;
      return x->shape[1] > 0;
    default: return false;
  }
}

static bool same_shape(const th_value *a, const th_value *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

static bool arg_is(const th_bsym *e, int i, const th_value *v) {
  return i < e->nargs && e->args[i].kind == TH_ARG_VALUE && e->args[i].u.value == v;
}

static bool number_arg(const th_arg *a, double *f) {
  if (a->kind == TH_ARG_INT)
    *f = (double)a->u.i;
  else if (a->kind == TH_ARG_FLOAT)
    *f = a->u.f;
  else
    return false;
  return true;
}

bool th_blas_epilogue_op(const th_bsym *e, const th_value *v, th_blas_epi *op) {
  if (e->out.kind != TH_ARG_VALUE || !e->out.u.value->is_tensor || e->nkwargs || !v->is_tensor) return false;
  const th_value *o = e->out.u.value;
  if (!dtype_ok(o->dtype) || !dtype_ok(v->dtype) || !same_shape(o, v) || o->device.type != v->device.type) return false;
  memset(op, 0, sizeof *op);
  op->dtype = o->dtype;
  const bool first = arg_is(e, 0, v), keeps = o->dtype == v->dtype;
  switch (e->sym->id) {
    case TH_OP_ltorch_gelu: {
      const char *ap = e->nargs == 1 ? "none" : e->nargs == 2 && e->args[1].kind == TH_ARG_STR ? e->args[1].u.s : NULL;
      if (!first || !keeps || !ap) return false;
      if (!strcmp(ap, "tanh"))
        op->kind = TH_BLAS_EPI_GELU_TANH;
      else if (!strcmp(ap, "none"))
        op->kind = TH_BLAS_EPI_GELU_ERF;
      else
        return false;
      return true;
    }
    case TH_OP_ltorch_silu:
    case TH_OP_ltorch_relu:
      if (!first || !keeps || e->nargs > 2 || (e->nargs == 2 && (e->args[1].kind != TH_ARG_BOOL || e->args[1].u.b)))
        return false;
      op->kind = e->sym->id == TH_OP_ltorch_silu ? TH_BLAS_EPI_SILU : TH_BLAS_EPI_RELU;
      return true;
    case TH_OP_ltorch_add:
    case TH_OP_prims_add: {
      if (!keeps || e->nargs < 2 || e->nargs > 3 || (e->nargs == 3 && e->args[2].kind != TH_ARG_NONE)) return false;
      const int other = first ? 1 : arg_is(e, 1, v) ? 0 : -1;
      if (other < 0 || arg_is(e, other, v) || e->args[other].kind != TH_ARG_VALUE) return false;
      const th_value *r = e->args[other].u.value;
      if (!r->is_tensor || r->dtype != o->dtype || !same_shape(r, o) || r->device.type != o->device.type) return false;
      op->kind = TH_BLAS_EPI_ADD;
      op->operand = &e->args[other];
      return true;
    }
    case TH_OP_ltorch_mul:
    case TH_OP_prims_mul: {
      double f;
      if (!keeps || e->nargs != 2) return false;
      const int other = first ? 1 : arg_is(e, 1, v) ? 0 : -1;
      if (other < 0 || !number_arg(&e->args[other], &f)) return false;
      op->kind = TH_BLAS_EPI_SCALE;
      op->alpha = (float)f; /* the scalar is cast to the op's (float32 compute) dtype, as eager does */
      return true;
    }
    case TH_OP_prims_convert_element_type:
      if (!first || e->nargs != 2 || e->args[1].kind != TH_ARG_DTYPE || e->args[1].u.dtype != o->dtype) return false;
      op->kind = TH_BLAS_EPI_CONVERT;
      return true;
    case TH_OP_ltorch_to:
    case TH_OP_ltorch_float:
    case TH_OP_ltorch_bfloat16:
      if (!first) return false;
      op->kind = TH_BLAS_EPI_CONVERT;
      return true;
    default: return false;
  }
}

static int64_t dnnl_dt(th_dtype d) { return d == TH_BF16 ? dnnl_bf16 : dnnl_f32; }

/* mm_post's rows for ops[0..n) and an output of out_dt (binary operands' data left to the caller) */
static void post_rows(const th_blas_epi *ops, int n, th_dtype out_dt, mm_post *p) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < n; i++) {
    int64_t alg = 0, dt1 = 0;
    float alpha = 0.0f;
    switch (ops[i].kind) {
      case TH_BLAS_EPI_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
      case TH_BLAS_EPI_GELU_ERF: alg = dnnl_eltwise_gelu_erf; break;
      case TH_BLAS_EPI_SILU: alg = dnnl_eltwise_swish, alpha = 1.0f; break;
      case TH_BLAS_EPI_RELU: alg = dnnl_eltwise_relu; break;
      case TH_BLAS_EPI_ADD: alg = dnnl_binary_add, dt1 = dnnl_dt(ops[i].dtype); break;
      case TH_BLAS_EPI_SCALE: alg = dnnl_eltwise_linear, alpha = ops[i].alpha; break;
      case TH_BLAS_EPI_CONVERT: continue;
    }
    uint32_t bits;
    memcpy(&bits, &alpha, sizeof bits);
    p->rows[p->n][0] = alg;
    p->rows[p->n][1] = bits;
    p->rows[p->n][2] = dt1;
    p->op_of[p->n++] = i;
  }
  p->dst_dt = dnnl_dt(out_dt);
}

bool th_blas_epilogue_supported(const th_bsym *g, const th_blas_epi *ops, int n) {
  if (!init_ok() || n < 1 || n > TH_BLAS_EPI_MAX || !th_blas_epilogue_gemm(g)) return false;
  const th_value *x = tensor_arg(g, 0), *y = tensor_arg(g, 1);
  const bool lin = gemm_is_linear(g);
  int64_t K = x->shape[x->ndim - 1], N, numel = 1;
  for (int i = 0; i < x->ndim; i++) numel *= x->shape[i];
  layout w;
  if (lin) {
    N = y->shape[0];
    w = (layout){{1, K, N}, {0, 1, K}};
    normalize(&w);
  } else {
    N = y->ndim == 2 ? y->shape[1] : 1;
    w = dense(1, K, N);
  }
  mm_key k;
  memset(&k, 0, sizeof k);
  k.dt = dnnl_dt(x->dtype);
  k.ndims = 2;
  k.src = dense(1, numel / K, K);
  k.wei = w;
  k.has_bias = lin && tensor_arg(g, 2) != NULL;
  k.bias = dense(1, 1, N);
  k.dst = dense(1, numel / K, N);
  mm_post p;
  post_rows(ops, n, ops[n - 1].dtype, &p);
  post_key(&k, &p);
  mm_entry e = {0};
  if (create(&k, &e) != dnnl_success) return false; /* oneDNN 2.6: no f32 GEMM with a bf16 dst */
  dnnl_primitive_destroy(e.prim);
  return true;
}

static th_status epilogue_kernel(th_rt_env *env, const th_bsym *b) {
  if (b->nsubs < 2 || b->out.kind != TH_ARG_VALUE || b->subs[0]->out.kind != TH_ARG_VALUE)
    return th_error(TH_ERR_RUNTIME, "%s: expected a GEMM and its epilogue as subsymbols", b->sym->name);
  const th_bsym *g = b->subs[0];
  th_blas_epi ops[TH_BLAS_EPI_MAX];
  int n = 0;
  const th_value *v = g->out.u.value;
  for (int i = 1; i < b->nsubs; i++, n++) {
    if (n == TH_BLAS_EPI_MAX || !th_blas_epilogue_op(b->subs[i], v, &ops[n]))
      return th_error(TH_ERR_RUNTIME, "%s: subsymbol %d (%s) is not a GEMM epilogue op", b->sym->name, i,
                      b->subs[i]->sym->qualname);
    v = b->subs[i]->out.u.value;
  }
  const bool lin = gemm_is_linear(g);
  th_tensor *x = th_rt_tensor(env, &g->args[0]), *y = th_rt_tensor(env, &g->args[1]);
  th_tensor *z = lin ? th_rt_tensor(env, &g->args[2]) : NULL;
  if (!x || !y) return th_error(TH_ERR_RUNTIME, "%s: expected tensor operands", b->sym->name);
  if (!init_ok()) return th_error(TH_ERR_RUNTIME, "the oneDNN CPU engine could not be created");
  th_tensor *out = th_rt_alloc_output(env, b->out.u.value);
  if (!out) return th_last_status();
  if (th_tensor_numel(out) == 0) return TH_OK;
  mm_post p;
  post_rows(ops, n, out->dtype, &p);
  th_tensor *owned[TH_BLAS_EPI_MAX] = {0};
  th_status st = TH_OK;
  for (int r = 0; r < p.n && st == TH_OK; r++) {
    if (p.rows[r][0] != dnnl_binary_add) continue;
    th_tensor *t = th_rt_tensor(env, ops[p.op_of[r]].operand);
    if (!t) {
      st = th_error(TH_ERR_RUNTIME, "%s: expected a tensor residual", b->sym->name);
    } else if (!th_tensor_is_contiguous(t)) { /* laid out as dst */
      if (!(t = owned[r] = th_tensor_contiguous_copy(t))) st = th_last_status();
    }
    if (st == TH_OK) p.data[r] = th_tensor_data(t);
  }
  if (st == TH_OK) {
    operand a = {x, false, lin ? (x->ndim == 1 ? V_ROWVEC : V_ROWS) : (x->ndim == 1 ? V_ROWVEC : V_MAT), {{0}, {0}}};
    operand w = {y, false, lin ? V_WT : (y->ndim == 1 ? V_COLVEC : V_MAT), {{0}, {0}}};
    operand c = {z, false, V_ROWVEC, {{0}, {0}}};
    st = finish(run_post(x->dtype, &a, &w, z ? &c : NULL, &p, out), &a, &w, z ? &c : NULL);
  }
  for (int r = 0; r < TH_BLAS_EPI_MAX; r++) th_tensor_release(owned[r]);
  return st;
}

static const th_operator_impl blas_impls[] = {
  {TH_OP_prims_matmul, matmul_kernel, matmul_checker},
  {TH_OP_prims_linear, linear_kernel, linear_checker},
  {TH_OP_prims_scaled_mm, scaled_mm_kernel, NULL},
  {TH_OP_prims_convolution, th_blas_convolution_kernel, th_blas_convolution_checker}, /* blas_conv.c */
  {TH_OP_DYNAMIC, epilogue_kernel, NULL}, /* a GEMM with its epilogue, made by the execution transform */
};

const th_executor_desc th_blas_executor = {"blas", (int)(sizeof blas_impls / sizeof blas_impls[0]), blas_impls};
