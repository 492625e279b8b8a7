/* ops.c — the op table: the descriptors generated from ops.def, schema parsing and symbol lookup.
 *
 * The table is built once (thread-safe, call_once): each row's schema string is parsed into a
 * th_schema so the binder, printer and parser all read one definition. Aliases map the names that
 * Thunder's printed traces use ("torch.nn.functional.linear", "Tensor.to") to our symbols. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "ops/ops_internal.h"

static th_symbol table[TH_OP_COUNT + 1] = {
#define TH_PRIM(nm, sch, tg, mt, cx) \
  {TH_OP_prims_##nm, "prims", #nm, "prims." #nm, sch, tg, true, mt, NULL, cx, NULL, {0, NULL, TH_RT_NONE, 0}, NULL},
#define TH_TORCH(nm, sch, tg, dc, al) \
  {TH_OP_ltorch_##nm, "ltorch", #nm, "ltorch." #nm, sch, tg, false, NULL, dc, NULL, al, {0, NULL, TH_RT_NONE, 0}, NULL},
#include "ops/ops.def"
#undef TH_PRIM
#undef TH_TORCH
};

static once_flag table_once = ONCE_FLAG_INIT;
static th_arena *schema_arena; /* lives for the process */

/* ---- schema parsing ------------------------------------------------------------------------------ */

static const char *skip_ws(const char *p) {
  while (*p == ' ') p++;
  return p;
}

/* Parses a default-value literal: None True False ints floats 'str' "str" (..) [..] of ints. */
static bool parse_default(const char *s, size_t n, th_arg *out) {
  char buf[128];
  if (n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  if (!strcmp(buf, "None")) { *out = th_arg_none(); return true; }
  if (!strcmp(buf, "True")) { *out = th_arg_bool(true); return true; }
  if (!strcmp(buf, "False")) { *out = th_arg_bool(false); return true; }
  if (buf[0] == '\'' || buf[0] == '"') {
    if (n < 2) return false;
    *out = th_arg_str(th_arena_strndup(schema_arena, buf + 1, n - 2));
    return true;
  }
  if (buf[0] == '(' || buf[0] == '[') {
    th_arg items[TH_MAX_DIMS];
    int k = 0;
    char *p = buf + 1;
    while (*p && *p != ')' && *p != ']') {
      while (*p == ' ' || *p == ',') p++;
      if (*p == ')' || *p == ']') break;
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end == p || k == TH_MAX_DIMS) return false;
      items[k++] = th_arg_int(v);
      p = end;
    }
    th_arg *arr = th_arena_alloc(schema_arena, sizeof(th_arg) * (size_t)(k ? k : 1));
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
  if (*end) return false;
  *out = th_arg_int(v);
  return true;
}

static bool parse_type(const char *t, size_t n, th_ptype *type, bool *optional) {
  static const struct { const char *name; th_ptype type; } types[] = {
    {"Tensor[]", TH_PT_TENSOR_LIST}, {"Tensor", TH_PT_TENSOR}, {"TensorOrScalar", TH_PT_TENSOR_OR_SCALAR},
    {"Scalar", TH_PT_SCALAR}, {"int[]", TH_PT_INT_LIST}, {"int", TH_PT_INT}, {"float", TH_PT_FLOAT},
    {"bool", TH_PT_BOOL}, {"str", TH_PT_STR}, {"ScalarType", TH_PT_DTYPE}, {"Device", TH_PT_DEVICE},
    {"Any", TH_PT_ANY},
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

/* "name(T a, T b=..., /, *, T c=...) -> Ret". Malformed schemas in ops.def are programming errors. */
static void parse_schema(th_symbol *s) {
  const char *p = strchr(s->schema_text, '(');
  TH_ASSERT(p);
  p++;
  th_param params[32];
  int np = 0;
  bool kwonly = false;
  while (*(p = skip_ws(p)) && *p != ')') {
    const char *start = p;
    int depth = 0;
    while (*p && !(depth == 0 && (*p == ',' || *p == ')'))) {
      if (*p == '(' || *p == '[') depth++;
      if (*p == ')' || *p == ']') depth--;
      p++;
    }
    size_t len = (size_t)(p - start);
    if (*p == ',') p++;
    if (len == 1 && *start == '/') {
      for (int i = 0; i < np; i++) params[i].posonly = true;
      continue;
    }
    if (len == 1 && *start == '*') {
      kwonly = true;
      continue;
    }
    TH_ASSERT(np < 32);
    th_param *pr = &params[np++];
    memset(pr, 0, sizeof *pr);
    const char *sp = memchr(start, ' ', len);
    TH_ASSERT(sp);
    TH_ASSERT(parse_type(start, (size_t)(sp - start), &pr->type, &pr->optional));
    const char *nm = sp + 1;
    const char *eq = memchr(nm, '=', len - (size_t)(nm - start));
    size_t nmlen = eq ? (size_t)(eq - nm) : len - (size_t)(nm - start);
    pr->name = th_arena_strndup(schema_arena, nm, nmlen);
    pr->kwonly = kwonly;
    if (eq) {
      pr->has_default = true;
      TH_ASSERT(parse_default(eq + 1, len - (size_t)(eq + 1 - start), &pr->deflt));
    }
  }
  s->schema.nparams = np;
  s->schema.params = th_arena_alloc(schema_arena, sizeof(th_param) * (size_t)(np ? np : 1));
  memcpy(s->schema.params, params, sizeof(th_param) * (size_t)np);
  const char *r = strstr(p, "->");
  TH_ASSERT(r);
  r = skip_ws(r + 2);
  if (!strncmp(r, "Tensor[]", 8)) s->schema.ret = TH_RT_TENSOR_LIST;
  else if (!strncmp(r, "Tensor", 6)) s->schema.ret = TH_RT_TENSOR;
  else if (!strncmp(r, "None", 4)) s->schema.ret = TH_RT_NONE;
  else if (*r == '(') {
    s->schema.ret = TH_RT_TUPLE;
    int k = 1;
    for (const char *q = r; *q && *q != ')'; q++) k += *q == ',';
    s->schema.nret = k;
  } else s->schema.ret = TH_RT_ANY;
}

static void build_table(void) {
  schema_arena = th_arena_new();
  TH_ASSERT(schema_arena);
  for (int i = 0; i < TH_OP_COUNT; i++) parse_schema(&table[i]);
}

const th_symbol *th_symbol_get(th_op_id id) {
  if ((int)id < 0 || id >= TH_OP_COUNT) return NULL;
  call_once(&table_once, build_table);
  return &table[id];
}

static bool alias_matches(const char *aliases, const char *name) {
  size_t n = strlen(name);
  for (const char *p = aliases; p && *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    p = bar ? bar + 1 : NULL;
  }
  return false;
}

const th_symbol *th_symbol_lookup(const char *name) {
  call_once(&table_once, build_table);
  const th_symbol *bare_prim = NULL;
  for (int i = 0; i < TH_OP_COUNT; i++) {
    const th_symbol *s = &table[i];
    if (!strcmp(s->qualname, name)) return s;
    if (!strcmp(s->name, name)) {
      if (!s->is_prim) return s;
      bare_prim = s;
    }
  }
  for (int i = 0; i < TH_OP_COUNT; i++)
    if (table[i].aliases && alias_matches(table[i].aliases, name)) return &table[i];
  return bare_prim;
}

th_symbol *th_symbol_new_dynamic(th_trace *tr, const char *name) {
  th_symbol *s = th_arena_alloc(tr->arena, sizeof *s);
  if (!s) return NULL;
  s->id = TH_OP_DYNAMIC;
  s->name = s->qualname = th_arena_strdup(tr->arena, name);
  s->schema_text = "";
  s->schema.ret = TH_RT_ANY;
  return s->name ? s : NULL;
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
