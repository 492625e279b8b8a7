/* registry.c — the public extension API (thunder/executor.h): operators registered at run time, user
 * executors, and what a user kernel sees.
 *
 * Operators: a registered op is a th_symbol like the rows of ops.def (a prim: schema parsed by the same
 * parser, tags, a meta), embedded first in a reg_op that also holds the user's callbacks; the symbol's
 * meta and autocast hooks are the adapters below, which call the public callbacks and turn their
 * answers into proxies (th_value_new_tensor) or converts (th_autocast_cast). Ids are TH_OP_REGISTERED +
 * k, so CSE, verification and claiming tell registered ops apart as they do built-in ones. Registered
 * ops live for the process (their memory is the registry's arena).
 *
 * Executors: a th_executor is a th_executor_desc (what the execution pass and the runtime use for the
 * built-in executors too) whose impls all run th_rt_user_kernel_adapter, plus a parallel array of the
 * public kernels. A compilation takes a private copy (th_registry_snapshot), so adding impls or freeing
 * the executor later never touches a compiled program: the runtime copies each step's public kernel
 * at compile time (th_registry_user_kernel) and hands it to the adapter through the run-time env.
 * The _ex variants (a binding's one callback for many ops) add a user pointer: an op keeps it with its
 * callbacks; an executor keeps one per impl, next to its kernel and its failable checker, and the
 * execution pass asks th_registry_check, the runtime th_registry_user_data (copied per step).
 *
 * Everything mutable is guarded by one mutex (registration is rare; lookups of unknown names take it
 * briefly). Callbacks are never called with it held. */
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <threads.h>

#include "core/ir.h"
#include "executors/kernel.h"
#include "thunder/executor.h"

typedef struct reg_op {
  th_symbol sym; /* first: the core sees &op->sym */
  th_meta_fn meta;
  th_autocast_rule_fn autocast;
  th_meta_ex_fn meta_ex;             /* th_op_register_ex: these instead, with user */
  th_autocast_rule_ex_fn autocast_ex;
  void *user;
} reg_op;

struct th_executor {
  th_executor_desc desc; /* first: a snapshot is a th_executor too; desc.impls == impls */
  char *name;
  th_operator_impl *impls;
  th_kernel_fn *fns; /* fns[i]: the public kernel of impls[i] */
  th_checker_ex_fn *checkers_ex; /* th_executor_add_impl_ex: checkers_ex[i] (or NULL) and users[i] */
  void **users;
  int cap;
};

static once_flag reg_once = ONCE_FLAG_INIT;
static struct {
  bool ok;
  mtx_t mtx;
  th_arena *arena; /* registered ops: symbols, names, schemas (lives for the process) */
  reg_op **ops;
  int nops, capops;
  th_executor **execs;
  int nexecs, capexecs;
} reg;

static void reg_init(void) {
  if (mtx_init(&reg.mtx, mtx_plain) != thrd_success) return;
  if (!(reg.arena = th_arena_new())) {
    mtx_destroy(&reg.mtx);
    return;
  }
  reg.ok = true;
}

static bool reg_lock(void) {
  call_once(&reg_once, reg_init);
  if (!reg.ok) return false;
  mtx_lock(&reg.mtx);
  return true;
}

static void reg_unlock(void) { mtx_unlock(&reg.mtx); }

/* ---- errors from callbacks ------------------------------------------------------------------------ */

/* A callback of op `qualname` failed with st: its message with the op's name in front (once), or
 * "<op>: <what> failed (<Status>)" when it set none. */
static th_status callback_error(const char *qualname, th_status st, const char *what) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", th_last_status() == TH_OK ? "" : th_last_error());
  size_t n = strlen(qualname);
  if (!msg[0]) return th_error(st, "%s: %s failed (%s)", qualname, what, th_status_name(st));
  if (!strncmp(msg, qualname, n) && msg[n] == ':') return th_error(st, "%s", msg);
  return th_error(st, "%s: %s", qualname, msg);
}

/* ---- operators: the meta and autocast adapters ------------------------------------------------------ */

th_tensor_meta th_tensor_meta_of(const th_value *v) {
  th_tensor_meta m;
  memset(&m, 0, sizeof m);
  m.dtype = TH_DTYPE_COUNT;
  if (!v || !v->is_tensor) return m;
  m.dtype = v->dtype;
  m.device = v->device;
  m.ndim = v->ndim;
  memcpy(m.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
  return m;
}

static th_status reg_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const reg_op *op = (const reg_op *)(const void *)sym;
  const th_schema *sc = &sym->schema;
  int fixed = sc->ret == TH_RT_TENSOR ? 1 : sc->ret == TH_RT_TUPLE ? sc->nret : sc->ret == TH_RT_NONE ? 0 : -1;
  th_tensor_meta metas[TH_META_MAX_OUTPUTS];
  memset(metas, 0, sizeof metas);
  int n = fixed >= 0 ? fixed : TH_META_MAX_OUTPUTS;
  th_clear_error();
  th_status st = op->meta_ex ? op->meta_ex(args, sc->nparams, metas, &n, op->user)
                             : op->meta(args, sc->nparams, metas, &n);
  if (st != TH_OK) return callback_error(sym->qualname, st, "its meta");
  if (fixed >= 0 ? n != fixed : (n < 0 || n > TH_META_MAX_OUTPUTS))
    return th_error(TH_ERR_RUNTIME, "%s: its meta produced %d outputs, but its schema returns %s%d", sym->qualname,
                    n, fixed >= 0 ? "" : "at most ", fixed >= 0 ? fixed : TH_META_MAX_OUTPUTS);
  th_arg *items = n ? th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n) : NULL;
  if (n && !items) return TH_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const th_tensor_meta *m = &metas[i];
    if ((unsigned)m->dtype >= TH_DTYPE_COUNT)
      return th_error(TH_ERR_RUNTIME, "%s: its meta gave output %d an invalid dtype (%d)", sym->qualname, i,
                      (int)m->dtype);
    th_device dev = m->device;
    if ((dev.type != TH_CPU && dev.type != TH_CUDA && dev.type != TH_META) || dev.index < 0)
      return th_error(TH_ERR_RUNTIME, "%s: its meta gave output %d an invalid device", sym->qualname, i);
    if (dev.type != TH_CUDA) dev.index = 0;
    th_value *v = th_value_new_tensor(tr, m->dtype, dev, m->ndim, m->shape, false);
    if (!v) return th_last_status() == TH_OK ? TH_ERR_NOMEM : th_last_status();
    items[i] = th_arg_value(v);
  }
  switch (sc->ret) {
    case TH_RT_TENSOR: *out = items[0]; break;
    case TH_RT_TUPLE: *out = th_arg_tuple(n, items); break;
    case TH_RT_TENSOR_LIST: *out = th_arg_list(n, items); break;
    default: *out = th_arg_none(); break;
  }
  return TH_OK;
}

#define AC_ELIGIBLE ((1u << TH_F16) | (1u << TH_BF16) | (1u << TH_F32))

static th_status reg_autocast(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                              th_device_type device_type) {
  const reg_op *op = (const reg_op *)(const void *)sym;
  int n = sym->schema.nparams;
  th_dtype *cast_to = th_arena_alloc(tr->arena, sizeof(th_dtype) * (size_t)(n ? n : 1));
  if (!cast_to) return TH_ERR_NOMEM;
  for (int i = 0; i < n; i++) cast_to[i] = TH_DTYPE_COUNT;
  th_clear_error();
  th_status st = op->autocast_ex ? op->autocast_ex(args, n, dtype, device_type, cast_to, op->user)
                                 : op->autocast(args, n, dtype, device_type, cast_to);
  if (st != TH_OK) return callback_error(sym->qualname, st, "its autocast rule");
  for (int i = 0; i < n; i++) {
    th_dtype to = cast_to[i];
    if (to == TH_DTYPE_COUNT) continue;
    if (to != TH_F16 && to != TH_BF16 && to != TH_F32 && to != TH_F64)
      return th_error(TH_ERR_VALUE,
                      "%s: its autocast rule casts argument '%s' to %s; expected float16, bfloat16, float32 or "
                      "float64",
                      sym->qualname, sym->schema.params[i].name,
                      (unsigned)to < TH_DTYPE_COUNT ? th_dtype_name(to) : "an invalid dtype");
    TH_TRY(th_autocast_cast(tr, &args[i], device_type, AC_ELIGIBLE, to));
  }
  return TH_OK;
}

/* ---- operators: registration and lookup --------------------------------------------------------------- */

static const reg_op *find_op_locked(const char *qualname) {
  for (int i = 0; i < reg.nops; i++)
    if (!strcmp(reg.ops[i]->sym.qualname, qualname)) return reg.ops[i];
  return NULL;
}

const th_symbol *th_registry_lookup(const char *qualname) {
  if (!qualname || !reg_lock()) return NULL;
  const reg_op *op = find_op_locked(qualname);
  reg_unlock();
  return op ? &op->sym : NULL;
}

const th_symbol *th_registry_symbol(th_op_id id) {
  long k = (long)id - (long)TH_OP_REGISTERED;
  if (k < 0 || !reg_lock()) return NULL;
  const reg_op *op = k < reg.nops ? reg.ops[k] : NULL;
  reg_unlock();
  return op ? &op->sym : NULL;
}

/* "a.b.name": dotted Python identifiers, at least two; *last = the final one. */

/* Module names printed traces use (`prims.add`, `ltorch.gelu`, `dtypes.float32`, `devices.Device`,
 * `thunder`, `torch`, `Tensor`): neither a user op's module nor an executor's name (a Python executor's
 * ops print as `<executor>.<op>`) may take one. */
static bool reserved_module(const char *m) {
  static const char *const reserved[] = {"prims", "ltorch", "torch", "Tensor", "thunder", "dtypes", "devices"};
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(m, reserved[i])) return true;
  return false;
}

static th_status check_qualname(const char *q, const char **last) {
  size_t n = strlen(q);
  if (n == 0 || n > 200)
    return th_error(TH_ERR_VALUE, "th_op_register: invalid op name '%.200s': expected 'module.name'", q);
  char buf[201];
  memcpy(buf, q, n + 1);
  int parts = 0;
  for (char *p = buf, *dot;; p = dot + 1) {
    dot = strchr(p, '.');
    if (dot) *dot = 0;
    if (!th_is_py_name(p))
      return th_error(TH_ERR_VALUE,
                      "th_op_register: invalid op name '%s': expected 'module.name' made of Python identifiers", q);
    if (parts++ == 0 && reserved_module(p))
      return th_error(TH_ERR_VALUE, "th_op_register: invalid op name '%s': the module '%s' is reserved for "
                      "built-in ops", q, p);
    if (!dot) break;
  }
  if (parts < 2)
    return th_error(TH_ERR_VALUE, "th_op_register: invalid op name '%s': expected 'module.name' (a module is "
                    "needed, as Thunder prints `module.name(...)`)", q);
  *last = strrchr(q, '.') + 1;
  return TH_OK;
}

static th_status tags_to_internal(unsigned tags, bool has_rule, unsigned *out) {
  const unsigned policies = TH_OPF_AUTOCAST_LOWER | TH_OPF_AUTOCAST_FP32 | TH_OPF_AUTOCAST_PROMOTE;
  const unsigned allowed = TH_OPF_PRIM | TH_OPF_RANDOM | TH_OPF_VIEW | policies;
  if (tags & ~allowed)
    return th_error(TH_ERR_VALUE, "th_op_register: unsupported tags 0x%x (a registered op may carry TH_OPF_PRIM, "
                    "TH_OPF_RANDOM, TH_OPF_VIEW and one TH_OPF_AUTOCAST_* policy; in-place and utility ops cannot "
                    "be registered)", tags & ~allowed);
  unsigned p = tags & policies;
  if (p & (p - 1)) return th_error(TH_ERR_VALUE, "th_op_register: more than one TH_OPF_AUTOCAST_* policy");
  if (p && has_rule)
    return th_error(TH_ERR_VALUE, "th_op_register: give either an autocast rule function or a TH_OPF_AUTOCAST_* "
                    "policy, not both");
  unsigned t = 0;
  if (tags & TH_OPF_RANDOM) t |= TH_TAG_RANDOM | TH_TAG_DONT_DCE;
  if (tags & TH_OPF_VIEW) t |= TH_TAG_VIEW;
  if (tags & TH_OPF_AUTOCAST_LOWER) t |= TH_TAG_AC_LOWER;
  if (tags & TH_OPF_AUTOCAST_FP32) t |= TH_TAG_AC_FP32;
  if (tags & TH_OPF_AUTOCAST_PROMOTE) t |= TH_TAG_AC_PROMOTE;
  *out = t;
  return TH_OK;
}

/* th_op_register and th_op_register_ex: exactly one of meta / meta_ex, at most one of autocast /
 * autocast_ex. */
static th_status op_register(const char *qualname, const char *schema, th_meta_fn meta, th_meta_ex_fn meta_ex,
                             th_autocast_rule_fn autocast, th_autocast_rule_ex_fn autocast_ex, unsigned tags,
                             void *user) {
  if (!qualname || !schema || (!meta && !meta_ex))
    return th_error(TH_ERR_VALUE, "th_op_register: %s is NULL", !qualname ? "qualname" : !schema ? "schema" : "meta");
  const char *last = NULL;
  TH_TRY(check_qualname(qualname, &last));
  unsigned itags = 0;
  TH_TRY(tags_to_internal(tags, autocast != NULL || autocast_ex != NULL, &itags));
  const th_symbol *existing = th_symbol_lookup(qualname);
  if (existing) {
    if (!strcmp(existing->qualname, qualname))
      return th_error(TH_ERR_VALUE, "th_op_register: op '%s' is already registered", qualname);
    return th_error(TH_ERR_VALUE, "th_op_register: '%s' already names the op %s", qualname, existing->qualname);
  }
  /* the schema, checked in a scratch arena first (a rejected one leaves nothing behind) */
  th_arena *scratch = th_arena_new();
  if (!scratch) return TH_ERR_NOMEM;
  th_schema parsed;
  const char *nm;
  size_t nmlen;
  th_status st = th_schema_parse(schema, scratch, true, &parsed, &nm, &nmlen);
  if (st == TH_OK && (nmlen != strlen(last) || strncmp(nm, last, nmlen)))
    st = th_error(TH_ERR_VALUE, "th_op_register: the schema of '%s' names the op '%.*s'; expected '%s(...)'",
                  qualname, (int)(nmlen > 100 ? 100 : nmlen), nm, last);
  if (st == TH_OK && parsed.ret == TH_RT_TUPLE && parsed.nret > TH_META_MAX_OUTPUTS)
    st = th_error(TH_ERR_VALUE, "th_op_register: '%s' returns %d tensors; at most %d", qualname, parsed.nret,
                  TH_META_MAX_OUTPUTS);
  th_arena_free(scratch);
  TH_TRY(st);

  if (!reg_lock()) return th_error(TH_ERR_NOMEM, "th_op_register: cannot set up the op registry");
  st = TH_OK;
  if (find_op_locked(qualname)) {
    st = th_error(TH_ERR_VALUE, "th_op_register: op '%s' is already registered", qualname);
    goto out;
  }
  if (reg.nops == reg.capops) {
    int cap = reg.capops ? 2 * reg.capops : 16;
    reg_op **ops = th_realloc(reg.ops, sizeof(reg_op *) * (size_t)cap);
    if (!ops) {
      st = th_error(TH_ERR_NOMEM, "out of memory registering op '%s'", qualname);
      goto out;
    }
    reg.ops = ops;
    reg.capops = cap;
  }
  reg_op *op = th_arena_alloc(reg.arena, sizeof *op);
  if (!op) {
    st = th_error(TH_ERR_NOMEM, "out of memory registering op '%s'", qualname);
    goto out;
  }
  th_symbol *s = &op->sym;
  s->id = (th_op_id)(TH_OP_REGISTERED + reg.nops);
  s->qualname = th_arena_strdup(reg.arena, qualname);
  s->module = th_arena_strndup(reg.arena, qualname, (size_t)(last - 1 - qualname));
  s->name = th_arena_strdup(reg.arena, last);
  s->schema_text = th_arena_strdup(reg.arena, schema);
  if (!s->qualname || !s->module || !s->name || !s->schema_text ||
      th_schema_parse(s->schema_text, reg.arena, true, &s->schema, NULL, NULL) != TH_OK) {
    st = th_error(TH_ERR_NOMEM, "out of memory registering op '%s'", qualname);
    goto out;
  }
  s->tags = itags;
  s->is_prim = true;
  s->meta = reg_meta;
  s->autocast = autocast || autocast_ex ? reg_autocast : NULL;
  op->meta = meta;
  op->autocast = autocast;
  op->meta_ex = meta_ex;
  op->autocast_ex = autocast_ex;
  op->user = user;
  reg.ops[reg.nops++] = op;
out:
  reg_unlock();
  return st;
}

th_status th_op_register(const char *qualname, const char *schema, th_meta_fn meta, th_autocast_rule_fn autocast,
                         unsigned tags) {
  return op_register(qualname, schema, meta, NULL, autocast, NULL, tags, NULL);
}

th_status th_op_register_ex(const char *qualname, const char *schema, th_meta_ex_fn meta,
                            th_autocast_rule_ex_fn autocast, unsigned tags, void *user) {
  return op_register(qualname, schema, NULL, meta, NULL, autocast, tags, user);
}

/* ---- executors ------------------------------------------------------------------------------------------ */

static th_executor *find_exec_locked(const char *name) {
  for (int i = 0; i < reg.nexecs; i++)
    if (!strcmp(reg.execs[i]->name, name)) return reg.execs[i];
  return NULL;
}

static void exec_free(th_executor *e) {
  if (!e) return;
  th_free(e->name);
  th_free(e->impls);
  th_free(e->fns);
  th_free(e->checkers_ex);
  th_free(e->users);
  th_free(e);
}

th_executor *th_executor_new(const char *name) {
  if (!name) {
    th_error(TH_ERR_VALUE, "th_executor_new: the name is NULL");
    return NULL;
  }
  if (!th_is_py_name(name) || strlen(name) > 64) {
    th_error(TH_ERR_VALUE, "th_executor_new: invalid executor name '%.64s': expected a Python identifier of at "
             "most 64 characters", name);
    return NULL;
  }
  if (!strcmp(name, th_eager_executor.name) || !strcmp(name, th_blas_executor.name) || !strcmp(name, "fuser")) {
    th_error(TH_ERR_VALUE, "th_executor_new: an executor named '%s' is already registered (built in)", name);
    return NULL;
  }
  if (reserved_module(name)) {
    th_error(TH_ERR_VALUE, "th_executor_new: invalid executor name '%s': the name is reserved (printed traces use "
             "it as a module)", name);
    return NULL;
  }
  th_executor *e = th_calloc(1, sizeof *e);
  if (e) e->name = th_strdup(name);
  if (!e || !e->name) {
    exec_free(e);
    th_error(TH_ERR_NOMEM, "out of memory creating executor '%s'", name);
    return NULL;
  }
  e->desc.name = e->name;
  if (!reg_lock()) {
    exec_free(e);
    th_error(TH_ERR_NOMEM, "th_executor_new: cannot set up the executor registry");
    return NULL;
  }
  th_status st = TH_OK;
  if (find_exec_locked(name)) {
    st = th_error(TH_ERR_VALUE, "th_executor_new: an executor named '%s' is already registered", name);
  } else if (reg.nexecs == reg.capexecs) {
    int cap = reg.capexecs ? 2 * reg.capexecs : 8;
    th_executor **ex = th_realloc(reg.execs, sizeof(th_executor *) * (size_t)cap);
    if (!ex) st = th_error(TH_ERR_NOMEM, "out of memory creating executor '%s'", name);
    else {
      reg.execs = ex;
      reg.capexecs = cap;
    }
  }
  if (st == TH_OK) reg.execs[reg.nexecs++] = e;
  reg_unlock();
  if (st != TH_OK) {
    exec_free(e);
    return NULL;
  }
  return e;
}

void th_executor_free(th_executor *ex) {
  if (!ex) return;
  if (reg_lock()) {
    for (int i = 0; i < reg.nexecs; i++)
      if (reg.execs[i] == ex) {
        memmove(reg.execs + i, reg.execs + i + 1, sizeof(th_executor *) * (size_t)(reg.nexecs - i - 1));
        reg.nexecs--;
        break;
      }
    if (reg.nexecs == 0) { /* the last one: give the list back too (no leak reports at exit) */
      th_free(reg.execs);
      reg.execs = NULL;
      reg.capexecs = 0;
    }
    reg_unlock();
  }
  exec_free(ex);
}

const char *th_executor_name(const th_executor *ex) { return ex ? ex->name : NULL; }

static th_status add_impl(th_executor *ex, const char *qualname, th_kernel_fn fn, th_checker_fn checker,
                          th_checker_ex_fn checker_ex, void *user) {
  if (!ex || !qualname || !fn)
    return th_error(TH_ERR_VALUE, "th_executor_add_impl: %s is NULL",
                    !ex ? "the executor" : !qualname ? "qualname" : "the kernel");
  const th_symbol *sym = th_symbol_lookup(qualname);
  if (!sym) return th_error(TH_ERR_VALUE, "th_executor_add_impl: unknown op '%.200s'", qualname);
  if (strcmp(sym->qualname, qualname))
    return th_error(TH_ERR_VALUE, "th_executor_add_impl: '%.200s' names %s; give its qualified name", qualname,
                    sym->qualname);
  if (sym->tags & TH_TAG_UTILITY)
    return th_error(TH_ERR_VALUE, "th_executor_add_impl: %s computes nothing; executors do not implement it",
                    sym->qualname);
  if (!reg_lock()) return th_error(TH_ERR_NOMEM, "th_executor_add_impl: cannot set up the executor registry");
  th_status st = TH_OK;
  for (int i = 0; i < ex->desc.nimpls && st == TH_OK; i++)
    if (ex->impls[i].op == sym->id)
      st = th_error(TH_ERR_VALUE, "th_executor_add_impl: executor '%s' already implements %s", ex->name,
                    sym->qualname);
  if (st == TH_OK && ex->desc.nimpls == ex->cap) {
    int cap = ex->cap ? 2 * ex->cap : 8;
    th_operator_impl *impls = th_realloc(ex->impls, sizeof *impls * (size_t)cap);
    if (impls) ex->impls = impls;
    th_kernel_fn *fns = impls ? th_realloc(ex->fns, sizeof *fns * (size_t)cap) : NULL;
    if (fns) ex->fns = fns;
    th_checker_ex_fn *cks = fns ? th_realloc(ex->checkers_ex, sizeof *cks * (size_t)cap) : NULL;
    if (cks) ex->checkers_ex = cks;
    void **users = cks ? th_realloc(ex->users, sizeof *users * (size_t)cap) : NULL;
    if (users) ex->users = users;
    if (!impls || !fns || !cks || !users)
      st = th_error(TH_ERR_NOMEM, "out of memory adding %s to executor '%s'", sym->qualname, ex->name);
    else ex->cap = cap;
  }
  if (st == TH_OK) {
    int i = ex->desc.nimpls;
    ex->impls[i].op = sym->id;
    ex->impls[i].kernel = th_rt_user_kernel_adapter;
    ex->impls[i].checker = checker;
    ex->fns[i] = fn;
    ex->checkers_ex[i] = checker_ex;
    ex->users[i] = user;
    ex->desc.impls = ex->impls;
    ex->desc.nimpls = i + 1;
  }
  reg_unlock();
  return st;
}

th_status th_executor_add_impl(th_executor *ex, const char *qualname, th_kernel_fn fn, th_checker_fn checker) {
  return add_impl(ex, qualname, fn, checker, NULL, NULL);
}

th_status th_executor_add_impl_ex(th_executor *ex, const char *qualname, th_kernel_fn fn, th_checker_ex_fn checker,
                                  void *user) {
  return add_impl(ex, qualname, fn, NULL, checker, user);
}

/* ---- what compilation uses (kernel.h) ---------------------------------------------------------------- */

th_status th_registry_snapshot(const char *name, th_executor_desc **out) {
  *out = NULL;
  if (!name || !reg_lock()) return TH_OK;
  th_status st = TH_OK;
  const th_executor *e = find_exec_locked(name);
  if (e) {
    th_executor *c = th_calloc(1, sizeof *c);
    int n = e->desc.nimpls;
    if (c) {
      c->name = th_strdup(e->name);
      c->impls = th_malloc(sizeof *c->impls * (size_t)(n ? n : 1));
      c->fns = th_malloc(sizeof *c->fns * (size_t)(n ? n : 1));
      c->checkers_ex = th_malloc(sizeof *c->checkers_ex * (size_t)(n ? n : 1));
      c->users = th_malloc(sizeof *c->users * (size_t)(n ? n : 1));
    }
    if (!c || !c->name || !c->impls || !c->fns || !c->checkers_ex || !c->users) {
      exec_free(c);
      st = th_error(TH_ERR_NOMEM, "out of memory compiling with executor '%s'", name);
    } else {
      if (n) {
        memcpy(c->impls, e->impls, sizeof *c->impls * (size_t)n);
        memcpy(c->fns, e->fns, sizeof *c->fns * (size_t)n);
        memcpy(c->checkers_ex, e->checkers_ex, sizeof *c->checkers_ex * (size_t)n);
        memcpy(c->users, e->users, sizeof *c->users * (size_t)n);
      }
      c->cap = n;
      c->desc.name = c->name;
      c->desc.nimpls = n;
      c->desc.impls = c->impls;
      *out = &c->desc;
    }
  }
  reg_unlock();
  return st;
}

void th_registry_snapshot_free(th_executor_desc *d) { exec_free((th_executor *)(void *)d); }

th_kernel_fn th_registry_user_kernel(const th_executor_desc *d, const th_operator_impl *impl) {
  if (!d || !impl || impl->kernel != th_rt_user_kernel_adapter) return NULL;
  const th_executor *e = (const th_executor *)(const void *)d; /* only registry descriptors use the adapter */
  ptrdiff_t i = impl - e->impls;
  return i >= 0 && i < d->nimpls ? e->fns[i] : NULL;
}

/* impl's index in registry descriptor d (a snapshot), or -1 for a built-in descriptor's impl. */
static ptrdiff_t impl_index(const th_executor_desc *d, const th_operator_impl *impl) {
  if (!d || !impl || impl->kernel != th_rt_user_kernel_adapter) return -1;
  const th_executor *e = (const th_executor *)(const void *)d; /* only registry descriptors use the adapter */
  ptrdiff_t i = impl - e->impls;
  return i >= 0 && i < d->nimpls ? i : -1;
}

void *th_registry_user_data(const th_executor_desc *d, const th_operator_impl *impl) {
  ptrdiff_t i = impl_index(d, impl);
  return i >= 0 ? ((const th_executor *)(const void *)d)->users[i] : NULL;
}

th_status th_registry_check(const th_executor_desc *d, const th_operator_impl *impl, const th_bsym *b, bool *claims) {
  ptrdiff_t i = impl_index(d, impl);
  const th_executor *e = (const th_executor *)(const void *)d;
  if (i >= 0 && e->checkers_ex[i]) {
    bool ok = false;
    th_clear_error();
    th_status st = e->checkers_ex[i](b, e->users[i], &ok);
    if (st != TH_OK) {
      char what[96];
      snprintf(what, sizeof what, "the checker of executor '%s'", d->name);
      return callback_error(b->sym->qualname, st, what);
    }
    *claims = ok;
    return TH_OK;
  }
  *claims = !impl->checker || impl->checker(b);
  return TH_OK;
}

void th_registry_executor_names(char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  if (!reg_lock()) return;
  size_t k = 0;
  for (int i = 0; i < reg.nexecs && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", reg.execs[i]->name);
  reg_unlock();
}

const char *th_bsym_executor(const th_bsym *b) { return b ? b->executor : NULL; }

/* ---- what a user kernel sees ------------------------------------------------------------------------- */

struct th_kernel_ctx {
  th_rt_env *env;
  const th_bsym *b;
};

void *th_kernel_user(const th_kernel_ctx *k) { return k ? th_rt_user_data(k->env) : NULL; }

th_status th_rt_user_kernel_adapter(th_rt_env *env, const th_bsym *b) {
  th_kernel_fn fn = th_rt_user_kernel(env);
  if (!fn) return th_error(TH_ERR_RUNTIME, "%s: no kernel to run", b->sym->qualname);
  th_kernel_ctx k = {env, b};
  th_clear_error(); /* a failing kernel that sets no message reads "<op>: failed (...)" */
  return fn(&k);
}

typedef struct {
  int want, k;
  th_value *v;
} nth_ctx;

static void nth_cb(th_value *v, void *p) {
  nth_ctx *c = p;
  if (c->k++ == c->want) c->v = v;
}

static th_value *nth_output(const th_kernel_ctx *k, int j) {
  nth_ctx c = {j, 0, NULL};
  if (k && j >= 0) th_arg_foreach_value(&k->b->out, nth_cb, &c);
  return c.v;
}

int th_kernel_num_args(const th_kernel_ctx *k) { return k ? k->b->nargs : 0; }

th_arg th_kernel_arg(const th_kernel_ctx *k, int i) {
  return k && i >= 0 && i < k->b->nargs ? k->b->args[i] : th_arg_none();
}

th_tensor *th_kernel_tensor(th_kernel_ctx *k, int i) {
  return k && i >= 0 && i < k->b->nargs ? th_rt_tensor(k->env, &k->b->args[i]) : NULL;
}

th_tensor *th_kernel_tensor_item(th_kernel_ctx *k, int i, int j) {
  if (!k || i < 0 || i >= k->b->nargs) return NULL;
  const th_arg *a = &k->b->args[i];
  if ((a->kind != TH_ARG_LIST && a->kind != TH_ARG_TUPLE) || j < 0 || j >= a->u.seq.n) return NULL;
  return th_rt_tensor(k->env, &a->u.seq.items[j]);
}

bool th_kernel_number(th_kernel_ctx *k, int i, double *f, int64_t *iv, bool *is_float) {
  if (!k || i < 0 || i >= k->b->nargs) return false;
  return th_rt_number(k->env, &k->b->args[i], f, iv, is_float);
}

int th_kernel_num_outputs(const th_kernel_ctx *k) {
  nth_ctx c = {-1, 0, NULL};
  if (k) th_arg_foreach_value(&k->b->out, nth_cb, &c);
  return c.k;
}

const th_value *th_kernel_output_value(const th_kernel_ctx *k, int j) { return nth_output(k, j); }

th_tensor *th_kernel_output(th_kernel_ctx *k, int j) {
  th_value *v = nth_output(k, j);
  if (!v) {
    th_error(TH_ERR_INDEX, "th_kernel_output: no output %d (the op has %d)", j, th_kernel_num_outputs(k));
    return NULL;
  }
  return th_rt_alloc_output(k->env, v);
}

th_status th_kernel_set_output(th_kernel_ctx *k, int j, th_tensor *t) {
  th_value *v = nth_output(k, j);
  if (!v) {
    th_tensor_release(t);
    return th_error(TH_ERR_INDEX, "th_kernel_set_output: no output %d (the op has %d)", j, th_kernel_num_outputs(k));
  }
  if (!t) return th_error(TH_ERR_VALUE, "th_kernel_set_output: the tensor for output %d is NULL", j);
  return th_rt_set(k->env, v, t);
}
