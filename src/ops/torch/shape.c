/* shape.c — torch-level layout ops: reshape/view (with -1), permute/transpose/t, unsqueeze/squeeze,
 * expand/broadcast_to, flatten, contiguous/clone, cat/stack, split/chunk/unbind/narrow (indexing: torch/index.c).
 *
 * They decompose into the strict shape prims (reshape with a fully known shape, transpose with a full
 * permutation, broadcast_in_dim, slice_prim, squeeze, cat, take). An op that changes nothing returns its
 * input, which th_call records as prims.shallow_copy so outputs are always fresh proxies. Errors use
 * PyTorch's wording.
 *
 * Gradients: split and chunk have a direct vjp rule (PyTorch's split_backward): the input's cotangent is
 * one cat of the pieces' cotangents along the split dim, zeros for a piece no gradient reached. Through
 * the decomposition each slice_prim would pad its cotangent with zeros to the full shape and the pads
 * would then be summed (k full-size zero fills, cats and adds for k pieces: the fused qkv projection's
 * backward). unbind's rule is the same with each cotangent unsqueezed first (PyTorch's stack). The other
 * ops differentiate through their decompositions. */
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

static const th_value *tensor0(const th_arg *args) { return args[0].u.value; }

/* The product of a shape, -1 if it overflows int64 (then prims.reshape rejects it). */
static int64_t numel_of(const int64_t *shape, int ndim) {
  int64_t n;
  th_meta_numel(shape, ndim, &n);
  return n;
}

/* Most pieces split / chunk make (each is a recorded slice and a proxy). */
#define TH_MAX_PIECES (1 << 20)

/* ---- reshape / view -------------------------------------------------------------------------------- */

/* Resolves a single -1 in `shape` against numel (PyTorch's infer_size). */
static th_status infer_shape(const char *op, const th_value *v, int64_t *shape, int ndim) {
  char buf[TH_META_SHAPE_BUF];
  int infer = -1;
  int64_t known = 1, numel = numel_of(v->shape, v->ndim);
  bool zero = false, overflow = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) return th_error(TH_ERR_RUNTIME, "%s: only one dimension can be inferred", op);
      infer = i;
    } else if (shape[i] < 0) {
      return th_error(TH_ERR_RUNTIME, "%s: invalid shape dimension %lld", op, (long long)shape[i]);
    } else {
      zero |= shape[i] == 0;
      overflow |= __builtin_mul_overflow(known, shape[i], &known);
    }
  }
  if (zero)
    known = 0;
  else if (overflow) /* more elements than int64 holds: more than any tensor has */
    return th_error(TH_ERR_RUNTIME, "%s: shape '%s' is invalid for input of size %lld", op,
                    th_meta_shape_str(shape, ndim, buf, sizeof buf), (long long)numel);
  if (infer >= 0) {
    if (known == 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: cannot reshape tensor of %lld elements into shape %s because the unspecified dimension "
                      "size -1 can be any value and is ambiguous",
                      op, (long long)numel, th_meta_shape_str(shape, ndim, buf, sizeof buf));
    if (numel % known == 0) {
      shape[infer] = numel / known;
      return TH_OK;
    }
  } else if (known == numel) {
    return TH_OK;
  }
  return th_error(TH_ERR_RUNTIME, "%s: shape '%s' is invalid for input of size %lld", op,
                  th_meta_shape_str(shape, ndim, buf, sizeof buf), (long long)numel);
}

th_status ltorch_reshape_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  TH_TRY(th_meta_int_list(sym->qualname, "shape", &args[1], shape, &ndim));
  TH_TRY(infer_shape(sym->qualname, tensor0(args), shape, ndim));
  return th_tu_reshape(tr, args[0], ndim, shape, out);
}

/* view(a, shape) = ltorch.reshape(a, shape), recorded nested as in Thunder. */
th_status ltorch_view_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call2(tr, TH_OP_ltorch_reshape, args[0], args[1], out);
}

/* ---- permutations -------------------------------------------------------------------------------- */

th_status ltorch_permute_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dims[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, "dims", &args[1], dims, &n));
  if (n != v->ndim)
    return th_error(
      TH_ERR_RUNTIME,
      "%s: permute(sparse_coo): number of dimensions in the tensor input does not match the length of the "
      "desired ordering of dimensions i.e. input.dim() = %d is not equal to len(dims) = %d",
      op, v->ndim, n);
  for (int i = 0; i < n; i++) {
    int d;
    TH_TRY(th_meta_canonical_dim(op, dims[i], v->ndim, &d));
    for (int j = 0; j < i; j++)
      if (dims[j] == d) return th_error(TH_ERR_RUNTIME, "%s: permute(): duplicate dims are not allowed.", op);
    dims[i] = d;
  }
  return th_tu_transpose(tr, args[0], dims, out);
}

th_status ltorch_transpose_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t d0, d1, perm[TH_MAX_DIMS];
  int c0, c1;
  TH_TRY(th_meta_int(op, "dim0", &args[1], &d0));
  TH_TRY(th_meta_int(op, "dim1", &args[2], &d1));
  TH_TRY(th_meta_canonical_dim(op, d0, v->ndim, &c0));
  TH_TRY(th_meta_canonical_dim(op, d1, v->ndim, &c1));
  for (int i = 0; i < v->ndim; i++) perm[i] = i;
  if (v->ndim > 0) {
    perm[c0] = c1;
    perm[c1] = c0;
  }
  return th_tu_transpose(tr, args[0], perm, out);
}

th_status ltorch_t_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *v = tensor0(args);
  if (v->ndim > 2)
    return th_error(TH_ERR_RUNTIME, "%s: t() expects a tensor with <= 2 dimensions, but self is %dD", sym->qualname,
                    v->ndim);
  if (v->ndim < 2) {
    *out = args[0];
    return TH_OK;
  }
  const int64_t perm[2] = {1, 0};
  return th_tu_transpose(tr, args[0], perm, out);
}

/* ---- unsqueeze / squeeze / flatten --------------------------------------------------------------- */

th_status ltorch_unsqueeze_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *v = tensor0(args);
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(sym->qualname, "dim", &args[1], &dim));
  TH_TRY(th_meta_canonical_dim(sym->qualname, dim, v->ndim + 1, &d));
  return th_tu_unsqueeze(tr, args[0], d, out);
}

/* squeeze(a, dim=None): None squeezes every length-1 dim; given dims that are not of length 1 are
 * left alone (PyTorch's no-op rule). */
th_status ltorch_squeeze_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dims[TH_MAX_DIMS], keep[TH_MAX_DIMS];
  int n = 0, nk = 0;
  if (args[1].kind == TH_ARG_NONE) {
    for (int i = 0; i < v->ndim; i++)
      if (v->shape[i] == 1) keep[nk++] = i;
    return th_tu_squeeze(tr, args[0], nk, keep, out);
  }
  TH_TRY(th_meta_int_list(op, "dim", &args[1], dims, &n));
  for (int i = 0; i < n; i++) {
    int d;
    TH_TRY(th_meta_canonical_dim(op, dims[i], v->ndim, &d));
    if (v->ndim == 0 || v->shape[d] != 1) continue;
    bool dup = false;
    for (int j = 0; j < nk; j++) dup |= keep[j] == d;
    if (!dup) keep[nk++] = d;
  }
  /* prims.squeeze wants its dims sorted */
  for (int i = 1; i < nk; i++)
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
      int64_t t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  return th_tu_squeeze(tr, args[0], nk, keep, out);
}

th_status ltorch_flatten_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t s, e;
  int cs, ce;
  TH_TRY(th_meta_int(op, "start_dim", &args[1], &s));
  TH_TRY(th_meta_int(op, "end_dim", &args[2], &e));
  TH_TRY(th_meta_canonical_dim(op, s, v->ndim, &cs));
  TH_TRY(th_meta_canonical_dim(op, e, v->ndim, &ce));
  if (v->ndim == 0) return th_tu_unsqueeze(tr, args[0], 0, out);
  if (cs > ce)
    return th_error(TH_ERR_RUNTIME, "%s: flatten() has invalid args: start_dim cannot come after end_dim", op);
  if (cs == ce) {
    *out = args[0];
    return TH_OK;
  }
  int64_t shape[TH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < cs; i++) shape[n++] = v->shape[i];
  shape[n++] = numel_of(v->shape + cs, ce - cs + 1);
  for (int i = ce + 1; i < v->ndim; i++) shape[n++] = v->shape[i];
  return th_tu_reshape(tr, args[0], n, shape, out);
}

/* ---- expand ----------------------------------------------------------------------------------------- */

static th_status expand_to(th_trace *tr, const char *op, const th_arg *a, int ndim, const int64_t *shape, th_arg *out) {
  *out = *a;
  return th_tu_expand(tr, op, out, ndim, shape);
}

th_status ltorch_expand_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t shape[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(sym->qualname, "shape", &args[1], shape, &n));
  return expand_to(tr, sym->qualname, &args[0], n, shape, out);
}

th_status ltorch_broadcast_to_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return ltorch_expand_decomp(tr, sym, args, out);
}

th_status ltorch_expand_as_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *b = args[1].u.value;
  return expand_to(tr, sym->qualname, &args[0], b->ndim, b->shape, out);
}

/* ---- copies ----------------------------------------------------------------------------------------- */

/* contiguous: tensors in traces have no layout, so this is the identity (a shallow copy). */
/* contiguous(a) = prims.stride_order(a, (n-1, ..., 0)) as in Thunder: at run time `a` itself when it is
 * already contiguous (PyTorch returns self), else a contiguous copy (never a strided alias of x.t()).
 * Tagged VIEW: the result may alias a. */
th_status ltorch_contiguous_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const th_value *a = args[0].u.value;
  th_arg order[TH_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) order[i] = th_arg_int(a->ndim - 1 - i);
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(a->ndim ? a->ndim : 1));
  if (!items) return TH_ERR_NOMEM;
  if (a->ndim) memcpy(items, order, sizeof(th_arg) * (size_t)a->ndim);
  return th_tu_call2(tr, TH_OP_prims_stride_order, args[0], th_arg_tuple(a->ndim, items), out);
}

th_status ltorch_clone_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
}

/* ---- cat / stack ------------------------------------------------------------------------------------ */

/* prims.cat after promoting mixed dtypes (PRESERVE); a single dtype, fp8 included, is left alone. */
static th_status cat_list(th_trace *tr, const char *op, int n, const th_arg *items, int64_t dim, th_arg *out) {
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: torch.cat(): expected a non-empty list of Tensors", op);
  th_arg *ts = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!ts) return th_error(TH_ERR_NOMEM, "out of memory");
  memcpy(ts, items, sizeof(th_arg) * (size_t)n);
  bool mixed = false;
  for (int i = 1; i < n; i++) mixed |= ts[i].u.value->dtype != ts[0].u.value->dtype;
  if (mixed) {
    th_tu_type comp, res;
    TH_TRY(th_tu_promote(op, n, ts, TH_TU_PROMO_PRESERVE, &comp, &res));
    for (int i = 0; i < n; i++) TH_TRY(th_tu_convert_type(tr, &ts[i], res));
  }
  /* PyTorch skips 1-D empty tensors (the legacy "no tensor" shape (0,)) when any other tensor is
   * present: they take part in type promotion but not in the shape checks or the result */
  int kept = 0;
  for (int i = 0; i < n; i++) {
    const th_value *v = ts[i].u.value;
    if (!(v->ndim == 1 && v->shape[0] == 0)) ts[kept++] = ts[i];
  }
  if (kept == 0) kept = 1; /* all are (0,): the result is one of them */
  int d;
  TH_TRY(th_meta_canonical_dim(op, dim, ts[0].u.value->ndim, &d));
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(kept, ts), th_arg_int(d), out);
}

th_status ltorch_cat_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t dim;
  TH_TRY(th_meta_int(sym->qualname, "dim", &args[1], &dim));
  return cat_list(tr, sym->qualname, args[0].u.seq.n, args[0].u.seq.items, dim, out);
}

th_status ltorch_stack_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int n = args[0].u.seq.n;
  const th_arg *ts = args[0].u.seq.items;
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: stack expects a non-empty TensorList", op);
  const th_value *first = ts[0].u.value;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  for (int i = 1; i < n; i++) {
    const th_value *t = ts[i].u.value;
    if (t->ndim != first->ndim || memcmp(t->shape, first->shape, sizeof(int64_t) * (size_t)t->ndim))
      return th_error(TH_ERR_RUNTIME,
                      "%s: stack expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d", op,
                      th_meta_shape_str(first->shape, first->ndim, b0, sizeof b0),
                      th_meta_shape_str(t->shape, t->ndim, b1, sizeof b1), i);
  }
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, first->ndim + 1, &d));
  th_arg *us = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!us) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) TH_TRY(th_tu_unsqueeze(tr, ts[i], d, &us[i]));
  return cat_list(tr, op, n, us, d, out);
}

/* ---- split / chunk / narrow ------------------------------------------------------------------------- */

/* Slices a along dim into pieces of the given lengths; returns them as a tuple. */
static th_status split_lengths(th_trace *tr, th_arg a, int dim, int n, const int64_t *lengths, th_arg *out) {
  th_arg *pieces = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!pieces) return th_error(TH_ERR_NOMEM, "out of memory");
  int64_t start = 0;
  for (int i = 0; i < n; i++) {
    TH_TRY(th_tu_slice_in_dim(tr, a, start, start + lengths[i], 1, dim, &pieces[i]));
    start += lengths[i];
  }
  *out = th_arg_tuple(n, pieces);
  return TH_OK;
}

th_status ltorch_split_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[2], &dim));
  if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: split expects at least a 1-dimensional tensor", op);
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t len = v->shape[d];
  const th_arg *sz = &args[1];
  if (sz->kind == TH_ARG_TUPLE || sz->kind == TH_ARG_LIST) {
    int n = sz->u.seq.n;
    int64_t *lengths = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!lengths) return th_error(TH_ERR_NOMEM, "out of memory");
    int64_t total = 0;
    bool overflow = false;
    for (int i = 0; i < n; i++) {
      TH_TRY(th_meta_int(op, "split_sizes", &sz->u.seq.items[i], &lengths[i]));
      if (lengths[i] < 0)
        return th_error(TH_ERR_RUNTIME,
                        "%s: split_with_sizes expects split_sizes have only non-negative entries, but got "
                        "split_sizes=%lld",
                        op, (long long)lengths[i]);
      overflow |= __builtin_add_overflow(total, lengths[i], &total);
    }
    if (overflow)
      return th_error(TH_ERR_RUNTIME,
                      "%s: split_with_sizes expects split_sizes to sum exactly to %lld (input tensor's size at "
                      "dimension %d), but the sum overflows int64",
                      op, (long long)len, d);
    if (total != len)
      return th_error(
        TH_ERR_RUNTIME,
        "%s: split_with_sizes expects split_sizes to sum exactly to %lld (input tensor's size at dimension "
        "%d), but got a sum of %lld",
        op, (long long)len, d, (long long)total);
    return split_lengths(tr, args[0], d, n, lengths, out);
  }
  int64_t size;
  TH_TRY(th_meta_int(op, "split_size", sz, &size));
  if (size < 0)
    return th_error(TH_ERR_RUNTIME, "%s: split expects split_size be non-negative, but got split_size=%lld", op,
                    (long long)size);
  if (size == 0 && len != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: split_size can only be 0 if dimension size is 0, but got dimension size of %lld", op,
                    (long long)len);
  int64_t n = size == 0 ? 1 : len / size + (len % size != 0); /* ceil(len / size) without overflow */
  if (n == 0) n = 1;                                          /* a zero-length dim splits into one empty piece */
  if (n > TH_MAX_PIECES)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: splitting a dimension of size %lld by %lld gives %lld pieces; at most "
                    "%d are supported",
                    op, (long long)len, (long long)size, (long long)n, TH_MAX_PIECES);
  int64_t *lengths = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)n);
  if (!lengths) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++) lengths[i] = i + 1 < n ? size : len - size * (n - 1);
  return split_lengths(tr, args[0], d, (int)n, lengths, out);
}

/* chunk: ceil(len / chunks) per piece, the last one shorter; fewer pieces when that covers the dim. */
th_status ltorch_chunk_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t chunks, dim;
  int d;
  TH_TRY(th_meta_int(op, "chunks", &args[1], &chunks));
  TH_TRY(th_meta_int(op, "dim", &args[2], &dim));
  if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: chunk expects at least a 1-dimensional tensor", op);
  if (chunks <= 0)
    return th_error(TH_ERR_RUNTIME, "%s: chunk expects `chunks` to be greater than 0, got: %lld", op,
                    (long long)chunks);
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t len = v->shape[d];
  if (len == 0 && chunks > TH_MAX_PIECES)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: chunk of an empty dimension gives `chunks` (%lld) empty pieces; at "
                    "most %d are supported",
                    op, (long long)chunks, TH_MAX_PIECES);
  if (len == 0) { /* chunks empty pieces */
    int64_t *lengths = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)chunks);
    if (!lengths) return th_error(TH_ERR_NOMEM, "out of memory");
    memset(lengths, 0, sizeof(int64_t) * (size_t)chunks);
    return split_lengths(tr, args[0], d, (int)chunks, lengths, out);
  }
  int64_t each = len / chunks + (len % chunks != 0); /* ceil(len / chunks) without overflow */
  int64_t n = len / each + (len % each != 0);
  if (n > TH_MAX_PIECES)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: chunk gives %lld pieces; at most %d are supported", op, (long long)n,
                    TH_MAX_PIECES);
  int64_t *lengths = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)n);
  if (!lengths) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < n; i++) lengths[i] = i + 1 < n ? each : len - each * (n - 1);
  return split_lengths(tr, args[0], d, (int)n, lengths, out);
}

/* unbind: one piece per index of dim, that dim removed (a size-1 slice, then squeeze); a size-0 dim gives
 * an empty tuple. */
th_status ltorch_unbind_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  if (v->ndim == 0)
    return th_error(TH_ERR_INDEX, "%s: Dimension specified as %lld but tensor has no dimensions", op, (long long)dim);
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t n = v->shape[d];
  if (n > TH_MAX_PIECES)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: unbind gives %lld pieces; at most %d are supported", op, (long long)n,
                    TH_MAX_PIECES);
  th_arg *pieces = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!pieces) return th_error(TH_ERR_NOMEM, "out of memory");
  const int64_t sq[1] = {d};
  for (int64_t i = 0; i < n; i++) {
    th_arg s;
    TH_TRY(th_tu_slice_in_dim(tr, args[0], i, i + 1, 1, d, &s));
    TH_TRY(th_tu_squeeze(tr, s, 1, sq, &pieces[i]));
  }
  *out = th_arg_tuple((int)n, pieces);
  return TH_OK;
}

th_status ltorch_narrow_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dim, start, length;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  if (th_meta_is_tensor(&args[2])) /* PyTorch's narrow(Tensor start): the slice would depend on data */
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a tensor start (a value known only at run time) is not supported", op);
  TH_TRY(th_meta_int(op, "start", &args[2], &start));
  TH_TRY(th_meta_int(op, "length", &args[3], &length));
  if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: narrow() cannot be applied to a 0-dim tensor.", op);
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t len = v->shape[d];
  if (length < 0) return th_error(TH_ERR_RUNTIME, "%s: narrow(): length must be non-negative.", op);
  if (start < -len || start > len)
    return th_error(TH_ERR_INDEX, "%s: start out of range (expected to be in range of [%lld, %lld], but got %lld)", op,
                    (long long)-len, (long long)len, (long long)start);
  if (start < 0) start += len;
  if (length > len - start) /* start + length > len, without overflow (0 <= start <= len) */
    return th_error(TH_ERR_RUNTIME, "%s: start (%lld) + length (%lld) exceeds dimension size (%lld).", op,
                    (long long)start, (long long)length, (long long)len);
  return th_tu_slice_in_dim(tr, args[0], start, start + length, 1, d, out);
}

/* ---- vjp: split / chunk --------------------------------------------------------------------------- */

static th_status split_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const char *op = b->sym->qualname;
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &b->args[2], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, a->u.value->ndim, &d));
  if ((b->out.kind != TH_ARG_TUPLE && b->out.kind != TH_ARG_LIST) || b->out.u.seq.n < 1)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected its outputs as a sequence of tensors", op);
  int n = b->out.u.seq.n;
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!items) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    const th_arg *o = &b->out.u.seq.items[i];
    if (o->kind != TH_ARG_VALUE || !o->u.value->is_tensor)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected its outputs as a sequence of tensors", op);
    if (cts[i].kind == TH_ARG_NONE)
      TH_TRY(th_vjp_zeros_like(tr, o->u.value, &items[i]));
    else
      items[i] = cts[i];
  }
  if (n == 1) {
    grads[0] = items[0];
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(n, items), th_arg_int(d), &grads[0]);
}

/* unbind: the pieces' cotangents (zeros where none reached) unsqueezed at dim and concatenated there
 * (PyTorch's stack); zeros of the input's shape when the dim has size 0 (no pieces). */
static th_status unbind_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const char *op = b->sym->qualname;
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &b->args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, a->u.value->ndim, &d));
  if (b->out.kind != TH_ARG_TUPLE && b->out.kind != TH_ARG_LIST)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected its outputs as a sequence of tensors", op);
  int n = b->out.u.seq.n;
  if (n == 0) return th_vjp_zeros_like(tr, a->u.value, &grads[0]);
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!items) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    const th_arg *o = &b->out.u.seq.items[i];
    th_arg ct;
    if (o->kind != TH_ARG_VALUE || !o->u.value->is_tensor)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected its outputs as a sequence of tensors", op);
    if (cts[i].kind == TH_ARG_NONE)
      TH_TRY(th_vjp_zeros_like(tr, o->u.value, &ct));
    else
      ct = cts[i];
    TH_TRY(th_tu_unsqueeze(tr, ct, d, &items[i]));
  }
  if (n == 1) {
    grads[0] = items[0];
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(n, items), th_arg_int(d), &grads[0]);
}

const th_vjp_entry th_vjp_table_torch_shape[] = {
  {TH_OP_ltorch_split, TH_VJP_RULE, split_vjp},
  {TH_OP_ltorch_chunk, TH_VJP_RULE, split_vjp},
  {TH_OP_ltorch_unbind, TH_VJP_RULE, unbind_vjp},
};
const int th_vjp_table_torch_shape_n = (int)(sizeof th_vjp_table_torch_shape / sizeof th_vjp_table_torch_shape[0]);
