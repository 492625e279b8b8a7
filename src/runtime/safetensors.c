/* safetensors.c — .safetensors files: th_safetensors_read / _write / _free.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data buffer:
 *     {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
 *      "__metadata__": {"key": "value"}}
 * data_offsets are [begin, end) byte offsets into the data buffer. The reader trusts nothing: N must fit
 * in the file, the JSON must be one valid object, every dtype known, shapes non-negative integers,
 * end - begin == numel * itemsize, and the tensors must tile the data buffer exactly (sorted by offset,
 * no overlap, no hole, nothing after the last one), as the reference implementation requires. Each
 * violation is a TH_ERR_IO naming the path, the tensor and the problem. Data are copied into new
 * 64-byte aligned tensors (the file's own offsets carry no alignment guarantee).
 *
 * The writer lays tensors out by decreasing itemsize then name (so every tensor is aligned to its
 * itemsize within the data buffer, as the Python library does), writes the header compactly and pads
 * it with spaces to a multiple of 8 bytes; it writes atomically (rt_io.c). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_io.h"

#define ST_MAX_HEADER ((uint64_t)100000000) /* the reference implementation's limit */
#define ST_MAX_INT 9007199254740992.0       /* 2^53: integers above this are not exact in JSON */

static const char *const st_dtype_names[TH_DTYPE_COUNT] = {
  [TH_BOOL] = "BOOL",        [TH_U8] = "U8",          [TH_I8] = "I8",     [TH_I16] = "I16", [TH_I32] = "I32",
  [TH_I64] = "I64",          [TH_F16] = "F16",        [TH_BF16] = "BF16", [TH_F32] = "F32", [TH_F64] = "F64",
  [TH_F8E4M3FN] = "F8_E4M3", [TH_F8E5M2] = "F8_E5M2",
};

/* True when s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

/* ---- reading --------------------------------------------------------------------------------------- */

typedef struct st_entry {
  const char *name; /* points into the cJSON tree */
  th_dtype dtype;
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  uint64_t begin, end;
  int order; /* position in the header */
} st_entry;

static int cmp_by_offset(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_by_name(const void *a, const void *b) {
  return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* An exact non-negative integer in JSON (at most 2^53). */
static bool json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double v = j->valuedouble;
  if (!(v >= 0 && v <= ST_MAX_INT) || v != floor(v)) return false;
  *out = (uint64_t)v;
  return true;
}

/* Validates one tensor entry of the header (everything but its place in the buffer). */
static th_status parse_entry(const char *path, const cJSON *j, uint64_t data_len, st_entry *e) {
  static const char *const who = "reading .safetensors";
  const char *name = j->string;
  if (!cJSON_IsObject(j)) return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': expected a JSON object", who, path, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!dt || !shape || !offs)
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': missing \"%s\"", who, path, name,
                    !dt      ? "dtype"
                    : !shape ? "shape"
                             : "data_offsets");
  if (!cJSON_IsString(dt))
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': \"dtype\" must be a string", who, path, name);
  int k = 0;
  while (k < TH_DTYPE_COUNT && strcmp(dt->valuestring, st_dtype_names[k]) != 0) k++;
  if (k == TH_DTYPE_COUNT)
    return th_error(TH_ERR_IO,
                    "%s: '%s': tensor '%s': unsupported dtype \"%s\" (supported: BOOL U8 I8 I16 I32 I64 "
                    "F16 BF16 F32 F64 F8_E4M3 F8_E5M2)",
                    who, path, name, dt->valuestring);
  e->dtype = (th_dtype)k;

  if (!cJSON_IsArray(shape))
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': \"shape\" must be an array", who, path, name);
  int nd = cJSON_GetArraySize(shape);
  if (nd > TH_MAX_DIMS)
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': %d dimensions (at most %d are supported)", who, path, name, nd,
                    TH_MAX_DIMS);
  e->ndim = nd;
  /* numel * itemsize, saturated at UINT64_MAX (it is compared against a file-bounded size). */
  uint64_t nbytes = th_dtype_size(e->dtype), i = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, shape) {
    uint64_t v;
    if (!json_uint(d, &v))
      return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': shape[%d] must be a non-negative integer", who, path, name,
                      (int)i);
    e->shape[i++] = (int64_t)v;
    nbytes = (v != 0 && nbytes > UINT64_MAX / v) ? UINT64_MAX : nbytes * v;
  }

  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &e->begin) ||
      !json_uint(cJSON_GetArrayItem(offs, 1), &e->end))
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': \"data_offsets\" must be two non-negative integers [begin, end]",
                    who, path, name);
  if (e->begin > e->end)
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': data_offsets [%llu, %llu] end before they begin", who, path,
                    name, (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > data_len)
    return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': data_offsets [%llu, %llu] reach past the %llu-byte data buffer",
                    who, path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)data_len);
  if (e->end - e->begin != nbytes)
    return th_error(TH_ERR_IO,
                    "%s: '%s': tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but a %s tensor of "
                    "this shape needs %llu",
                    who, path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin), th_dtype_name(e->dtype), (unsigned long long)nbytes);
  e->name = name;
  return TH_OK;
}

/* Checks "__metadata__": an object of string values. */
static th_status check_metadata(const char *path, const cJSON *j) {
  if (!cJSON_IsObject(j))
    return th_error(TH_ERR_IO, "reading .safetensors: '%s': \"__metadata__\" must be an object of strings", path);
  const cJSON *v;
  cJSON_ArrayForEach(v, j) {
    if (!cJSON_IsString(v))
      return th_error(TH_ERR_IO, "reading .safetensors: '%s': \"__metadata__\" value \"%s\" must be a string", path,
                      v->string);
  }
  return TH_OK;
}

/* Validates the parsed header into entries[0..n) (in header order) and checks that they tile the data
 * buffer. entries must have room for every member of root. */
static th_status check_header(const char *path, const cJSON *root, uint64_t data_len, st_entry *entries, int *n_out) {
  static const char *const who = "reading .safetensors";
  int n = 0;
  const cJSON *j;
  cJSON_ArrayForEach(j, root) {
    if (strcmp(j->string, "__metadata__") == 0) {
      TH_TRY(check_metadata(path, j));
      continue;
    }
    TH_TRY(parse_entry(path, j, data_len, &entries[n]));
    entries[n].order = n;
    n++;
  }
  *n_out = n;
  if (n == 0) {
    if (data_len != 0)
      return th_error(TH_ERR_IO, "%s: '%s': %llu bytes of data but no tensors", who, path,
                      (unsigned long long)data_len);
    return TH_OK;
  }

  /* Duplicate names (cJSON keeps both members of an object with a repeated key). */
  const st_entry **byname = th_malloc((size_t)n * sizeof *byname);
  if (!byname) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  for (int i = 0; i < n; i++) byname[i] = &entries[i];
  qsort(byname, (size_t)n, sizeof *byname, cmp_by_name);
  th_status st = TH_OK;
  for (int i = 1; i < n && st == TH_OK; i++)
    if (strcmp(byname[i - 1]->name, byname[i]->name) == 0)
      st = th_error(TH_ERR_IO, "%s: '%s': tensor '%s' appears twice in the header", who, path, byname[i]->name);
  th_free(byname);
  TH_TRY(st);

  /* The tensors must cover [0, data_len) exactly, in offset order. Sorting a copy keeps header order. */
  st_entry *sorted = th_malloc((size_t)n * sizeof *sorted);
  if (!sorted) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  memcpy(sorted, entries, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_by_offset);
  uint64_t pos = 0;
  const char *prev = NULL;
  for (int i = 0; i < n && st == TH_OK; i++) {
    const st_entry *e = &sorted[i];
    if (e->begin < pos)
      st = th_error(TH_ERR_IO, "%s: '%s': tensor '%s' (bytes [%llu, %llu)) overlaps tensor '%s'", who, path, e->name,
                    (unsigned long long)e->begin, (unsigned long long)e->end, prev);
    else if (e->begin > pos)
      st = th_error(TH_ERR_IO, "%s: '%s': a hole of %llu bytes in the data buffer before tensor '%s'", who, path,
                    (unsigned long long)(e->begin - pos), e->name);
    pos = e->end;
    prev = e->name;
  }
  if (st == TH_OK && pos != data_len)
    st = th_error(TH_ERR_IO, "%s: '%s': %llu bytes at the end of the data buffer belong to no tensor", who, path,
                  (unsigned long long)(data_len - pos));
  th_free(sorted);
  return st;
}

/* Allocates the outputs and reads the data (the file is positioned at the start of the data buffer). */
static th_status read_tensors(const char *path, FILE *f, const st_entry *entries, int n, char **names,
                              th_tensor **tensors) {
  static const char *const who = "reading .safetensors";
  for (int i = 0; i < n; i++) {
    names[i] = th_strdup(entries[i].name);
    if (!names[i]) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
    tensors[i] = th_tensor_empty(entries[i].dtype, entries[i].ndim, entries[i].shape);
    if (!tensors[i]) {
      if (th_last_status() == TH_ERR_NOMEM) return TH_ERR_NOMEM;
      char why[512]; /* th_last_error() is the buffer th_error writes: copy it first */
      snprintf(why, sizeof why, "%s", th_last_error());
      return th_error(TH_ERR_IO, "%s: '%s': tensor '%s': %s", who, path, entries[i].name, why);
    }
  }
  /* Entries tile the buffer, so reading them in offset order is one sequential pass. */
  int *order = th_malloc((size_t)n * sizeof *order);
  if (!order) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++) { /* insertion sort by offset; n is small and usually already sorted */
    int k = order[i], j = i - 1;
    while (j >= 0 && cmp_by_offset(&entries[order[j]], &entries[k]) > 0) {
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = k;
  }
  th_status st = TH_OK;
  for (int i = 0; i < n && st == TH_OK; i++) {
    const st_entry *e = &entries[order[i]];
    st = th_rt_read_exact(who, path, f, th_tensor_data(tensors[order[i]]), (size_t)(e->end - e->begin), "tensor data");
  }
  th_free(order);
  return st;
}

static th_status read_file(const char *path, FILE *f, uint64_t fsize, int *n_out, char ***names_out,
                           th_tensor ***tensors_out) {
  static const char *const who = "reading .safetensors";
  unsigned char lenbuf[8];
  if (fsize < 8)
    return th_error(TH_ERR_IO, "%s: '%s': file is truncated: %llu bytes, less than the 8-byte header length", who, path,
                    (unsigned long long)fsize);
  TH_TRY(th_rt_read_exact(who, path, f, lenbuf, 8, "the header length"));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
  if (hlen > fsize - 8)
    return th_error(TH_ERR_IO, "%s: '%s': header length %llu exceeds the %llu bytes after it", who, path,
                    (unsigned long long)hlen, (unsigned long long)(fsize - 8));
  if (hlen > ST_MAX_HEADER)
    return th_error(TH_ERR_IO, "%s: '%s': header length %llu exceeds the limit of %llu bytes", who, path,
                    (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
  char *text = th_malloc((size_t)hlen + 1);
  if (!text) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  th_status st = th_rt_read_exact(who, path, f, text, (size_t)hlen, "the header");
  text[hlen] = 0;
  if (st == TH_OK && memchr(text, 0, (size_t)hlen))
    st = th_error(TH_ERR_IO, "%s: '%s': the header contains a NUL byte", who, path);
  if (st == TH_OK && !utf8_valid((const unsigned char *)text, (size_t)hlen))
    st = th_error(TH_ERR_IO, "%s: '%s': the header is not valid UTF-8", who, path);
  cJSON *root = NULL;
  if (st == TH_OK) {
    const char *end = NULL;
    root = cJSON_ParseWithOpts(text, &end, true);
    if (!root)
      st = th_error(TH_ERR_IO, "%s: '%s': the header is not valid JSON (error at byte %lld of %llu)", who, path,
                    end ? (long long)(end - text) : -1LL, (unsigned long long)hlen);
    else if (!cJSON_IsObject(root))
      st = th_error(TH_ERR_IO, "%s: '%s': the header is not a JSON object", who, path);
  }
  th_free(text); /* cJSON copied every string it keeps */

  int members = root && st == TH_OK ? cJSON_GetArraySize(root) : 0, n = 0;
  st_entry *entries = NULL;
  char **names = NULL;
  th_tensor **tensors = NULL;
  if (st == TH_OK && members > 0) {
    entries = th_malloc((size_t)members * sizeof *entries);
    if (!entries) st = th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  }
  if (st == TH_OK) st = check_header(path, root, fsize - 8 - hlen, entries, &n);
  if (st == TH_OK && n > 0) {
    names = th_calloc((size_t)n, sizeof *names);
    tensors = th_calloc((size_t)n, sizeof *tensors);
    if (!names || !tensors) st = th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  }
  if (st == TH_OK) st = read_tensors(path, f, entries, n, names, tensors);
  th_free(entries);
  cJSON_Delete(root);
  if (st != TH_OK) {
    th_safetensors_free(n, names, tensors); /* copes with NULL arrays and NULL entries */
    return st;
  }
  *n_out = n;
  *names_out = names;
  *tensors_out = tensors;
  return TH_OK;
}

th_status th_safetensors_read(const char *path, int *n, char ***names, th_tensor ***tensors) {
  if (!n || !names || !tensors) return th_error(TH_ERR_VALUE, "reading .safetensors: an output pointer is NULL");
  *n = 0;
  *names = NULL;
  *tensors = NULL;
  FILE *f;
  uint64_t fsize;
  TH_TRY(th_rt_open_read("reading .safetensors", path, &f, &fsize));
  th_status st = read_file(path, f, fsize, n, names, tensors);
  fclose(f);
  return st;
}

void th_safetensors_free(int n, char **names, th_tensor **tensors) {
  for (int i = 0; i < n; i++) {
    if (names) th_free(names[i]);
    if (tensors) th_tensor_release(tensors[i]);
  }
  th_free(names);
  th_free(tensors);
}

/* ---- writing --------------------------------------------------------------------------------------- */

typedef struct st_item {
  const char *name;
  const th_tensor *t;
  uint64_t nbytes;
} st_item;

static int cmp_layout(const void *a, const void *b) {
  const st_item *x = a, *y = b;
  size_t sx = th_dtype_size(x->t->dtype), sy = th_dtype_size(y->t->dtype);
  if (sx != sy) return sx > sy ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Appends s as a JSON string literal. */
static void json_string(th_strbuf *sb, const char *s) {
  th_sb_putc(sb, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      th_sb_putc(sb, '\\');
      th_sb_putc(sb, (char)*p);
    } else if (*p < 0x20) {
      th_sb_printf(sb, "\\u%04x", *p);
    } else {
      th_sb_putc(sb, (char)*p);
    }
  }
  th_sb_putc(sb, '"');
}

typedef struct st_writer {
  const char *path;
  const st_item *items;
  int n;
  const char *header;
  size_t header_len; /* a multiple of 8 */
} st_writer;

static th_status write_body(FILE *f, void *ctx) {
  const st_writer *w = ctx;
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)w->header_len >> (8 * i));
  if (fwrite(len, 1, 8, f) != 8 || fwrite(w->header, 1, w->header_len, f) != w->header_len)
    return th_error(TH_ERR_IO, "writing .safetensors: cannot write '%s'", w->path);
  for (int i = 0; i < w->n; i++) TH_TRY(th_rt_write_tensor_data("writing .safetensors", w->path, f, w->items[i].t));
  return TH_OK;
}

/* Validates the arguments and fills items (in argument order). */
static th_status check_write_args(const char *path, int n, const char *const *names, th_tensor *const *tensors,
                                  st_item *items) {
  static const char *const who = "writing .safetensors";
  for (int i = 0; i < n; i++) {
    if (!names[i]) return th_error(TH_ERR_VALUE, "%s: names[%d] is NULL", who, i);
    if (!tensors[i]) return th_error(TH_ERR_VALUE, "%s: tensor '%s' is NULL", who, names[i]);
    if (!utf8_valid((const unsigned char *)names[i], strlen(names[i])))
      return th_error(TH_ERR_VALUE, "%s: names[%d] is not valid UTF-8", who, i);
    if (strcmp(names[i], "__metadata__") == 0)
      return th_error(TH_ERR_VALUE, "%s: the name \"__metadata__\" is reserved", who);
    if (tensors[i]->device.type != TH_CPU)
      return th_error(TH_ERR_DEVICE, "%s: tensor '%s' is not on the CPU", who, names[i]);
    items[i].name = names[i];
    items[i].t = tensors[i];
    items[i].nbytes = (uint64_t)th_tensor_numel(tensors[i]) * th_dtype_size(tensors[i]->dtype);
  }
  if (n > 1) qsort(items, (size_t)n, sizeof *items, cmp_layout);
  for (int i = 1; i < n; i++)
    if (strcmp(items[i - 1].name, items[i].name) == 0)
      return th_error(TH_ERR_VALUE, "%s: the name '%s' is given twice (writing '%s')", who, items[i].name,
                      path ? path : "(null)");
  return TH_OK;
}

th_status th_safetensors_write(const char *path, int n, const char *const *names, th_tensor *const *tensors) {
  static const char *const who = "writing .safetensors";
  if (n < 0) return th_error(TH_ERR_VALUE, "%s: expected n >= 0, but got %d", who, n);
  if (n > 0 && (!names || !tensors)) return th_error(TH_ERR_VALUE, "%s: names or tensors is NULL", who);
  st_item *items = NULL;
  if (n > 0) {
    items = th_malloc((size_t)n * sizeof *items);
    if (!items) return th_error(TH_ERR_NOMEM, "%s: out of memory writing '%s'", who, path ? path : "(null)");
  }
  th_status st = check_write_args(path, n, names, tensors, items);

  th_strbuf sb;
  th_sb_init(&sb);
  if (st == TH_OK) {
    uint64_t off = 0;
    th_sb_putc(&sb, '{');
    for (int i = 0; i < n; i++) {
      const th_tensor *t = items[i].t;
      if (i) th_sb_putc(&sb, ',');
      json_string(&sb, items[i].name);
      th_sb_printf(&sb, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_names[t->dtype]);
      for (int d = 0; d < t->ndim; d++) th_sb_printf(&sb, d ? ",%lld" : "%lld", (long long)t->shape[d]);
      th_sb_printf(&sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                   (unsigned long long)(off + items[i].nbytes));
      off += items[i].nbytes;
    }
    th_sb_putc(&sb, '}');
    while (!sb.oom && sb.len % 8 != 0) th_sb_putc(&sb, ' ');
    if (sb.oom) st = th_error(TH_ERR_NOMEM, "%s: out of memory writing '%s'", who, path ? path : "(null)");
  }
  if (st == TH_OK) {
    st_writer w = {.path = path, .items = items, .n = n, .header = sb.data, .header_len = sb.len};
    st = th_rt_write_atomic(who, path, write_body, &w);
  }
  th_sb_free(&sb);
  th_free(items);
  return st;
}
