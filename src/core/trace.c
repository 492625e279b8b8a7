/* trace.c — sessions (ids + name supply), values, bound symbols, traces and recording (th_call).
 *
 * A session is shared by every trace of one compilation: it hands out value ids and names (one
 * counter for all prefixes, as Thunder: t0, t1, i2, t3) and owns the values, so transforms can build
 * new traces over the same values. Recording is described in ir.h. */
#include <math.h>
#include <string.h>

#include "core/ir.h"
#include "core/printer.h"

struct th_session {
  int refcnt;
  th_arena *arena; /* values and names */
  uint32_t next_id;
  uint32_t name_ctr;
  /* open-addressing set of names */
  const char **names;
  size_t nnames, cap;
};

/* ---- sessions and names ---------------------------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

static th_session *session_new(void) {
  th_session *s = th_calloc(1, sizeof *s);
  if (!s) return NULL;
  s->arena = th_arena_new();
  s->cap = 256;
  s->names = th_calloc(s->cap, sizeof(char *));
  if (!s->arena || !s->names) {
    th_arena_free(s->arena);
    th_free(s->names);
    th_free(s);
    return NULL;
  }
  s->refcnt = 1;
  return s;
}

static void session_release(th_session *s) {
  if (!s || --s->refcnt > 0) return;
  th_arena_free(s->arena);
  th_free(s->names);
  th_free(s);
}

static bool names_contains(const th_session *s, const char *name) {
  for (size_t i = hash_str(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->names[i]) return false;
    if (!strcmp(s->names[i], name)) return true;
  }
}

/* Adds name (not yet present) and returns the session's stored copy, or NULL on OOM (error set). */
static const char *names_insert(th_session *s, const char *name) {
  if ((s->nnames + 1) * 2 > s->cap) {
    size_t cap = s->cap * 2;
    const char **names = th_calloc(cap, sizeof(char *));
    if (!names) {
      th_error(TH_ERR_NOMEM, "out of memory growing the name table");
      return NULL;
    }
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->names[i]) continue;
      size_t j = hash_str(s->names[i]) & (cap - 1);
      while (names[j]) j = (j + 1) & (cap - 1);
      names[j] = s->names[i];
    }
    th_free(s->names);
    s->names = names;
    s->cap = cap;
  }
  const char *copy = th_arena_strdup(s->arena, name);
  if (!copy) return NULL;
  size_t i = hash_str(name) & (s->cap - 1);
  while (s->names[i]) i = (i + 1) & (s->cap - 1);
  s->names[i] = copy;
  s->nnames++;
  return copy;
}

/* Reserves name and returns the stored copy; NULL (error set) if used already or on OOM. */
static const char *reserve_name(th_trace *tr, const char *name) {
  if (names_contains(tr->sess, name)) {
    th_error(TH_ERR_VALUE, "Trying to add the name %s to a trace, but that name is already used", name);
    return NULL;
  }
  return names_insert(tr->sess, name);
}

bool th_name_used(const th_trace *tr, const char *name) { return names_contains(tr->sess, name); }

th_status th_name_reserve(th_trace *tr, const char *name) { return reserve_name(tr, name) ? TH_OK : th_last_status(); }

const char *th_name_fresh(th_trace *tr, const char *prefix) {
  char buf[64];
  for (;;) {
    snprintf(buf, sizeof buf, "%s%u", prefix, tr->sess->name_ctr++);
    if (!names_contains(tr->sess, buf)) break;
  }
  return names_insert(tr->sess, buf);
}

/* ---- names printed as code ------------------------------------------------------------------------- */

static bool id_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool id_char(char c) { return id_start(c) || (c >= '0' && c <= '9'); }

bool th_is_py_name(const char *s) {
  static const char *const keywords[] = {"False",  "None",   "True",    "and",      "as",       "assert", "async",
                                         "await",  "break",  "class",   "continue", "def",      "del",    "elif",
                                         "else",   "except", "finally", "for",      "from",     "global", "if",
                                         "import", "in",     "is",      "lambda",   "nonlocal", "not",    "or",
                                         "pass",   "raise",  "return",  "try",      "while",    "with",   "yield"};
  if (!s || !id_start(s[0])) return false;
  for (const char *p = s + 1; *p; p++)
    if (!id_char(*p)) return false;
  for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
    if (!strcmp(s, keywords[i])) return false;
  return true;
}

/* A short, one-line rendering of an untrusted string for error messages: control and non-ASCII bytes
 * as \xNN, cut after 40 bytes with "...". */
static const char *printable(const char *s, char *buf, size_t n) {
  size_t k = 0;
  int i = 0;
  for (; s[i] && i < 40 && k + 5 < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'')
      k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
    else
      buf[k++] = (char)c;
  }
  if (s[i] && k + 4 < n) k += (size_t)snprintf(buf + k, n - k, "...");
  buf[k < n ? k : n - 1] = 0;
  return buf;
}

/* ---- traces -------------------------------------------------------------------------------------- */

static th_trace *trace_alloc(th_session *sess, const char *fn_name) {
  th_trace *tr = th_calloc(1, sizeof *tr);
  if (!tr) goto oom;
  tr->arena = th_arena_new();
  if (!tr->arena) goto oom;
  tr->fn_name = th_arena_strdup(tr->arena, fn_name ? fn_name : "computation");
  if (!tr->fn_name) goto oom;
  tr->sess = sess;
  tr->scope = &tr->bsyms;
  return tr;
oom:
  if (tr) th_arena_free(tr->arena);
  th_free(tr);
  th_error(TH_ERR_NOMEM, "out of memory creating a trace");
  return NULL;
}

th_trace *th_trace_new(const char *fn_name) {
  if (fn_name && !th_is_py_name(fn_name)) {
    char b[200];
    th_error(TH_ERR_VALUE, "th_trace_new: invalid function name '%s': not a Python identifier",
             printable(fn_name, b, sizeof b));
    return NULL;
  }
  th_session *s = session_new();
  if (!s) {
    th_error(TH_ERR_NOMEM, "out of memory creating a trace");
    return NULL;
  }
  th_trace *tr = trace_alloc(s, fn_name);
  if (!tr) session_release(s);
  return tr;
}

th_trace *th_trace_derive(const th_trace *like, const char *fn_name) {
  th_trace *tr = trace_alloc(like->sess, fn_name ? fn_name : like->fn_name);
  if (tr) like->sess->refcnt++;
  return tr;
}

void th_trace_free(th_trace *tr) {
  if (!tr) return;
  session_release(tr->sess);
  th_arena_free(tr->arena);
  th_free(tr);
}

th_status th_trace_set_provenance(th_trace *tr, const char *pss) {
  if (!tr) return th_error(TH_ERR_VALUE, "th_trace_set_provenance: the trace is NULL");
  for (const char *p = pss; p && *p; p++)
    if ((unsigned char)*p < 0x20 && *p != '\t') {
      char b[200];
      return th_error(TH_ERR_VALUE,
                      "th_trace_set_provenance: expected one line of text, but the provenance '%s' contains %s "
                      "at offset %d",
                      printable(pss, b, sizeof b),
                      *p == '\n'   ? "a newline"
                      : *p == '\r' ? "a carriage return"
                                   : "a control character",
                      (int)(p - pss));
    }
  if (!pss) {
    tr->provenance = NULL;
    return TH_OK;
  }
  const char *p = th_arena_strdup(tr->arena, pss);
  if (!p) return TH_ERR_NOMEM;
  tr->provenance = p;
  return TH_OK;
}

/* ---- values -------------------------------------------------------------------------------------- */

/* "[2, 3]" into buf. */
static const char *shape_text(const int64_t *shape, int ndim, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* Rank, extents and the int64 bound of th_value_new_tensor (see ir.h); `who` prefixes the overflow
 * and NULL-shape messages when not NULL. */
static th_status check_shape(const char *who, th_dtype dtype, int ndim, const int64_t *shape) {
  const char *sep = who ? ": " : "";
  if (!who) who = "";
  if (ndim < 0) return th_error(TH_ERR_VALUE, "%s%sexpected ndim >= 0, but got ndim=%d", who, sep, ndim);
  if (ndim > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s%stensors of rank %d are not supported (at most %d dimensions)", who,
                    sep, ndim, TH_MAX_DIMS);
  if (ndim > 0 && !shape) return th_error(TH_ERR_VALUE, "%s%sshape is NULL with ndim=%d", who, sep, ndim);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0)
      return th_error(TH_ERR_RUNTIME, "Trying to create tensor with negative dimension %lld", (long long)shape[i]);
  /* span: the product of the extents with 0 counted as 1 (it bounds every contiguous stride) */
  int64_t span = 1, bytes = 0;
  bool zero = false, span_ovf = false;
  for (int i = 0; i < ndim; i++) {
    zero |= shape[i] == 0;
    span_ovf |= __builtin_mul_overflow(span, shape[i] > 0 ? shape[i] : 1, &span);
  }
  int64_t isz = (unsigned)dtype < TH_DTYPE_COUNT ? (int64_t)th_dtype_size(dtype) : 1;
  if (!span_ovf && !__builtin_mul_overflow(span, isz, &bytes)) return TH_OK;
  char b[TH_MAX_DIMS * 22 + 4];
  shape_text(shape, ndim, b, sizeof b);
  const char *dt = (unsigned)dtype < TH_DTYPE_COUNT ? th_dtype_name(dtype) : "?";
  if (zero)
    return th_error(TH_ERR_VALUE,
                    "%s%sshape %s of %s is too large: its nonzero sizes times the element size (%lld bytes) do not "
                    "fit in int64",
                    who, sep, b, dt, (long long)isz);
  if (span_ovf) return th_error(TH_ERR_VALUE, "%s%sshape %s has more elements than fit in int64", who, sep, b);
  return th_error(TH_ERR_VALUE, "%s%sshape %s of %s has more bytes than fit in int64 (%lld elements of %lld bytes)",
                  who, sep, b, dt, (long long)span, (long long)isz);
}

static bool device_ok(th_device d) {
  return (d.type == TH_CPU || d.type == TH_CUDA || d.type == TH_META) && d.index >= 0;
}

th_status th_value_check(const th_value *v, const char *who) {
  if (!who) who = "value";
  if (!v) return th_error(TH_ERR_VALUE, "%s: the value is NULL", who);
  if (v->is_collection) return TH_OK;
  if ((unsigned)v->dtype >= TH_DTYPE_COUNT) return th_error(TH_ERR_VALUE, "%s: invalid dtype %d", who, (int)v->dtype);
  if (!v->is_tensor) return TH_OK;
  if (!device_ok(v->device))
    return th_error(TH_ERR_VALUE, "%s: invalid device (type %d, index %d)", who, (int)v->device.type, v->device.index);
  return check_shape(who, v->dtype, v->ndim, v->shape);
}

static th_value *new_tensor(th_trace *tr, const char *who, th_dtype dtype, th_device device, int ndim,
                            const int64_t *shape, bool requires_grad) {
  if (check_shape(who, dtype, ndim, shape) != TH_OK) return NULL;
  th_value *v = th_arena_alloc(tr->sess->arena, sizeof *v);
  if (!v) return NULL;
  v->id = tr->sess->next_id++;
  v->sess = tr->sess;
  v->is_tensor = true;
  v->dtype = dtype;
  v->device = device;
  v->ndim = ndim;
  if (ndim) memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  v->requires_grad = requires_grad && th_dtype_is_float(dtype);
  return v;
}

th_value *th_value_new_tensor(th_trace *tr, th_dtype dtype, th_device device, int ndim, const int64_t *shape,
                              bool requires_grad) {
  return new_tensor(tr, tr->cur_op, dtype, device, ndim, shape, requires_grad);
}

th_value *th_value_new_number(th_trace *tr, th_dtype pytype, bool has_value, double f, int64_t i) {
  th_value *v = th_arena_alloc(tr->sess->arena, sizeof *v);
  if (!v) return NULL;
  v->id = tr->sess->next_id++;
  v->sess = tr->sess;
  v->dtype = pytype;
  v->has_value = has_value;
  v->fvalue = f;
  v->ivalue = i;
  return v;
}

th_status th_value_name_if_needed(th_trace *tr, th_value *v) {
  if (v->name) return TH_OK;
  const char *prefix = v->is_tensor ? "t" : v->is_collection ? "C" : v->dtype == TH_F64 ? "f" : "i";
  v->name = th_name_fresh(tr, prefix);
  return v->name ? TH_OK : TH_ERR_NOMEM;
}

/* ---- collections ------------------------------------------------------------------------------- */

th_status th_value_set_name(th_trace *tr, th_value *v, const char *name) {
  const char *stored = reserve_name(tr, name);
  if (!stored) return th_last_status();
  v->name = stored;
  return TH_OK;
}

th_value *th_value_new_collection(th_trace *tr) {
  th_value *v = th_arena_alloc(tr->sess->arena, sizeof *v);
  if (!v) return NULL;
  v->id = tr->sess->next_id++;
  v->sess = tr->sess;
  v->dtype = TH_DTYPE_COUNT;
  v->is_collection = true;
  return v;
}

th_status th_collection_set_items(th_trace *tr, th_value *c, int n, th_value *const *items) {
  th_value **it = th_arena_alloc(tr->sess->arena, sizeof(th_value *) * (size_t)(n ? n : 1));
  if (!it) return TH_ERR_NOMEM;
  for (int i = 0; i < n; i++) it[i] = items[i];
  c->coll_items = it;
  c->coll_n = n;
  return TH_OK;
}

th_bsym *th_unpack_sequence_new(th_trace *tr, th_value *c) {
  th_arg *args = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(c->coll_n ? c->coll_n : 1));
  if (!args || !items) return NULL;
  args[0] = th_arg_value(c);
  args[1] = th_arg_int(c->coll_n);
  for (int i = 0; i < c->coll_n; i++) items[i] = c->coll_items[i] ? th_arg_value(c->coll_items[i]) : th_arg_none();
  return th_bsym_new(tr, th_symbol_by_role(TH_SYM_UNPACK_SEQUENCE), 2, args, th_arg_tuple(c->coll_n, items));
}

th_value *th_trace_add_tensor_input(th_trace *tr, const char *name, th_dtype dtype, th_device device, int ndim,
                                    const int64_t *shape) {
  static const char *const who = "th_trace_add_tensor_input";
  char nb[200], wb[260];
  if (!tr) {
    th_error(TH_ERR_VALUE, "%s: the trace is NULL", who);
    return NULL;
  }
  if (name && !th_is_py_name(name)) {
    th_error(TH_ERR_VALUE, "%s: invalid input name '%s': not a Python identifier", who, printable(name, nb, sizeof nb));
    return NULL;
  }
  if ((unsigned)dtype >= TH_DTYPE_COUNT) {
    th_error(TH_ERR_VALUE, "%s: invalid dtype %d", who, (int)dtype);
    return NULL;
  }
  if (!device_ok(device)) {
    th_error(TH_ERR_VALUE, "%s: invalid device (type %d, index %d): expected cpu, cuda:N (N >= 0) or meta", who,
             (int)device.type, device.index);
    return NULL;
  }
  if (device.type != TH_CUDA) device.index = 0; /* cpu and meta carry no index */
  if (name)
    snprintf(wb, sizeof wb, "%s: input '%s'", who, name);
  else
    snprintf(wb, sizeof wb, "%s", who);
  if (check_shape(wb, dtype, ndim, shape) != TH_OK) return NULL;
  const char *stored = NULL;
  if (name && !(stored = reserve_name(tr, name))) return NULL;
  th_value *v = new_tensor(tr, wb, dtype, device, ndim, shape, false);
  if (!v) return NULL;
  if (stored) {
    v->name = stored;
  } else if (th_value_name_if_needed(tr, v) != TH_OK) {
    return NULL;
  }
  if (th_vec_push(tr->arena, &tr->inputs, v) != TH_OK) return NULL;
  return v;
}

void th_value_type_string(const th_value *v, char *buf, size_t n) {
  if (v->is_collection) {
    snprintf(buf, n, "Collection");
    return;
  }
  if (!v->is_tensor) {
    const char *ty = v->dtype == TH_BOOL ? "bool" : v->dtype == TH_F64 ? "float" : "int";
    if (!v->has_value)
      snprintf(buf, n, "%s ?", ty);
    else if (v->dtype == TH_BOOL)
      snprintf(buf, n, "bool %s", v->ivalue ? "True" : "False");
    else if (v->dtype == TH_F64) {
      char num[64];
      th_print_py_float(v->fvalue, num, sizeof num); /* Python's str(): 3.0, 0.1, 1e-05 */
      snprintf(buf, n, "float %s", num);
    } else
      snprintf(buf, n, "int %lld", (long long)v->ivalue);
    return;
  }
  char dev[32];
  th_device_str(v->device, dev, sizeof dev);
  size_t k = (size_t)snprintf(buf, n, "%s %s[", dev, th_dtype_short(v->dtype));
  for (int i = 0; i < v->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)v->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- args ------------------------------------------------------------------------------------------ */

#define TH_MAX_ARG_DEPTH 1000

/* The one-node checks of th_arg_copy (see ir.h); `who` prefixes the message ("ltorch.add: argument
 * 'other'"), `strict` also requires OBJECT names to be Python identifiers (public entry points). */
static th_status arg_check(const th_trace *tr, const th_arg *a, const char *who, int depth, bool strict) {
  char b[200];
  if (depth > TH_MAX_ARG_DEPTH)
    return th_error(TH_ERR_VALUE, "%s: arguments nested more than %d levels deep", who, TH_MAX_ARG_DEPTH);
  if ((unsigned)a->kind > (unsigned)TH_ARG_OBJECT)
    return th_error(TH_ERR_VALUE, "%s: invalid argument kind %d", who, (int)a->kind);
  switch (a->kind) {
    case TH_ARG_VALUE: {
      const th_value *v = a->u.value;
      if (!v) return th_error(TH_ERR_VALUE, "%s: expected a value, but got a NULL th_value", who);
      char vn[64];
      if (v->name)
        snprintf(vn, sizeof vn, "%s", v->name);
      else
        snprintf(vn, sizeof vn, "#%u", (unsigned)v->id);
      if (v->sess != tr->sess) return th_error(TH_ERR_VALUE, "%s: value %s belongs to another trace", who, vn);
      snprintf(b, sizeof b, "%s: value %s", who, vn);
      return th_value_check(v, b);
    }
    case TH_ARG_STR:
      if (!a->u.s) return th_error(TH_ERR_VALUE, "%s: expected a string, but got a NULL pointer", who);
      return TH_OK;
    case TH_ARG_OBJECT:
      if (!a->u.s) return th_error(TH_ERR_VALUE, "%s: expected an object name, but got a NULL pointer", who);
      if (strict && !th_is_py_name(a->u.s))
        return th_error(TH_ERR_VALUE, "%s: invalid object name '%s': not a Python identifier", who,
                        printable(a->u.s, b, sizeof b));
      return TH_OK;
    case TH_ARG_DTYPE:
      if ((unsigned)a->u.dtype >= TH_DTYPE_COUNT)
        return th_error(TH_ERR_VALUE, "%s: invalid dtype %d", who, (int)a->u.dtype);
      return TH_OK;
    case TH_ARG_DEVICE:
      if (!device_ok(a->u.device))
        return th_error(TH_ERR_VALUE, "%s: invalid device (type %d, index %d): expected cpu, cuda:N (N >= 0) or meta",
                        who, (int)a->u.device.type, a->u.device.index);
      return TH_OK;
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
    case TH_ARG_DICT: {
      int n = a->u.seq.n;
      const char *kind = th_arg_kind_name(a);
      if (n < 0) return th_error(TH_ERR_VALUE, "%s: expected a %s of length >= 0, but got length %d", who, kind, n);
      if (n > 0 && !a->u.seq.items) return th_error(TH_ERR_VALUE, "%s: a %s of length %d has NULL items", who, kind, n);
      if (a->kind == TH_ARG_DICT && n > 0) {
        if (!a->u.seq.keys) return th_error(TH_ERR_VALUE, "%s: a dict of length %d has NULL keys", who, n);
        for (int i = 0; i < n; i++)
          if (!a->u.seq.keys[i]) return th_error(TH_ERR_VALUE, "%s: dict key %d is NULL", who, i);
      }
      return TH_OK;
    }
    default: return TH_OK;
  }
}

/* Checks a whole argument tree (th_trace_call, th_trace_set_return). */
static th_status arg_check_tree(const th_trace *tr, const th_arg *a, const char *who, int depth) {
  TH_TRY(arg_check(tr, a, who, depth, true));
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++) TH_TRY(arg_check_tree(tr, &a->u.seq.items[i], who, depth + 1));
  return TH_OK;
}

static th_status arg_copy(th_trace *tr, const th_arg *src, th_arg *dst, const char *who, int depth) {
  TH_TRY(arg_check(tr, src, who, depth, false));
  *dst = *src;
  switch (src->kind) {
    case TH_ARG_STR:
    case TH_ARG_OBJECT: dst->u.s = th_arena_strdup(tr->arena, src->u.s); return dst->u.s ? TH_OK : TH_ERR_NOMEM;
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
    case TH_ARG_DICT: {
      int n = src->u.seq.n;
      dst->u.seq.items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
      if (!dst->u.seq.items) return TH_ERR_NOMEM;
      dst->u.seq.keys = NULL;
      if (src->kind == TH_ARG_DICT) {
        dst->u.seq.keys = th_arena_alloc(tr->arena, sizeof(char *) * (size_t)(n ? n : 1));
        if (!dst->u.seq.keys) return TH_ERR_NOMEM;
      }
      for (int i = 0; i < n; i++) {
        TH_TRY(arg_copy(tr, &src->u.seq.items[i], &dst->u.seq.items[i], who, depth + 1));
        if (src->kind == TH_ARG_DICT) {
          dst->u.seq.keys[i] = th_arena_strdup(tr->arena, src->u.seq.keys[i]);
          if (!dst->u.seq.keys[i]) return TH_ERR_NOMEM;
        }
      }
      return TH_OK;
    }
    default: return TH_OK;
  }
}

th_status th_arg_copy(th_trace *tr, const th_arg *src, th_arg *dst) { return arg_copy(tr, src, dst, "th_arg_copy", 0); }

void th_arg_foreach_value(const th_arg *a, void (*fn)(th_value *v, void *ctx), void *ctx) {
  if (a->kind == TH_ARG_VALUE)
    fn(a->u.value, ctx);
  else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++) th_arg_foreach_value(&a->u.seq.items[i], fn, ctx);
}

/* ---- binding ------------------------------------------------------------------------------------------ */

static const char *ptype_name(const th_param *p) {
  switch (p->type) {
    case TH_PT_TENSOR: return "Tensor";
    case TH_PT_TENSOR_LIST: return "a sequence of Tensors";
    case TH_PT_TENSOR_OR_SCALAR: return "Tensor or number";
    case TH_PT_SCALAR: return "number";
    case TH_PT_INT: return "int";
    case TH_PT_INT_LIST: return "int or sequence of ints";
    case TH_PT_FLOAT: return "float";
    case TH_PT_BOOL: return "bool";
    case TH_PT_STR: return "str";
    case TH_PT_DTYPE: return "dtype";
    case TH_PT_DEVICE: return "device";
    case TH_PT_ANY: return "any value";
  }
  return "?";
}

const char *th_arg_kind_name(const th_arg *a) {
  if (!a) return "None";
  switch (a->kind) {
    case TH_ARG_NONE: return "None";
    case TH_ARG_VALUE:
      return a->u.value->is_tensor         ? "Tensor"
             : a->u.value->is_collection   ? "Collection"
             : a->u.value->dtype == TH_F64 ? "float"
                                           : "int";
    case TH_ARG_BOOL: return "bool";
    case TH_ARG_INT: return "int";
    case TH_ARG_FLOAT: return "float";
    case TH_ARG_STR: return "str";
    case TH_ARG_DTYPE: return "dtype";
    case TH_ARG_DEVICE: return "device";
    case TH_ARG_TUPLE: return "tuple";
    case TH_ARG_LIST: return "list";
    case TH_ARG_DICT: return "dict";
    case TH_ARG_SLICE: return "slice";
    case TH_ARG_ELLIPSIS: return "Ellipsis";
    case TH_ARG_OBJECT: return "object";
  }
  return "?";
}

static bool is_number(const th_arg *a) {
  return a->kind == TH_ARG_BOOL || a->kind == TH_ARG_INT || a->kind == TH_ARG_FLOAT ||
         (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor);
}

static bool is_tensor(const th_arg *a) { return a->kind == TH_ARG_VALUE && a->u.value->is_tensor; }

static bool arg_fits(const th_param *p, const th_arg *a) {
  if (a->kind == TH_ARG_NONE) return p->optional || p->type == TH_PT_ANY;
  if (a->kind == TH_ARG_VALUE && a->u.value->is_collection) return p->type == TH_PT_ANY; /* not a number */
  switch (p->type) {
    case TH_PT_TENSOR: return is_tensor(a);
    case TH_PT_TENSOR_LIST:
      if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) return false;
      for (int i = 0; i < a->u.seq.n; i++)
        if (!is_tensor(&a->u.seq.items[i])) return false;
      return true;
    case TH_PT_TENSOR_OR_SCALAR: return is_tensor(a) || is_number(a);
    case TH_PT_SCALAR: return is_number(a);
    case TH_PT_INT:
      return a->kind == TH_ARG_INT || a->kind == TH_ARG_BOOL ||
             (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor && a->u.value->dtype != TH_F64);
    case TH_PT_INT_LIST:
      if (a->kind == TH_ARG_INT) return true;
      if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) return false;
      for (int i = 0; i < a->u.seq.n; i++) {
        const th_arg *x = &a->u.seq.items[i];
        bool int_proxy = x->kind == TH_ARG_VALUE && !x->u.value->is_tensor && x->u.value->dtype != TH_F64;
        if (x->kind != TH_ARG_INT && x->kind != TH_ARG_BOOL && !int_proxy) return false;
      }
      return true;
    case TH_PT_FLOAT: return is_number(a);
    case TH_PT_BOOL: return a->kind == TH_ARG_BOOL || (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor);
    case TH_PT_STR: return a->kind == TH_ARG_STR;
    case TH_PT_DTYPE: return a->kind == TH_ARG_DTYPE;
    case TH_PT_DEVICE: return a->kind == TH_ARG_DEVICE || a->kind == TH_ARG_STR;
    case TH_PT_ANY: return true;
  }
  return false;
}

th_status th_schema_bind(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, int nkw,
                         const char *const *kwnames, const th_arg *kwargs, th_arg **bound) {
  const th_schema *sc = &sym->schema;
  int np = sc->nparams;
  if (nargs < 0 || nkw < 0)
    return th_error(TH_ERR_VALUE, "%s: expected nargs >= 0 and nkwargs >= 0, but got nargs=%d and nkwargs=%d",
                    sym->qualname, nargs, nkw);
  if (nargs > 0 && !args) return th_error(TH_ERR_VALUE, "%s: args is NULL with nargs=%d", sym->qualname, nargs);
  if (nkw > 0 && (!kwnames || !kwargs))
    return th_error(TH_ERR_VALUE, "%s: kwnames and kwargs must not be NULL with nkwargs=%d", sym->qualname, nkw);
  for (int k = 0; k < nkw; k++)
    if (!kwnames[k]) return th_error(TH_ERR_VALUE, "%s: keyword name %d is NULL", sym->qualname, k);
  th_arg *out = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(np ? np : 1));
  bool set[64] = {false};
  if (!out) return TH_ERR_NOMEM;
  if (np > 64) return th_error(TH_ERR_RUNTIME, "%s: schema too long", sym->qualname);
  char who[256];
  int npos_max = 0;
  for (int i = 0; i < np; i++)
    if (!sc->params[i].kwonly) npos_max++;
  /* PyTorch's varargs spelling of an int list: x.view(2, 3), x.permute(0, 2, 1), torch.zeros(2, 3)
   * pass the ints of the first positional int[] parameter as separate arguments; pack them. */
  if (nargs > npos_max) {
    int k = -1;
    for (int i = 0; i < np && i < nargs && k < 0; i++)
      if (!sc->params[i].kwonly && sc->params[i].type == TH_PT_INT_LIST) k = i;
    bool ints = k >= 0;
    for (int i = k; ints && i < nargs; i++)
      ints = args[i].kind == TH_ARG_INT || (args[i].kind == TH_ARG_VALUE && args[i].u.value &&
                                            !args[i].u.value->is_tensor && args[i].u.value->dtype == TH_I64);
    if (ints && nargs - k > 1) {
      th_arg *packed = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(k + 1));
      th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(nargs - k));
      if (!packed || !items) return TH_ERR_NOMEM;
      memcpy(packed, args, sizeof(th_arg) * (size_t)k);
      memcpy(items, args + k, sizeof(th_arg) * (size_t)(nargs - k));
      packed[k] = th_arg_tuple(nargs - k, items);
      args = packed;
      nargs = k + 1;
    }
  }
  /* The varargs spelling of a tensor list: torch.meshgrid(a, b), torch.broadcast_tensors(a, b),
   * torch.block_diag(a, b, c) pass the tensors of the first positional Tensor[] (or Any) parameter as
   * separate arguments; pack them into one tuple. */
  if (nargs > npos_max) {
    int k = -1;
    for (int i = 0; i < np && i < nargs && k < 0; i++)
      if (!sc->params[i].kwonly && (sc->params[i].type == TH_PT_TENSOR_LIST || sc->params[i].type == TH_PT_ANY)) k = i;
    bool tensors = k >= 0;
    for (int i = k; tensors && i < nargs; i++) tensors = is_tensor(&args[i]);
    if (tensors && nargs - k > 1 && k + 1 <= npos_max) {
      th_arg *packed = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(k + 1));
      th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(nargs - k));
      if (!packed || !items) return TH_ERR_NOMEM;
      memcpy(packed, args, sizeof(th_arg) * (size_t)k);
      memcpy(items, args + k, sizeof(th_arg) * (size_t)(nargs - k));
      packed[k] = th_arg_tuple(nargs - k, items);
      args = packed;
      nargs = k + 1;
    }
  }
  if (nargs > npos_max)
    return th_error(TH_ERR_TYPE, "%s() takes %d positional argument%s but %d were given", sym->qualname, npos_max,
                    npos_max == 1 ? "" : "s", nargs);
  for (int i = 0; i < nargs; i++) {
    snprintf(who, sizeof who, "%s: argument '%s'", sym->qualname, sc->params[i].name);
    TH_TRY(arg_copy(tr, &args[i], &out[i], who, 0));
    set[i] = true;
  }
  for (int k = 0; k < nkw; k++) {
    int j = -1;
    for (int i = 0; i < np; i++)
      if (!strcmp(sc->params[i].name, kwnames[k])) j = i;
    char kb[200];
    if (j < 0 || sc->params[j].posonly)
      return th_error(TH_ERR_TYPE, "%s() got an unexpected keyword argument '%s'", sym->qualname,
                      printable(kwnames[k], kb, sizeof kb));
    if (set[j]) return th_error(TH_ERR_TYPE, "%s() got multiple values for argument '%s'", sym->qualname, kwnames[k]);
    snprintf(who, sizeof who, "%s: argument '%s'", sym->qualname, sc->params[j].name);
    TH_TRY(arg_copy(tr, &kwargs[k], &out[j], who, 0));
    set[j] = true;
  }
  for (int i = 0; i < np; i++) {
    const th_param *p = &sc->params[i];
    if (!set[i]) {
      if (!p->has_default) return th_error(TH_ERR_TYPE, "%s() missing required argument '%s'", sym->qualname, p->name);
      TH_TRY(th_arg_copy(tr, &p->deflt, &out[i]));
    }
    if (!arg_fits(p, &out[i]))
      return th_error(TH_ERR_TYPE, "%s: argument '%s' expected %s%s, but got %s", sym->qualname, p->name, ptype_name(p),
                      p->optional ? " or None" : "", th_arg_kind_name(&out[i]));
  }
  *bound = out;
  return TH_OK;
}

/* ---- recording ---------------------------------------------------------------------------------------- */

th_bsym *th_bsym_new(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, th_arg out) {
  th_bsym *b = th_arena_alloc(tr->arena, sizeof *b);
  if (!b) return NULL;
  b->sym = sym;
  b->nargs = nargs;
  b->args = (th_arg *)args;
  b->out = out;
  return b;
}

th_status th_trace_append(th_trace *tr, th_bsym *b) {
  if (tr->verify_mode) return TH_OK;
  return th_vec_push(tr->arena, tr->scope, b);
}

typedef struct {
  th_trace *tr;
  th_status st;
} name_ctx;

static void name_cb(th_value *v, void *p) {
  name_ctx *c = p;
  if (c->st == TH_OK && !v->name) c->st = th_value_name_if_needed(c->tr, v);
}

static void mark_has_value(th_value *v, void *ctx) {
  (void)v;
  *(bool *)ctx = true;
}

static bool arg_mentions(const th_arg *a, const th_value *v) {
  if (a->kind == TH_ARG_VALUE) return a->u.value == v;
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++)
      if (arg_mentions(&a->u.seq.items[i], v)) return true;
  return false;
}

th_status th_symbol_infer(th_trace *tr, const th_symbol *sym, const th_arg *bound, th_arg *out) {
  bool saved = tr->verify_mode;
  const char *saved_op = tr->cur_op;
  tr->verify_mode = true;
  tr->cur_op = sym->qualname;
  th_status st = sym->is_prim ? sym->meta(tr, sym, bound, out) : sym->decomp(tr, sym, bound, out);
  tr->verify_mode = saved;
  tr->cur_op = saved_op;
  return st;
}

/* ---- autocast regions ------------------------------------------------------------------------------ */

th_status th_trace_autocast_push(th_trace *tr, th_device_type device_type, th_dtype dtype, bool enabled) {
  if (!tr) return th_error(TH_ERR_VALUE, "th_trace_autocast_push: the trace is NULL");
  if (device_type != TH_CPU && device_type != TH_CUDA)
    return th_error(TH_ERR_VALUE, "User specified an unsupported autocast device_type '%s'",
                    device_type == TH_META ? "meta" : "?");
  if (enabled && dtype != TH_F16 && dtype != TH_BF16)
    return th_error(TH_ERR_VALUE, "autocast: `dtype` is expected to be either float16 or bfloat16, but %s",
                    (unsigned)dtype < TH_DTYPE_COUNT ? th_dtype_name(dtype) : "an invalid dtype");
  th_autocast_region *r;
  if (tr->autocast.n < tr->autocast.cap && tr->autocast.items[tr->autocast.n]) {
    r = tr->autocast.items[tr->autocast.n++]; /* reuse a popped entry */
  } else {
    r = th_arena_alloc(tr->arena, sizeof *r);
    if (!r) return TH_ERR_NOMEM;
    TH_TRY(th_vec_push(tr->arena, &tr->autocast, r));
  }
  r->device_type = device_type;
  r->dtype = enabled ? dtype : TH_F32;
  r->enabled = enabled;
  return TH_OK;
}

th_status th_trace_autocast_pop(th_trace *tr) {
  if (!tr) return th_error(TH_ERR_VALUE, "th_trace_autocast_pop: the trace is NULL");
  if (tr->autocast.n == 0) return th_error(TH_ERR_VALUE, "th_trace_autocast_pop: no autocast region is open");
  tr->autocast.n--;
  return TH_OK;
}

static void note_device(th_value *v, void *ctx) {
  unsigned *seen = ctx;
  if (v->is_tensor) *seen |= 1u << v->device.type;
}

/* The autocast rule and region that apply to recording sym on `bound` now (see trace.h): false if none. */
static bool autocast_for(const th_trace *tr, const th_symbol *sym, const th_arg *bound, th_autocast_fn *rule,
                         th_dtype *dtype, th_device_type *dev) {
  if (tr->autocast.n == 0 || tr->autocast_busy || tr->verify_mode || tr->scope != &tr->bsyms) return false;
  if (!(*rule = th_autocast_rule(sym))) return false;
  unsigned seen = 0;
  for (int i = 0; i < sym->schema.nparams; i++) th_arg_foreach_value(&bound[i], note_device, &seen);
  if (seen & (1u << TH_CPU))
    *dev = TH_CPU;
  else if (seen & (1u << TH_CUDA))
    *dev = TH_CUDA;
  else
    return false;
  for (int i = tr->autocast.n - 1; i >= 0; i--) {
    const th_autocast_region *r = tr->autocast.items[i];
    if (r->device_type != *dev) continue;
    *dtype = r->dtype;
    return r->enabled;
  }
  return false;
}

static th_status call_bound(th_trace *tr, const th_symbol *sym, th_arg *bound, th_arg *out);

th_status th_call_kw(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, int nkw,
                     const char *const *kwnames, const th_arg *kwargs, th_arg *out) {
  if (sym->id == TH_OP_DYNAMIC)
    return th_error(TH_ERR_VALUE, "%s cannot be called: it is not an op of this build", sym->qualname);
  if (tr->has_return && tr->scope == &tr->bsyms && !tr->verify_mode)
    return th_error(TH_ERR_RUNTIME, "%s: the trace already has a return; nothing may follow it", sym->qualname);
  th_arg *bound;
  TH_TRY(th_schema_bind(tr, sym, nargs, args, nkw, kwnames, kwargs, &bound));
  th_autocast_fn rule;
  th_dtype ac_dtype;
  th_device_type ac_dev;
  if (!autocast_for(tr, sym, bound, &rule, &ac_dtype, &ac_dev)) return call_bound(tr, sym, bound, out);
  /* autocast: the rule's converts go to the top level before the op; dropped again if anything fails */
  int mark = tr->bsyms.n;
  tr->autocast_busy = true;
  th_status st = rule(tr, sym, bound, ac_dtype, ac_dev);
  tr->autocast_busy = false;
  if (st == TH_OK) st = call_bound(tr, sym, bound, out);
  if (st != TH_OK) tr->bsyms.n = mark;
  return st;
}

/* Records sym on its bound arguments (th_call_kw after binding and autocast). */
static th_status call_bound(th_trace *tr, const th_symbol *sym, th_arg *bound, th_arg *out) {
  th_arg result = th_arg_none();
  th_vec subs = {0};
  const char *saved_op = tr->cur_op;
  tr->cur_op = sym->qualname;
  if (sym->is_prim) {
    th_status st = sym->meta(tr, sym, bound, &result);
    tr->cur_op = saved_op;
    TH_TRY(st);
  } else {
    th_vec *saved = tr->scope;
    tr->scope = &subs;
    th_status st = sym->decomp(tr, sym, bound, &result);
    /* Outputs are always fresh proxies: an input returned as-is becomes prims.shallow_copy(input). */
    if (st == TH_OK && result.kind == TH_ARG_VALUE) {
      bool is_input = false;
      for (int i = 0; i < sym->schema.nparams; i++) is_input |= arg_mentions(&bound[i], result.u.value);
      const th_symbol *sc = is_input ? th_symbol_by_role(TH_SYM_SHALLOW_COPY) : NULL;
      if (is_input && sc) {
        th_arg in = result;
        st = th_call(tr, sc->id, 1, &in, &result);
      }
    }
    tr->scope = saved;
    tr->cur_op = saved_op;
    TH_TRY(st);
  }
  /* A call folded to a constant (numbers only, e.g. prims.add(2, 3)) records nothing, as Thunder
   * computes number x number eagerly. */
  bool has_value = false;
  th_arg_foreach_value(&result, mark_has_value, &has_value);
  if (tr->verify_mode || (!has_value && result.kind != TH_ARG_NONE)) {
    *out = result;
    return TH_OK;
  }
  name_ctx nc = {tr, TH_OK};
  th_arg_foreach_value(&result, name_cb, &nc);
  TH_TRY(nc.st);
  th_bsym *b = th_bsym_new(tr, sym, sym->schema.nparams, bound, result);
  if (!b) return TH_ERR_NOMEM;
  b->nsubs = subs.n;
  b->subs = (th_bsym **)subs.items;
  TH_TRY(th_trace_append(tr, b));
  *out = result;
  return TH_OK;
}

th_status th_call(th_trace *tr, th_op_id op, int nargs, const th_arg *args, th_arg *out) {
  const th_symbol *sym = th_symbol_get(op);
  if (!sym) return th_error(TH_ERR_VALUE, "unknown op id %d", (int)op);
  return th_call_kw(tr, sym, nargs, args, 0, NULL, NULL, out);
}

th_status th_trace_add_comment(th_trace *tr, const char *text) {
  if (!tr || !text) return th_error(TH_ERR_VALUE, "th_trace_add_comment: %s is NULL", !tr ? "the trace" : "text");
  for (const unsigned char *c = (const unsigned char *)text; *c; c++)
    if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
      return th_error(TH_ERR_VALUE, "th_trace_add_comment: a comment must be one line without control characters");
  th_arg a = th_arg_str(text), out;
  th_vec *saved = tr->scope;
  tr->scope = &tr->bsyms;
  th_status st = th_call_kw(tr, th_symbol_by_role(TH_SYM_COMMENT), 1, &a, 0, NULL, NULL, &out);
  tr->scope = saved;
  return st;
}

th_status th_trace_call(th_trace *tr, const char *qualname, int nargs, const th_arg *args, int nkwargs,
                        const char *const *kwnames, const th_arg *kwargs, th_arg *out) {
  if (!tr || !qualname || !out)
    return th_error(TH_ERR_VALUE, "th_trace_call: %s is NULL", !tr ? "the trace" : !qualname ? "qualname" : "out");
  const th_symbol *sym = th_symbol_lookup(qualname);
  if (!sym || (sym->tags & TH_TAG_UTILITY)) {
    char b[200];
    return th_error(TH_ERR_VALUE, "unknown op '%s'", printable(qualname, b, sizeof b));
  }
  if (nargs < 0 || nkwargs < 0)
    return th_error(TH_ERR_VALUE, "%s: expected nargs >= 0 and nkwargs >= 0, but got nargs=%d and nkwargs=%d",
                    sym->qualname, nargs, nkwargs);
  if (nargs > 0 && !args) return th_error(TH_ERR_VALUE, "%s: args is NULL with nargs=%d", sym->qualname, nargs);
  if (nkwargs > 0 && (!kwnames || !kwargs))
    return th_error(TH_ERR_VALUE, "%s: kwnames and kwargs must not be NULL with nkwargs=%d", sym->qualname, nkwargs);
  char who[256];
  for (int i = 0; i < nargs; i++) {
    if (i < sym->schema.nparams)
      snprintf(who, sizeof who, "%s: argument '%s'", sym->qualname, sym->schema.params[i].name);
    else
      snprintf(who, sizeof who, "%s: argument %d", sym->qualname, i);
    TH_TRY(arg_check_tree(tr, &args[i], who, 0));
  }
  for (int k = 0; k < nkwargs; k++) {
    if (!kwnames[k]) return th_error(TH_ERR_VALUE, "%s: keyword name %d is NULL", sym->qualname, k);
    char kb[200];
    snprintf(who, sizeof who, "%s: argument '%s'", sym->qualname, printable(kwnames[k], kb, sizeof kb));
    TH_TRY(arg_check_tree(tr, &kwargs[k], who, 0));
  }
  th_vec *saved = tr->scope;
  tr->scope = &tr->bsyms;
  th_status st = th_call_kw(tr, sym, nargs, args, nkwargs, kwnames, kwargs, out);
  tr->scope = saved;
  return st;
}

th_status th_trace_set_return(th_trace *tr, th_arg ret) { return th_trace_set_return_updated(tr, ret, 0, NULL); }

th_status th_trace_set_return_updated(th_trace *tr, th_arg ret, int nupdated, th_value *const *updated) {
  static const char *const who = "th_trace_set_return";
  if (!tr) return th_error(TH_ERR_VALUE, "%s: the trace is NULL", who);
  if (tr->has_return) return th_error(TH_ERR_RUNTIME, "the trace already has a return");
  if (nupdated < 0 || (nupdated > 0 && !updated))
    return th_error(TH_ERR_VALUE, "%s: bad list of updated inputs (n=%d)", who, nupdated);
  TH_TRY(arg_check_tree(tr, &ret, who, 0));
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(nupdated ? nupdated : 1));
  if (!items) return TH_ERR_NOMEM;
  for (int i = 0; i < nupdated; i++) {
    if (!updated[i] || !updated[i]->is_tensor)
      return th_error(TH_ERR_VALUE, "%s: updated input %d is not a tensor value", who, i);
    items[i] = th_arg_value(updated[i]);
  }
  th_arg upd = th_arg_tuple(nupdated, items), u;
  TH_TRY(arg_check_tree(tr, &upd, who, 0));
  th_arg a;
  TH_TRY(arg_copy(tr, &ret, &a, who, 0));
  TH_TRY(arg_copy(tr, &upd, &u, who, 0));
  th_arg *args = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!args) return TH_ERR_NOMEM;
  args[0] = a;
  args[1] = u;
  th_bsym *b = th_bsym_new(tr, th_symbol_by_role(TH_SYM_RETURN), 2, args, th_arg_none());
  if (!b) return TH_ERR_NOMEM;
  TH_TRY(th_vec_push(tr->arena, &tr->bsyms, b));
  tr->has_return = true;
  return TH_OK;
}

/* ---- inspection ------------------------------------------------------------------------------------
 * NULL-safe: a NULL trace / value / bsym reads as empty (0, NULL, None). */

int th_trace_num_inputs(const th_trace *tr) { return tr ? tr->inputs.n : 0; }
th_value *th_trace_input(const th_trace *tr, int i) {
  return tr && i >= 0 && i < tr->inputs.n ? tr->inputs.items[i] : NULL;
}
th_arg th_trace_output(const th_trace *tr) {
  for (int i = tr ? tr->bsyms.n - 1 : -1; i >= 0; i--) {
    const th_bsym *b = tr->bsyms.items[i];
    if (th_bsym_has_role(b, TH_SYM_RETURN)) return b->args[0];
  }
  return th_arg_none();
}
int th_trace_num_bsyms(const th_trace *tr) { return tr ? tr->bsyms.n : 0; }
const th_bsym *th_trace_bsym(const th_trace *tr, int i) {
  return tr && i >= 0 && i < tr->bsyms.n ? tr->bsyms.items[i] : NULL;
}

const char *th_value_name(const th_value *v) { return v ? v->name : NULL; }
uint32_t th_value_id(const th_value *v) { return v ? v->id : 0; }
bool th_value_is_tensor(const th_value *v) { return v && v->is_tensor; }
bool th_value_is_collection(const th_value *v) { return v && v->is_collection; }
int th_value_num_items(const th_value *v) { return v && v->is_collection ? v->coll_n : 0; }
th_value *th_value_item(const th_value *v, int i) {
  return v && v->is_collection && i >= 0 && i < v->coll_n ? v->coll_items[i] : NULL;
}
th_dtype th_value_dtype(const th_value *v) { return v ? v->dtype : TH_DTYPE_COUNT; }
th_device th_value_device(const th_value *v) {
  th_device cpu = {TH_CPU, 0};
  return v ? v->device : cpu;
}
int th_value_ndim(const th_value *v) { return v ? v->ndim : 0; }
const int64_t *th_value_shape(const th_value *v) { return v ? v->shape : NULL; }
int64_t th_value_numel(const th_value *v) {
  if (!v) return 0;
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++)
    if (v->shape[i] == 0) return 0;
  for (int i = 0; i < v->ndim; i++)
    if (v->shape[i] < 0 || __builtin_mul_overflow(n, v->shape[i], &n)) return -1;
  return n;
}

const char *th_bsym_qualname(const th_bsym *b) { return b ? b->sym->qualname : NULL; }
th_arg th_bsym_output(const th_bsym *b) { return b ? b->out : th_arg_none(); }
int th_bsym_num_subsymbols(const th_bsym *b) { return b ? b->nsubs : 0; }
const th_bsym *th_bsym_subsymbol(const th_bsym *b, int i) { return b && i >= 0 && i < b->nsubs ? b->subs[i] : NULL; }

/* ---- aliasing of outputs ------------------------------------------------------------------------------- */

static bool arg_has_value(const th_arg *a, const th_value *v) {
  if (a->kind == TH_ARG_VALUE) return a->u.value == v;
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT)
    for (int i = 0; i < a->u.seq.n; i++)
      if (arg_has_value(&a->u.seq.items[i], v)) return true;
  return false;
}

static bool may_alias(const th_bsym *b, const th_value *v, int depth) {
  if (!b || !v || depth > 64) return false;
  if (b->sym->tags & TH_TAG_VIEW) return true;
  if (b->sym->is_prim) return false;
  for (int i = b->nsubs - 1; i >= 0; i--)
    if (arg_has_value(&b->subs[i]->out, v)) {
      if (!may_alias(b->subs[i], v, depth + 1)) return false;
      /* a view of what? follow its first tensor argument back through the decomposition */
      const th_bsym *s = b->subs[i];
      for (int k = 0; k < s->nargs; k++)
        if (s->args[k].kind == TH_ARG_VALUE && s->args[k].u.value->is_tensor) {
          const th_value *src = s->args[k].u.value;
          for (int a = 0; a < b->nargs; a++)
            if (arg_has_value(&b->args[a], src)) return true;
          th_bsym tmp = *b;
          tmp.nsubs = i; /* the producer of src comes earlier */
          return may_alias(&tmp, src, depth + 1);
        }
      return false;
    }
  return false;
}

bool th_bsym_output_may_alias(const th_bsym *b, const th_value *v) { return may_alias(b, v, 0); }

int th_bsym_num_args(const th_bsym *b) { return b ? b->nargs : 0; }

th_arg th_bsym_arg(const th_bsym *b, int i) {
  if (!b || i < 0 || i >= b->nargs) return th_arg_none();
  return b->args[i];
}
