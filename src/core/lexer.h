/* lexer.h — the trace parser's lexical layer, internal to src/core/parser.c and src/core/lexer.c:
 * the text as lines, a line as tokens, and the "file:line:col" errors with the source line and a
 * caret that both layers report.
 *
 * Lines end at "\n", "\r\n" or a lone "\r" (Python's universal newlines); a UTF-8 byte order mark at
 * the start of the text is skipped; a tab in indentation is a syntax error. A line is tokenized on
 * demand, from a byte offset to its end, into one of TH_LEX_LEVELS reusable token buffers (the parser
 * keeps one per subsymbol depth, so a statement's tokens outlive the parsing of its subsymbols, and
 * one for trailing type comments). Tokens are names, integers, floats, Python string literals (the
 * common escapes decoded), punctuation and a trailing comment; every token list ends with TK_EOF.
 * Time and memory are linear in the text: a string literal takes its own length, buffers are reused
 * from line to line, and a line nested deeper than TH_LEX_MAX_NEST + 1 brackets is rejected while it
 * is tokenized. */
#ifndef TH_LEXER_H
#define TH_LEXER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ir.h"

#define TH_LEX_MAX_NEST 64                  /* expression nesting and subsymbol depth */
#define TH_LEX_LEVELS (TH_LEX_MAX_NEST + 2) /* token buffers: one per subsymbol depth, one for type comments */

typedef struct line {
  const char *p; /* start of the line */
  int len;       /* without the newline (and a trailing \r) */
  int lineno;    /* 1-based */
  int indent;    /* leading spaces */
  bool blank;
  bool comment; /* first non-space character is '#' */
} line;

typedef enum tk_kind { TK_NAME, TK_INT, TK_FLOAT, TK_STR, TK_PUNCT, TK_COMMENT, TK_EOF } tk_kind;

typedef struct token {
  tk_kind kind;
  const char *p; /* text in the line */
  int len;
  int col; /* 1-based column in the line */
  int64_t ival;
  bool int_2p63; /* INT: the literal 9223372036854775808 (ival INT64_MIN), valid only negated */
  double fval;
  const char *sval; /* STR: decoded text (parse arena); COMMENT: text after '#' */
} token;

typedef struct th_lexer {
  const char *filename; /* names the text in error messages */
  th_arena *pa;         /* the parse's arena: lines, token buffers, decoded strings */
  token *tokbuf[TH_LEX_LEVELS];
  int tokcap[TH_LEX_LEVELS];
} th_lexer;

/* Splits text (a leading UTF-8 byte order mark skipped) into *nlines lines in *lines. Error: a tab
 * in a line's indentation (TH_ERR_SYNTAX; *nlines then counts the lines up to that one). */
th_status th_lex_lines(th_lexer *lx, const char *text, line **lines, int *nlines);

/* Tokenizes ln from byte offset `from` to its end into the token buffer of `level` (overwriting that
 * level's previous line). *toks and *ntoks are the tokens, the last one TK_EOF; on a syntax error they
 * are the tokens before the bad character (no TK_EOF). */
th_status th_lex_line(th_lexer *lx, const line *ln, int from, int level, token **toks, int *ntoks);

/* Reports an error at ln (NULL: none) and 1-based column col (0: none) as code: "file:line:col: msg"
 * with with_col, else "file:line: msg", then the source line (a window of it when long) and a caret
 * under col. Returns code. */
th_status th_lex_verror(const th_lexer *lx, const line *ln, int col, bool with_col, th_status code, const char *fmt,
                        va_list ap);

#endif
