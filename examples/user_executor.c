/* user_executor.c — extending thunder-c from C (thunder/executor.h): a new operator, an executor that
 * implements it and takes over a built-in op, a trace that uses both, compiled, printed and run.
 *
 *   cex.axpby(Tensor x, Tensor y, /, *, float a=1.0, float b=1.0) -> Tensor    a*x + b*y, same shapes
 *
 * The executor "cex" implements cex.axpby and ltorch.gelu (exact, erf form). Its kernels share one
 * statistics record through the user pointer of th_executor_add_impl_ex; the gelu checker claims only
 * contiguous float32 calls, so a float64 gelu falls back to the next executor (eager runs its
 * decomposition). The program y = gelu(axpby(x, z, a=2, b=-0.5)) is checked against the same formula
 * evaluated in double precision here; the exit status is 0 when every element agrees within 1e-5.
 * Uses only the public headers and the shared library, as a C user would. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "thunder/thunder.h"

typedef struct cex_stats {
  int axpby_runs, gelu_runs, gelu_refused;
} cex_stats;

/* ---- the operator: schema + meta --------------------------------------------------------------- */

/* args: x, y, a, b (schema order, defaults filled in). Same dtype (float32 or float64) and shape. */
static th_status axpby_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout, void *user) {
  (void)nargs;
  (void)user;
  th_tensor_meta x = th_tensor_meta_of(args[0].u.value), y = th_tensor_meta_of(args[1].u.value);
  if (x.dtype != TH_F32 && x.dtype != TH_F64)
    return th_set_error(TH_ERR_TYPE, "expected x to be float32 or float64, but got %s", th_dtype_name(x.dtype));
  if (y.dtype != x.dtype)
    return th_set_error(TH_ERR_TYPE, "expected y to have x's dtype %s, but got %s", th_dtype_name(x.dtype),
                        th_dtype_name(y.dtype));
  if (y.ndim != x.ndim || memcmp(x.shape, y.shape, sizeof(int64_t) * (size_t)x.ndim))
    return th_set_error(TH_ERR_RUNTIME, "expected x and y to have the same shape");
  out[0] = x;
  *nout = 1;
  return TH_OK;
}

/* ---- the executor's kernels and checker ----------------------------------------------------------- */

static th_status axpby_kernel(th_kernel_ctx *k) {
  cex_stats *stats = th_kernel_user(k);
  th_tensor *x = th_kernel_tensor(k, 0), *y = th_kernel_tensor(k, 1);
  double a = 1, b = 1;
  th_kernel_number(k, 2, &a, NULL, NULL);
  th_kernel_number(k, 3, &b, NULL, NULL);
  th_tensor *o = th_kernel_output(k, 0); /* contiguous, the recorded dtype and shape */
  if (!o) return th_last_status();
  int64_t n = th_tensor_numel(o);
  for (int64_t i = 0; i < n; i++) { /* th_tensor_get_f64 follows strides: views are fine */
    double v = a * th_tensor_get_f64(x, i) + b * th_tensor_get_f64(y, i);
    if (th_tensor_dtype(o) == TH_F32)
      ((float *)th_tensor_data(o))[i] = (float)v;
    else
      ((double *)th_tensor_data(o))[i] = v;
  }
  stats->axpby_runs++;
  return TH_OK;
}

/* ltorch.gelu(Tensor a, /, *, str approximate='none'): the exact form only, float32 contiguous. */
static th_status gelu_checker(const th_bsym *b, void *user, bool *claims) {
  cex_stats *stats = user;
  th_arg a = th_bsym_arg(b, 0), approx = th_bsym_arg(b, 1);
  *claims = a.kind == TH_ARG_VALUE && th_value_dtype(a.u.value) == TH_F32 && approx.kind == TH_ARG_STR &&
            !strcmp(approx.u.s, "none");
  if (!*claims) stats->gelu_refused++;
  return TH_OK;
}

static th_status gelu_kernel(th_kernel_ctx *k) {
  cex_stats *stats = th_kernel_user(k);
  th_tensor *a = th_kernel_tensor(k, 0);
  th_tensor *o = th_kernel_output(k, 0);
  if (!o) return th_last_status();
  float *po = th_tensor_data(o);
  for (int64_t i = 0; i < th_tensor_numel(o); i++) {
    double v = th_tensor_get_f64(a, i);
    po[i] = (float)(0.5 * v * (1.0 + erf(v / sqrt(2.0))));
  }
  stats->gelu_runs++;
  return TH_OK;
}

/* ---- the program --------------------------------------------------------------------------------- */

/* y = gelu(axpby(x, z, a=2, b=-0.5)) for inputs of dtype dt and shape [4, 8]. */
static th_trace *build(th_dtype dt) {
  const th_device cpu = {TH_CPU, 0};
  const int64_t shape[2] = {4, 8};
  th_trace *tr = th_trace_new("user_executor");
  if (!tr) return NULL;
  th_value *x = th_trace_add_tensor_input(tr, "x", dt, cpu, 2, shape);
  th_value *z = th_trace_add_tensor_input(tr, "z", dt, cpu, 2, shape);
  th_arg args[2] = {th_arg_value(x), th_arg_value(z)}, kwargs[2] = {th_arg_float(2.0), th_arg_float(-0.5)};
  const char *kwnames[2] = {"a", "b"};
  th_arg s, y;
  th_status st = x && z ? th_trace_call(tr, "cex.axpby", 2, args, 2, kwnames, kwargs, &s) : th_last_status();
  if (st == TH_OK) st = th_trace_call(tr, "ltorch.gelu", 1, &s, 0, NULL, NULL, &y);
  if (st == TH_OK) st = th_trace_set_return(tr, y);
  if (st != TH_OK) {
    fprintf(stderr, "user_executor: %s\n", th_last_error());
    th_trace_free(tr);
    return NULL;
  }
  return tr;
}

static th_tensor *filled(th_dtype dt, double scale, int salt) {
  const int64_t shape[2] = {4, 8};
  th_tensor *t = th_tensor_empty(dt, 2, shape);
  if (!t) return NULL;
  for (int64_t i = 0; i < 32; i++) {
    double v = scale * (double)((i * 7 + salt) % 13 - 6);
    if (dt == TH_F32)
      ((float *)th_tensor_data(t))[i] = (float)v;
    else
      ((double *)th_tensor_data(t))[i] = v;
  }
  return t;
}

/* Compiles and runs the program for dtype dt; prints the execution trace and who ran each step;
 * returns the largest difference from the double-precision reference, or -1 on error. */
static double run(th_dtype dt) {
  static const char *const executors[] = {"cex", "blas", "eager"};
  th_compile_options o = {0};
  o.executors = executors;
  o.nexecutors = 3;
  th_trace *tr = build(dt);
  th_program *prog = NULL;
  th_tensor *in[2] = {filled(dt, 0.25, 0), filled(dt, 0.5, 5)};
  th_tensor **out = NULL;
  int nout = 0;
  double worst = -1;
  th_status st = tr && in[0] && in[1] ? th_program_compile(tr, &o, &prog) : TH_ERR_NOMEM;
  if (st == TH_OK) {
    const th_trace *et = th_program_trace(prog);
    char *text = th_trace_print(et, -1);
    printf("---- %s: execution trace ----\n%s", th_dtype_name(dt), text ? text : "?\n");
    free(text);
    for (int i = 0; i < th_trace_num_bsyms(et); i++) {
      const th_bsym *b = th_trace_bsym(et, i);
      if (th_bsym_executor(b)) printf("  %-24s run by %s\n", th_bsym_qualname(b), th_bsym_executor(b));
    }
    st = th_program_run(prog, 2, in, &nout, &out);
  }
  if (st == TH_OK && nout == 1) {
    worst = 0;
    for (int64_t i = 0; i < 32; i++) {
      double s = 2.0 * th_tensor_get_f64(in[0], i) - 0.5 * th_tensor_get_f64(in[1], i);
      double ref = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
      double d = fabs(th_tensor_get_f64(out[0], i) - ref);
      if (d > worst) worst = d;
    }
    printf("  max |y - reference| = %.3g\n", worst);
  } else if (st != TH_OK) {
    fprintf(stderr, "user_executor: %s\n", th_last_error());
  }
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(prog);
  th_trace_free(tr);
  return worst;
}

int main(void) {
  static cex_stats stats;
  th_status st = th_op_register_ex("cex.axpby", "axpby(Tensor x, Tensor y, /, *, float a=1.0, float b=1.0) -> Tensor",
                                   axpby_meta, NULL, 0, NULL);
  th_executor *ex = st == TH_OK ? th_executor_new("cex") : NULL;
  if (ex) st = th_executor_add_impl_ex(ex, "cex.axpby", axpby_kernel, NULL, &stats);
  if (ex && st == TH_OK) st = th_executor_add_impl_ex(ex, "ltorch.gelu", gelu_kernel, gelu_checker, &stats);
  if (!ex || st != TH_OK) {
    fprintf(stderr, "user_executor: %s\n", th_last_error());
    th_executor_free(ex);
    return 1;
  }
  double e32 = run(TH_F32); /* cex runs both ops */
  double e64 = run(TH_F64); /* cex runs axpby; its checker refuses the float64 gelu: eager decomposes it */
  th_executor_free(ex);
  printf("cex kernels: axpby %d, gelu %d (gelu calls refused: %d)\n", stats.axpby_runs, stats.gelu_runs,
         stats.gelu_refused);
  bool ok = e32 >= 0 && e32 <= 1e-5 && e64 >= 0 && e64 <= 1e-12 && stats.axpby_runs == 2 && stats.gelu_runs == 1 &&
            stats.gelu_refused == 1;
  printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
