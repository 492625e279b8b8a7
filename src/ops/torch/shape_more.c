/* shape_more.c — torch-level layout ops beyond shape.c: padding (F.pad's four modes, constant_pad_nd),
 * roll, flip/fliplr/flipud/rot90, repeat/tile, Tensor.unfold, unflatten, movedim, view_as/reshape_as, adjoint,
 * the *_copy variants, diagonal/diag/diag_embed/diagflat, atleast_Nd, the stacks (hstack, vstack, dstack,
 * column_stack) and splits (tensor_split, hsplit, vsplit, dsplit, split_with_sizes, unsafe_*),
 * broadcast_tensors, meshgrid, block_diag, cartesian_prod, eye, linspace/logspace and sum_to_size.
 *
 * Every op here is a composite of existing prims (slice_prim, cat, flip, broadcast_in_dim, reshape,
 * transpose, take, full, iota and elementwise prims), so the fuser sees its layout prims and the
 * gradients come from the decompositions: no vjp rule of its own. Errors use PyTorch's wording.
 *
 * Padding works one dim at a time: a dim padded by (lo, hi) is the concatenation of the left border,
 * the (possibly cropped, for negative padding) middle and the right border, each border being a slice of
 * the input: a constant fill, a reflected slice (flip of x[1:lo+1]), a copy of the edge element
 * broadcast, or the wrapped-around slice (circular). The borders read the uncropped input, as
 * PyTorch's kernels index out = x[reflect(o - lo)]; the modes are separable, so padding dims in turn
 * gives PyTorch's corners. */
#include <string.h>

#include "ops/torch/torch_util.h"

static const th_value *tensor0(const th_arg *args) { return args[0].u.value; }

/* A number of dt's category with value 0 (ltorch.where keeps dt with it). */
static th_arg zero_of(th_dtype dt) {
  if (dt == TH_BOOL) return th_arg_bool(false);
  if (th_meta_dtype_is_exact(dt)) return th_arg_int(0);
  return th_arg_float(0.0);
}

static th_status nomem(void) { return th_error(TH_ERR_NOMEM, "out of memory"); }

/* prims.cat of n tensors (n == 1: that tensor). */
static th_status cat_n(th_trace *tr, int n, th_arg *items, int dim, th_arg *out) {
  if (n == 1) {
    *out = items[0];
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(n, items), th_arg_int(dim), out);
}

/* Items of a tuple output that are one of the op's input tensors become prims.shallow_copy of it, so
 * outputs are fresh proxies (th_call does this for a single output). */
static th_status fresh_items(th_trace *tr, int n, th_arg *items, int nin, const th_arg *ins) {
  for (int i = 0; i < n; i++) {
    if (items[i].kind != TH_ARG_VALUE) continue;
    bool is_input = false;
    for (int j = 0; j < nin; j++) is_input |= ins[j].kind == TH_ARG_VALUE && ins[j].u.value == items[i].u.value;
    if (is_input) TH_TRY(th_tu_call1(tr, TH_OP_prims_shallow_copy, items[i], &items[i]));
  }
  return TH_OK;
}

/* The tensors of an argument that is a tensor (*single = true, where single is not NULL) or a
 * sequence of tensors. */
static th_status tensor_seq(const char *op, const th_arg *a, int *n, const th_arg **items, bool *single) {
  if (single) *single = false;
  if (th_meta_is_tensor(a)) {
    if (single) *single = true;
    *n = 1;
    *items = a;
    return TH_OK;
  }
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    for (int i = 0; i < a->u.seq.n; i++)
      if (!th_meta_is_tensor(&a->u.seq.items[i]))
        return th_error(TH_ERR_TYPE, "%s: expected a sequence of Tensors, but item %d is %s", op, i,
                        th_arg_kind_name(&a->u.seq.items[i]));
    *n = a->u.seq.n;
    *items = a->u.seq.items;
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s: expected a Tensor or a sequence of Tensors, but got %s", op, th_arg_kind_name(a));
}

/* *out = room for n args in the trace's arena. */
static th_status arena_args(th_trace *tr, int n, th_arg **out) {
  *out = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  return *out ? TH_OK : nomem();
}

/* The int arguments args[first .. first + n - 1], named `names` in errors. */
static th_status int_args(const char *op, const th_arg *args, int first, int n, const char *const *names, int64_t *v) {
  for (int i = 0; i < n; i++) TH_TRY(th_meta_int(op, names[i], &args[first + i], &v[i]));
  return TH_OK;
}

/* ---- padding -------------------------------------------------------------------------------------- */

typedef enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_REPLICATE, PAD_CIRCULAR } pad_mode;

/* Pads dim d of a by lo before and hi after (negative values crop) in `mode`. */
static th_status pad_dim(th_trace *tr, const char *op, th_arg a, int d, int64_t lo, int64_t hi, pad_mode mode,
                         th_arg fill, th_arg *out) {
  const th_value *v = a.u.value;
  int64_t n = v->shape[d];
  char b0[TH_META_SHAPE_BUF];
  if (n + lo + hi < 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: The input size %lld, plus negative padding %lld and %lld resulted in a negative output "
                    "size, which is invalid. Check dimension %d of your input.",
                    op, (long long)n, (long long)lo, (long long)hi, d);
  if (mode == PAD_REFLECT && (lo >= n || hi >= n))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                    "padding (%lld, %lld) at dimension %d of input %s",
                    op, (long long)lo, (long long)hi, d, th_meta_shape_str(v->shape, v->ndim, b0, sizeof b0));
  if (mode == PAD_CIRCULAR && (lo > n || hi > n))
    return th_error(TH_ERR_RUNTIME, "%s: Padding value causes wrapping around more than once.", op);
  if (lo == 0 && hi == 0) {
    *out = a;
    return TH_OK;
  }
  th_arg pieces[3];
  int np = 0;
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
  for (int side = 0; side < 2; side++) {
    int64_t p = side == 0 ? lo : hi;
    if (side == 1) { /* the middle, cropped by negative padding */
      int64_t s = lo < 0 ? -lo : 0, e = hi < 0 ? n + hi : n;
      if (e < s) e = s;
      th_arg m = a;
      if (s != 0 || e != n) TH_TRY(th_tu_slice_in_dim(tr, a, s, e, 1, d, &m));
      pieces[np++] = m;
    }
    if (p <= 0) continue;
    th_arg piece;
    switch (mode) {
      case PAD_CONSTANT:
        shape[d] = p;
        TH_TRY(th_tu_full(tr, v->ndim, shape, fill, v->device, v->dtype, &piece));
        break;
      case PAD_REFLECT: {
        const int64_t fd[1] = {d};
        th_arg s, fi[1];
        if (side == 0)
          TH_TRY(th_tu_slice_in_dim(tr, a, 1, p + 1, 1, d, &s));
        else
          TH_TRY(th_tu_slice_in_dim(tr, a, n - 1 - p, n - 1, 1, d, &s));
        TH_TRY(th_tu_call2(tr, TH_OP_prims_flip, s, th_tu_ints(fi, 1, fd), &piece));
        break;
      }
      case PAD_REPLICATE: {
        th_arg s;
        TH_TRY(th_tu_slice_in_dim(tr, a, side == 0 ? 0 : n - 1, side == 0 ? 1 : n, 1, d, &s));
        shape[d] = p;
        piece = s;
        TH_TRY(th_tu_expand(tr, op, &piece, v->ndim, shape));
        break;
      }
      case PAD_CIRCULAR: { /* wraps around the cropped tensor, as PyTorch's _pad_circular */
        int64_t s = lo < 0 ? -lo : 0, e = hi < 0 ? n + hi : n;
        if (p > e - s) return th_error(TH_ERR_RUNTIME, "%s: Padding value causes wrapping around more than once.", op);
        if (side == 0)
          TH_TRY(th_tu_slice_in_dim(tr, a, e - p, e, 1, d, &piece));
        else
          TH_TRY(th_tu_slice_in_dim(tr, a, s, s + p, 1, d, &piece));
        break;
      }
    }
    pieces[np++] = piece;
  }
  return cat_n(tr, np, pieces, d, out);
}

/* The fill of a constant pad in the tensor's dtype (PyTorch casts the value to it). */
static th_status pad_fill(const char *op, const th_arg *value, th_dtype dt, th_arg *fill) {
  double f = 0;
  if (value->kind != TH_ARG_NONE) TH_TRY(th_tu_float(op, "value", value, &f));
  if (dt == TH_BOOL)
    *fill = th_arg_bool(f != 0);
  else if (th_meta_dtype_is_exact(dt))
    *fill = th_arg_int((int64_t)f);
  else
    *fill = th_arg_float(f);
  return TH_OK;
}

static th_status pad_impl(th_trace *tr, const char *op, th_arg a, const th_arg *padarg, pad_mode mode,
                          const th_arg *value, th_arg *out) {
  const th_value *v = a.u.value;
  int64_t pad[TH_MAX_DIMS * 2];
  int np = 0;
  /* th_meta_int_list reads at most TH_MAX_DIMS entries: read the pairs directly */
  if (padarg->kind == TH_ARG_TUPLE || padarg->kind == TH_ARG_LIST) {
    if (padarg->u.seq.n > 2 * TH_MAX_DIMS + 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Padding length should be less than or equal to two times the input dimension but got "
                      "padding length %d and input of dimension %d",
                      op, padarg->u.seq.n, v->ndim);
    np = padarg->u.seq.n;
    for (int i = 0; i < np; i++) TH_TRY(th_meta_int(op, "pad", &padarg->u.seq.items[i], &pad[i]));
  } else {
    TH_TRY(th_meta_int(op, "pad", padarg, &pad[0]));
    np = 1;
  }
  if (np % 2) return th_error(TH_ERR_RUNTIME, "%s: Padding length must be divisible by 2", op);
  if (np / 2 > v->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Padding length should be less than or equal to two times the input dimension but got "
                    "padding length %d and input of dimension %d",
                    op, np, v->ndim);
  th_arg fill = th_arg_none();
  if (mode == PAD_CONSTANT) {
    TH_TRY(pad_fill(op, value, v->dtype, &fill));
  } else {
    static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
    if (value->kind != TH_ARG_NONE)
      return th_error(TH_ERR_RUNTIME, "%s: Padding mode \"%s\" doesn't take in value argument", op, names[mode]);
    int k = np / 2;
    if (np == 0 || k > 3 || (v->ndim != k + 1 && v->ndim != k + 2))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: Padding size %d is not supported for %dD input tensor.", op, np,
                      v->ndim);
    if (mode != PAD_CIRCULAR) {
      bool ok = true;
      for (int i = v->ndim == k + 2 ? 1 : 0; i < v->ndim; i++) ok &= v->shape[i] != 0;
      if (!ok) {
        char b0[TH_META_SHAPE_BUF];
        static const char *const want[] = {"", "2D or 3D", "3D or 4D", "4D or 5D"};
        return th_error(TH_ERR_RUNTIME,
                        "%s: Expected %s (batch mode) tensor with possibly 0 batch size and other non-zero dimensions "
                        "for input, but got: %s",
                        op, want[k], th_meta_shape_str(v->shape, v->ndim, b0, sizeof b0));
      }
    }
  }
  th_arg x = a;
  for (int i = 0; i < np / 2; i++) {
    int d = v->ndim - 1 - i;
    TH_TRY(pad_dim(tr, op, x, d, pad[2 * i], pad[2 * i + 1], mode, fill, &x));
  }
  *out = x;
  return TH_OK;
}

th_status ltorch_pad_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  if (args[2].kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected mode to be a str", op);
  const char *m = args[2].u.s;
  pad_mode mode;
  if (!strcmp(m, "constant"))
    mode = PAD_CONSTANT;
  else if (!strcmp(m, "reflect"))
    mode = PAD_REFLECT;
  else if (!strcmp(m, "replicate"))
    mode = PAD_REPLICATE;
  else if (!strcmp(m, "circular"))
    mode = PAD_CIRCULAR;
  else
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: Unrecognised padding mode %s", op, m);
  return pad_impl(tr, op, args[0], &args[1], mode, &args[3], out);
}

th_status ltorch_constant_pad_nd_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return pad_impl(tr, sym->qualname, args[0], &args[1], PAD_CONSTANT, &args[2], out);
}

/* ---- roll / flip / rot90 --------------------------------------------------------------------------- */

/* Rolls dim d of a by shift: cat(a[n-s:], a[:n-s]) with s = shift mod n. */
static th_status roll_dim(th_trace *tr, th_arg a, int d, int64_t shift, th_arg *out) {
  int64_t n = a.u.value->shape[d];
  *out = a;
  if (n == 0) return TH_OK;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return TH_OK;
  th_arg p[2];
  TH_TRY(th_tu_slice_in_dim(tr, a, n - s, n, 1, d, &p[0]));
  TH_TRY(th_tu_slice_in_dim(tr, a, 0, n - s, 1, d, &p[1]));
  return cat_n(tr, 2, p, d, out);
}

th_status ltorch_roll_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t shifts[TH_MAX_DIMS], dims[TH_MAX_DIMS];
  int ns, nd;
  TH_TRY(th_meta_int_list(op, "shifts", &args[1], shifts, &ns));
  TH_TRY(th_meta_int_list(op, "dims", &args[2], dims, &nd));
  if (ns == 0) return th_error(TH_ERR_RUNTIME, "%s: `shifts` required", op);
  if (nd == 0 && ns == 1) { /* roll the flattened tensor */
    int64_t numel;
    th_meta_numel(v->shape, v->ndim, &numel);
    th_arg f;
    TH_TRY(th_tu_reshape(tr, args[0], 1, &numel, &f));
    TH_TRY(roll_dim(tr, f, 0, shifts[0], &f));
    return th_tu_reshape(tr, f, v->ndim, v->shape, out);
  }
  if (ns != nd)
    return th_error(TH_ERR_RUNTIME, "%s: shifts and dimensions must align. shifts: %d, dims:%d", op, ns, nd);
  th_arg x = args[0];
  for (int i = 0; i < nd; i++) {
    int d;
    TH_TRY(th_meta_canonical_dim(op, dims[i], v->ndim, &d));
    if (v->ndim == 0) continue;
    TH_TRY(roll_dim(tr, x, d, shifts[i], &x));
  }
  *out = x;
  return TH_OK;
}

/* prims.flip over canonical, distinct dims (PyTorch's error for a repeated one). */
static th_status flip_dims(th_trace *tr, const char *op, th_arg a, int n, const int64_t *dims, th_arg *out) {
  const th_value *v = a.u.value;
  int64_t c[TH_MAX_DIMS];
  int nc = 0;
  for (int i = 0; i < n; i++) {
    int d;
    TH_TRY(th_meta_canonical_dim(op, dims[i], v->ndim, &d));
    for (int j = 0; j < nc; j++)
      if (c[j] == d) return th_error(TH_ERR_RUNTIME, "%s: dim %d appears multiple times in the list of dims", op, d);
    c[nc++] = d;
  }
  if (nc == 0 || v->ndim == 0) {
    *out = a;
    return TH_OK;
  }
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, TH_OP_prims_flip, a, th_tu_ints(items, nc, c), out);
}

th_status ltorch_flip_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t dims[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(sym->qualname, "dims", &args[1], dims, &n));
  return flip_dims(tr, sym->qualname, args[0], n, dims, out);
}

th_status ltorch_fliplr_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (tensor0(args)->ndim < 2) return th_error(TH_ERR_RUNTIME, "%s: Input must be >= 2-d.", sym->qualname);
  const int64_t d[1] = {1};
  return flip_dims(tr, sym->qualname, args[0], 1, d, out);
}

th_status ltorch_flipud_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (tensor0(args)->ndim < 1) return th_error(TH_ERR_RUNTIME, "%s: Input must be >= 1-d.", sym->qualname);
  const int64_t d[1] = {0};
  return flip_dims(tr, sym->qualname, args[0], 1, d, out);
}

/* A permutation of ndim dims swapping d0 and d1. */
static th_status swap_dims(th_trace *tr, th_arg a, int d0, int d1, th_arg *out) {
  int64_t perm[TH_MAX_DIMS];
  for (int i = 0; i < a.u.value->ndim; i++) perm[i] = i;
  perm[d0] = d1;
  perm[d1] = d0;
  return th_tu_transpose(tr, a, perm, out);
}

th_status ltorch_rot90_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t k, dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(th_meta_int(op, "k", &args[1], &k));
  TH_TRY(th_meta_int_list(op, "dims", &args[2], dims, &nd));
  if (nd != 2) return th_error(TH_ERR_RUNTIME, "%s: expected total rotation dims == 2, but got dims = %d", op, nd);
  if (v->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: expected total dims >= 2, but got total dims = %d", op, v->ndim);
  int d0, d1;
  TH_TRY(th_meta_canonical_dim(op, dims[0], v->ndim, &d0));
  TH_TRY(th_meta_canonical_dim(op, dims[1], v->ndim, &d1));
  if (d0 == d1)
    return th_error(TH_ERR_RUNTIME, "%s: expected rotation dims to be different, but got dim0 = %d and dim1 = %d", op,
                    d0, d1);
  k = ((k % 4) + 4) % 4;
  th_arg x;
  const int64_t f0[1] = {d0}, f1[1] = {d1}, f01[2] = {d0, d1};
  switch (k) {
    case 1: TH_TRY(flip_dims(tr, op, args[0], 1, f1, &x)); return swap_dims(tr, x, d0, d1, out);
    case 2: return flip_dims(tr, op, args[0], 2, f01, out);
    case 3: TH_TRY(flip_dims(tr, op, args[0], 1, f0, &x)); return swap_dims(tr, x, d0, d1, out);
    default: *out = args[0]; return TH_OK;
  }
}

/* ---- repeat / tile ---------------------------------------------------------------------------------- */

/* a (rank <= nr) repeated reps[i] times along each dim of the right-aligned shape, one dim at a time:
 * broadcast_in_dim inserts a dim of length reps[i] before dim i, and reshape merges the two. */
static th_status repeat_impl(th_trace *tr, const char *op, th_arg a, int nr, const int64_t *reps, th_arg *out) {
  const th_value *v = a.u.value;
  if (nr < v->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor",
                    op);
  TH_TRY(th_meta_check_shape(op, reps, nr));
  int lead = nr - v->ndim;
  int64_t cur[TH_MAX_DIMS];
  for (int i = 0; i < nr; i++) cur[i] = i < lead ? 1 : v->shape[i - lead];
  th_arg x;
  TH_TRY(th_tu_reshape(tr, a, nr, cur, &x));
  for (int i = 0; i < nr; i++) {
    if (reps[i] == 1) continue;
    if (nr + 1 > TH_MAX_DIMS)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: repeating a tensor of rank %d is not supported (at most %d)", op, nr,
                      TH_MAX_DIMS - 1);
    int64_t big[TH_MAX_DIMS], bd[TH_MAX_DIMS];
    for (int j = 0, k = 0; j < nr; j++) {
      if (j == i) big[k++] = reps[i];
      bd[j] = k;
      big[k++] = cur[j];
    }
    th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, nr + 1, big), th_tu_ints(bi, nr, bd), &x));
    cur[i] *= reps[i];
    TH_TRY(th_tu_reshape(tr, x, nr, cur, &x));
  }
  *out = x;
  return TH_OK;
}

th_status ltorch_repeat_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t reps[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(sym->qualname, "repeats", &args[1], reps, &n));
  return repeat_impl(tr, sym->qualname, args[0], n, reps, out);
}

th_status ltorch_tile_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *v = tensor0(args);
  int64_t reps[TH_MAX_DIMS], full[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(sym->qualname, "dims", &args[1], reps, &n));
  int nr = n < v->ndim ? v->ndim : n;
  for (int i = 0; i < nr; i++) full[i] = i < nr - n ? 1 : reps[i - (nr - n)];
  return repeat_impl(tr, sym->qualname, args[0], nr, full, out);
}

/* ---- unfold (sliding windows) ------------------------------------------------------------------------ */

/* Windows of `size` elements every `step` along dim: prims.take of the window indices w*step + s
 * (flattened), the dim split into (windows, size) and the size dim moved last. */
static th_status unfold_impl(th_trace *tr, const char *op, th_arg a, int64_t dim, int64_t size, int64_t step,
                             th_arg *out) {
  const th_value *v = a.u.value;
  int d;
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t len = v->ndim ? v->shape[d] : 1;
  if (size > len)
    return th_error(TH_ERR_RUNTIME, "%s: maximum size for tensor at dimension %d is %lld but size is %lld", op, d,
                    (long long)len, (long long)size);
  if (step <= 0) return th_error(TH_ERR_RUNTIME, "%s: step is %lld but must be > 0", op, (long long)step);
  if (size < 0) return th_error(TH_ERR_RUNTIME, "%s: size is %lld but must be >= 0", op, (long long)size);
  if (v->ndim == 0) { /* a 0-dim tensor is one element: the result is (size,) */
    const int64_t one[1] = {1};
    th_arg x;
    TH_TRY(th_tu_reshape(tr, a, 1, one, &x));
    return th_tu_slice_in_dim(tr, x, 0, size, 1, 0, out);
  }
  if (v->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: tensors of rank %d are not supported (at most %d dimensions)", op,
                    v->ndim + 1, TH_MAX_DIMS);
  int64_t nw = (len - size) / step + 1;
  /* idx[w, s] = w * step + s */
  th_arg wi, si, idx;
  const int64_t ws[2] = {nw, size};
  const int64_t b0[1] = {0}, b1[1] = {1};
  th_arg t0[2], t1[1];
  TH_TRY(th_tu_iota(tr, nw, 0, step, v->device, TH_I64, &wi));
  TH_TRY(th_tu_iota(tr, size, 0, 1, v->device, TH_I64, &si));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, wi, th_tu_ints(t0, 2, ws), th_tu_ints(t1, 1, b0), &wi));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, si, th_tu_ints(t0, 2, ws), th_tu_ints(t1, 1, b1), &si));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, wi, si, &idx));
  const int64_t flat[1] = {nw * size};
  TH_TRY(th_tu_reshape(tr, idx, 1, flat, &idx));
  th_arg x;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, a, idx, th_arg_int(d), &x));
  int64_t shape[TH_MAX_DIMS], perm[TH_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (i == d) {
      shape[r++] = nw;
      shape[r++] = size;
    } else {
      shape[r++] = v->shape[i];
    }
  }
  TH_TRY(th_tu_reshape(tr, x, r, shape, &x));
  /* move dim d + 1 (the window's elements) last */
  int k = 0;
  for (int i = 0; i < r; i++)
    if (i != d + 1) perm[k++] = i;
  perm[k] = d + 1;
  return th_tu_transpose(tr, x, perm, out);
}

th_status ltorch_unfold_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  static const char *const names[3] = {"dimension", "size", "step"};
  int64_t v[3];
  TH_TRY(int_args(sym->qualname, args, 1, 3, names, v));
  return unfold_impl(tr, sym->qualname, args[0], v[0], v[1], v[2], out);
}

/* ---- unflatten / movedim / view_as / reshape_as -------------------------------------------------------- */

th_status ltorch_unflatten_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t dim, sizes[TH_MAX_DIMS];
  int n, d;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  TH_TRY(th_meta_int_list(op, "sizes", &args[2], sizes, &n));
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: unflatten: sizes must be non-empty", op);
  if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: unflatten: Cannot unflatten a 0-dim tensor", op);
  if (v->ndim - 1 + n > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: tensors of rank %d are not supported (at most %d dimensions)", op,
                    v->ndim - 1 + n, TH_MAX_DIMS);
  int64_t len = v->shape[d], known = 1;
  int infer = -1;
  char b0[TH_META_SHAPE_BUF];
  for (int i = 0; i < n; i++) {
    if (sizes[i] == -1) {
      if (infer >= 0) return th_error(TH_ERR_RUNTIME, "%s: only one dimension can be inferred", op);
      infer = i;
    } else if (sizes[i] < 0) {
      return th_error(TH_ERR_RUNTIME, "%s: invalid shape dimension %lld", op, (long long)sizes[i]);
    } else {
      known *= sizes[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || len % known)
      return th_error(TH_ERR_RUNTIME, "%s: shape '%s' is invalid for input of size %lld", op,
                      th_meta_shape_str(sizes, n, b0, sizeof b0), (long long)len);
    sizes[infer] = len / known;
  } else if (known != len) {
    return th_error(TH_ERR_RUNTIME,
                    "%s: unflatten: Provided sizes %s don't multiply up to the size of dim %lld (%lld) in the input "
                    "tensor",
                    op, th_meta_shape_str(sizes, n, b0, sizeof b0), (long long)dim, (long long)len);
  }
  int64_t shape[TH_MAX_DIMS];
  int r = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (i == d)
      for (int j = 0; j < n; j++) shape[r++] = sizes[j];
    else
      shape[r++] = v->shape[i];
  }
  return th_tu_reshape(tr, args[0], r, shape, out);
}

th_status ltorch_movedim_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t src[TH_MAX_DIMS], dst[TH_MAX_DIMS];
  int ns, nd;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "source", &args[1], src, &ns));
  TH_TRY(th_meta_int_list(op, "destination", &args[2], dst, &nd));
  if (ns != nd)
    return th_error(TH_ERR_RUNTIME,
                    "%s: movedim: Invalid source or destination dims: source (%s dims) should contain the same number "
                    "of dims as destination (%s dims)",
                    op, th_meta_shape_str(src, ns, b0, sizeof b0), th_meta_shape_str(dst, nd, b1, sizeof b1));
  int r = v->ndim;
  int64_t cs[TH_MAX_DIMS], cd[TH_MAX_DIMS];
  for (int i = 0; i < ns; i++) {
    int a, b;
    TH_TRY(th_meta_canonical_dim(op, src[i], r, &a));
    TH_TRY(th_meta_canonical_dim(op, dst[i], r, &b));
    cs[i] = a;
    cd[i] = b;
  }
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < i; j++) {
      if (cs[i] == cs[j])
        return th_error(TH_ERR_RUNTIME, "%s: movedim: repeated dim in `source` (%s)", op,
                        th_meta_shape_str(src, ns, b0, sizeof b0));
      if (cd[i] == cd[j])
        return th_error(TH_ERR_RUNTIME, "%s: movedim: repeated dim in `destination` (%s)", op,
                        th_meta_shape_str(dst, nd, b0, sizeof b0));
    }
  if (r == 0) {
    *out = args[0];
    return TH_OK;
  }
  int64_t perm[TH_MAX_DIMS];
  bool used_src[TH_MAX_DIMS] = {false}, used_dst[TH_MAX_DIMS] = {false};
  for (int i = 0; i < r; i++) perm[i] = -1;
  for (int i = 0; i < ns; i++) {
    perm[cd[i]] = cs[i];
    used_src[cs[i]] = true;
    used_dst[cd[i]] = true;
  }
  int s = 0;
  for (int i = 0; i < r; i++) {
    if (used_dst[i]) continue;
    while (used_src[s]) s++;
    perm[i] = s++;
  }
  return th_tu_transpose(tr, args[0], perm, out);
}

th_status ltorch_view_as_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const th_value *o = args[1].u.value;
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, TH_OP_ltorch_reshape, args[0], th_tu_ints(items, o->ndim, o->shape), out);
}

th_status ltorch_reshape_as_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return ltorch_view_as_decomp(tr, sym, args, out);
}

/* adjoint: the conjugate transpose of the last two dims; the tensors are real, so transpose(-2, -1). */
th_status ltorch_adjoint_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (tensor0(args)->ndim < 2)
    return th_error(TH_ERR_RUNTIME,
                    "%s: tensor.adjoint() is only supported on matrices or batches of matrices. Got %d-D tensor.",
                    sym->qualname, tensor0(args)->ndim);
  return th_tu_call3(tr, TH_OP_ltorch_transpose, args[0], th_arg_int(-2), th_arg_int(-1), out);
}

/* ---- the *_copy variants: the view op, then a copy of each output ------------------------------------- */

/* Calls `view` on the first nargs arguments and clones every tensor of its result. */
static th_status copy_of(th_trace *tr, th_op_id view, int nargs, const th_arg *args, th_arg *out) {
  th_arg r;
  TH_TRY(th_call(tr, view, nargs, args, &r));
  if (r.kind == TH_ARG_VALUE) return th_tu_call1(tr, TH_OP_prims_clone, r, out);
  if (r.kind != TH_ARG_TUPLE && r.kind != TH_ARG_LIST) {
    *out = r;
    return TH_OK;
  }
  th_arg *items;
  TH_TRY(arena_args(tr, r.u.seq.n, &items));
  for (int i = 0; i < r.u.seq.n; i++) TH_TRY(th_tu_call1(tr, TH_OP_prims_clone, r.u.seq.items[i], &items[i]));
  *out = th_arg_tuple(r.u.seq.n, items);
  return TH_OK;
}

#define COPY_VARIANT(name, view, nargs)                                                                                \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    (void)sym;                                                                                                         \
    return copy_of(tr, view, nargs, args, out);                                                                        \
  }
COPY_VARIANT(narrow_copy, TH_OP_ltorch_narrow, 4)
COPY_VARIANT(permute_copy, TH_OP_ltorch_permute, 2)
COPY_VARIANT(expand_copy, TH_OP_ltorch_expand, 2)
COPY_VARIANT(squeeze_copy, TH_OP_ltorch_squeeze, 2)
COPY_VARIANT(unsqueeze_copy, TH_OP_ltorch_unsqueeze, 2)
COPY_VARIANT(t_copy, TH_OP_ltorch_t, 1)
COPY_VARIANT(transpose_copy, TH_OP_ltorch_transpose, 3)
COPY_VARIANT(view_copy, TH_OP_ltorch_reshape, 2)
COPY_VARIANT(unbind_copy, TH_OP_ltorch_unbind, 2)
COPY_VARIANT(diagonal_copy, TH_OP_ltorch_diagonal, 4)
COPY_VARIANT(split_with_sizes_copy, TH_OP_ltorch_split_with_sizes, 3)
COPY_VARIANT(unfold_copy, TH_OP_ltorch_unfold, 4)
#undef COPY_VARIANT

th_status ltorch_alias_copy_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
}

/* ---- diagonals -------------------------------------------------------------------------------------------- */

/* The offset, dim1 and dim2 arguments of diagonal and diag_embed. */
static th_status diag_args(const char *op, const th_arg *args, int64_t *v) {
  static const char *const names[3] = {"offset", "dim1", "dim2"};
  return int_args(op, args, 1, 3, names, v);
}

/* The diagonal `offset` of dims (dim1, dim2), appended as the last dim: the two dims moved last and
 * merged, then prims.take of the flat indices start + k * (n2 + 1). */
static th_status diagonal_impl(th_trace *tr, const char *op, th_arg a, int64_t offset, int64_t dim1, int64_t dim2,
                               th_arg *out) {
  const th_value *v = a.u.value;
  int d1, d2;
  TH_TRY(th_meta_canonical_dim(op, dim1, v->ndim, &d1));
  TH_TRY(th_meta_canonical_dim(op, dim2, v->ndim, &d2));
  if (d1 == d2)
    return th_error(TH_ERR_RUNTIME, "%s: diagonal dimensions cannot be identical %lld, %lld", op, (long long)dim1,
                    (long long)dim2);
  if (v->ndim < 2) return th_error(TH_ERR_INDEX, "%s: diagonal expects a tensor with at least 2 dimensions", op);
  int64_t n1 = v->shape[d1], n2 = v->shape[d2], len;
  if (offset >= 0)
    len = offset >= n2 ? 0 : (n1 < n2 - offset ? n1 : n2 - offset);
  else
    len = -offset >= n1 ? 0 : (n1 + offset < n2 ? n1 + offset : n2);
  int64_t start = len == 0 ? 0 : offset >= 0 ? offset : -offset * n2;
  int64_t perm[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < v->ndim; i++)
    if (i != d1 && i != d2) {
      shape[k] = v->shape[i];
      perm[k++] = i;
    }
  perm[k] = d1;
  perm[k + 1] = d2;
  shape[k] = n1 * n2;
  th_arg x, idx;
  TH_TRY(th_tu_transpose(tr, a, perm, &x));
  TH_TRY(th_tu_reshape(tr, x, k + 1, shape, &x));
  TH_TRY(th_tu_iota(tr, len, start, n2 + 1, v->device, TH_I64, &idx));
  return th_tu_call3(tr, TH_OP_prims_take, x, idx, th_arg_int(k), out);
}

th_status ltorch_diagonal_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t v[3];
  TH_TRY(diag_args(sym->qualname, args, v));
  return diagonal_impl(tr, sym->qualname, args[0], v[0], v[1], v[2], out);
}

th_status ltorch_linalg_diagonal_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_call(tr, TH_OP_ltorch_diagonal, 4, args, out);
}

/* The last dim of a (length n) as the diagonal `offset` of an (m, m) matrix, m = n + |offset|, in dims
 * (dim1, dim2) of the result (rank ndim + 1): the vector padded to m, broadcast along the other matrix
 * dim and kept where col - row == offset. */
static th_status diag_embed_impl(th_trace *tr, const char *op, th_arg a, int64_t offset, int64_t dim1, int64_t dim2,
                                 th_arg *out) {
  const th_value *v = a.u.value;
  int r = v->ndim + 1;
  if (r > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: tensors of rank %d are not supported (at most %d dimensions)", op, r,
                    TH_MAX_DIMS);
  int d1, d2;
  TH_TRY(th_meta_canonical_dim(op, dim1, r, &d1));
  TH_TRY(th_meta_canonical_dim(op, dim2, r, &d2));
  if (d1 == d2)
    return th_error(TH_ERR_RUNTIME, "%s: diagonal dimensions cannot be identical %lld, %lld", op, (long long)dim1,
                    (long long)dim2);
  th_arg x = a;
  if (v->ndim == 0) {
    const int64_t one[1] = {1};
    TH_TRY(th_tu_reshape(tr, a, 1, one, &x));
  }
  const th_value *xv = x.u.value;
  int nb = xv->ndim - 1;
  int64_t n = xv->shape[nb], ao = offset < 0 ? -offset : offset, m = n + ao;
  if (ao > 0) { /* pad the vector with zeros to m */
    int64_t ps[TH_MAX_DIMS];
    memcpy(ps, xv->shape, sizeof(int64_t) * (size_t)xv->ndim);
    ps[nb] = ao;
    th_arg pieces[2] = {x, th_arg_none()};
    TH_TRY(th_tu_full(tr, xv->ndim, ps, zero_of(xv->dtype), xv->device, xv->dtype, &pieces[1]));
    TH_TRY(cat_n(tr, 2, pieces, nb, &x));
  }
  /* broadcast to (..., m, m): the vector runs along the rows (offset >= 0) or the columns */
  int64_t shape[TH_MAX_DIMS], bd[TH_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    shape[i] = xv->shape[i];
    bd[i] = i;
  }
  shape[nb] = m;
  shape[nb + 1] = m;
  bd[nb] = offset >= 0 ? nb : nb + 1;
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS], vb;
  TH_TRY(
    th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, nb + 2, shape), th_tu_ints(bi, nb + 1, bd), &vb));
  /* mask[i, j] = (j - i == offset) */
  th_arg ri, ci, diff, mask;
  const int64_t mm[2] = {m, m}, b0[1] = {0}, b1[1] = {1};
  th_arg t0[2], t1[1];
  TH_TRY(th_tu_iota(tr, m, 0, 1, xv->device, TH_I64, &ri));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ri, th_tu_ints(t0, 2, mm), th_tu_ints(t1, 1, b1), &ci));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ri, th_tu_ints(t0, 2, mm), th_tu_ints(t1, 1, b0), &ri));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, ci, ri, &diff));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, diff, th_arg_int(offset), &mask));
  th_arg res;
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, mask, vb, zero_of(xv->dtype), &res));
  /* the rows to dim1, the columns to dim2 */
  int64_t perm[TH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < r; i++) {
    if (i == d1)
      perm[i] = r - 2;
    else if (i == d2)
      perm[i] = r - 1;
    else
      perm[i] = k++;
  }
  return th_tu_transpose(tr, res, perm, out);
}

th_status ltorch_diag_embed_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t v[3];
  TH_TRY(diag_args(sym->qualname, args, v));
  return diag_embed_impl(tr, sym->qualname, args[0], v[0], v[1], v[2], out);
}

th_status ltorch_diag_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t offset;
  TH_TRY(th_meta_int(op, "diagonal", &args[1], &offset));
  if (v->ndim == 1) return diag_embed_impl(tr, op, args[0], offset, 0, 1, out);
  if (v->ndim == 2) return diagonal_impl(tr, op, args[0], offset, 0, 1, out);
  return th_error(TH_ERR_RUNTIME, "%s: diag(): Supports 1D or 2D tensors. Got %dD", op, v->ndim);
}

th_status ltorch_diagflat_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t offset, numel;
  TH_TRY(th_meta_int(op, "offset", &args[1], &offset));
  th_meta_numel(v->shape, v->ndim, &numel);
  th_arg x;
  TH_TRY(th_tu_reshape(tr, args[0], 1, &numel, &x));
  return diag_embed_impl(tr, op, x, offset, 0, 1, out);
}

/* ---- atleast_Nd and the stacks ------------------------------------------------------------------------------ */

static th_status atleast(th_trace *tr, th_arg a, int k, th_arg *out) {
  const th_value *v = a.u.value;
  int64_t shape[3];
  int n = v->ndim;
  if (n >= k) {
    *out = a;
    return TH_OK;
  }
  if (n == 0) {
    shape[0] = shape[1] = shape[2] = 1;
  } else if (n == 1) {
    shape[0] = 1;
    shape[1] = v->shape[0];
    shape[2] = 1;
  } else { /* n == 2, k == 3 */
    shape[0] = v->shape[0];
    shape[1] = v->shape[1];
    shape[2] = 1;
  }
  if (k == 1) shape[0] = 1;
  return th_tu_reshape(tr, a, k, shape, out);
}

static th_status atleast_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, th_arg *out) {
  int n;
  const th_arg *items;
  bool single;
  TH_TRY(tensor_seq(sym->qualname, &args[0], &n, &items, &single));
  if (single) return atleast(tr, items[0], k, out);
  th_arg *res;
  TH_TRY(arena_args(tr, n, &res));
  for (int i = 0; i < n; i++) TH_TRY(atleast(tr, items[i], k, &res[i]));
  TH_TRY(fresh_items(tr, n, res, n, items));
  *out = th_arg_tuple(n, res);
  return TH_OK;
}

/* ltorch_<name>_decomp as impl(tr, sym, args, <the extra arguments>, out). */
#define DECOMP_OF(name, impl, ...)                                                                                     \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    return impl(tr, sym, args, __VA_ARGS__, out);                                                                      \
  }
DECOMP_OF(atleast_1d, atleast_decomp, 1)
DECOMP_OF(atleast_2d, atleast_decomp, 2)
DECOMP_OF(atleast_3d, atleast_decomp, 3)

/* k: 1, 2, 3 for hstack, vstack, dstack; 0 for column_stack. */
static th_status stack_kind(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, th_arg *out) {
  const char *op = sym->qualname;
  static const char *const names[] = {"column_stack", "hstack", "vstack", "dstack"};
  int n;
  const th_arg *items;
  TH_TRY(tensor_seq(op, &args[0], &n, &items, NULL));
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: %s expects a non-empty TensorList", op, names[k]);
  th_arg *res;
  TH_TRY(arena_args(tr, n, &res));
  for (int i = 0; i < n; i++) {
    if (k == 0) {
      const th_value *v = items[i].u.value;
      if (v->ndim <= 1) {
        int64_t shape[2] = {v->ndim ? v->shape[0] : 1, 1};
        TH_TRY(th_tu_reshape(tr, items[i], 2, shape, &res[i]));
      } else {
        res[i] = items[i];
      }
    } else {
      TH_TRY(atleast(tr, items[i], k == 1 ? 1 : k, &res[i]));
    }
  }
  int dim = k == 0 ? 1 : k == 1 ? (res[0].u.value->ndim == 1 ? 0 : 1) : k == 2 ? 0 : 2;
  return th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(n, res), th_arg_int(dim), out);
}

DECOMP_OF(hstack, stack_kind, 1)
DECOMP_OF(vstack, stack_kind, 2)
DECOMP_OF(dstack, stack_kind, 3)
DECOMP_OF(column_stack, stack_kind, 0)

/* ---- splits ------------------------------------------------------------------------------------------------ */

/* Python's slice clamping of [s, e) over a dim of length len. */
static void clamp_range(int64_t len, int64_t *s, int64_t *e) {
  if (*s < 0) *s += len;
  if (*s < 0) *s = 0;
  if (*s > len) *s = len;
  if (*e < 0) *e += len;
  if (*e < 0) *e = 0;
  if (*e > len) *e = len;
  if (*e < *s) *e = *s;
}

#define TH_MAX_SPLIT (1 << 16)

static th_status tensor_split_impl(th_trace *tr, const char *op, th_arg a, const th_arg *ios, int64_t dim,
                                   th_arg *out) {
  const th_value *v = a.u.value;
  if (v->ndim == 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims", op);
  int d;
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t len = v->shape[d];
  if (th_meta_is_tensor(ios))
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.tensor_split with a tensor `tensor_indices_or_sections` is not supported (the number "
                    "and sizes of the pieces depend on the tensor's values)",
                    op);
  if (ios->kind == TH_ARG_TUPLE || ios->kind == TH_ARG_LIST) {
    int n = ios->u.seq.n;
    if (n + 1 > TH_MAX_SPLIT)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: at most %d pieces are supported", op, TH_MAX_SPLIT);
    th_arg *pieces;
    TH_TRY(arena_args(tr, n + 1, &pieces));
    int64_t prev = 0;
    for (int i = 0; i <= n; i++) {
      int64_t idx = len;
      if (i < n) TH_TRY(th_meta_int(op, "indices", &ios->u.seq.items[i], &idx));
      int64_t s = prev, e = idx;
      clamp_range(len, &s, &e);
      TH_TRY(th_tu_slice_in_dim(tr, a, s, e, 1, d, &pieces[i]));
      prev = idx;
    }
    *out = th_arg_tuple(n + 1, pieces);
    return TH_OK;
  }
  int64_t sections;
  TH_TRY(th_meta_int(op, "sections", ios, &sections));
  if (sections <= 0)
    return th_error(TH_ERR_RUNTIME, "%s: number of sections must be larger than 0, got %lld", op, (long long)sections);
  if (sections > TH_MAX_SPLIT)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: at most %d pieces are supported", op, TH_MAX_SPLIT);
  th_arg *pieces;
  TH_TRY(arena_args(tr, (int)sections, &pieces));
  int64_t each = len / sections, extra = len % sections, s = 0;
  for (int64_t i = 0; i < sections; i++) {
    int64_t l = each + (i < extra);
    TH_TRY(th_tu_slice_in_dim(tr, a, s, s + l, 1, d, &pieces[i]));
    s += l;
  }
  *out = th_arg_tuple((int)sections, pieces);
  return TH_OK;
}

th_status ltorch_tensor_split_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t dim;
  TH_TRY(th_meta_int(sym->qualname, "dim", &args[2], &dim));
  return tensor_split_impl(tr, sym->qualname, args[0], &args[1], dim, out);
}

/* hsplit / vsplit / dsplit: tensor_split along dim 1 (0 for 1-D), 0 or 2; an int must divide the dim. */
static th_status split_along(th_trace *tr, const th_symbol *sym, const th_arg *args, const char *name, int min_dims,
                             int dim, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  if (v->ndim < min_dims)
    return th_error(TH_ERR_RUNTIME,
                    "%s: torch.%s requires a tensor with at least %d dimension, but got a tensor with %d dimensions!",
                    op, name, min_dims, v->ndim);
  if (dim == 1 && v->ndim == 1) dim = 0;
  if (args[1].kind != TH_ARG_TUPLE && args[1].kind != TH_ARG_LIST && !th_meta_is_tensor(&args[1])) {
    int64_t s;
    TH_TRY(th_meta_int(op, "sections", &args[1], &s));
    if (s != 0 && v->shape[dim] % s != 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.%s attempted to split along dimension %d, but the size of the dimension %lld is not "
                      "divisible by the split_size %lld!",
                      op, name, dim, (long long)v->shape[dim], (long long)s);
  }
  return tensor_split_impl(tr, op, args[0], &args[1], dim, out);
}

DECOMP_OF(hsplit, split_along, "hsplit", 1, 1)
DECOMP_OF(vsplit, split_along, "vsplit", 2, 0)
DECOMP_OF(dsplit, split_along, "dsplit", 3, 2)
#undef DECOMP_OF

/* split_with_sizes and unsafe_split record ltorch.split, unsafe_chunk ltorch.chunk (their vjp rules). */
th_status ltorch_split_with_sizes_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t sizes[TH_MAX_DIMS];
  int n;
  const th_arg *s = &args[1];
  if (s->kind == TH_ARG_INT) {
    TH_TRY(th_meta_int_list(sym->qualname, "split_sizes", s, sizes, &n));
    th_arg items[1];
    return th_tu_call3(tr, TH_OP_ltorch_split, args[0], th_tu_ints(items, n, sizes), args[2], out);
  }
  return th_tu_call3(tr, TH_OP_ltorch_split, args[0], args[1], args[2], out);
}

th_status ltorch_unsafe_split_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call3(tr, TH_OP_ltorch_split, args[0], args[1], args[2], out);
}

th_status ltorch_unsafe_chunk_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call3(tr, TH_OP_ltorch_chunk, args[0], args[1], args[2], out);
}

/* ---- broadcast_tensors / meshgrid / block_diag / cartesian_prod ----------------------------------------------- */

th_status ltorch_broadcast_tensors_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int n;
  const th_arg *items;
  TH_TRY(tensor_seq(op, &args[0], &n, &items, NULL));
  int64_t shape[TH_MAX_DIMS];
  int nd;
  th_arg *res;
  TH_TRY(arena_args(tr, n, &res));
  if (n > 0) TH_TRY(th_tu_broadcast_shape(op, n, items, &nd, shape));
  for (int i = 0; i < n; i++) {
    res[i] = items[i];
    TH_TRY(th_tu_expand(tr, op, &res[i], nd, shape));
  }
  TH_TRY(fresh_items(tr, n, res, n, items));
  *out = th_arg_tuple(n, res);
  return TH_OK;
}

th_status ltorch_meshgrid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int n;
  const th_arg *items;
  TH_TRY(tensor_seq(op, &args[0], &n, &items, NULL));
  bool xy = false;
  if (args[1].kind == TH_ARG_STR) {
    if (!strcmp(args[1].u.s, "xy"))
      xy = true;
    else if (strcmp(args[1].u.s, "ij"))
      return th_error(TH_ERR_RUNTIME, "%s: torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: %s",
                      op, args[1].u.s);
  }
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: meshgrid expects a non-empty TensorList", op);
  if (n > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meshgrid of %d tensors is not supported (at most %d)", op, n,
                    TH_MAX_DIMS);
  int64_t shape[TH_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    const th_value *v = items[i].u.value;
    if (v->ndim > 1)
      return th_error(TH_ERR_RUNTIME, "%s: torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: %dD",
                      op, v->ndim);
    if (v->dtype != items[0].u.value->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: meshgrid expects all tensors to have the same dtype", op);
    shape[i] = v->ndim ? v->shape[0] : 1;
  }
  bool swap = xy && n >= 2;
  if (swap) {
    int64_t t = shape[0];
    shape[0] = shape[1];
    shape[1] = t;
  }
  th_arg *res;
  TH_TRY(arena_args(tr, n, &res));
  for (int i = 0; i < n; i++) {
    const th_value *v = items[i].u.value;
    int64_t len = v->ndim ? v->shape[0] : 1;
    th_arg x;
    TH_TRY(th_tu_reshape(tr, items[i], 1, &len, &x));
    int64_t bd[1] = {swap && i < 2 ? 1 - i : i};
    th_arg si[TH_MAX_DIMS], bi[1];
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, n, shape), th_tu_ints(bi, 1, bd), &res[i]));
  }
  *out = th_arg_tuple(n, res);
  return TH_OK;
}

th_status ltorch_block_diag_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int n;
  const th_arg *items;
  TH_TRY(tensor_seq(op, &args[0], &n, &items, NULL));
  th_tu_type comp, res_t;
  th_dtype dt = TH_F32;
  th_device dev = {0};
  if (n > 0) {
    TH_TRY(th_tu_promote(op, n, items, TH_TU_PROMO_PRESERVE, &comp, &res_t));
    dt = th_tu_tensor_dtype(res_t);
    dev = items[0].u.value->device;
  }
  th_arg *mats;
  TH_TRY(arena_args(tr, n, &mats));
  int64_t cols = 0;
  for (int i = 0; i < n; i++) {
    const th_value *v = items[i].u.value;
    if (v->ndim > 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.block_diag: Input tensors must have 2 or fewer dimensions. Input %d has %d dimensions",
                      op, i, v->ndim);
    int64_t shape[2] = {v->ndim == 2 ? v->shape[0] : 1, v->ndim == 2 ? v->shape[1] : v->ndim == 1 ? v->shape[0] : 1};
    mats[i] = items[i];
    TH_TRY(th_tu_convert(tr, &mats[i], dt));
    TH_TRY(th_tu_reshape(tr, mats[i], 2, shape, &mats[i]));
    cols += shape[1];
  }
  if (n == 0) {
    const int64_t z[2] = {1, 0};
    return th_tu_full(tr, 2, z, th_arg_float(0.0), dev, dt, out);
  }
  th_arg *rows;
  TH_TRY(arena_args(tr, n, &rows));
  int64_t c = 0;
  for (int i = 0; i < n; i++) {
    const th_value *m = mats[i].u.value;
    th_arg parts[3];
    int np = 0;
    if (c > 0) {
      const int64_t s[2] = {m->shape[0], c};
      TH_TRY(th_tu_full(tr, 2, s, zero_of(dt), dev, dt, &parts[np++]));
    }
    parts[np++] = mats[i];
    int64_t after = cols - c - m->shape[1];
    if (after > 0) {
      const int64_t s[2] = {m->shape[0], after};
      TH_TRY(th_tu_full(tr, 2, s, zero_of(dt), dev, dt, &parts[np++]));
    }
    TH_TRY(cat_n(tr, np, parts, 1, &rows[i]));
    c += m->shape[1];
  }
  return cat_n(tr, n, rows, 0, out);
}

th_status ltorch_cartesian_prod_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int n;
  const th_arg *items;
  TH_TRY(tensor_seq(op, &args[0], &n, &items, NULL));
  for (int i = 0; i < n; i++) {
    const th_value *v = items[i].u.value;
    if (v->ndim != 1) {
      char b0[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME, "%s: Expect a 1D vector, but got shape %s", op,
                      th_meta_shape_str(v->shape, v->ndim, b0, sizeof b0));
    }
  }
  if (n == 1) {
    *out = items[0];
    return TH_OK;
  }
  th_arg grid;
  static const char *const kw[1] = {"indexing"};
  const th_arg kwa[1] = {th_arg_str("ij")};
  th_arg list = th_arg_list(n, (th_arg *)items);
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_meshgrid, 1, &list, 1, kw, kwa, &grid));
  th_arg *cols;
  TH_TRY(arena_args(tr, n, &cols));
  for (int i = 0; i < n; i++) {
    const th_value *g = grid.u.seq.items[i].u.value;
    int64_t numel;
    th_meta_numel(g->shape, g->ndim, &numel);
    TH_TRY(th_tu_reshape(tr, grid.u.seq.items[i], 1, &numel, &cols[i]));
  }
  return th_tu_call2(tr, TH_OP_ltorch_stack, th_arg_list(n, cols), th_arg_int(1), out);
}

/* ---- creation: eye, linspace, logspace -------------------------------------------------------------------------- */

th_status ltorch_eye_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t n, m;
  TH_TRY(th_meta_int(op, "n", &args[0], &n));
  m = n;
  if (args[1].kind != TH_ARG_NONE) TH_TRY(th_meta_int(op, "m", &args[1], &m));
  if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: n must be greater or equal to 0, got %lld", op, (long long)n);
  if (m < 0) return th_error(TH_ERR_RUNTIME, "%s: m must be greater or equal to 0, got %lld", op, (long long)m);
  th_dtype dt = TH_F32;
  bool has;
  th_device dev = {0};
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[2], &dt, &has));
  if (!has) dt = TH_F32;
  TH_TRY(th_tu_device_arg(op, "device", &args[4], &dev, &has));
  if (!has) dev = (th_device){0};
  th_arg ri, ci, mask;
  const int64_t nm[2] = {n, m}, b0[1] = {0}, b1[1] = {1};
  th_arg t0[2], t1[1];
  TH_TRY(th_tu_iota(tr, n, 0, 1, dev, TH_I64, &ri));
  TH_TRY(th_tu_iota(tr, m, 0, 1, dev, TH_I64, &ci));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ri, th_tu_ints(t0, 2, nm), th_tu_ints(t1, 1, b0), &ri));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ci, th_tu_ints(t0, 2, nm), th_tu_ints(t1, 1, b1), &ci));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, ri, ci, &mask));
  *out = mask;
  return th_tu_convert(tr, out, dt);
}

/* PyTorch's CPU linspace: step = (end - start) / (steps - 1); element i is start + step * i in the first
 * half and end - step * (steps - 1 - i) in the second, computed in the result's dtype (float32 for
 * bfloat16/float16, float64 for integer results, whose values are then truncated). Tensor start/end
 * (0-dim) are the same elementwise arithmetic on the tensors. `base` (logspace): pow(base, that). */
static th_status linspace_impl(th_trace *tr, const char *op, const th_arg *args, bool log, double base,
                               const th_arg *dtarg, const th_arg *devarg, th_arg *out) {
  int64_t steps;
  TH_TRY(th_meta_int(op, "steps", &args[2], &steps));
  if (steps < 0) return th_error(TH_ERR_RUNTIME, "%s: number of steps must be non-negative", op);
  th_dtype dt;
  bool has;
  TH_TRY(th_tu_dtype_arg(op, "dtype", dtarg, &dt, &has));
  if (!has) dt = TH_F32;
  th_device dev = {0};
  TH_TRY(th_tu_device_arg(op, "device", devarg, &dev, &has));
  if (!has) {
    dev = (th_device){0};
    for (int i = 0; i < 2; i++)
      if (th_meta_is_tensor(&args[i])) dev = args[i].u.value->device;
  }
  for (int i = 0; i < 2; i++)
    if (th_meta_is_tensor(&args[i]) && args[i].u.value->ndim != 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: linspace only supports 0-dimensional start and end tensors, but got start with %d "
                      "dimension(s) and end with %d dimension(s).",
                      op, th_meta_is_tensor(&args[0]) ? args[0].u.value->ndim : 0,
                      th_meta_is_tensor(&args[1]) ? args[1].u.value->ndim : 0);
  th_dtype cdt = th_dtype_is_float(dt) ? th_tu_computation_dtype(dt) : TH_F64;
  th_arg s = args[0], e = args[1];
  if (!th_dtype_is_float(dt)) { /* ATen reads start and end as the integer dtype first (4.3 -> 4) */
    TH_TRY(th_tu_convert(tr, &s, TH_I64));
    TH_TRY(th_tu_convert(tr, &e, TH_I64));
  }
  TH_TRY(th_tu_convert(tr, &s, cdt));
  TH_TRY(th_tu_convert(tr, &e, cdt));
  th_arg x;
  if (steps == 1) { /* start alone */
    const int64_t one[1] = {1};
    TH_TRY(th_tu_full(tr, 1, one, th_arg_float(0.0), dev, cdt, &x));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, x, s, &x));
  } else {
    th_arg step, idx, rev, lo, hi, mask;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, e, s, &step));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, step, th_arg_float((double)(steps - 1)), &step));
    TH_TRY(th_tu_convert(tr, &step, cdt));
    TH_TRY(th_tu_iota(tr, steps, 0, 1, dev, TH_I64, &idx));
    TH_TRY(th_tu_iota(tr, steps, steps - 1, -1, dev, TH_I64, &rev));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, idx, th_arg_int(steps / 2), &mask));
    TH_TRY(th_tu_convert(tr, &idx, cdt));
    TH_TRY(th_tu_convert(tr, &rev, cdt));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, step, idx, &lo));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, s, lo, &lo));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, step, rev, &hi));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, e, hi, &hi));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, mask, lo, hi, &x));
  }
  TH_TRY(th_tu_convert(tr, &x, cdt));
  if (log) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_pow, th_arg_float(base), x, &x));
  TH_TRY(th_tu_convert(tr, &x, cdt));
  *out = x;
  return th_tu_convert(tr, out, dt);
}

th_status ltorch_linspace_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return linspace_impl(tr, sym->qualname, args, false, 0, &args[3], &args[5], out);
}

th_status ltorch_logspace_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  double base;
  TH_TRY(th_tu_float(sym->qualname, "base", &args[3], &base));
  return linspace_impl(tr, sym->qualname, args, true, base, &args[4], &args[6], out);
}

/* ---- sum_to_size ------------------------------------------------------------------------------------------- */

th_status ltorch_sum_to_size_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t size[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, "size", &args[1], size, &n));
  bool ok = n <= v->ndim;
  int lead = v->ndim - n;
  for (int i = 0; ok && i < n; i++) ok = size[i] == 1 || size[i] == v->shape[lead + i];
  if (!ok) {
    char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: size {%s} is not expandable to size {%s}.", op,
                    th_meta_shape_str(size, n, b0, sizeof b0), th_meta_shape_str(v->shape, v->ndim, b1, sizeof b1));
  }
  if (n == 0) /* ATen's sum_to: an empty size is the full sum (integers and bool become int64) */
    return th_tu_call1(tr, TH_OP_ltorch_sum, args[0], out);
  int64_t dims[TH_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < v->ndim; i++)
    if (i < lead || (size[i - lead] == 1 && v->shape[i] != 1)) dims[nd++] = i;
  if (nd == 0) {
    *out = args[0];
    return TH_OK;
  }
  th_arg r, items[TH_MAX_DIMS];
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sum, args[0], th_tu_ints(items, nd, dims), &r));
  return th_tu_reshape(tr, r, n, size, out);
}
