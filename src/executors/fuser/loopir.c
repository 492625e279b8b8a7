/* loopir.c — the fuser's loop IR and its C emitter.
 *
 * A translation unit is a list of functions; a function body is a tree of nodes: blocks (a `{ }` scope
 * or a plain statement list), loops (serial, `omp simd`, `omp parallel for`, `omp parallel for simd`,
 * with reduction clauses and an OpenMP `if`), lets (`const T x = e;`), mutable variables and updates
 * (accumulators), stores and other one-line statements, ifs with an else branch, and comments. The
 * expressions are C text the lowering built from the ops' cexpr templates; names are unique by
 * construction (the lowering numbers values, reads and accumulators). Every node and string lives in
 * the context's arena, freed at once; an allocation failure makes later calls no-ops and is reported by
 * th_ir_failed. The emitter indents two spaces per scope. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "executors/fuser/fuser.h"

typedef enum { N_BLOCK, N_LOOP, N_IF, N_LET, N_VAR, N_SET, N_STMT, N_COMMENT, N_FUNC } node_kind;

struct th_ir {
  node_kind kind;
  bool braces;                       /* BLOCK */
  th_ir_loop_kind loop;              /* LOOP */
  const char *a, *b, *c, *d, *e, *f; /* LOOP: var lo hi clauses par_if; LET/VAR: type name expr; SET: name op expr;
                                        STMT/COMMENT: text; IF: cond; FUNC: name params */
  th_ir **kids;
  int nkids, cap;
  th_ir *els; /* IF */
};

struct th_ir_ctx {
  th_arena *arena;
  th_ir **funcs;
  int nfuncs, cap;
  bool failed;
};

th_ir_ctx *th_ir_ctx_new(void) {
  th_ir_ctx *c = th_calloc(1, sizeof *c);
  if (!c) return NULL;
  if (!(c->arena = th_arena_new())) {
    th_free(c);
    return NULL;
  }
  return c;
}

void th_ir_ctx_free(th_ir_ctx *c) {
  if (!c) return;
  th_arena_free(c->arena);
  th_free(c->funcs);
  th_free(c);
}

bool th_ir_failed(const th_ir_ctx *c) { return !c || c->failed; }

const char *th_ir_str(th_ir_ctx *c, const char *fmt, ...) {
  if (c->failed) return NULL;
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    c->failed = true;
    return NULL;
  }
  char *s = th_arena_alloc(c->arena, (size_t)n + 1);
  if (!s) {
    c->failed = true;
    return NULL;
  }
  if ((size_t)n < sizeof small) {
    memcpy(s, small, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  return s;
}

static th_ir *node(th_ir_ctx *c, th_ir *parent, node_kind k) {
  if (c->failed) return NULL;
  th_ir *n = th_arena_alloc(c->arena, sizeof *n);
  if (!n) {
    c->failed = true;
    return NULL;
  }
  memset(n, 0, sizeof *n);
  n->kind = k;
  if (parent) {
    if (parent->nkids == parent->cap) {
      int cap = parent->cap ? 2 * parent->cap : 8;
      th_ir **kids = th_arena_alloc(c->arena, sizeof(th_ir *) * (size_t)cap);
      if (!kids) {
        c->failed = true;
        return NULL;
      }
      if (parent->nkids) memcpy(kids, parent->kids, sizeof(th_ir *) * (size_t)parent->nkids);
      parent->kids = kids;
      parent->cap = cap;
    }
    parent->kids[parent->nkids++] = n;
  }
  return n;
}

/* Strings handed in are copied into the arena (NULL stays NULL). */
static const char *dup(th_ir_ctx *c, const char *s) {
  if (!s || c->failed) return s;
  char *d = th_arena_strdup(c->arena, s);
  if (!d) c->failed = true;
  return d;
}

th_ir *th_ir_block(th_ir_ctx *c, th_ir *parent, bool braces) {
  th_ir *n = node(c, parent, N_BLOCK);
  if (n) n->braces = braces;
  return n;
}

th_ir *th_ir_parallel(th_ir_ctx *c, th_ir *parent, const char *clauses) {
  th_ir *n = node(c, parent, N_BLOCK);
  if (!n) return NULL;
  n->braces = true;
  n->a = dup(c, clauses ? clauses : "");
  return n;
}

th_ir *th_ir_loop(th_ir_ctx *c, th_ir *parent, th_ir_loop_kind kind, const char *var, const char *lo, const char *hi,
                  const char *clauses, const char *par_if) {
  th_ir *n = node(c, parent, N_LOOP);
  if (!n) return NULL;
  n->loop = kind;
  n->a = dup(c, var);
  n->b = dup(c, lo);
  n->c = dup(c, hi);
  n->d = dup(c, clauses);
  n->e = dup(c, par_if);
  return n;
}

th_ir *th_ir_if(th_ir_ctx *c, th_ir *parent, const char *cond, th_ir **els) {
  th_ir *n = node(c, parent, N_IF);
  if (!n) return NULL;
  n->a = dup(c, cond);
  if (els) {
    n->els = node(c, NULL, N_BLOCK);
    *els = n->els;
  }
  return n;
}

static void leaf(th_ir_ctx *c, th_ir *parent, node_kind k, const char *a, const char *b, const char *cc) {
  th_ir *n = node(c, parent, k);
  if (!n) return;
  n->a = dup(c, a);
  n->b = dup(c, b);
  n->c = dup(c, cc);
}

void th_ir_let(th_ir_ctx *c, th_ir *parent, const char *type, const char *name, const char *expr) {
  leaf(c, parent, N_LET, type, name, expr);
}
void th_ir_var(th_ir_ctx *c, th_ir *parent, const char *type, const char *name, const char *expr) {
  leaf(c, parent, N_VAR, type, name, expr);
}
void th_ir_set(th_ir_ctx *c, th_ir *parent, const char *name, const char *op, const char *expr) {
  leaf(c, parent, N_SET, name, op, expr);
}
void th_ir_stmt(th_ir_ctx *c, th_ir *parent, const char *text) { leaf(c, parent, N_STMT, text, NULL, NULL); }
void th_ir_comment(th_ir_ctx *c, th_ir *parent, const char *text) { leaf(c, parent, N_COMMENT, text, NULL, NULL); }

th_ir *th_ir_func(th_ir_ctx *c, const char *name, const char *params) {
  th_ir *f = node(c, NULL, N_FUNC);
  if (!f) return NULL;
  f->a = dup(c, name);
  f->b = dup(c, params);
  if (c->nfuncs == c->cap) {
    int cap = c->cap ? 2 * c->cap : 8;
    th_ir **fs = th_realloc(c->funcs, sizeof(th_ir *) * (size_t)cap);
    if (!fs) {
      c->failed = true;
      return NULL;
    }
    c->funcs = fs;
    c->cap = cap;
  }
  c->funcs[c->nfuncs++] = f;
  return th_ir_block(c, f, false);
}

/* ---- the emitter ------------------------------------------------------------------------------------ */
static void indent(th_strbuf *sb, int depth) {
  for (int i = 0; i < depth; i++) th_sb_puts(sb, "  ");
}

static void emit(const th_ir *n, th_strbuf *sb, int depth);

static void emit_kids(const th_ir *n, th_strbuf *sb, int depth) {
  for (int i = 0; i < n->nkids; i++) emit(n->kids[i], sb, depth);
}

static void emit(const th_ir *n, th_strbuf *sb, int depth) {
  switch (n->kind) {
    case N_BLOCK:
      if (!n->braces) {
        emit_kids(n, sb, depth);
        break;
      }
      if (n->a) { /* th_ir_parallel */
        indent(sb, depth);
        th_sb_printf(sb, "#pragma omp parallel%s%s\n", n->a[0] ? " " : "", n->a);
      }
      indent(sb, depth);
      th_sb_puts(sb, "{\n");
      emit_kids(n, sb, depth + 1);
      indent(sb, depth);
      th_sb_puts(sb, "}\n");
      break;
    case N_LOOP: {
      static const char *const pragma[] = {NULL, "omp simd", "omp parallel for schedule(static)",
                                           "omp parallel for simd schedule(static)"};
      if (pragma[n->loop]) {
        indent(sb, depth);
        th_sb_printf(sb, "#pragma %s", pragma[n->loop]);
        if (n->d && n->d[0]) th_sb_printf(sb, " %s", n->d);
        if (n->e && n->e[0] && n->loop >= TH_IR_PARALLEL) th_sb_printf(sb, " if (%s)", n->e);
        th_sb_puts(sb, "\n");
      }
      indent(sb, depth);
      th_sb_printf(sb, "for (int64_t %s = %s; %s < %s; %s++) {\n", n->a, n->b, n->a, n->c, n->a);
      emit_kids(n, sb, depth + 1);
      indent(sb, depth);
      th_sb_puts(sb, "}\n");
      break;
    }
    case N_IF:
      indent(sb, depth);
      th_sb_printf(sb, "if (%s) {\n", n->a);
      emit_kids(n, sb, depth + 1);
      indent(sb, depth);
      if (n->els && n->els->nkids) {
        th_sb_puts(sb, "} else {\n");
        emit_kids(n->els, sb, depth + 1);
        indent(sb, depth);
      }
      th_sb_puts(sb, "}\n");
      break;
    case N_LET:
      indent(sb, depth);
      th_sb_printf(sb, "const %s %s = %s;\n", n->a, n->b, n->c);
      break;
    case N_VAR:
      indent(sb, depth);
      th_sb_printf(sb, "%s %s = %s;\n", n->a, n->b, n->c);
      break;
    case N_SET:
      indent(sb, depth);
      th_sb_printf(sb, "%s %s %s;\n", n->a, n->b, n->c);
      break;
    case N_STMT:
      indent(sb, depth);
      th_sb_printf(sb, "%s;\n", n->a);
      break;
    case N_COMMENT:
      indent(sb, depth);
      th_sb_printf(sb, "/* %s */\n", n->a);
      break;
    case N_FUNC:
      th_sb_printf(sb, "void %s(%s) {\n", n->a, n->b);
      emit_kids(n, sb, depth + 1);
      th_sb_puts(sb, "}\n");
      break;
  }
}

int th_ir_nfuncs(const th_ir_ctx *c) { return c ? c->nfuncs : 0; }

void th_ir_emit(const th_ir_ctx *c, th_strbuf *sb, size_t *fn_at) {
  for (int i = 0; i < c->nfuncs; i++) {
    if (i) th_sb_puts(sb, "\n");
    if (fn_at) fn_at[i] = sb->len;
    emit(c->funcs[i], sb, 0);
  }
}
