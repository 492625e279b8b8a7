/* registry.c — the executors of the public extension API (thunder/executor.h): user executors and
 * what a user kernel sees. The operators registered at run time are the ops layer's
 * (ops/op_register.c).
 *
 * A th_executor is a th_executor_desc (what the execution pass and the runtime use for the built-in
 * executors too) whose impls all run th_rt_user_kernel_adapter, plus a parallel array of the public
 * kernels. A compilation takes a private copy (th_registry_snapshot), so adding impls or freeing the
 * executor later never touches a compiled program: the runtime copies each step's public kernel at
 * compile time (th_registry_user_kernel) and hands it to the adapter through the run-time env. The _ex
 * variant (a binding's one callback for many ops) adds a user pointer: an executor keeps one per impl,
 * next to its kernel and its failable checker, and the execution pass asks th_registry_check, the
 * runtime th_registry_user_data (copied per step).
 *
 * Everything mutable is guarded by one mutex (registration is rare). Callbacks are never called with
 * it held. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>

#include "core/ir.h"
#include "executors/kernel.h"
#include "ops/ops.h"
#include "thunder/executor.h"

struct th_executor {
  th_executor_desc desc; /* first: a snapshot is a th_executor too; desc.impls == impls */
  char *name;
  th_operator_impl *impls;
  th_kernel_fn *fns;             /* fns[i]: the public kernel of impls[i] */
  th_checker_ex_fn *checkers_ex; /* th_executor_add_impl_ex: checkers_ex[i] (or NULL) and users[i] */
  void **users;
  int cap;
};

static once_flag reg_once = ONCE_FLAG_INIT;
static struct {
  bool ok;
  mtx_t mtx;
  th_executor **execs;
  int nexecs, capexecs;
} reg;

static void reg_init(void) { reg.ok = mtx_init(&reg.mtx, mtx_plain) == thrd_success; }

static bool reg_lock(void) {
  call_once(&reg_once, reg_init);
  if (!reg.ok) return false;
  mtx_lock(&reg.mtx);
  return true;
}

static void reg_unlock(void) { mtx_unlock(&reg.mtx); }

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
    th_error(TH_ERR_VALUE,
             "th_executor_new: invalid executor name '%.64s': expected a Python identifier of at "
             "most 64 characters",
             name);
    return NULL;
  }
  if (!strcmp(name, th_eager_executor.name) || !strcmp(name, th_blas_executor.name) || !strcmp(name, "fuser")) {
    th_error(TH_ERR_VALUE, "th_executor_new: an executor named '%s' is already registered (built in)", name);
    return NULL;
  }
  if (th_op_module_reserved(name)) {
    th_error(TH_ERR_VALUE,
             "th_executor_new: invalid executor name '%s': the name is reserved (printed traces use "
             "it as a module)",
             name);
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
    if (!ex)
      st = th_error(TH_ERR_NOMEM, "out of memory creating executor '%s'", name);
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
                    !ex         ? "the executor"
                    : !qualname ? "qualname"
                                : "the kernel");
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
      st = th_error(TH_ERR_VALUE, "th_executor_add_impl: executor '%s' already implements %s", ex->name, sym->qualname);
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
    else
      ex->cap = cap;
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
      return th_op_callback_error(b->sym->qualname, st, what);
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
