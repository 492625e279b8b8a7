/* strbuf.c — a growable heap string used by the printer and the code emitters. An append that
 * cannot allocate marks the buffer; th_sb_take then returns NULL, so callers check once at the end. */
#include <string.h>

#include "core/core.h"

void th_sb_init(th_strbuf *sb) {
  sb->data = NULL;
  sb->len = sb->cap = 0;
  sb->oom = false;
}

void th_sb_free(th_strbuf *sb) {
  th_free(sb->data);
  th_sb_init(sb);
}

static bool reserve(th_strbuf *sb, size_t extra) {
  if (sb->oom) return false;
  if (sb->len + extra + 1 <= sb->cap) return true;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < sb->len + extra + 1) cap *= 2;
  char *d = th_realloc(sb->data, cap);
  if (!d) {
    sb->oom = true;
    return false;
  }
  sb->data = d;
  sb->cap = cap;
  return true;
}

void th_sb_puts(th_strbuf *sb, const char *s) {
  size_t n = strlen(s);
  if (!reserve(sb, n)) return;
  memcpy(sb->data + sb->len, s, n + 1);
  sb->len += n;
}

void th_sb_putc(th_strbuf *sb, char c) {
  if (!reserve(sb, 1)) return;
  sb->data[sb->len++] = c;
  sb->data[sb->len] = 0;
}

void th_sb_printf(th_strbuf *sb, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n >= 0 && reserve(sb, (size_t)n)) {
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap2);
    sb->len += (size_t)n;
  }
  va_end(ap2);
}

char *th_sb_take(th_strbuf *sb) {
  if (sb->oom) {
    th_sb_free(sb);
    th_error(TH_ERR_NOMEM, "out of memory building a string");
    return NULL;
  }
  if (!sb->data && !reserve(sb, 0)) return NULL;
  if (sb->len == 0) sb->data[0] = 0;
  char *d = sb->data;
  th_sb_init(sb);
  return d; /* allocated by th_realloc == realloc: free() is correct */
}
