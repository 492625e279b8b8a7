/* linalg_more.c — vector and tensor products: dot, vdot, inner, mv, addmv, addr, tensordot,
 * kron, cross / linalg.cross, linalg.vecdot, linalg.multi_dot, addbmm and bilinear, as compositions of
 * ltorch.matmul / addmm and the elementwise ops (the products of floating tensors are GEMMs; integer
 * ones are sums of products, since the matmul prim is for floating dtypes). */
#include <string.h>

#include "ops/torch/torch_util.h"

#define C2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))

static th_status same_dtype(const char *op, const char *fn, const th_value *a, const th_value *b) {
  if (a->dtype == b->dtype) return TH_OK;
  return th_error(TH_ERR_RUNTIME, "%s: %s: expected both inputs to have the same dtype, but found %s and %s", op, fn,
                  th_tu_scalar_type_name(a->dtype), th_tu_scalar_type_name(b->dtype));
}

/* a (m, k) @ b (k, n): ltorch.matmul for floating tensors; for integer and bool ones the sum over k of
 * a[:, :, None] * b[None] in int64, converted back to the operands' dtype (PyTorch's integer mm). */
static th_status mm2(th_trace *tr, th_arg a, th_arg b, th_arg *out) {
  const th_value *va = a.u.value;
  if (th_dtype_is_float(va->dtype)) return th_tu_call2(tr, TH_OP_ltorch_matmul, a, b, out);
  th_arg a3, b3, p, items[1];
  TH_TRY(th_tu_unsqueeze(tr, a, 2, &a3));
  TH_TRY(th_tu_unsqueeze(tr, b, 0, &b3));
  TH_TRY(th_tu_convert(tr, &a3, TH_I64));
  TH_TRY(th_tu_convert(tr, &b3, TH_I64));
  C2(mul, a3, b3, &p);
  int64_t k[1] = {1};
  th_arg sa[2] = {p, th_tu_ints(items, 1, k)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sa, 0, NULL, NULL, out));
  if (va->dtype == TH_BOOL) return th_tu_call2(tr, TH_OP_ltorch_ne, *out, th_arg_int(0), out);
  return th_tu_convert(tr, out, va->dtype);
}

/* tensordot over the dims da of a and db of b (n pairs, canonical): a permuted to (free, contracted)
 * and b to (contracted, free), both flattened to matrices, one product, reshaped to a's free dims
 * followed by b's. */
static th_status tensordot_dims(th_trace *tr, const char *op, th_arg a, th_arg b, int n, const int64_t *da,
                                const int64_t *db, th_arg *out) {
  const th_value *va = a.u.value, *vb = b.u.value;
  int64_t pa[TH_MAX_DIMS], pb[TH_MAX_DIMS], oshape[TH_MAX_DIMS], fa = 1, fb = 1, k = 1;
  int na = 0, nb = 0, no = 0;
  bool ca[TH_MAX_DIMS] = {0}, cb[TH_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) { /* a contracted dim of length 1 against a longer one: sum the longer (ATen) */
    int64_t s1 = va->shape[da[i]], s2 = vb->shape[db[i]];
    if (s1 == s2 || (s1 != 1 && s2 != 1)) continue;
    th_arg *x = s1 == 1 ? &b : &a, items[1];
    int64_t d[1] = {s1 == 1 ? db[i] : da[i]};
    th_arg sa[3] = {*x, th_tu_ints(items, 1, d), th_arg_bool(true)}, dt = th_arg_dtype(x->u.value->dtype);
    const char *const kn[1] = {"dtype"};
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sa, 1, kn, &dt, x));
    va = a.u.value;
    vb = b.u.value;
  }
  for (int i = 0; i < n; i++) {
    if (va->shape[da[i]] != vb->shape[db[i]])
      return th_error(TH_ERR_RUNTIME,
                      "%s: contracted dimensions need to match, but first has size %lld in dim %lld and second has "
                      "size %lld in dim %lld",
                      op, (long long)va->shape[da[i]], (long long)da[i], (long long)vb->shape[db[i]], (long long)db[i]);
    if (ca[da[i]] || cb[db[i]]) return th_error(TH_ERR_RUNTIME, "%s: a dimension is contracted twice", op);
    ca[da[i]] = cb[db[i]] = true;
    k *= va->shape[da[i]];
  }
  for (int i = 0; i < va->ndim; i++)
    if (!ca[i]) {
      pa[na++] = i;
      fa *= va->shape[i];
      oshape[no++] = va->shape[i];
    }
  for (int i = 0; i < n; i++) pa[na++] = da[i];
  for (int i = 0; i < n; i++) pb[nb++] = db[i];
  for (int i = 0; i < vb->ndim; i++)
    if (!cb[i]) {
      pb[nb++] = i;
      fb *= vb->shape[i];
      oshape[no++] = vb->shape[i];
    }
  th_arg a2, b2, r;
  int64_t sa[2] = {fa, k}, sb[2] = {k, fb};
  TH_TRY(th_tu_transpose(tr, a, pa, &a2));
  TH_TRY(th_tu_transpose(tr, b, pb, &b2));
  TH_TRY(th_tu_reshape(tr, a2, 2, sa, &a2));
  TH_TRY(th_tu_reshape(tr, b2, 2, sb, &b2));
  TH_TRY(mm2(tr, a2, b2, &r));
  return th_tu_reshape(tr, r, no, oshape, out);
}

static th_status canon_dim(const char *op, int64_t d, int ndim, int64_t *out) {
  int n = ndim ? ndim : 1;
  if (d < -n || d >= n)
    return th_error(TH_ERR_INDEX, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)", op,
                    -n, n - 1, (long long)d);
  *out = d < 0 ? d + n : d;
  return TH_OK;
}

/* tensordot(a, b, dims=2): an int n contracts a's last n dims with b's first n; a pair of lists names
 * them. */
th_status ltorch_tensordot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *va, *vb;
  if (args[3].kind != TH_ARG_NONE) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: out= is not supported", op);
  TH_TRY(th_tu_tensor_arg(op, "a", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "b", &args[1], &vb));
  TH_TRY(same_dtype(op, "tensordot", va, vb));
  int64_t da[TH_MAX_DIMS], db[TH_MAX_DIMS];
  int n = 0;
  const th_arg *d = &args[2];
  if (d->kind == TH_ARG_INT) {
    n = (int)d->u.i;
    if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: tensordot expects dims >= 0, but got dims=%d", op, n);
    if (n > va->ndim || n > vb->ndim)
      return th_error(TH_ERR_RUNTIME, "%s: tensordot expects dims < ndim_a or ndim_b, but got dims=%d", op, n);
    for (int i = 0; i < n; i++) {
      da[i] = va->ndim - n + i;
      db[i] = i;
    }
  } else if ((d->kind == TH_ARG_TUPLE || d->kind == TH_ARG_LIST) && d->u.seq.n == 2) {
    int n2;
    const th_arg *l0 = &d->u.seq.items[0], *l1 = &d->u.seq.items[1];
    if (l0->kind == TH_ARG_INT && l1->kind == TH_ARG_INT) {
      n = n2 = 1;
      da[0] = l0->u.i;
      db[0] = l1->u.i;
    } else {
      TH_TRY(th_meta_int_list(op, "dims[0]", l0, da, &n));
      TH_TRY(th_meta_int_list(op, "dims[1]", l1, db, &n2));
    }
    if (n != n2) return th_error(TH_ERR_RUNTIME, "%s: both dimension lists should have same length", op);
    for (int i = 0; i < n; i++) {
      TH_TRY(canon_dim(op, da[i], va->ndim, &da[i]));
      TH_TRY(canon_dim(op, db[i], vb->ndim, &db[i]));
    }
  } else {
    return th_error(TH_ERR_TYPE, "%s: tensordot expects dims to be an int or a pair of dim lists", op);
  }
  return tensordot_dims(tr, op, args[0], args[1], n, da, db, out);
}

/* dot(input, other) / vdot (real tensors: the same): the sum of products of two 1-D tensors. */
static th_status dot(th_trace *tr, const char *op, const char *fn, const th_arg *args, th_arg *out) {
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "other", &args[1], &vb));
  if (va->ndim != 1 || vb->ndim != 1)
    return th_error(TH_ERR_RUNTIME, "%s: 1D tensors expected, but got %dD and %dD tensors", op, va->ndim, vb->ndim);
  if (va->shape[0] != vb->shape[0])
    return th_error(TH_ERR_RUNTIME,
                    "%s: inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same number of "
                    "elements, but got %lld and %lld elements respectively",
                    op, (long long)va->shape[0], (long long)vb->shape[0], (long long)va->shape[0],
                    (long long)vb->shape[0]);
  TH_TRY(same_dtype(op, fn, va, vb));
  int64_t d0[1] = {0};
  return tensordot_dims(tr, op, args[0], args[1], 1, d0, d0, out);
}
th_status ltorch_dot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return dot(tr, sym->qualname, "dot", args, out);
}
th_status ltorch_vdot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return dot(tr, sym->qualname, "vdot", args, out);
}

/* inner(input, other): a * b when either is 0-dim, else the contraction of both last dims. */
th_status ltorch_inner_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "other", &args[1], &vb));
  if (va->ndim == 0 || vb->ndim == 0) return th_tu_call2(tr, TH_OP_ltorch_mul, args[0], args[1], out);
  if (va->shape[va->ndim - 1] != vb->shape[vb->ndim - 1])
    return th_error(TH_ERR_RUNTIME,
                    "%s: inner() the last dimension must match on both input tensors but got shapes and", op);
  TH_TRY(same_dtype(op, "inner", va, vb));
  int64_t da[1] = {va->ndim - 1}, db[1] = {vb->ndim - 1};
  return tensordot_dims(tr, op, args[0], args[1], 1, da, db, out);
}

/* mv(input, vec): a (n, m) matrix times an (m,) vector. */
th_status ltorch_mv_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "vec", &args[1], &vb));
  if (va->ndim != 2 || vb->ndim != 1)
    return th_error(TH_ERR_RUNTIME, "%s: vector + matrix @ vector expected, got %d, %d", op, va->ndim, vb->ndim);
  if (va->shape[1] != vb->shape[0])
    return th_error(TH_ERR_RUNTIME, "%s: size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)", op,
                    (long long)va->shape[0], (long long)va->shape[0], (long long)va->shape[1], (long long)vb->shape[0]);
  TH_TRY(same_dtype(op, "mv", va, vb));
  int64_t da[1] = {1}, db[1] = {0};
  return tensordot_dims(tr, op, args[0], args[1], 1, da, db, out);
}

/* addmv(input, mat, vec, *, beta, alpha) = ltorch.addmm(input as a column, mat, vec as a column),
 * squeezed back: beta * input + alpha * mat @ vec with addmm's rules (beta == 0 ignores input). */
th_status ltorch_addmv_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  TH_TRY(th_tu_tensor_args(op, args, 3, (const char *const[3]){"input", "mat", "vec"}, v));
  const th_value *vi = v[0], *vm = v[1], *vv = v[2];
  if (vm->ndim != 2 || vv->ndim != 1 || vi->ndim > 1 || vm->shape[1] != vv->shape[0] ||
      (vi->ndim == 1 && vi->shape[0] != 1 && vi->shape[0] != vm->shape[0]))
    return th_error(TH_ERR_RUNTIME, "%s: vector + matrix @ vector expected, got %d, %d, %d", op, vi->ndim, vm->ndim,
                    vv->ndim);
  th_arg in = args[0], col, r;
  if (vi->ndim == 1) TH_TRY(th_tu_unsqueeze(tr, in, 1, &in));
  TH_TRY(th_tu_unsqueeze(tr, args[2], 1, &col));
  th_arg a[3] = {in, args[1], col};
  const char *const kn[2] = {"beta", "alpha"};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_addmm, 3, a, 2, kn, &args[3], &r));
  int64_t last[1] = {1};
  return th_tu_squeeze(tr, r, 1, last, out);
}

/* addr(input, vec1, vec2, *, beta, alpha) = beta * input + alpha * outer(vec1, vec2): ltorch.addmm of
 * the column vec1 and the row vec2 (floating), else with the integer product (beta == 0 ignores input). */
th_status ltorch_addr_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  TH_TRY(th_tu_tensor_args(op, args, 3, (const char *const[3]){"input", "vec1", "vec2"}, v));
  const th_value *vi = v[0], *v1 = v[1], *v2 = v[2];
  if (v1->ndim != 1 || v2->ndim != 1)
    return th_error(TH_ERR_RUNTIME, "%s: addr: Expected 1-D argument vec1 and vec2, but got %dD and %dD", op, v1->ndim,
                    v2->ndim);
  th_arg c, r, p;
  TH_TRY(th_tu_unsqueeze(tr, args[1], 1, &c));
  TH_TRY(th_tu_unsqueeze(tr, args[2], 0, &r));
  if (th_dtype_is_float(v1->dtype) && vi->dtype == v1->dtype) {
    th_arg in = args[0];
    int64_t shape[2] = {v1->shape[0], v2->shape[0]};
    TH_TRY(th_tu_expand(tr, op, &in, 2, shape));
    th_arg a[3] = {in, c, r};
    const char *const kn[2] = {"beta", "alpha"};
    return th_tu_call_kw(tr, TH_OP_ltorch_addmm, 3, a, 2, kn, &args[3], out);
  }
  if (v1->dtype == TH_BOOL) { /* PyTorch: (beta && input) || (alpha && vec1 outer vec2) */
    bool alpha, beta;
    TH_TRY(th_tu_bool(op, "alpha", &args[4], &alpha));
    TH_TRY(th_tu_bool(op, "beta", &args[3], &beta));
    C2(logical_and, c, r, &p);
    if (!alpha) C2(logical_and, p, th_arg_bool(false), &p);
    if (!beta) {
      int64_t shape[2] = {v1->shape[0], v2->shape[0]};
      TH_TRY(th_tu_expand(tr, op, &p, 2, shape));
      *out = p;
      return TH_OK;
    }
    return th_tu_call2(tr, TH_OP_ltorch_logical_or, args[0], p, out);
  }
  double alpha, beta;
  TH_TRY(th_tu_float(op, "alpha", &args[4], &alpha));
  TH_TRY(th_tu_float(op, "beta", &args[3], &beta));
  C2(mul, c, r, &p);
  if (alpha != 1.0) C2(mul, p, args[4], &p);
  if (beta == 0.0) {
    int64_t shape[2] = {v1->shape[0], v2->shape[0]};
    TH_TRY(th_tu_expand(tr, op, &p, 2, shape));
    *out = p;
    return TH_OK;
  }
  th_arg b = args[0];
  if (beta != 1.0) C2(mul, b, args[3], &b);
  return th_tu_call2(tr, TH_OP_ltorch_add, b, p, out);
}

/* kron(a, b): a reshaped to (a0, 1, a1, 1, ...) times b reshaped to (1, b0, 1, b1, ...) (ranks padded
 * with leading 1s), flattened pairwise to (a0 b0, a1 b1, ...). */
th_status ltorch_kron_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "other", &args[1], &vb));
  int n = va->ndim > vb->ndim ? va->ndim : vb->ndim;
  if (2 * n > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: kron of rank %d tensors is not supported", op, n);
  int64_t sa[TH_MAX_DIMS], sb[TH_MAX_DIMS], so[TH_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int ia = i - (n - va->ndim), ib = i - (n - vb->ndim);
    int64_t a = ia >= 0 ? va->shape[ia] : 1, b = ib >= 0 ? vb->shape[ib] : 1;
    sa[2 * i] = a;
    sa[2 * i + 1] = 1;
    sb[2 * i] = 1;
    sb[2 * i + 1] = b;
    so[i] = a * b;
  }
  th_arg a, b, p;
  TH_TRY(th_tu_reshape(tr, args[0], 2 * n, sa, &a));
  TH_TRY(th_tu_reshape(tr, args[1], 2 * n, sb, &b));
  C2(mul, a, b, &p);
  return th_tu_reshape(tr, p, n, so, out);
}

/* cross(input, other, dim) over a dim of length 3 of the broadcast operands:
 * (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0). `dim_none`: torch.cross's default, the first dim of
 * length 3. */
static th_status cross(th_trace *tr, const char *op, const char *fn, const th_arg *args, bool dim_none, th_arg *out) {
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "other", &args[1], &vb));
  if (va->ndim != vb->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: %s: inputs must have the same number of dimensions.", op, fn);
  th_arg ab[2] = {args[0], args[1]};
  TH_TRY(th_tu_broadcast(tr, op, 2, ab));
  const th_value *v = ab[0].u.value;
  int64_t d = -1;
  if (dim_none) {
    for (int i = 0; i < v->ndim && d < 0; i++)
      if (v->shape[i] == 3) d = i;
    if (d < 0) return th_error(TH_ERR_RUNTIME, "%s: no dimension of size 3 in input", op);
  } else {
    double dd;
    TH_TRY(th_tu_float(op, "dim", &args[2], &dd));
    TH_TRY(canon_dim(op, (int64_t)dd, v->ndim, &d));
    if (v->ndim == 0) return th_error(TH_ERR_INDEX, "%s: %s: expected tensors of at least 1 dimension", op, fn);
  }
  if (va->shape[d] != 3 || vb->shape[d] != 3)
    return th_error(TH_ERR_RUNTIME, "%s: %s: inputs dimension %lld must have length 3. Got %lld and %lld", op, fn,
                    (long long)d, (long long)va->shape[d], (long long)vb->shape[d]);
  th_arg a[3], b[3], c[3], t, u;
  for (int i = 0; i < 3; i++) {
    TH_TRY(th_tu_slice_in_dim(tr, ab[0], i, i + 1, 1, (int)d, &a[i]));
    TH_TRY(th_tu_slice_in_dim(tr, ab[1], i, i + 1, 1, (int)d, &b[i]));
  }
  for (int i = 0; i < 3; i++) {
    int j = (i + 1) % 3, k = (i + 2) % 3;
    C2(mul, a[j], b[k], &t);
    C2(mul, a[k], b[j], &u);
    C2(sub, t, u, &c[i]);
  }
  return th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(3, c), th_arg_int(d), out);
}
th_status ltorch_cross_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cross(tr, sym->qualname, "linalg.cross", args, args[2].kind == TH_ARG_NONE, out);
}
th_status ltorch_linalg_cross_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cross(tr, sym->qualname, "linalg.cross", args, false, out);
}

/* linalg.vecdot(x, y, *, dim=-1) = sum(x * y, dim) (real tensors: conj is the identity). */
th_status ltorch_linalg_vecdot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *va, *vb;
  TH_TRY(th_tu_tensor_arg(op, "x", &args[0], &va));
  TH_TRY(th_tu_tensor_arg(op, "y", &args[1], &vb));
  if (va->dtype != vb->dtype)
    return th_error(TH_ERR_RUNTIME,
                    "%s: linalg.vecdot: Expected x and y to have the same dtype, but found x of type %s and y of "
                    "type %s instead",
                    op, th_tu_scalar_type_name(va->dtype), th_tu_scalar_type_name(vb->dtype));
  th_arg p;
  C2(mul, args[0], args[1], &p);
  th_arg sa[2] = {p, args[2]};
  return th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sa, 0, NULL, NULL, out);
}

/* linalg.multi_dot(tensors): the chain of ltorch.matmul, left to right; the first operand may be a 1-D
 * row vector and the last a 1-D column vector, the others are matrices. */
th_status ltorch_linalg_multi_dot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *l = &args[0];
  if ((l->kind != TH_ARG_LIST && l->kind != TH_ARG_TUPLE) || l->u.seq.n < 2)
    return th_error(TH_ERR_RUNTIME, "%s: multi_dot(): expected at least 2 tensors but got %d", op,
                    (l->kind == TH_ARG_LIST || l->kind == TH_ARG_TUPLE) ? l->u.seq.n : 0);
  int n = l->u.seq.n;
  for (int i = 0; i < n; i++) {
    const th_value *v;
    TH_TRY(th_tu_tensor_arg(op, "tensors[i]", &l->u.seq.items[i], &v));
    bool end = i == 0 || i == n - 1;
    if (v->ndim != 2 && !(end && v->ndim == 1))
      return th_error(TH_ERR_RUNTIME, "%s: multi_dot(): tensor %d must be 2D%s but got %dD", op, i, end ? " or 1D" : "",
                      v->ndim);
    if (v->dtype != l->u.seq.items[0].u.value->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: multi_dot(): all tensors must have be the same dtype", op);
  }
  th_arg acc = l->u.seq.items[0];
  for (int i = 1; i < n; i++) C2(matmul, acc, l->u.seq.items[i], &acc);
  *out = acc;
  return TH_OK;
}

/* addbmm(input, batch1, batch2, *, beta, alpha) = beta * input + alpha * sum_b batch1[b] @ batch2[b]:
 * ltorch.addmm of batch1 as (n, B*m) and batch2 as (B*m, p). */
th_status ltorch_addbmm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  TH_TRY(th_tu_tensor_args(op, args, 3, (const char *const[3]){"input", "batch1", "batch2"}, v));
  const th_value *v1 = v[1], *v2 = v[2];
  if (v1->ndim != 3 || v2->ndim != 3)
    return th_error(TH_ERR_RUNTIME, "%s: batch1 and batch2 must be 3D tensors, got %dD and %dD", op, v1->ndim,
                    v2->ndim);
  if (v1->shape[0] != v2->shape[0] || v1->shape[2] != v2->shape[1])
    return th_error(TH_ERR_RUNTIME, "%s: batch1 and batch2 shapes do not match for a batched product", op);
  int64_t b = v1->shape[0], n = v1->shape[1], m = v1->shape[2], p = v2->shape[2];
  int64_t perm[3] = {1, 0, 2}, s1[2] = {n, b * m}, s2[2] = {b * m, p};
  th_arg a1, a2, r;
  TH_TRY(th_tu_transpose(tr, args[1], perm, &a1));
  TH_TRY(th_tu_reshape(tr, a1, 2, s1, &a1));
  TH_TRY(th_tu_reshape(tr, args[2], 2, s2, &a2));
  th_arg in = args[0];
  int64_t shape[2] = {n, p};
  TH_TRY(th_tu_expand(tr, op, &in, 2, shape));
  th_arg a[3] = {in, a1, a2};
  const char *const kn[2] = {"beta", "alpha"};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_addmm, 3, a, 2, kn, &args[3], &r));
  *out = r;
  return TH_OK;
}

/* bilinear(input1, input2, weight, bias): out[..., o] = sum_ij input1[..., i] weight[o, i, j]
 * input2[..., j] (+ bias[o]): input1 (N, i) @ weight as (i, o*j), times input2 broadcast over o,
 * summed over j. */
th_status ltorch_bilinear_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  TH_TRY(th_tu_tensor_args(op, args, 3, (const char *const[3]){"input1", "input2", "weight"}, v));
  const th_value *v1 = v[0], *v2 = v[1], *vw = v[2];
  if (vw->ndim != 3 || v1->ndim < 1 || v1->ndim != v2->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: bilinear(): expected a 3-D weight and inputs of the same rank", op);
  int64_t i = v1->shape[v1->ndim - 1], j = v2->shape[v2->ndim - 1], o = vw->shape[0], nb;
  if (vw->shape[1] != i || vw->shape[2] != j || memcmp(v1->shape, v2->shape, sizeof(int64_t) * (size_t)(v1->ndim - 1)))
    return th_error(TH_ERR_RUNTIME, "%s: bilinear(): input and weight sizes do not match", op);
  th_meta_numel(v1->shape, v1->ndim - 1, &nb);
  int64_t s1[2] = {nb, i}, sw[3] = {i, o * j}, perm[3] = {1, 0, 2}, s3[3] = {nb, o, j}, s2[3] = {nb, 1, j};
  th_arg x1, x2, w, t, items[1], in1 = args[0], in2 = args[1], wt = args[2], bias = args[3];
  th_dtype rdt = v1->dtype, comp = th_tu_computation_dtype(rdt);
  if (comp != rdt) { /* bf16 / f16: every step in float32, one rounding at the end */
    TH_TRY(th_tu_convert(tr, &in1, comp));
    TH_TRY(th_tu_convert(tr, &in2, comp));
    TH_TRY(th_tu_convert(tr, &wt, comp));
    if (bias.kind != TH_ARG_NONE) TH_TRY(th_tu_convert(tr, &bias, comp));
  }
  TH_TRY(th_tu_reshape(tr, in1, 2, s1, &x1));
  TH_TRY(th_tu_reshape(tr, in2, 3, s2, &x2));
  TH_TRY(th_tu_transpose(tr, wt, perm, &w));
  TH_TRY(th_tu_reshape(tr, w, 2, sw, &w));
  C2(matmul, x1, w, &t);
  TH_TRY(th_tu_reshape(tr, t, 3, s3, &t));
  C2(mul, t, x2, &t);
  int64_t last[1] = {2};
  th_arg sa[2] = {t, th_tu_ints(items, 1, last)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sa, 0, NULL, NULL, &t));
  if (bias.kind != TH_ARG_NONE) C2(add, t, bias, &t);
  int64_t os[TH_MAX_DIMS];
  memcpy(os, v1->shape, sizeof(int64_t) * (size_t)(v1->ndim - 1));
  os[v1->ndim - 1] = o;
  TH_TRY(th_tu_reshape(tr, t, v1->ndim, os, out));
  return th_tu_convert(tr, out, rdt);
}
