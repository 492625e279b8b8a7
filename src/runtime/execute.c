/* execute.c — compiling a trace into a program and running it (thunder/jit.h), and the run-time
 * environment kernels see (executors/kernel.h).
 *
 * Compile: verify the trace, check its devices, run the execution transform (every bsym claimed by an
 * executor) and Delete Last Used (the execution trace gets Thunder's `del` lines; they are utility
 * bsyms, not steps), then lay the execution trace out flat:
 *   - every value met at the top level gets a slot; slot_of[value id] -> slot index (ids are dense
 *     within a compilation, so this is one array);
 *   - one step per claimed bsym: its kernel, the bsym, the output slots the kernel must fill, and the
 *     slots whose last use is this step (released right after it);
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
#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "executors/kernel.h"
#include "thunder/jit.h"
#include "executors/passes.h"
#include "executors/fuser/fuser.h"
#include "runtime/program.h"
#include "transforms/transforms.h"

/* Exported for the unit test (known-answer vectors); the generator behind th_rt_random4. */
void th_rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

static int threads_enter(void);
static void threads_restore(int had);

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
  int32_t slot;     /* OUT_SLOT */
  th_dtype dtype;   /* OUT_NUMBER: TH_BOOL / TH_I64 / TH_F64 */
  double f;
  int64_t i;
} th_out;

struct th_program {
  th_trace *trace;      /* the execution trace (owned) */
  th_fuser_set *fusions; /* the fuser's compiled regions (owned), or NULL */
  th_arena *arena;      /* everything below */
  int nsteps;
  th_step *steps;
  int nslots;
  th_tensor **slots;    /* bindings of the current run; all NULL between runs */
  const th_value **slot_value;
  uint32_t nids;
  int32_t *slot_of;     /* value id -> slot, -1 if none */
  int ninputs;          /* run-time inputs: one per tensor input, a collection input's leaves */
  const th_value **input_value; /* per run-time input: its value (NULL: an unused item printed `_`) */
  int32_t *input_slot;  /* per run-time input: its slot, -1 if none */
  bool *bind_input;     /* false: the input is never used (not even returned) */
  int nouts;
  th_out *outs;
  bool has_device_override;
  th_device device_override;
  uint64_t rng_seed;    /* the generator state (seed, offset) */
  uint64_t rng_offset;
  atomic_bool running;  /* a run is in progress (th_program_run refuses a second one) */
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
    case TH_ARG_BOOL: iv = a->u.b; fv = (double)iv; break;
    case TH_ARG_INT: iv = a->u.i; fv = (double)iv; break;
    case TH_ARG_FLOAT: fv = a->u.f; fl = true; break;
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
    if (v->is_tensor) shape_string(v->dtype, v->ndim, v->shape, want, sizeof want);
    else snprintf(want, sizeof want, "a 0-dim tensor");
    th_tensor_release(t);
    return th_error(TH_ERR_RUNTIME, "kernel produced %s for %s, but the trace records %s", got,
                    v->name ? v->name : "?", want);
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

void th_rt_random4(th_rt_env *env, uint32_t out[4]) {
  th_rt_philox_block(env->p->rng_seed, env->p->rng_offset++, out);
}

void th_rt_rng_state(th_rt_env *env, uint64_t blocks, uint64_t *seed, uint64_t *offset) {
  *seed = env->p->rng_seed;
  *offset = env->p->rng_offset;
  env->p->rng_offset += blocks;
}

th_status th_program_get_rng_state(const th_program *p, uint64_t *seed, uint64_t *offset) {
  if (!p || !seed || !offset)
    return th_error(TH_ERR_VALUE, "th_program_get_rng_state: %s is NULL", !p ? "the program" : !seed ? "seed" : "offset");
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

/* ---- compile: executors and devices ------------------------------------------------------------ */

static const char *const default_executors[] = {"fuser", "blas", "eager"};

static const th_executor_desc *builtin_executor(const char *name) {
  if (!strcmp(name, th_blas_executor.name)) return &th_blas_executor;
  if (!strcmp(name, th_eager_executor.name)) return &th_eager_executor;
  if (!strcmp(name, th_fuser_executor.name)) return &th_fuser_executor;
  return NULL;
}

typedef struct {
  th_device dev;
  bool found;
} dev_ctx;

static void dev_cb(th_value *v, void *p) {
  dev_ctx *c = p;
  if (!c->found && v->is_tensor && v->device.type != TH_CPU) {
    c->dev = v->device;
    c->found = true;
  }
}

static void arg_devices(const th_arg *a, dev_ctx *c) {
  if (a->kind == TH_ARG_DEVICE && a->u.device.type != TH_CPU && !c->found) {
    c->dev = a->u.device;
    c->found = true;
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT) {
    for (int i = 0; i < a->u.seq.n; i++) arg_devices(&a->u.seq.items[i], c);
  } else {
    th_arg_foreach_value(a, dev_cb, c);
  }
}

/* Only the CPU exists in this build: a trace recorded for another device runs only with an override
 * to the CPU. */
static th_status check_devices(const th_trace *tr, const th_compile_options *o) {
  char buf[32];
  if (o->has_device_override) {
    if (o->device_override.type == TH_CPU) return TH_OK;
    th_device_str(o->device_override, buf, sizeof buf);
    if (o->device_override.type == TH_CUDA)
      return th_error(TH_ERR_DEVICE, "device %s requested, but this machine has no CUDA device; run it "
                      "on the CPU with --device cpu", buf);
    return th_error(TH_ERR_DEVICE, "cannot run on device %s; run it on the CPU with --device cpu", buf);
  }
  dev_ctx c = {{TH_CPU, 0}, false};
  for (int i = 0; i < tr->inputs.n; i++) dev_cb(tr->inputs.items[i], &c);
  for (int i = 0; i < tr->bsyms.n && !c.found; i++) {
    const th_bsym *b = tr->bsyms.items[i];
    for (int j = 0; j < b->nargs; j++) arg_devices(&b->args[j], &c);
    for (int j = 0; j < b->nkwargs; j++) arg_devices(&b->kwargs[j], &c);
    arg_devices(&b->out, &c);
  }
  if (!c.found) return TH_OK;
  th_device_str(c.dev, buf, sizeof buf);
  if (c.dev.type == TH_CUDA)
    return th_error(TH_ERR_DEVICE, "trace recorded for %s, but this machine has no CUDA device; run it "
                    "on the CPU with --device cpu (CLI) or th_compile_options.device_override (C); from "
                    "Python, keep the tensors on the CPU (no .to(\"cuda\") or device=\"cuda\" in the function)",
                    buf);
  return th_error(TH_ERR_DEVICE, "trace recorded for %s, which cannot run; run it on the CPU with "
                  "--device cpu (CLI) or th_compile_options.device_override (C); from Python, keep the "
                  "tensors on the CPU", buf);
}

/* Every value of the trace satisfies th_value_check (a parsed trace's type comments are written into its
 * values without it), so no kernel sees a shape whose sizes overflow int64. */
typedef struct {
  th_status st;
} vcheck_ctx;

static void vcheck_cb(th_value *v, void *p) {
  vcheck_ctx *c = p;
  if (c->st != TH_OK) return;
  char who[96];
  snprintf(who, sizeof who, "value %s", v && v->name ? v->name : "?");
  c->st = th_value_check(v, who);
}

static th_status check_bsym_values(const th_bsym *b, vcheck_ctx *c, int depth) {
  if (depth > 64) return TH_OK; /* the parser and the verifier bound the nesting far below this */
  for (int j = 0; j < b->nargs && c->st == TH_OK; j++) th_arg_foreach_value(&b->args[j], vcheck_cb, c);
  for (int j = 0; j < b->nkwargs && c->st == TH_OK; j++) th_arg_foreach_value(&b->kwargs[j], vcheck_cb, c);
  if (c->st == TH_OK) th_arg_foreach_value(&b->out, vcheck_cb, c);
  for (int k = 0; k < b->nsubs && c->st == TH_OK; k++) check_bsym_values(b->subs[k], c, depth + 1);
  return c->st;
}

static th_status check_values(const th_trace *tr) {
  vcheck_ctx c = {TH_OK};
  for (int i = 0; i < tr->inputs.n && c.st == TH_OK; i++) vcheck_cb(tr->inputs.items[i], &c);
  for (int i = 0; i < tr->bsyms.n && c.st == TH_OK; i++) check_bsym_values(tr->bsyms.items[i], &c, 0);
  return c.st;
}

/* ---- compile: the flat program ---------------------------------------------------------------- */

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

static void max_id_cb(th_value *v, void *p) {
  uint32_t *m = p;
  if (v->id + 1 > *m) *m = v->id + 1;
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

static void bsym_foreach(const th_bsym *b, bool outs, void (*fn)(th_value *, void *), void *ctx) {
  for (int i = 0; i < b->nargs; i++) th_arg_foreach_value(&b->args[i], fn, ctx);
  for (int i = 0; i < b->nkwargs; i++) th_arg_foreach_value(&b->kwargs[i], fn, ctx);
  if (outs) th_arg_foreach_value(&b->out, fn, ctx);
}

static bool is_step(const th_bsym *b) { return !(b->sym->tags & TH_TAG_UTILITY); }

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
    case TH_ARG_BOOL: o.kind = OUT_NUMBER; o.dtype = TH_BOOL; o.i = a->u.b; break;
    case TH_ARG_INT: o.kind = OUT_NUMBER; o.dtype = TH_I64; o.i = a->u.i; break;
    case TH_ARG_FLOAT: o.kind = OUT_NUMBER; o.dtype = TH_F64; o.f = a->u.f; break;
    default: break; /* None and non-numeric constants: a NULL entry */
  }
  if (outs) outs[*n] = o;
  ++*n;
}

static const th_operator_impl *find_impl(const th_executor_desc *e, th_op_id id) {
  for (int i = 0; i < e->nimpls; i++)
    if (e->impls[i].op == id) return &e->impls[i];
  return NULL;
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

static th_status build(th_program *p, const th_executor_desc *const *execs, int nexecs) {
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
  uint32_t nids = 0;
  int nvals = 0;
  for (int i = 0; i < et->inputs.n; i++) max_id_cb(et->inputs.items[i], &nids);
  for (int i = 0; i < p->ninputs; i++)
    if (p->input_value[i]) max_id_cb((th_value *)p->input_value[i], &nids);
  nvals += et->inputs.n + p->ninputs;
  for (int i = 0; i < nb; i++) {
    if (bs[i]->sym->id == TH_OP_prims_python_del || bs[i]->sym->id == TH_OP_prims_comment) continue;
    bsym_foreach(bs[i], true, max_id_cb, &nids);
    bsym_foreach(bs[i], true, count_cb, &nvals);
  }
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
    if (bs[i]->sym->id != TH_OP_prims_python_del && bs[i]->sym->id != TH_OP_prims_comment)
      bsym_foreach(bs[i], true, assign_cb, p);
  p->slots = ALLOC(p, p->nslots, th_tensor *);
  if (!p->slots) return TH_ERR_NOMEM;

  /* steps and kernels */
  int nsteps = 0;
  for (int i = 0; i < nb; i++) nsteps += is_step(bs[i]);
  p->steps = ALLOC(p, nsteps, th_step);
  if (!p->steps) return TH_ERR_NOMEM;
  for (int i = 0; i < nb; i++) {
    const th_bsym *b = bs[i];
    if (!is_step(b)) continue;
    if (!b->executor)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no executor claimed it", b->sym->qualname);
    const th_operator_impl *impl = NULL;
    const th_executor_desc *owner = NULL;
    for (int e = 0; e < nexecs && !impl; e++)
      if (!strcmp(execs[e]->name, b->executor)) impl = find_impl(owner = execs[e], b->sym->id);
    if (!impl || !impl->kernel)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: claimed by executor '%s', which has no kernel for it",
                      b->sym->qualname, b->executor);
    th_step *s = &p->steps[p->nsteps++];
    s->kernel = impl->kernel;
    s->user = th_registry_user_kernel(owner, impl); /* copied: the executor may be freed later */
    s->user_data = th_registry_user_data(owner, impl);
    s->b = b;
    s->data = owner == &th_fuser_executor ? th_fuser_set_find(p->fusions, b->sym->name) : NULL;
    if (owner == &th_fuser_executor && !s->data)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: claimed by the fuser, which did not compile it", b->sym->qualname);
  }

  /* producers, last uses and the return */
  build_ctx c = {p, ALLOC(p, p->nslots, int32_t), ALLOC(p, p->nslots, int32_t),
                 ALLOC(p, p->nslots, bool), 0};
  if (!c.last_use || !c.def || !c.is_out) return TH_ERR_NOMEM;
  for (int s = 0; s < p->nslots; s++) c.last_use[s] = c.def[s] = -1;
  for (c.step = 0; c.step < p->nsteps; c.step++) {
    th_step *st = &p->steps[c.step];
    bsym_foreach(st->b, false, use_cb, &c);
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
  th_trace_free(p->trace);
  th_fuser_set_free(p->fusions);
  th_arena_free(p->arena);
  th_free(p);
}

const th_trace *th_program_trace(const th_program *p) { return p ? p->trace : NULL; }

int th_program_num_inputs(const th_program *p) { return p ? p->ninputs : 0; }

th_status th_program_compile_with(const th_trace *tr, const th_compile_options *opts,
                                  const th_executor_desc *const *execs, int nexecs, th_program **out) {
  static const th_compile_options defaults = {0};
  const th_compile_options *o = opts ? opts : &defaults;
  if (!out) return th_error(TH_ERR_VALUE, "th_program_compile: out is NULL");
  *out = NULL;
  if (!tr) return th_error(TH_ERR_VALUE, "th_program_compile: the trace is NULL");
  if (nexecs < 0 || (nexecs > 0 && !execs))
    return th_error(TH_ERR_VALUE, "th_program_compile: expected a list of executors, got %d (list %s)", nexecs,
                    execs ? "given" : "NULL");
  TH_TRY(check_values(tr));
  TH_TRY(th_trace_verify(tr));
  TH_TRY(check_devices(tr, o));
  th_program *p = th_calloc(1, sizeof *p);
  if (!p) return th_error(TH_ERR_NOMEM, "out of memory compiling a program");
  p->has_device_override = o->has_device_override;
  p->device_override = o->device_override;
  p->rng_seed = o->seed;
  th_status st = TH_ERR_NOMEM;
  if (!(p->arena = th_arena_new())) goto fail;
  {
    /* the execution trace, then Delete Last Used (as Thunder's pipeline ends): the program runs the
     * del trace, whose dels are utility bsyms (no steps); releases come from the slot analysis */
    th_trace *et = NULL;
    st = th_transform_for_execution(tr, execs, nexecs, &et);
    for (int i = 0; i < nexecs && st == TH_OK; i++) /* fusion regions, when the fuser is listed */
      if (execs[i] == &th_fuser_executor) {
        th_trace *ft = NULL;
        st = th_fuser_pass(et, execs, nexecs, i, o->dump_dir, &ft, &p->fusions);
        if (st == TH_OK) {
          th_trace_free(et);
          et = ft;
        }
        break;
      }
    if (st == TH_OK) st = th_del_last_used(et, &p->trace);
    th_trace_free(et);
    if (st != TH_OK) goto fail;
  }
#ifndef NDEBUG
  if ((st = th_trace_verify(p->trace)) != TH_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    th_error(st, "the execution trace does not verify: %s", msg);
    goto fail;
  }
#endif
  if ((st = build(p, execs, nexecs)) != TH_OK) goto fail;
  *out = p;
  return TH_OK;
fail:
  if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
    th_error(TH_ERR_NOMEM, "out of memory compiling a program");
  th_program_free(p);
  return st;
}

th_status th_program_compile(const th_trace *tr, const th_compile_options *opts, th_program **out) {
  if (!out) return th_error(TH_ERR_VALUE, "th_program_compile: out is NULL");
  *out = NULL;
  if (!tr) return th_error(TH_ERR_VALUE, "th_program_compile: the trace is NULL");
  const char *const *names = default_executors;
  int n = (int)(sizeof default_executors / sizeof *default_executors);
  if (opts && opts->executors) {
    names = opts->executors;
    n = opts->nexecutors;
  }
  if (n < 0 || n > 16) return th_error(TH_ERR_VALUE, "expected between 0 and 16 executors, got %d", n);
  const th_executor_desc *execs[16];
  th_executor_desc *snaps[16]; /* user executors (th_executor_new), copied for this compilation */
  int nsnaps = 0;
  th_status st = TH_OK;
  for (int i = 0; i < n && st == TH_OK; i++) {
    if (names[i] && (execs[i] = builtin_executor(names[i]))) continue;
    th_executor_desc *snap = NULL;
    if (names[i] && (st = th_registry_snapshot(names[i], &snap)) != TH_OK) break;
    if (snap) {
      execs[i] = snaps[nsnaps++] = snap;
      continue;
    }
    char known[512];
    th_registry_executor_names(known, sizeof known);
    st = th_error(TH_ERR_VALUE,
                  "Expected an Executor or the name of a registered Executor, but got '%.200s' (known: blas, "
                  "eager, fuser%s%s)", names[i] ? names[i] : "NULL", known[0] ? ", " : "", known);
  }
  if (st == TH_OK) {
    int had = threads_enter();
    st = th_program_compile_with(tr, opts, execs, n, out);
    threads_restore(had);
  }
  for (int i = 0; i < nsnaps; i++) th_registry_snapshot_free(snaps[i]);
  return st;
}

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
  if (o->dtype == TH_BOOL) *(uint8_t *)d = o->i != 0;
  else if (o->dtype == TH_F64) *(double *)d = o->f;
  else *(int64_t *)d = o->i;
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
      if (res[i]) th_tensor_retain(res[i]);
      else th_error(TH_ERR_RUNTIME, "%s() has no value for output %d", p->trace->fn_name, i);
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
    return th_error(TH_ERR_VALUE, "th_set_num_threads: n: expected 0 (the default) or a count in [1, 4096], but "
                    "got %d", n);
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

/* Sets the calling thread's OpenMP team size to thunder-c's for one call; returns the previous one
 * (0 when nothing was changed) for threads_restore. */
static int threads_enter(void) {
  int want = th_get_num_threads(), had = omp_get_max_threads();
  if (want == had) return 0;
  omp_set_num_threads(want);
  return had;
}

static void threads_restore(int had) {
  if (had > 0) omp_set_num_threads(had);
}

/* A run binds the program's slots, so a second run of the same program while one is in progress (a
 * kernel that calls back into it, e.g. a Python kernel calling its own jitted function, or another
 * thread) is refused instead of corrupting the first. */
th_status th_program_run(th_program *p, int ninputs, th_tensor *const *inputs, int *noutputs,
                         th_tensor ***outputs) {
  if (!p || !noutputs || !outputs) return program_run(p, ninputs, inputs, noutputs, outputs);
  if (atomic_exchange(&p->running, true)) {
    *noutputs = 0;
    *outputs = NULL;
    return th_error(TH_ERR_RUNTIME, "%s(): this program is already running (a kernel called it again, or another "
                    "thread runs it); one program is not re-entrant", p->trace->fn_name);
  }
  int had = threads_enter();
  th_status st = program_run(p, ninputs, inputs, noutputs, outputs);
  threads_restore(had);
  atomic_store(&p->running, false);
  return st;
}
