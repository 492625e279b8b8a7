/* parser.c — th_trace_parse: Thunder's printed trace format back into a trace.
 *
 * The input is the Python subset the printer writes and that Lightning Thunder itself prints. It is
 * read in two layers, as a tokenizer (lexer.c: lines and tokens) and a recursive-descent parser (this
 * file) whose functions are named after the grammar rules (chibicc style):
 *
 *   trace      := header* "def" NAME "(" params ")" ":" body
 *   header     := blank | "# ..." | "import ..." | "from ... import ..." | "@..."
 *   body       := input_type* statement*        (all at one indentation)
 *   input_type := "#" NAME ":" STRING            ("cuda:0 f32[2, 2]", "int 4"; see parse_type_string)
 *   statement  := "del" names | "return" [exprs] | [targets "="] call [type_comment]
 *                 followed by its subsymbols: deeper "# statement" lines, nesting by indentation
 *   call       := dotted_name "(" [arg ("," arg)*] ")"       arg := [NAME "="] expr
 *   expr       := ["-"] primary
 *   primary    := NUMBER | STRING | None | True | False | "..." | tuple | list | dict
 *               | float('inf') | slice(...) | devices.Device("cuda:0") | torch.device("cpu")
 *               | dtypes.X | torch.X | NAME (a value, or an object such as _torch_memory_format_0)
 *
 * Lines end at "\n", "\r\n" or a lone "\r" (Python's universal newlines); a UTF-8 byte order mark at
 * the start of the text is skipped (lexer.h). Lines that carry no IR are skipped: the provenance line, imports,
 * decorators, blank lines and source-location comments ("# /path/file.py:1966: \t<source>").
 *
 * The input section is the run of comment lines right under the signature. There, a comment that
 * starts "NAME:" where NAME is a parameter must be exactly that parameter's type comment (junk after
 * the string, a missing string or a second type comment are syntax errors at their column), and
 * "# NAME: \"<type>\"" for a NAME that is not a parameter is an error; other comments are comments.
 *
 * Values are identified by name while parsing (a name -> value map local to the parse); every name is
 * reserved in the trace's session. A statement's output gets its metadata from its type comment, or
 * when it has none (tuple outputs) from running the op's meta. A name used before its definition
 * gets a placeholder that its definition later fills in (the verifier reports the order); a name never
 * defined is an error here. Symbols: th_symbol_lookup resolves "prims.add", "ltorch.add" and aliases
 * ("torch.nn.functional.linear", "Tensor.to"); an alias whose printed arguments do not bind to our
 * schema is replaced by the one ltorch subsymbol printed under it with the same output; an unknown
 * name with subsymbols becomes a dynamic symbol (fusion regions, executor ops); an unknown name
 * without subsymbols is an error naming the line.
 *
 * Errors: TH_ERR_SYNTAX "file:line:col: message", then the source line and a caret under the column;
 * semantic errors (unknown op, arguments that do not bind) "file:line: message" with the line and caret.
 * Nothing here may crash on any input: every loop is bounded by the text, nesting is capped, and all
 * memory lives in the trace's arena or the parse's own arena. Time and memory are linear in the text:
 * names are looked up by hashing (the name map holds the parameters too), and the lexer's costs are
 * linear too (lexer.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/ir.h"
#include "core/lexer.h"
#include "core/printer.h"

#define MAX_NEST TH_LEX_MAX_NEST /* expression nesting and subsymbol depth */
#define MAX_ITEMS 100000

/* ---- the name map ----------------------------------------------------------------------------------- */

typedef struct entry {
  const char *name;
  th_value *v;
  bool defined;
  int use_line, use_col; /* first use, for "not defined" */
  int def_line;
  int param; /* 1 + the index of the function parameter of this name, or 0 */
} entry;

/* A value's metadata as a type comment gives it. */
typedef struct vtype {
  bool is_tensor;
  th_dtype dtype;
  th_device device;
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  bool has_value;
  double f;
  int64_t i;
  bool is_collection; /* "Collection" */
} vtype;

typedef struct parser {
  th_lexer lx;       /* the file name, the token buffers */
  th_arena *pa;      /* parse-local memory (tokens, map) */
  th_trace *tr;      /* the result */
  th_trace *scratch; /* names values in tr's session (see new_named_value) */
  line *lines;
  int nlines;
  entry *map;
  size_t mapcap, mapn;
  /* current statement */
  const line *ln;
  token *toks;
  int ntoks, pos;
  int depth;
  /* the lexer's token buffer tokenize fills: one per subsymbol depth (a statement's tokens outlive
   * the parsing of its subsymbols) and TYPE_COMMENT_LEVEL for trailing type comments */
  int tlevel;
  /* the values of the last `a, b, = coll` line still waiting for their "# a: \"<type>\"" lines */
  th_value **pending;
  int npending, next_pending, pending_line;
} parser;

#define TYPE_COMMENT_LEVEL (MAX_NEST + 1)

/* ---- errors ----------------------------------------------------------------------------------------- */

/* A syntax error at (line, col): "file:line:col: msg", the line, a caret. */
static th_status syntax_error(parser *ps, const line *ln, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_status st = th_lex_verror(&ps->lx, ln, col, true, TH_ERR_SYNTAX, fmt, ap);
  va_end(ap);
  return st;
}

/* A semantic error: "file:line: msg", the line, a caret under col. */
static th_status line_error(parser *ps, const line *ln, int col, th_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_status st = th_lex_verror(&ps->lx, ln, col, false, code, fmt, ap);
  va_end(ap);
  return st;
}

static th_status error_tok(parser *ps, const token *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_status st = th_lex_verror(&ps->lx, ps->ln, t->col, true, TH_ERR_SYNTAX, fmt, ap);
  va_end(ap);
  return st;
}

/* ---- tokens ----------------------------------------------------------------------------------------- */

/* Tokenizes ps->ln from byte offset `from` to the end of the line into ps->toks (the lexer's token
 * buffer of level ps->tlevel, overwriting that level's previous line). */
static th_status tokenize(parser *ps, int from) {
  ps->pos = 0;
  return th_lex_line(&ps->lx, ps->ln, from, ps->tlevel, &ps->toks, &ps->ntoks);
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static token *peek(parser *ps) { return &ps->toks[ps->pos]; }
static token *peek_at(parser *ps, int k) {
  int i = ps->pos + k;
  return &ps->toks[i < ps->ntoks ? i : ps->ntoks - 1];
}
static token *next(parser *ps) {
  token *t = &ps->toks[ps->pos];
  if (t->kind != TK_EOF) ps->pos++;
  return t;
}
static bool is_punct(const token *t, const char *s) {
  return t->kind == TK_PUNCT && (int)strlen(s) == t->len && !strncmp(t->p, s, (size_t)t->len);
}
static bool is_name(const token *t, const char *s) {
  return t->kind == TK_NAME && (int)strlen(s) == t->len && !strncmp(t->p, s, (size_t)t->len);
}
static bool consume(parser *ps, const char *s) {
  if (!is_punct(peek(ps), s)) return false;
  next(ps);
  return true;
}
static const char *describe(const token *t, char *buf, size_t n) {
  switch (t->kind) {
    case TK_EOF: return "end of line";
    case TK_COMMENT: return "a comment";
    default: snprintf(buf, n, "'%.*s'", t->len > 40 ? 40 : t->len, t->p); return buf;
  }
}
static th_status expect(parser *ps, const char *s) {
  if (consume(ps, s)) return TH_OK;
  char buf[64];
  return error_tok(ps, peek(ps), "expected '%s', found %s", s, describe(peek(ps), buf, sizeof buf));
}
static const char *tok_str(parser *ps, const token *t) { return th_arena_strndup(ps->pa, t->p, (size_t)t->len); }

/* ---- the name map ------------------------------------------------------------------------------------------ */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static entry *map_find(parser *ps, const char *name) {
  if (!ps->mapcap) return NULL;
  for (size_t i = hash_name(name) & (ps->mapcap - 1);; i = (i + 1) & (ps->mapcap - 1)) {
    if (!ps->map[i].name) return NULL;
    if (!strcmp(ps->map[i].name, name)) return &ps->map[i];
  }
}

static entry *map_insert(parser *ps, const char *name) {
  if ((ps->mapn + 1) * 2 > ps->mapcap) {
    size_t cap = ps->mapcap ? ps->mapcap * 2 : 64;
    entry *m = th_arena_alloc(ps->pa, sizeof(entry) * cap);
    if (!m) return NULL;
    for (size_t i = 0; i < ps->mapcap; i++) {
      if (!ps->map[i].name) continue;
      size_t j = hash_name(ps->map[i].name) & (cap - 1);
      while (m[j].name) j = (j + 1) & (cap - 1);
      m[j] = ps->map[i];
    }
    ps->map = m;
    ps->mapcap = cap;
  }
  size_t i = hash_name(name) & (ps->mapcap - 1);
  while (ps->map[i].name) i = (i + 1) & (ps->mapcap - 1);
  entry *e = &ps->map[i];
  memset(e, 0, sizeof *e);
  e->name = th_arena_strdup(ps->pa, name);
  if (!e->name) return NULL;
  ps->mapn++;
  return e;
}

/* A set of strings (open addressing in the parse arena), for duplicate checks that must stay linear
 * in the number of names. */
typedef struct strset {
  const char **slots;
  size_t cap, n;
} strset;

/* Adds name (not copied: it must live as long as the set); *dup tells whether it was there. */
static th_status strset_add(parser *ps, strset *set, const char *name, bool *dup) {
  *dup = false;
  if ((set->n + 1) * 2 > set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 64;
    const char **sl = th_arena_alloc(ps->pa, sizeof(char *) * cap);
    if (!sl) return TH_ERR_NOMEM;
    for (size_t i = 0; i < set->cap; i++) {
      if (!set->slots[i]) continue;
      size_t j = hash_name(set->slots[i]) & (cap - 1);
      while (sl[j]) j = (j + 1) & (cap - 1);
      sl[j] = set->slots[i];
    }
    set->slots = sl;
    set->cap = cap;
  }
  size_t i = hash_name(name) & (set->cap - 1);
  for (; set->slots[i]; i = (i + 1) & (set->cap - 1))
    if (!strcmp(set->slots[i], name)) return (*dup = true), TH_OK;
  set->slots[i] = name;
  set->n++;
  return TH_OK;
}

/* A new value named `name` in tr's session. th_trace_add_tensor_input on the scratch trace (same
 * session) is the one core call that reserves a name and hands back the session's own copy of it. */
static th_value *new_named_value(parser *ps, const char *name) {
  th_value *v = th_trace_add_tensor_input(ps->scratch, name, TH_F32, (th_device){TH_CPU, 0}, 0, NULL);
  return v;
}

static void apply_type(th_value *v, const vtype *t) {
  v->is_collection = t->is_collection;
  v->is_tensor = t->is_tensor;
  v->dtype = t->dtype;
  v->device = t->device;
  v->ndim = t->is_tensor ? t->ndim : 0;
  for (int i = 0; i < v->ndim; i++) v->shape[i] = t->shape[i];
  v->has_value = t->has_value;
  v->fvalue = t->f;
  v->ivalue = t->i;
  v->requires_grad = false;
}

static void type_of(const th_value *v, vtype *t) {
  memset(t, 0, sizeof *t);
  t->is_tensor = v->is_tensor;
  t->dtype = v->dtype;
  t->device = v->device;
  t->ndim = v->is_tensor ? v->ndim : 0;
  for (int i = 0; i < t->ndim && i < TH_MAX_DIMS; i++) t->shape[i] = v->shape[i];
  t->has_value = v->has_value;
  t->f = v->fvalue;
  t->i = v->ivalue;
  t->is_collection = v->is_collection;
}

static bool same_type(const th_value *v, const vtype *t) {
  if (v->is_collection != t->is_collection) return false;
  if (v->is_tensor != t->is_tensor || v->dtype != t->dtype) return false;
  if (!t->is_tensor) return true;
  if (!th_device_eq(v->device, t->device) || v->ndim != t->ndim) return false;
  for (int i = 0; i < t->ndim; i++)
    if (v->shape[i] != t->shape[i]) return false;
  return true;
}

/* The value a name refers to in an argument: defined, or a placeholder its definition fills in. */
static th_status use_name(parser *ps, const token *t, th_value **out) {
  const char *name = tok_str(ps, t);
  if (!name) return TH_ERR_NOMEM;
  entry *e = map_find(ps, name);
  if (!e) {
    e = map_insert(ps, name);
    if (!e) return TH_ERR_NOMEM;
    e->v = new_named_value(ps, name);
    if (!e->v) return line_error(ps, ps->ln, t->col, th_last_status(), "%s", th_last_error());
    e->use_line = ps->ln->lineno;
    e->use_col = t->col;
  }
  *out = e->v;
  return TH_OK;
}

static void type_str(const vtype *t, char *buf, size_t n) {
  th_value v;
  memset(&v, 0, sizeof v);
  apply_type(&v, t);
  th_print_value_type(&v, buf, n);
}

/* Defines `name` with type t (from a type comment or a meta). Reuses an existing definition (the
 * output of a subsymbol printed under its parent is the parent's output) when the types agree. */
static th_status define_name(parser *ps, const char *name, int col, const vtype *t, th_value **out) {
  entry *e = map_find(ps, name);
  if (e && e->defined) {
    if (!same_type(e->v, t)) {
      char a[128], b[128];
      th_print_value_type(e->v, a, sizeof a);
      type_str(t, b, sizeof b);
      return line_error(ps, ps->ln, col, TH_ERR_SYNTAX,
                        "'%s' is defined again with type \"%s\"; it was defined on line %d as \"%s\"", name, b,
                        e->def_line, a);
    }
    *out = e->v;
    return TH_OK;
  }
  if (!e) {
    e = map_insert(ps, name);
    if (!e) return TH_ERR_NOMEM;
    e->v = new_named_value(ps, name);
    if (!e->v) return line_error(ps, ps->ln, col, th_last_status(), "%s", th_last_error());
  }
  apply_type(e->v, t);
  e->defined = true;
  e->def_line = ps->ln ? ps->ln->lineno : 0;
  *out = e->v;
  return TH_OK;
}

static bool name_defined(parser *ps, const char *name) {
  entry *e = map_find(ps, name);
  return e && e->defined;
}

/* ---- type strings: "cuda:0 f32[2, 2]", "cpu b8[]", "int 4", "float 3.0", "bool True", "int ?" ----------
 *
 *   type := ws (NUMKIND ws1 VALUE | DEVICE ws1 DTYPE ws "[" ws [dim (ws "," ws dim)* ws [","] ws] "]") ws
 *
 * where ws is any run of spaces/tabs (Python-like: "cpu   f32[ 2 ,3 ]" is "cpu f32[2, 3]"). On failure
 * *why says what was expected and *at is the byte offset in s where it went wrong. */

static bool is_ws(char c) { return c == ' ' || c == '\t'; }
static int skip_ws(const char *s, int i) {
  while (is_ws(s[i])) i++;
  return i;
}

static bool type_fail(const char **why, int *at, const char *msg, int where) {
  *why = msg;
  *at = where;
  return false;
}

static bool parse_type_string(const char *s, vtype *t, const char **why, int *at) {
  memset(t, 0, sizeof *t);
  *at = 0;
  int i = skip_ws(s, 0);
  int h0 = i;
  while (s[i] && !is_ws(s[i]) && s[i] != '[') i++;
  int hl = i - h0;
  const char *head = s + h0;
  if (hl == 0) return type_fail(why, at, "expected \"<device> <dtype>[<shape>]\" or \"int|float|bool <value>\"", h0);
  if (hl == 10 && !strncmp(head, "Collection", 10)) { /* a CollectionProxy (the backward's inputs) */
    if (s[skip_ws(s, i)]) return type_fail(why, at, "unexpected text after Collection", skip_ws(s, i));
    t->is_collection = true;
    t->dtype = TH_DTYPE_COUNT;
    return true;
  }
  if ((hl == 3 && !strncmp(head, "int", 3)) || (hl == 5 && !strncmp(head, "float", 5)) ||
      (hl == 4 && !strncmp(head, "bool", 4))) {
    t->is_tensor = false;
    t->dtype = hl == 3 ? TH_I64 : hl == 5 ? TH_F64 : TH_BOOL;
    int v0 = skip_ws(s, i);
    if (v0 == i || !s[v0]) return type_fail(why, at, "expected a value (or ?) after the number type", v0);
    int v1 = v0;
    while (s[v1] && !is_ws(s[v1])) v1++;
    if (s[skip_ws(s, v1)]) return type_fail(why, at, "unexpected text after the value", skip_ws(s, v1));
    char val[64];
    if (v1 - v0 >= (int)sizeof val) return type_fail(why, at, "value too long", v0);
    memcpy(val, s + v0, (size_t)(v1 - v0));
    val[v1 - v0] = 0;
    if (!strcmp(val, "?")) return true;
    t->has_value = true;
    char *end;
    if (t->dtype == TH_BOOL) {
      if (!strcmp(val, "True"))
        t->i = 1;
      else if (!strcmp(val, "False"))
        t->i = 0;
      else
        return type_fail(why, at, "a bool proxy's value must be True, False or ?", v0);
      return true;
    }
    errno = 0;
    if (t->dtype == TH_I64) {
      t->i = strtoll(val, &end, 10);
      if (end == val || *end || errno) return type_fail(why, at, "invalid int value", v0);
      t->f = (double)t->i;
      return true;
    }
    t->f = strtod(val, &end);
    if (end == val || *end) return type_fail(why, at, "invalid float value", v0);
    return true;
  }
  char dev[32];
  if (hl >= (int)sizeof dev) return type_fail(why, at, "unknown device", h0);
  memcpy(dev, head, (size_t)hl);
  dev[hl] = 0;
  if (!th_device_parse(dev, &t->device)) return type_fail(why, at, "unknown device", h0);
  int d0 = skip_ws(s, i);
  if (d0 == i) return type_fail(why, at, "expected a space, then a dtype like f32, after the device", i);
  int d1 = d0;
  while (s[d1] && !is_ws(s[d1]) && s[d1] != '[') d1++;
  if (d1 == d0) return type_fail(why, at, "expected a dtype like f32", d0);
  char dt[32];
  if (d1 - d0 >= (int)sizeof dt) return type_fail(why, at, "unknown dtype (expected one like f32)", d0);
  memcpy(dt, s + d0, (size_t)(d1 - d0));
  dt[d1 - d0] = 0;
  if (!th_dtype_parse(dt, &t->dtype)) return type_fail(why, at, "unknown dtype (expected one like f32)", d0);
  t->is_tensor = true;
  int p = skip_ws(s, d1);
  if (s[p] != '[') return type_fail(why, at, "expected '[' after the dtype", p);
  p = skip_ws(s, p + 1);
  if (s[p] != ']') {
    for (;;) {
      if (!is_digit((unsigned char)s[p])) return type_fail(why, at, "expected a non-negative dimension", p);
      if (t->ndim == TH_MAX_DIMS) return type_fail(why, at, "more than 8 dimensions are not supported", p);
      char *end;
      errno = 0;
      long long d = strtoll(s + p, &end, 10);
      if (errno) return type_fail(why, at, "dimension too large", p);
      t->shape[t->ndim++] = d;
      p = skip_ws(s, (int)(end - s));
      if (s[p] == ']') break;
      if (s[p] != ',') return type_fail(why, at, "expected ',' or ']' in the shape", p);
      p = skip_ws(s, p + 1);
      if (s[p] == ']') break; /* a trailing comma, as Python allows */
    }
  }
  p = skip_ws(s, p + 1);
  if (s[p]) return type_fail(why, at, "unexpected text after ']'", p);
  return true;
}

/* Column (1-based, in the line) of byte `at` of a STR token's decoded text: exact when the literal
 * has no escapes (type strings never do), else the literal's start. */
static int str_col(const token *t, int at) { return t->len == (int)strlen(t->sval) + 2 ? t->col + 1 + at : t->col; }

/* ---- expressions ------------------------------------------------------------------------------------------- */

static th_status expr(parser *ps, th_arg *out);

static th_status alloc_items(parser *ps, int n, th_arg **items) {
  *items = th_arena_alloc(ps->tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  return *items ? TH_OK : TH_ERR_NOMEM;
}

/* A growable th_arg list in the parse arena. */
typedef struct arglist {
  th_arg *items;
  const char **names;
  int n, cap;
} arglist;

static th_status arglist_push(parser *ps, arglist *l, th_arg a, const char *name) {
  if (l->n >= MAX_ITEMS) return error_tok(ps, peek(ps), "too many items");
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    th_arg *it = th_arena_alloc(ps->pa, sizeof(th_arg) * (size_t)cap);
    const char **nm = th_arena_alloc(ps->pa, sizeof(char *) * (size_t)cap);
    if (!it || !nm) return TH_ERR_NOMEM;
    if (l->n) {
      memcpy(it, l->items, sizeof(th_arg) * (size_t)l->n);
      memcpy(nm, l->names, sizeof(char *) * (size_t)l->n);
    }
    l->items = it;
    l->names = nm;
    l->cap = cap;
  }
  l->items[l->n] = a;
  l->names[l->n] = name;
  l->n++;
  return TH_OK;
}

/* Copies a list's items into tr's arena as a TUPLE / LIST / DICT. */
static th_status seq_from(parser *ps, th_arg_kind kind, const arglist *l, th_arg *out) {
  th_arg *items;
  TH_TRY(alloc_items(ps, l->n, &items));
  if (l->n) memcpy(items, l->items, sizeof(th_arg) * (size_t)l->n);
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->u.seq.n = l->n;
  out->u.seq.items = items;
  if (kind == TH_ARG_DICT) {
    const char **keys = th_arena_alloc(ps->tr->arena, sizeof(char *) * (size_t)(l->n ? l->n : 1));
    if (!keys) return TH_ERR_NOMEM;
    for (int i = 0; i < l->n; i++) {
      keys[i] = th_arena_strdup(ps->tr->arena, l->names[i]);
      if (!keys[i]) return TH_ERR_NOMEM;
    }
    out->u.seq.keys = keys;
  }
  return TH_OK;
}

/* dotted_name := NAME ("." NAME)* ; returns the text in the parse arena. */
static th_status dotted_name(parser *ps, const char **out) {
  token *first = peek(ps);
  if (first->kind != TK_NAME) {
    char buf[64];
    return error_tok(ps, first, "expected a name, found %s", describe(first, buf, sizeof buf));
  }
  next(ps);
  const char *end = first->p + first->len;
  while (is_punct(peek(ps), ".") && peek_at(ps, 1)->kind == TK_NAME && peek(ps)->p == end &&
         peek_at(ps, 1)->p == end + 1) {
    next(ps);
    token *t = next(ps);
    end = t->p + t->len;
  }
  *out = th_arena_strndup(ps->pa, first->p, (size_t)(end - first->p));
  return *out ? TH_OK : TH_ERR_NOMEM;
}

/* call_args := "(" [arg ("," arg)*] [","] ")" — positional args, then keyword args (name=expr). */
static th_status call_args(parser *ps, arglist *pos, arglist *kw) {
  TH_TRY(expect(ps, "("));
  strset seen = {0}; /* the keyword names, once there are many (a linear scan for the first few) */
  while (!is_punct(peek(ps), ")")) {
    token *t = peek(ps);
    if (t->kind == TK_NAME && is_punct(peek_at(ps, 1), "=")) {
      const char *name = tok_str(ps, t);
      if (!name) return TH_ERR_NOMEM;
      bool dup = false;
      if (kw->n < 16) {
        for (int i = 0; i < kw->n; i++) dup |= !strcmp(kw->names[i], name);
      } else {
        if (!seen.n)
          for (int i = 0; i < kw->n; i++) TH_TRY(strset_add(ps, &seen, kw->names[i], &dup));
        TH_TRY(strset_add(ps, &seen, name, &dup));
      }
      if (dup) return error_tok(ps, t, "keyword argument repeated: %s", name);
      next(ps);
      next(ps);
      th_arg a;
      TH_TRY(expr(ps, &a));
      TH_TRY(arglist_push(ps, kw, a, name));
    } else {
      if (kw->n) return error_tok(ps, t, "positional argument follows keyword argument");
      th_arg a;
      TH_TRY(expr(ps, &a));
      TH_TRY(arglist_push(ps, pos, a, NULL));
    }
    if (!consume(ps, ",")) break;
  }
  return expect(ps, ")");
}

static bool arg_is_int_or_none(const th_arg *a) { return a->kind == TH_ARG_INT || a->kind == TH_ARG_NONE; }

/* A call inside an argument: float('inf'), slice(...), devices.Device("cuda:0"), torch.device(...). */
static th_status call_expr(parser *ps, const token *at, const char *fn, th_arg *out) {
  arglist pos = {0}, kw = {0};
  TH_TRY(call_args(ps, &pos, &kw));
  if (!strcmp(fn, "float")) {
    if (pos.n == 1 && !kw.n && pos.items[0].kind == TH_ARG_STR) {
      const char *s = pos.items[0].u.s;
      char *end;
      double f = strtod(s, &end);
      if (end != s && !*end) {
        *out = th_arg_float(f);
        return TH_OK;
      }
    } else if (pos.n == 1 && !kw.n && (pos.items[0].kind == TH_ARG_INT || pos.items[0].kind == TH_ARG_FLOAT)) {
      *out = th_arg_float(pos.items[0].kind == TH_ARG_INT ? (double)pos.items[0].u.i : pos.items[0].u.f);
      return TH_OK;
    }
    return error_tok(ps, at, "float() takes a number or one of 'inf', '-inf', 'nan'");
  }
  if (!strcmp(fn, "slice")) {
    if (kw.n || pos.n < 1 || pos.n > 3) return error_tok(ps, at, "slice() takes 1 to 3 arguments");
    for (int i = 0; i < pos.n; i++)
      if (!arg_is_int_or_none(&pos.items[i])) return error_tok(ps, at, "slice() arguments must be ints or None");
    memset(out, 0, sizeof *out);
    out->kind = TH_ARG_SLICE;
    const th_arg *start = pos.n > 1 ? &pos.items[0] : NULL;
    const th_arg *stop = pos.n > 1 ? &pos.items[1] : &pos.items[0];
    const th_arg *step = pos.n > 2 ? &pos.items[2] : NULL;
    if (start && start->kind == TH_ARG_INT) out->u.slice.has_start = true, out->u.slice.start = start->u.i;
    if (stop->kind == TH_ARG_INT) out->u.slice.has_stop = true, out->u.slice.stop = stop->u.i;
    if (step && step->kind == TH_ARG_INT) out->u.slice.has_step = true, out->u.slice.step = step->u.i;
    return TH_OK;
  }
  if (!strcmp(fn, "devices.Device") || !strcmp(fn, "thunder.devices.Device") ||
      !strcmp(fn, "thunder.core.devices.Device") || !strcmp(fn, "torch.device")) {
    if (kw.n || pos.n < 1 || pos.n > 2 || pos.items[0].kind != TH_ARG_STR ||
        (pos.n == 2 && pos.items[1].kind != TH_ARG_INT))
      return error_tok(ps, at, "%s() takes a device string such as \"cuda:0\"", fn);
    char buf[64];
    if (pos.n == 2)
      snprintf(buf, sizeof buf, "%.30s:%lld", pos.items[0].u.s, (long long)pos.items[1].u.i);
    else
      snprintf(buf, sizeof buf, "%s", pos.items[0].u.s);
    memset(out, 0, sizeof *out);
    out->kind = TH_ARG_DEVICE;
    if (strlen(pos.items[0].u.s) > 40 || !th_device_parse(buf, &out->u.device))
      return error_tok(ps, at, "unknown device \"%.40s\"", buf);
    return TH_OK;
  }
  return error_tok(ps, at, "unsupported call '%s' in an argument", fn);
}

/* A name in an argument: a dtype constant, a value, or an opaque object. */
static th_status name_expr(parser *ps, th_arg *out) {
  token *at = peek(ps);
  const char *name;
  TH_TRY(dotted_name(ps, &name));
  if (is_punct(peek(ps), "(")) return call_expr(ps, at, name, out);
  if (!strcmp(name, "None")) return (*out = th_arg_none()), TH_OK;
  if (!strcmp(name, "True")) return (*out = th_arg_bool(true)), TH_OK;
  if (!strcmp(name, "False")) return (*out = th_arg_bool(false)), TH_OK;
  if (strchr(name, '.')) {
    th_dtype dt;
    size_t n = strlen(name);
    if (th_dtype_parse(name, &dt)) return (*out = th_arg_dtype(dt)), TH_OK;
    char buf[64];
    if (n > 1 && n < sizeof buf && name[n - 1] == '_') { /* a weak dtype (dtypes.float32_) is its strong dtype */
      memcpy(buf, name, n - 1);
      buf[n - 1] = 0;
      if (th_dtype_parse(buf, &dt)) return (*out = th_arg_dtype(dt)), TH_OK;
    }
    /* some Thunder versions print "dtypes.thunder.dtypes.bfloat16": a module path of thunder / core /
     * dtypes / torch words before a dtype name */
    const char *last = strrchr(name, '.') + 1;
    bool module_words = true;
    for (const char *p = name; p < last - 1;) {
      size_t len = strcspn(p, ".");
      module_words &= (len == 7 && !strncmp(p, "thunder", 7)) || (len == 4 && !strncmp(p, "core", 4)) ||
                      (len == 6 && !strncmp(p, "dtypes", 6)) || (len == 5 && !strncmp(p, "torch", 5));
      p += len + 1;
    }
    snprintf(buf, sizeof buf, "dtypes.%s", last);
    if (module_words && strlen(last) < 40 && th_dtype_parse(buf, &dt)) return (*out = th_arg_dtype(dt)), TH_OK;
  } else {
    /* a value (defined, or used before its definition), unless it is an object name
     * (_torch_memory_format_0) or a type that no value of this trace is called */
    bool object = name[0] == '_' || !strcmp(name, "int") || !strcmp(name, "float") || !strcmp(name, "bool");
    if (!object || map_find(ps, name)) {
      th_value *v;
      TH_TRY(use_name(ps, at, &v));
      return (*out = th_arg_value(v)), TH_OK;
    }
  }
  memset(out, 0, sizeof *out);
  out->kind = TH_ARG_OBJECT;
  out->u.s = th_arena_strdup(ps->tr->arena, name);
  return out->u.s ? TH_OK : TH_ERR_NOMEM;
}

/* seq_items := [expr ("," expr)*] [","] up to `close`; *trailing_comma tells (x,) from (x). */
static th_status seq_items(parser *ps, const char *close, arglist *l, bool *trailing_comma) {
  *trailing_comma = false;
  while (!is_punct(peek(ps), close)) {
    th_arg a;
    TH_TRY(expr(ps, &a));
    TH_TRY(arglist_push(ps, l, a, NULL));
    *trailing_comma = false;
    if (!consume(ps, ",")) break;
    *trailing_comma = true;
  }
  return expect(ps, close);
}

static th_status dict_expr(parser *ps, th_arg *out) {
  arglist l = {0};
  while (!is_punct(peek(ps), "}")) {
    token *k = peek(ps);
    if (k->kind != TK_STR) return error_tok(ps, k, "dict keys must be strings");
    next(ps);
    TH_TRY(expect(ps, ":"));
    th_arg a;
    TH_TRY(expr(ps, &a));
    TH_TRY(arglist_push(ps, &l, a, k->sval));
    if (!consume(ps, ",")) break;
  }
  TH_TRY(expect(ps, "}"));
  return seq_from(ps, TH_ARG_DICT, &l, out);
}

static th_status primary(parser *ps, th_arg *out) {
  token *t = peek(ps);
  char buf[64];
  switch (t->kind) {
    case TK_INT:
      if (t->int_2p63) return error_tok(ps, t, "integer literal 9223372036854775808 does not fit in 64 bits");
      next(ps);
      *out = th_arg_int(t->ival);
      return TH_OK;
    case TK_FLOAT:
      next(ps);
      *out = th_arg_float(t->fval);
      return TH_OK;
    case TK_STR: {
      next(ps);
      const char *s = th_arena_strdup(ps->tr->arena, t->sval);
      if (!s) return TH_ERR_NOMEM;
      *out = th_arg_str(s);
      return TH_OK;
    }
    case TK_NAME: return name_expr(ps, out);
    case TK_PUNCT:
      if (is_punct(t, "...")) {
        next(ps);
        memset(out, 0, sizeof *out);
        out->kind = TH_ARG_ELLIPSIS;
        return TH_OK;
      }
      if (is_punct(t, "(") || is_punct(t, "[")) {
        bool tuple = is_punct(t, "(");
        next(ps);
        arglist l = {0};
        bool comma;
        TH_TRY(seq_items(ps, tuple ? ")" : "]", &l, &comma));
        if (tuple && l.n == 1 && !comma) return (*out = l.items[0]), TH_OK; /* (x) is x */
        return seq_from(ps, tuple ? TH_ARG_TUPLE : TH_ARG_LIST, &l, out);
      }
      if (is_punct(t, "{")) {
        next(ps);
        return dict_expr(ps, out);
      }
      break;
    default: break;
  }
  return error_tok(ps, t, "expected an expression, found %s", describe(t, buf, sizeof buf));
}

/* expr := "-" expr | "+" expr | primary   (negation of numbers only) */
static th_status expr(parser *ps, th_arg *out) {
  if (++ps->depth > MAX_NEST) return error_tok(ps, peek(ps), "expression nested too deeply");
  token *t = peek(ps);
  th_status st;
  if (is_punct(t, "-") && peek_at(ps, 1)->kind == TK_INT && peek_at(ps, 1)->int_2p63) {
    /* -9223372036854775808: INT64_MIN, as the printer writes it */
    next(ps);
    next(ps);
    *out = th_arg_int(INT64_MIN);
    st = TH_OK;
  } else if (is_punct(t, "-") || is_punct(t, "+")) {
    next(ps);
    st = expr(ps, out);
    if (st == TH_OK && is_punct(t, "-")) {
      if (out->kind == TH_ARG_INT) {
        if (out->u.i == INT64_MIN)
          st = error_tok(ps, t, "integer literal does not fit in 64 bits");
        else
          out->u.i = -out->u.i;
      } else if (out->kind == TH_ARG_FLOAT) {
        out->u.f = -out->u.f;
      } else if (out->kind == TH_ARG_BOOL) {
        *out = th_arg_int(-(int64_t)out->u.b);
      } else {
        st = error_tok(ps, t, "unary minus applies to numbers only");
      }
    } else if (st == TH_OK && out->kind != TH_ARG_INT && out->kind != TH_ARG_FLOAT && out->kind != TH_ARG_BOOL) {
      st = error_tok(ps, t, "unary plus applies to numbers only");
    }
  } else {
    st = primary(ps, out);
  }
  ps->depth--;
  return st;
}

/* ---- statements --------------------------------------------------------------------------------------------- */

/* An assignment target: NAME, _, (targets), [targets]. */
typedef struct target {
  enum { TG_NAME, TG_SKIP, TG_TUPLE, TG_LIST } kind;
  const char *name;
  int col;
  struct target *items;
  int n;
  bool comma; /* TUPLE/LIST: a comma was written (so "a, = f()" is a 1-tuple) */
} target;

static th_status targets(parser *ps, target *out);

static th_status target_one(parser *ps, target *out) {
  if (++ps->depth > MAX_NEST) return error_tok(ps, peek(ps), "assignment target nested too deeply");
  token *t = peek(ps);
  memset(out, 0, sizeof *out);
  out->col = t->col;
  th_status st = TH_OK;
  if (t->kind == TK_NAME) {
    next(ps);
    if (t->len == 1 && t->p[0] == '_') {
      out->kind = TG_SKIP;
    } else {
      out->kind = TG_NAME;
      out->name = tok_str(ps, t);
      if (!out->name)
        st = TH_ERR_NOMEM;
      else if (!strcmp(out->name, "None") || !strcmp(out->name, "True") || !strcmp(out->name, "False") ||
               !strcmp(out->name, "del") || !strcmp(out->name, "return") || !strcmp(out->name, "def"))
        st = error_tok(ps, t, "cannot assign to %s", out->name);
    }
  } else if (is_punct(t, "(") || is_punct(t, "[")) {
    bool tuple = is_punct(t, "(");
    next(ps);
    out->kind = tuple ? TG_TUPLE : TG_LIST;
    if (!is_punct(peek(ps), tuple ? ")" : "]")) st = targets(ps, out);
    if (st == TH_OK) st = expect(ps, tuple ? ")" : "]");
    if (st == TH_OK && tuple && out->n == 1 && !out->comma) *out = out->items[0]; /* (t0) is t0 */
  } else {
    char buf[64];
    st = error_tok(ps, t, "expected an assignment target, found %s", describe(t, buf, sizeof buf));
  }
  ps->depth--;
  return st;
}

/* targets := target ("," target)* [","] — appended to out->items. */
static th_status targets(parser *ps, target *out) {
  int cap = 0;
  for (;;) {
    if (out->n == cap) {
      int ncap = cap ? cap * 2 : 4;
      target *it = th_arena_alloc(ps->pa, sizeof(target) * (size_t)ncap);
      if (!it) return TH_ERR_NOMEM;
      if (out->n) memcpy(it, out->items, sizeof(target) * (size_t)out->n);
      out->items = it;
      cap = ncap;
    }
    if (out->n >= MAX_ITEMS) return error_tok(ps, peek(ps), "too many assignment targets");
    TH_TRY(target_one(ps, &out->items[out->n]));
    out->n++;
    if (!consume(ps, ",")) return TH_OK;
    out->comma = true;
    token *t = peek(ps);
    if (is_punct(t, "=") || is_punct(t, ")") || is_punct(t, "]")) return TH_OK;
  }
}

/* The lines under a statement: its subsymbol comments. */
typedef struct block {
  int first, end; /* line indices [first, end) */
} block;

static th_status parse_stmt(parser *ps, int li, int content, block sub, int depth, th_bsym **out);

/* Subsymbols: the comment lines of `blk`, each "# statement" at one indentation, deeper lines
 * belonging to the statement above them. */
static th_status parse_subs(parser *ps, block blk, int depth, th_vec *subs) {
  int indent = -1;
  for (int i = blk.first; i < blk.end;) {
    const line *ln = &ps->lines[i];
    if (ln->blank) {
      i++;
      continue;
    }
    if (indent < 0) indent = ln->indent;
    if (ln->indent != indent)
      return syntax_error(ps, ln, ln->indent + 1, "unexpected indentation in the subsymbols (expected %d spaces)",
                          indent);
    if (!ln->comment) return syntax_error(ps, ln, ln->indent + 1, "expected a '# ' subsymbol line");
    int j = i + 1;
    while (j < blk.end && (ps->lines[j].blank || ps->lines[j].indent > indent)) j++;
    /* trailing blank lines belong to nobody */
    int last = j;
    while (last > i + 1 && ps->lines[last - 1].blank) last--;
    int content = ln->indent + 1; /* after '#' */
    if (content < ln->len && ln->p[content] == ' ') content++;
    th_bsym *b = NULL;
    TH_TRY(parse_stmt(ps, i, content, (block){i + 1, last}, depth, &b));
    if (b) TH_TRY(th_vec_push(ps->tr->arena, subs, b));
    i = j;
  }
  return TH_OK;
}

static bool block_empty(parser *ps, block b) {
  for (int i = b.first; i < b.end; i++)
    if (!ps->lines[i].blank) return false;
  return true;
}

/* Builds an output arg from targets, every name already defined or typed by *tc (single name only). */
static th_status out_from_defined(parser *ps, const target *tg, th_arg *out, bool *ok) {
  switch (tg->kind) {
    case TG_SKIP: *out = th_arg_none(); return TH_OK;
    case TG_NAME: {
      entry *e = map_find(ps, tg->name);
      if (!e || !e->defined) {
        *ok = false;
        *out = th_arg_none();
        return TH_OK;
      }
      *out = th_arg_value(e->v);
      return TH_OK;
    }
    case TG_TUPLE:
    case TG_LIST: {
      th_arg *items;
      TH_TRY(alloc_items(ps, tg->n, &items));
      for (int i = 0; i < tg->n; i++) TH_TRY(out_from_defined(ps, &tg->items[i], &items[i], ok));
      *out = tg->kind == TG_TUPLE ? th_arg_tuple(tg->n, items) : th_arg_list(tg->n, items);
      return TH_OK;
    }
  }
  return TH_OK;
}

/* Matches targets against a meta's output, defining each name with the inferred metadata. */
static th_status out_from_inferred(parser *ps, const target *tg, const th_arg *inf, th_arg *out, const char *opname) {
  switch (tg->kind) {
    case TG_SKIP: *out = th_arg_none(); return TH_OK;
    case TG_NAME: {
      if (inf->kind != TH_ARG_VALUE || !inf->u.value)
        return line_error(ps, ps->ln, tg->col, TH_ERR_SYNTAX,
                          "'%s' is assigned a non-tensor output of %s; print it as _", tg->name, opname);
      vtype t;
      type_of(inf->u.value, &t);
      th_value *v;
      TH_TRY(define_name(ps, tg->name, tg->col, &t, &v));
      *out = th_arg_value(v);
      return TH_OK;
    }
    case TG_TUPLE:
    case TG_LIST: {
      if ((inf->kind != TH_ARG_TUPLE && inf->kind != TH_ARG_LIST) || inf->u.seq.n != tg->n)
        return line_error(ps, ps->ln, tg->col, TH_ERR_SYNTAX, "%s returns %s, which does not unpack into %d target%s",
                          opname,
                          inf->kind == TH_ARG_TUPLE || inf->kind == TH_ARG_LIST ? "a sequence of another length"
                          : inf->kind == TH_ARG_VALUE                           ? "one value"
                                                                                : "no value",
                          tg->n, tg->n == 1 ? "" : "s");
      th_arg *items;
      TH_TRY(alloc_items(ps, tg->n, &items));
      for (int i = 0; i < tg->n; i++)
        TH_TRY(out_from_inferred(ps, &tg->items[i], &inf->u.seq.items[i], &items[i], opname));
      *out = tg->kind == TG_TUPLE ? th_arg_tuple(tg->n, items) : th_arg_list(tg->n, items);
      return TH_OK;
    }
  }
  return TH_OK;
}

static const char *first_undefined(parser *ps, const target *tg, int *col) {
  if (tg->kind == TG_NAME && !name_defined(ps, tg->name)) return (*col = tg->col), tg->name;
  if (tg->kind == TG_TUPLE || tg->kind == TG_LIST)
    for (int i = 0; i < tg->n; i++) {
      const char *n = first_undefined(ps, &tg->items[i], col);
      if (n) return n;
    }
  return NULL;
}

static bool same_out(const th_arg *a, const th_arg *b) {
  if (a->kind != b->kind) return false;
  if (a->kind == TH_ARG_VALUE) return a->u.value == b->u.value;
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    if (a->u.seq.n != b->u.seq.n) return false;
    for (int i = 0; i < a->u.seq.n; i++)
      if (!same_out(&a->u.seq.items[i], &b->u.seq.items[i])) return false;
    return true;
  }
  return a->kind == TH_ARG_NONE;
}

/* The trailing "# name: \"type\"" of a statement, if it has that form. */
static th_status type_comment(parser *ps, const token *c, const char **name, int *col, vtype *t, bool *has) {
  *has = false;
  /* tokenize the comment text on its own */
  int save_n = ps->ntoks, save_pos = ps->pos, save_level = ps->tlevel;
  token *save = ps->toks;
  ps->tlevel = TYPE_COMMENT_LEVEL;
  th_status st = tokenize(ps, (int)(c->sval - ps->ln->p));
  ps->tlevel = save_level;
  if (st != TH_OK && st != TH_ERR_NOMEM) {
    /* a free-form trailing comment that is not Python: ignore it */
    th_clear_error();
    st = TH_OK;
  } else if (st == TH_OK && (ps->ntoks == 4 && ps->toks[0].kind == TK_NAME && is_punct(&ps->toks[1], ":") &&
                             ps->toks[2].kind == TK_STR && ps->toks[3].kind == TK_EOF)) {
    *name = tok_str(ps, &ps->toks[0]);
    *col = ps->toks[0].col;
    if (!*name)
      st = TH_ERR_NOMEM;
    else {
      const char *why;
      int at;
      if (!parse_type_string(ps->toks[2].sval, t, &why, &at))
        st = syntax_error(ps, ps->ln, str_col(&ps->toks[2], at), "invalid type \"%s\": %s", ps->toks[2].sval, why);
      else
        *has = true;
    }
  }
  ps->toks = save;
  ps->ntoks = save_n;
  ps->pos = save_pos;
  return st;
}

static th_status make_bsym(parser *ps, const th_symbol *sym, int nargs, th_arg *args, th_arg out, th_bsym **b) {
  *b = th_bsym_new(ps->tr, sym, nargs, args, out);
  if (!*b) return TH_ERR_NOMEM;
  (*b)->line = ps->ln->lineno;
  return TH_OK;
}

/* del NAME ("," NAME)* */
static th_status del_stmt(parser *ps, th_bsym **out) {
  arglist l = {0};
  do {
    token *t = peek(ps);
    if (t->kind != TK_NAME) {
      char buf[64];
      return error_tok(ps, t, "expected a name after 'del', found %s", describe(t, buf, sizeof buf));
    }
    th_value *v;
    TH_TRY(use_name(ps, t, &v));
    next(ps);
    TH_TRY(arglist_push(ps, &l, th_arg_value(v), NULL));
  } while (consume(ps, ","));
  th_arg *args;
  TH_TRY(alloc_items(ps, 1, &args));
  TH_TRY(seq_from(ps, TH_ARG_TUPLE, &l, &args[0]));
  return make_bsym(ps, th_symbol_by_role(TH_SYM_DEL), 1, args, th_arg_none(), out);
}

/* return [expr ("," expr)*] — several values become one tuple. */
static th_status return_stmt(parser *ps, th_bsym **out) {
  th_arg *args;
  TH_TRY(alloc_items(ps, 2, &args));
  args[0] = th_arg_none();
  args[1] = th_arg_tuple(0, NULL); /* updated inputs: not printed, so none when parsed */
  if (peek(ps)->kind != TK_EOF && peek(ps)->kind != TK_COMMENT) {
    arglist l = {0};
    bool comma = false;
    for (;;) {
      th_arg a;
      TH_TRY(expr(ps, &a));
      TH_TRY(arglist_push(ps, &l, a, NULL));
      if (!consume(ps, ",")) break;
      comma = true;
      if (peek(ps)->kind == TK_EOF || peek(ps)->kind == TK_COMMENT) break;
    }
    if (l.n == 1 && !comma)
      args[0] = l.items[0];
    else
      TH_TRY(seq_from(ps, TH_ARG_TUPLE, &l, &args[0]));
  }
  return make_bsym(ps, th_symbol_by_role(TH_SYM_RETURN), 2, args, th_arg_none(), out);
}

/* Binds a call to a schema symbol. Returns the status of th_schema_bind (message set). */
static th_status bind_call(parser *ps, const th_symbol *sym, const arglist *pos, const arglist *kw, th_arg **bound) {
  return th_schema_bind(ps->tr, sym, pos->n, pos->items, kw->n, (const char *const *)kw->names, kw->items, bound);
}

/* targets "=" NAME — Thunder's unpack_sequence of a Collection ("C0, C1, = saved_for_backward"). The
 * targets are names or `_`; each name is defined here and typed by the "# NAME: \"<type>\"" lines that
 * follow at the same indentation (the body loop reads them: ps->pending). The collection's items
 * become these values (a `_` one NULL). */
static th_status unpack_stmt(parser *ps, const target *tg, block sub, th_bsym **out) {
  token *t = next(ps);
  const char *name = tok_str(ps, t);
  if (!name) return TH_ERR_NOMEM;
  if (tg->kind != TG_TUPLE && tg->kind != TG_LIST)
    return error_tok(ps, t, "expected a call after '=' (only a Collection is unpacked, as `a, b, = %s`)", name);
  entry *e = map_find(ps, name);
  if (!e || !e->defined) return error_tok(ps, t, "name '%s' is not defined", name);
  th_value *c = e->v;
  if (!c->is_collection) {
    char ty[128];
    th_print_value_type(c, ty, sizeof ty);
    return error_tok(ps, t, "cannot unpack '%s': it is \"%s\", not a Collection", name, ty);
  }
  if (c->coll_items) return error_tok(ps, t, "'%s' is unpacked a second time", name);
  if (peek(ps)->kind == TK_COMMENT) next(ps);
  if (!block_empty(ps, sub))
    return syntax_error(ps, &ps->lines[sub.first], ps->lines[sub.first].indent + 1, "an unpacking has no subsymbols");
  th_value **items = th_arena_alloc(ps->pa, sizeof(th_value *) * (size_t)(tg->n ? tg->n : 1));
  if (!items) return TH_ERR_NOMEM;
  for (int i = 0; i < tg->n; i++) {
    const target *x = &tg->items[i];
    items[i] = NULL;
    if (x->kind == TG_SKIP) continue;
    if (x->kind != TG_NAME) return syntax_error(ps, ps->ln, x->col, "an unpacking assigns names or _");
    entry *d = map_find(ps, x->name);
    if (d && d->defined)
      return syntax_error(ps, ps->ln, x->col, "'%s' is defined again; it was defined on line %d", x->name, d->def_line);
    if (!d) {
      if (!(d = map_insert(ps, x->name))) return TH_ERR_NOMEM;
      if (!(d->v = new_named_value(ps, x->name)))
        return line_error(ps, ps->ln, x->col, th_last_status(), "%s", th_last_error());
    }
    d->defined = true;
    d->def_line = ps->ln->lineno;
    items[i] = d->v;
  }
  TH_TRY(th_collection_set_items(ps->tr, c, tg->n, items));
  *out = th_unpack_sequence_new(ps->tr, c);
  if (!*out) return TH_ERR_NOMEM;
  (*out)->line = ps->ln->lineno;
  ps->pending = items;
  ps->npending = tg->n;
  ps->next_pending = 0;
  ps->pending_line = ps->ln->lineno;
  while (ps->next_pending < ps->npending && !ps->pending[ps->next_pending]) ps->next_pending++;
  return TH_OK;
}

/* A line of the body while an unpacking waits for type comments: "# NAME: \"<type>\"" of the next
 * unpacked value types it (*matched); anything else is an error naming the value left untyped. */
static th_status pending_type(parser *ps, const line *ln, bool *matched) {
  *matched = false;
  const th_value *v = ps->pending[ps->next_pending];
  ps->ln = ln;
  ps->tlevel = 0;
  if (ln->comment) {
    th_status st = tokenize(ps, ln->indent + 1);
    if (st == TH_ERR_NOMEM) return st;
    const token *tk = ps->toks;
    if (st == TH_OK && ps->ntoks == 4 && tk[0].kind == TK_NAME && is_punct(&tk[1], ":") && tk[2].kind == TK_STR &&
        tk[3].kind == TK_EOF && (size_t)tk[0].len == strlen(v->name) && !strncmp(tk[0].p, v->name, (size_t)tk[0].len)) {
      vtype t;
      const char *why;
      int at = 0;
      if (!parse_type_string(tk[2].sval, &t, &why, &at))
        return syntax_error(ps, ln, str_col(&tk[2], at), "invalid type \"%s\": %s", tk[2].sval, why);
      apply_type((th_value *)v, &t);
      TH_TRY(th_value_check(v, v->name));
      *matched = true;
      ps->next_pending++;
      while (ps->next_pending < ps->npending && !ps->pending[ps->next_pending]) ps->next_pending++;
      return TH_OK;
    }
    if (st != TH_OK) th_clear_error();
  }
  return syntax_error(ps, ln, ln->indent + 1,
                      "'%s' (unpacked on line %d) has no type comment: expected '# %s: \"<type>\"' here", v->name,
                      ps->pending_line, v->name);
}

/* The statement on line li, its text starting at byte `content`, its subsymbols in `sub`. */
static th_status parse_stmt(parser *ps, int li, int content, block sub, int depth, th_bsym **out) {
  *out = NULL;
  if (depth > MAX_NEST) return syntax_error(ps, &ps->lines[li], 1, "subsymbols nested too deeply");
  const line *ln = &ps->lines[li];
  ps->ln = ln;
  ps->tlevel = depth; /* this line's tokens survive the parsing of its subsymbols (depth + 1) */
  if (content < ln->len && ln->p[content] == '#') {
    /* a comment (a comment subsymbol prints as "# # text") */
    if (!block_empty(ps, sub)) return syntax_error(ps, &ps->lines[sub.first], 1, "a comment has no subsymbols");
    int c = content + 1;
    if (c < ln->len && ln->p[c] == ' ') c++;
    th_arg *args;
    TH_TRY(alloc_items(ps, 1, &args));
    const char *text = th_arena_strndup(ps->tr->arena, ln->p + c, (size_t)(ln->len - c));
    if (!text) return TH_ERR_NOMEM;
    args[0] = th_arg_str(text);
    return make_bsym(ps, th_symbol_by_role(TH_SYM_COMMENT), 1, args, th_arg_none(), out);
  }
  TH_TRY(tokenize(ps, content));
  token *first = peek(ps);
  if (first->kind == TK_EOF) return syntax_error(ps, ln, first->col, "expected a statement");
  if (is_name(first, "del") || is_name(first, "return")) {
    bool is_del = is_name(first, "del");
    next(ps);
    TH_TRY(is_del ? del_stmt(ps, out) : return_stmt(ps, out));
    token *t = peek(ps);
    if (t->kind != TK_EOF && t->kind != TK_COMMENT) {
      char buf[64];
      return error_tok(ps, t, "unexpected %s", describe(t, buf, sizeof buf));
    }
    if (!block_empty(ps, sub))
      return syntax_error(ps, &ps->lines[sub.first], ps->lines[sub.first].indent + 1, "'%s' has no subsymbols",
                          is_del ? "del" : "return");
    return TH_OK;
  }
  /* [targets "="] call */
  target tg;
  bool has_lhs = false;
  memset(&tg, 0, sizeof tg);
  tg.kind = TG_TUPLE;
  if (!(first->kind == TK_NAME && (is_punct(peek_at(ps, 1), "(") || is_punct(peek_at(ps, 1), ".")) &&
        !(first->len == 1 && first->p[0] == '_'))) {
    TH_TRY(targets(ps, &tg));
    TH_TRY(expect(ps, "="));
    has_lhs = true;
    token *src = peek(ps), *after = peek_at(ps, 1);
    if (src->kind == TK_NAME && (after->kind == TK_EOF || after->kind == TK_COMMENT)) {
      if (depth > 0) return error_tok(ps, src, "an unpacking cannot be a subsymbol");
      return unpack_stmt(ps, &tg, sub, out);
    }
    if (tg.n == 1 && !tg.comma) tg = tg.items[0]; /* a single target, not a 1-tuple written "a, = ..." */
  }
  token *callee_tok = peek(ps);
  const char *callee;
  TH_TRY(dotted_name(ps, &callee));
  if (!is_punct(peek(ps), "(")) {
    char buf[64];
    return error_tok(ps, peek(ps), "expected '(' after '%s' (a statement is a call), found %s", callee,
                     describe(peek(ps), buf, sizeof buf));
  }
  const th_symbol *sym = th_symbol_lookup(callee);
  if (sym && (sym->tags & TH_TAG_UTILITY)) sym = NULL; /* return/del/comment have their own syntax */
  bool has_subs = !block_empty(ps, sub);
  if (!sym && !has_subs)
    return line_error(ps, ln, callee_tok->col, TH_ERR_VALUE,
                      "unknown op '%s': it is not a tensor op this build knows and no decomposition is "
                      "printed under it",
                      callee);
  arglist pos = {0}, kw = {0};
  TH_TRY(call_args(ps, &pos, &kw));
  /* an optional type comment, then the end of the line */
  const char *tc_name = NULL;
  int tc_col = 0;
  vtype tc;
  bool has_tc = false;
  token *t = peek(ps);
  if (t->kind == TK_COMMENT) {
    TH_TRY(type_comment(ps, t, &tc_name, &tc_col, &tc, &has_tc));
    next(ps);
  }
  t = peek(ps);
  if (t->kind != TK_EOF) {
    char buf[64];
    return error_tok(ps, t, "unexpected %s after the call", describe(t, buf, sizeof buf));
  }
  if (has_tc) {
    if (!has_lhs || tg.kind != TG_NAME)
      return syntax_error(ps, ln, tc_col, "a type comment needs a statement with one named output");
    if (strcmp(tg.name, tc_name))
      return syntax_error(ps, ln, tc_col, "the type comment names '%s' but the statement assigns '%s'", tc_name,
                          tg.name);
  }

  /* subsymbols (they may define this statement's outputs) */
  th_vec subs = {0};
  TH_TRY(parse_subs(ps, sub, depth + 1, &subs));
  ps->ln = ln;

  /* outputs known without running a meta: typed, or defined by a subsymbol */
  th_arg outv = th_arg_none();
  bool out_known = true;
  if (has_lhs) {
    if (has_tc) {
      th_value *v;
      TH_TRY(define_name(ps, tg.name, tg.col, &tc, &v));
      outv = th_arg_value(v);
    } else {
      TH_TRY(out_from_defined(ps, &tg, &outv, &out_known));
    }
  }

  /* the symbol */
  bool exact = sym && !strcmp(callee, sym->qualname);
  th_arg *bound = NULL;
  th_status bst = TH_ERR_VALUE;
  char bind_msg[512] = "";
  if (sym) {
    bst = bind_call(ps, sym, &pos, &kw, &bound);
    if (bst != TH_OK) snprintf(bind_msg, sizeof bind_msg, "%s", th_last_error());
    if (bst == TH_ERR_NOMEM) return bst;
  }
  const th_bsym *only = subs.n == 1 ? subs.items[0] : NULL;
  bool collapse = sym && !exact && only && only->sym->id != TH_OP_DYNAMIC && !(only->sym->tags & TH_TAG_UTILITY) &&
                  out_known && same_out(&only->out, &outv);
  if (collapse) {
    /* "t2 = torch.nn.functional.linear(...)" over "# t2 = ltorch.linear(...)": the printed alias is
     * the executor's spelling of the ltorch op printed underneath; keep that one. */
    th_bsym *b = subs.items[0];
    b->line = ln->lineno;
    *out = b;
    return TH_OK;
  }
  th_bsym *b;
  if (sym && bst == TH_OK) {
    if (has_lhs && !out_known) {
      th_arg inf;
      th_status st = th_symbol_infer(ps->tr, sym, bound, &inf);
      if (st != TH_OK) {
        int col;
        const char *nm = first_undefined(ps, &tg, &col);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", th_last_error());
        return line_error(ps, ln, col, st, "'%s' has no type comment and the meta of %s fails: %s", nm ? nm : "?",
                          sym->qualname, msg);
      }
      TH_TRY(out_from_inferred(ps, &tg, &inf, &outv, sym->qualname));
    }
    TH_TRY(make_bsym(ps, sym, sym->schema.nparams, bound, outv, &b));
  } else if (sym && (exact || !has_subs)) {
    return line_error(ps, ln, callee_tok->col, bst, "%s", bind_msg);
  } else {
    /* a fusion region, an executor op, or an alias whose printed arguments are not ours: a dynamic
     * symbol whose meaning is the decomposition printed under it */
    if (has_lhs && !out_known) {
      int col;
      const char *nm = first_undefined(ps, &tg, &col);
      return line_error(ps, ln, col, TH_ERR_SYNTAX,
                        "'%s' has no type comment and is not defined by the subsymbols of %s", nm ? nm : "?", callee);
    }
    th_symbol *dyn = th_symbol_new_dynamic(ps->tr, callee);
    if (!dyn) return TH_ERR_NOMEM;
    th_arg *args;
    TH_TRY(alloc_items(ps, pos.n, &args));
    if (pos.n) memcpy(args, pos.items, sizeof(th_arg) * (size_t)pos.n);
    TH_TRY(make_bsym(ps, dyn, pos.n, args, outv, &b));
    if (kw.n) {
      b->nkwargs = kw.n;
      b->kwargs = th_arena_alloc(ps->tr->arena, sizeof(th_arg) * (size_t)kw.n);
      b->kwnames = th_arena_alloc(ps->tr->arena, sizeof(char *) * (size_t)kw.n);
      if (!b->kwargs || !b->kwnames) return TH_ERR_NOMEM;
      memcpy(b->kwargs, kw.items, sizeof(th_arg) * (size_t)kw.n);
      for (int i = 0; i < kw.n; i++) {
        b->kwnames[i] = th_arena_strdup(ps->tr->arena, kw.names[i]);
        if (!b->kwnames[i]) return TH_ERR_NOMEM;
      }
    }
    /* keep fresh fusion names clear of parsed ones */
    if (!strncmp(callee, "fusion", 6) && is_digit((unsigned char)callee[6])) {
      long k = strtol(callee + 6, NULL, 10);
      if (k >= ps->tr->nfusions && k < 1000000) ps->tr->nfusions = (int)k + 1;
    }
  }
  b->nsubs = subs.n;
  b->subs = (th_bsym **)subs.items;
  *out = b;
  return TH_OK;
}

/* ---- the function ------------------------------------------------------------------------------------------ */

static bool starts_with_word(const line *ln, const char *w) {
  int n = (int)strlen(w);
  int i = ln->indent;
  return ln->len - i >= n && !strncmp(ln->p + i, w, (size_t)n) && (ln->len - i == n || ln->p[i + n] == ' ');
}

/* "# /path/to/file.py:1966: \t<source>" — a source location Thunder prints above a bsym. */
static bool is_source_location(const line *ln) {
  int i = ln->indent + 1;
  if (i < ln->len && ln->p[i] == ' ') i++;
  int start = i;
  while (i < ln->len && ln->p[i] != ' ' && ln->p[i] != '\t' && ln->p[i] != ':') i++;
  if (i == start || i >= ln->len || ln->p[i] != ':') return false;
  i++;
  int d = i;
  while (i < ln->len && is_digit((unsigned char)ln->p[i])) i++;
  return i > d && i < ln->len && ln->p[i] == ':';
}

/* def NAME "(" [NAME ("," NAME)* [","]] ")" ":" */
static th_status def_line(parser *ps, const line *ln, arglist *params, const char **fn_name) {
  ps->ln = ln;
  ps->tlevel = 0;
  TH_TRY(tokenize(ps, ln->indent));
  next(ps); /* def */
  token *t = peek(ps);
  if (t->kind != TK_NAME) return error_tok(ps, t, "expected the function name after 'def'");
  *fn_name = tok_str(ps, t);
  if (!*fn_name) return TH_ERR_NOMEM;
  next(ps);
  TH_TRY(expect(ps, "("));
  while (!is_punct(peek(ps), ")")) {
    t = peek(ps);
    if (is_punct(t, "*") || is_punct(t, "**"))
      return error_tok(ps, t, "variadic parameters are not supported in a trace signature");
    if (t->kind != TK_NAME) {
      char buf[64];
      return error_tok(ps, t, "expected a parameter name, found %s", describe(t, buf, sizeof buf));
    }
    const char *name = tok_str(ps, t);
    if (!name) return TH_ERR_NOMEM;
    /* the name map holds the parameters from here on (by name, so lookups stay linear overall) */
    if (map_find(ps, name)) return error_tok(ps, t, "duplicate parameter '%s'", name);
    next(ps);
    if (is_punct(peek(ps), "=")) return error_tok(ps, peek(ps), "parameter defaults are not supported");
    th_arg col = th_arg_int(t->col);
    TH_TRY(arglist_push(ps, params, col, name));
    entry *e = map_insert(ps, name);
    if (!e) return TH_ERR_NOMEM;
    e->param = params->n;
    if (!consume(ps, ",")) break;
  }
  TH_TRY(expect(ps, ")"));
  TH_TRY(expect(ps, ":"));
  t = peek(ps);
  if (t->kind != TK_EOF && t->kind != TK_COMMENT) {
    char buf[64];
    return error_tok(ps, t, "unexpected %s after the signature", describe(t, buf, sizeof buf));
  }
  return TH_OK;
}

/* A line "# NAME: \"type\"" of the input section (the comments right under the signature). Defines
 * the input NAME and sets *matched. A comment that does not start with "NAME:" is an ordinary comment
 * (*matched stays false). Errors: a parameter's type comment that is malformed (no string, junk after
 * it, an invalid type string) or repeated, and a type comment of a name that is not a parameter. */
static th_status input_type(parser *ps, const line *ln, bool *typed, bool *matched) {
  *matched = false;
  ps->ln = ln;
  ps->tlevel = 0;
  th_status st = tokenize(ps, ln->indent + 1);
  if (st == TH_ERR_NOMEM) return st;
  /* on a tokenizer error, ps->toks holds the tokens before the bad character */
  const token *tk = ps->toks;
  int nt = ps->ntoks;
  if (!(nt >= 2 && tk[0].kind == TK_NAME && is_punct(&tk[1], ":"))) {
    if (st != TH_OK) th_clear_error();
    return TH_OK; /* an ordinary comment */
  }
  const char *name = tok_str(ps, &tk[0]);
  if (!name) return TH_ERR_NOMEM;
  entry *e = map_find(ps, name);
  int k = e ? e->param - 1 : -1;
  bool has_str = nt >= 3 && tk[2].kind == TK_STR;
  if (k < 0) {
    /* exactly the form of a type comment: a name that is not in the signature */
    if (st == TH_OK && has_str && tk[3].kind == TK_EOF)
      return syntax_error(ps, ln, tk[0].col,
                          "'%s' is not a parameter of %s (a type comment under the signature "
                          "names an input)",
                          name, ps->tr->fn_name);
    if (st != TH_OK) th_clear_error();
    return TH_OK;
  }
  /* from here on the line is the type comment of parameter `name` */
  if (!has_str) {
    if (st != TH_OK && nt == 2) return st; /* e.g. an unterminated string */
    if (st != TH_OK) th_clear_error();
    char buf[64];
    return syntax_error(ps, ln, nt >= 3 ? tk[2].col : tk[1].col + 1,
                        "expected the type of input '%s' as a string such as \"cpu f32[2, 3]\", found %s", name,
                        nt >= 3 ? describe(&tk[2], buf, sizeof buf) : "end of line");
  }
  if (st != TH_OK) return st; /* a character no token starts with, after the type */
  if (tk[3].kind != TK_EOF && tk[3].kind != TK_COMMENT) {
    char buf[64];
    return syntax_error(ps, ln, tk[3].col, "unexpected %s after the type of input '%s'",
                        describe(&tk[3], buf, sizeof buf), name);
  }
  if (typed[k])
    return syntax_error(ps, ln, tk[0].col, "input '%s' has a second type comment (the first is on line %d)", name,
                        e->def_line);
  vtype t;
  const char *why;
  int at = 0;
  if (!parse_type_string(tk[2].sval, &t, &why, &at))
    return syntax_error(ps, ln, str_col(&tk[2], at), "invalid type \"%s\": %s", tk[2].sval, why);
  th_value *v;
  TH_TRY(define_name(ps, name, tk[0].col, &t, &v));
  typed[k] = true;
  *matched = true;
  return TH_OK;
}

static th_status parse_trace(parser *ps, const char *text) {
  TH_TRY(th_lex_lines(&ps->lx, text, &ps->lines, &ps->nlines));
  /* header: provenance, imports, decorators */
  int i = 0;
  const char *provenance = NULL;
  for (; i < ps->nlines; i++) {
    const line *ln = &ps->lines[i];
    if (ln->blank) continue;
    if (ln->comment) {
      static const char prov[] = "# Constructed by ";
      if (!provenance && ln->indent == 0 && ln->len > (int)sizeof prov - 1 && !strncmp(ln->p, prov, sizeof prov - 1)) {
        provenance = th_arena_strndup(ps->pa, ln->p + sizeof prov - 1, (size_t)ln->len - (sizeof prov - 1));
        if (!provenance) return TH_ERR_NOMEM;
      }
      continue;
    }
    if (ln->indent != 0) return syntax_error(ps, ln, ln->indent + 1, "unexpected indent before 'def'");
    if (starts_with_word(ln, "import") || starts_with_word(ln, "from") || ln->p[0] == '@') continue;
    if (starts_with_word(ln, "def")) break;
    return syntax_error(ps, ln, 1, "expected 'def' (a trace is one function)");
  }
  if (i == ps->nlines) {
    const line *last = ps->nlines ? &ps->lines[ps->nlines - 1] : NULL;
    return syntax_error(ps, last, last ? last->len + 1 : 0, "expected 'def': the text has no function");
  }
  arglist params = {0};
  const char *fn_name = NULL;
  TH_TRY(def_line(ps, &ps->lines[i], &params, &fn_name));
  const line *defl = &ps->lines[i];
  ps->tr = th_trace_new(fn_name);
  if (!ps->tr) return th_last_status() ? th_last_status() : TH_ERR_NOMEM;
  ps->scratch = th_trace_derive(ps->tr, NULL);
  if (!ps->scratch) return TH_ERR_NOMEM;
  if (provenance) TH_TRY(th_trace_set_provenance(ps->tr, provenance));
  /* the inputs, in signature order */
  for (int k = 0; k < params.n; k++) {
    th_value *v;
    ps->ln = defl;
    token pt;
    memset(&pt, 0, sizeof pt);
    pt.kind = TK_NAME;
    pt.p = params.names[k];
    pt.len = (int)strlen(params.names[k]);
    pt.col = (int)params.items[k].u.i;
    entry *e = map_find(ps, params.names[k]); /* def_line put it there */
    if (!e) return th_error(TH_ERR_RUNTIME, "parser: parameter '%s' missing from the name map", params.names[k]);
    e->v = v = new_named_value(ps, params.names[k]);
    if (!v) return line_error(ps, defl, pt.col, th_last_status(), "%s", th_last_error());
    e->use_line = defl->lineno;
    e->use_col = pt.col;
    TH_TRY(th_vec_push(ps->tr->arena, &ps->tr->inputs, v));
  }
  bool *typed = th_arena_alloc(ps->pa, sizeof(bool) * (size_t)(params.n ? params.n : 1));
  if (!typed) return TH_ERR_NOMEM;
  /* the body */
  int body = -1;
  bool in_inputs = true, inputs_checked = false;
  for (i = i + 1; i < ps->nlines;) {
    const line *ln = &ps->lines[i];
    if (ln->blank) {
      i++;
      continue;
    }
    if (body < 0) {
      if (ln->indent == 0) break;
      body = ln->indent;
    }
    if (ln->indent < body) break;
    if (ln->indent > body)
      return syntax_error(ps, ln, ln->indent + 1, "unexpected indent (only '# ' subsymbol lines may be deeper)");
    if (ps->next_pending < ps->npending) { /* the type comments of an unpacking */
      bool typed_now = false;
      TH_TRY(pending_type(ps, ln, &typed_now));
      i++;
      continue;
    }
    if (ln->comment) {
      bool matched = false;
      if (in_inputs) TH_TRY(input_type(ps, ln, typed, &matched));
      if (matched || is_source_location(ln)) {
        i++;
        continue;
      }
    } else {
      in_inputs = false;
    }
    int j = i + 1;
    while (j < ps->nlines && (ps->lines[j].blank || ps->lines[j].indent > body)) {
      if (!ps->lines[j].blank && !ps->lines[j].comment)
        return syntax_error(ps, &ps->lines[j], ps->lines[j].indent + 1,
                            "unexpected indent (only '# ' subsymbol lines may be deeper)");
      j++;
    }
    int last = j;
    while (last > i + 1 && ps->lines[last - 1].blank) last--;
    if (!inputs_checked && (!in_inputs || !ln->comment)) {
      /* the input section ended: every input is typed (checked once, not per statement) */
      inputs_checked = true;
      for (int k = 0; k < params.n; k++)
        if (!typed[k])
          return syntax_error(ps, defl, (int)params.items[k].u.i,
                              "input '%s' has no type comment (expected '# %s: \"<device> <dtype>[<shape>]\"' "
                              "under the signature)",
                              params.names[k], params.names[k]);
    }
    th_bsym *b = NULL;
    TH_TRY(parse_stmt(ps, i, ln->indent, (block){i + 1, last}, 0, &b));
    if (b) {
      TH_TRY(th_vec_push(ps->tr->arena, &ps->tr->bsyms, b));
      if (th_bsym_has_role(b, TH_SYM_RETURN)) ps->tr->has_return = true;
    }
    i = j;
  }
  for (int k = 0; k < params.n; k++)
    if (!typed[k])
      return syntax_error(ps, defl, (int)params.items[k].u.i, "input '%s' has no type comment", params.names[k]);
  if (ps->next_pending < ps->npending) {
    const line *ln = i < ps->nlines ? &ps->lines[i] : &ps->lines[ps->nlines - 1];
    return syntax_error(ps, ln, 1, "'%s' (unpacked on line %d) has no type comment",
                        ps->pending[ps->next_pending]->name, ps->pending_line);
  }
  for (; i < ps->nlines; i++) {
    const line *ln = &ps->lines[i];
    if (!ln->blank && !ln->comment)
      return syntax_error(ps, ln, ln->indent + 1, "unexpected text after the function body");
  }
  /* every name used must be defined somewhere */
  const entry *worst = NULL;
  for (size_t k = 0; k < ps->mapcap; k++) {
    const entry *e = &ps->map[k];
    if (e->name && !e->defined &&
        (!worst || e->use_line < worst->use_line || (e->use_line == worst->use_line && e->use_col < worst->use_col)))
      worst = e;
  }
  if (worst) {
    const line *ln = worst->use_line > 0 && worst->use_line <= ps->nlines ? &ps->lines[worst->use_line - 1] : NULL;
    return syntax_error(ps, ln, worst->use_col, "name '%s' is not defined", worst->name);
  }
  return TH_OK;
}

th_status th_trace_parse(const char *text, const char *filename, th_trace **out) {
  if (!text || !out) return th_error(TH_ERR_VALUE, "th_trace_parse: text and out must not be NULL");
  parser ps;
  memset(&ps, 0, sizeof ps);
  ps.lx.filename = filename ? filename : "<trace>";
  ps.pa = ps.lx.pa = th_arena_new();
  if (!ps.pa) return TH_ERR_NOMEM;
  th_status st = parse_trace(&ps, text);
  if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM) th_error(TH_ERR_NOMEM, "out of memory parsing a trace");
  th_trace_free(ps.scratch);
  th_arena_free(ps.pa);
  if (st != TH_OK) {
    th_trace_free(ps.tr);
    return st;
  }
  *out = ps.tr;
  return TH_OK;
}
