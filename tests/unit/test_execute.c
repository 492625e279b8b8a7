/* test_execute.c — the execution pass, the runtime engine and the BLAS executor.
 *
 * Traces are built with the C API (th_trace_new / th_trace_add_tensor_input / th_trace_call /
 * th_trace_set_return), compiled and run; results are compared with references computed here in
 * float64. Covered: claiming (every step claimed, blas before eager, an unclaimed prim is an error),
 * fusion regions replaced by their subsymbols, output flattening (tuples, None, numbers), input
 * checks, the device check and its override, DCE (dead code goes, copy_/uniform stay), matmul and
 * linear through oneDNN against the float64 reference and against the eager executor (f32 and bf16,
 * 1-D/2-D/batched, transposed and strided operands), release of intermediates after their last use
 * (watched by a probe executor), kernel errors named by op, Philox known answers, and fault injection
 * (every allocation failing in turn, around compile and around run: an error, never a crash or leak;
 * the sanitizer build checks the leaks). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include <cmocka.h>

#include "compile/pipeline.h"
#include "core/ir.h"
#include "executors/kernel.h"
#include "runtime/runtime.h"
#include "thunder/jit.h"
#include "thunder/transform.h"
#include "runtime/program.h"
#include "transforms/transforms.h"

void th_rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

static const th_device CPU = {TH_CPU, 0};
static const th_device CUDA0 = {TH_CUDA, 0};

/* ---- helpers ---------------------------------------------------------------------------------------- */

static th_value *input(th_trace *tr, const char *name, th_dtype dt, int nd, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, CPU, nd, shape);
  assert_non_null(v);
  return v;
}

static th_value *call(th_trace *tr, const char *op, int n, const th_arg *args) {
  th_arg out;
  th_status st = th_trace_call(tr, op, n, args, 0, NULL, NULL, &out);
  if (st != TH_OK) fail_msg("%s: %s", op, th_last_error());
  assert_int_equal(out.kind, TH_ARG_VALUE);
  return out.u.value;
}

static th_value *call2(th_trace *tr, const char *op, th_value *a, th_value *b) {
  th_arg args[2] = {th_arg_value(a), th_arg_value(b)};
  return call(tr, op, 2, args);
}

static th_value *call1(th_trace *tr, const char *op, th_value *a) {
  th_arg args[1] = {th_arg_value(a)};
  return call(tr, op, 1, args);
}

static void ret(th_trace *tr, int n, th_value **vals) {
  th_arg items[8];
  for (int i = 0; i < n; i++) items[i] = th_arg_value(vals[i]);
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(n, items)), TH_OK);
}

static uint32_t lcg_state = 12345;
static double urand(void) { /* in [-1, 1) */
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return (double)(lcg_state >> 8) / (double)(1u << 23) - 1.0;
}

/* A contiguous tensor of random values in [-1, 1) (exactly representable in dt). */
static th_tensor *rand_tensor(th_dtype dt, int nd, const int64_t *shape) {
  th_tensor *t = th_tensor_empty(dt, nd, shape);
  assert_non_null(t);
  int64_t n = th_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    float x = (float)urand();
    if (dt == TH_F32)
      ((float *)th_tensor_data(t))[i] = x;
    else if (dt == TH_BF16)
      ((uint16_t *)th_tensor_data(t))[i] = th_f32_to_bf16(x);
    else if (dt == TH_F64)
      ((double *)th_tensor_data(t))[i] = x;
    else
      fail();
  }
  return t;
}

/* Tests of claiming and unpacking pin the executors without the fuser (the default list fuses). */
static const char *const unfused[] = {"blas", "eager"};

static th_program *compile(const th_trace *tr, const char *const *execs, int n) {
  th_compile_options o = {0};
  o.executors = execs;
  o.nexecutors = n;
  th_program *p = NULL;
  th_status st = th_program_compile(tr, execs ? &o : NULL, &p);
  if (st != TH_OK) fail_msg("compile: %s", th_last_error());
  if (th_trace_verify(th_program_trace(p)) != TH_OK) fail_msg("execution trace: %s", th_last_error());
  return p;
}

static th_tensor **run(th_program *p, int nin, th_tensor **in, int nout_expected) {
  int nout = -1;
  th_tensor **out = NULL;
  th_status st = th_program_run(p, nin, in, &nout, &out);
  if (st != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, nout_expected);
  return out;
}

static void free_outputs(int n, th_tensor **out) {
  for (int i = 0; i < n; i++) th_tensor_release(out[i]);
  free(out);
}

static int refcount(th_tensor *t) { return atomic_load(&t->refcnt); }

/* ---- elementwise programs, claiming and outputs --------------------------------------------------- */

static void test_elementwise_program(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[2] = {2, 3};
  th_value *x = input(tr, "x", TH_F32, 2, shape), *y = input(tr, "y", TH_F32, 2, shape);
  th_value *t0 = call2(tr, "prims.add", x, y);
  th_value *t1 = call2(tr, "prims.mul", t0, x);
  th_value *t2 = call1(tr, "prims.neg", t1);
  th_value *outs[2] = {t2, t0};
  ret(tr, 2, outs);

  th_program *p = compile(tr, unfused, 2);
  th_trace_free(tr); /* the program owns everything it needs */
  const th_trace *et = th_program_trace(p);
  assert_non_null(et->provenance);
  assert_true(strncmp(et->provenance, "Delete Last Used (took ", 23) == 0); /* after Transform for execution */
  int claimed = 0;
  for (int i = 0; i < th_trace_num_bsyms(et); i++) {
    const th_bsym *b = th_trace_bsym(et, i);
    if (b->sym->tags & TH_TAG_UTILITY) {
      assert_null(b->executor);
    } else {
      assert_string_equal(b->executor, "eager");
      claimed++;
    }
  }
  assert_int_equal(claimed, 3);
  char *text = th_trace_print(et, -1);
  assert_non_null(text);
  assert_non_null(strstr(text, "# Constructed by Delete Last Used"));
  free(text);

  for (int rep = 0; rep < 3; rep++) { /* a program runs any number of times */
    th_tensor *in[2] = {rand_tensor(TH_F32, 2, shape), rand_tensor(TH_F32, 2, shape)};
    th_tensor **out = run(p, 2, in, 2);
    for (int i = 0; i < 6; i++) {
      double a = th_tensor_get_f64(in[0], i), b = th_tensor_get_f64(in[1], i);
      float s = (float)a + (float)b;
      assert_true(th_tensor_get_f64(out[1], i) == s);
      assert_true(th_tensor_get_f64(out[0], i) == -(double)(s * (float)a));
    }
    assert_int_equal(refcount(in[0]), 1); /* the program holds no reference after a run */
    assert_int_equal(refcount(in[1]), 1);
    assert_int_equal(refcount(out[0]), 1);
    free_outputs(2, out);
    th_tensor_release(in[0]);
    th_tensor_release(in[1]);
  }
  th_program_free(p);
}

/* return (x, None, 3, 2.5, True, t0): inputs returned as-is, None as NULL, numbers as 0-dim tensors */
static void test_output_flattening(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {4};
  th_value *x = input(tr, "x", TH_F32, 1, shape);
  th_value *t0 = call1(tr, "prims.neg", x);
  th_arg inner[2] = {th_arg_bool(true), th_arg_value(t0)};
  th_arg items[5] = {th_arg_value(x), th_arg_none(), th_arg_int(3), th_arg_float(2.5), th_arg_list(2, inner)};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(5, items)), TH_OK);
  th_program *p = compile(tr, NULL, 0);
  th_tensor *in = rand_tensor(TH_F32, 1, shape);
  th_tensor **out = run(p, 1, &in, 6);
  assert_ptr_equal(out[0], in);
  assert_int_equal(refcount(in), 2);
  assert_null(out[1]);
  assert_int_equal(th_tensor_dtype(out[2]), TH_I64);
  assert_int_equal(th_tensor_ndim(out[2]), 0);
  assert_true(th_tensor_get_f64(out[2], 0) == 3.0);
  assert_int_equal(th_tensor_dtype(out[3]), TH_F64);
  assert_true(th_tensor_get_f64(out[3], 0) == 2.5);
  assert_int_equal(th_tensor_dtype(out[4]), TH_BOOL);
  assert_true(th_tensor_get_f64(out[4], 0) == 1.0);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out[5], i) == -th_tensor_get_f64(in, i));
  free_outputs(6, out);
  assert_int_equal(refcount(in), 1);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(tr);
}

static void test_executor_errors(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {4};
  th_value *x = input(tr, "x", TH_F32, 1, shape);
  th_value *t0 = call2(tr, "prims.add", x, x);
  ret(tr, 1, &t0);
  th_program *p = NULL;
  /* blas alone cannot run prims.add */
  const char *blas_only[1] = {"blas"};
  th_compile_options o = {.executors = blas_only, .nexecutors = 1};
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED);
  assert_null(p);
  assert_non_null(strstr(th_last_error(), "Failed to find an executor for bound symbol"));
  assert_non_null(strstr(th_last_error(), "prims.add"));
  assert_non_null(strstr(th_last_error(), "blas"));
  /* an unknown executor name */
  const char *bogus[2] = {"blas", "nvfuser"};
  o.executors = bogus;
  o.nexecutors = 2;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "'nvfuser'"));
  th_trace_free(tr);
}

/* ---- inputs and devices ------------------------------------------------------------------------------ */

static void test_input_checks(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[2] = {2, 3}, other[2] = {3, 2};
  th_value *x = input(tr, "x", TH_F32, 2, shape);
  th_value *t0 = call1(tr, "prims.neg", x);
  ret(tr, 1, &t0);
  th_program *p = compile(tr, NULL, 0);
  int nout = 7;
  th_tensor **out = (th_tensor **)&nout;

  th_tensor *wrong_shape = rand_tensor(TH_F32, 2, other);
  assert_int_equal(th_program_run(p, 1, &wrong_shape, &nout, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "input 'x': expected cpu f32[2, 3], got f32[3, 2]");
  assert_int_equal(nout, 0);
  assert_null(out);
  assert_int_equal(refcount(wrong_shape), 1);

  th_tensor *wrong_dtype = rand_tensor(TH_F64, 2, shape);
  assert_int_equal(th_program_run(p, 1, &wrong_dtype, &nout, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "input 'x': expected cpu f32[2, 3], got f64[2, 3]");

  th_tensor *null_in = NULL;
  assert_int_equal(th_program_run(p, 1, &null_in, &nout, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "input 'x': expected cpu f32[2, 3], got None");

  th_tensor *two[2] = {wrong_shape, wrong_dtype};
  assert_int_equal(th_program_run(p, 2, two, &nout, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "computation() expected 1 input, got 2");

  /* strided views of the right shape are fine */
  th_tensor *tv = th_tensor_view(wrong_shape, 2, shape, (int64_t[]){1, 2}, 0);
  out = run(p, 1, &tv, 1);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      assert_true(th_tensor_get_f64(out[0], i * 3 + j) == -th_tensor_get_f64(wrong_shape, j * 2 + i));
  free_outputs(1, out);
  th_tensor_release(tv);
  th_tensor_release(wrong_shape);
  th_tensor_release(wrong_dtype);
  th_program_free(p);
  th_trace_free(tr);
}

static void test_device_check(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {3};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CUDA0, 1, shape);
  assert_non_null(x);
  th_value *t0 = call1(tr, "prims.neg", x);
  ret(tr, 1, &t0);
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, NULL, &p), TH_ERR_DEVICE);
  assert_null(p);
  assert_string_equal(th_last_error(), "trace recorded for cuda:0, but this machine has no CUDA device; "
                                       "run it on the CPU with --device cpu (CLI) or "
                                       "th_compile_options.device_override (C); from Python, keep the tensors "
                                       "on the CPU (no .to(\"cuda\") or device=\"cuda\" in the function)");
  th_compile_options o = {.has_device_override = true, .device_override = CUDA0};
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_DEVICE);
  o.device_override = CPU;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  th_tensor *in = rand_tensor(TH_F32, 1, shape);
  th_tensor **out = run(p, 1, &in, 1);
  for (int i = 0; i < 3; i++) assert_true(th_tensor_get_f64(out[0], i) == -th_tensor_get_f64(in, i));
  free_outputs(1, out);
  /* with the override, inputs are expected on the CPU */
  th_tensor *bad = rand_tensor(TH_F32, 1, (int64_t[]){4});
  int nout;
  assert_int_equal(th_program_run(p, 1, &bad, &nout, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "input 'x': expected cpu f32[3], got f32[4]");
  th_tensor_release(bad);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- DCE --------------------------------------------------------------------------------------------- */

static bool has_op(const th_trace *tr, th_op_id id) {
  for (int i = 0; i < th_trace_num_bsyms(tr); i++)
    if (th_trace_bsym(tr, i)->sym->id == id) return true;
  return false;
}

static void test_dce(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {4};
  th_value *x = input(tr, "x", TH_F32, 1, shape), *buf = input(tr, "buf", TH_F32, 1, shape);
  th_value *dead = call2(tr, "prims.sub", x, x);
  (void)call1(tr, "prims.exp", dead); /* dead, and its input becomes dead too */
  th_value *t0 = call2(tr, "prims.add", x, x);
  (void)call2(tr, "prims.copy_", t0, buf); /* effect: stays although its output is unused */
  th_arg shp[1] = {th_arg_int(4)};
  th_arg uargs[3] = {th_arg_tuple(1, shp), th_arg_float(0.0), th_arg_float(1.0)};
  th_arg dev = {TH_ARG_DEVICE, {0}};
  dev.u.device = CPU;
  const char *kw[2] = {"device", "dtype"};
  th_arg kwargs[2] = {dev, th_arg_dtype(TH_F32)};
  th_arg u;
  assert_int_equal(th_trace_call(tr, "prims.uniform", 3, uargs, 2, kw, kwargs, &u), TH_OK);
  th_value *t1 = call1(tr, "prims.neg", x);
  ret(tr, 1, &t1);
  assert_int_equal(th_trace_num_bsyms(tr), 7);

  th_trace *d = NULL;
  assert_int_equal(th_dce(tr, &d), TH_OK);
  assert_true(strncmp(d->provenance, "Dead Code Elimination (took ", 28) == 0);
  assert_int_equal(th_trace_num_bsyms(d), 5); /* add, copy_, uniform, neg, return */
  assert_false(has_op(d, TH_OP_prims_sub));
  assert_false(has_op(d, TH_OP_prims_exp));
  assert_true(has_op(d, TH_OP_prims_add));
  assert_true(has_op(d, TH_OP_prims_copy_));
  assert_true(has_op(d, TH_OP_prims_uniform));
  assert_int_equal(th_trace_verify(d), TH_OK);
  th_trace_free(tr); /* the DCE'd trace stands alone */
  char *text = th_trace_print(d, -1);
  assert_non_null(text);
  free(text);

  /* and it runs: copy_ writes into buf */
  th_program *p = compile(d, NULL, 0);
  assert_false(has_op(th_program_trace(p), TH_OP_prims_sub));
  th_tensor *in[2] = {rand_tensor(TH_F32, 1, shape), th_tensor_new(TH_F32, 1, shape)};
  th_tensor **out = run(p, 2, in, 1);
  for (int i = 0; i < 4; i++) {
    assert_true(th_tensor_get_f64(in[1], i) == 2 * th_tensor_get_f64(in[0], i));
    assert_true(th_tensor_get_f64(out[0], i) == -th_tensor_get_f64(in[0], i));
  }
  free_outputs(1, out);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
  th_trace_free(d);
}

/* DCE of a parsed trace with dels: a del of a removed value loses it, an emptied del goes */
static void test_dce_dels(void **state) {
  (void)state;
  const char *text = "import thunder\n"
                     "import thunder.core.prims as prims\n"
                     "import torch\n"
                     "\n"
                     "def computation(x):\n"
                     "  # x: \"cpu f32[4]\"\n"
                     "  t0 = prims.neg(x)  # t0: \"cpu f32[4]\"\n"
                     "  t1 = prims.exp(x)  # t1: \"cpu f32[4]\"\n"
                     "  t3 = prims.exp(t1)  # t3: \"cpu f32[4]\"\n"
                     "  del x\n"
                     "  t2 = prims.neg(t0)  # t2: \"cpu f32[4]\"\n"
                     "  del t0, t1\n"
                     "  del t3\n"
                     "  return (t2,)\n";
  th_trace *tr = NULL;
  if (th_trace_parse(text, "dels.py", &tr) != TH_OK) fail_msg("%s", th_last_error());
  th_trace *d = NULL;
  assert_int_equal(th_dce(tr, &d), TH_OK);
  assert_int_equal(th_trace_verify(d), TH_OK);
  char *out = th_trace_print(d, 1);
  assert_non_null(out);
  assert_null(strstr(out, "prims.exp"));
  assert_non_null(strstr(out, "  del x\n"));
  assert_non_null(strstr(out, "  del t0\n"));
  assert_null(strstr(out, "t1"));
  assert_null(strstr(out, "t3"));
  free(out);
  th_program *p = compile(tr, NULL, 0); /* the program runs the DCE'd code */
  assert_false(has_op(th_program_trace(p), TH_OP_prims_exp));
  th_tensor *in = rand_tensor(TH_F32, 1, (int64_t[]){4});
  th_tensor **o = run(p, 1, &in, 1);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(o[0], i) == th_tensor_get_f64(in, i));
  free_outputs(1, o);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(d);
  th_trace_free(tr);
}

/* ---- matmul and linear through oneDNN ---------------------------------------------------------------- */

/* Float64 reference of prims.matmul over any ranks (identical batch dims), via th_tensor_get_f64. */
static void ref_matmul(const th_tensor *a, const th_tensor *b, double *out, double *absout) {
  int an = a->ndim, bn = b->ndim;
  int64_t K = a->shape[an - 1];
  int64_t M = an >= 2 ? a->shape[an - 2] : 1, N = bn >= 2 ? b->shape[bn - 1] : 1;
  int64_t B = 1;
  const th_tensor *big = an >= bn ? a : b;
  for (int i = 0; i < big->ndim - 2; i++) B *= big->shape[i];
  bool abatch = an > 2, bbatch = bn > 2;
  for (int64_t bi = 0; bi < B; bi++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0, sa = 0;
        for (int64_t k = 0; k < K; k++) {
          int64_t ai = (abatch ? bi * M * K : 0) + i * K + k;
          int64_t bj = (bbatch ? bi * K * N : 0) + k * N + j;
          double p = th_tensor_get_f64(a, ai) * th_tensor_get_f64(b, bj);
          s += p;
          sa += fabs(p);
        }
        out[(bi * M + i) * N + j] = s;
        absout[(bi * M + i) * N + j] = sa;
      }
}

/* got within tolerance of the float64 reference: rounding of the output dtype plus accumulation. */
static void check_close(const th_tensor *got, const double *ref, const double *absref, int64_t n) {
  assert_int_equal(th_tensor_numel(got), n);
  double rel = got->dtype == TH_BF16 ? 1.0 / 128 : 1e-6;
  for (int64_t i = 0; i < n; i++) {
    double g = th_tensor_get_f64(got, i);
    double tol = rel * fabs(ref[i]) + 1e-5 * absref[i] + 1e-6;
    if (!(fabs(g - ref[i]) <= tol))
      fail_msg("element %lld: got %.9g, expected %.9g (tol %.3g)", (long long)i, g, ref[i], tol);
  }
}

static const char *const EAGER_ONLY[1] = {"eager"};

static const th_bsym *find_op(const th_trace *tr, th_op_id id) {
  for (int i = 0; i < th_trace_num_bsyms(tr); i++)
    if (th_trace_bsym(tr, i)->sym->id == id) return th_trace_bsym(tr, i);
  return NULL;
}

/* How a test input is laid out in memory. */
enum {
  L_CONTIG,  /* contiguous */
  L_T,       /* the last two dims transposed (column-major matrices) */
  L_STEP,    /* every other element of a twice larger tensor in the last two dims (needs a copy) */
  L_BATCH_T, /* the first two (batch) dims transposed (do not collapse: needs a copy) */
};

/* A tensor of `shape` with random values laid out as `lay`; *base gets the storage owner (or NULL). */
static th_tensor *laid_out(th_dtype dt, int nd, const int64_t *shape, int lay, th_tensor **base) {
  *base = NULL;
  if (lay == L_CONTIG || (lay != L_BATCH_T && nd < 2) || (lay == L_BATCH_T && nd < 4))
    return rand_tensor(dt, nd, shape);
  int64_t bshape[TH_MAX_DIMS], st[TH_MAX_DIMS];
  memcpy(bshape, shape, sizeof(int64_t) * (size_t)nd);
  int i = lay == L_BATCH_T ? 0 : nd - 2, j = i + 1;
  if (lay == L_STEP) {
    bshape[i] *= 2;
    bshape[j] *= 2;
  } else {
    bshape[i] = shape[j];
    bshape[j] = shape[i];
  }
  *base = rand_tensor(dt, nd, bshape);
  memcpy(st, (*base)->strides, sizeof(int64_t) * (size_t)nd);
  if (lay == L_STEP) {
    st[i] *= 2;
    st[j] *= 2;
  } else {
    st[i] = (*base)->strides[j];
    st[j] = (*base)->strides[i];
  }
  th_tensor *v = th_tensor_view(*base, nd, shape, st, 0);
  assert_non_null(v);
  return v;
}

/* x @ y for one pair of shapes and layouts, through blas (checked claimed) and through eager alone;
 * both against the float64 reference. */
static void matmul_case(th_dtype dt, int an, const int64_t *as, int bn, const int64_t *bs, int lay_a, int lay_b) {
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", dt, an, as), *y = input(tr, "y", dt, bn, bs);
  th_value *t0 = call2(tr, "prims.matmul", x, y);
  ret(tr, 1, &t0);
  th_program *pb = compile(tr, NULL, 0);
  const th_bsym *mm = find_op(th_program_trace(pb), TH_OP_prims_matmul);
  assert_non_null(mm);
  assert_string_equal(mm->executor, "blas");

  th_tensor *base[2];
  th_tensor *in[2] = {laid_out(dt, an, as, lay_a, &base[0]), laid_out(dt, bn, bs, lay_b, &base[1])};
  th_tensor **out = run(pb, 2, in, 1);
  int64_t n = th_tensor_numel(out[0]);
  double *ref = malloc(sizeof(double) * (size_t)(n ? n : 1)), *absref = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ref_matmul(in[0], in[1], ref, absref);
  check_close(out[0], ref, absref, n);

  th_program *pe = compile(tr, EAGER_ONLY, 1);
  th_tensor **oute = run(pe, 2, in, 1);
  check_close(oute[0], ref, absref, n);
  free_outputs(1, oute);
  th_program_free(pe);

  free(ref);
  free(absref);
  free_outputs(1, out);
  for (int k = 0; k < 2; k++) {
    th_tensor_release(in[k]);
    th_tensor_release(base[k]);
  }
  th_program_free(pb);
  th_trace_free(tr);
}

static void matmul_cases(th_dtype dt) {
  const int F = L_CONTIG, T = L_T, S = L_STEP, BT = L_BATCH_T;
  matmul_case(dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, F, F);
  matmul_case(dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, T, F);
  matmul_case(dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, F, T);
  matmul_case(dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, T, T);
  matmul_case(dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, S, T);
  matmul_case(dt, 2, (int64_t[]){64, 48}, 2, (int64_t[]){48, 80}, F, F);
  matmul_case(dt, 3, (int64_t[]){4, 5, 6}, 3, (int64_t[]){4, 6, 3}, F, F);
  matmul_case(dt, 3, (int64_t[]){4, 5, 6}, 3, (int64_t[]){4, 6, 3}, T, T);
  matmul_case(dt, 3, (int64_t[]){4, 5, 6}, 3, (int64_t[]){4, 6, 3}, S, F);
  matmul_case(dt, 4, (int64_t[]){2, 3, 5, 6}, 4, (int64_t[]){2, 3, 6, 4}, F, T);
  matmul_case(dt, 4, (int64_t[]){2, 3, 5, 6}, 4, (int64_t[]){2, 3, 6, 4}, BT, F);
  matmul_case(dt, 4, (int64_t[]){2, 3, 5, 6}, 4, (int64_t[]){2, 3, 6, 4}, F, BT);
  /* batch dims that do not collapse on both sides, and in a 5-D batch where the per-index views still
   * do not (split again): large enough per leading index (>= 2^20 multiply-adds) for one oneDNN call per
   * index on views; the small ones above take one contiguous copy */
  matmul_case(dt, 4, (int64_t[]){2, 3, 64, 96}, 4, (int64_t[]){2, 3, 96, 64}, BT, BT);
  matmul_case(dt, 5, (int64_t[]){2, 3, 2, 96, 128}, 5, (int64_t[]){2, 3, 2, 128, 96}, BT, T);
  matmul_case(dt, 4, (int64_t[]){2, 3, 5, 6}, 4, (int64_t[]){2, 3, 6, 4}, BT, BT);
  matmul_case(dt, 1, (int64_t[]){6}, 1, (int64_t[]){6}, F, F);
  matmul_case(dt, 1, (int64_t[]){6}, 2, (int64_t[]){6, 4}, F, F);
  matmul_case(dt, 1, (int64_t[]){6}, 2, (int64_t[]){6, 4}, F, T);
  matmul_case(dt, 2, (int64_t[]){5, 6}, 1, (int64_t[]){6}, T, F);
  matmul_case(dt, 1, (int64_t[]){6}, 3, (int64_t[]){3, 6, 4}, F, F);
  matmul_case(dt, 3, (int64_t[]){3, 5, 6}, 1, (int64_t[]){6}, F, F);
  matmul_case(dt, 2, (int64_t[]){1, 6}, 2, (int64_t[]){6, 1}, F, F);
  matmul_case(dt, 2, (int64_t[]){3, 0}, 2, (int64_t[]){0, 4}, F, F); /* K = 0: zeros */
  matmul_case(dt, 2, (int64_t[]){0, 5}, 2, (int64_t[]){5, 4}, F, F);
  matmul_case(dt, 3, (int64_t[]){0, 2, 5}, 3, (int64_t[]){0, 5, 4}, F, F);
}

static void test_matmul_f32(void **state) {
  (void)state;
  matmul_cases(TH_F32);
}

static void test_matmul_bf16(void **state) {
  (void)state;
  matmul_cases(TH_BF16);
}

/* linear(x, w, bias) = x @ w^T + bias */
static void linear_case(th_dtype dt, int xn, const int64_t *xs, int64_t N, bool bias, int lay_x, int lay_w) {
  int64_t K = xs[xn - 1];
  int64_t ws[2] = {N, K}, bsh[1] = {N};
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", dt, xn, xs), *w = input(tr, "w", dt, 2, ws);
  th_value *b = bias ? input(tr, "b", dt, 1, bsh) : NULL;
  th_arg args[3] = {th_arg_value(x), th_arg_value(w), bias ? th_arg_value(b) : th_arg_none()};
  th_value *t0 = call(tr, "prims.linear", 3, args);
  ret(tr, 1, &t0);
  th_program *pb = compile(tr, NULL, 0);
  assert_string_equal(find_op(th_program_trace(pb), TH_OP_prims_linear)->executor, "blas");

  /* w laid out as L_T is the transposed view of a (K, N) tensor: w^T is then plainly row-major */
  th_tensor *xbase, *wbase;
  th_tensor *in[3] = {laid_out(dt, xn, xs, lay_x, &xbase), laid_out(dt, 2, ws, lay_w, &wbase),
                      bias ? rand_tensor(dt, 1, bsh) : NULL};
  int nin = bias ? 3 : 2;
  th_tensor **out = run(pb, nin, in, 1);
  int64_t M = th_tensor_numel(in[0]) / (K ? K : 1);
  if (K == 0) M = th_tensor_numel(out[0]) / (N ? N : 1);
  double *ref = calloc((size_t)(M * N + 1), sizeof(double)), *absref = calloc((size_t)(M * N + 1), sizeof(double));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = bias ? th_tensor_get_f64(in[2], j) : 0, sa = fabs(s);
      for (int64_t k = 0; k < K; k++) {
        double p = th_tensor_get_f64(in[0], i * K + k) * th_tensor_get_f64(in[1], j * K + k);
        s += p;
        sa += fabs(p);
      }
      ref[i * N + j] = s;
      absref[i * N + j] = sa;
    }
  check_close(out[0], ref, absref, M * N);
  th_program *pe = compile(tr, EAGER_ONLY, 1);
  th_tensor **oute = run(pe, nin, in, 1);
  check_close(oute[0], ref, absref, M * N);
  free_outputs(1, oute);
  th_program_free(pe);
  free(ref);
  free(absref);
  free_outputs(1, out);
  for (int k = 0; k < 3; k++) th_tensor_release(in[k]);
  th_tensor_release(xbase);
  th_tensor_release(wbase);
  th_program_free(pb);
  th_trace_free(tr);
}

static void linear_cases(th_dtype dt) {
  const int F = L_CONTIG, T = L_T, S = L_STEP;
  linear_case(dt, 2, (int64_t[]){5, 7}, 3, false, F, F);
  linear_case(dt, 2, (int64_t[]){5, 7}, 3, true, F, F);
  linear_case(dt, 2, (int64_t[]){5, 7}, 3, true, F, T);
  linear_case(dt, 2, (int64_t[]){5, 7}, 3, true, T, F);
  linear_case(dt, 2, (int64_t[]){5, 7}, 3, true, S, S);
  linear_case(dt, 3, (int64_t[]){2, 4, 16}, 8, true, F, F);
  linear_case(dt, 3, (int64_t[]){2, 4, 16}, 8, true, T, F); /* leading dims do not collapse: copy */
  linear_case(dt, 1, (int64_t[]){16}, 8, true, F, F);
  linear_case(dt, 4, (int64_t[]){2, 2, 3, 32}, 24, false, F, T);
  linear_case(dt, 2, (int64_t[]){3, 0}, 4, true, F, F); /* K = 0: the bias broadcast */
  linear_case(dt, 2, (int64_t[]){0, 4}, 4, true, F, F);
}

static void test_linear_f32(void **state) {
  (void)state;
  linear_cases(TH_F32);
}

static void test_linear_bf16(void **state) {
  (void)state;
  linear_cases(TH_BF16);
}

/* More distinct problems than the primitive cache holds (eviction), from several threads at once
 * (the cache is shared by all programs). */
typedef struct {
  int id;
  int failures;
} worker_ctx;

static int blas_worker(void *p) {
  worker_ctx *c = p;
  for (int round = 0; round < 3; round++)
    for (int k = 0; k < 20; k++) {
      int64_t M = 1 + (k + c->id) % 7, K = 3 + k, N = 2 + c->id;
      th_trace *tr = th_trace_new(NULL);
      th_device cpu = {TH_CPU, 0};
      th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, cpu, 2, (int64_t[]){M, K});
      th_value *w = th_trace_add_tensor_input(tr, "w", TH_F32, cpu, 2, (int64_t[]){N, K});
      th_arg args[3] = {th_arg_value(x), th_arg_value(w), th_arg_none()}, out;
      th_program *prog = NULL;
      if (th_trace_call(tr, "prims.linear", 3, args, 0, NULL, NULL, &out) != TH_OK ||
          th_trace_set_return(tr, out) != TH_OK || th_program_compile(tr, NULL, &prog) != TH_OK) {
        c->failures++;
        th_trace_free(tr);
        continue;
      }
      th_tensor *in[2] = {th_tensor_empty(TH_F32, 2, (int64_t[]){M, K}), th_tensor_empty(TH_F32, 2, (int64_t[]){N, K})};
      for (int64_t i = 0; i < M * K; i++) ((float *)th_tensor_data(in[0]))[i] = (float)(i % 5) - 2;
      for (int64_t i = 0; i < N * K; i++) ((float *)th_tensor_data(in[1]))[i] = (float)(i % 3) - 1;
      int nout;
      th_tensor **o;
      if (th_program_run(prog, 2, in, &nout, &o) != TH_OK) {
        c->failures++;
      } else {
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t q = 0; q < K; q++) s += (double)((i * K + q) % 5 - 2) * (double)((j * K + q) % 3 - 1);
            if (th_tensor_get_f64(o[0], i * N + j) != s) c->failures++;
          }
        free_outputs(nout, o);
      }
      th_tensor_release(in[0]);
      th_tensor_release(in[1]);
      th_program_free(prog);
      th_trace_free(tr);
    }
  return 0;
}

static void test_blas_cache_threads(void **state) {
  (void)state;
  enum { NT = 4 };
  thrd_t th[NT];
  worker_ctx ctx[NT];
  for (int i = 0; i < NT; i++) {
    ctx[i] = (worker_ctx){i, 0};
    assert_int_equal(thrd_create(&th[i], blas_worker, &ctx[i]), thrd_success);
  }
  for (int i = 0; i < NT; i++) {
    assert_int_equal(thrd_join(th[i], NULL), thrd_success);
    assert_int_equal(ctx[i].failures, 0);
  }
}

/* f64 is not oneDNN's: eager claims it */
static void test_matmul_f64_goes_to_eager(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t s[2] = {3, 3};
  th_value *x = input(tr, "x", TH_F64, 2, s);
  th_value *t0 = call2(tr, "prims.matmul", x, x);
  ret(tr, 1, &t0);
  th_program *p = compile(tr, NULL, 0);
  assert_string_equal(find_op(th_program_trace(p), TH_OP_prims_matmul)->executor, "eager");
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- a probe executor: watching releases and kernel errors -------------------------------------------- */

static th_tensor *seen[8];
static int nseen;
static int seen_refs[8][8]; /* seen_refs[step][k]: refcount of seen[k] when step ran */
static int probe_mode;      /* 0: negate; 1: fail at the second call; 2: forget the output */

static th_status probe_neg(th_rt_env *env, const th_bsym *b) {
  th_tensor *x = th_rt_tensor(env, &b->args[0]);
  assert_non_null(x);
  int step = nseen;
  for (int k = 0; k < nseen; k++) seen_refs[step][k] = refcount(seen[k]);
  th_tensor_retain(x);
  seen[nseen++] = x;
  if (probe_mode == 1 && step == 1) return th_error(TH_ERR_RUNTIME, "boom at step %d", step);
  if (probe_mode == 2) return TH_OK;
  th_tensor *o = th_rt_alloc_output(env, b->out.u.value);
  if (!o) return th_last_status();
  for (int64_t i = 0; i < th_tensor_numel(o); i++) ((float *)th_tensor_data(o))[i] = -(float)th_tensor_get_f64(x, i);
  return TH_OK;
}

static const th_operator_impl probe_impls[] = {{TH_OP_prims_neg, probe_neg, NULL}, {TH_OP_prims_abs, NULL, NULL}};
static const th_executor_desc probe_executor = {"probe", 2, probe_impls};

static th_trace *neg_chain_n(int n, int64_t len) {
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {len};
  th_value *v = input(tr, "x", TH_F32, 1, shape);
  for (int i = 0; i < n; i++) v = call1(tr, "prims.neg", v);
  ret(tr, 1, &v);
  return tr;
}

static th_trace *neg_chain(int n) { return neg_chain_n(n, 4); }

/* Large outputs come from the buffer pool: once the caller released last run's output, the next run
 * writes into the same (already faulted-in) memory; within a run, t2 reuses t0's block (t0 is dead
 * after step 1), so the chain runs in two blocks whatever its length. */
static void test_output_buffers_reused(void **state) {
  (void)state;
  th_trace *tr = neg_chain_n(3, 1 << 18); /* 1 MiB tensors */
  th_program *p = compile(tr, NULL, 0);
  th_tensor *x = rand_tensor(TH_F32, 1, (int64_t[]){1 << 18});
  th_tensor **out = run(p, 1, &x, 1);
  void *first = th_tensor_data(out[0]);
  assert_int_equal((uintptr_t)first % 64, 0);
  free_outputs(1, out);
  out = run(p, 1, &x, 1);
  assert_ptr_equal(th_tensor_data(out[0]), first);
  for (int64_t i = 0; i < (1 << 18); i += 4099) assert_true(th_tensor_get_f64(out[0], i) == -th_tensor_get_f64(x, i));
  free_outputs(1, out);
  th_tensor_release(x);
  th_program_free(p);
  th_trace_free(tr);
}

static void reset_probe(int mode) {
  for (int k = 0; k < nseen; k++) th_tensor_release(seen[k]);
  nseen = 0;
  probe_mode = mode;
  memset(seen_refs, 0, sizeof seen_refs);
}

static void test_intermediates_released(void **state) {
  (void)state;
  th_trace *tr = neg_chain(4); /* x -> t0 -> t1 -> t2 -> t3 */
  const th_executor_desc *execs[2] = {&probe_executor, &th_eager_executor};
  th_program *p = NULL;
  assert_int_equal(th_program_compile_with(tr, NULL, execs, 2, &p), TH_OK);
  assert_string_equal(find_op(th_program_trace(p), TH_OP_prims_neg)->executor, "probe");
  reset_probe(0);
  th_tensor *x = rand_tensor(TH_F32, 1, (int64_t[]){4});
  th_tensor **out = run(p, 1, &x, 1);
  assert_int_equal(nseen, 4);
  /* seen[k] is step k's input (x, t0, t1, t2), each last used at step k: when step s runs, every
   * seen[k] with k < s must have been released by the program (only the probe's reference is left,
   * plus the caller's for x) */
  assert_int_equal(seen_refs[1][0], 2); /* x: the caller and the probe */
  assert_int_equal(seen_refs[2][0], 2);
  assert_int_equal(seen_refs[2][1], 1); /* t0 released after its last use (step 1) */
  assert_int_equal(seen_refs[3][1], 1);
  assert_int_equal(seen_refs[3][2], 1); /* t1 */
  for (int k = 1; k < 4; k++) assert_int_equal(refcount(seen[k]), 1);
  assert_int_equal(refcount(out[0]), 1);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out[0], i) == th_tensor_get_f64(x, i));
  free_outputs(1, out);
  reset_probe(0);
  th_tensor_release(x);
  th_program_free(p);
  th_trace_free(tr);
}

static void test_kernel_errors(void **state) {
  (void)state;
  th_trace *tr = neg_chain(3);
  const th_executor_desc *execs[2] = {&probe_executor, &th_eager_executor};
  th_program *p = NULL;
  assert_int_equal(th_program_compile_with(tr, NULL, execs, 2, &p), TH_OK);
  th_tensor *x = rand_tensor(TH_F32, 1, (int64_t[]){4});
  int nout = 5;
  th_tensor **out = (th_tensor **)&nout;

  reset_probe(1);
  assert_int_equal(th_program_run(p, 1, &x, &nout, &out), TH_ERR_RUNTIME);
  assert_string_equal(th_last_error(), "prims.neg: boom at step 1");
  assert_int_equal(nout, 0);
  assert_null(out);
  assert_int_equal(refcount(seen[1]), 1); /* everything the program held is released */
  assert_int_equal(refcount(x), 2);       /* the caller's and the probe's */

  reset_probe(2);
  assert_int_equal(th_program_run(p, 1, &x, &nout, &out), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "prims.neg: the kernel did not produce t"));

  reset_probe(0); /* and the program still runs */
  out = run(p, 1, &x, 1);
  free_outputs(1, out);
  reset_probe(0);
  assert_int_equal(refcount(x), 1);
  th_tensor_release(x);
  th_program_free(p);

  /* claimed by an executor without a kernel: a compile error */
  th_trace *t2 = th_trace_new(NULL);
  th_value *v = input(t2, "x", TH_F32, 1, (int64_t[]){4});
  v = call1(t2, "prims.abs", v);
  ret(t2, 1, &v);
  assert_int_equal(th_program_compile_with(t2, NULL, execs, 2, &p), TH_ERR_NOT_IMPLEMENTED);
  assert_null(p);
  assert_string_equal(th_last_error(), "prims.abs: claimed by executor 'probe', which has no kernel for it");
  th_trace_free(t2);
  th_trace_free(tr);
}

/* ---- fusion regions are replaced by their subsymbols ------------------------------------------------ */

static void test_fusion_region_unpacked(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t shape[1] = {4};
  th_value *x = input(tr, "x", TH_F32, 1, shape);
  /* record t0 = neg(x); t1 = exp(t0) into a side scope, then wrap them in fusion0 */
  th_vec subs = {0};
  tr->scope = &subs;
  th_arg a0 = th_arg_value(x), o0, o1;
  assert_int_equal(th_call(tr, TH_OP_prims_neg, 1, &a0, &o0), TH_OK);
  assert_int_equal(th_call(tr, TH_OP_prims_exp, 1, &o0, &o1), TH_OK);
  tr->scope = &tr->bsyms;
  th_symbol *fs = th_symbol_new_dynamic(tr, "fusion0");
  th_arg *fargs = th_arena_alloc(tr->arena, sizeof(th_arg));
  fargs[0] = a0;
  th_arg *fouts = th_arena_alloc(tr->arena, sizeof(th_arg));
  fouts[0] = o1;
  th_bsym *fb = th_bsym_new(tr, fs, 1, fargs, th_arg_list(1, fouts));
  fb->nsubs = subs.n;
  fb->subs = (th_bsym **)subs.items;
  assert_int_equal(th_trace_append(tr, fb), TH_OK);
  th_value *t1 = o1.u.value;
  ret(tr, 1, &t1);

  th_program *p = compile(tr, unfused, 2); /* the fuser would fuse neg and exp again */
  const th_trace *et = th_program_trace(p);
  assert_int_equal(th_trace_num_bsyms(et), 5); /* neg, del x, exp, del t0, return */
  assert_true(has_op(et, TH_OP_prims_neg));
  assert_true(has_op(et, TH_OP_prims_exp));
  th_tensor *in = rand_tensor(TH_F32, 1, shape);
  th_tensor **out = run(p, 1, &in, 1);
  for (int i = 0; i < 4; i++) assert_float_equal(th_tensor_get_f64(out[0], i), exp(-th_tensor_get_f64(in, i)), 1e-6);
  free_outputs(1, out);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- torch-level ops: replaced by their decomposition ----------------------------------------------- */

/* x: f32[2, 3], y: f32[3]: t0 = ltorch.add(x, y) (broadcasts); t1 = ltorch.mul(t0, 2.0);
 * t2 = ltorch.to(x, dtype=float32) (returns x itself: becomes a shallow_copy); return (t1, t2) */
static th_trace *torch_trace(void) {
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, (int64_t[]){2, 3}), *y = input(tr, "y", TH_F32, 1, (int64_t[]){3});
  th_value *t0 = call2(tr, "ltorch.add", x, y);
  th_arg margs[2] = {th_arg_value(t0), th_arg_float(2.0)};
  th_value *t1 = call(tr, "ltorch.mul", 2, margs);
  th_arg targs[1] = {th_arg_value(x)};
  const char *kw[1] = {"dtype"};
  th_arg kwargs[1] = {th_arg_dtype(TH_F32)};
  th_arg t2;
  if (th_trace_call(tr, "ltorch.to", 1, targs, 1, kw, kwargs, &t2) != TH_OK) fail_msg("%s", th_last_error());
  th_value *outs[2] = {t1, t2.u.value};
  ret(tr, 2, outs);
  return tr;
}

static void check_torch_program(const th_trace *tr) {
  th_program *p = compile(tr, unfused, 2);
  const th_trace *et = th_program_trace(p);
  for (int i = 0; i < th_trace_num_bsyms(et); i++) {
    const th_bsym *b = th_trace_bsym(et, i);
    assert_true(b->sym->is_prim); /* every torch-level op was replaced by prims */
    if (!(b->sym->tags & TH_TAG_UTILITY)) assert_string_equal(b->executor, "eager");
  }
  assert_true(has_op(et, TH_OP_prims_broadcast_in_dim));
  th_tensor *in[2] = {rand_tensor(TH_F32, 2, (int64_t[]){2, 3}), rand_tensor(TH_F32, 1, (int64_t[]){3})};
  th_tensor **out = run(p, 2, in, 2);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      float s = (float)th_tensor_get_f64(in[0], i * 3 + j) + (float)th_tensor_get_f64(in[1], j);
      assert_true(th_tensor_get_f64(out[0], i * 3 + j) == (double)(s * 2.0f));
      assert_true(th_tensor_get_f64(out[1], i * 3 + j) == th_tensor_get_f64(in[0], i * 3 + j));
    }
  free_outputs(2, out);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
}

static void test_torch_ops_decomposed(void **state) {
  (void)state;
  th_trace *tr = torch_trace();
  check_torch_program(tr); /* subsymbols recorded: used as they are */
  /* printed without subsymbols and parsed back: the decompositions are re-run */
  char *text = th_trace_print(tr, 1);
  assert_non_null(text);
  th_trace *parsed = NULL;
  if (th_trace_parse(text, "torch_trace.py", &parsed) != TH_OK) fail_msg("%s\n%s", th_last_error(), text);
  for (int i = 0; i < th_trace_num_bsyms(parsed); i++) assert_int_equal(th_trace_bsym(parsed, i)->nsubs, 0);
  check_torch_program(parsed);
  free(text);
  th_trace_free(parsed);
  th_trace_free(tr);
}

/* ---- random numbers ------------------------------------------------------------------------------- */

static void test_philox_known_answers(void **state) {
  (void)state;
  /* Random123's kat_vectors for philox4x32_10 */
  uint32_t out[4];
  th_rt_philox4x32_10((uint32_t[]){0, 0, 0, 0}, (uint32_t[]){0, 0}, out);
  assert_int_equal(out[0], 0x6627e8d5u);
  assert_int_equal(out[1], 0xe169c58du);
  assert_int_equal(out[2], 0xbc57ac4cu);
  assert_int_equal(out[3], 0x9b00dbd8u);
  th_rt_philox4x32_10((uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                      (uint32_t[]){0xffffffffu, 0xffffffffu}, out);
  assert_int_equal(out[0], 0x408f276du);
  assert_int_equal(out[1], 0x41c83b0eu);
  assert_int_equal(out[2], 0xa20bc7c6u);
  assert_int_equal(out[3], 0x6d5451fdu);
  th_rt_philox4x32_10((uint32_t[]){0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                      (uint32_t[]){0xa4093822u, 0x299f31d0u}, out);
  assert_int_equal(out[0], 0xd16cfe09u);
  assert_int_equal(out[1], 0x94fdccebu);
  assert_int_equal(out[2], 0x5001e420u);
  assert_int_equal(out[3], 0x24126ea1u);
}

static th_trace *uniform_trace(void) {
  th_trace *tr = th_trace_new(NULL);
  th_arg shp[1] = {th_arg_int(64)};
  th_arg uargs[3] = {th_arg_tuple(1, shp), th_arg_float(0.0), th_arg_float(1.0)};
  th_arg dev = {TH_ARG_DEVICE, {0}};
  dev.u.device = CPU;
  const char *kw[2] = {"device", "dtype"};
  th_arg kwargs[2] = {dev, th_arg_dtype(TH_F32)};
  th_arg u;
  assert_int_equal(th_trace_call(tr, "prims.uniform", 3, uargs, 2, kw, kwargs, &u), TH_OK);
  assert_int_equal(th_trace_set_return(tr, u), TH_OK);
  return tr;
}

/* Two dropout-like draws in one trace, as ltorch.uniform_like records them: the generator's state,
 * then a uniform read from it. */
static const char rng_trace_text[] =
  "def computation():\n"
  "  (s0, o0) = prims.get_and_update_rng_state(16, device=devices.Device(\"cpu\"))\n"
  "  u0 = prims.uniform_philox((64,), 0.0, 1.0, device=devices.Device(\"cpu\"), dtype=dtypes.float32, seed=s0, "
  "offset=o0)\n"
  "  (s1, o1) = prims.get_and_update_rng_state(16, device=devices.Device(\"cpu\"))\n"
  "  u1 = prims.uniform_philox((64,), 0.0, 1.0, device=devices.Device(\"cpu\"), dtype=dtypes.float32, seed=s1, "
  "offset=o1)\n"
  "  return (u0, u1, s0, o0, o1)\n";

static int count_equal(const th_tensor *a, const th_tensor *b, int n) {
  int same = 0;
  for (int i = 0; i < n; i++) same += th_tensor_get_f64(a, i) == th_tensor_get_f64(b, i);
  return same;
}

static void test_rng_state_values(void **state) {
  (void)state;
  th_trace *tr = NULL;
  if (th_trace_parse(rng_trace_text, "rng.py", &tr) != TH_OK) fail_msg("%s", th_last_error());
  th_program *p = NULL;
  th_compile_options o = {.seed = 7};
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  assert_int_equal(th_program_num_random_ops(p), 2);
  uint64_t seed, offset;
  assert_int_equal(th_program_get_rng_state(p, &seed, &offset), TH_OK);
  assert_true(seed == 7 && offset == 0);
  th_tensor **a = run(p, 0, NULL, 5);
  /* the state each draw saw: the compile seed; offsets 0 and 16; the generator advanced by 32 */
  assert_true(th_tensor_get_f64(a[2], 0) == 7.0);
  assert_true(th_tensor_get_f64(a[3], 0) == 0.0 && th_tensor_get_f64(a[4], 0) == 16.0);
  assert_int_equal(th_program_get_rng_state(p, &seed, &offset), TH_OK);
  assert_true(seed == 7 && offset == 32);
  for (int i = 0; i < 64; i++) {
    double v = th_tensor_get_f64(a[0], i);
    assert_true(v >= 0.0 && v < 1.0);
  }
  assert_true(count_equal(a[0], a[1], 64) < 4); /* two draws of one run never share numbers */
  th_tensor **b = run(p, 0, NULL, 5);
  assert_true(count_equal(a[0], b[0], 64) < 4); /* the next run draws fresh numbers */
  assert_true(th_tensor_get_f64(b[3], 0) == 32.0);
  /* setting the state a run started from reproduces it */
  assert_int_equal(th_program_set_rng_state(p, 7, 0), TH_OK);
  th_tensor **c = run(p, 0, NULL, 5);
  assert_int_equal(count_equal(a[0], c[0], 64), 64);
  assert_int_equal(count_equal(a[1], c[1], 64), 64);
  /* another seed, another stream */
  assert_int_equal(th_program_set_rng_state(p, 8, 0), TH_OK);
  th_tensor **d = run(p, 0, NULL, 5);
  assert_true(count_equal(a[0], d[0], 64) < 4);
  /* uniform_philox is a function of its arguments: constant seed and offset give the same numbers as
   * the state that held them, in another program */
  th_trace *t2 = NULL;
  const char *text2 = "def computation():\n"
                      "  u = prims.uniform_philox((64,), 0.0, 1.0, device=devices.Device(\"cpu\"), "
                      "dtype=dtypes.float32, seed=7, offset=16)\n"
                      "  return u\n";
  if (th_trace_parse(text2, "rng2.py", &t2) != TH_OK) fail_msg("%s", th_last_error());
  th_program *p2 = NULL;
  assert_int_equal(th_program_compile(t2, NULL, &p2), TH_OK);
  assert_int_equal(th_program_num_random_ops(p2), 0);
  th_tensor **e = run(p2, 0, NULL, 1);
  assert_int_equal(count_equal(a[1], e[0], 64), 64);
  free_outputs(5, a);
  free_outputs(5, b);
  free_outputs(5, c);
  free_outputs(5, d);
  free_outputs(1, e);
  th_program_free(p2);
  th_program_free(p);
  th_trace_free(t2);
  th_trace_free(tr);
}

/* CSE merges two uniform_philox reading one state (the same numbers) but never two state reads. */
static void test_rng_state_cse(void **state) {
  (void)state;
  const char *text = "def computation():\n"
                     "  (s0, o0) = prims.get_and_update_rng_state(1, device=devices.Device(\"cpu\"))\n"
                     "  (s1, o1) = prims.get_and_update_rng_state(1, device=devices.Device(\"cpu\"))\n"
                     "  u0 = prims.uniform_philox((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), "
                     "dtype=dtypes.float32, seed=s0, offset=o0)\n"
                     "  u1 = prims.uniform_philox((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), "
                     "dtype=dtypes.float32, seed=s0, offset=o0)\n"
                     "  u2 = prims.uniform_philox((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), "
                     "dtype=dtypes.float32, seed=s1, offset=o1)\n"
                     "  return (u0, u1, u2)\n";
  th_trace *tr = NULL, *c = NULL;
  if (th_trace_parse(text, "rng_cse.py", &tr) != TH_OK) fail_msg("%s", th_last_error());
  assert_int_equal(th_transform_cse(tr, &c), TH_OK);
  int states = 0, uniforms = 0;
  for (int i = 0; i < th_trace_num_bsyms(c); i++) {
    th_op_id id = th_trace_bsym(c, i)->sym->id;
    states += id == TH_OP_prims_get_and_update_rng_state;
    uniforms += id == TH_OP_prims_uniform_philox;
  }
  assert_int_equal(states, 2);
  assert_int_equal(uniforms, 2);
  th_trace_free(c);
  th_trace_free(tr);
}

/* Bad generator arguments and calls: a clear error, nothing changed. */
static void test_rng_state_errors(void **state) {
  (void)state;
  const char *bad_seed = "def computation(x):\n"
                         "  # x: \"cpu f32[]\"\n"
                         "  u = prims.uniform_philox((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), "
                         "dtype=dtypes.float32, seed=x, offset=0)\n"
                         "  return u\n";
  th_trace *tr = NULL;
  assert_int_equal(th_trace_parse(bad_seed, "bad.py", &tr), TH_ERR_TYPE);
  assert_non_null(strstr(th_last_error(), "prims.uniform_philox: seed: expected an int or a 0-dim integer tensor, "
                                          "but got a float32 tensor of shape []"));
  const char *bad_blocks = "def computation():\n"
                           "  (s0, o0) = prims.get_and_update_rng_state(-1, device=devices.Device(\"cpu\"))\n"
                           "  return s0\n";
  assert_int_equal(th_trace_parse(bad_blocks, "bad.py", &tr), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "blocks: expected a count >= 0, but got -1"));
  /* an offset past the end of the stream: an error, not a wrapped (shared) stream */
  th_trace *wrap = NULL;
  const char *wrap_text =
    "def computation():\n"
    "  (s0, o0) = prims.get_and_update_rng_state(4611686018427387904, device=devices.Device(\"cpu\"))\n"
    "  return s0\n";
  if (th_trace_parse(wrap_text, "wrap.py", &wrap) != TH_OK) fail_msg("%s", th_last_error());
  th_program *wp = NULL;
  assert_int_equal(th_program_compile(wrap, NULL, &wp), TH_OK);
  assert_int_equal(th_program_set_rng_state(wp, 1, (uint64_t)-4), TH_OK);
  int wn = 0;
  th_tensor **wo = NULL;
  assert_int_equal(th_program_run(wp, 0, NULL, &wn, &wo), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "passes the end of the stream"));
  uint64_t s, o;
  assert_int_equal(th_program_get_rng_state(wp, &s, &o), TH_OK);
  assert_true(s == 1 && o == (uint64_t)-4); /* unchanged */
  th_program_free(wp);
  th_trace_free(wrap);
  assert_int_equal(th_program_get_rng_state(NULL, &s, &o), TH_ERR_VALUE);
  assert_int_equal(th_program_set_rng_state(NULL, 1, 2), TH_ERR_VALUE);
  assert_int_equal(th_program_num_random_ops(NULL), 0);
  th_trace *u = uniform_trace();
  th_program *p = NULL;
  assert_int_equal(th_program_compile(u, NULL, &p), TH_OK);
  assert_int_equal(th_program_get_rng_state(p, NULL, &o), TH_ERR_VALUE);
  assert_int_equal(th_program_num_random_ops(p), 1);
  th_program_free(p);
  th_trace_free(u);
}

static void test_random_streams(void **state) {
  (void)state;
  th_trace *tr = uniform_trace();
  th_program *p[3];
  th_compile_options o = {.seed = 42};
  assert_int_equal(th_program_compile(tr, &o, &p[0]), TH_OK);
  assert_int_equal(th_program_compile(tr, &o, &p[1]), TH_OK);
  o.seed = 43;
  assert_int_equal(th_program_compile(tr, &o, &p[2]), TH_OK);
  th_tensor **a = run(p[0], 0, NULL, 1), **a2 = run(p[0], 0, NULL, 1);
  th_tensor **b = run(p[1], 0, NULL, 1), **c = run(p[2], 0, NULL, 1);
  int same_ab = 0, same_aa2 = 0, same_ac = 0;
  for (int i = 0; i < 64; i++) {
    double v = th_tensor_get_f64(a[0], i);
    assert_true(v >= 0.0 && v < 1.0);
    same_ab += v == th_tensor_get_f64(b[0], i);
    same_aa2 += v == th_tensor_get_f64(a2[0], i);
    same_ac += v == th_tensor_get_f64(c[0], i);
  }
  assert_int_equal(same_ab, 64); /* same seed, same run index: same stream */
  assert_true(same_aa2 < 4);     /* the next run draws fresh numbers */
  assert_true(same_ac < 4);      /* another seed, another stream */
  free_outputs(1, a);
  free_outputs(1, a2);
  free_outputs(1, b);
  free_outputs(1, c);
  for (int i = 0; i < 3; i++) th_program_free(p[i]);
  th_trace_free(tr);
}

/* ---- fault injection ---------------------------------------------------------------------------------- */

static void test_fault_injection(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t as[2] = {8, 16}, ws[2] = {4, 16}, bs[1] = {4};
  th_value *x = input(tr, "x", TH_F32, 2, as), *w = input(tr, "w", TH_F32, 2, ws);
  th_value *b = input(tr, "b", TH_F32, 1, bs);
  th_arg args[3] = {th_arg_value(x), th_arg_value(w), th_arg_value(b)};
  th_value *t0 = call(tr, "prims.linear", 3, args);
  th_value *t1 = call2(tr, "prims.add", t0, t0);
  th_value *t2 = call1(tr, "prims.tanh", t1);
  th_value *outs[2] = {t2, t1};
  ret(tr, 2, outs);
  th_tensor *in[3] = {rand_tensor(TH_F32, 2, as), rand_tensor(TH_F32, 2, ws), rand_tensor(TH_F32, 1, bs)};

  int compile_ok_at = 0;
  for (long n = 1; n < 100000; n++) {
    th_program *p = NULL;
    th_alloc_fail_after(n);
    th_status st = th_program_compile(tr, NULL, &p);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      compile_ok_at = (int)n;
      th_program_free(p);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(p);
  }
  assert_true(compile_ok_at > 1);

  th_program *p = compile(tr, NULL, 0);
  int run_ok_at = 0;
  for (long n = 1; n < 100000; n++) {
    int nout = -1;
    th_tensor **out = NULL;
    th_alloc_fail_after(n);
    th_status st = th_program_run(p, 3, in, &nout, &out);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      run_ok_at = (int)n;
      assert_int_equal(nout, 2);
      free_outputs(nout, out);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(out);
    for (int k = 0; k < 3; k++) assert_int_equal(refcount(in[k]), 1);
  }
  assert_true(run_ok_at > 1);
  th_program_free(p);
  for (int k = 0; k < 3; k++) th_tensor_release(in[k]);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_elementwise_program),
    cmocka_unit_test(test_output_flattening),
    cmocka_unit_test(test_executor_errors),
    cmocka_unit_test(test_input_checks),
    cmocka_unit_test(test_device_check),
    cmocka_unit_test(test_dce),
    cmocka_unit_test(test_dce_dels),
    cmocka_unit_test(test_matmul_f32),
    cmocka_unit_test(test_matmul_bf16),
    cmocka_unit_test(test_linear_f32),
    cmocka_unit_test(test_linear_bf16),
    cmocka_unit_test(test_matmul_f64_goes_to_eager),
    cmocka_unit_test(test_blas_cache_threads),
    cmocka_unit_test(test_intermediates_released),
    cmocka_unit_test(test_output_buffers_reused),
    cmocka_unit_test(test_kernel_errors),
    cmocka_unit_test(test_fusion_region_unpacked),
    cmocka_unit_test(test_torch_ops_decomposed),
    cmocka_unit_test(test_philox_known_answers),
    cmocka_unit_test(test_random_streams),
    cmocka_unit_test(test_rng_state_values),
    cmocka_unit_test(test_rng_state_cse),
    cmocka_unit_test(test_rng_state_errors),
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
