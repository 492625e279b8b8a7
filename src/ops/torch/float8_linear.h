/* float8_linear.h — the float8 linear recipe (torchao's dynamic per-tensor scaling),
 * shared by the two places that record it: the float8 transform (src/transforms/float8.c), which
 * quantizes each converted linear's input and weight in the forward, and the vjp rule of
 * ltorch.float8_linear_output (src/ops/torch/float8_linear.c), which quantizes the cotangent in the
 * backward. One recipe, so the forward and the backward cannot drift apart. */
#ifndef TH_FLOAT8_LINEAR_H
#define TH_FLOAT8_LINEAR_H

#include <stddef.h>

#include "ops/torch/torch_util.h"

/* Dynamic per-tensor quantization of the floating tensor v (float16 / bfloat16 / float32) into fp8
 * format `fmt` (max M: 448 for float8_e4m3fn, 57344 for float8_e5m2), recorded as ltorch ops into
 * tr at its current scope:
 *   v32 = v.float() (when v is not float32); amax = amax(abs(v32)); scale = M / clamp(amax, 1e-12);
 *   *q = to(clamp(v32 * scale, -M, M), fmt)  (the saturated cast);  *inv = reciprocal(scale)
 * *q has v's shape and dtype fmt; *inv is a float32 0-dim tensor (the decode scale _scaled_mm takes).
 * The amax, scale, fp8 and inverse-scale values get fresh names "<tag>_<role>_amax_<N>",
 * "<tag>_<role>_scale_<N>", "<tag>_<role>_fp8_<N>", "<tag>_<role>_inv_scale_<N>" (tag at most 28
 * characters, as th_f8_linear_tag makes it, and role at most 16, so a name stays within the 63
 * characters th_name_fresh writes). Errors: those of the recorded ops; TH_ERR_NOMEM. */
th_status th_f8_quantize(th_trace *tr, th_arg v, th_dtype fmt, const char *tag, const char *role, th_arg *q,
                         th_arg *inv);

/* The tag naming one linear's values: the weight's name without the frontend's "t_" prefix and a
 * "_weight" suffix (module parameter t_fc1_weight -> "fc1"; the prefix stays where a digit follows
 * it, t_0_weight -> "t_0", so names remain identifiers), cut to 28 characters; "linear<index>"
 * for an unnamed intermediate weight (t12) or, with index < 0, "linear". buf gets at most n - 1
 * characters. */
void th_f8_linear_tag(const th_value *w, int index, char *buf, size_t n);

#endif
