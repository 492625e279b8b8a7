/* lexer.c — the trace parser's lexical layer (see lexer.h): lines, tokens, and the positioned error
 * messages.
 *
 * Nothing here may crash on any input: every loop is bounded by the line, and all memory lives in the
 * parse's arena. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lexer.h"

/* ---- errors ----------------------------------------------------------------------------------------- */

/* Appends the source line (a window of it when long) and a caret under col (1-based; 0 = none). */
static void put_source(th_strbuf *sb, const line *ln, int col) {
  if (!ln) return;
  int start = 0, end = ln->len;
  int c = col > 0 ? col - 1 : 0;
  if (c > ln->len) c = ln->len;
  if (end > 150) {
    start = c > 60 ? c - 60 : 0;
    end = start + 150 < ln->len ? start + 150 : ln->len;
  }
  th_sb_putc(sb, '\n');
  if (start > 0) th_sb_puts(sb, "...");
  for (int i = start; i < end; i++) {
    unsigned char ch = (unsigned char)ln->p[i];
    th_sb_putc(sb, ch == '\t' ? ' ' : (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch);
  }
  if (end < ln->len) th_sb_puts(sb, "...");
  if (col <= 0) return;
  th_sb_putc(sb, '\n');
  for (int i = start > 0 ? start - 3 : 0; i < c; i++) th_sb_putc(sb, ' ');
  th_sb_putc(sb, '^');
}

th_status th_lex_verror(const th_lexer *lx, const line *ln, int col, bool with_col, th_status code, const char *fmt,
                        va_list ap) {
  char msg[600];
  vsnprintf(msg, sizeof msg, fmt, ap);
  th_strbuf sb;
  th_sb_init(&sb);
  if (ln && with_col)
    th_sb_printf(&sb, "%s:%d:%d: %s", lx->filename, ln->lineno, col, msg);
  else if (ln)
    th_sb_printf(&sb, "%s:%d: %s", lx->filename, ln->lineno, msg);
  else
    th_sb_printf(&sb, "%s: %s", lx->filename, msg);
  put_source(&sb, ln, col);
  char *s = th_sb_take(&sb);
  if (!s) return th_error(TH_ERR_NOMEM, "out of memory reporting a parse error");
  th_error(code, "%s", s);
  free(s);
  return code;
}

/* ---- lines ------------------------------------------------------------------------------------------ */

/* A syntax error at (ln, col). */
static th_status lines_error(const th_lexer *lx, const line *ln, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_status st = th_lex_verror(lx, ln, col, true, TH_ERR_SYNTAX, fmt, ap);
  va_end(ap);
  return st;
}

/* Splits the text into lines at "\n", "\r\n" and a lone "\r" (Python's universal newlines, so a file
 * with old Mac line endings is not one long line). */
th_status th_lex_lines(th_lexer *lx, const char *text, line **lines, int *nlines) {
  /* a UTF-8 byte order mark (editors on Windows write one) is not part of the text */
  if (!strncmp(text, "\xEF\xBB\xBF", 3)) text += 3;
  int n = 1;
  for (const char *p = text; *p; p++) n += *p == '\n' || (*p == '\r' && p[1] != '\n');
  line *out = th_arena_alloc(lx->pa, sizeof(line) * (size_t)n);
  if (!out) return TH_ERR_NOMEM;
  *lines = out;
  const char *p = text;
  for (int k = 0; k < n; k++) {
    line *ln = &out[k];
    const char *e = p + strcspn(p, "\r\n");
    ln->p = p;
    ln->len = (int)(e - p);
    ln->lineno = k + 1;
    int i = 0;
    while (i < ln->len && ln->p[i] == ' ') i++;
    ln->indent = i;
    int j = i;
    while (j < ln->len && (ln->p[j] == ' ' || ln->p[j] == '\t' || ln->p[j] == '\f')) j++;
    ln->blank = j == ln->len;
    ln->comment = !ln->blank && ln->p[i] == '#';
    if (!ln->blank && i < ln->len && ln->p[i] == '\t') {
      *nlines = k + 1;
      return lines_error(lx, ln, i + 1, "tabs are not allowed in indentation");
    }
    p = e[0] == '\r' && e[1] == '\n' ? e + 2 : *e ? e + 1 : e;
  }
  *nlines = n;
  return TH_OK;
}

/* ---- tokens ----------------------------------------------------------------------------------------- */

/* One line's tokenization: the lexer, the line, and the token buffer being filled. */
typedef struct lexstate {
  th_lexer *lx;
  const line *ln;
  int level;
  token *toks;
  int ntoks;
} lexstate;

/* A syntax error at column col of the line being tokenized. */
static th_status syntax_error(lexstate *ls, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_status st = th_lex_verror(ls->lx, ls->ln, col, true, TH_ERR_SYNTAX, fmt, ap);
  va_end(ap);
  return st;
}

static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_ident(int c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static th_status push_tok(lexstate *ls, token t) {
  th_lexer *lx = ls->lx;
  int lv = ls->level;
  if (ls->ntoks == lx->tokcap[lv]) {
    int ncap = lx->tokcap[lv] ? lx->tokcap[lv] * 2 : 32;
    token *nt = th_arena_alloc(lx->pa, sizeof(token) * (size_t)ncap);
    if (!nt) return TH_ERR_NOMEM;
    if (ls->ntoks) memcpy(nt, ls->toks, sizeof(token) * (size_t)ls->ntoks);
    lx->tokbuf[lv] = ls->toks = nt;
    lx->tokcap[lv] = ncap;
  }
  ls->toks[ls->ntoks++] = t;
  return TH_OK;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A Python string literal starting at s[i] (a quote). Decodes the common escapes. The closing quote
 * is found first, so the decoded text takes the literal's own length (not the rest of the line: a
 * line of many short strings must cost memory linear in its length). */
static th_status read_string(lexstate *ls, const char *s, int n, int i, token *t) {
  char q = s[i];
  int end = i + 1;
  while (end < n && s[end] != q) end += s[end] == '\\' ? 2 : 1;
  if (end >= n) return syntax_error(ls, i + 1, "unterminated string literal");
  /* decoded length <= raw length (end - i - 1) */
  char *out = th_arena_alloc(ls->lx->pa, (size_t)(end - i));
  if (!out) return TH_ERR_NOMEM;
  int j = i + 1;
  int k = 0;
  for (;;) {
    char c = s[j];
    if (c == q) break;
    if (c != '\\') {
      out[k++] = c;
      j++;
      continue;
    }
    char e = s[j + 1];
    j += 2;
    switch (e) {
      case 'n': out[k++] = '\n'; break;
      case 't': out[k++] = '\t'; break;
      case 'r': out[k++] = '\r'; break;
      case 'a': out[k++] = '\a'; break;
      case 'b': out[k++] = '\b'; break;
      case 'f': out[k++] = '\f'; break;
      case 'v': out[k++] = '\v'; break;
      case '\\': out[k++] = '\\'; break;
      case '\'': out[k++] = '\''; break;
      case '"': out[k++] = '"'; break;
      case 'x': {
        int h1 = j < n ? hexval((unsigned char)s[j]) : -1;
        int h2 = j + 1 < n ? hexval((unsigned char)s[j + 1]) : -1;
        if (h1 < 0 || h2 < 0) return syntax_error(ls, j - 1, "invalid \\x escape in string literal");
        int v = h1 * 16 + h2;
        if (v == 0) return syntax_error(ls, j - 1, "a NUL character in a string is not supported");
        out[k++] = (char)v;
        j += 2;
        break;
      }
      default: /* Python keeps unknown escapes as written */ out[k++] = '\\'; out[k++] = e;
    }
  }
  out[k] = 0;
  t->kind = TK_STR;
  t->sval = out;
  t->len = j + 1 - i;
  return TH_OK;
}

/* A number: digits [. digits] [e [+-] digits], or . digits ... */
static th_status read_number(lexstate *ls, const char *s, int n, int i, token *t) {
  int j = i;
  bool is_float = false;
  while (j < n && is_digit((unsigned char)s[j])) j++;
  if (j < n && s[j] == '.') {
    is_float = true;
    j++;
    while (j < n && is_digit((unsigned char)s[j])) j++;
  }
  if (j < n && (s[j] == 'e' || s[j] == 'E')) {
    int k = j + 1;
    if (k < n && (s[k] == '+' || s[k] == '-')) k++;
    if (k < n && is_digit((unsigned char)s[k])) {
      is_float = true;
      j = k;
      while (j < n && is_digit((unsigned char)s[j])) j++;
    }
  }
  if (j < n && is_ident(s[j])) return syntax_error(ls, i + 1, "invalid number literal");
  char buf[400];
  if (j - i >= (int)sizeof buf) return syntax_error(ls, i + 1, "number literal too long");
  memcpy(buf, s + i, (size_t)(j - i));
  buf[j - i] = 0;
  t->len = j - i;
  errno = 0;
  if (is_float) {
    t->kind = TK_FLOAT;
    t->fval = strtod(buf, NULL);
  } else {
    t->kind = TK_INT;
    t->int_2p63 = false;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE && !strcmp(buf, "9223372036854775808")) { /* -2**63 is printed as its negation */
      t->int_2p63 = true;
      v = INT64_MIN;
    } else if (errno == ERANGE) {
      return syntax_error(ls, i + 1, "integer literal %s does not fit in 64 bits", buf);
    }
    t->ival = v;
  }
  return TH_OK;
}

static th_status tokenize(lexstate *ls, int from) {
  const char *s = ls->ln->p;
  int n = ls->ln->len;
  int i = from;
  int brackets = 0;
  while (i < n) {
    char c = s[i];
    if (c == ' ' || c == '\t') {
      i++;
      continue;
    }
    token t;
    memset(&t, 0, sizeof t);
    t.p = s + i;
    t.col = i + 1;
    if (c == '#') {
      t.kind = TK_COMMENT;
      t.sval = s + i + 1;
      t.len = n - i;
      TH_TRY(push_tok(ls, t));
      i = n;
      break;
    }
    if (is_ident_start((unsigned char)c)) {
      int j = i;
      while (j < n && is_ident((unsigned char)s[j])) j++;
      t.kind = TK_NAME;
      t.len = j - i;
    } else if (is_digit((unsigned char)c) || (c == '.' && i + 1 < n && is_digit((unsigned char)s[i + 1]))) {
      TH_TRY(read_number(ls, s, n, i, &t));
    } else if (c == '\'' || c == '"') {
      TH_TRY(read_string(ls, s, n, i, &t));
    } else if (c == '.' && i + 2 < n && s[i + 1] == '.' && s[i + 2] == '.') {
      t.kind = TK_PUNCT;
      t.len = 3;
    } else if (c == '*' && i + 1 < n && s[i + 1] == '*') {
      t.kind = TK_PUNCT;
      t.len = 2;
    } else if (strchr("()[]{},:=.-+*@", c)) {
      t.kind = TK_PUNCT;
      t.len = 1;
      /* Every bracket is one level of the recursive descent (a call's parentheses add one), so a line
       * nested deeper than TH_LEX_MAX_NEST + 1 brackets can only end in "nested too deeply": stop here, before
       * the rest of the line is tokenized and parsed level by level. */
      if (c == '(' || c == '[' || c == '{') {
        if (++brackets > TH_LEX_MAX_NEST + 1) return syntax_error(ls, i + 1, "expression nested too deeply");
      } else if ((c == ')' || c == ']' || c == '}') && brackets > 0) {
        brackets--;
      }
    } else {
      unsigned char uc = (unsigned char)c;
      if (uc >= 0x20 && uc < 0x7f) return syntax_error(ls, i + 1, "unexpected character '%c'", c);
      return syntax_error(ls, i + 1, "unexpected character (byte 0x%02x)", uc);
    }
    TH_TRY(push_tok(ls, t));
    i += t.len;
  }
  token eof;
  memset(&eof, 0, sizeof eof);
  eof.kind = TK_EOF;
  eof.p = s + n;
  eof.col = n + 1;
  return push_tok(ls, eof);
}

th_status th_lex_line(th_lexer *lx, const line *ln, int from, int level, token **toks, int *ntoks) {
  lexstate ls = {lx, ln, level, lx->tokbuf[level], 0};
  th_status st = tokenize(&ls, from);
  *toks = ls.toks;
  *ntoks = ls.ntoks;
  return st;
}
