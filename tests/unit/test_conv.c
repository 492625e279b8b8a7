/* test_conv.c — prims.convolution: its meta (output shapes of convolutions and transposed ones, and
 * ATen's error for each bad shape, group count and parameter), and the BLAS executor's oneDNN kernel
 * against the eager executor's direct loops (an independent implementation) on float32 problems with
 * groups, strides, dilations, padding and output padding, 1 to 3 spatial dims. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/ir.h"
#include "thunder/thunder.h"

#include "program_test_util.h"

static const th_device CPU = {TH_CPU, 0};

static th_arg ints(th_arg *items, int n, const int64_t *v) {
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

typedef struct conv_case {
  int nd;
  int64_t x[5], w[5];
  int64_t bias; /* 0: none, else its length */
  int64_t s[3], p[3], d[3], op[3];
  bool transposed;
  int64_t groups;
} conv_case;

/* prims.convolution on inputs of the case's shapes (float32 unless dt says otherwise) */
static th_status conv_meta(const conv_case *c, th_dtype xdt, th_dtype wdt, th_trace **trp, th_arg *out) {
  th_trace *tr = th_trace_new("conv");
  *trp = tr;
  th_value *x = th_trace_add_tensor_input(tr, "x", xdt, CPU, c->nd + 2, c->x);
  th_value *w = th_trace_add_tensor_input(tr, "w", wdt, CPU, c->nd + 2, c->w);
  th_arg b = th_arg_none();
  if (c->bias) b = th_arg_value(th_trace_add_tensor_input(tr, "b", xdt, CPU, 1, &c->bias));
  th_arg si[3], pi[3], di[3], oi[3];
  th_arg args[9] = {th_arg_value(x),
                    th_arg_value(w),
                    b,
                    ints(si, c->nd, c->s),
                    ints(pi, c->nd, c->p),
                    ints(di, c->nd, c->d),
                    th_arg_bool(c->transposed),
                    ints(oi, c->nd, c->op),
                    th_arg_int(c->groups)};
  return th_trace_call(tr, "prims.convolution", 9, args, 0, NULL, NULL, out);
}

static void expect_shape(const conv_case *c, int ndim, const int64_t *shape) {
  th_trace *tr;
  th_arg out;
  th_status st = conv_meta(c, TH_F32, TH_F32, &tr, &out);
  if (st != TH_OK) fail_msg("unexpected error: %s", th_last_error());
  assert_int_equal(out.kind, TH_ARG_VALUE);
  const th_value *v = out.u.value;
  assert_int_equal(v->ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(v->shape[i], shape[i]);
  assert_int_equal(v->dtype, TH_F32);
  th_trace_free(tr);
}

static void expect_error(const conv_case *c, th_dtype xdt, th_dtype wdt, th_status code, const char *frag) {
  th_trace *tr;
  th_arg out;
  th_status st = conv_meta(c, xdt, wdt, &tr, &out);
  if (st != code || !strstr(th_last_error(), frag))
    fail_msg("expected status %d with \"%s\", got status %d: \"%s\"", (int)code, frag, (int)st, th_last_error());
  th_trace_free(tr);
}

/* x (2, 4, 5, 5), w (6, 4, 3, 3), stride 1, no padding, dilation 1, one group; each test changes some */
static conv_case base2d(void) {
  return (conv_case){.nd = 2, .x = {2, 4, 5, 5}, .w = {6, 4, 3, 3}, .s = {1, 1}, .d = {1, 1}, .groups = 1};
}
#define SET2(f, a, b) (c.f[0] = (a), c.f[1] = (b))
#define SET4(f, a, b, e, g) (c.f[0] = (a), c.f[1] = (b), c.f[2] = (e), c.f[3] = (g))

static void test_output_shapes(void **state) {
  (void)state;
  conv_case c;
  /* (L + 2p - d (K - 1) - 1) / s + 1, floored */
  expect_shape((c = base2d(), SET2(s, 2, 1), SET2(p, 1, 2), &c), 4, (int64_t[]){2, 6, 3, 7});
  expect_shape(
    &(conv_case){
      .nd = 1, .x = {2, 4, 12}, .w = {6, 2, 3}, .bias = 6, .s = {2}, .p = {2}, .d = {3}, .op = {0}, .groups = 2},
    3, (int64_t[]){2, 6, 5});
  expect_shape(&(conv_case){.nd = 3,
                            .x = {1, 2, 5, 6, 7},
                            .w = {3, 2, 2, 3, 2},
                            .s = {2, 1, 2},
                            .p = {1, 0, 1},
                            .d = {1, 1, 1},
                            .op = {0, 0, 0},
                            .groups = 1},
               5, (int64_t[]){1, 3, 3, 4, 4});
  /* transposed: (L - 1) s - 2 p + d (K - 1) + op + 1, C_out = w.shape[1] * groups */
  expect_shape(&(conv_case){.nd = 2,
                            .x = {2, 4, 5, 6},
                            .w = {4, 3, 3, 2},
                            .bias = 6,
                            .s = {3, 2},
                            .p = {1, 0},
                            .d = {2, 2},
                            .op = {2, 1},
                            .transposed = true,
                            .groups = 2},
               4, (int64_t[]){2, 6, 17, 14});
  /* output_padding of a non-transposed convolution is ignored, as ATen does */
  expect_shape((c = base2d(), SET2(op, 1, 1), &c), 4, (int64_t[]){2, 6, 3, 3});
}

static void test_errors(void **state) {
  (void)state;
  conv_case c;
  expect_error((c = base2d(), SET4(x, 2, 3, 5, 5), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Given groups=1, weight of size [6, 4, 3, 3], expected input[2, 3, 5, 5] to have 4 channels, but got 3 "
               "channels instead");
  expect_error((c = base2d(), SET4(w, 5, 2, 3, 3), c.groups = 2, &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got weight of size [5, 2, 3, "
               "3] instead");
  expect_error((c = base2d(), c.bias = 5, &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Given weight of size [6, 4, 3, 3], expected bias to be 1-dimensional with 6 elements, but got bias of "
               "size [5] instead");
  expect_error((c = base2d(), SET4(x, 2, 4, 2, 2), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be greater "
               "than actual input size");
  expect_error((c = base2d(), SET2(s, 0, 1), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "non-positive stride is not supported");
  expect_error((c = base2d(), SET2(p, -1, 0), &c), TH_F32, TH_F32, TH_ERR_RUNTIME, "negative padding is not supported");
  expect_error((c = base2d(), SET2(d, 1, 0), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "non-positive dilation is not supported");
  expect_error((c = base2d(), c.groups = 0, &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "non-positive groups is not supported");
  expect_error((c = base2d(), SET4(w, 4, 6, 3, 3), c.transposed = true, SET2(op, 1, 1), &c), TH_F32, TH_F32,
               TH_ERR_RUNTIME, "output padding must be smaller than either stride or dilation");
  expect_error((c = base2d(), SET4(w, 3, 6, 3, 3), c.transposed = true, &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Given transposed=1, weight of size [3, 6, 3, 3], expected input[2, 4, 5, 5] to have 3 channels, but "
               "got 4 channels instead");
  expect_error((c = base2d(), &c), TH_F32, TH_F64, TH_ERR_RUNTIME,
               "Input type (float32) and weight type (float64) should be the same");
  expect_error((c = base2d(), &c), TH_BOOL, TH_BOOL, TH_ERR_NOT_IMPLEMENTED,
               "convolution is not implemented for 'bool'");
  expect_error((c = base2d(), SET4(w, 0, 4, 3, 3), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of size [0, 4, 3, 3] "
               "instead");
  expect_error((c = base2d(), SET4(x, 2, 4, 0, 5), SET4(w, 6, 4, 1, 1), SET2(p, 1, 1), &c), TH_F32, TH_F32,
               TH_ERR_RUNTIME,
               "Only zero batch or zero channel inputs are supported, but got input shape: [2, 4, 0, 5]");
  expect_error((c = base2d(), SET4(w, 6, 4, 0, 3), &c), TH_F32, TH_F32, TH_ERR_RUNTIME,
               "should not contain zero dimensions");
  /* a list of the wrong length */
  th_trace *tr = th_trace_new("conv");
  int64_t xs[4] = {2, 4, 5, 5}, ws[4] = {6, 4, 3, 3}, one = 1, zero = 0, s3[3] = {1, 1, 1};
  th_arg si[3], pi[1], di[1], oi[1], out;
  th_arg args[9] = {th_arg_value(th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 4, xs)),
                    th_arg_value(th_trace_add_tensor_input(tr, "w", TH_F32, CPU, 4, ws)),
                    th_arg_none(),
                    ints(si, 3, s3),
                    ints(pi, 1, &zero),
                    ints(di, 1, &one),
                    th_arg_bool(false),
                    ints(oi, 1, &zero),
                    th_arg_int(1)};
  assert_int_equal(th_trace_call(tr, "prims.convolution", 9, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "expected stride to be a single integer value or a list of 2 values"));
  th_trace_free(tr);
}

/* ---- the oneDNN kernel against the direct loops --------------------------------------------------------- */

static char *shape_str(const int64_t *s, int n, char *buf) {
  int o = 0;
  for (int i = 0; i < n; i++) o += sprintf(buf + o, "%s%" PRId64, i ? ", " : "", s[i]);
  return buf;
}

static char *list_str(const int64_t *s, int n, char *buf) {
  int o = sprintf(buf, "(");
  for (int i = 0; i < n; i++) o += sprintf(buf + o, "%" PRId64 ", ", s[i]);
  sprintf(buf + o, ")");
  return buf;
}

static th_tensor *random_tensor(int ndim, const int64_t *shape, unsigned *seed) {
  th_tensor *t = th_tensor_empty(TH_F32, ndim, shape);
  assert_non_null(t);
  float *d = th_tensor_data(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) {
    *seed = *seed * 1103515245u + 12345u;
    d[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  return t;
}

static void compare_blas_eager(const conv_case *c) {
  char text[2048], xs[64], ws[64], s[64], p[64], d[64], op[64];
  const int n = c->nd + 2;
  int o = snprintf(text, sizeof text,
                   "import thunder\nimport thunder.core.prims as prims\nimport torch\n\n@torch.no_grad()\n"
                   "def computation(x, w%s):\n  # x: \"cpu f32[%s]\"\n  # w: \"cpu f32[%s]\"\n",
                   c->bias ? ", b" : "", shape_str(c->x, n, xs), shape_str(c->w, n, ws));
  if (c->bias) o += snprintf(text + o, sizeof text - (size_t)o, "  # b: \"cpu f32[%" PRId64 "]\"\n", c->bias);
  snprintf(text + o, sizeof text - (size_t)o,
           "  t0 = prims.convolution(x, w, %s, %s, %s, %s, %s, %s, %" PRId64 ")\n  return t0\n", c->bias ? "b" : "None",
           list_str(c->s, c->nd, s), list_str(c->p, c->nd, p), list_str(c->d, c->nd, d),
           c->transposed ? "True" : "False", list_str(c->op, c->nd, op), c->groups);
  const char *blas[] = {"blas", "eager"}, *eager[] = {"eager"};
  th_program *pb = compile_text(text, blas, 2), *pe = compile_text(text, eager, 1);
  unsigned seed = 7;
  th_tensor *in[3] = {random_tensor(n, c->x, &seed), random_tensor(n, c->w, &seed),
                      c->bias ? random_tensor(1, &c->bias, &seed) : NULL};
  const int nin = c->bias ? 3 : 2;
  th_tensor *rb = run_one(pb, nin, in), *re = run_one(pe, nin, in);
  assert_int_equal(th_tensor_numel(rb), th_tensor_numel(re));
  const float *a = th_tensor_data(rb), *b = th_tensor_data(re);
  for (int64_t i = 0; i < th_tensor_numel(rb); i++)
    if (fabsf(a[i] - b[i]) > 1e-4f * (1.0f + fabsf(b[i])))
      fail_msg("element %" PRId64 ": blas %g, eager %g\n%s", i, (double)a[i], (double)b[i], text);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_tensor_release(rb);
  th_tensor_release(re);
  th_program_free(pb);
  th_program_free(pe);
}

static void test_onednn_matches_direct_loops(void **state) {
  (void)state;
  compare_blas_eager(&(conv_case){.nd = 2,
                                  .x = {2, 4, 9, 8},
                                  .w = {6, 2, 3, 3},
                                  .bias = 6,
                                  .s = {2, 1},
                                  .p = {1, 2},
                                  .d = {2, 1},
                                  .op = {0, 0},
                                  .groups = 2});
  compare_blas_eager(&(conv_case){.nd = 2,
                                  .x = {2, 16, 14, 14},
                                  .w = {32, 16, 3, 3},
                                  .s = {1, 1},
                                  .p = {1, 1},
                                  .d = {1, 1},
                                  .op = {0, 0},
                                  .groups = 1});
  compare_blas_eager(&(conv_case){
    .nd = 2, .x = {2, 8, 9, 9}, .w = {16, 8, 1, 1}, .s = {2, 2}, .p = {0, 0}, .d = {1, 1}, .op = {0, 0}, .groups = 1});
  compare_blas_eager(&(conv_case){
    .nd = 1, .x = {3, 6, 20}, .w = {6, 1, 5}, .bias = 6, .s = {3}, .p = {2}, .d = {2}, .op = {0}, .groups = 6});
  compare_blas_eager(&(conv_case){.nd = 3,
                                  .x = {1, 2, 5, 6, 7},
                                  .w = {3, 2, 2, 3, 2},
                                  .bias = 3,
                                  .s = {2, 1, 2},
                                  .p = {1, 0, 1},
                                  .d = {1, 2, 1},
                                  .op = {0, 0, 0},
                                  .groups = 1});
  /* transposed: output padding below the stride, and above it (below the dilation: padding_r < 0) */
  compare_blas_eager(&(conv_case){.nd = 2,
                                  .x = {2, 4, 5, 6},
                                  .w = {4, 3, 3, 2},
                                  .bias = 6,
                                  .s = {3, 2},
                                  .p = {1, 0},
                                  .d = {2, 2},
                                  .op = {2, 1},
                                  .transposed = true,
                                  .groups = 2});
  compare_blas_eager(&(conv_case){.nd = 2,
                                  .x = {2, 2, 4, 4},
                                  .w = {2, 2, 4, 5},
                                  .bias = 4,
                                  .s = {3, 2},
                                  .p = {1, 2},
                                  .d = {4, 4},
                                  .op = {2, 3},
                                  .transposed = true,
                                  .groups = 2});
  compare_blas_eager(&(conv_case){.nd = 3,
                                  .x = {1, 4, 3, 4, 3},
                                  .w = {4, 2, 2, 3, 2},
                                  .s = {2, 2, 2},
                                  .p = {0, 1, 0},
                                  .d = {1, 1, 1},
                                  .op = {1, 0, 1},
                                  .transposed = true,
                                  .groups = 1});
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_output_shapes),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_onednn_matches_direct_loops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
