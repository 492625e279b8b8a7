/* scaled_mm.c — the fp8 matrix product: ltorch._scaled_mm (PyTorch's torch._scaled_mm) and the prim
 * it records, prims.scaled_mm. Both live here because they share one set of checks.
 *
 * Semantics (PyTorch 2.x's torch._scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None,
 * out_dtype=None, use_fast_accum=False) with tensor-wise scaling): a [M, K] and b [K, N]
 * are fp8 (float8_e4m3fn or float8_e5m2, not both e5m2 — cuBLASLt refuses that pair); scale_a and
 * scale_b are one-element float32 tensors (0-d or any shape of numel 1) that DEcode, so
 *   out[M, N] = (a @ b) * scale_a * scale_b (+ bias[N]),   accumulated in float32,
 * in out_dtype: float16, bfloat16, float32 or float64, or an fp8 format, which is PyTorch's default
 * (out_dtype=None is a's dtype). An fp8 output is the float32 result (bias added) cast to that format
 * with PyTorch's cast (e4m3fn saturates at 448, e5m2 overflows to inf), as torch 2.14's CPU kernel
 * computes it; ltorch._scaled_mm records it as prims.scaled_mm(..., float32) and a
 * prims.convert_element_type. b may have any strides (PyTorch requires it column-major, `x.t()` of a
 * row-major [N, K] matrix; the CPU kernel takes any layout). Deliberate differences from CUDA
 * PyTorch, whose limits are cuBLASLt's: no "divisible by 16" rule on the extents; a bias is allowed
 * for every out_dtype, with the bias dtype equal to out_dtype (or bfloat16 for a float32 output, as
 * PyTorch pairs them; bfloat16 or float32 for an fp8 output). scale_result is cuBLASLt's scale of an
 * fp8 output: a one-element float32 tensor, ignored for other outputs (as by cuBLASLt and torch's CPU
 * kernel); with an fp8 output it is not supported (TH_ERR_NOT_IMPLEMENTED: CUDA multiplies the result
 * by it before the cast, torch 2.14's CPU kernel ignores it). use_fast_accum is accepted and ignored
 * (accumulation is always exact float32 over exact fp8 decodes). Row-wise and block-wise scales
 * (scale_a [M, 1], ...) are not supported. Not
 * differentiable: its vjp rule refuses (TH_ERR_NOT_IMPLEMENTED) when a cotangent reaches it, e.g.
 * through a bias or scale that requires grad; the float8 transform's linears differentiate through
 * ltorch.float8_linear_output (float8_linear.c), whose rule gives _scaled_mm's output no cotangent.
 *
 * Why a prim: the executors claim prims, and no composition of existing prims expresses an fp8 GEMM
 * (math prims reject fp8; converting both operands to float32 first would be a different, 4x larger
 * computation). ltorch._scaled_mm therefore checks its arguments with PyTorch's wording, resolves the
 * defaults and records prims.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype), which the eager
 * executor runs (executors/eager/scaled_mm.c). */
#include <inttypes.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

static bool out_dtype_ok(th_dtype dt) { return dt == TH_F16 || dt == TH_BF16 || dt == TH_F32 || dt == TH_F64; }

/* A one-element float32 scale ("Both scale_a and scale_b must be float (fp32) tensors"). */
static th_status check_scale(const char *op, const char *what, const th_value *s, const th_value *a) {
  if (s->dtype != TH_F32)
    return th_error(TH_ERR_RUNTIME, "%s: Both scale_a and scale_b must be float (fp32) tensors, but %s is %s", op, what,
                    th_tu_scalar_type_name(s->dtype));
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
  if (n != 1) {
    char buf[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: only tensor-wise scaling is supported: %s must have one element (a 0-d or 1-element "
                    "float32 tensor), but its shape is %s",
                    op, what, th_meta_shape_str(s->shape, s->ndim, buf, sizeof buf));
  }
  if (!th_device_eq(s->device, a->device)) {
    char d0[32], d1[32];
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s.device=%s and mat1.device=%s to be the same", op, what,
                    th_device_str(s->device, d0, sizeof d0), th_device_str(a->device, d1, sizeof d1));
  }
  return TH_OK;
}

/* Every check of the op, shared by the ltorch op (op = "ltorch._scaled_mm", fp8_out: fp8 out_dtypes
 * allowed) and the prim (which has no fp8 outputs). */
static th_status check(const char *op, const th_value *a, const th_value *b, const th_value *sa, const th_value *sb,
                       const th_value *bias, th_dtype out_dtype, bool fp8_out) {
  if (a->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: mat1 must be a matrix, but it has %d dimensions", op, a->ndim);
  if (b->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: mat2 must be a matrix, but it has %d dimensions", op, b->ndim);
  if (a->shape[1] != b->shape[0])
    return th_error(TH_ERR_RUNTIME,
                    "%s: mat1 and mat2 shapes cannot be multiplied (%" PRId64 "x%" PRId64 " and %" PRId64 "x%" PRId64
                    ")",
                    op, a->shape[0], a->shape[1], b->shape[0], b->shape[1]);
  if (!th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected mat1 to be Float8 matrix got %s", op,
                    th_tu_scalar_type_name(a->dtype));
  if (!th_dtype_is_fp8(b->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected mat2 to be Float8 matrix got %s", op,
                    th_tu_scalar_type_name(b->dtype));
  if (a->dtype == TH_F8E5M2 && b->dtype == TH_F8E5M2)
    return th_error(TH_ERR_RUNTIME, "%s: Multiplication of two Float8_e5m2 matrices is not supported", op);
  if (!th_device_eq(a->device, b->device)) {
    char d0[32], d1[32];
    return th_error(TH_ERR_RUNTIME, "%s: Expected mat1.device=%s and mat2.device=%s to be the same", op,
                    th_device_str(a->device, d0, sizeof d0), th_device_str(b->device, d1, sizeof d1));
  }
  TH_TRY(check_scale(op, "scale_a", sa, a));
  TH_TRY(check_scale(op, "scale_b", sb, a));
  if (th_dtype_is_fp8(out_dtype) && !fp8_out)
    return th_error(TH_ERR_VALUE,
                    "%s: out_dtype must be float16, bfloat16, float32 or float64 (ltorch._scaled_mm "
                    "records an fp8 output as a float32 product and a cast), but got %s",
                    op, th_dtype_name(out_dtype));
  if (!out_dtype_ok(out_dtype) && !th_dtype_is_fp8(out_dtype))
    return th_error(TH_ERR_RUNTIME,
                    "%s: out_dtype must be a floating point dtype (float16, bfloat16, float32, float64, "
                    "float8_e4m3fn or float8_e5m2), but got %s",
                    op, th_dtype_name(out_dtype));
  if (bias) {
    int64_t n = 1;
    for (int d = 0; d < bias->ndim; d++) n *= bias->shape[d];
    if (bias->ndim != 1 || n != b->shape[1]) {
      char buf[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME, "%s: Bias must be a vector of size %" PRId64 " (mat2.shape[1]), but got shape %s",
                      op, b->shape[1], th_meta_shape_str(bias->shape, bias->ndim, buf, sizeof buf));
    }
    if (th_dtype_is_fp8(out_dtype) ? bias->dtype != TH_BF16 && bias->dtype != TH_F32
                                   : bias->dtype != out_dtype && !(out_dtype == TH_F32 && bias->dtype == TH_BF16))
      return th_error(TH_ERR_RUNTIME, "%s: Bias must be %s%s to compute %s output, but got %s", op,
                      th_tu_scalar_type_name(th_dtype_is_fp8(out_dtype) ? TH_BF16 : out_dtype),
                      out_dtype == TH_F32          ? " or BFloat16"
                      : th_dtype_is_fp8(out_dtype) ? " or Float"
                                                   : "",
                      th_tu_scalar_type_name(out_dtype), th_tu_scalar_type_name(bias->dtype));
    if (!th_device_eq(bias->device, a->device)) {
      char d0[32], d1[32];
      return th_error(TH_ERR_RUNTIME, "%s: Expected bias.device=%s and mat1.device=%s to be the same", op,
                      th_device_str(bias->device, d0, sizeof d0), th_device_str(a->device, d1, sizeof d1));
    }
  }
  return TH_OK;
}

/* prims.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, /): the strict form, every argument explicit. */
th_status prims_scaled_mm_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *b = th_meta_tensor(&args[1]);
  const th_value *sa = th_meta_tensor(&args[2]), *sb = th_meta_tensor(&args[3]), *bias = th_meta_tensor(&args[4]);
  if (!a || !b || !sa || !sb) return th_error(TH_ERR_TYPE, "%s: expected a, b, scale_a and scale_b to be tensors", op);
  if (args[4].kind != TH_ARG_NONE && !bias)
    return th_error(TH_ERR_TYPE, "%s: expected bias to be a tensor or None", op);
  th_dtype dt;
  bool has;
  TH_TRY(th_tu_dtype_arg(op, "out_dtype", &args[5], &dt, &has));
  if (!has) return th_error(TH_ERR_TYPE, "%s: expected out_dtype to be a dtype, but got None", op);
  TH_TRY(check(op, a, b, sa, sb, bias, dt, false));
  int64_t shape[2] = {a->shape[0], b->shape[1]};
  return th_meta_new_tensor(tr, dt, a->device, 2, shape, false, out);
}

/* ltorch._scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
 *                   use_fast_accum=False) */
th_status ltorch__scaled_mm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *b = th_meta_tensor(&args[1]);
  const th_value *sa = th_meta_tensor(&args[2]), *sb = th_meta_tensor(&args[3]), *bias = th_meta_tensor(&args[4]);
  const th_value *sr = th_meta_tensor(&args[5]);
  if (!a) return th_error(TH_ERR_TYPE, "%s: expected a (mat1) to be a tensor", op);
  if (args[5].kind != TH_ARG_NONE && !sr)
    return th_error(TH_ERR_TYPE, "%s: expected scale_result to be a tensor or None", op);
  th_dtype dt;
  bool has, fast;
  TH_TRY(th_tu_dtype_arg(op, "out_dtype", &args[6], &dt, &has));
  if (!has) dt = a->dtype;                                   /* PyTorch: out_dtype.value_or(mat1.scalar_type()) */
  TH_TRY(th_tu_bool(op, "use_fast_accum", &args[7], &fast)); /* accepted; accumulation is exact f32 */
  TH_TRY(check(op, a, b, sa, sb, bias, dt, true));
  if (sr) {
    if (sr->dtype != TH_F32 || th_value_numel(sr) != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: scale_result must be a float32 tensor with one element, but got %s with "
                      "%" PRId64 " elements",
                      op, th_dtype_name(sr->dtype), th_value_numel(sr));
    if (th_dtype_is_fp8(dt))
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: scale_result with an fp8 output (out_dtype=%s) is not supported (CUDA scales the result "
                      "by it, torch's CPU kernel ignores it); pass scale_result=None, or scale before the cast",
                      op, th_dtype_name(dt));
    /* other outputs ignore it, as cuBLASLt and torch's CPU kernel do */
  }
  if (!th_dtype_is_fp8(dt)) {
    th_arg pargs[6] = {args[0], args[1], args[2], args[3], args[4], th_arg_dtype(dt)};
    return th_call(tr, TH_OP_prims_scaled_mm, 6, pargs, out);
  }
  /* an fp8 output: the float32 product (bias added in float32), then PyTorch's cast */
  th_arg pargs[6] = {args[0], args[1], args[2], args[3], args[4], th_arg_dtype(TH_F32)}, mm;
  TH_TRY(th_call(tr, TH_OP_prims_scaled_mm, 6, pargs, &mm));
  th_arg cargs[2] = {mm, th_arg_dtype(dt)};
  return th_call(tr, TH_OP_prims_convert_element_type, 2, cargs, out);
}

/* The rule of ltorch._scaled_mm: a rule rather than none, so a trace where _scaled_mm reads values that
 * require grad (the float8 transform's scales and bias) differentiates as long as no gradient has to
 * flow through it; when one does, the derivative is refused. */
static th_status scaled_mm_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)tr, (void)cts, (void)grads;
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "grad: the derivative of %s is not implemented (fp8 GEMM operands, scales and bias are not "
                  "differentiated); differentiate a float8 linear through the float8 transform, whose "
                  "ltorch.float8_linear_output has torchao's backward",
                  b->sym->qualname);
}

const th_vjp_entry th_vjp_table_torch_scaled_mm[] = {
  {TH_OP_ltorch__scaled_mm, TH_VJP_RULE, scaled_mm_vjp},
};
const int th_vjp_table_torch_scaled_mm_n =
  (int)(sizeof th_vjp_table_torch_scaled_mm / sizeof th_vjp_table_torch_scaled_mm[0]);
