/* stat.c — torch-level contractions and statistics: einsum, median / nanmedian, mode, cdist and pdist.
 *
 * einsum parses the equation as ATen's einsum does (letters A-Z then a-z as labels, one "..." per
 * operand standing for its leading broadcast dims, spaces ignored, the implicit output being the
 * ellipsis dims followed by the labels that occur once, in that order) and decomposes into layout ops,
 * ltorch.diagonal for a label repeated in one operand, sums and ltorch.bmm: the operands are contracted
 * left to right, each pair permuted to (batch, free, contracted) and (batch, contracted, free) and
 * multiplied as one batched GEMM (the BLAS executor's), as ATen's sumproduct_pair; a label that no
 * later operand nor the output needs is summed away as soon as only one operand holds it.
 *
 * median / nanmedian and mode follow ATen's CPU kernels (see each). cdist follows ATen's _cdist_forward
 * for p != 2 and small inputs, and its _euclidean_dist (one matmul of padded operands) where
 * compute_mode selects it; pdist is the upper triangle of the rows' distances. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

/* ---- einsum ------------------------------------------------------------------------------------------- */

enum { EIN_LETTERS = 52, EIN_MAX_LABELS = EIN_LETTERS + TH_MAX_DIMS, EIN_MAX_OPERANDS = 64 };

/* One operand while it is contracted: its tensor and the label of each of its dims (distinct). */
typedef struct ein_term {
  th_arg x;
  int nd;
  int lab[TH_MAX_DIMS];
} ein_term;

static int ein_label(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c - 'a' + 26; }

static bool ein_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

static char ein_char(int l) { return (char)(l < 26 ? 'A' + l : 'a' + l - 26); }

static const th_value *term_value(const ein_term *t) { return t->x.u.value; }

/* Sums term t over its dims whose labels are not `needed` (a label held by no other operand). */
static th_status ein_sum_unneeded(th_trace *tr, const char *op, ein_term *t, const bool *needed) {
  int64_t dims[TH_MAX_DIMS];
  int nd = 0, keep = 0;
  for (int i = 0; i < t->nd; i++) {
    if (needed[t->lab[i]])
      t->lab[keep++] = t->lab[i];
    else
      dims[nd++] = i;
  }
  if (!nd) return TH_OK;
  t->nd = keep;
  return th_tu_reduce(tr, op, TH_OP_prims_sum, t->x, nd, dims, false, false, TH_F32, &t->x);
}

/* Takes the diagonal of every label repeated within the term (ltorch.diagonal appends it last). */
static th_status ein_diagonals(th_trace *tr, const char *op, ein_term *t) {
  for (;;) {
    int p = -1, q = -1;
    for (int i = 0; i < t->nd && p < 0; i++)
      for (int j = i + 1; j < t->nd; j++)
        if (t->lab[i] == t->lab[j]) {
          p = i;
          q = j;
          break;
        }
    if (p < 0) return TH_OK;
    const th_value *v = term_value(t);
    if (v->shape[p] != v->shape[q])
      return th_error(TH_ERR_RUNTIME,
                      "%s: einsum(): subscript %c is repeated for operand but the sizes don't match, %lld != %lld", op,
                      ein_char(t->lab[p]), (long long)v->shape[p], (long long)v->shape[q]);
    th_arg a[4] = {t->x, th_arg_int(0), th_arg_int(p), th_arg_int(q)};
    TH_TRY(th_call(tr, TH_OP_ltorch_diagonal, 4, a, &t->x));
    int l = t->lab[p], k = 0;
    for (int i = 0; i < t->nd; i++)
      if (i != p && i != q) t->lab[k++] = t->lab[i];
    t->lab[k++] = l;
    t->nd = k;
  }
}

static int term_pos(const ein_term *t, int l) {
  for (int i = 0; i < t->nd; i++)
    if (t->lab[i] == l) return i;
  return -1;
}

static int64_t term_size(const ein_term *t, int l) {
  int p = term_pos(t, l);
  return p < 0 ? 1 : term_value(t)->shape[p];
}

/* Sums dim p of term t away (a contracted label of length > 1 met by a length-1 dim of the other). */
static th_status ein_sum_dim(th_trace *tr, const char *op, ein_term *t, int p) {
  int64_t d[1] = {p};
  TH_TRY(th_tu_reduce(tr, op, TH_OP_prims_sum, t->x, 1, d, false, false, TH_F32, &t->x));
  for (int i = p; i + 1 < t->nd; i++) t->lab[i] = t->lab[i + 1];
  t->nd--;
  return TH_OK;
}

static th_status ein_squeeze_dim(th_trace *tr, ein_term *t, int p) {
  int64_t d[1] = {p};
  TH_TRY(th_tu_squeeze(tr, t->x, 1, d, &t->x));
  for (int i = p; i + 1 < t->nd; i++) t->lab[i] = t->lab[i + 1];
  t->nd--;
  return TH_OK;
}

/* x (B, M, K) @ y (B, K, N): ltorch.bmm for floating dtypes; the sum over K of the products in int64
 * for integer and bool operands (the matmul prim is floating only), converted back. */
static th_status ein_bmm(th_trace *tr, const char *op, th_arg x, th_arg y, th_arg *out) {
  th_dtype dt = x.u.value->dtype;
  if (th_dtype_is_float(dt)) return th_tu_call2(tr, TH_OP_ltorch_bmm, x, y, out);
  th_arg x4, y4, p;
  TH_TRY(th_tu_unsqueeze(tr, x, 3, &x4));
  TH_TRY(th_tu_unsqueeze(tr, y, 1, &y4));
  TH_TRY(th_tu_convert(tr, &x4, TH_I64));
  TH_TRY(th_tu_convert(tr, &y4, TH_I64));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, x4, y4, &p));
  int64_t d[1] = {2};
  TH_TRY(th_tu_reduce(tr, op, TH_OP_prims_sum, p, 1, d, false, false, TH_F32, out));
  if (dt == TH_BOOL) return th_tu_call2(tr, TH_OP_ltorch_ne, *out, th_arg_int(0), out);
  return th_tu_convert(tr, out, dt);
}

/* Contracts terms a and b into a: labels both hold that are still `needed` are batch dims, the other
 * shared ones are summed by the product, the rest are a's and b's free dims. */
static th_status ein_pair(th_trace *tr, const char *op, ein_term *a, ein_term *b, const bool *needed) {
  /* a shared label of length 1 on one side: broadcast (batch) or a plain sum on the other side */
  for (int l = 0; l < EIN_MAX_LABELS; l++) {
    int pa = term_pos(a, l), pb = term_pos(b, l);
    if (pa < 0 || pb < 0) continue;
    int64_t sa = term_value(a)->shape[pa], sb = term_value(b)->shape[pb];
    if (sa != sb && sa != 1 && sb != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: einsum(): operands do not broadcast with remapped shapes (original->remapped): subscript "
                      "%c has sizes %lld and %lld",
                      op, l < EIN_LETTERS ? ein_char(l) : '.', (long long)sa, (long long)sb);
    if (needed[l] || sa == sb) continue;
    /* contracted with a length-1 side: sum the longer side, drop the length-1 dim */
    TH_TRY(ein_sum_dim(tr, op, sa == 1 ? b : a, sa == 1 ? pb : pa));
    TH_TRY(ein_squeeze_dim(tr, sa == 1 ? a : b, sa == 1 ? pa : pb));
  }
  int bl[TH_MAX_DIMS], ml[TH_MAX_DIMS], nl[TH_MAX_DIMS], kl[TH_MAX_DIMS];
  int nb = 0, nm = 0, nn = 0, nk = 0;
  for (int i = 0; i < a->nd; i++) {
    int l = a->lab[i];
    if (term_pos(b, l) < 0)
      ml[nm++] = l;
    else if (needed[l])
      bl[nb++] = l;
    else
      kl[nk++] = l;
  }
  for (int i = 0; i < b->nd; i++)
    if (term_pos(a, b->lab[i]) < 0) nl[nn++] = b->lab[i];
  if (nb + nm + nn > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: einsum(): an intermediate result of rank %d is not supported (at most %d)", op, nb + nm + nn,
                    TH_MAX_DIMS);
  int64_t bshape[TH_MAX_DIMS], B = 1, M = 1, N = 1, K = 1;
  for (int i = 0; i < nb; i++) {
    int64_t sa = term_size(a, bl[i]), sb = term_size(b, bl[i]);
    bshape[i] = sa == 1 ? sb : sa;
    B *= bshape[i];
  }
  for (int i = 0; i < nm; i++) M *= term_size(a, ml[i]);
  for (int i = 0; i < nn; i++) N *= term_size(b, nl[i]);
  for (int i = 0; i < nk; i++) K *= term_size(a, kl[i]);
  /* a to (batch, free, contracted), b to (batch, contracted, free); batch dims expanded to their length */
  int64_t pa[TH_MAX_DIMS], pb[TH_MAX_DIMS], ea[TH_MAX_DIMS], eb[TH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < nb; i++) pa[k++] = term_pos(a, bl[i]);
  for (int i = 0; i < nm; i++) pa[k++] = term_pos(a, ml[i]);
  for (int i = 0; i < nk; i++) pa[k++] = term_pos(a, kl[i]);
  k = 0;
  for (int i = 0; i < nb; i++) pb[k++] = term_pos(b, bl[i]);
  for (int i = 0; i < nk; i++) pb[k++] = term_pos(b, kl[i]);
  for (int i = 0; i < nn; i++) pb[k++] = term_pos(b, nl[i]);
  th_arg x, y, r;
  TH_TRY(th_tu_transpose(tr, a->x, pa, &x));
  TH_TRY(th_tu_transpose(tr, b->x, pb, &y));
  for (int i = 0; i < a->nd; i++) ea[i] = i < nb ? bshape[i] : x.u.value->shape[i];
  for (int i = 0; i < b->nd; i++) eb[i] = i < nb ? bshape[i] : y.u.value->shape[i];
  TH_TRY(th_tu_expand(tr, op, &x, a->nd, ea));
  TH_TRY(th_tu_expand(tr, op, &y, b->nd, eb));
  int64_t s3a[3] = {B, M, K}, s3b[3] = {B, K, N}, oshape[TH_MAX_DIMS];
  TH_TRY(th_tu_reshape(tr, x, 3, s3a, &x));
  TH_TRY(th_tu_reshape(tr, y, 3, s3b, &y));
  TH_TRY(ein_bmm(tr, op, x, y, &r));
  int no = 0;
  for (int i = 0; i < nb; i++) oshape[no++] = bshape[i];
  for (int i = 0; i < nm; i++) oshape[no++] = term_size(a, ml[i]);
  for (int i = 0; i < nn; i++) oshape[no++] = term_size(b, nl[i]);
  no = 0;
  for (int i = 0; i < nb; i++) a->lab[no++] = bl[i];
  for (int i = 0; i < nm; i++) a->lab[no++] = ml[i];
  for (int i = 0; i < nn; i++) a->lab[no++] = nl[i];
  a->nd = no;
  return th_tu_reshape(tr, r, no, oshape, &a->x);
}

/* Parses one operand's subscripts (spaces removed) into labels; "..." stands for its leading
 * ndim - (letters) dims, labelled EIN_LETTERS + (ell_max - their count) + i so that ellipses align
 * from the right as broadcasting does. */
static th_status ein_parse_term(const char *op, const char *s, int len, int ndim, int index, int *lab, int *nlab,
                                bool *has_ell, int *ell_dims) {
  int letters = 0, ell = 0;
  for (int i = 0; i < len; i++) {
    if (s[i] == '.') {
      if (ell || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        return th_error(TH_ERR_RUNTIME, "%s: einsum(): found '.' for operand %d that is not part of any ellipsis", op,
                        index);
      ell = 1;
      i += 2;
    } else if (ein_letter(s[i])) {
      letters++;
    } else {
      return th_error(TH_ERR_RUNTIME,
                      "%s: einsum(): invalid subscript given at index %d in the equation string, "
                      "subscripts must be in [a-zA-Z]",
                      op, i);
    }
  }
  if (ell ? letters > ndim : letters != ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: einsum(): the number of subscripts in the equation (%d) %s the number of "
                    "dimensions (%d) for operand %d%s",
                    op, letters, ell ? "is more than" : "does not match", ndim, index,
                    ell ? "" : " and no ellipsis was given");
  *has_ell = ell;
  *ell_dims = ell ? ndim - letters : 0;
  *nlab = 0;
  for (int i = 0; i < len; i++) {
    if (s[i] == '.') {
      for (int k = 0; k < *ell_dims; k++) lab[(*nlab)++] = -1 - k; /* resolved once every ellipsis is known */
      i += 2;
    } else {
      lab[(*nlab)++] = ein_label(s[i]);
    }
  }
  return TH_OK;
}

th_status ltorch_einsum_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  if (args[0].kind != TH_ARG_STR)
    return th_error(TH_ERR_TYPE, "%s: einsum(): the equation must be a string, but got %s", op,
                    th_arg_kind_name(&args[0]));
  const th_arg *ops = &args[1];
  int n = 1;
  const th_arg *items = ops;
  if (ops->kind == TH_ARG_TUPLE || ops->kind == TH_ARG_LIST) {
    n = ops->u.seq.n;
    items = ops->u.seq.items;
    if (n == 1 && (items[0].kind == TH_ARG_TUPLE || items[0].kind == TH_ARG_LIST)) {
      n = items[0].u.seq.n;
      items = items[0].u.seq.items;
    }
  }
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: einsum(): must provide at least one operand", op);
  if (n > EIN_MAX_OPERANDS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: einsum() of %d operands is not supported (at most %d)", op, n,
                    EIN_MAX_OPERANDS);
  for (int i = 0; i < n; i++)
    if (!th_meta_is_tensor(&items[i]))
      return th_error(TH_ERR_TYPE, "%s: einsum(): operand %d must be a Tensor, but got %s", op, i,
                      th_arg_kind_name(&items[i]));
  th_dtype dt = items[0].u.value->dtype;
  for (int i = 1; i < n; i++)
    if (items[i].u.value->dtype != dt)
      return th_error(TH_ERR_RUNTIME, "%s: einsum(): expected scalar type %s but found %s", op,
                      th_tu_scalar_type_name(dt), th_tu_scalar_type_name(items[i].u.value->dtype));
  /* the equation without spaces */
  const char *eq0 = args[0].u.s;
  size_t elen = strlen(eq0);
  char *eq = th_arena_alloc(tr->arena, elen + 1);
  if (!eq) return TH_ERR_NOMEM;
  size_t m = 0;
  for (size_t i = 0; i < elen; i++)
    if (eq0[i] != ' ') eq[m++] = eq0[i];
  eq[m] = 0;
  const char *arrow = strstr(eq, "->");
  int lhs_len = arrow ? (int)(arrow - eq) : (int)m;
  ein_term *terms = th_arena_alloc(tr->arena, sizeof(ein_term) * (size_t)n);
  int(*raw)[EIN_MAX_LABELS] = th_arena_alloc(tr->arena, sizeof(int[EIN_MAX_LABELS]) * (size_t)n);
  int *nraw = th_arena_alloc(tr->arena, sizeof(int) * (size_t)n);
  if (!terms || !raw || !nraw) return TH_ERR_NOMEM;
  int ell_max = 0, start = 0, count[EIN_MAX_LABELS] = {0};
  bool any_ell = false;
  for (int i = 0; i < n; i++) {
    int end = start;
    while (end < lhs_len && eq[end] != ',') end++;
    if (end == lhs_len && i + 1 < n)
      return th_error(TH_ERR_RUNTIME, "%s: einsum(): more operands were provided than specified in the equation", op);
    const th_value *v = items[i].u.value;
    bool he = false;
    int ed = 0;
    TH_TRY(ein_parse_term(op, eq + start, end - start, v->ndim, i, raw[i], &nraw[i], &he, &ed));
    any_ell |= he;
    if (ed > ell_max) ell_max = ed;
    start = end + 1;
  }
  if (start <= lhs_len)
    return th_error(TH_ERR_RUNTIME, "%s: einsum(): fewer operands were provided than specified in the equation", op);
  for (int i = 0; i < n; i++) {
    const th_value *v = items[i].u.value;
    int ed = 0;
    for (int k = 0; k < nraw[i]; k++) ed += raw[i][k] < 0;
    terms[i].x = items[i];
    terms[i].nd = v->ndim;
    for (int k = 0; k < nraw[i]; k++) {
      int l = raw[i][k] < 0 ? EIN_LETTERS + ell_max - ed + (-1 - raw[i][k]) : raw[i][k];
      terms[i].lab[k] = l;
      count[l]++;
    }
  }
  /* the output's labels */
  int olab[EIN_MAX_LABELS], no = 0;
  bool in_out[EIN_MAX_LABELS] = {false};
  if (arrow) {
    const char *s = arrow + 2;
    bool ell = false;
    for (int i = 0; s[i]; i++) {
      if (s[i] == '.') {
        if (ell || s[i + 1] != '.' || s[i + 2] != '.')
          return th_error(TH_ERR_RUNTIME, "%s: einsum(): found '.' for output that is not part of any ellipsis", op);
        ell = true;
        for (int k = 0; k < ell_max; k++) olab[no++] = EIN_LETTERS + k;
        i += 2;
        continue;
      }
      if (!ein_letter(s[i]))
        return th_error(TH_ERR_RUNTIME,
                        "%s: einsum(): invalid subscript given at index %d in the equation string, "
                        "subscripts must be in [a-zA-Z]",
                        op, (int)(s - eq) + i);
      int l = ein_label(s[i]);
      if (in_out[l])
        return th_error(TH_ERR_RUNTIME, "%s: einsum(): output subscript %c appears more than once in the output", op,
                        s[i]);
      if (!count[l])
        return th_error(TH_ERR_RUNTIME,
                        "%s: einsum(): output subscript %c does not appear in the equation for any input operand", op,
                        s[i]);
      in_out[l] = true;
      olab[no++] = l;
    }
    for (int k = 0; k < no; k++) in_out[olab[k]] = true;
  } else {
    if (any_ell)
      for (int k = 0; k < ell_max; k++) olab[no++] = EIN_LETTERS + k;
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) olab[no++] = l;
    for (int k = 0; k < no; k++) in_out[olab[k]] = true;
  }
  if (no > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: einsum(): an output of rank %d is not supported (at most %d)", op, no,
                    TH_MAX_DIMS);
  /* diagonals, then left-to-right contraction */
  for (int i = 0; i < n; i++) TH_TRY(ein_diagonals(tr, op, &terms[i]));
  bool needed[EIN_MAX_LABELS];
  for (int i = 0; i < n; i++) {
    /* needed after this step: the output's labels and those of the operands not yet contracted */
    memcpy(needed, in_out, sizeof needed);
    for (int j = i + 1; j < n; j++)
      for (int k = 0; k < terms[j].nd; k++) needed[terms[j].lab[k]] = true;
    if (i == 0) {
      bool keep0[EIN_MAX_LABELS];
      memcpy(keep0, needed, sizeof keep0);
      TH_TRY(ein_sum_unneeded(tr, op, &terms[0], keep0));
      continue;
    }
    bool ka[EIN_MAX_LABELS], kb[EIN_MAX_LABELS];
    memcpy(ka, needed, sizeof ka);
    memcpy(kb, needed, sizeof kb);
    for (int k = 0; k < terms[i].nd; k++) ka[terms[i].lab[k]] = true;
    for (int k = 0; k < terms[0].nd; k++) kb[terms[0].lab[k]] = true;
    TH_TRY(ein_sum_unneeded(tr, op, &terms[i], kb));
    TH_TRY(ein_sum_unneeded(tr, op, &terms[0], ka));
    TH_TRY(ein_pair(tr, op, &terms[0], &terms[i], needed));
  }
  /* the result's dims in the output's order; output labels of length 1 everywhere are inserted */
  ein_term *t = &terms[0];
  int64_t perm[TH_MAX_DIMS], oshape[TH_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < no; i++) {
    int p = term_pos(t, olab[i]);
    if (p >= 0) perm[k++] = p;
  }
  th_arg r;
  TH_TRY(th_tu_transpose(tr, t->x, perm, &r));
  for (int i = 0; i < no; i++) oshape[i] = term_size(t, olab[i]);
  TH_TRY(th_tu_reshape(tr, r, no, oshape, out));
  if (out->u.value == items[0].u.value) return th_tu_call1(tr, TH_OP_ltorch_clone, *out, out);
  return TH_OK;
}

/* ---- median / nanmedian ------------------------------------------------------------------------------- */

#define C1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define C2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))

/* The index ATen's nanmedian returns for an all-NaN row of length n: its std::nth_element (nth = first)
 * under a comparator for which all NaNs are equivalent, which libstdc++'s introselect turns into a
 * fixed permutation of the row (each step swaps the middle to the front and reverses the rest pairwise
 * from both ends). The simulation runs on the row's positions at trace time. */
static th_status all_nan_index(th_trace *tr, int64_t n, int64_t *out) {
  *out = 0;
  if (n <= 3) return TH_OK;
  int64_t *a = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)n);
  if (!a) return TH_ERR_NOMEM;
  for (int64_t i = 0; i < n; i++) a[i] = i;
  int64_t first = 0, last = n, depth = 2 * (63 - __builtin_clzll((unsigned long long)n)), t;
  while (last - first > 3 && depth-- > 0) {
    int64_t mid = first + (last - first) / 2, lo = first + 1, hi = last;
    t = a[first], a[first] = a[mid], a[mid] = t;
    for (;;) {
      --hi;
      if (!(lo < hi)) break;
      t = a[lo], a[lo] = a[hi], a[hi] = t;
      ++lo;
    }
    if (lo <= 0)
      first = lo;
    else
      last = lo;
  }
  *out = a[0];
  return TH_OK;
}

/* The rank-k element of each row along d of a (keepdim), and its index, as ATen's median kernels pick
 * them: their std::nth_element orders by (value, index) with NaN greatest, so the element is the one a
 * stable ascending sort (prims.sort, NaN last) puts at k. median takes k = (n - 1) / 2, or the first NaN
 * (k = n - #NaN) in a row holding one; nanmedian takes k = (n - #NaN - 1) / 2, and for an all-NaN row
 * the index all_nan_index gives. */
static th_status median_rows(th_trace *tr, th_arg a, int d, bool ignore_nan, th_arg *val, th_arg *idx) {
  const th_value *v = a.u.value;
  int64_t n = v->shape[d];
  th_arg sa[4] = {a, th_arg_int(d), th_arg_bool(false), th_arg_bool(true)}, s;
  TH_TRY(th_call(tr, TH_OP_prims_sort, 4, sa, &s));
  th_arg sv = s.u.seq.items[0], si = s.u.seq.items[1];
  if (!th_dtype_is_float(v->dtype)) {
    int64_t k = (n - 1) / 2;
    TH_TRY(th_tu_slice_in_dim(tr, sv, k, k + 1, 1, d, val));
    return th_tu_slice_in_dim(tr, si, k, k + 1, 1, d, idx);
  }
  th_arg nan, c, t, pos, cond, items[1];
  int64_t dd[1] = {d};
  C1(isnan, a, &nan);
  th_arg sum_args[3] = {nan, th_tu_ints(items, 1, dd), th_arg_bool(true)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sum_args, 0, NULL, NULL, &c));
  C1(neg, c, &t);
  if (ignore_nan) {
    C2(add, t, th_arg_int(n - 1), &t);
    C2(lt, t, th_arg_int(0), &cond);
    C2(floor_divide, t, th_arg_int(2), &t);
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cond, th_arg_int(0), t, &pos));
  } else {
    C2(add, t, th_arg_int(n), &t);
    C2(gt, c, th_arg_int(0), &cond);
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cond, t, th_arg_int((n - 1) / 2), &pos));
  }
  th_arg ga[3] = {sv, th_arg_int(d), pos};
  TH_TRY(th_call(tr, TH_OP_ltorch_gather, 3, ga, val));
  ga[0] = si;
  TH_TRY(th_call(tr, TH_OP_ltorch_gather, 3, ga, idx));
  int64_t k;
  TH_TRY(all_nan_index(tr, n, &k));
  if (!ignore_nan || k == 0) return TH_OK;
  C2(eq, c, th_arg_int(n), &cond);
  return th_tu_call3(tr, TH_OP_ltorch_where, cond, th_arg_int(k), *idx, idx);
}

static th_status median_impl(th_trace *tr, const char *op, const th_arg *args, bool ignore_nan, th_arg *out) {
  const char *fn = ignore_nan ? "nanmedian" : "median";
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->dtype == TH_BOOL || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s'", op,
                    args[1].kind == TH_ARG_NONE ? (ignore_nan ? "nanmedian_cpu" : "median_cpu") : "median_out",
                    th_tu_scalar_type_name(v->dtype));
  int64_t numel = th_value_numel(v);
  if (args[1].kind == TH_ARG_NONE) { /* the median of all elements: a 0-dim tensor, no index */
    if (numel == 0) {
      if (!th_dtype_is_float(v->dtype))
        return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.%s of an empty integer tensor is not supported", op, fn);
      return th_tu_full(tr, 0, NULL, th_arg_float(NAN), v->device, v->dtype, out);
    }
    th_arg flat, val, idx;
    TH_TRY(th_tu_reshape(tr, args[0], 1, &numel, &flat));
    TH_TRY(median_rows(tr, flat, 0, ignore_nan, &val, &idx));
    return th_tu_reshape(tr, val, 0, NULL, out);
  }
  int64_t dim;
  int d;
  bool keepdim;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], &keepdim));
  int64_t len = v->ndim ? v->shape[d] : 1;
  if (len == 0) return th_error(TH_ERR_INDEX, "%s: %s(): Expected reduction dim %d to have non-zero size.", op, fn, d);
  th_arg a = args[0], r[2];
  if (v->ndim == 0) {
    int64_t one = 1;
    TH_TRY(th_tu_reshape(tr, a, 1, &one, &a));
  }
  TH_TRY(median_rows(tr, a, d, ignore_nan, &r[0], &r[1]));
  if (v->ndim == 0) {
    for (int i = 0; i < 2; i++) TH_TRY(th_tu_reshape(tr, r[i], 0, NULL, &r[i]));
  } else if (!keepdim) {
    int64_t dd[1] = {d};
    for (int i = 0; i < 2; i++) TH_TRY(th_tu_squeeze(tr, r[i], 1, dd, &r[i]));
  }
  return th_tu_tuple_out(tr, 2, r, out);
}

th_status ltorch_median_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return median_impl(tr, sym->qualname, args, false, out);
}

th_status ltorch_nanmedian_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return median_impl(tr, sym->qualname, args, true, out);
}

/* ---- mode ---------------------------------------------------------------------------------------------- */

/* mode(input, dim=-1, keepdim=False) -> (values, indices): prims.mode, the dim put back for keepdim. */
th_status ltorch_mode_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"mode_cpu\" not implemented for '%s'", op, th_tu_scalar_type_name(v->dtype));
  int64_t dim;
  int d;
  bool keepdim;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], &keepdim));
  if (v->ndim && v->shape[d] == 0)
    return th_error(TH_ERR_INDEX, "%s: mode(): Expected reduction dim %d to have non-zero size.", op, d);
  th_arg r;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mode, args[0], th_arg_int(d), &r));
  if (!keepdim || v->ndim == 0) {
    *out = r;
    return TH_OK;
  }
  th_arg items[2];
  for (int i = 0; i < 2; i++) TH_TRY(th_tu_unsqueeze(tr, r.u.seq.items[i], d, &items[i]));
  return th_tu_tuple_out(tr, 2, items, out);
}

/* ---- quantile / nanquantile ------------------------------------------------------------------------------ */

typedef enum qmode { Q_LINEAR, Q_LOWER, Q_HIGHER, Q_MIDPOINT, Q_NEAREST } qmode;

/* ATen's quantile_compute: the rows (all elements, or along dim) sorted ascending (NaN last) into
 * S (R..., n); ranks q * (n - 1) (quantile: n - 1 in a row holding a NaN, so its result is NaN) or
 * q * (#non-NaN - 1), at least 0 (nanquantile), with q a tensor of the input's dtype (a scalar q is one,
 * as ATen's scalar_tensor); the interpolation rounds the ranks or lerps the values below and above;
 * the q dim (when q is 1-D) comes first. */
static th_status quantile_impl(th_trace *tr, const char *op, const th_arg *args, bool ignore_nan, th_arg *out) {
  const char *fn = ignore_nan ? "nanquantile" : "quantile";
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->dtype != TH_F32 && v->dtype != TH_F64)
    return th_error(TH_ERR_RUNTIME, "%s: %s() input tensor must be either float or double dtype", op, fn);
  int64_t numel = th_value_numel(v);
  if (numel == 0) return th_error(TH_ERR_RUNTIME, "%s: %s() input tensor must be non-empty", op, fn);
  th_arg q;
  int qdim = 0;
  if (th_meta_is_tensor(&args[1])) {
    const th_value *qv = args[1].u.value;
    if (qv->ndim > 1) return th_error(TH_ERR_RUNTIME, "%s: %s() q must be a scalar or 1D tensor", op, fn);
    if (qv->dtype != v->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: %s() q tensor must be same dtype as the input tensor", op, fn);
    q = args[1];
    qdim = qv->ndim;
  } else {
    double qf;
    TH_TRY(th_tu_float(op, "q", &args[1], &qf));
    if (!(qf >= 0 && qf <= 1))
      return th_error(TH_ERR_RUNTIME, "%s: %s() q must be in the range [0, 1] but got %g", op, fn, qf);
    TH_TRY(th_tu_full(tr, 0, NULL, th_arg_float(qf), v->device, v->dtype, &q));
  }
  qmode mode = Q_LINEAR;
  if (args[4].kind == TH_ARG_STR) {
    static const char *const names[] = {"linear", "lower", "higher", "midpoint", "nearest"};
    int k = -1;
    for (int i = 0; i < 5; i++)
      if (!strcmp(args[4].u.s, names[i])) k = i;
    if (k < 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: %s() interpolation must be one of linear, lower, higher, midpoint or nearest. Got %s", op,
                      fn, args[4].u.s);
    mode = (qmode)k;
  }
  bool keepdim;
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  /* S: the reduced shape R (keepdim's 1s or none) followed by the sorted rows */
  int64_t rshape[TH_MAX_DIMS + 1];
  int nr = 0;
  th_arg x = args[0];
  int64_t n;
  if (args[2].kind == TH_ARG_NONE) {
    n = numel;
    if (keepdim)
      for (int i = 0; i < v->ndim; i++) rshape[nr++] = 1;
    TH_TRY(th_tu_reshape(tr, x, 1, &numel, &x));
  } else {
    int64_t dim;
    int d;
    TH_TRY(th_meta_int(op, "dim", &args[2], &dim));
    TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
    n = v->ndim ? v->shape[d] : 1;
    for (int i = 0; i < v->ndim; i++)
      if (i != d)
        rshape[nr++] = v->shape[i];
      else if (keepdim)
        rshape[nr++] = 1;
    if (v->ndim) {
      int64_t src[1] = {d}, dst[1] = {-1};
      th_arg s1[1], s2[1], ma[3] = {x, th_tu_ints(s1, 1, src), th_tu_ints(s2, 1, dst)};
      TH_TRY(th_call(tr, TH_OP_ltorch_movedim, 3, ma, &x));
    }
  }
  if (nr + 2 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: %s() of a tensor of rank %d is not supported", op, fn, v->ndim);
  rshape[nr] = n;
  TH_TRY(th_tu_reshape(tr, x, nr + 1, rshape, &x));
  th_arg sa[4] = {x, th_arg_int(nr), th_arg_bool(false), th_arg_bool(false)}, sr;
  TH_TRY(th_call(tr, TH_OP_prims_sort, 4, sa, &sr));
  th_arg S = sr.u.seq.items[0], nan, t, ranks, cond, items[1];
  int64_t last[1] = {-1};
  C1(isnan, S, &nan);
  if (ignore_nan) {
    C1(logical_not, nan, &t);
    th_arg sm[3] = {t, th_tu_ints(items, 1, last), th_arg_bool(true)};
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sm, 0, NULL, NULL, &t));
    C2(sub, t, th_arg_int(1), &t);
    C2(mul, q, t, &ranks);
    C2(lt, ranks, th_arg_int(0), &cond);
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_masked_fill, ranks, cond, th_arg_int(0), &ranks));
  } else {
    th_arg an[3] = {nan, th_arg_int(-1), th_arg_bool(true)};
    TH_TRY(th_call(tr, TH_OP_ltorch_any, 3, an, &cond));
    C2(mul, q, th_arg_int(n - 1), &t);
    th_arg bl[2] = {t, cond};
    TH_TRY(th_tu_broadcast(tr, op, 2, bl));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_masked_fill, bl[0], bl[1], th_arg_int(n - 1), &ranks));
  }
  if (mode == Q_LOWER) C1(floor, ranks, &ranks);
  if (mode == Q_HIGHER) C1(ceil, ranks, &ranks);
  if (mode == Q_NEAREST) C1(round, ranks, &ranks);
  th_arg rb = ranks, vb;
  TH_TRY(th_tu_convert(tr, &rb, TH_I64));
  th_arg ga[3] = {S, th_arg_int(-1), rb};
  TH_TRY(th_call(tr, TH_OP_ltorch_gather, 3, ga, &vb));
  if (mode == Q_LINEAR || mode == Q_MIDPOINT) {
    th_arg w, ra, va;
    if (mode == Q_MIDPOINT) {
      C2(full_like, ranks, th_arg_float(0.5), &w);
      C2(eq, rb, ranks, &cond);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_masked_fill, w, cond, th_arg_int(0), &w));
    } else {
      C2(sub, ranks, rb, &w);
    }
    C1(ceil, ranks, &ra);
    TH_TRY(th_tu_convert(tr, &ra, TH_I64));
    ga[2] = ra;
    TH_TRY(th_call(tr, TH_OP_ltorch_gather, 3, ga, &va));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_lerp, vb, va, w, &vb));
  }
  if (qdim == 0) {
    int64_t sq[1] = {nr};
    return th_tu_squeeze(tr, vb, 1, sq, out);
  }
  int64_t src[1] = {-1}, dst[1] = {0};
  th_arg s1[1], s2[1], ma[3] = {vb, th_tu_ints(s1, 1, src), th_tu_ints(s2, 1, dst)};
  return th_call(tr, TH_OP_ltorch_movedim, 3, ma, out);
}

th_status ltorch_quantile_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return quantile_impl(tr, sym->qualname, args, false, out);
}

th_status ltorch_nanquantile_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return quantile_impl(tr, sym->qualname, args, true, out);
}

/* ---- cdist / pdist ------------------------------------------------------------------------------------ */

static th_status dist_checks(const char *op, const char *fn, const char *what, const th_value *v, double p) {
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: %s only supports floating-point dtypes, %s got: %s", op, fn, what,
                    th_tu_scalar_type_name(v->dtype));
  if (!(p >= 0)) return th_error(TH_ERR_RUNTIME, "%s: %s only supports non-negative p values", op, fn);
  return TH_OK;
}

/* The p-norm of d over its last dim: ltorch.linalg_vector_norm, whose vjp is PyTorch's norm_backward
 * (0 where a distance is 0, as ATen's _cdist_backward and _pdist_backward). */
static th_status lastdim_norm(th_trace *tr, th_arg d, double p, th_arg *out) {
  int64_t last[1] = {-1};
  th_arg items[1], a[3] = {d, th_arg_float(p), th_tu_ints(items, 1, last)};
  return th_call(tr, TH_OP_ltorch_linalg_vector_norm, 3, a, out);
}

/* ATen's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped to 1e-30, square root. */
static th_status euclidean_dist(th_trace *tr, th_arg x1, th_arg x2, th_arg *out) {
  th_arg n1, n2, o1, o2, m1, c1, c2, t, items[1], parts[3];
  int64_t last[1] = {-1};
  C2(pow, x1, th_arg_float(2.0), &n1);
  th_arg s1[3] = {n1, th_tu_ints(items, 1, last), th_arg_bool(true)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, s1, 0, NULL, NULL, &n1));
  C2(pow, x2, th_arg_float(2.0), &n2);
  th_arg s2[3] = {n2, th_tu_ints(items, 1, last), th_arg_bool(true)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, s2, 0, NULL, NULL, &n2));
  C1(ones_like, n1, &o1);
  C1(ones_like, n2, &o2);
  C2(mul, x1, th_arg_float(-2.0), &m1);
  parts[0] = m1;
  parts[1] = n1;
  parts[2] = o1;
  C2(cat, th_arg_tuple(3, parts), th_arg_int(-1), &c1);
  parts[0] = x2;
  parts[1] = o2;
  parts[2] = n2;
  C2(cat, th_arg_tuple(3, parts), th_arg_int(-1), &c2);
  th_arg ta[3] = {c2, th_arg_int(-2), th_arg_int(-1)};
  TH_TRY(th_call(tr, TH_OP_ltorch_transpose, 3, ta, &c2));
  C2(matmul, c1, c2, &t);
  th_arg ca[2] = {t, th_arg_float(1e-30)};
  TH_TRY(th_call(tr, TH_OP_ltorch_clamp, 2, ca, &t));
  C1(sqrt, t, out);
  return TH_OK;
}

/* cdist(x1 (..., r1, m), x2 (..., r2, m), p, compute_mode) -> (..., r1, r2), the batch dims broadcast:
 * ATen's cdist_impl. p = 2 takes the matmul form for compute_mode 'use_mm_for_euclid_dist', and for
 * the default (None, 'use_mm_for_euclid_dist_if_necessary') when r1 or r2 exceeds 25; otherwise the
 * norm of the differences. */
th_status ltorch_cdist_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v1 = th_meta_tensor(&args[0]), *v2 = th_meta_tensor(&args[1]);
  if (!v1 || !v2) return th_error(TH_ERR_TYPE, "%s: expected x1 and x2 to be tensors", op);
  double p;
  TH_TRY(th_tu_float(op, "p", &args[2], &p));
  int mode = 0;
  if (args[3].kind == TH_ARG_STR) {
    const char *m = args[3].u.s;
    if (!strcmp(m, "use_mm_for_euclid_dist"))
      mode = 1;
    else if (!strcmp(m, "donot_use_mm_for_euclid_dist"))
      mode = 2;
    else if (strcmp(m, "use_mm_for_euclid_dist_if_necessary"))
      return th_error(TH_ERR_VALUE, "%s: %s is not a valid value for compute_mode", op, m);
  } else if (args[3].kind != TH_ARG_NONE) {
    return th_error(TH_ERR_TYPE, "%s: compute_mode must be a string or None", op);
  }
  TH_TRY(dist_checks(op, "cdist", "X1", v1, p));
  TH_TRY(dist_checks(op, "cdist", "X2", v2, p));
  if (v1->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: cdist only supports at least 2D tensors, X1 got: %dD", op, v1->ndim);
  if (v2->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: cdist only supports at least 2D tensors, X2 got: %dD", op, v2->ndim);
  int64_t m = v1->shape[v1->ndim - 1], r1 = v1->shape[v1->ndim - 2], r2 = v2->shape[v2->ndim - 2];
  if (m != v2->shape[v2->ndim - 1])
    return th_error(TH_ERR_RUNTIME, "%s: X1 and X2 must have the same number of columns. X1: %lld X2: %lld", op,
                    (long long)m, (long long)v2->shape[v2->ndim - 1]);
  if (v1->dtype != v2->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: cdist: X1 and X2 must have the same dtype, but got %s and %s", op,
                    th_tu_scalar_type_name(v1->dtype), th_tu_scalar_type_name(v2->dtype));
  /* batch dims broadcast; both operands expanded to them */
  th_arg bargs[2];
  th_value b1 = *v1, b2 = *v2;
  b1.ndim -= 2;
  b2.ndim -= 2;
  bargs[0] = th_arg_value(&b1);
  bargs[1] = th_arg_value(&b2);
  int nb;
  int64_t bshape[TH_MAX_DIMS], e[TH_MAX_DIMS];
  TH_TRY(th_tu_broadcast_shape(op, 2, bargs, &nb, bshape));
  if (nb < 0) nb = 0;
  if (nb + 3 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: cdist with %d batch dims is not supported", op, nb);
  th_arg x1 = args[0], x2 = args[1];
  memcpy(e, bshape, sizeof(int64_t) * (size_t)nb);
  e[nb] = r1;
  e[nb + 1] = m;
  TH_TRY(th_tu_expand(tr, op, &x1, nb + 2, e));
  e[nb] = r2;
  TH_TRY(th_tu_expand(tr, op, &x2, nb + 2, e));
  e[nb] = r1;
  e[nb + 1] = r2;
  int64_t numel = r1 * r2 * m;
  for (int i = 0; i < nb; i++) numel *= bshape[i];
  if (numel == 0) return th_tu_full(tr, nb + 2, e, th_arg_float(0.0), v1->device, v1->dtype, out);
  if (p == 2.0 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))) return euclidean_dist(tr, x1, x2, out);
  th_arg d;
  TH_TRY(th_tu_unsqueeze(tr, x1, nb + 1, &x1));
  TH_TRY(th_tu_unsqueeze(tr, x2, nb, &x2));
  C2(sub, x1, x2, &d);
  return lastdim_norm(tr, d, p, out);
}

/* pdist(input (n, m), p) -> the distances of rows i < j in row-major order (n (n - 1) / 2 of them):
 * ATen's _pdist_forward, here the norms of the differences of the row pairs triu_indices names. */
th_status ltorch_pdist_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  double p;
  TH_TRY(th_tu_float(op, "p", &args[1], &p));
  if (v->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: pdist only supports 2D tensors, got: %dD", op, v->ndim);
  TH_TRY(dist_checks(op, "pdist", "input", v, p));
  int64_t n = v->shape[0], np = n * (n - 1) / 2;
  if (np == 0 || v->shape[1] == 0) {
    if (np < 0) np = 0;
    return th_tu_full(tr, 1, &np, th_arg_float(0.0), v->device, v->dtype, out);
  }
  th_arg ij, ia, ja, xa, xb, d;
  th_arg ta[3] = {th_arg_int(n), th_arg_int(n), th_arg_int(1)};
  const char *const kn[1] = {"device"};
  th_arg kd[1] = {th_tu_device(v->device)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_triu_indices, 3, ta, 1, kn, kd, &ij));
  TH_TRY(th_tu_slice_in_dim(tr, ij, 0, 1, 1, 0, &ia));
  TH_TRY(th_tu_slice_in_dim(tr, ij, 1, 2, 1, 0, &ja));
  TH_TRY(th_tu_reshape(tr, ia, 1, &np, &ia));
  TH_TRY(th_tu_reshape(tr, ja, 1, &np, &ja));
  th_arg sa[3] = {args[0], th_arg_int(0), ia};
  TH_TRY(th_call(tr, TH_OP_ltorch_index_select, 3, sa, &xa));
  sa[2] = ja;
  TH_TRY(th_call(tr, TH_OP_ltorch_index_select, 3, sa, &xb));
  C2(sub, xa, xb, &d);
  return lastdim_norm(tr, d, p, out);
}

/* ---- max_unpool1d / 2d / 3d --------------------------------------------------------------------------- */

/* An int or a sequence of n ints (F._single / _pair / _triple). */
static th_status unpool_ints(const char *op, const char *what, const th_arg *a, int n, int64_t *out) {
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    if (a->u.seq.n != n)
      return th_error(TH_ERR_VALUE, "%s: %s must be an int or a sequence of %d ints, but got %d of them", op, what, n,
                      a->u.seq.n);
    for (int i = 0; i < n; i++) TH_TRY(th_meta_int(op, what, &a->u.seq.items[i], &out[i]));
    return TH_OK;
  }
  int64_t k;
  TH_TRY(th_meta_int(op, what, a, &k));
  for (int i = 0; i < n; i++) out[i] = k;
  return TH_OK;
}

/* F.max_unpool{n}d(input, indices, kernel_size, stride=kernel_size, padding=0, output_size=None): zeros
 * of the (N, C) planes' unpooled size (F._unpool_output_size: (in - 1) stride + kernel - 2 padding, or
 * output_size, its leading (N, C) dropped, within a stride of that), each input element written at its
 * index into the flattened plane (ltorch.scatter; the gradient gathers back from those indices). */
static th_status max_unpool(th_trace *tr, const char *op, int n, const th_arg *args, th_arg *out) {
  const th_value *v = th_meta_tensor(&args[0]), *iv = th_meta_tensor(&args[1]);
  if (!v || !iv) return th_error(TH_ERR_TYPE, "%s: expected input and indices to be tensors", op);
  int un = n == 1 ? 2 : n;
  if (v->ndim != n + 1 && v->ndim != n + 2)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Input to max_unpooling%dd should be a %dd or %dd Tensor, but got a tensor "
                    "with %d dimensions.",
                    op, un, un + 1, un + 2, v->ndim + (n == 1));
  if (iv->ndim != v->ndim || memcmp(iv->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim))
    return th_error(TH_ERR_RUNTIME, "%s: Expected shape of indices to be same as that of the input tensor", op);
  if (iv->dtype != TH_I64)
    return th_error(TH_ERR_RUNTIME, "%s: elements in indices should be type int64 but got: %s", op,
                    th_tu_scalar_type_name(iv->dtype));
  int64_t k[3], st[3], pd[3], dflt[3], osz[3];
  TH_TRY(unpool_ints(op, "kernel_size", &args[2], n, k));
  if (args[3].kind == TH_ARG_NONE)
    memcpy(st, k, sizeof k);
  else
    TH_TRY(unpool_ints(op, "stride", &args[3], n, st));
  TH_TRY(unpool_ints(op, "padding", &args[4], n, pd));
  int lead = v->ndim - n;
  for (int i = 0; i < n; i++) dflt[i] = (v->shape[lead + i] - 1) * st[i] + k[i] - 2 * pd[i];
  memcpy(osz, dflt, sizeof dflt);
  const th_arg *os = &args[5];
  if (os->kind == TH_ARG_TUPLE || os->kind == TH_ARG_LIST) {
    int m = os->u.seq.n, off = m == n + 2 ? 2 : 0;
    if (m - off != n)
      return th_error(TH_ERR_VALUE,
                      "%s: output_size should be a sequence containing %d or %d elements, but it has a "
                      "length of '%d'",
                      op, n, n + 2, m);
    for (int i = 0; i < n; i++) {
      TH_TRY(th_meta_int(op, "output_size", &os->u.seq.items[off + i], &osz[i]));
      if (!(dflt[i] - st[i] < osz[i] && osz[i] < dflt[i] + st[i]))
        return th_error(TH_ERR_VALUE, "%s: invalid output_size (dim %d must be between %lld and %lld)", op, i,
                        (long long)(dflt[i] - st[i]), (long long)(dflt[i] + st[i]));
    }
  } else if (os->kind != TH_ARG_NONE) {
    return th_error(TH_ERR_TYPE, "%s: output_size must be a sequence of ints or None", op);
  }
  int64_t planes = 1, in_el = 1, out_el = 1, s2[2], oshape[TH_MAX_DIMS];
  for (int i = 0; i < lead; i++) {
    planes *= v->shape[i];
    oshape[i] = v->shape[i];
  }
  for (int i = 0; i < n; i++) {
    if (osz[i] < 0) return th_error(TH_ERR_RUNTIME, "%s: the output size %lld is negative", op, (long long)osz[i]);
    in_el *= v->shape[lead + i];
    out_el *= osz[i];
    oshape[lead + i] = osz[i];
  }
  th_arg x, idx, z, r;
  s2[0] = planes;
  s2[1] = in_el;
  TH_TRY(th_tu_reshape(tr, args[0], 2, s2, &x));
  TH_TRY(th_tu_reshape(tr, args[1], 2, s2, &idx));
  s2[1] = out_el;
  th_arg zero = th_dtype_is_float(v->dtype) ? th_arg_float(0.0)
                : v->dtype == TH_BOOL       ? th_arg_bool(false)
                                            : th_arg_int(0);
  TH_TRY(th_tu_full(tr, 2, s2, zero, v->device, v->dtype, &z));
  th_arg sa[4] = {z, th_arg_int(1), idx, x};
  TH_TRY(th_call(tr, TH_OP_ltorch_scatter, 4, sa, &r));
  return th_tu_reshape(tr, r, v->ndim, oshape, out);
}

th_status ltorch_max_unpool1d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return max_unpool(tr, sym->qualname, 1, args, out);
}

th_status ltorch_max_unpool2d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return max_unpool(tr, sym->qualname, 2, args, out);
}

th_status ltorch_max_unpool3d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return max_unpool(tr, sym->qualname, 3, args, out);
}

/* ---- vjp rules ---------------------------------------------------------------------------------------- */

/* median / nanmedian as PyTorch differentiates them: over all elements, evenly_distribute_backward
 * (g / #ties at every element equal to the result, NaN matching NaN); along a dim,
 * value_selecting_reduction_backward (g at the selected indices). */
static th_status median_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *v = a->u.value;
  th_arg g = cts[0], r;
  if (b->args[1].kind == TH_ARG_NONE) {
    th_arg o = th_vjp_out(b), m, n1, n2, cnt;
    C2(eq, *a, o, &m);
    C1(isnan, *a, &n1);
    C1(isnan, o, &n2);
    C2(logical_and, n1, n2, &n1);
    C2(logical_or, m, n1, &m);
    th_arg sa[1] = {m};
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 1, sa, 0, NULL, NULL, &cnt));
    C2(true_divide, g, cnt, &g);
    C2(mul, m, g, &r);
    TH_TRY(th_tu_convert(tr, &r, v->dtype));
    grads[0] = r;
    return TH_OK;
  }
  if (v->ndim == 0) {
    grads[0] = g;
    return TH_OK;
  }
  int64_t dim;
  int d;
  bool keepdim;
  TH_TRY(th_meta_int(op, "dim", &b->args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  TH_TRY(th_tu_bool(op, "keepdim", &b->args[2], &keepdim));
  th_arg idx = b->out.u.seq.items[1], z;
  if (!keepdim) {
    TH_TRY(th_tu_unsqueeze(tr, g, d, &g));
    TH_TRY(th_tu_unsqueeze(tr, idx, d, &idx));
  }
  TH_TRY(th_vjp_zeros_like(tr, v, &z));
  th_arg sa[4] = {z, th_arg_int(d), idx, g};
  TH_TRY(th_call(tr, TH_OP_ltorch_scatter, 4, sa, &grads[0]));
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_stat[] = {
  {TH_OP_ltorch_median, TH_VJP_RULE, median_vjp},
  {TH_OP_ltorch_nanmedian, TH_VJP_RULE, median_vjp},
};
const int th_vjp_table_torch_stat_n = (int)(sizeof th_vjp_table_torch_stat / sizeof th_vjp_table_torch_stat[0]);
