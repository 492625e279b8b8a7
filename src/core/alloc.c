/* alloc.c — the single allocation hook. All library heap memory passes through here so tests can
 * inject the failure of the Nth allocation (th_alloc_fail_after) and check for clean error paths. */
#include <string.h>

#include "core/core.h"

static _Thread_local long fail_countdown = 0; /* 0: disabled; k > 0: the k-th call from now fails */

void th_alloc_fail_after(long n) { fail_countdown = n > 0 ? n : 0; }

static bool should_fail(void) {
  if (fail_countdown == 0) return false;
  if (fail_countdown == 1) return true; /* stays at 1: every later allocation fails too */
  fail_countdown--;
  return false;
}

void *th_malloc(size_t n) {
  if (should_fail()) return NULL;
  return malloc(n ? n : 1);
}

void *th_calloc(size_t count, size_t size) {
  if (should_fail()) return NULL;
  return calloc(count ? count : 1, size ? size : 1);
}

void *th_realloc(void *p, size_t n) {
  if (should_fail()) return NULL;
  return realloc(p, n ? n : 1);
}

void th_free(void *p) { free(p); }

char *th_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = th_malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}
