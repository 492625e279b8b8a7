/* execute.c — programs (thunder/jit.h): building one from a claimed execution trace, and running it, with
 * the run-time environment kernels see (runtime/kernel.h). The compile pipeline that makes the
 * execution trace is the compile layer's (src/compile/pipeline.c).
 *
 * Build (th_program_build) lays the execution trace out flat:
 *   - every value met at the top level gets a slot; slot_of[value id] -> slot index (ids are dense
 *     within a compilation, so this is one array);
 *   - one step per claimed bsym (the `del` lines of Delete Last Used are utility bsyms, not steps): its
 *     kernel, the bsym, the output slots the kernel must fill, and the slots whose last use is this step
 *     (released right after it);
 *   - the output plan: the return value flattened in order (tuple/list/dict items), each entry a slot,
 *     a constant number (becomes a 0-dim tensor) or None (a NULL entry).
 * Run: check and bind the inputs, run the steps, release intermediates after their last use, collect
 * the outputs, release everything else. On a kernel error all slots are released and the error comes
 * back with the op's name in front ("prims.matmul: ..."). Nothing is looked up by name at run time.
 *
 * Random numbers: every random draw is Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11), keyed by a 64-bit seed, with a 64-bit block counter in the low words of the
 * 128-bit counter. A program's generator state is (seed, offset): the seed starts as the compile
 * options' seed and the offset at 0; get_and_update_rng_state hands the state to uniform_philox and
 * advances the offset by the blocks it will draw, prims.uniform draws blocks at the offset itself. The
 * offset carries over from run to run, so every run draws a fresh, reproducible stream; a host that
 * owns the randomness (the Python frontend, from torch's default generator) sets the state before each
 * run (th_program_set_rng_state). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "runtime/kernel.h"
#include "runtime/program.h"
#include "thunder/jit.h"

/* Exported for the unit test (known-answer vectors); the generator behind th_rt_random4. */
void th_rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

typedef struct th_step {
  th_rt_kernel_fn kernel;
  th_kernel_fn user; /* a user executor's kernel (kernel is then th_rt_user_kernel_adapter), else NULL */
  void *user_data;   /* its th_executor_add_impl_ex pointer, else NULL */
  const th_bsym *b;
  const void *data; /* the fuser's compiled region (th_rt_step_data), else NULL */
  int nouts;        /* outputs the kernel must bind */
  int32_t *outs;    /* their slots */
  int nrelease;     /* slots released after this step */
  int32_t *release;
} th_step;

typedef enum { OUT_SLOT, OUT_NUMBER, OUT_NONE } out_kind;

typedef struct th_out {
  out_kind kind;
  int32_t slot;   /* OUT_SLOT */
  th_dtype dtype; /* OUT_NUMBER: TH_BOOL / TH_I64 / TH_F64 */
  double f;
  int64_t i;
} th_out;

#define MAX_STAGES 8

struct th_program {
  const th_trace *trace; /* the execution trace: the last of traces */
  int ntraces;           /* the compile stages' traces (owned), in order, and their names */
  th_trace *traces[MAX_STAGES];
  const char *stage_names[MAX_STAGES];
  void *resources; /* what the steps' data point into (owned: the fuser's compiled regions), or NULL */
  void (*resources_free)(void *resources);
  th_arena *arena; /* everything below */
  int nsteps;
  th_step *steps;
  int nslots;
  th_tensor **slots; /* bindings of the current run; all NULL between runs */
  const th_value **slot_value;
  uint32_t nids;
  int32_t *slot_of;             /* value id -> slot, -1 if none */
  int ninputs;                  /* run-time inputs: one per tensor input, a collection input's leaves */
  const th_value **input_value; /* per run-time input: its value (NULL: an unused item printed `_`) */
  int32_t *input_slot;          /* per run-time input: its slot, -1 if none */
  bool *bind_input;             /* false: the input is never used (not even returned) */
  int nouts;
  th_out *outs;
  bool has_device_override;
  th_device device_override;
  uint64_t rng_seed; /* the generator state (seed, offset) */
  uint64_t rng_offset;
  atomic_bool running; /* a run is in progress (th_program_run refuses a second one) */
};

struct th_rt_env {
  th_program *p;
  th_tensor **slots;
  th_kernel_fn user; /* the running step's user kernel, if any */
  const void *data;  /* the running step's private data */
  void *user_data;   /* the running step's user pointer (th_kernel_user) */
};

const void *th_rt_step_data(th_rt_env *env) { return env->data; }

th_kernel_fn th_rt_user_kernel(th_rt_env *env) { return env->user; }

void *th_rt_user_data(th_rt_env *env) { return env->user_data; }

bool th_rt_device_override(th_rt_env *env, th_device *dev) {
  if (!env->p->has_device_override) return false;
  *dev = env->p->device_override;
  return true;
}

/* ---- a pool of large tensor buffers --------------------------------------------------------------
 * A fresh large allocation comes from mmap, and its first touch costs a page fault per 4 KiB (about
 * 1 us each: 16 ms for 64 MiB, docs/perf-anchors.md) — on every run, since free() unmaps it again.
 * Tensors of at least POOL_MIN_BYTES are therefore carved from blocks that go back to this pool when
 * their last reference goes (th_tensor_from_data's deleter), and the next allocation of a similar
 * size reuses the warm block: an intermediate released after its last use serves a later step of
 * the same run, and last run's outputs (once the caller released them) serve the next run. Shared by
 * all programs and threads (a mutex); it keeps at most POOL_SLOTS blocks and POOL_CAP_BYTES. */
#define POOL_MIN_BYTES ((size_t)256 << 10)
#define POOL_GRAIN ((size_t)64 << 10)
#define POOL_SLOTS 32
#define POOL_CAP_BYTES ((size_t)1 << 30)

typedef struct pool_block {
  size_t size; /* usable bytes at data */
  void *data;  /* 64-byte aligned, inside this allocation */
} pool_block;

static once_flag pool_once = ONCE_FLAG_INIT;
static struct {
  bool ok;
  mtx_t mtx;
  pool_block *free[POOL_SLOTS]; /* oldest first */
  int n;
  size_t bytes;
} pool;

static void pool_init(void) { pool.ok = mtx_init(&pool.mtx, mtx_plain) == thrd_success; }

static void pool_put(void *ctx) {
  pool_block *b = ctx;
  if (b->size > POOL_CAP_BYTES / 4) {
    th_free(b);
    return;
  }
  pool_block *evict[POOL_SLOTS];
  int nevict = 0;
  mtx_lock(&pool.mtx);
  while (pool.n > 0 && (pool.n == POOL_SLOTS || pool.bytes + b->size > POOL_CAP_BYTES)) {
    evict[nevict++] = pool.free[0];
    pool.bytes -= pool.free[0]->size;
    memmove(pool.free, pool.free + 1, sizeof(pool_block *) * (size_t)--pool.n);
  }
  pool.free[pool.n++] = b;
  pool.bytes += b->size;
  mtx_unlock(&pool.mtx);
  for (int i = 0; i < nevict; i++) th_free(evict[i]);
}

th_tensor *th_rt_pool_empty(th_dtype dtype, int ndim, const int64_t *shape) {
  int64_t numel = 1;
  bool ok = dtype < TH_DTYPE_COUNT && ndim >= 0 && ndim <= TH_MAX_DIMS;
  for (int i = 0; ok && i < ndim; i++) {
    ok = shape[i] >= 0 && (shape[i] == 0 || numel <= (INT64_MAX >> 4) / shape[i]);
    numel *= ok ? shape[i] : 1;
  }
  size_t need = ok ? (size_t)numel * th_dtype_size(dtype) : 0;
  call_once(&pool_once, pool_init);
  if (!ok || need < POOL_MIN_BYTES || need > POOL_CAP_BYTES / 4 || !pool.ok)
    return th_tensor_empty(dtype, ndim, shape); /* validates, and small ones are cheap anyway */
  need = (need + POOL_GRAIN - 1) / POOL_GRAIN * POOL_GRAIN;
  pool_block *b = NULL;
  mtx_lock(&pool.mtx);
  int best = -1;
  for (int i = 0; i < pool.n; i++) /* best fit within 1/8; of equals the newest (warmest in cache) */
    if (pool.free[i]->size >= need && pool.free[i]->size - need <= need / 8 &&
        (best < 0 || pool.free[i]->size <= pool.free[best]->size))
      best = i;
  if (best >= 0) {
    b = pool.free[best];
    pool.bytes -= b->size;
    memmove(pool.free + best, pool.free + best + 1, sizeof(pool_block *) * (size_t)(--pool.n - best));
  }
  mtx_unlock(&pool.mtx);
  if (!b) {
    char *raw = th_malloc(sizeof(pool_block) + 63 + need);
    if (!raw) {
      th_error(TH_ERR_NOMEM, "out of memory: cannot allocate %zu bytes of tensor data", need);
      return NULL;
    }
    b = (pool_block *)(void *)raw;
    uintptr_t d = ((uintptr_t)(raw + sizeof(pool_block)) + 63) & ~(uintptr_t)63;
    b->data = (void *)d;
    b->size = need;
  }
  th_tensor *t = th_tensor_from_data(b->data, dtype, ndim, shape, NULL, pool_put, b);
  if (!t) pool_put(b);
  return t;
}

/* ---- the run-time environment (kernel.h) -------------------------------------------------------- */

static int32_t slot_of(const th_rt_env *env, const th_value *v) {
  return v->id < env->p->nids ? env->p->slot_of[v->id] : -1;
}

th_tensor *th_rt_tensor(th_rt_env *env, const th_arg *a) {
  if (a->kind != TH_ARG_VALUE || !a->u.value->is_tensor) return NULL;
  int32_t s = slot_of(env, a->u.value);
  return s < 0 ? NULL : env->slots[s];
}

bool th_rt_number(th_rt_env *env, const th_arg *a, double *f, int64_t *i, bool *is_float) {
  double fv = 0;
  int64_t iv = 0;
  bool fl = false;
  switch (a->kind) {
    case TH_ARG_BOOL:
      iv = a->u.b;
      fv = (double)iv;
      break;
    case TH_ARG_INT:
      iv = a->u.i;
      fv = (double)iv;
      break;
    case TH_ARG_FLOAT:
      fv = a->u.f;
      fl = true;
      break;
    case TH_ARG_VALUE: {
      const th_value *v = a->u.value;
      if (v->is_tensor) return false;
      fl = v->dtype == TH_F64;
      if (v->has_value) {
        fv = fl ? v->fvalue : (double)v->ivalue;
        iv = v->ivalue;
      } else { /* produced at run time as a 0-dim tensor */
        int32_t s = slot_of(env, v);
        const th_tensor *t = s < 0 ? NULL : env->slots[s];
        if (!t || th_tensor_numel(t) != 1) return false;
        fv = th_tensor_get_f64(t, 0);
        iv = (int64_t)fv;
      }
      break;
    }
    default: return false;
  }
  if (f) *f = fv;
  if (i && !fl) *i = iv;
  if (is_float) *is_float = fl;
  return true;
}

static void shape_string(th_dtype dt, int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", th_dtype_short(dt));
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

static bool matches(const th_tensor *t, const th_value *v) {
  if (t->dtype != v->dtype || t->ndim != v->ndim) return false;
  for (int i = 0; i < v->ndim; i++)
    if (t->shape[i] != v->shape[i]) return false;
  return true;
}

th_status th_rt_set(th_rt_env *env, const th_value *v, th_tensor *t) {
  int32_t s = slot_of(env, v);
  if (s < 0 || !t) {
    th_tensor_release(t);
    return th_error(TH_ERR_RUNTIME, "kernel bound %s, which is not a value of this program",
                    v->name ? v->name : "an unnamed value");
  }
  if (v->is_tensor ? !matches(t, v) : t->ndim != 0) {
    char got[160], want[160];
    shape_string(t->dtype, t->ndim, t->shape, got, sizeof got);
    if (v->is_tensor)
      shape_string(v->dtype, v->ndim, v->shape, want, sizeof want);
    else
      snprintf(want, sizeof want, "a 0-dim tensor");
    th_tensor_release(t);
    return th_error(TH_ERR_RUNTIME, "kernel produced %s for %s, but the trace records %s", got, v->name ? v->name : "?",
                    want);
  }
  th_tensor_release(env->slots[s]);
  env->slots[s] = t;
  return TH_OK;
}

th_tensor *th_rt_alloc_output(th_rt_env *env, const th_value *v) {
  th_tensor *t = th_rt_pool_empty(v->dtype, v->ndim, v->shape);
  if (!t) return NULL;
  if (th_rt_set(env, v, t) != TH_OK) return NULL;
  return t;
}

/* ---- Philox-4x32-10 -------------------------------------------------------------------------- */

void th_rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u; /* golden ratio */
    k1 += 0xBB67AE85u; /* sqrt(3) - 1 */
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void th_rt_philox_block(uint64_t seed, uint64_t block, uint32_t out[4]) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
  th_rt_philox4x32_10(ctr, key, out);
}

void th_rt_random4(th_rt_env *env, uint32_t out[4]) { th_rt_philox_block(env->p->rng_seed, env->p->rng_offset++, out); }

void th_rt_rng_state(th_rt_env *env, uint64_t blocks, uint64_t *seed, uint64_t *offset) {
  *seed = env->p->rng_seed;
  *offset = env->p->rng_offset;
  env->p->rng_offset += blocks;
}

th_status th_program_get_rng_state(const th_program *p, uint64_t *seed, uint64_t *offset) {
  if (!p || !seed || !offset)
    return th_error(TH_ERR_VALUE, "th_program_get_rng_state: %s is NULL",
                    !p      ? "the program"
                    : !seed ? "seed"
                            : "offset");
  *seed = p->rng_seed;
  *offset = p->rng_offset;
  return TH_OK;
}

th_status th_program_set_rng_state(th_program *p, uint64_t seed, uint64_t offset) {
  if (!p) return th_error(TH_ERR_VALUE, "th_program_set_rng_state: the program is NULL");
  if (atomic_load(&p->running))
    return th_error(TH_ERR_RUNTIME, "th_program_set_rng_state: %s() is running", p->trace->fn_name);
  p->rng_seed = seed;
  p->rng_offset = offset;
  return TH_OK;
}

int th_program_num_random_ops(const th_program *p) {
  int n = 0;
  for (int i = 0; p && i < p->nsteps; i++) n += (p->steps[i].b->sym->tags & TH_TAG_RANDOM) != 0;
  return n;
}

/* ---- build: the flat program -------------------------------------------------------------------- */

typedef struct {
  th_program *p;
  int32_t *last_use; /* per slot: last step using it, -1 if none */
  int32_t *def;      /* per slot: producing step, -1 for inputs/constants */
  bool *is_out;      /* per slot: part of the return value */
  int step;
} build_ctx;

static void assign_cb(th_value *v, void *p) {
  th_program *pr = p;
  if (pr->slot_of[v->id] < 0) {
    pr->slot_value[pr->nslots] = v;
    pr->slot_of[v->id] = pr->nslots++;
  }
}

static void count_cb(th_value *v, void *p) {
  (void)v;
  ++*(int *)p;
}

static void use_cb(th_value *v, void *p) {
  build_ctx *c = p;
  c->last_use[c->p->slot_of[v->id]] = c->step;
}

/* A step's output: record the producer and, unless it is a known number, that the kernel binds it. */
static void def_cb(th_value *v, void *p) {
  build_ctx *c = p;
  int32_t slot = c->p->slot_of[v->id];
  th_step *st = &c->p->steps[c->step];
  c->def[slot] = c->step;
  if (v->is_tensor || !v->has_value) st->outs[st->nouts++] = slot;
}

static void out_cb(th_value *v, void *p) {
  build_ctx *c = p;
  c->is_out[c->p->slot_of[v->id]] = true;
}

static bool is_step(const th_bsym *b) { return !(b->sym->tags & TH_TAG_UTILITY); }

/* A bsym whose values get slots: everything but `del` and comments (they define nothing and their
 * values, if any, have slots already). */
static bool has_slots(const th_bsym *b) {
  return !th_bsym_has_role(b, TH_SYM_DEL) && !th_bsym_has_role(b, TH_SYM_COMMENT);
}

/* Counts (outs == NULL) or fills the output plan for return value a. */
static void plan_outputs(th_program *p, const th_arg *a, th_out *outs, int *n) {
  th_out o = {OUT_NONE, -1, TH_F64, 0, 0};
  switch (a->kind) {
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
    case TH_ARG_DICT:
      for (int i = 0; i < a->u.seq.n; i++) plan_outputs(p, &a->u.seq.items[i], outs, n);
      return;
    case TH_ARG_VALUE: {
      const th_value *v = a->u.value;
      if (!v->is_tensor && v->has_value) {
        o.kind = OUT_NUMBER;
        o.dtype = v->dtype;
        o.f = v->fvalue;
        o.i = v->ivalue;
      } else {
        o.kind = OUT_SLOT;
        o.slot = p->slot_of[v->id];
      }
      break;
    }
    case TH_ARG_BOOL:
      o.kind = OUT_NUMBER;
      o.dtype = TH_BOOL;
      o.i = a->u.b;
      break;
    case TH_ARG_INT:
      o.kind = OUT_NUMBER;
      o.dtype = TH_I64;
      o.i = a->u.i;
      break;
    case TH_ARG_FLOAT:
      o.kind = OUT_NUMBER;
      o.dtype = TH_F64;
      o.f = a->u.f;
      break;
    default: break; /* None and non-numeric constants: a NULL entry */
  }
  if (outs) outs[*n] = o;
  ++*n;
}

#define ALLOC(p, n, T) ((T *)th_arena_alloc((p)->arena, sizeof(T) * (size_t)((n) ? (n) : 1)))

/* The run-time inputs of trace input v: v itself (a tensor or number), or the leaves of a collection
 * (its items, depth first; a NULL item is one leaf that binds anything). Counts when out is NULL. */
static th_status input_leaves(const th_value *v, const th_value **out, int *n, int depth) {
  if (v && v->is_collection && depth > 64)
    return th_error(TH_ERR_VALUE, "collection %s is nested too deeply", v->name ? v->name : "?");
  if (!v || !v->is_collection) {
    if (out) out[*n] = v;
    ++*n;
    return TH_OK;
  }
  for (int i = 0; i < v->coll_n; i++) TH_TRY(input_leaves(v->coll_items[i], out, n, depth + 1));
  return TH_OK;
}

static th_status build(th_program *p, const th_rt_claim *claims, int nclaims) {
  const th_trace *et = p->trace;
  th_bsym *const *bs = (th_bsym *const *)et->bsyms.items;
  int nb = et->bsyms.n;

  /* run-time inputs (collections: their leaves) */
  int nleaves = 0;
  for (int i = 0; i < et->inputs.n; i++) TH_TRY(input_leaves(et->inputs.items[i], NULL, &nleaves, 0));
  if (!(p->input_value = ALLOC(p, nleaves, const th_value *)) || !(p->input_slot = ALLOC(p, nleaves, int32_t)))
    return TH_ERR_NOMEM;
  p->ninputs = 0;
  for (int i = 0; i < et->inputs.n; i++) TH_TRY(input_leaves(et->inputs.items[i], p->input_value, &p->ninputs, 0));

  /* slots */
  uint32_t nids = th_trace_id_bound(et); /* the leaves of collection inputs may be referenced nowhere else */
  for (int i = 0; i < p->ninputs; i++)
    if (p->input_value[i] && p->input_value[i]->id + 1 > nids) nids = p->input_value[i]->id + 1;
  int nvals = et->inputs.n + p->ninputs;
  for (int i = 0; i < nb; i++)
    if (has_slots(bs[i])) th_bsym_foreach_value(bs[i], TH_BSYM_ALL, count_cb, &nvals);
  p->nids = nids;
  p->slot_of = ALLOC(p, nids, int32_t);
  p->slot_value = ALLOC(p, nvals, const th_value *);
  if (!p->slot_of || !p->slot_value) return TH_ERR_NOMEM;
  for (uint32_t i = 0; i < nids; i++) p->slot_of[i] = -1;
  for (int i = 0; i < p->ninputs; i++)
    if (p->input_value[i]) assign_cb((th_value *)p->input_value[i], p);
  for (int i = 0; i < et->inputs.n; i++) assign_cb(et->inputs.items[i], p);
  for (int i = 0; i < p->ninputs; i++) p->input_slot[i] = p->input_value[i] ? p->slot_of[p->input_value[i]->id] : -1;
  for (int i = 0; i < nb; i++)
    if (has_slots(bs[i])) th_bsym_foreach_value(bs[i], TH_BSYM_ALL, assign_cb, p);
  p->slots = ALLOC(p, p->nslots, th_tensor *);
  if (!p->slots) return TH_ERR_NOMEM;

  /* steps: one per claim */
  int nsteps = 0;
  for (int i = 0; i < nb; i++) nsteps += is_step(bs[i]);
  if (nsteps != nclaims)
    return th_error(TH_ERR_VALUE, "th_program_build: %s() has %d steps, but %d claims were given", et->fn_name, nsteps,
                    nclaims);
  p->steps = ALLOC(p, nsteps, th_step);
  if (!p->steps) return TH_ERR_NOMEM;
  for (int i = 0; i < nb; i++) {
    if (!is_step(bs[i])) continue;
    const th_rt_claim *cl = &claims[p->nsteps];
    th_step *s = &p->steps[p->nsteps++];
    s->kernel = cl->kernel;
    s->user = cl->user;
    s->user_data = cl->user_data;
    s->b = bs[i];
    s->data = cl->data;
  }

  /* producers, last uses and the return */
  build_ctx c = {p, ALLOC(p, p->nslots, int32_t), ALLOC(p, p->nslots, int32_t), ALLOC(p, p->nslots, bool), 0};
  if (!c.last_use || !c.def || !c.is_out) return TH_ERR_NOMEM;
  for (int s = 0; s < p->nslots; s++) c.last_use[s] = c.def[s] = -1;
  for (c.step = 0; c.step < p->nsteps; c.step++) {
    th_step *st = &p->steps[c.step];
    th_bsym_foreach_value(st->b, TH_BSYM_INPUTS, use_cb, &c);
    int n = 0;
    th_arg_foreach_value(&st->b->out, count_cb, &n);
    if (!(st->outs = ALLOC(p, n, int32_t))) return TH_ERR_NOMEM;
    th_arg_foreach_value(&st->b->out, def_cb, &c);
  }
  th_arg ret = th_trace_output(et);
  th_arg_foreach_value(&ret, out_cb, &c);
  p->nouts = 0;
  plan_outputs(p, &ret, NULL, &p->nouts);
  if (!(p->outs = ALLOC(p, p->nouts, th_out))) return TH_ERR_NOMEM;
  int k = 0;
  plan_outputs(p, &ret, p->outs, &k);

  /* release lists: a slot dies after its last use, or right after its producer if never used */
  for (int s = 0; s < p->nslots; s++) {
    int32_t r = c.last_use[s] > c.def[s] ? c.last_use[s] : c.def[s];
    if (!c.is_out[s] && r >= 0) p->steps[r].nrelease++;
  }
  for (int i = 0; i < p->nsteps; i++) {
    if (!(p->steps[i].release = ALLOC(p, p->steps[i].nrelease, int32_t))) return TH_ERR_NOMEM;
    p->steps[i].nrelease = 0;
  }
  for (int s = 0; s < p->nslots; s++) {
    int32_t r = c.last_use[s] > c.def[s] ? c.last_use[s] : c.def[s];
    if (!c.is_out[s] && r >= 0) p->steps[r].release[p->steps[r].nrelease++] = s;
  }
  if (!(p->bind_input = ALLOC(p, p->ninputs, bool))) return TH_ERR_NOMEM;
  for (int i = 0; i < p->ninputs; i++) {
    int32_t sl = p->input_slot[i];
    p->bind_input[i] = sl >= 0 && (c.last_use[sl] >= 0 || c.is_out[sl]);
  }
  return TH_OK;
}

/* ---- the public API -------------------------------------------------------------------------------- */

void th_program_free(th_program *p) {
  if (!p) return;
  if (p->slots)
    for (int s = 0; s < p->nslots; s++) th_tensor_release(p->slots[s]);
  for (int i = 0; i < p->ntraces; i++) th_trace_free(p->traces[i]);
  if (p->resources_free) p->resources_free(p->resources);
  th_arena_free(p->arena);
  th_free(p);
}

th_status th_program_build(const th_rt_program_spec *spec, th_program **out) {
  if (!out) return th_error(TH_ERR_VALUE, "th_program_build: out is NULL");
  *out = NULL;
  th_program *p = th_calloc(1, sizeof *p);
  th_status st = TH_ERR_NOMEM;
  if (p) {
    p->resources = spec->resources;
    p->resources_free = spec->resources_free;
  } else if (spec->resources_free) {
    spec->resources_free(spec->resources);
  }
  for (int i = 0; i < spec->ntraces; i++) {
    if (p && i < MAX_STAGES) {
      p->traces[p->ntraces] = spec->traces[i];
      p->stage_names[p->ntraces++] = spec->names[i];
    } else {
      th_trace_free(spec->traces[i]);
    }
  }
  if (!p) return th_error(TH_ERR_NOMEM, "out of memory building a program");
  if (spec->ntraces < 1 || spec->ntraces > MAX_STAGES) {
    st =
      th_error(TH_ERR_VALUE, "th_program_build: expected between 1 and %d traces, got %d", MAX_STAGES, spec->ntraces);
    goto fail;
  }
  if (spec->nclaims < 0 || (spec->nclaims > 0 && !spec->claims)) {
    st = th_error(TH_ERR_VALUE, "th_program_build: expected a list of claims, got %d (list %s)", spec->nclaims,
                  spec->claims ? "given" : "NULL");
    goto fail;
  }
  p->trace = p->traces[p->ntraces - 1];
  p->has_device_override = spec->has_device_override;
  p->device_override = spec->device_override;
  p->rng_seed = spec->seed;
  if (!(p->arena = th_arena_new())) goto fail;
  if ((st = build(p, spec->claims, spec->nclaims)) != TH_OK) goto fail;
  *out = p;
  return TH_OK;
fail:
  if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
    th_error(TH_ERR_NOMEM, "out of memory building a program");
  th_program_free(p);
  return st;
}

const th_trace *th_program_trace(const th_program *p) { return p ? p->trace : NULL; }

int th_program_num_traces(const th_program *p) { return p ? p->ntraces : 0; }

const th_trace *th_program_stage_trace(const th_program *p, int i, const char **stage_name) {
  if (stage_name) *stage_name = NULL;
  if (!p || i < 0 || i >= p->ntraces) return NULL;
  if (stage_name) *stage_name = p->stage_names[i];
  return p->traces[i];
}

int th_program_num_inputs(const th_program *p) { return p ? p->ninputs : 0; }

/* ---- run ---------------------------------------------------------------------------------------- */

static void release_all(th_program *p) {
  for (int s = 0; s < p->nslots; s++) {
    th_tensor_release(p->slots[s]);
    p->slots[s] = NULL;
  }
}

static th_status check_input(const th_program *p, int i, const th_tensor *t) {
  const th_value *v = p->input_value[i];
  if (!v) return TH_OK; /* an unused collection item (`_`): anything binds */
  if (t && t->device.type == TH_CPU && matches(t, v)) return TH_OK;
  char want[192], got[160], dev[32];
  th_device_str(p->has_device_override ? (th_device){TH_CPU, 0} : v->device, dev, sizeof dev);
  size_t k = (size_t)snprintf(want, sizeof want, "%s ", dev);
  shape_string(v->dtype, v->ndim, v->shape, want + k, sizeof want - k);
  if (!t) {
    snprintf(got, sizeof got, "None");
  } else {
    k = 0;
    if (t->device.type != TH_CPU) {
      th_device_str(t->device, got, sizeof got - 1);
      k = strlen(got);
      got[k++] = ' ';
    }
    shape_string(t->dtype, t->ndim, t->shape, got + k, sizeof got - k);
  }
  return th_error(TH_ERR_VALUE, "input '%s': expected %s, got %s", v->name ? v->name : "?", want, got);
}

/* The kernel's error with the op's name in front (unless the kernel already put it there). */
static th_status op_error(const th_bsym *b, th_status st) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", th_last_error());
  const char *q = b->sym->qualname;
  size_t n = strlen(q);
  if (!strncmp(msg, q, n) && msg[n] == ':') return th_error(st, "%s", msg);
  if (!msg[0]) return th_error(st, "%s: failed (%s)", q, th_status_name(st));
  return th_error(st, "%s: %s", q, msg);
}

static th_tensor *number_tensor(const th_out *o) {
  th_tensor *t = th_tensor_empty(o->dtype, 0, NULL);
  if (!t) return NULL;
  void *d = th_tensor_data(t);
  if (o->dtype == TH_BOOL)
    *(uint8_t *)d = o->i != 0;
  else if (o->dtype == TH_F64)
    *(double *)d = o->f;
  else
    *(int64_t *)d = o->i;
  return t;
}

static th_status program_run(th_program *p, int ninputs, th_tensor *const *inputs, int *noutputs,
                             th_tensor ***outputs) {
  if (!noutputs || !outputs)
    return th_error(TH_ERR_VALUE, "th_program_run: %s is NULL", !noutputs ? "noutputs" : "outputs");
  *noutputs = 0;
  *outputs = NULL;
  if (!p) return th_error(TH_ERR_VALUE, "th_program_run: the program is NULL");
  if (ninputs > 0 && !inputs)
    return th_error(TH_ERR_VALUE, "%s(): inputs is NULL with ninputs=%d", p->trace->fn_name, ninputs);
  if (ninputs != p->ninputs)
    return th_error(TH_ERR_VALUE, "%s() expected %d input%s, got %d", p->trace->fn_name, p->ninputs,
                    p->ninputs == 1 ? "" : "s", ninputs);
  for (int i = 0; i < ninputs; i++) TH_TRY(check_input(p, i, inputs[i]));
  for (int i = 0; i < ninputs; i++)
    if (p->bind_input[i]) {
      th_tensor_retain(inputs[i]);
      p->slots[p->input_slot[i]] = inputs[i];
    }
  th_rt_env env = {p, p->slots, NULL, NULL, NULL};
  th_status st = TH_OK;
  for (int i = 0; i < p->nsteps; i++) {
    const th_step *s = &p->steps[i];
    env.user = s->user;
    env.data = s->data;
    env.user_data = s->user_data;
    if ((st = s->kernel(&env, s->b)) != TH_OK) {
      op_error(s->b, st);
      goto fail;
    }
    for (int k = 0; k < s->nouts; k++)
      if (!p->slots[s->outs[k]]) {
        st = th_error(TH_ERR_RUNTIME, "%s: the kernel did not produce %s", s->b->sym->qualname,
                      p->slot_value[s->outs[k]]->name ? p->slot_value[s->outs[k]]->name : "an output");
        goto fail;
      }
    for (int k = 0; k < s->nrelease; k++) {
      th_tensor_release(p->slots[s->release[k]]);
      p->slots[s->release[k]] = NULL;
    }
  }
  th_tensor **res = NULL;
  if (p->nouts) {
    res = th_malloc(sizeof(th_tensor *) * (size_t)p->nouts);
    if (!res) {
      st = th_error(TH_ERR_NOMEM, "out of memory collecting the outputs");
      goto fail;
    }
  }
  for (int i = 0; i < p->nouts; i++) {
    const th_out *o = &p->outs[i];
    res[i] = NULL;
    if (o->kind == OUT_NUMBER) {
      res[i] = number_tensor(o);
    } else if (o->kind == OUT_SLOT) {
      res[i] = o->slot >= 0 ? p->slots[o->slot] : NULL;
      if (res[i])
        th_tensor_retain(res[i]);
      else
        th_error(TH_ERR_RUNTIME, "%s() has no value for output %d", p->trace->fn_name, i);
    } else {
      continue;
    }
    if (!res[i]) {
      st = th_last_status() == TH_OK ? TH_ERR_RUNTIME : th_last_status();
      for (int k = 0; k < i; k++) th_tensor_release(res[k]);
      th_free(res);
      goto fail;
    }
  }
  release_all(p);
  *noutputs = p->nouts;
  *outputs = res;
  return TH_OK;
fail:
  release_all(p);
  return st;
}

/* ---- the thread count (thunder/jit.h) ---------------------------------------------------------------- */

static _Atomic int g_num_threads; /* 0: the default */

/* a positive count from an environment variable's first comma-separated value (blanks around it
 * allowed, as libgomp reads OMP_NUM_THREADS), else 0 */
static int env_threads(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  long n = strtol(v, &end, 10);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (errno || end == v || (*end && *end != ',') || n < 1) return 0;
  return n > 4096 ? 4096 : (int)n;
}

th_status th_set_num_threads(int n) {
  if (n < 0 || n > 4096)
    return th_error(TH_ERR_VALUE,
                    "th_set_num_threads: n: expected 0 (the default) or a count in [1, 4096], but "
                    "got %d",
                    n);
  atomic_store(&g_num_threads, n);
  return TH_OK;
}

int th_get_num_threads(void) {
  int n = atomic_load(&g_num_threads);
  if (n > 0) return n;
  if ((n = env_threads("THUNDER_NUM_THREADS")) > 0) return n;
  if ((n = env_threads("OMP_NUM_THREADS")) > 0) return n;
  n = omp_get_num_procs();
  return n > 0 ? n : 1;
}

/* ---- the CPUs other processes leave free ------------------------------------------------------------
 * The threads of a team meet at a barrier after every parallel loop. When other processes keep the
 * CPUs busy the scheduler preempts team members, and each barrier waits for one to be scheduled again
 * (a time slice: milliseconds) while the members that arrived spin in libgomp's wait, taking the time
 * the preempted one needs, so a program of many short loops runs far slower on n threads than on one.
 * While other processes are runnable, a run's team is capped by the CPUs free: the CPUs this process
 * may run on less the runnable tasks of other processes, which are the kernel's count of runnable
 * tasks (/proc/loadavg's fourth field) less this process's own running threads (state R in
 * /proc/self/task/<tid>/stat: the caller, and OpenMP workers spinning between loops). The count is
 * sampled at most every 10 ms. The system's count covers every online CPU, so for a process confined
 * to some of them (taskset, a cpuset) the others are taken to fill the CPUs it may not use first;
 * CPU quotas (a cgroup's cpu.max) are not read. The cap applies to the default count
 * (THUNDER_NUM_THREADS, OMP_NUM_THREADS, else the CPUs); a count set with th_set_num_threads is used
 * as given, and THUNDER_ADAPTIVE_THREADS=0 keeps the default as it is. */

/* the whole of a small /proc file into buf (NUL-terminated); its length, or -1 */
static ssize_t read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return n;
}

/* runnable tasks in the system (the reader among them), or -1 */
static int runnable_tasks(void) {
  char buf[256];
  if (read_small("/proc/loadavg", buf, sizeof buf) < 0) return -1;
  const char *p = buf;
  for (int field = 0; field < 3; field++) { /* skip the three load averages */
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  char *end;
  long n = strtol(p, &end, 10);
  return end == p || *end != '/' || n < 0 ? -1 : (int)(n > 1 << 20 ? 1 << 20 : n);
}

/* this process's thread count (/proc/self/stat's 20th field), or -1 */
static long thread_count(void) {
  char buf[1024];
  if (read_small("/proc/self/stat", buf, sizeof buf) < 0) return -1;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ppid ...": comm may hold blanks and parentheses */
  for (int field = 2; p && field < 20; field++) p = strchr(p + 1, ' ');
  if (!p) return -1;
  char *end;
  long n = strtol(p + 1, &end, 10);
  return end == p + 1 || n < 1 ? -1 : n;
}

/* this process's threads that are running or runnable, or -1. A process of more than 64 threads is not
 * scanned (a read per thread): its estimate is `team`, the caller and its OpenMP workers. */
static int running_threads(int team) {
  long nthreads = thread_count();
  if (nthreads > 64) return team;
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  char path[64], buf[512];
  while ((de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", de->d_name);
    if (read_small(path, buf, sizeof buf) < 0) continue; /* the thread exited meanwhile */
    const char *rp = strrchr(buf, ')');                 /* "tid (comm) S ...": comm may hold blanks */
    if (rp && rp[1] == ' ' && rp[2] == 'R') n++;
  }
  closedir(d);
  return n;
}

/* THUNDER_ADAPTIVE_THREADS: 0, false, off or no (any case) turns the cap off */
static bool adaptive_threads(void) {
  const char *v = getenv("THUNDER_ADAPTIVE_THREADS");
  if (!v) return true;
  static const char *const off[] = {"0", "false", "off", "no"};
  for (size_t i = 0; i < sizeof off / sizeof *off; i++)
    if (!strcasecmp(v, off[i])) return false;
  return true;
}

/* The CPUs this process may run on that other processes' runnable tasks leave free (>= 1; 4096 when no
 * other process is runnable). team: the caller's team size, this process's running threads when it has
 * too many to scan. */
static int cpus_free(int team) {
  static _Atomic int64_t next_ns;
  static _Atomic int last = 0, last_others;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  int cached = atomic_load(&last);
  if (cached > 0 && now < atomic_load(&next_ns)) return cached;
  /* this process's threads first: a worker that stops spinning between the two reads then counts as
   * nobody's instead of as another process's task */
  int ncpu = omp_get_num_procs(), self = running_threads(team), sys = self < 0 ? -1 : runnable_tasks();
  if (ncpu < 1) ncpu = 1;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int others = sys >= 0 && self >= 0 && sys > self ? sys - self : 0;
  /* the system's count covers every CPU: others fill the CPUs this process may not use first */
  if (online > ncpu) others = others > online - ncpu ? others - (int)(online - ncpu) : 0;
  /* a task that ran for one sample only (a kernel worker, a short process) changes nothing: the
   * smaller of this sample's count and the last one's counts */
  int prev = atomic_exchange(&last_others, others);
  if (prev < others) others = prev;
  /* no other process runnable: no cap (a default above the CPUs, as THUNDER_NUM_THREADS may set, stays) */
  int free = others ? ncpu - others : 4096;
  if (free < 1) free = 1;
  atomic_store(&last, free);
  /* the next sample 10 ms after this one ends, so even a slow read is paid once per interval */
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  atomic_store(&next_ns, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + 10 * 1000000);
  return free;
}

/* Sets the calling thread's OpenMP team size to thunder-c's for one call (the configured count, capped
 * by the CPUs free); returns the previous one (0 when nothing was changed) for th_rt_threads_restore. */
int th_rt_threads_enter(void) {
  int want = th_get_num_threads(), had = omp_get_max_threads();
  /* a count set by th_set_num_threads is used as given */
  if (want > 1 && atomic_load(&g_num_threads) == 0 && adaptive_threads()) {
    int free = cpus_free(want);
    if (free < want) want = free;
  }
  if (want == had) return 0;
  omp_set_num_threads(want);
  return had;
}

void th_rt_threads_restore(int had) {
  if (had > 0) omp_set_num_threads(had);
}

/* A run binds the program's slots, so a second run of the same program while one is in progress (a
 * kernel that calls back into it, e.g. a Python kernel calling its own jitted function, or another
 * thread) is refused instead of corrupting the first. */
th_status th_program_run(th_program *p, int ninputs, th_tensor *const *inputs, int *noutputs, th_tensor ***outputs) {
  if (!p || !noutputs || !outputs) return program_run(p, ninputs, inputs, noutputs, outputs);
  if (atomic_exchange(&p->running, true)) {
    *noutputs = 0;
    *outputs = NULL;
    return th_error(TH_ERR_RUNTIME,
                    "%s(): this program is already running (a kernel called it again, or another "
                    "thread runs it); one program is not re-entrant",
                    p->trace->fn_name);
  }
  int had = th_rt_threads_enter();
  th_status st = program_run(p, ninputs, inputs, noutputs, outputs);
  th_rt_threads_restore(had);
  atomic_store(&p->running, false);
  return st;
}
