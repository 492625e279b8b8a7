/* float8.c — the float8 training-recipe transform (torchao's convert_to_float8_training, dynamic
 * per-tensor scaling): every linear becomes fp8 math that the trace shows.
 *
 * For a top-level ltorch.linear or prims.linear y = x @ w.T + bias (x [..., K] and w [N, K] of one
 * float16 / bfloat16 / float32 dtype D — so also the bfloat16 prims.linear autocast records), with
 * fp8 formats Fx, Fw (max Mx, Mw: 448 for float8_e4m3fn, 57344 for float8_e5m2):
 *   x32 = x.float()                      (when D is not float32)
 *   amax_x = amax(abs(x32))              float32[], over every element
 *   scale_x = Mx / clamp(amax_x, 1e-12)  float32[]: the encode factor
 *   x_fp8 = to(clamp(x32 * scale_x, -Mx, Mx), Fx)   the saturated cast (th_tu_to_fp8_saturated)
 *   inv_scale_x = reciprocal(scale_x)    the decode factor _scaled_mm takes
 *   (the same for w; th_f8_quantize, shared with the backward), w_fp8_t = w_fp8.t()  [K, N],
 *   column-major (the layout cuBLASLt wants)
 *   mm = _scaled_mm(reshape(x_fp8, (-1, K)), w_fp8_t, inv_scale_x, inv_scale_w, bias, out_dtype=D)
 *   y = float8_linear_output(mm, x, w, bias, input_dtype=Fx, weight_dtype=Fw, grad_dtype=float8_e5m2)
 *     = reshape(mm, x.shape[:-1] + (N,))
 * The last op is the linear's autograd boundary (ops/torch/float8_linear.c): in the forward only the
 * reshape; its vjp rule is torchao's backward (the cotangent quantized to e5m2, x and w quantized again
 * to the same codes, two _scaled_mm, the bias gradient a sum), so the grad transform differentiates the
 * converted trace as torchao's Float8Linear differentiates: scales constant, casts straight-through.
 * Every step is an ltorch op recorded with th_call, so the new trace prints (and verifies, parses,
 * compiles) like any other; the scale/amax/fp8 values get readable names after the linear's weight
 * ("fc1_weight_scale_12" for the module parameter t_fc1_weight) and a comment line says what replaced
 * which linear. Later uses of the linear's output read y (same dtype and shape), so the rest of the
 * trace is copied unchanged (values substituted), fusion regions and parsed executor ops included.
 *
 * Skipped (copied as they are): linears of another dtype (float64), with an empty operand (amax of
 * nothing is undefined), nested inside other ops' decompositions, or refused by the filter. */
#include <stdio.h>
#include <string.h>

#include "ops/torch/float8_linear.h"
#include "thunder/transform.h"
#include "transforms/transforms.h"

/* old value -> new value, by id (ids are dense within a compilation) */
typedef struct {
  th_value **to;
  uint32_t n;
} id_map;

static th_status map_set(id_map *m, const th_value *from, th_value *to) {
  if (from->id >= m->n) {
    uint32_t n = m->n ? m->n : 64;
    while (n <= from->id) n *= 2;
    th_value **t = th_realloc(m->to, sizeof(th_value *) * n);
    if (!t) return th_error(TH_ERR_NOMEM, "float8: out of memory");
    memset(t + m->n, 0, sizeof(th_value *) * (n - m->n));
    m->to = t;
    m->n = n;
  }
  m->to[from->id] = to;
  return TH_OK;
}

static th_value *map_get(th_value *v, void *ctx) {
  const id_map *m = ctx;
  return v->id < m->n && m->to[v->id] ? m->to[v->id] : v;
}

static th_arg subst(th_arg a, const id_map *m) {
  if (a.kind == TH_ARG_VALUE) a.u.value = map_get(a.u.value, (void *)m);
  return a;
}

/* ---- which linears ----------------------------------------------------------------------------------- */

static bool is_linear(const th_bsym *b) {
  th_op_id id = b->sym->id;
  if ((id != TH_OP_ltorch_linear && id != TH_OP_prims_linear) || b->nargs < 3 || b->out.kind != TH_ARG_VALUE)
    return false;
  const th_value *x = th_meta_tensor(&b->args[0]), *w = th_meta_tensor(&b->args[1]);
  if (!x || !w || x->ndim < 1 || w->ndim != 2 || x->dtype != w->dtype) return false;
  if (x->dtype != TH_F32 && x->dtype != TH_BF16 && x->dtype != TH_F16) return false;
  return th_value_numel(x) > 0 && th_value_numel(w) > 0;
}

/* ---- recording one linear's replacement ---------------------------------------------------------- */

static th_status call(th_trace *tr, th_op_id op, int n, th_arg a0, th_arg a1, th_arg *out) {
  th_arg args[2] = {a0, a1};
  return th_call(tr, op, n, args, out);
}

static th_status replace_linear(th_trace *tr, const th_bsym *b, int index, const th_float8_options *o, id_map *m) {
  th_arg x = subst(b->args[0], m), w = subst(b->args[1], m), bias = subst(b->args[2], m);
  const th_value *xv = x.u.value, *wv = w.u.value, *out = b->out.u.value;
  const th_dtype dt = xv->dtype;
  char tag[72], text[400];
  th_f8_linear_tag(wv, index, tag, sizeof tag);
  snprintf(text, sizeof text,
           "float8: %s = %s(%s, %s, %s) as dynamic per-tensor scaled %s (input) x %s (weight) with _scaled_mm",
           out->name ? out->name : "?", b->sym->qualname, xv->name ? xv->name : "?", wv->name ? wv->name : "?",
           bias.kind == TH_ARG_VALUE && bias.u.value->name ? bias.u.value->name : "None", th_dtype_name(o->input_dtype),
           th_dtype_name(o->weight_dtype));
  TH_TRY(th_trace_add_comment(tr, text));
  th_arg xq, xinv, wq, winv, wt, x2, mm, y;
  TH_TRY(th_f8_quantize(tr, x, o->input_dtype, tag, "input", &xq, &xinv));
  TH_TRY(th_f8_quantize(tr, w, o->weight_dtype, tag, "weight", &wq, &winv));
  TH_TRY(call(tr, TH_OP_ltorch_t, 1, wq, th_arg_none(), &wt));
  /* x [..., K] -> [M, K] */
  const int64_t K = xv->shape[xv->ndim - 1];
  x2 = xq;
  if (xv->ndim != 2) {
    int64_t rows = 1, s2[2];
    for (int d = 0; d < xv->ndim - 1; d++) rows *= xv->shape[d];
    s2[0] = rows;
    s2[1] = K;
    TH_TRY(th_tu_reshape(tr, xq, 2, s2, &x2));
  }
  const th_symbol *smm = th_symbol_get(TH_OP_ltorch__scaled_mm);
  th_arg margs[5] = {x2, wt, xinv, winv, bias}, kw[1] = {th_arg_dtype(dt)};
  static const char *const kwn[1] = {"out_dtype"};
  TH_TRY(th_call_kw(tr, smm, 5, margs, 1, kwn, kw, &mm));
  /* the linear's output: mm reshaped back, through the op that carries torchao's backward */
  const th_symbol *fo = th_symbol_get(TH_OP_ltorch_float8_linear_output);
  th_arg fargs[4] = {mm, x, w, bias};
  th_arg fkw[3] = {th_arg_dtype(o->input_dtype), th_arg_dtype(o->weight_dtype), th_arg_dtype(TH_F8E5M2)};
  static const char *const fkwn[3] = {"input_dtype", "weight_dtype", "grad_dtype"};
  TH_TRY(th_call_kw(tr, fo, 4, fargs, 3, fkwn, fkw, &y));
  if (y.kind != TH_ARG_VALUE || y.u.value->dtype != out->dtype || y.u.value->ndim != out->ndim ||
      memcmp(y.u.value->shape, out->shape, sizeof(int64_t) * (size_t)out->ndim))
    return th_error(TH_ERR_RUNTIME, "float8: the fp8 replacement of %s does not match its output", out->name);
  return map_set(m, out, y.u.value);
}

/* ---- the transform ------------------------------------------------------------------------------------ */

th_float8_options th_float8_options_default(void) {
  th_float8_options o = {TH_F8E4M3FN, TH_F8E4M3FN, NULL, NULL};
  return o;
}

static th_status check_options(const th_float8_options *o) {
  if (!th_dtype_is_fp8(o->input_dtype) || !th_dtype_is_fp8(o->weight_dtype)) {
    th_dtype bad = th_dtype_is_fp8(o->input_dtype) ? o->weight_dtype : o->input_dtype;
    return th_error(TH_ERR_VALUE, "float8: %s must be float8_e4m3fn or float8_e5m2, but got %s",
                    th_dtype_is_fp8(o->input_dtype) ? "weight_dtype" : "input_dtype",
                    (unsigned)bad < TH_DTYPE_COUNT ? th_dtype_name(bad) : "an invalid dtype");
  }
  if (o->input_dtype == TH_F8E5M2 && o->weight_dtype == TH_F8E5M2)
    return th_error(TH_ERR_VALUE, "float8: input_dtype and weight_dtype cannot both be float8_e5m2 (_scaled_mm "
                                  "refuses two e5m2 operands, as PyTorch and cuBLASLt do)");
  return TH_OK;
}

th_status th_float8(const th_trace *tr, const th_float8_options *opts, th_trace **out) {
  th_float8_options o = opts ? *opts : th_float8_options_default();
  TH_TRY(check_options(&o));
  double start = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, NULL);
  if (!nt) return th_error(TH_ERR_NOMEM, "float8: out of memory");
  id_map m = {NULL, 0};
  th_status st = TH_OK;
  for (int i = 0; st == TH_OK && i < tr->inputs.n; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  nt->scope = &nt->bsyms;
  nt->nfusions = tr->nfusions;
  int index = 0;
  for (int i = 0; st == TH_OK && i < tr->bsyms.n; i++) {
    const th_bsym *b = tr->bsyms.items[i];
    if (is_linear(b)) {
      bool convert = true;
      if (o.filter) {
        th_clear_error();
        st = o.filter(b, index, o.filter_ctx, &convert);
        if (st != TH_OK) {
          if (!*th_last_error()) th_error(st, "float8: the filter failed on linear %d", index);
          break;
        }
      }
      index++;
      if (convert) {
        st = replace_linear(nt, b, index - 1, &o, &m);
        continue;
      }
    }
    th_bsym *c;
    st = th_bsym_clone(nt, b, map_get, &m, &c);
    if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, c);
  }
  nt->has_return = tr->has_return;
  th_free(m.to);
  if (st == TH_OK) {
    char prov[96];
    snprintf(prov, sizeof prov, "Float8 (took %ld milliseconds)", (long)(th_pass_clock_ms() - start));
    st = th_trace_set_provenance(nt, prov);
  }
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM) th_error(TH_ERR_NOMEM, "float8: out of memory");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
