/* inplace.c — PyTorch's in-place tensor ops (ltorch.add_, ltorch.exp_, ltorch.clamp_, ltorch.fill_,
 * ltorch.zero_, ltorch.copy_, ...), recorded as Lightning Thunder records them: the out-of-place op,
 * then prims.copy_ of its result into the tensor being modified, whose output (the new version of that
 * tensor) is the op's result:
 *     t0 = ltorch.add(a, b, alpha=None)
 *     t1 = prims.copy_(t0, a)
 * The eager kernel of prims.copy_ writes into copy_to's own storage, so a program's input tensor is
 * mutated in place when the program runs.
 *
 * The out-of-place result is checked as PyTorch checks an in-place op's output (TensorIterator with the
 * modified tensor as `out`), both TH_ERR_RUNTIME:
 *   - its shape must equal the modified tensor's ("output with shape [1] doesn't match the broadcast
 *     shape [2]"), so only the other operands broadcast;
 *   - its dtype must be castable to the modified tensor's dtype by c10::canCast (no floating -> integral
 *     or bool, no non-bool -> bool: "result type Float can't be cast to the desired output type Long").
 *     A castable result of another dtype gets prims.convert_element_type before the copy (a bf16 tensor
 *     plus an f32 one computes in f32 and rounds once to bf16, as PyTorch's kernel stores).
 *
 * Each in-place row of ops.def has the same parameters as its out-of-place op (a leading prefix of
 * them for relu_, silu_ and dropout_, whose `inplace` flag is left at its default), so the bound
 * arguments are forwarded as they are; where the out-of-place op returns its input itself (dropout_
 * with training=False or p=0) nothing is copied. relu_, silu_ and dropout_ are also what the Python
 * frontend records for F.relu / F.silu / F.dropout with inplace=True. fill_, zero_ and copy_ have no out-of-place op of their own: fill_ and zero_ copy a
 * ltorch.full_like / ltorch.zeros_like of the tensor; copy_ (Tensor.copy_) moves the source to the
 * tensor's device, converts it to the tensor's dtype (any cast, as PyTorch's copy_) and expands it to
 * the tensor's shape. */
#include <string.h>

#include "ops/torch/torch_util.h"

/* ---- PyTorch's checks of an in-place output ------------------------------------------------------- */

/* c10::canCast without complex types: floating -> integral or bool, and non-bool -> bool, are refused. */
static bool can_cast(th_dtype from, th_dtype to) {
  if (th_dtype_is_float(from) && !th_dtype_is_float(to)) return false;
  if (from != TH_BOOL && to == TH_BOOL) return false;
  return true;
}

/* Writes `result` into tensor `a`: the shape and cast checks, a conversion to a's dtype when needed,
 * then prims.copy_(result, a), whose output is *out. */
static th_status write_back(th_trace *tr, const char *op, th_arg a, th_arg result, th_arg *out) {
  const th_value *dst = th_meta_tensor(&a), *r = th_meta_tensor(&result);
  if (!dst || !r) return th_error(TH_ERR_RUNTIME, "%s: expected the in-place result to be a tensor", op);
  bool same = r->ndim == dst->ndim;
  for (int d = 0; same && d < r->ndim; d++) same = r->shape[d] == dst->shape[d];
  if (!same) {
    char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: output with shape %s doesn't match the broadcast shape %s", op,
                    th_meta_shape_str(dst->shape, dst->ndim, s0, sizeof s0),
                    th_meta_shape_str(r->shape, r->ndim, s1, sizeof s1));
  }
  if (r->dtype != dst->dtype) {
    if (!can_cast(r->dtype, dst->dtype))
      return th_error(TH_ERR_RUNTIME, "%s: result type %s can't be cast to the desired output type %s", op,
                      th_tu_scalar_type_name(r->dtype), th_tu_scalar_type_name(dst->dtype));
    TH_TRY(th_tu_convert(tr, &result, dst->dtype));
  }
  return th_tu_call2(tr, TH_OP_prims_copy_, result, a, out);
}

/* The out-of-place op `oop` on the bound arguments of the in-place symbol (positional parameters in
 * order, keyword-only ones by name), then write_back into args[0]. */
static th_status inplace(th_trace *tr, const th_symbol *sym, th_op_id oop, const th_arg *args, th_arg *out) {
  const th_schema *sc = &sym->schema;
  th_arg pos[16], kw[16];
  const char *kwnames[16];
  int npos = 0, nkw = 0;
  if (sc->nparams > 16) return th_error(TH_ERR_RUNTIME, "%s: too many parameters", sym->qualname);
  for (int i = 0; i < sc->nparams; i++) {
    if (sc->params[i].kwonly) {
      kwnames[nkw] = sc->params[i].name;
      kw[nkw++] = args[i];
    } else {
      pos[npos++] = args[i];
    }
  }
  th_arg result;
  TH_TRY(th_tu_call_kw(tr, oop, npos, pos, nkw, kwnames, kw, &result));
  if (result.kind == TH_ARG_VALUE && args[0].kind == TH_ARG_VALUE && result.u.value == args[0].u.value) {
    *out = args[0]; /* the op is the identity here (dropout_ with training=False or p=0): nothing to write */
    return TH_OK;
  }
  return write_back(tr, sym->qualname, args[0], result, out);
}

/* ---- ops with an out-of-place counterpart --------------------------------------------------------- */

/* The decomposition of every TH_TORCH_INPLACE row of ops.def (the unary ones from ops/unary.def). */
#define TH_PRIM(name, schema, tags, meta, cexpr)
#define TH_TORCH(name, schema, tags, decomp, aliases)
#define TH_TORCH_INPLACE(name, schema, tags, aliases)                                                                  \
  th_status ltorch_##name##__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {             \
    return inplace(tr, sym, TH_OP_ltorch_##name, args, out);                                                           \
  }
#include "ops/ops.def"
#undef TH_PRIM
#undef TH_TORCH
#undef TH_TORCH_INPLACE

/* ---- fill_, zero_, copy_ ------------------------------------------------------------------------------ */

/* fill_(a, value): a number fills through ltorch.full_like (converted to a's dtype's Python type first:
 * 1.5 into an int64 tensor fills 1, as PyTorch); a 0-dim tensor is moved to a's device, converted to
 * a's dtype and expanded to a's shape. */
th_status ltorch_fill__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  th_arg value = args[1], filled;
  const th_value *v = th_meta_tensor(&value);
  if (!v) {
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_full_like, args[0], value, &filled));
    return th_tu_call2(tr, TH_OP_prims_copy_, filled, args[0], out);
  }
  if (v->ndim != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: fill_ only supports 0-dimension value tensor but got tensor with %d dimensions.", op, v->ndim);
  if (!th_device_eq(v->device, a->device))
    TH_TRY(th_tu_call2(tr, TH_OP_prims_device_put, value, th_tu_device(a->device), &value));
  TH_TRY(th_tu_convert(tr, &value, a->dtype));
  TH_TRY(th_tu_expand(tr, op, &value, a->ndim, a->shape));
  return th_tu_call2(tr, TH_OP_prims_copy_, value, args[0], out);
}

/* zero_(a) = copy_(zeros_like(a), a), as Thunder. */
th_status ltorch_zero__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg zeros;
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_zeros_like, args[0], &zeros));
  return th_tu_call2(tr, TH_OP_prims_copy_, zeros, args[0], out);
}

/* copy_(a, src, non_blocking): src must broadcast to a's shape (PyTorch's infer_size wording, then the
 * in-place shape check); it is moved to a's device, converted to a's dtype (every cast is allowed here:
 * 1.7 copied into an int64 tensor is 1) and expanded. non_blocking is a scheduling hint and is ignored. */
th_status ltorch_copy__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *s = args[1].u.value;
  int nd = a->ndim > s->ndim ? a->ndim : s->ndim;
  int64_t bshape[TH_MAX_DIMS];
  for (int i = nd - 1; i >= 0; i--) {
    int da = i - (nd - a->ndim), ds = i - (nd - s->ndim);
    int64_t ea = da >= 0 ? a->shape[da] : 1, es = ds >= 0 ? s->shape[ds] : 1;
    if (ea != es && ea != 1 && es != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
                      "dimension %d",
                      op, (long long)ea, (long long)es, i);
    bshape[i] = ea == 1 ? es : ea;
  }
  bool same = nd == a->ndim;
  for (int i = 0; same && i < nd; i++) same = bshape[i] == a->shape[i];
  if (!same) {
    char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: output with shape %s doesn't match the broadcast shape %s", op,
                    th_meta_shape_str(a->shape, a->ndim, s0, sizeof s0), th_meta_shape_str(bshape, nd, s1, sizeof s1));
  }
  th_arg src = args[1];
  if (!th_device_eq(s->device, a->device))
    TH_TRY(th_tu_call2(tr, TH_OP_prims_device_put, src, th_tu_device(a->device), &src));
  TH_TRY(th_tu_convert(tr, &src, a->dtype));
  TH_TRY(th_tu_expand(tr, op, &src, a->ndim, a->shape));
  return th_tu_call2(tr, TH_OP_prims_copy_, src, args[0], out);
}
