/* op_register.c — operators registered at run time (thunder/executor.h th_op_register): a registered
 * op is a th_symbol like the rows of ops.def (a prim: schema parsed by the same parser, tags, a meta),
 * embedded first in a reg_op that also holds the user's callbacks; the symbol's meta and autocast
 * hooks are the adapters below, which call the public callbacks and turn their answers into proxies
 * (th_value_new_tensor) or converts (th_autocast_cast). Core's symbol table holds the symbol
 * (th_symtab_register) and gives it the id TH_OP_REGISTERED + k, so lookup, CSE, verification and
 * claiming tell registered ops apart as they do built-in ones. Registered ops live for the process
 * (their memory is this file's arena). The _ex variant (a binding's one callback for many ops) adds a
 * user pointer that an op keeps with its callbacks.
 *
 * Registrations are serialized by one mutex (registration is rare); callbacks are never called with
 * it held. The registry of executors and their implementations is the executors layer's
 * (executors/registry.c). */
#include <stdio.h>
#include <string.h>
#include <threads.h>

#include "ops/ops.h"
#include "thunder/executor.h"

typedef struct reg_op {
  th_symbol sym; /* first: the core sees &op->sym */
  th_meta_fn meta;
  th_autocast_rule_fn autocast;
  th_meta_ex_fn meta_ex; /* th_op_register_ex: these instead, with user */
  th_autocast_rule_ex_fn autocast_ex;
  void *user;
} reg_op;

static once_flag reg_once = ONCE_FLAG_INIT;
static struct {
  bool ok;
  mtx_t mtx;
  th_arena *arena; /* registered ops: symbols, names, schemas (lives for the process) */
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

th_status th_op_callback_error(const char *qualname, th_status st, const char *what) {
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
  th_status st =
    op->meta_ex ? op->meta_ex(args, sc->nparams, metas, &n, op->user) : op->meta(args, sc->nparams, metas, &n);
  if (st != TH_OK) return th_op_callback_error(sym->qualname, st, "its meta");
  if (fixed >= 0 ? n != fixed : (n < 0 || n > TH_META_MAX_OUTPUTS))
    return th_error(TH_ERR_RUNTIME, "%s: its meta produced %d outputs, but its schema returns %s%d", sym->qualname, n,
                    fixed >= 0 ? "" : "at most ", fixed >= 0 ? fixed : TH_META_MAX_OUTPUTS);
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
  if (st != TH_OK) return th_op_callback_error(sym->qualname, st, "its autocast rule");
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

/* ---- registration ------------------------------------------------------------------------------------ */

/* A Python executor's ops print as `<executor>.<op>`, so the reserved names bind executors too. */
bool th_op_module_reserved(const char *m) {
  static const char *const reserved[] = {"prims", "ltorch", "torch", "Tensor", "thunder", "dtypes", "devices"};
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(m, reserved[i])) return true;
  return false;
}

/* "a.b.name": dotted Python identifiers, at least two; *last = the final one. */
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
    if (parts++ == 0 && th_op_module_reserved(p))
      return th_error(TH_ERR_VALUE,
                      "th_op_register: invalid op name '%s': the module '%s' is reserved for "
                      "built-in ops",
                      q, p);
    if (!dot) break;
  }
  if (parts < 2)
    return th_error(TH_ERR_VALUE,
                    "th_op_register: invalid op name '%s': expected 'module.name' (a module is "
                    "needed, as Thunder prints `module.name(...)`)",
                    q);
  *last = strrchr(q, '.') + 1;
  return TH_OK;
}

static th_status tags_to_internal(unsigned tags, bool has_rule, unsigned *out) {
  const unsigned policies = TH_OPF_AUTOCAST_LOWER | TH_OPF_AUTOCAST_FP32 | TH_OPF_AUTOCAST_PROMOTE;
  const unsigned allowed = TH_OPF_PRIM | TH_OPF_RANDOM | TH_OPF_VIEW | policies;
  if (tags & ~allowed)
    return th_error(TH_ERR_VALUE,
                    "th_op_register: unsupported tags 0x%x (a registered op may carry TH_OPF_PRIM, "
                    "TH_OPF_RANDOM, TH_OPF_VIEW and one TH_OPF_AUTOCAST_* policy; in-place and utility ops cannot "
                    "be registered)",
                    tags & ~allowed);
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
    st = th_error(TH_ERR_VALUE, "th_op_register: the schema of '%s' names the op '%.*s'; expected '%s(...)'", qualname,
                  (int)(nmlen > 100 ? 100 : nmlen), nm, last);
  if (st == TH_OK && parsed.ret == TH_RT_TUPLE && parsed.nret > TH_META_MAX_OUTPUTS)
    st = th_error(TH_ERR_VALUE, "th_op_register: '%s' returns %d tensors; at most %d", qualname, parsed.nret,
                  TH_META_MAX_OUTPUTS);
  th_arena_free(scratch);
  TH_TRY(st);

  if (!reg_lock()) return th_error(TH_ERR_NOMEM, "th_op_register: cannot set up the op registry");
  st = TH_OK;
  if (th_symbol_lookup(qualname)) {
    st = th_error(TH_ERR_VALUE, "th_op_register: op '%s' is already registered", qualname);
    goto out;
  }
  reg_op *op = th_arena_alloc(reg.arena, sizeof *op);
  if (!op) {
    st = th_error(TH_ERR_NOMEM, "out of memory registering op '%s'", qualname);
    goto out;
  }
  th_symbol *s = &op->sym;
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
  st = th_symtab_register(s);
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
