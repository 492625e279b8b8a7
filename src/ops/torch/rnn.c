/* rnn.c — attention and recurrence at the torch level: F.multi_head_attention_forward (what
 * nn.MultiheadAttention and nn.TransformerEncoderLayer call).
 *
 * Each is a decomposition into torch-level ops with PyTorch's semantics, step by step as
 * torch/nn/functional.py writes it, so the trace reads like the Python source and every step is a
 * differentiable op (no vjp of their own). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

/* ---- multi_head_attention_forward -------------------------------------------------------------------- */

/* the argument positions of the schema (PyTorch's parameter order) */
enum {
  MHA_QUERY,
  MHA_KEY,
  MHA_VALUE,
  MHA_EMBED_DIM,
  MHA_NUM_HEADS,
  MHA_IN_PROJ_WEIGHT,
  MHA_IN_PROJ_BIAS,
  MHA_BIAS_K,
  MHA_BIAS_V,
  MHA_ADD_ZERO_ATTN,
  MHA_DROPOUT_P,
  MHA_OUT_PROJ_WEIGHT,
  MHA_OUT_PROJ_BIAS,
  MHA_TRAINING,
  MHA_KEY_PADDING_MASK,
  MHA_NEED_WEIGHTS,
  MHA_ATTN_MASK,
  MHA_USE_SEPARATE,
  MHA_Q_PROJ_WEIGHT,
  MHA_K_PROJ_WEIGHT,
  MHA_V_PROJ_WEIGHT,
  MHA_STATIC_K,
  MHA_STATIC_V,
  MHA_AVERAGE,
  MHA_IS_CAUSAL
};

static bool is_none(const th_arg *a) { return a->kind == TH_ARG_NONE; }
static const th_value *val(const th_arg *a) { return a->u.value; }

static th_status need_tensor(const char *op, const char *what, const th_arg *a) {
  if (a->kind != TH_ARG_VALUE || !th_value_is_tensor(a->u.value))
    return th_error(TH_ERR_TYPE, "%s: %s must be a Tensor", op, what);
  return TH_OK;
}

/* F._mha_shape_check: whether the inputs are batched ((L, N, E)) or unbatched ((L, E)). */
static th_status mha_shape_check(const char *op, const th_arg *args, int64_t num_heads, bool *batched) {
  const th_value *q = val(&args[MHA_QUERY]), *k = val(&args[MHA_KEY]), *v = val(&args[MHA_VALUE]);
  const th_arg *kpm = &args[MHA_KEY_PADDING_MASK], *am = &args[MHA_ATTN_MASK];
  if (q->ndim == 3) {
    *batched = true;
    if (k->ndim != 3 || v->ndim != 3)
      return th_error(TH_ERR_RUNTIME,
                      "%s: For batched (3-D) `query`, expected `key` and `value` to be 3-D but found %d-D and %d-D "
                      "tensors respectively",
                      op, k->ndim, v->ndim);
    if (!is_none(kpm) && val(kpm)->ndim != 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but found "
                      "%d-D tensor instead",
                      op, val(kpm)->ndim);
    if (!is_none(am) && val(am)->ndim != 2 && val(am)->ndim != 3)
      return th_error(TH_ERR_RUNTIME,
                      "%s: For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found %d-D "
                      "tensor instead",
                      op, val(am)->ndim);
    return TH_OK;
  }
  if (q->ndim == 2) {
    *batched = false;
    if (k->ndim != 2 || v->ndim != 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found %d-D and %d-D "
                      "tensors respectively",
                      op, k->ndim, v->ndim);
    if (!is_none(kpm) && val(kpm)->ndim != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D but found "
                      "%d-D tensor instead",
                      op, val(kpm)->ndim);
    if (!is_none(am)) {
      const th_value *m = val(am);
      if (m->ndim != 2 && m->ndim != 3)
        return th_error(TH_ERR_RUNTIME,
                        "%s: For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                        "%d-D tensor instead",
                        op, m->ndim);
      if (m->ndim == 3 && m->shape[0] != num_heads)
        return th_error(TH_ERR_RUNTIME,
                        "%s: Expected `attn_mask` shape to be (%lld, %lld, %lld) but got (%lld, %lld, %lld)", op,
                        (long long)num_heads, (long long)q->shape[0], (long long)k->shape[0], (long long)m->shape[0],
                        (long long)m->shape[1], (long long)m->shape[2]);
    }
    return TH_OK;
  }
  return th_error(TH_ERR_RUNTIME,
                  "%s: query should be unbatched 2D or batched 3D tensor but received %d-D query tensor", op, q->ndim);
}

/* F._canonical_mask: a bool mask becomes `dtype` with -inf where it is True and 0 elsewhere; a float
 * mask stays as it is; other dtypes are refused. */
static th_status canonical_mask(th_trace *tr, const char *op, const char *name, th_arg *m, th_dtype dtype) {
  if (is_none(m)) return TH_OK;
  th_dtype mdt = val(m)->dtype;
  if (mdt == TH_BOOL) {
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, *m, th_arg_float(-INFINITY), th_arg_float(0.0), m));
    return th_tu_convert(tr, m, dtype);
  }
  if (!th_dtype_is_float(mdt) || th_dtype_is_fp8(mdt))
    return th_error(TH_ERR_VALUE, "%s: only bool and floating types of %s are supported", op, name);
  return TH_OK;
}

static th_status linear(th_trace *tr, th_arg x, th_arg w, th_arg b, th_arg *out) {
  return th_tu_call3(tr, TH_OP_ltorch_linear, x, w, b, out);
}

/* rows [lo, hi) of a weight or bias (dim 0); NONE stays NONE */
static th_status rows(th_trace *tr, th_arg w, int64_t lo, int64_t hi, th_arg *out) {
  if (is_none(&w)) {
    *out = w;
    return TH_OK;
  }
  return th_tu_slice_in_dim(tr, w, lo, hi, 1, 0, out);
}

/* F._in_projection_packed: one linear for self-attention (query, key and value one tensor), one for q
 * and one for the stacked k/v weights when key is value, else three. */
static th_status in_projection_packed(th_trace *tr, const th_arg *args, int64_t E, th_arg *q, th_arg *k, th_arg *v) {
  th_arg x = args[MHA_QUERY], kx = args[MHA_KEY], vx = args[MHA_VALUE];
  th_arg w = args[MHA_IN_PROJ_WEIGHT], b = args[MHA_IN_PROJ_BIAS];
  bool k_is_v = kx.kind == TH_ARG_VALUE && vx.kind == TH_ARG_VALUE && val(&kx) == val(&vx);
  bool q_is_k = val(&x) == val(&kx);
  if (k_is_v && q_is_k) {
    th_arg proj;
    TH_TRY(linear(tr, x, w, b, &proj));
    int d = val(&proj)->ndim - 1;
    TH_TRY(th_tu_slice_in_dim(tr, proj, 0, E, 1, d, q));
    TH_TRY(th_tu_slice_in_dim(tr, proj, E, 2 * E, 1, d, k));
    return th_tu_slice_in_dim(tr, proj, 2 * E, 3 * E, 1, d, v);
  }
  th_arg wq, bq;
  TH_TRY(rows(tr, w, 0, E, &wq));
  TH_TRY(rows(tr, b, 0, E, &bq));
  TH_TRY(linear(tr, x, wq, bq, q));
  if (k_is_v) {
    th_arg wkv, bkv, kv;
    TH_TRY(rows(tr, w, E, 3 * E, &wkv));
    TH_TRY(rows(tr, b, E, 3 * E, &bkv));
    TH_TRY(linear(tr, kx, wkv, bkv, &kv));
    int d = val(&kv)->ndim - 1;
    TH_TRY(th_tu_slice_in_dim(tr, kv, 0, E, 1, d, k));
    return th_tu_slice_in_dim(tr, kv, E, 2 * E, 1, d, v);
  }
  th_arg wk, bk, wv, bv;
  TH_TRY(rows(tr, w, E, 2 * E, &wk));
  TH_TRY(rows(tr, b, E, 2 * E, &bk));
  TH_TRY(rows(tr, w, 2 * E, 3 * E, &wv));
  TH_TRY(rows(tr, b, 2 * E, 3 * E, &bv));
  TH_TRY(linear(tr, kx, wk, bk, k));
  return linear(tr, vx, wv, bv, v);
}

/* F.pad(m, (0, 1)): one more zero column at the end of the last dim */
static th_status pad_one(th_trace *tr, th_arg *m) {
  if (is_none(m)) return TH_OK;
  const th_value *mv = val(m);
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, mv->shape, sizeof(int64_t) * (size_t)mv->ndim);
  shape[mv->ndim - 1] = 1;
  th_arg z, items[2];
  TH_TRY(th_tu_full(tr, mv->ndim, shape, th_arg_int(0), mv->device, mv->dtype, &z));
  items[0] = *m;
  items[1] = z;
  return th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(2, items), th_arg_int(-1), m);
}

/* x ++ one more entry along `dim`: cat([x, extra], dim) */
static th_status cat2(th_trace *tr, th_arg x, th_arg extra, int64_t dim, th_arg *out) {
  th_arg items[2] = {x, extra};
  return th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(2, items), th_arg_int(dim), out);
}

/* bias_k.repeat(1, bsz, 1) for a bias whose 3-D shape (1s prepended) has 1 at dim 1 */
static th_status repeat_bias(th_trace *tr, const char *op, const char *name, th_arg bias, int64_t bsz, th_arg *out) {
  const th_value *b = val(&bias);
  if (b->ndim > 3)
    return th_error(TH_ERR_RUNTIME, "%s: %s of %d dims cannot be repeated as (1, bsz, 1)", op, name, b->ndim);
  int64_t s3[3] = {1, 1, 1};
  for (int i = 0; i < b->ndim; i++) s3[3 - b->ndim + i] = b->shape[i];
  if (s3[1] != 1)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: %s with size %lld at dim 1 (tiled by repeat) is not supported", op,
                    name, (long long)s3[1]);
  TH_TRY(th_tu_reshape(tr, bias, 3, s3, &bias));
  int64_t e[3] = {s3[0], bsz, s3[2]};
  TH_TRY(th_tu_expand(tr, op, &bias, 3, e));
  *out = bias;
  return TH_OK;
}

static th_status view3(th_trace *tr, th_arg x, int64_t a, int64_t b, int64_t c, th_arg *out) {
  int64_t s[3] = {a, b, c};
  return th_tu_reshape(tr, x, 3, s, out);
}

static th_status transpose01(th_trace *tr, th_arg x, th_arg *out) {
  return th_tu_call3(tr, TH_OP_ltorch_transpose, x, th_arg_int(0), th_arg_int(1), out);
}

/* static_k / static_v in place of the projected heads: (bsz * num_heads, S, head_dim) */
static th_status static_heads(const char *op, const char *name, const th_arg *s, int64_t bh, int64_t hd) {
  TH_TRY(need_tensor(op, name, s));
  const th_value *t = val(s);
  if (t->ndim != 3) return th_error(TH_ERR_RUNTIME, "%s: expecting %s of 3 dims, but got %d", op, name, t->ndim);
  if (t->shape[0] != bh)
    return th_error(TH_ERR_RUNTIME, "%s: expecting %s.size(0) of %lld, but got %lld", op, name, (long long)bh,
                    (long long)t->shape[0]);
  if (t->shape[2] != hd)
    return th_error(TH_ERR_RUNTIME, "%s: expecting %s.size(2) of %lld, but got %lld", op, name, (long long)hd,
                    (long long)t->shape[2]);
  return TH_OK;
}

th_status ltorch_multi_head_attention_forward_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,
                                                     th_arg *out) {
  const char *op = sym->qualname;
  TH_TRY(need_tensor(op, "query", &args[MHA_QUERY]));
  TH_TRY(need_tensor(op, "key", &args[MHA_KEY]));
  TH_TRY(need_tensor(op, "value", &args[MHA_VALUE]));
  TH_TRY(need_tensor(op, "out_proj_weight", &args[MHA_OUT_PROJ_WEIGHT]));
  int64_t embed_check, H;
  double dropout_p;
  bool add_zero_attn, training, need_weights, separate, average, is_causal;
  TH_TRY(th_meta_int(op, "embed_dim_to_check", &args[MHA_EMBED_DIM], &embed_check));
  TH_TRY(th_meta_int(op, "num_heads", &args[MHA_NUM_HEADS], &H));
  TH_TRY(th_tu_bool(op, "add_zero_attn", &args[MHA_ADD_ZERO_ATTN], &add_zero_attn));
  TH_TRY(th_tu_float(op, "dropout_p", &args[MHA_DROPOUT_P], &dropout_p));
  TH_TRY(th_tu_bool(op, "training", &args[MHA_TRAINING], &training));
  TH_TRY(th_tu_bool(op, "need_weights", &args[MHA_NEED_WEIGHTS], &need_weights));
  TH_TRY(th_tu_bool(op, "use_separate_proj_weight", &args[MHA_USE_SEPARATE], &separate));
  TH_TRY(th_tu_bool(op, "average_attn_weights", &args[MHA_AVERAGE], &average));
  TH_TRY(th_tu_bool(op, "is_causal", &args[MHA_IS_CAUSAL], &is_causal));
  if (H <= 0) return th_error(TH_ERR_RUNTIME, "%s: num_heads must be positive, but got %lld", op, (long long)H);

  bool batched = true;
  TH_TRY(mha_shape_check(op, args, H, &batched));
  th_arg query = args[MHA_QUERY], key = args[MHA_KEY], value = args[MHA_VALUE];
  th_arg kpm = args[MHA_KEY_PADDING_MASK], attn_mask = args[MHA_ATTN_MASK];
  th_arg a2[MHA_IS_CAUSAL + 1];
  memcpy(a2, args, sizeof a2);
  if (!batched) { /* pretend a batch of one, squeezed again at the end */
    bool same_kv = val(&key) == val(&value), same_qk = val(&query) == val(&key);
    TH_TRY(th_tu_unsqueeze(tr, query, 1, &query));
    if (same_qk)
      key = query;
    else
      TH_TRY(th_tu_unsqueeze(tr, key, 1, &key));
    if (same_kv)
      value = key;
    else
      TH_TRY(th_tu_unsqueeze(tr, value, 1, &value));
    if (!is_none(&kpm)) TH_TRY(th_tu_unsqueeze(tr, kpm, 0, &kpm));
  }
  a2[MHA_QUERY] = query;
  a2[MHA_KEY] = key;
  a2[MHA_VALUE] = value;
  const int64_t L = val(&query)->shape[0], N = val(&query)->shape[1], E = val(&query)->shape[2];
  int64_t S = val(&key)->shape[0];
  const th_dtype qdt = val(&query)->dtype;

  TH_TRY(canonical_mask(tr, op, "key_padding_mask", &kpm, qdt));
  if (is_causal && is_none(&attn_mask))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
                    "`generate_square_subsequent_mask` to create this mask.",
                    op);
  if (is_causal && is_none(&kpm) && !need_weights) {
    attn_mask = th_arg_none(); /* the is_causal hint goes to scaled_dot_product_attention */
  } else {
    TH_TRY(canonical_mask(tr, op, "attn_mask", &attn_mask, qdt));
    if (!is_none(&kpm)) is_causal = false; /* the merged mask is no longer causal */
  }
  if (E != embed_check)
    return th_error(TH_ERR_RUNTIME, "%s: was expecting embedding dimension of %lld, but got %lld", op,
                    (long long)embed_check, (long long)E);
  const int64_t hd = E / H;
  if (hd * H != E)
    return th_error(TH_ERR_RUNTIME, "%s: embed_dim %lld not divisible by num_heads %lld", op, (long long)E,
                    (long long)H);
  const th_value *kv = val(&key), *vv = val(&value);
  if (separate ? (kv->shape[0] != vv->shape[0] || kv->shape[1] != vv->shape[1])
               : (kv->ndim != vv->ndim || memcmp(kv->shape, vv->shape, sizeof(int64_t) * (size_t)kv->ndim) != 0))
    return th_error(TH_ERR_RUNTIME, "%s: key shape does not match value shape%s", op,
                    separate ? " in the sequence and batch dims" : "");

  /* in-projection */
  th_arg q, k, v;
  if (!separate) {
    if (is_none(&args[MHA_IN_PROJ_WEIGHT]))
      return th_error(TH_ERR_RUNTIME, "%s: use_separate_proj_weight is False but in_proj_weight is None", op);
    TH_TRY(in_projection_packed(tr, a2, E, &q, &k, &v));
  } else {
    static const char *const names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    for (int i = 0; i < 3; i++)
      if (is_none(&args[MHA_Q_PROJ_WEIGHT + i]))
        return th_error(TH_ERR_RUNTIME, "%s: use_separate_proj_weight is True but %s is None", op, names[i]);
    th_arg b = args[MHA_IN_PROJ_BIAS], bq, bk, bv;
    TH_TRY(rows(tr, b, 0, E, &bq));
    TH_TRY(rows(tr, b, E, 2 * E, &bk));
    TH_TRY(rows(tr, b, 2 * E, 3 * E, &bv));
    TH_TRY(linear(tr, query, args[MHA_Q_PROJ_WEIGHT], bq, &q));
    TH_TRY(linear(tr, key, args[MHA_K_PROJ_WEIGHT], bk, &k));
    TH_TRY(linear(tr, value, args[MHA_V_PROJ_WEIGHT], bv, &v));
  }

  /* the attention mask as 3 dims: (1, L, S) or (N * H, L, S) */
  if (!is_none(&attn_mask)) {
    const th_value *m = val(&attn_mask);
    if (m->ndim == 2) {
      if (m->shape[0] != L || m->shape[1] != S)
        return th_error(TH_ERR_RUNTIME,
                        "%s: The shape of the 2D attn_mask is [%lld, %lld], but should be (%lld, %lld).", op,
                        (long long)m->shape[0], (long long)m->shape[1], (long long)L, (long long)S);
      TH_TRY(th_tu_unsqueeze(tr, attn_mask, 0, &attn_mask));
    } else if (m->ndim == 3) {
      if (m->shape[0] != N * H || m->shape[1] != L || m->shape[2] != S)
        return th_error(TH_ERR_RUNTIME,
                        "%s: The shape of the 3D attn_mask is [%lld, %lld, %lld], but should be (%lld, %lld, %lld).",
                        op, (long long)m->shape[0], (long long)m->shape[1], (long long)m->shape[2], (long long)(N * H),
                        (long long)L, (long long)S);
    } else {
      return th_error(TH_ERR_RUNTIME, "%s: attn_mask's dimension %d is not supported", op, m->ndim);
    }
  }

  /* bias along the sequence dim (the batch is still dim 1) */
  const th_arg *sk = &args[MHA_STATIC_K], *sv = &args[MHA_STATIC_V];
  bool has_bk = !is_none(&args[MHA_BIAS_K]), has_bv = !is_none(&args[MHA_BIAS_V]);
  if (has_bk && has_bv) {
    if (!is_none(sk)) return th_error(TH_ERR_RUNTIME, "%s: bias cannot be added to static key.", op);
    if (!is_none(sv)) return th_error(TH_ERR_RUNTIME, "%s: bias cannot be added to static value.", op);
    th_arg rb;
    TH_TRY(repeat_bias(tr, op, "bias_k", args[MHA_BIAS_K], N, &rb));
    TH_TRY(cat2(tr, k, rb, 0, &k));
    TH_TRY(repeat_bias(tr, op, "bias_v", args[MHA_BIAS_V], N, &rb));
    TH_TRY(cat2(tr, v, rb, 0, &v));
    TH_TRY(pad_one(tr, &attn_mask));
    TH_TRY(pad_one(tr, &kpm));
  } else if (has_bk || has_bv) {
    return th_error(TH_ERR_RUNTIME, "%s: %s is set but %s is None", op, has_bk ? "bias_k" : "bias_v",
                    has_bk ? "bias_v" : "bias_k");
  }

  /* heads into the batch dim: (N * H, len, head_dim) */
  TH_TRY(view3(tr, q, L, N * H, hd, &q));
  TH_TRY(transpose01(tr, q, &q));
  if (is_none(sk)) {
    TH_TRY(view3(tr, k, val(&k)->shape[0], N * H, hd, &k));
    TH_TRY(transpose01(tr, k, &k));
  } else {
    TH_TRY(static_heads(op, "static_k", sk, N * H, hd));
    k = *sk;
  }
  if (is_none(sv)) {
    TH_TRY(view3(tr, v, val(&v)->shape[0], N * H, hd, &v));
    TH_TRY(transpose01(tr, v, &v));
  } else {
    TH_TRY(static_heads(op, "static_v", sv, N * H, hd));
    v = *sv;
  }
  if (add_zero_attn) { /* one more all-zero key and value */
    int64_t zs[3] = {N * H, 1, hd};
    th_arg zk, zv;
    TH_TRY(th_tu_full(tr, 3, zs, th_arg_int(0), val(&k)->device, val(&k)->dtype, &zk));
    TH_TRY(th_tu_full(tr, 3, zs, th_arg_int(0), val(&v)->device, val(&v)->dtype, &zv));
    TH_TRY(cat2(tr, k, zk, 1, &k));
    TH_TRY(cat2(tr, v, zv, 1, &v));
    TH_TRY(pad_one(tr, &attn_mask));
    TH_TRY(pad_one(tr, &kpm));
  }
  S = val(&k)->shape[1];

  /* key padding merged into the attention mask */
  if (!is_none(&kpm)) {
    const th_value *p = val(&kpm);
    if (p->ndim != 2 || p->shape[0] != N || p->shape[1] != S)
      return th_error(TH_ERR_RUNTIME, "%s: expecting key_padding_mask shape of (%lld, %lld), but got a %d-D mask", op,
                      (long long)N, (long long)S, p->ndim);
    int64_t s4[4] = {N, 1, 1, S}, e4[4] = {N, H, 1, S};
    TH_TRY(th_tu_reshape(tr, kpm, 4, s4, &kpm));
    TH_TRY(th_tu_expand(tr, op, &kpm, 4, e4));
    TH_TRY(view3(tr, kpm, N * H, 1, S, &kpm));
    if (is_none(&attn_mask))
      attn_mask = kpm;
    else
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, attn_mask, kpm, &attn_mask));
  }
  if (!training) dropout_p = 0.0;

  th_arg res[2];
  if (need_weights) {
    if (is_causal && is_none(&attn_mask))
      return th_error(TH_ERR_RUNTIME, "%s: FIXME: is_causal not implemented for need_weights", op);
    th_arg qs, kt, w, o;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, q, th_arg_float(sqrt(1.0 / (double)hd)), &qs));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_transpose, k, th_arg_int(-2), th_arg_int(-1), &kt));
    if (!is_none(&attn_mask))
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_baddbmm, attn_mask, qs, kt, &w));
    else
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_bmm, qs, kt, &w));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_softmax, w, th_arg_int(-1), &w));
    if (dropout_p > 0.0) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_dropout, w, th_arg_float(dropout_p), &w));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_bmm, w, v, &o));
    int64_t s2[2] = {L * N, E};
    TH_TRY(transpose01(tr, o, &o));
    TH_TRY(th_tu_reshape(tr, o, 2, s2, &o));
    TH_TRY(linear(tr, o, args[MHA_OUT_PROJ_WEIGHT], args[MHA_OUT_PROJ_BIAS], &o));
    TH_TRY(view3(tr, o, L, N, val(&o)->shape[1], &o));
    int64_t s4[4] = {N, H, L, S};
    TH_TRY(th_tu_reshape(tr, w, 4, s4, &w));
    if (average) {
      th_arg d1[1];
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mean, w, th_tu_ints(d1, 1, (int64_t[]){1}), &w));
    }
    if (!batched) {
      TH_TRY(th_tu_squeeze(tr, o, 1, (int64_t[]){1}, &o));
      TH_TRY(th_tu_squeeze(tr, w, 1, (int64_t[]){0}, &w));
    }
    res[0] = o;
    res[1] = w;
  } else {
    if (!is_none(&attn_mask)) {
      const th_value *m = val(&attn_mask);
      if (m->shape[0] == 1 && m->ndim == 3) {
        TH_TRY(th_tu_unsqueeze(tr, attn_mask, 0, &attn_mask));
      } else { /* view(bsz, num_heads, -1, src_len) */
        int64_t numel = 1;
        for (int i = 0; i < m->ndim; i++) numel *= m->shape[i];
        int64_t s4[4] = {N, H, N * H * S != 0 ? numel / (N * H * S) : 0, S};
        TH_TRY(th_tu_reshape(tr, attn_mask, 4, s4, &attn_mask));
      }
    }
    int64_t sq[4] = {N, H, L, hd}, sk4[4] = {N, H, S, hd};
    TH_TRY(th_tu_reshape(tr, q, 4, sq, &q));
    TH_TRY(th_tu_reshape(tr, k, 4, sk4, &k));
    TH_TRY(th_tu_reshape(tr, v, 4, sk4, &v));
    th_arg sargs[6] = {q, k, v, attn_mask, th_arg_float(dropout_p), th_arg_bool(is_causal)}, o;
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_scaled_dot_product_attention, 6, sargs, 0, NULL, NULL, &o));
    TH_TRY(th_tu_transpose(tr, o, (int64_t[]){2, 0, 1, 3}, &o));
    int64_t s2[2] = {N * L, E};
    TH_TRY(th_tu_reshape(tr, o, 2, s2, &o));
    TH_TRY(linear(tr, o, args[MHA_OUT_PROJ_WEIGHT], args[MHA_OUT_PROJ_BIAS], &o));
    TH_TRY(view3(tr, o, L, N, val(&o)->shape[1], &o));
    if (!batched) TH_TRY(th_tu_squeeze(tr, o, 1, (int64_t[]){1}, &o));
    res[0] = o;
    res[1] = th_arg_none();
  }
  return th_tu_tuple_out(tr, 2, res, out);
}

/* ---- lstm / gru / rnn_tanh / rnn_relu ------------------------------------------------------------------
 * torch.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
 * and its kin (torch._VF's, what nn.LSTM / nn.GRU / nn.RNN call), unrolled over the time steps: per
 * layer and direction the input projection of every step at once (linear(x, w_ih, b_ih)), then per step
 * the hidden projection and the cell as ATen's cells compute it (gate order i, f, g, o for the LSTM;
 * r, z, n for the GRU, with n = tanh(n_i + r * n_h)), the reverse direction walking the steps
 * backwards. Dropout applies between layers in training. The packed-sequence overload is refused. */

typedef enum { CELL_LSTM, CELL_GRU, CELL_TANH, CELL_RELU } cell_kind;

static th_status step_slice(th_trace *tr, th_arg x, int64_t t, th_arg *out) {
  const th_value *v = val(&x);
  TH_TRY(th_tu_slice_in_dim(tr, x, t, t + 1, 1, 0, &x));
  return th_tu_reshape(tr, x, v->ndim - 1, v->shape + 1, out);
}

static th_status gate(th_trace *tr, th_arg g, int64_t i, int64_t h, th_arg *out) {
  return th_tu_slice_in_dim(tr, g, i * h, (i + 1) * h, 1, val(&g)->ndim - 1, out);
}

static th_status call1(th_trace *tr, th_op_id op, th_arg a, th_arg *out) { return th_tu_call1(tr, op, a, out); }

/* One cell step: the new h (and c for the LSTM) from the step's input projection xi. */
static th_status cell(th_trace *tr, cell_kind kind, th_arg xi, th_arg *h, th_arg *c, th_arg w_hh, th_arg b_hh,
                      th_arg w_hr, int64_t hs) {
  th_arg hg;
  TH_TRY(linear(tr, *h, w_hh, b_hh, &hg));
  if (kind == CELL_LSTM) {
    th_arg gates, ig, fg, gg, og, t1, t2;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, xi, hg, &gates));
    TH_TRY(gate(tr, gates, 0, hs, &ig));
    TH_TRY(gate(tr, gates, 1, hs, &fg));
    TH_TRY(gate(tr, gates, 2, hs, &gg));
    TH_TRY(gate(tr, gates, 3, hs, &og));
    TH_TRY(call1(tr, TH_OP_ltorch_sigmoid, ig, &ig));
    TH_TRY(call1(tr, TH_OP_ltorch_sigmoid, fg, &fg));
    TH_TRY(call1(tr, TH_OP_ltorch_tanh, gg, &gg));
    TH_TRY(call1(tr, TH_OP_ltorch_sigmoid, og, &og));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, fg, *c, &t1));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, ig, gg, &t2));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, t1, t2, c));
    TH_TRY(call1(tr, TH_OP_ltorch_tanh, *c, &t1));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, og, t1, h));
    if (!is_none(&w_hr)) TH_TRY(linear(tr, *h, w_hr, th_arg_none(), h));
    return TH_OK;
  }
  if (kind == CELL_GRU) {
    th_arg ri, zi, ni, rh, zh, nh, r, z, n, t;
    TH_TRY(gate(tr, xi, 0, hs, &ri));
    TH_TRY(gate(tr, xi, 1, hs, &zi));
    TH_TRY(gate(tr, xi, 2, hs, &ni));
    TH_TRY(gate(tr, hg, 0, hs, &rh));
    TH_TRY(gate(tr, hg, 1, hs, &zh));
    TH_TRY(gate(tr, hg, 2, hs, &nh));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, ri, rh, &r));
    TH_TRY(call1(tr, TH_OP_ltorch_sigmoid, r, &r));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, zi, zh, &z));
    TH_TRY(call1(tr, TH_OP_ltorch_sigmoid, z, &z));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, r, nh, &n));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, ni, n, &n));
    TH_TRY(call1(tr, TH_OP_ltorch_tanh, n, &n));
    /* h' = (1 - z) * n + z * h, written as ATen's GRU cell: n + z * (h - n) */
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, *h, n, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, z, t, &t));
    return th_tu_call2(tr, TH_OP_ltorch_add, n, t, h);
  }
  th_arg pre;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, xi, hg, &pre));
  if (kind == CELL_TANH) return call1(tr, TH_OP_ltorch_tanh, pre, h);
  return call1(tr, TH_OP_ltorch_relu, pre, h);
}

/* the tensor list argument `what` (params, or the LSTM's (h0, c0)) */
static th_status tensor_list(const char *op, const char *what, const th_arg *a, int *n, const th_arg **items) {
  if (a->kind != TH_ARG_LIST && a->kind != TH_ARG_TUPLE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: packed sequences (nn.utils.rnn.PackedSequence) are not supported; pass a padded tensor "
                    "(%s is not a list of tensors)",
                    op, what);
  for (int i = 0; i < a->u.seq.n; i++) TH_TRY(need_tensor(op, what, &a->u.seq.items[i]));
  *n = a->u.seq.n;
  *items = a->u.seq.items;
  return TH_OK;
}

static th_status rnn_decomp(th_trace *tr, const char *op, cell_kind kind, const th_arg *args, th_arg *out) {
  TH_TRY(need_tensor(op, "input", &args[0]));
  int np = 0, nh = 1;
  const th_arg *params = NULL, *hx = NULL;
  if (kind == CELL_LSTM) {
    TH_TRY(tensor_list(op, "hx", &args[1], &nh, &hx));
    if (nh != 2) return th_error(TH_ERR_RUNTIME, "%s: lstm expects two hidden states, got %d", op, nh);
  } else {
    if (args[1].kind != TH_ARG_VALUE || !th_value_is_tensor(args[1].u.value) || args[2].kind == TH_ARG_VALUE)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: packed sequences (nn.utils.rnn.PackedSequence) are not supported; pass a padded tensor", op);
    hx = &args[1];
  }
  TH_TRY(tensor_list(op, "params", &args[2], &np, &params));
  bool has_biases, train, bidirectional, batch_first;
  int64_t num_layers;
  double p;
  TH_TRY(th_tu_bool(op, "has_biases", &args[3], &has_biases));
  TH_TRY(th_meta_int(op, "num_layers", &args[4], &num_layers));
  TH_TRY(th_tu_float(op, "dropout", &args[5], &p));
  TH_TRY(th_tu_bool(op, "train", &args[6], &train));
  TH_TRY(th_tu_bool(op, "bidirectional", &args[7], &bidirectional));
  TH_TRY(th_tu_bool(op, "batch_first", &args[8], &batch_first));
  const int64_t D = bidirectional ? 2 : 1;
  if (num_layers <= 0 || np % (num_layers * D) != 0)
    return th_error(TH_ERR_RUNTIME, "%s: %d parameters do not divide into %lld layers x %lld directions", op, np,
                    (long long)num_layers, (long long)D);
  const int per = (int)(np / (num_layers * D));
  const int want = has_biases ? 4 : 2;
  const bool proj = kind == CELL_LSTM && per == want + 1;
  if (per != want && !proj)
    return th_error(TH_ERR_RUNTIME, "%s: expected %d parameters per layer and direction, got %d", op, want, per);
  th_arg x = args[0];
  if (val(&x)->ndim != 3)
    return th_error(TH_ERR_RUNTIME, "%s: input must have 3 dimensions, got %d", op, val(&x)->ndim);
  if (batch_first) TH_TRY(transpose01(tr, x, &x)); /* (T, N, I) */
  const int64_t T = val(&x)->shape[0];
  const int64_t gates = kind == CELL_LSTM ? 4 : kind == CELL_GRU ? 3 : 1;
  th_arg *hn = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(num_layers * D));
  th_arg *cn = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(num_layers * D));
  th_arg *steps = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(T ? T : 1));
  if (!hn || !cn || !steps) return th_error(TH_ERR_NOMEM, "%s: out of memory", op);
  for (int64_t l = 0; l < num_layers; l++) {
    th_arg dirs[2];
    for (int64_t d = 0; d < D; d++) {
      const th_arg *w = &params[(l * D + d) * per];
      th_arg w_ih = w[0], w_hh = w[1], b_ih = has_biases ? w[2] : th_arg_none(),
             b_hh = has_biases ? w[3] : th_arg_none();
      th_arg w_hr = proj ? w[want] : th_arg_none();
      const int64_t hs = val(&w_hh)->shape[0] / gates;
      th_arg h, c = th_arg_none(), xp;
      TH_TRY(step_slice(tr, hx[0], l * D + d, &h));
      if (kind == CELL_LSTM) TH_TRY(step_slice(tr, hx[1], l * D + d, &c));
      TH_TRY(linear(tr, x, w_ih, b_ih, &xp)); /* every step's input projection: (T, N, gates * hs) */
      for (int64_t s = 0; s < T; s++) {
        int64_t t = d == 0 ? s : T - 1 - s;
        th_arg xi;
        TH_TRY(step_slice(tr, xp, t, &xi));
        TH_TRY(cell(tr, kind, xi, &h, &c, w_hh, b_hh, w_hr, hs));
        steps[t] = h;
      }
      if (T > 0) {
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_stack, th_arg_list((int)T, steps), th_arg_int(0), &dirs[d]));
      } else {
        const th_value *hv = val(&h);
        int64_t s3[3] = {0, hv->shape[0], hv->shape[1]};
        TH_TRY(th_tu_full(tr, 3, s3, th_arg_int(0), hv->device, hv->dtype, &dirs[d]));
      }
      hn[l * D + d] = h;
      cn[l * D + d] = c;
    }
    if (D == 2)
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(2, dirs), th_arg_int(-1), &x));
    else
      x = dirs[0];
    if (train && p > 0.0 && l < num_layers - 1) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_dropout, x, th_arg_float(p), &x));
  }
  if (batch_first) TH_TRY(transpose01(tr, x, &x));
  th_arg res[3] = {x};
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_stack, th_arg_list((int)(num_layers * D), hn), th_arg_int(0), &res[1]));
  if (kind != CELL_LSTM) return th_tu_tuple_out(tr, 2, res, out);
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_stack, th_arg_list((int)(num_layers * D), cn), th_arg_int(0), &res[2]));
  return th_tu_tuple_out(tr, 3, res, out);
}

th_status ltorch_lstm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rnn_decomp(tr, sym->qualname, CELL_LSTM, args, out);
}

th_status ltorch_gru_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rnn_decomp(tr, sym->qualname, CELL_GRU, args, out);
}

th_status ltorch_rnn_tanh_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rnn_decomp(tr, sym->qualname, CELL_TANH, args, out);
}

th_status ltorch_rnn_relu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rnn_decomp(tr, sym->qualname, CELL_RELU, args, out);
}
