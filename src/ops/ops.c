/* ops.c — the op table: the descriptors generated from ops.def, schema parsing, and the public view of
 * the table (thunder/trace.h th_op_*).
 *
 * The table is installed into core's symbol table when the library is loaded (th_ops_install), which is
 * where lookup by id, qualified name, alias ("torch.nn.functional.linear", "Tensor.to") and bare name
 * happens. Its schemas are parsed once, before the first lookup (core runs build_table under
 * call_once): each row's schema string becomes a th_schema so the binder, printer and parser all read
 * one definition. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"

static th_symbol table[TH_OP_COUNT + 1] = {
#define TH_PRIM(nm, sch, tg, mt, cx)                                                                                   \
  {TH_OP_prims_##nm, "prims", #nm, "prims." #nm, sch, tg, true, mt, NULL, cx, NULL, {0, NULL, TH_RT_NONE, 0}, NULL},
#define TH_TORCH(nm, sch, tg, dc, al)                                                                                  \
  {TH_OP_ltorch_##nm, "ltorch", #nm, "ltorch." #nm, sch, tg, false, NULL, dc, NULL, al, {0, NULL, TH_RT_NONE, 0}, NULL},
#include "ops/ops.def"
#undef TH_PRIM
#undef TH_TORCH
};

static th_arena *schema_arena; /* lives for the process */

/* ---- schema parsing ------------------------------------------------------------------------------
 * One parser for the rows of ops.def and for the schemas of ops registered at run time
 * (th_op_register): the built-in rows must parse (TH_ASSERT); a registered schema is checked strictly
 * and rejected with TH_ERR_VALUE naming what is wrong. */

static const char *skip_ws(const char *p) {
  while (*p == ' ') p++;
  return p;
}

static void trim(const char **s, size_t *n) {
  while (*n && **s == ' ') (*s)++, (*n)--;
  while (*n && (*s)[*n - 1] == ' ') (*n)--;
}

/* Parses a default-value literal: None True False ints floats 'str' "str" (..) [..] of ints. */
static bool parse_default(th_arena *arena, const char *s, size_t n, th_arg *out) {
  char buf[128];
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  if (!strcmp(buf, "None")) {
    *out = th_arg_none();
    return true;
  }
  if (!strcmp(buf, "True")) {
    *out = th_arg_bool(true);
    return true;
  }
  if (!strcmp(buf, "False")) {
    *out = th_arg_bool(false);
    return true;
  }
  if (buf[0] == '\'' || buf[0] == '"') {
    if (n < 2 || buf[n - 1] != buf[0]) return false;
    const char *str = th_arena_strndup(arena, buf + 1, n - 2);
    if (!str) return false;
    *out = th_arg_str(str);
    return true;
  }
  if (buf[0] == '(' || buf[0] == '[') {
    th_arg items[TH_MAX_DIMS];
    int k = 0;
    char *p = buf + 1;
    char close = buf[0] == '(' ? ')' : ']';
    if (buf[n - 1] != close) return false;
    while (*p && *p != close) {
      while (*p == ' ' || *p == ',') p++;
      if (*p == close) break;
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end == p || k == TH_MAX_DIMS) return false;
      items[k++] = th_arg_int(v);
      p = end;
      while (*p == ' ') p++;
      if (*p != ',' && *p != close) return false;
    }
    if (p != buf + n - 1) return false;
    th_arg *arr = th_arena_alloc(arena, sizeof(th_arg) * (size_t)(k ? k : 1));
    if (!arr) return false;
    memcpy(arr, items, sizeof(th_arg) * (size_t)k);
    *out = buf[0] == '(' ? th_arg_tuple(k, arr) : th_arg_list(k, arr);
    return true;
  }
  char *end;
  if (strpbrk(buf, ".eE") || !strcmp(buf, "inf") || !strcmp(buf, "-inf")) {
    double d = strtod(buf, &end);
    if (*end) return false;
    *out = th_arg_float(d);
    return true;
  }
  long long v = strtoll(buf, &end, 10);
  if (*end || end == buf) return false;
  *out = th_arg_int(v);
  return true;
}

static bool parse_type(const char *t, size_t n, th_ptype *type, bool *optional) {
  static const struct {
    const char *name;
    th_ptype type;
  } types[] = {
    {"Tensor[]", TH_PT_TENSOR_LIST}, {"Tensor", TH_PT_TENSOR},  {"TensorOrScalar", TH_PT_TENSOR_OR_SCALAR},
    {"Scalar", TH_PT_SCALAR},        {"int[]", TH_PT_INT_LIST}, {"int", TH_PT_INT},
    {"float", TH_PT_FLOAT},          {"bool", TH_PT_BOOL},      {"str", TH_PT_STR},
    {"ScalarType", TH_PT_DTYPE},     {"Device", TH_PT_DEVICE},  {"Any", TH_PT_ANY},
  };
  *optional = n > 0 && t[n - 1] == '?';
  if (*optional) n--;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strlen(types[i].name) == n && !strncmp(types[i].name, t, n)) {
      *type = types[i].type;
      return true;
    }
  return false;
}

#define SCHEMA_MAX_PARAMS 32

static th_status schema_error(const char *text, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return th_error(TH_ERR_VALUE, "invalid schema '%.200s': %s", text, msg);
}

static bool ident_n(const char *s, size_t n) {
  char buf[128];
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  return th_is_py_name(buf);
}

th_status th_schema_parse(const char *text, th_arena *arena, bool strict, th_schema *out, const char **name,
                          size_t *name_len) {
  const char *p = strchr(text, '(');
  if (!p) return schema_error(text, "expected 'name(parameters) -> returns'");
  {
    const char *nm = text;
    size_t nl = (size_t)(p - text);
    trim(&nm, &nl);
    if (strict && !ident_n(nm, nl)) return schema_error(text, "the op name before '(' must be a Python identifier");
    if (name) *name = nm;
    if (name_len) *name_len = nl;
  }
  p++;
  th_param params[SCHEMA_MAX_PARAMS];
  int np = 0;
  bool kwonly = false, slash = false, seen_default = false;
  while (*(p = skip_ws(p)) && *p != ')') {
    const char *start = p;
    int depth = 0;
    while (*p && !(depth == 0 && (*p == ',' || *p == ')'))) {
      if (*p == '\'' || *p == '"') { /* a quoted default: skip to its closing quote */
        const char *q = strchr(p + 1, *p);
        if (!q) return schema_error(text, "unterminated string");
        p = q + 1;
        continue;
      }
      if (*p == '(' || *p == '[') depth++;
      if (*p == ')' || *p == ']') depth--;
      p++;
    }
    if (!*p) return schema_error(text, "missing ')' after the parameters");
    size_t len = (size_t)(p - start);
    trim(&start, &len);
    if (*p == ',') p++;
    if (len == 0) return schema_error(text, "empty parameter");
    if (len == 1 && *start == '/') {
      if (strict && (slash || kwonly || np == 0)) return schema_error(text, "misplaced '/'");
      for (int i = 0; i < np; i++) params[i].posonly = true;
      slash = true;
      continue;
    }
    if (len == 1 && *start == '*') {
      if (strict && kwonly) return schema_error(text, "'*' given twice");
      kwonly = true;
      continue;
    }
    if (np == SCHEMA_MAX_PARAMS) return schema_error(text, "more than %d parameters", SCHEMA_MAX_PARAMS);
    th_param *pr = &params[np++];
    memset(pr, 0, sizeof *pr);
    const char *sp = memchr(start, ' ', len);
    if (!sp) return schema_error(text, "parameter '%.*s' needs a type and a name", (int)len, start);
    if (!parse_type(start, (size_t)(sp - start), &pr->type, &pr->optional))
      return schema_error(text,
                          "unknown type '%.*s' (expected Tensor, Tensor?, Tensor[], TensorOrScalar, "
                          "Scalar, int, int[], float, bool, str, ScalarType, Device or Any, '?' for optional)",
                          (int)(sp - start), start);
    const char *nm = sp + 1;
    const char *eq = memchr(nm, '=', len - (size_t)(nm - start));
    size_t nmlen = eq ? (size_t)(eq - nm) : len - (size_t)(nm - start);
    trim(&nm, &nmlen);
    if (strict && !ident_n(nm, nmlen))
      return schema_error(text, "parameter name '%.*s' is not a Python identifier", (int)nmlen, nm);
    if (!(pr->name = th_arena_strndup(arena, nm, nmlen))) return TH_ERR_NOMEM;
    for (int i = 0; strict && i < np - 1; i++)
      if (!strcmp(params[i].name, pr->name)) return schema_error(text, "duplicate parameter '%s'", pr->name);
    pr->kwonly = kwonly;
    if (eq) {
      const char *dv = eq + 1;
      size_t dl = len - (size_t)(eq + 1 - start);
      trim(&dv, &dl);
      pr->has_default = true;
      if (!parse_default(arena, dv, dl, &pr->deflt))
        return schema_error(text, "cannot read the default of '%s' ('%.*s')", pr->name, (int)dl, dv);
      if (strict && pr->deflt.kind == TH_ARG_NONE && !pr->optional && pr->type != TH_PT_ANY)
        return schema_error(text, "'%s' defaults to None, but its type is not optional (add '?')", pr->name);
      seen_default |= !kwonly;
    } else if (strict && seen_default && !kwonly) {
      return schema_error(text, "parameter '%s' without a default follows one with a default", pr->name);
    }
  }
  if (*p != ')') return schema_error(text, "missing ')' after the parameters");
  out->nparams = np;
  if (!(out->params = th_arena_alloc(arena, sizeof(th_param) * (size_t)(np ? np : 1)))) return TH_ERR_NOMEM;
  memcpy(out->params, params, sizeof(th_param) * (size_t)np);
  const char *r = skip_ws(p + 1);
  if (strncmp(r, "->", 2)) return schema_error(text, "expected '->' and the return type after ')'");
  r = skip_ws(r + 2);
  size_t rl = strlen(r);
  while (rl && r[rl - 1] == ' ') rl--;
  out->nret = 0;
  if (rl == 8 && !strncmp(r, "Tensor[]", 8))
    out->ret = TH_RT_TENSOR_LIST;
  else if (rl == 6 && !strncmp(r, "Tensor", 6))
    out->ret = TH_RT_TENSOR;
  else if (rl == 4 && !strncmp(r, "None", 4))
    out->ret = TH_RT_NONE;
  else if (rl && *r == '(' && r[rl - 1] == ')') {
    out->ret = TH_RT_TUPLE;
    int k = 0;
    const char *q = r + 1;
    for (;;) { /* "(Tensor, Tensor)" */
      q = skip_ws(q);
      if (strncmp(q, "Tensor", 6)) return schema_error(text, "a returned tuple holds Tensors only");
      q = skip_ws(q + 6);
      k++;
      if (*q == ',') {
        q++;
        continue;
      }
      if (*q == ')' && q == r + rl - 1) break;
      return schema_error(text, "a returned tuple holds Tensors only");
    }
    out->nret = k;
  } else if (!strict)
    out->ret = TH_RT_ANY;
  else
    return schema_error(text, "the return type must be Tensor, Tensor[], (Tensor, ...) or None");
  return TH_OK;
}

/* A row of ops.def (a malformed row is a programming error). */
static void parse_schema(th_symbol *s) {
  TH_ASSERT(th_schema_parse(s->schema_text, schema_arena, false, &s->schema, NULL, NULL) == TH_OK);
}

static void build_table(void) {
  schema_arena = th_arena_new();
  TH_ASSERT(schema_arena);
  for (int i = 0; i < TH_OP_COUNT; i++) parse_schema(&table[i]);
}

__attribute__((constructor)) void th_ops_install(void) {
  static const th_symtab_builtins builtins = {table, TH_OP_COUNT, build_table, th_autocast_tag_rule};
  th_symtab_install(&builtins);
}

/* ---- the public op table (thunder/trace.h) ------------------------------------------------------- */

int th_op_count(void) { return TH_OP_COUNT; }

const char *th_op_qualname(int i) {
  const th_symbol *s = th_symbol_get((th_op_id)i);
  return s ? s->qualname : NULL;
}

const char *th_op_aliases(int i) {
  const th_symbol *s = th_symbol_get((th_op_id)i);
  return s ? (s->aliases ? s->aliases : "") : NULL;
}

const char *th_op_schema(int i) {
  const th_symbol *s = th_symbol_get((th_op_id)i);
  return s ? s->schema_text : NULL;
}

unsigned th_op_flags(int i) {
  const th_symbol *s = th_symbol_get((th_op_id)i);
  if (!s) return 0;
  unsigned f = 0;
  if (s->is_prim) f |= TH_OPF_PRIM;
  if (s->tags & TH_TAG_IN_PLACE) f |= TH_OPF_IN_PLACE;
  if (s->tags & TH_TAG_VIEW) f |= TH_OPF_VIEW;
  if (s->tags & TH_TAG_RANDOM) f |= TH_OPF_RANDOM;
  if (s->tags & TH_TAG_UTILITY) f |= TH_OPF_UTILITY;
  return f;
}
