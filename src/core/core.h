/* core.h — internal foundations: the allocation hook, arenas, growable arrays and error reporting.
 *
 * Every heap allocation in the library goes through th_malloc/th_calloc/th_realloc/th_free, so a test
 * can make the Nth allocation fail (th_alloc_fail_after) and check that nothing leaks or crashes.
 * An arena is a bump allocator freed at once (one per trace). Errors are reported with th_error(),
 * which formats the thread-local message read by th_last_error() and returns the status. */
#ifndef TH_CORE_H
#define TH_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "thunder/error.h"

/* ---- allocation hook (alloc.c) ----------------------------------------------------------------- */
void *th_malloc(size_t n);
void *th_calloc(size_t count, size_t size);
void *th_realloc(void *p, size_t n);
void th_free(void *p);
char *th_strdup(const char *s);
/* Test hook: the n-th allocation from now (1-based) and all after it fail; n <= 0 disables. */
void th_alloc_fail_after(long n);

/* ---- arena (arena.c) ----------------------------------------------------------------------------- */
typedef struct th_arena th_arena;
th_arena *th_arena_new(void);
void th_arena_free(th_arena *a);
/* Zeroed, 16-byte aligned memory; NULL on allocation failure (message set). */
void *th_arena_alloc(th_arena *a, size_t n);
char *th_arena_strdup(th_arena *a, const char *s);
char *th_arena_strndup(th_arena *a, const char *s, size_t n);
/* printf into the arena. */
char *th_arena_printf(th_arena *a, const char *fmt, ...);

/* ---- growable pointer array in an arena ---------------------------------------------------------- */
typedef struct th_vec {
  void **items;
  int n, cap;
} th_vec;
/* Appends p; grows by copying inside the arena. TH_ERR_NOMEM on failure. */
th_status th_vec_push(th_arena *a, th_vec *v, void *p);

/* ---- growable string buffer on the heap (strbuf.c) ------------------------------------------------ */
typedef struct th_strbuf {
  char *data;
  size_t len, cap;
  bool oom; /* set once an append failed; later appends are no-ops */
} th_strbuf;
void th_sb_init(th_strbuf *sb);
void th_sb_free(th_strbuf *sb);
void th_sb_puts(th_strbuf *sb, const char *s);
void th_sb_putc(th_strbuf *sb, char c);
void th_sb_printf(th_strbuf *sb, const char *fmt, ...);
/* Detaches the buffer (caller frees with free()); NULL if an append failed. */
char *th_sb_take(th_strbuf *sb);

/* ---- errors (error.c) ----------------------------------------------------------------------------- */
/* Sets the thread-local last-error message (printf-style) and returns code. */
th_status th_error(th_status code, const char *fmt, ...);
th_status th_verror(th_status code, const char *fmt, va_list ap);
/* The status of the last th_error on this thread (TH_OK after th_clear_error). */
th_status th_last_status(void);

/* The one control-flow macro: evaluate a th_status expression and return it if it is not TH_OK. */
#define TH_TRY(expr)                                                                                                   \
  do {                                                                                                                 \
    th_status th_try_s_ = (expr);                                                                                      \
    if (th_try_s_ != TH_OK) return th_try_s_;                                                                          \
  } while (0)

/* Broken internal invariant (never user input): print file:line and abort. */
#define TH_ASSERT(cond)                                                                                                \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "thunder-c internal error: %s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
      abort();                                                                                                         \
    }                                                                                                                  \
  } while (0)

#endif
