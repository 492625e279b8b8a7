/* arena.c — bump allocator freed at once (one per trace), plus arena-backed growable arrays.
 * Memory comes in chunks of at least 64 KiB from th_malloc; allocations are zeroed and 16-byte
 * aligned. A failed allocation sets TH_ERR_NOMEM and returns NULL; the arena stays usable. */
#include <string.h>

#include "core/core.h"

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct th_arena {
  chunk *head;
};

th_arena *th_arena_new(void) {
  th_arena *a = th_calloc(1, sizeof *a);
  if (!a) th_error(TH_ERR_NOMEM, "out of memory allocating an arena");
  return a;
}

void th_arena_free(th_arena *a) {
  if (!a) return;
  chunk *c = a->head;
  while (c) {
    chunk *next = c->next;
    th_free(c);
    c = next;
  }
  th_free(a);
}

void *th_arena_alloc(th_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = th_malloc(sizeof(chunk) + cap);
    if (!c) {
      th_error(TH_ERR_NOMEM, "out of memory (arena chunk of %zu bytes)", cap);
      return NULL;
    }
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

char *th_arena_strndup(th_arena *a, const char *s, size_t n) {
  char *d = th_arena_alloc(a, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

char *th_arena_strdup(th_arena *a, const char *s) { return th_arena_strndup(a, s, strlen(s)); }

char *th_arena_printf(th_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *d = n >= 0 ? th_arena_alloc(a, (size_t)n + 1) : NULL;
  if (d) vsnprintf(d, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return d;
}

th_status th_vec_push(th_arena *a, th_vec *v, void *p) {
  if (v->n == v->cap) {
    int cap = v->cap ? v->cap * 2 : 8;
    void **items = th_arena_alloc(a, sizeof(void *) * (size_t)cap);
    if (!items) return TH_ERR_NOMEM;
    if (v->n) memcpy(items, v->items, sizeof(void *) * (size_t)v->n);
    v->items = items;
    v->cap = cap;
  }
  v->items[v->n++] = p;
  return TH_OK;
}
