/* pipeline.c — the compile pipeline: a trace in, a program out (thunder/jit.h).
 *
 *   verify -> DCE -> CSE -> [fuse attention] -> execution pass -> fuser -> delete last used -> th_program_build
 *
 * Each stage is one function (pipeline.h). th_program_compile_with runs them in order, keeps every
 * trace a stage makes, resolves the kernel of each claimed bsym of the last trace (the executor that
 * claimed it, its user kernel and pointer, the fuser's compiled region) and hands traces, claims and
 * compiled regions to the runtime, which lays the program out (th_program_build). th_program_compile
 * resolves executor names first; th_compile_prepare runs the stages before the execution pass for
 * frontends that transform the cleaned trace themselves (the grad transform) before compiling it. */
#include <stdio.h>
#include <string.h>

#include "compile/pipeline.h"
#include "executors/fuser/fuser.h"
#include "executors/passes.h"
#include "runtime/program.h"
#include "thunder/transform.h"
#include "transforms/transforms.h"

/* ---- verify: values and devices ------------------------------------------------------------------- */

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
      return th_error(TH_ERR_DEVICE,
                      "device %s requested, but this machine has no CUDA device; run it "
                      "on the CPU with --device cpu",
                      buf);
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
    return th_error(TH_ERR_DEVICE,
                    "trace recorded for %s, but this machine has no CUDA device; run it "
                    "on the CPU with --device cpu (CLI) or th_compile_options.device_override (C); from "
                    "Python, keep the tensors on the CPU (no .to(\"cuda\") or device=\"cuda\" in the function)",
                    buf);
  return th_error(TH_ERR_DEVICE,
                  "trace recorded for %s, which cannot run; run it on the CPU with "
                  "--device cpu (CLI) or th_compile_options.device_override (C); from Python, keep the "
                  "tensors on the CPU",
                  buf);
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
  th_bsym_foreach_value(b, TH_BSYM_ALL, vcheck_cb, c); /* a no-op once c->st is an error */
  for (int k = 0; k < b->nsubs && c->st == TH_OK; k++) check_bsym_values(b->subs[k], c, depth + 1);
  return c->st;
}

static th_status check_values(const th_trace *tr) {
  vcheck_ctx c = {TH_OK};
  for (int i = 0; i < tr->inputs.n && c.st == TH_OK; i++) vcheck_cb(tr->inputs.items[i], &c);
  for (int i = 0; i < tr->bsyms.n && c.st == TH_OK; i++) check_bsym_values(tr->bsyms.items[i], &c, 0);
  return c.st;
}

th_status th_compile_stage_verify(const th_trace *tr, const th_compile_options *opts) {
  static const th_compile_options defaults = {0};
  TH_TRY(check_values(tr));
  TH_TRY(th_trace_verify(tr));
  return check_devices(tr, opts ? opts : &defaults);
}

/* ---- the stages that make traces ------------------------------------------------------------------ */

th_status th_compile_stage_dce(const th_trace *tr, th_trace **out) { return th_transform_dce(tr, out); }

th_status th_compile_stage_cse(const th_trace *tr, th_trace **out) { return th_transform_cse(tr, out); }

th_status th_compile_stage_execution(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                     th_trace **out) {
  return th_transform_for_execution(tr, execs, nexecs, out);
}

void th_compile_fusions_free(void *fusions) { th_fuser_set_free(fusions); }

th_status th_compile_stage_fuser(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                 const char *dump_dir, th_trace **out, void **fusions) {
  *out = NULL;
  *fusions = NULL;
  for (int i = 0; i < nexecs; i++)
    if (execs[i] == &th_fuser_executor) {
      th_fuser_set *set = NULL;
      th_status st = th_fuser_pass(tr, execs, nexecs, i, dump_dir, out, &set);
      *fusions = set;
      return st;
    }
  return TH_OK;
}

th_status th_compile_stage_del(const th_trace *tr, th_trace **out) { return th_del_last_used(tr, out); }

/* ---- claims: what runs each step ------------------------------------------------------------------ */

static const th_operator_impl *find_impl(const th_executor_desc *e, th_op_id id) {
  for (int i = 0; i < e->nimpls; i++)
    if (e->impls[i].op == id) return &e->impls[i];
  return NULL;
}

/* One claim per step of et (a top-level bsym not tagged UTILITY), in order: the kernel of the executor
 * named by the bsym's ->executor, its user kernel and pointer (copied: the executor may be freed
 * later) and, for the fuser, the compiled region. *claims is th_malloc'd (th_free). */
static th_status resolve_claims(const th_trace *et, const th_executor_desc *const *execs, int nexecs,
                                const th_fuser_set *fusions, th_rt_claim **claims, int *nclaims) {
  *claims = NULL;
  *nclaims = 0;
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) n += !(((const th_bsym *)et->bsyms.items[i])->sym->tags & TH_TAG_UTILITY);
  th_rt_claim *c = th_calloc((size_t)(n ? n : 1), sizeof *c);
  if (!c) return th_error(TH_ERR_NOMEM, "out of memory compiling a program");
  int k = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    if (b->sym->tags & TH_TAG_UTILITY) continue;
    th_status st = TH_OK;
    const th_operator_impl *impl = NULL;
    const th_executor_desc *owner = NULL;
    for (int e = 0; b->executor && e < nexecs && !impl; e++)
      if (!strcmp(execs[e]->name, b->executor)) impl = find_impl(owner = execs[e], b->sym->id);
    if (!b->executor)
      st = th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no executor claimed it", b->sym->qualname);
    else if (!impl || !impl->kernel)
      st = th_error(TH_ERR_NOT_IMPLEMENTED, "%s: claimed by executor '%s', which has no kernel for it",
                    b->sym->qualname, b->executor);
    else if (owner == &th_fuser_executor && !(c[k].data = th_fuser_set_find(fusions, b->sym->name)))
      st = th_error(TH_ERR_NOT_IMPLEMENTED, "%s: claimed by the fuser, which did not compile it", b->sym->qualname);
    if (st != TH_OK) {
      th_free(c);
      return st;
    }
    c[k].kernel = impl->kernel;
    c[k].user = th_registry_user_kernel(owner, impl);
    c[k].user_data = th_registry_user_data(owner, impl);
    k++;
  }
  *claims = c;
  *nclaims = k;
  return TH_OK;
}

/* ---- the pipeline --------------------------------------------------------------------------------- */

#define MAX_TRACES 8

/* The traces the stages made so far, in order, with their stage names. */
typedef struct {
  th_trace *traces[MAX_TRACES];
  const char *names[MAX_TRACES];
  int n;
} stage_list;

static const th_trace *stage_push(stage_list *l, const char *name, th_trace *t) {
  l->traces[l->n] = t;
  l->names[l->n++] = name;
  return t;
}

static void stage_list_free(stage_list *l) {
  for (int i = 0; i < l->n; i++) th_trace_free(l->traces[i]);
  l->n = 0;
}

static const unsigned skippable = TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE;

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
  if (o->skip_stages & ~skippable)
    return th_error(TH_ERR_VALUE,
                    "th_program_compile: skip_stages: expected TH_COMPILE_SKIP_DCE and "
                    "TH_COMPILE_SKIP_CSE bits only, got 0x%x",
                    o->skip_stages);
  TH_TRY(th_compile_stage_verify(tr, o));
  stage_list l = {{0}, {0}, 0};
  const th_trace *cur = tr;
  th_trace *t = NULL;
  void *fusions = NULL;
  th_rt_claim *claims = NULL;
  int nclaims = 0;
  th_status st = TH_OK;
  if (!(o->skip_stages & TH_COMPILE_SKIP_DCE) && (st = th_compile_stage_dce(cur, &t)) == TH_OK)
    cur = stage_push(&l, TH_STAGE_NAME_DCE, t);
  if (st == TH_OK && !(o->skip_stages & TH_COMPILE_SKIP_CSE) && (st = th_compile_stage_cse(cur, &t)) == TH_OK)
    cur = stage_push(&l, TH_STAGE_NAME_CSE, t);
  if (st == TH_OK && (st = th_fuse_attention(cur, &t)) == TH_OK && t) cur = stage_push(&l, TH_STAGE_NAME_ATTENTION, t);
  if (st == TH_OK && (st = th_compile_stage_execution(cur, execs, nexecs, &t)) == TH_OK)
    cur = stage_push(&l, TH_STAGE_NAME_EXECUTION, t);
  if (st == TH_OK && (st = th_compile_stage_fuser(cur, execs, nexecs, o->dump_dir, &t, &fusions)) == TH_OK && t)
    cur = stage_push(&l, TH_STAGE_NAME_FUSER, t);
  /* Delete Last Used ends the pipeline, as Thunder's: the program runs the del trace, whose dels are
   * utility bsyms (no steps); releases come from the runtime's slot analysis */
  if (st == TH_OK && (st = th_compile_stage_del(cur, &t)) == TH_OK) cur = stage_push(&l, TH_STAGE_NAME_DEL, t);
#ifndef NDEBUG
  if (st == TH_OK && (st = th_trace_verify(cur)) != TH_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    th_error(st, "the execution trace does not verify: %s", msg);
  }
#endif
  if (st == TH_OK) st = resolve_claims(cur, execs, nexecs, fusions, &claims, &nclaims);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory compiling a program");
    th_compile_fusions_free(fusions);
    stage_list_free(&l);
    return st;
  }
  th_rt_program_spec spec = {l.n,
                             l.traces,
                             l.names,
                             claims,
                             nclaims,
                             fusions,
                             th_compile_fusions_free,
                             o->has_device_override,
                             o->device_override,
                             o->seed};
  st = th_program_build(&spec, out); /* takes the traces and the regions, also on failure */
  th_free(claims);
  return st;
}

/* ---- executors by name ------------------------------------------------------------------------------ */

static const char *const default_executors[] = {"fuser", "blas", "eager"};

static const th_executor_desc *builtin_executor(const char *name) {
  if (!strcmp(name, th_blas_executor.name)) return &th_blas_executor;
  if (!strcmp(name, th_eager_executor.name)) return &th_eager_executor;
  if (!strcmp(name, th_fuser_executor.name)) return &th_fuser_executor;
  return NULL;
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
                  "eager, fuser%s%s)",
                  names[i] ? names[i] : "NULL", known[0] ? ", " : "", known);
  }
  if (st == TH_OK) {
    int had = th_rt_threads_enter();
    st = th_program_compile_with(tr, opts, execs, n, out);
    th_rt_threads_restore(had);
  }
  for (int i = 0; i < nsnaps; i++) th_registry_snapshot_free(snaps[i]);
  return st;
}

th_status th_compile_prepare(const th_trace *tr, const th_compile_options *opts, th_trace **dce, th_trace **cse) {
  if (dce) *dce = NULL;
  if (cse) *cse = NULL;
  if (!dce || !cse) return th_error(TH_ERR_VALUE, "th_compile_prepare: %s is NULL", !dce ? "dce" : "cse");
  if (!tr) return th_error(TH_ERR_VALUE, "th_compile_prepare: the trace is NULL");
  TH_TRY(th_compile_stage_verify(tr, opts));
  th_trace *d = NULL;
  TH_TRY(th_compile_stage_dce(tr, &d));
  th_status st = th_compile_stage_cse(d, cse);
  th_trace *fused = NULL;
  if (st == TH_OK && (st = th_fuse_attention(*cse, &fused)) == TH_OK && fused) {
    th_trace_free(*cse); /* the cleaned trace is the fused one; values live in the session */
    *cse = fused;
  }
  if (st != TH_OK) {
    th_trace_free(*cse);
    *cse = NULL;
    th_trace_free(d);
    return st;
  }
  *dce = d;
  return TH_OK;
}
