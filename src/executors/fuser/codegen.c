/* codegen.c — one C function per fusion region.
 *
 * fusion_kernel(char **ptrs, const int64_t *shape, const int64_t *st): slot k (the region's inputs,
 * then its outputs; th_fuser_region.slots) has base ptrs[k] and element strides st[k*ndim + d] (0 for
 * broadcast dims), so strided, transposed and broadcast inputs are read in place. The loop nest runs
 * over the output shape: all dims but the last collapse into one index, the last is cut into chunks of
 * 4096, and `#pragma omp parallel for` runs over (outer index, chunk) when the region has at least 32768
 * elements; the innermost loop has a contiguous variant (every slot's last stride 1) the compiler
 * vectorizes, and a strided one.
 *
 * Values are computed per compute class, as the eager executor does: float for f16/bf16/f32, double for
 * f64, int64 for integers and bool. Every intermediate is rounded to its dtype (f16/bf16 through the
 * same conversions as core/scalar.h, emitted as inline helpers; integers keep their low bits; bool is
 * 0/1), so results are the eager executor's bit for bit where the ops are exact. An op's expression is
 * its ops.def cexpr with %0 %1 %2 replaced by the operands (cast to the op's compute type; constants
 * cast to the op's dtype first, as eager casts wrapped scalars); the codegen knows no op by name, only
 * the CONVERT tag and broadcast_in_dim (index math). */
#include <math.h>
#include <string.h>

#include "core/scalar.h"
#include "executors/fuser/fuser.h"

static int dclass(th_dtype d) { return d == TH_F64 ? 1 : (d == TH_F16 || d == TH_BF16 || d == TH_F32) ? 0 : 2; }
static const char *ctype(th_dtype d) {
  static const char *const names[] = {"float", "double", "int64_t"};
  return names[dclass(d)];
}

static const char *elem_type(th_dtype d) {
  switch (d) {
    case TH_F32: return "float";
    case TH_F64: return "double";
    case TH_F16:
    case TH_BF16: return "uint16_t";
    case TH_I64: return "int64_t";
    case TH_I32: return "int32_t";
    case TH_I16: return "int16_t";
    case TH_I8: return "int8_t";
    default: return "uint8_t"; /* u8, bool */
  }
}

/* Rounds expression e (already of d's compute type) to dtype d. */
static void put_round(th_strbuf *sb, th_dtype d, const char *e) {
  switch (d) {
    case TH_F16: th_sb_printf(sb, "th_r_f16(%s)", e); break;
    case TH_BF16: th_sb_printf(sb, "th_r_bf16(%s)", e); break;
    case TH_I32: th_sb_printf(sb, "(int64_t)(int32_t)(%s)", e); break;
    case TH_I16: th_sb_printf(sb, "(int64_t)(int16_t)(%s)", e); break;
    case TH_I8: th_sb_printf(sb, "(int64_t)(int8_t)(%s)", e); break;
    case TH_U8: th_sb_printf(sb, "(int64_t)(uint8_t)(%s)", e); break;
    case TH_BOOL: th_sb_printf(sb, "(int64_t)((%s) != 0)", e); break;
    default: th_sb_printf(sb, "(%s)", e); break;
  }
}

static void put_load(th_strbuf *sb, th_dtype d, int k, const char *idx) {
  switch (d) {
    case TH_F16: th_sb_printf(sb, "th_f16_to_f32(p%d[%s])", k, idx); break;
    case TH_BF16: th_sb_printf(sb, "th_bf16_to_f32(p%d[%s])", k, idx); break;
    case TH_BOOL: th_sb_printf(sb, "(int64_t)(p%d[%s] != 0)", k, idx); break;
    case TH_F32:
    case TH_F64: th_sb_printf(sb, "p%d[%s]", k, idx); break;
    default: th_sb_printf(sb, "(int64_t)p%d[%s]", k, idx); break;
  }
}

static void put_store(th_strbuf *sb, th_dtype d, int k, const char *idx, const char *v) {
  switch (d) {
    case TH_F16: th_sb_printf(sb, "p%d[%s] = th_f32_to_f16(%s);", k, idx, v); break;
    case TH_BF16: th_sb_printf(sb, "p%d[%s] = th_f32_to_bf16(%s);", k, idx, v); break;
    case TH_BOOL: th_sb_printf(sb, "p%d[%s] = (uint8_t)(%s != 0);", k, idx, v); break;
    default: th_sb_printf(sb, "p%d[%s] = (%s)%s;", k, idx, elem_type(d), v); break;
  }
}

/* A constant cast to dtype d (eager's wrapped-scalar cast), as a literal of d's compute type. */
static void put_const(th_strbuf *sb, const th_arg *a, th_dtype d) {
  unsigned char buf[16];
  if (a->kind == TH_ARG_FLOAT) th_store_f64(buf, d, a->u.f);
  else th_store_i64(buf, d, a->kind == TH_ARG_BOOL ? (int64_t)a->u.b : a->u.i);
  int c = dclass(d);
  if (c == 2) {
    th_sb_printf(sb, "((int64_t)0x%llxULL)", (unsigned long long)th_load_i64(buf, d));
    return;
  }
  double x = c == 0 ? (double)th_load_f32(buf, d) : th_load_f64(buf, d);
  const char *t = ctype(d);
  if (isnan(x)) th_sb_printf(sb, "((%s)NAN)", t);
  else if (isinf(x)) th_sb_printf(sb, "(%s(%s)INFINITY)", x < 0 ? "-" : "", t);
  else th_sb_printf(sb, "((%s)%a)", t, x);
}

static const char helpers[] =
    "#include <stdint.h>\n#include <string.h>\n#include <tgmath.h>\n\n"
    "static inline uint32_t th_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
    "static inline float th_from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }\n"
    "static inline uint16_t th_f32_to_f16(float x) {\n"
    "  uint32_t w = th_bits(x); uint16_t sign = (uint16_t)((w >> 16) & 0x8000u); uint32_t a = w & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
    "  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);\n"
    "  if (a >= 0x38800000u) { uint32_t r = a + 0x0fffu + ((a >> 13) & 1u); return (uint16_t)(sign | ((r - 0x38000000u) >> 13)); }\n"
    "  float s = th_from_bits(a) + 0.5f; return (uint16_t)(sign | (th_bits(s) - 0x3f000000u));\n}\n"
    "static inline float th_f16_to_f32(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16; uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "  if (e == 0x1f) return th_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));\n"
    "  if (e != 0) return th_from_bits(sign | ((e + 112u) << 23) | (m << 13));\n"
    "  float v = (float)m * 0x1p-24f; return sign ? -v : v;\n}\n"
    "static inline uint16_t th_f32_to_bf16(float x) {\n"
    "  uint32_t w = th_bits(x); if ((w & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;\n"
    "  return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);\n}\n"
    "static inline float th_bf16_to_f32(uint16_t h) { return th_from_bits((uint32_t)h << 16); }\n"
    "static inline float th_r_f16(float x) { return th_f16_to_f32(th_f32_to_f16(x)); }\n"
    "static inline float th_r_bf16(float x) { return th_bf16_to_f32(th_f32_to_bf16(x)); }\n\n";

void th_fuser_region_clear(th_fuser_region *r) {
  th_free(r->slots);
  th_free(r->source);
  memset(r, 0, sizeof *r);
}

/* the sub producing v, or -1 */
static int producer(const th_bsym *rb, int upto, const th_value *v) {
  for (int j = 0; j < upto; j++)
    if (rb->subs[j]->out.u.value == v) return j;
  return -1;
}

static int find_slot(const th_fuser_region *r, int n, const th_value *v, bool bcast, const int *map) {
  for (int k = 0; k < n; k++)
    if (r->slots[k].v == v && r->slots[k].bcast == bcast &&
        (!bcast || !memcmp(r->slots[k].map, map, sizeof(int) * TH_MAX_DIMS)))
      return k;
  return -1;
}

/* The body for one element; idx(k) is "b<k> + i" or "b<k> + i * s<k>". */
static void put_body(th_strbuf *sb, const th_bsym *rb, const th_fuser_region *r, const int *sub_slot,
                     bool contiguous) {
  char idx[64], name[32], e[32];
  for (int k = 0; k < r->nin; k++) {
    snprintf(idx, sizeof idx, contiguous ? "b%d + i" : "b%d + i * s%d", k, k);
    th_sb_printf(sb, "      const %s a%d = ", ctype(r->slots[k].v->dtype), k);
    put_load(sb, r->slots[k].v->dtype, k, idx);
    th_sb_puts(sb, ";\n");
  }
  for (int j = 0; j < rb->nsubs; j++) {
    const th_bsym *b = rb->subs[j];
    const th_value *o = b->out.u.value;
    th_sb_printf(sb, "      const %s v%d = ", ctype(o->dtype), j);
    if (sub_slot[j] >= 0) { /* broadcast_in_dim: a load through its slot */
      th_sb_printf(sb, "a%d;\n", sub_slot[j]);
      continue;
    }
    /* operand names */
    const char *opn[8];
    char opbuf[8][32];
    for (int i = 0; i < b->nargs && i < 8; i++) {
      opn[i] = NULL;
      if (b->args[i].kind != TH_ARG_VALUE) continue;
      const th_value *v = b->args[i].u.value;
      int p = producer(rb, j, v);
      if (p >= 0) snprintf(opbuf[i], sizeof opbuf[i], "v%d", p);
      else snprintf(opbuf[i], sizeof opbuf[i], "a%d", find_slot(r, r->nin, v, false, NULL));
      opn[i] = opbuf[i];
    }
    if (b->sym->tags & TH_TAG_CONVERT) {
      snprintf(e, sizeof e, "(%s)%s", ctype(o->dtype), opn[0]);
      if (o->dtype == TH_BOOL) th_sb_printf(sb, "(int64_t)(%s != 0)", opn[0]);
      else put_round(sb, o->dtype, e);
      th_sb_puts(sb, ";\n");
      continue;
    }
    th_dtype d = o->dtype;
    if (o->dtype == TH_BOOL)
      for (int i = 0; i < b->nargs; i++)
        if (b->args[i].kind == TH_ARG_VALUE) d = b->args[i].u.value->dtype;
    th_strbuf ex;
    th_sb_init(&ex);
    for (const char *p = b->sym->cexpr; *p; p++) {
      if (*p == '%' && p[1] >= '0' && p[1] <= '9') {
        int i = p[1] - '0';
        p++;
        if (i >= b->nargs) continue;
        if (opn[i]) th_sb_printf(&ex, "((%s)%s)", ctype(d), opn[i]);
        else put_const(&ex, &b->args[i], d);
      } else {
        th_sb_putc(&ex, *p);
      }
    }
    char *exs = th_sb_take(&ex);
    if (o->dtype == TH_BOOL) {
      th_sb_printf(sb, "(int64_t)((%s) != 0)", exs ? exs : "0");
    } else {
      th_strbuf c2;
      th_sb_init(&c2);
      th_sb_printf(&c2, "(%s)(%s)", ctype(o->dtype), exs ? exs : "0");
      char *cs = th_sb_take(&c2);
      put_round(sb, o->dtype, cs ? cs : "0");
      th_free(cs);
    }
    th_free(exs);
    th_sb_puts(sb, ";\n");
  }
  for (int k = r->nin; k < r->nin + r->nout; k++) {
    snprintf(idx, sizeof idx, contiguous ? "b%d + i" : "b%d + i * s%d", k, k);
    int p = producer(rb, rb->nsubs, r->slots[k].v);
    snprintf(name, sizeof name, "v%d", p);
    th_sb_puts(sb, "      ");
    put_store(sb, r->slots[k].v->dtype, k, idx, name);
    th_sb_puts(sb, "\n");
  }
}

th_status th_fuser_codegen(const th_bsym *rb, th_fuser_region *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", rb->sym->name);
  if (rb->nsubs < 1 || rb->out.kind != TH_ARG_LIST)
    return th_error(TH_ERR_VALUE, "%s: not a fusion region", rb->sym->qualname);
  int nouts = rb->out.u.seq.n, maxslots = nouts;
  for (int j = 0; j < rb->nsubs; j++) maxslots += rb->subs[j]->nargs;
  r->slots = th_calloc((size_t)maxslots, sizeof(th_fuser_slot));
  int *sub_slot = th_malloc(sizeof(int) * (size_t)rb->nsubs);
  if (!r->slots || !sub_slot) {
    th_free(sub_slot);
    th_fuser_region_clear(r);
    return th_error(TH_ERR_NOMEM, "out of memory generating %s", rb->sym->qualname);
  }
  const th_value *o0 = rb->subs[rb->nsubs - 1]->out.u.value;
  r->ndim = o0->ndim;
  int n = 0;
  for (int j = 0; j < rb->nsubs; j++) {
    const th_bsym *b = rb->subs[j];
    sub_slot[j] = -1;
    if (b->sym->id == TH_OP_prims_broadcast_in_dim) {
      const th_value *a = b->args[0].u.value, *o = b->out.u.value;
      int map[TH_MAX_DIMS];
      for (int d = 0; d < TH_MAX_DIMS; d++) map[d] = -1;
      const th_arg *bd = &b->args[2];
      for (int k = 0; k < a->ndim && k < bd->u.seq.n; k++) {
        int64_t d = bd->u.seq.items[k].u.i;
        if (d >= 0 && d < o->ndim && a->shape[k] == o->shape[d]) map[d] = k;
      }
      int k = find_slot(r, n, a, true, map);
      if (k < 0) {
        k = n++;
        r->slots[k].v = a;
        r->slots[k].bcast = true;
        memcpy(r->slots[k].map, map, sizeof map);
      }
      sub_slot[j] = k;
      continue;
    }
    for (int i = 0; i < b->nargs; i++) {
      if (b->args[i].kind != TH_ARG_VALUE) continue;
      const th_value *v = b->args[i].u.value;
      if (producer(rb, j, v) >= 0 || find_slot(r, n, v, false, NULL) >= 0) continue;
      r->slots[n].v = v;
      n++;
    }
  }
  r->nin = n;
  for (int i = 0; i < nouts; i++) r->slots[n + i].v = rb->out.u.seq.items[i].u.value;
  r->nout = nouts;
  int ns = r->nin + r->nout, nd = r->ndim;

  th_strbuf sb;
  th_sb_init(&sb);
  th_sb_puts(&sb, helpers);
  th_sb_puts(&sb, "void fusion_kernel(char **ptrs, const int64_t *shape, const int64_t *st) {\n");
  for (int k = 0; k < ns; k++)
    th_sb_printf(&sb, "  %s%s *restrict p%d = (%s%s *)ptrs[%d];\n", k < r->nin ? "const " : "",
                 elem_type(r->slots[k].v->dtype), k, k < r->nin ? "const " : "", elem_type(r->slots[k].v->dtype), k);
  if (nd == 0) {
    th_sb_puts(&sb, "  (void)shape; (void)st;\n  {\n    const int64_t i = 0;\n");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, "    const int64_t b%d = 0;\n", k);
    th_sb_puts(&sb, "    {\n");
    put_body(&sb, rb, r, sub_slot, true);
    th_sb_puts(&sb, "    }\n  }\n}\n");
  } else {
    th_sb_printf(&sb, "  const int64_t inner = shape[%d];\n  int64_t nouter = 1;\n", nd - 1);
    th_sb_printf(&sb, "  for (int d = 0; d < %d; d++) nouter *= shape[d];\n", nd - 1);
    th_sb_puts(&sb, "  if (nouter == 0 || inner == 0) return;\n"
                    "  const int64_t nch = (inner + 4095) / 4096, total = nouter * nch;\n");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, "  const int64_t s%d = st[%d];\n", k, k * nd + nd - 1);
    th_sb_puts(&sb, "  int contiguous = 1");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, " && s%d == 1", k);
    th_sb_puts(&sb, ";\n  #pragma omp parallel for schedule(static) if (nouter * inner >= 32768)\n"
                    "  for (int64_t q = 0; q < total; q++) {\n"
                    "    int64_t rem = q / nch;\n    const int64_t i0 = (q % nch) * 4096;\n"
                    "    const int64_t i1 = inner - i0 < 4096 ? inner : i0 + 4096;\n");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, "    int64_t b%d = i0 * s%d;\n", k, k);
    if (nd > 1) {
      th_sb_printf(&sb, "    for (int d = %d; d >= 0; d--) {\n      const int64_t id = rem %% shape[d];\n"
                        "      rem /= shape[d];\n", nd - 2);
      for (int k = 0; k < ns; k++) th_sb_printf(&sb, "      b%d += id * st[%d + d];\n", k, k * nd);
      th_sb_puts(&sb, "    }\n");
    } else {
      th_sb_puts(&sb, "    (void)rem;\n");
    }
    th_sb_puts(&sb, "    if (contiguous) {\n");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, "      b%d -= i0;\n", k);
    th_sb_puts(&sb, "      for (int64_t i = i0; i < i1; i++) {\n");
    put_body(&sb, rb, r, sub_slot, true);
    th_sb_puts(&sb, "      }\n    } else {\n");
    for (int k = 0; k < ns; k++) th_sb_printf(&sb, "      b%d -= i0 * s%d;\n", k, k);
    th_sb_puts(&sb, "      for (int64_t i = i0; i < i1; i++) {\n");
    put_body(&sb, rb, r, sub_slot, false);
    th_sb_puts(&sb, "      }\n    }\n  }\n}\n");
  }
  th_free(sub_slot);
  r->source = th_sb_take(&sb);
  if (!r->source) {
    th_fuser_region_clear(r);
    return th_error(TH_ERR_NOMEM, "out of memory generating %s", rb->sym->qualname);
  }
  return TH_OK;
}
