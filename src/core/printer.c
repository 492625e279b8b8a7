/* printer.c — a trace as Lightning Thunder prints it (Thunder's trace printer: trace.python()).
 *
 * th_trace_print writes, in order: the provenance line ("# Constructed by ..."), the imports gathered
 * from the top-level bound symbols (sorted by module name, as Thunder does; `import torch` always),
 * the decorators `@torch.no_grad()` / `@no_autocast`, the signature, one type comment per input, then
 * one line per bound symbol with its decomposition underneath as indented comments (to print_depth
 * levels; -1 = all). One bsym line is
 *
 *     <lhs> = <qualname>(<args>)  # <out>: "<type string>"
 *
 * where the arguments follow the symbol's schema (positional-or-keyword parameters positionally,
 * keyword-only ones as name=value), dynamic symbols (fusion regions, executor ops) print their bare
 * name, and the type comment appears only for a single proxy output. Constants print as Python's
 * str()/repr() would: 1e-05, 448.0, float('inf'), 'none', dtypes.bfloat16,
 * devices.Device("cuda:0"), slice(1,None,2).
 *
 * Besides th_trace_print this file exports three helpers the parser, verifier and tests share,
 * declared in core/printer.h (which also states the IR shapes this printer relies on):
 * th_print_bsym_line (one bsym line, as in error messages), th_print_value_type (a proxy's type
 * string, Python float formatting) and th_print_py_float (Python's repr of a float). */
#include <math.h>
#include <string.h>

#include "core/ir.h"
#include "core/printer.h"

/* ---- constants ------------------------------------------------------------------------------------- */

/* Python's repr()/str() of a finite or non-finite float: the shortest digits that round-trip,
 * scientific notation when the decimal exponent is < -4 or >= 16 ("1e-05", "1e+16"), else fixed
 * with at least one fractional digit ("448.0", "0.0001"). Non-finite: "nan", "inf", "-inf". */
void th_print_py_float(double f, char *buf, size_t n) {
  if (isnan(f)) {
    snprintf(buf, n, "nan");
    return;
  }
  if (isinf(f)) {
    snprintf(buf, n, f < 0 ? "-inf" : "inf");
    return;
  }
  char tmp[48];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  /* tmp is "[-]d[.ddd]e[+-]XX": collect the digits and the exponent. */
  const char *p = tmp;
  bool neg = *p == '-';
  if (neg) p++;
  char digits[24];
  int nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.' && nd < 20) digits[nd++] = *p;
  int exp10 = *p == 'e' ? atoi(p + 1) : 0;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
  char out[64];
  size_t k = 0;
#define PUT(c)                                                                                                         \
  do {                                                                                                                 \
    if (k + 1 < sizeof out) out[k++] = (c);                                                                            \
  } while (0)
  if (neg) PUT('-');
  if (decpt <= -4 || decpt > 16) {
    PUT(digits[0]);
    if (nd > 1) {
      PUT('.');
      for (int i = 1; i < nd; i++) PUT(digits[i]);
    }
    out[k] = 0;
    snprintf(buf, n, "%se%c%02d", out, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return;
  }
  if (decpt <= 0) {
    PUT('0');
    PUT('.');
    for (int i = 0; i < -decpt; i++) PUT('0');
    for (int i = 0; i < nd; i++) PUT(digits[i]);
  } else if (decpt < nd) {
    for (int i = 0; i < nd; i++) {
      if (i == decpt) PUT('.');
      PUT(digits[i]);
    }
  } else {
    for (int i = 0; i < nd; i++) PUT(digits[i]);
    for (int i = nd; i < decpt; i++) PUT('0');
    PUT('.');
    PUT('0');
  }
#undef PUT
  out[k] = 0;
  snprintf(buf, n, "%s", out);
}

/* Python repr() of a str: single quotes unless the text has a ' and no ". */
static void put_py_str(th_strbuf *sb, const char *s) {
  char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
  th_sb_putc(sb, q);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '\\': th_sb_puts(sb, "\\\\"); break;
      case '\n': th_sb_puts(sb, "\\n"); break;
      case '\r': th_sb_puts(sb, "\\r"); break;
      case '\t': th_sb_puts(sb, "\\t"); break;
      default:
        if (*p == q) {
          th_sb_putc(sb, '\\');
          th_sb_putc(sb, (char)q);
        } else if (*p < 0x20 || *p == 0x7f) {
          th_sb_printf(sb, "\\x%02x", *p);
        } else {
          th_sb_putc(sb, (char)*p);
        }
    }
  }
  th_sb_putc(sb, q);
}

static void put_slice_part(th_strbuf *sb, bool has, int64_t v) {
  if (has)
    th_sb_printf(sb, "%lld", (long long)v);
  else
    th_sb_puts(sb, "None");
}

static void put_arg(th_strbuf *sb, const th_arg *a) {
  char buf[64];
  switch (a->kind) {
    case TH_ARG_NONE: th_sb_puts(sb, "None"); return;
    case TH_ARG_VALUE: th_sb_puts(sb, a->u.value && a->u.value->name ? a->u.value->name : "<unnamed>"); return;
    case TH_ARG_BOOL: th_sb_puts(sb, a->u.b ? "True" : "False"); return;
    case TH_ARG_INT: th_sb_printf(sb, "%lld", (long long)a->u.i); return;
    case TH_ARG_FLOAT:
      if (isnan(a->u.f))
        th_sb_puts(sb, "float('NaN')");
      else if (isinf(a->u.f))
        th_sb_puts(sb, a->u.f < 0 ? "-float('inf')" : "float('inf')");
      else {
        th_print_py_float(a->u.f, buf, sizeof buf);
        th_sb_puts(sb, buf);
      }
      return;
    case TH_ARG_STR: put_py_str(sb, a->u.s ? a->u.s : ""); return;
    case TH_ARG_DTYPE:
      th_sb_printf(sb, "dtypes.%s", (unsigned)a->u.dtype < TH_DTYPE_COUNT ? th_dtype_name(a->u.dtype) : "?");
      return;
    case TH_ARG_DEVICE:
      th_device_str(a->u.device, buf, sizeof buf);
      th_sb_printf(sb, "devices.Device(\"%s\")", buf);
      return;
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
      th_sb_putc(sb, a->kind == TH_ARG_TUPLE ? '(' : '[');
      for (int i = 0; i < a->u.seq.n; i++) {
        if (i) th_sb_puts(sb, ", ");
        put_arg(sb, &a->u.seq.items[i]);
      }
      if (a->kind == TH_ARG_TUPLE && a->u.seq.n == 1) th_sb_putc(sb, ',');
      th_sb_putc(sb, a->kind == TH_ARG_TUPLE ? ')' : ']');
      return;
    case TH_ARG_DICT:
      th_sb_putc(sb, '{');
      for (int i = 0; i < a->u.seq.n; i++) {
        if (i) th_sb_puts(sb, ", ");
        put_py_str(sb, a->u.seq.keys && a->u.seq.keys[i] ? a->u.seq.keys[i] : "");
        th_sb_puts(sb, ": ");
        put_arg(sb, &a->u.seq.items[i]);
      }
      th_sb_putc(sb, '}');
      return;
    case TH_ARG_SLICE:
      th_sb_puts(sb, "slice(");
      put_slice_part(sb, a->u.slice.has_start, a->u.slice.start);
      th_sb_putc(sb, ',');
      put_slice_part(sb, a->u.slice.has_stop, a->u.slice.stop);
      th_sb_putc(sb, ',');
      put_slice_part(sb, a->u.slice.has_step, a->u.slice.step);
      th_sb_putc(sb, ')');
      return;
    case TH_ARG_ELLIPSIS: th_sb_puts(sb, "..."); return;
    case TH_ARG_OBJECT: th_sb_puts(sb, a->u.s ? a->u.s : "None"); return;
  }
  th_sb_puts(sb, "None");
}

/* An output: names for proxies, `_` for anything else, container syntax for tuples/lists. */
static void put_out(th_strbuf *sb, const th_arg *a) {
  if (a->kind == TH_ARG_VALUE) {
    put_arg(sb, a);
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    th_sb_putc(sb, a->kind == TH_ARG_TUPLE ? '(' : '[');
    for (int i = 0; i < a->u.seq.n; i++) {
      if (i) th_sb_puts(sb, ", ");
      put_out(sb, &a->u.seq.items[i]);
    }
    if (a->kind == TH_ARG_TUPLE && a->u.seq.n == 1) th_sb_putc(sb, ',');
    th_sb_putc(sb, a->kind == TH_ARG_TUPLE ? ')' : ']');
  } else {
    th_sb_putc(sb, '_');
  }
}

/* Thunder's type string of a proxy, with Python's float formatting for float proxies. */
void th_print_value_type(const th_value *v, char *buf, size_t n) {
  if (!v->is_tensor && v->dtype == TH_F64 && v->has_value) {
    char f[40];
    th_print_py_float(v->fvalue, f, sizeof f);
    snprintf(buf, n, "float %s", f);
    return;
  }
  th_value_type_string(v, buf, n);
}

/* ---- one bound symbol ------------------------------------------------------------------------------ */

/* The values of a del: its argument(s), flattening one tuple/list level. */
static void put_del(th_strbuf *sb, const th_bsym *b) {
  th_sb_puts(sb, "del ");
  bool first = true;
  for (int i = 0; i < b->nargs; i++) {
    const th_arg *a = &b->args[i];
    int n = (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) ? a->u.seq.n : 1;
    for (int j = 0; j < n; j++) {
      if (!first) th_sb_puts(sb, ", ");
      first = false;
      put_arg(sb, n == 1 && a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST ? a : &a->u.seq.items[j]);
    }
  }
}

static bool out_is_empty(const th_arg *o) {
  return o->kind == TH_ARG_NONE || ((o->kind == TH_ARG_TUPLE || o->kind == TH_ARG_LIST) && o->u.seq.n == 0);
}

/* One bsym line without indentation or newline. */
void th_print_bsym_line(th_strbuf *sb, const th_bsym *b, bool type_comment) {
  if (!b->sym) {
    th_sb_puts(sb, "<bsym without symbol>");
    return;
  }
  if (th_bsym_has_role(b, TH_SYM_RETURN)) { /* the value; the updated inputs (args[1]) are not printed */
    th_sb_puts(sb, "return ");
    if (b->nargs == 0)
      th_sb_puts(sb, "None");
    else
      put_arg(sb, &b->args[0]);
    return;
  }
  if (th_bsym_has_role(b, TH_SYM_DEL)) {
    put_del(sb, b);
    return;
  }
  if (th_bsym_has_role(b, TH_SYM_UNPACK_SEQUENCE)) { /* "C0, C1, = saved_for_backward" (Thunder's unpack_sequence) */
    const th_arg *src = b->nargs > 0 ? &b->args[0] : NULL;
    if (b->out.kind == TH_ARG_TUPLE && b->out.u.seq.n == 0) {
      th_sb_puts(sb, "# ");
      if (src) put_arg(sb, src);
      th_sb_puts(sb, " (empty sequence)");
      return;
    }
    if (b->out.kind == TH_ARG_TUPLE)
      for (int i = 0; i < b->out.u.seq.n; i++) {
        put_out(sb, &b->out.u.seq.items[i]);
        th_sb_puts(sb, ", ");
      }
    th_sb_puts(sb, "= ");
    if (src) put_arg(sb, src);
    return;
  }
  if (th_bsym_has_role(b, TH_SYM_COMMENT)) {
    th_sb_puts(sb, "# ");
    if (b->nargs > 0 && b->args[0].kind == TH_ARG_STR && b->args[0].u.s) th_sb_puts(sb, b->args[0].u.s);
    return;
  }
  if (!out_is_empty(&b->out)) {
    put_out(sb, &b->out);
    th_sb_puts(sb, " = ");
  }
  bool dynamic = b->sym->id == TH_OP_DYNAMIC || !b->sym->module;
  th_sb_puts(sb, dynamic ? b->sym->name : b->sym->qualname);
  th_sb_putc(sb, '(');
  const th_schema *sc = &b->sym->schema;
  bool schema_ok = !dynamic && sc->nparams == b->nargs;
  bool first = true;
  for (int i = 0; i < b->nargs; i++) {
    if (!first) th_sb_puts(sb, ", ");
    first = false;
    if (schema_ok && sc->params[i].kwonly) th_sb_printf(sb, "%s=", sc->params[i].name);
    put_arg(sb, &b->args[i]);
  }
  for (int i = 0; i < b->nkwargs; i++) {
    if (!first) th_sb_puts(sb, ", ");
    first = false;
    th_sb_printf(sb, "%s=", b->kwnames && b->kwnames[i] ? b->kwnames[i] : "_");
    put_arg(sb, &b->kwargs[i]);
  }
  th_sb_putc(sb, ')');
  if (type_comment && b->out.kind == TH_ARG_VALUE && b->out.u.value) {
    char ty[256];
    th_print_value_type(b->out.u.value, ty, sizeof ty);
    th_sb_printf(sb, "  # %s: \"%s\"", b->out.u.value->name ? b->out.u.value->name : "<unnamed>", ty);
  }
}

static void put_bsym(th_strbuf *sb, const th_bsym *b, int level, int print_depth) {
  for (int i = 0; i < level + 1; i++) th_sb_puts(sb, "  ");
  if (level > 0) th_sb_puts(sb, "# ");
  th_print_bsym_line(sb, b, true);
  th_sb_putc(sb, '\n');
  if (level == 0 && th_bsym_has_role(b, TH_SYM_UNPACK_SEQUENCE) && b->out.kind == TH_ARG_TUPLE) {
    /* one type comment per unpacked value, as Thunder prints them ("# C0: \"Collection\"") */
    for (int i = 0; i < b->out.u.seq.n; i++) {
      const th_arg *o = &b->out.u.seq.items[i];
      if (o->kind != TH_ARG_VALUE || !o->u.value) continue;
      char ty[256];
      th_print_value_type(o->u.value, ty, sizeof ty);
      th_sb_printf(sb, "  # %s: \"%s\"\n", o->u.value->name ? o->u.value->name : "<unnamed>", ty);
    }
  }
  if (print_depth >= 0 && level + 1 >= print_depth) return;
  for (int i = 0; i < b->nsubs; i++) put_bsym(sb, b->subs[i], level + 1, print_depth);
}

/* ---- imports ------------------------------------------------------------------------------------------ */

typedef struct imports {
  bool thunder, devices, dtypes, prims, ltorch, tensor_class;
  const char *extra[16]; /* "torch.nn.functional" and other torch submodules of dynamic symbols */
  int nextra;
} imports;

static void scan_arg(imports *im, const th_arg *a) {
  if (a->kind == TH_ARG_DTYPE)
    im->dtypes = true;
  else if (a->kind == TH_ARG_DEVICE)
    im->devices = true;
  else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++) scan_arg(im, &a->u.seq.items[i]);
}

static size_t module_len(const char *qualname) {
  const char *dot = strrchr(qualname, '.');
  return dot ? (size_t)(dot - qualname) : 0;
}

static void add_module(imports *im, const char *name, size_t len) {
  if (len == 5 && !strncmp(name, "prims", 5))
    im->prims = im->thunder = true;
  else if (len == 6 && !strncmp(name, "ltorch", 6))
    im->ltorch = im->thunder = true;
  else if (len == 6 && !strncmp(name, "Tensor", 6))
    im->tensor_class = true;
  else if (len > 6 && !strncmp(name, "torch.", 6)) {
    for (int i = 0; i < im->nextra; i++)
      if (module_len(im->extra[i]) == len && !strncmp(im->extra[i], name, len)) return;
    if (im->nextra < 16) im->extra[im->nextra++] = name; /* the qualname; its module is its prefix */
  }
}

static void scan_bsym(imports *im, const th_bsym *b) {
  for (int i = 0; i < b->nargs; i++) scan_arg(im, &b->args[i]);
  for (int i = 0; i < b->nkwargs; i++) scan_arg(im, &b->kwargs[i]);
  if (!b->sym || (b->sym->tags & TH_TAG_UTILITY)) return;
  const char *q = b->sym->id == TH_OP_DYNAMIC || !b->sym->module ? b->sym->name : b->sym->qualname;
  if (!q) return;
  size_t ml = module_len(q);
  if (ml) add_module(im, q, ml);
}

typedef struct import_line {
  char key[96]; /* module __name__ used as the sort key */
  int tie;      /* Thunder's order among equal keys: class imports first */
  char text[160];
} import_line;

static int cmp_import(const void *pa, const void *pb) {
  const import_line *a = pa, *b = pb;
  int c = strcmp(a->key, b->key);
  return c ? c : a->tie - b->tie;
}

static void put_imports(th_strbuf *sb, const th_trace *tr) {
  imports im;
  memset(&im, 0, sizeof im);
  for (int i = 0; i < tr->bsyms.n; i++) scan_bsym(&im, tr->bsyms.items[i]);
  import_line lines[24];
  int n = 0;
#define ADD(k, t, txt)                                                                                                 \
  do {                                                                                                                 \
    snprintf(lines[n].key, sizeof lines[n].key, "%s", k);                                                              \
    lines[n].tie = t;                                                                                                  \
    snprintf(lines[n].text, sizeof lines[n].text, "%s", txt);                                                          \
    n++;                                                                                                               \
  } while (0)
  if (im.thunder) ADD("thunder", 1, "import thunder");
  if (im.devices) ADD("thunder.core.devices", 1, "import thunder.core.devices as devices");
  if (im.dtypes) ADD("thunder.core.dtypes", 1, "import thunder.core.dtypes as dtypes");
  if (im.prims) ADD("thunder.core.prims", 1, "import thunder.core.prims as prims");
  if (im.ltorch) ADD("thunder.torch", 1, "import thunder.torch as ltorch");
  if (im.tensor_class) ADD("torch", 0, "from torch import Tensor");
  ADD("torch", 1, "import torch");
  for (int i = 0; i < im.nextra; i++) {
    char mod[96];
    size_t ml = module_len(im.extra[i]);
    /* extra[i] points at a qualname; its module is the part before the last dot */
    if (ml >= sizeof mod) continue;
    memcpy(mod, im.extra[i], ml);
    mod[ml] = 0;
    char txt[160];
    snprintf(txt, sizeof txt, "import %s", mod);
    ADD(mod, 1, txt);
  }
#undef ADD
  qsort(lines, (size_t)n, sizeof lines[0], cmp_import);
  for (int i = 0; i < n; i++) th_sb_printf(sb, "%s\n", lines[i].text);
  th_sb_puts(sb, "from thunder.executors.torchex import no_autocast\n\n");
}

/* ---- the trace ------------------------------------------------------------------------------------------ */

char *th_trace_print(const th_trace *tr, int print_depth) {
  th_strbuf sb;
  th_sb_init(&sb);
  if (!tr) {
    th_error(TH_ERR_VALUE, "th_trace_print: trace is NULL");
    return NULL;
  }
  if (print_depth == 0) print_depth = 1;
  if (tr->provenance) th_sb_printf(&sb, "# Constructed by %s\n", tr->provenance);
  put_imports(&sb, tr);
  th_sb_puts(&sb, "@torch.no_grad()\n@no_autocast\n");
  th_sb_printf(&sb, "def %s(", tr->fn_name ? tr->fn_name : "computation");
  for (int i = 0; i < tr->inputs.n; i++) {
    const th_value *v = tr->inputs.items[i];
    th_sb_printf(&sb, "%s%s", i ? ", " : "", v->name ? v->name : "<unnamed>");
  }
  th_sb_puts(&sb, "):\n");
  for (int i = 0; i < tr->inputs.n; i++) {
    const th_value *v = tr->inputs.items[i];
    char ty[256];
    th_print_value_type(v, ty, sizeof ty);
    th_sb_printf(&sb, "  # %s: \"%s\"\n", v->name ? v->name : "<unnamed>", ty);
  }
  for (int i = 0; i < tr->bsyms.n; i++) put_bsym(&sb, tr->bsyms.items[i], 0, print_depth);
  return th_sb_take(&sb);
}
