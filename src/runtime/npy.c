/* npy.c — NumPy .npy files: th_npy_read (format versions 1.0, 2.0, 3.0) and th_npy_write (1.0).
 *
 * A .npy file is the magic "\x93NUMPY", a version (major, minor byte), the header length (uint16 LE in
 * 1.0, uint32 LE in 2.0/3.0), then the header: a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a final '\n', then the raw element data. The dict is parsed here by hand with
 * a small recursive-descent reader that accepts exactly what NumPy writes (and any equivalent spacing,
 * quoting and key order); anything else is rejected with a TH_ERR_IO message naming the path and the
 * problem. The file size must equal header + numel * itemsize exactly.
 *
 * The writer reproduces numpy.save byte for byte: keys sorted, the 21-digit growth padding after the
 * dict, the whole preamble padded to a multiple of 64 bytes. */
#include <ctype.h>
#include <string.h>

#include "runtime/rt_io.h"

#define NPY_MAX_HEADER ((uint32_t)1 << 20) /* far above anything numpy writes (it caps at 10000) */

/* ---- dtype descriptors ---------------------------------------------------------------------------- */

/* The .npy descr of each dtype (NULL: not representable in NumPy). */
static const char *npy_descr(th_dtype dt) {
  switch (dt) {
    case TH_BOOL: return "|b1";
    case TH_U8: return "|u1";
    case TH_I8: return "|i1";
    case TH_I16: return "<i2";
    case TH_I32: return "<i4";
    case TH_I64: return "<i8";
    case TH_F16: return "<f2";
    case TH_F32: return "<f4";
    case TH_F64: return "<f8";
    default: return NULL;
  }
}

/* Maps a descr string ("<f4", "|b1", "f8") to a dtype, or sets an error. */
static th_status parse_descr(const char *path, const char *descr, th_dtype *out) {
  static const char *const who = "reading .npy";
  const char *s = descr;
  char order = '=';
  if (*s == '<' || *s == '>' || *s == '|' || *s == '=') order = *s++;
  static const struct {
    const char *code;
    th_dtype dt;
  } table[] = {
    {"b1", TH_BOOL}, {"u1", TH_U8},  {"i1", TH_I8},  {"i2", TH_I16}, {"i4", TH_I32},
    {"i8", TH_I64},  {"f2", TH_F16}, {"f4", TH_F32}, {"f8", TH_F64},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(s, table[i].code) != 0) continue;
    if (order == '>' && th_dtype_size(table[i].dt) > 1)
      return th_error(TH_ERR_IO,
                      "%s: '%s': big-endian data (descr '%s') is not supported; save it little-endian, "
                      "e.g. np.save(path, arr.astype('<%s'))",
                      who, path, descr, s);
    *out = table[i].dt;
    return TH_OK;
  }
  return th_error(TH_ERR_IO, "%s: '%s': unsupported dtype descr '%s' (supported: b1 u1 i1 i2 i4 i8 f2 f4 f8)", who,
                  path, descr);
}

/* ---- header dict parser --------------------------------------------------------------------------- */

typedef struct hdr_parser {
  const char *path;
  const char *s; /* header text, NUL-terminated (embedded NULs were rejected) */
  size_t pos;
} hdr_parser;

static th_status hdr_fail(hdr_parser *h, const char *what) {
  return th_error(TH_ERR_IO, "reading .npy: '%s': malformed header: %s at offset %zu of the header dict", h->path, what,
                  h->pos);
}

static void hdr_ws(hdr_parser *h) {
  while (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' || h->s[h->pos] == '\n' || h->s[h->pos] == '\r') h->pos++;
}

static bool hdr_eat(hdr_parser *h, char c) {
  hdr_ws(h);
  if (h->s[h->pos] != c) return false;
  h->pos++;
  return true;
}

/* A quoted Python string without escapes, at most cap-1 characters. */
static th_status hdr_string(hdr_parser *h, char *buf, size_t cap) {
  hdr_ws(h);
  char q = h->s[h->pos];
  if (q != '\'' && q != '"') return hdr_fail(h, "expected a quoted string");
  h->pos++;
  size_t n = 0;
  for (;;) {
    char c = h->s[h->pos];
    if (c == q) break;
    if (c == 0) return hdr_fail(h, "unterminated string");
    if (c == '\\' || !isprint((unsigned char)c)) return hdr_fail(h, "unsupported character in string");
    if (n + 1 >= cap) return hdr_fail(h, "string too long");
    buf[n++] = c;
    h->pos++;
  }
  h->pos++;
  buf[n] = 0;
  return TH_OK;
}

static th_status hdr_bool(hdr_parser *h, bool *out) {
  hdr_ws(h);
  if (strncmp(h->s + h->pos, "True", 4) == 0) {
    *out = true;
    h->pos += 4;
  } else if (strncmp(h->s + h->pos, "False", 5) == 0) {
    *out = false;
    h->pos += 5;
  } else {
    return hdr_fail(h, "'fortran_order' must be True or False");
  }
  if (isalnum((unsigned char)h->s[h->pos]) || h->s[h->pos] == '_')
    return hdr_fail(h, "'fortran_order' must be True or False");
  return TH_OK;
}

/* A non-negative decimal integer (optionally with Python 2's 'L' suffix). */
static th_status hdr_int(hdr_parser *h, int64_t *out) {
  hdr_ws(h);
  if (h->s[h->pos] == '-') return hdr_fail(h, "negative dimension in 'shape'");
  if (!isdigit((unsigned char)h->s[h->pos])) return hdr_fail(h, "expected an integer in 'shape'");
  int64_t v = 0;
  while (isdigit((unsigned char)h->s[h->pos])) {
    int d = h->s[h->pos] - '0';
    if (v > (INT64_MAX - d) / 10) return hdr_fail(h, "dimension in 'shape' overflows int64");
    v = v * 10 + d;
    h->pos++;
  }
  if (h->s[h->pos] == 'L') h->pos++;
  if (isalnum((unsigned char)h->s[h->pos]) || h->s[h->pos] == '_' || h->s[h->pos] == '.')
    return hdr_fail(h, "expected an integer in 'shape'");
  *out = v;
  return TH_OK;
}

/* A Python tuple of ints: "()", "(3,)", "(2, 3)", "(2, 3,)". */
static th_status hdr_shape(hdr_parser *h, int *ndim, int64_t *shape) {
  if (!hdr_eat(h, '(')) return hdr_fail(h, "'shape' must be a tuple");
  int n = 0;
  bool trailing_comma = false;
  if (!hdr_eat(h, ')')) {
    for (;;) {
      if (n == TH_MAX_DIMS)
        return th_error(TH_ERR_IO, "reading .npy: '%s': arrays of more than %d dimensions are not supported", h->path,
                        TH_MAX_DIMS);
      TH_TRY(hdr_int(h, &shape[n++]));
      trailing_comma = hdr_eat(h, ',');
      if (hdr_eat(h, ')')) break;
      if (!trailing_comma) return hdr_fail(h, "expected ',' or ')' in 'shape'");
    }
    if (n == 1 && !trailing_comma) return hdr_fail(h, "'shape' must be a tuple, e.g. (3,)");
  }
  *ndim = n;
  return TH_OK;
}

typedef struct npy_header {
  th_dtype dtype;
  bool fortran;
  int ndim;
  int64_t shape[TH_MAX_DIMS];
} npy_header;

/* Parses the whole header dict: exactly the keys 'descr', 'fortran_order', 'shape', each once, then
 * only whitespace. */
static th_status parse_header(const char *path, const char *text, npy_header *out) {
  hdr_parser h = {.path = path, .s = text, .pos = 0};
  bool seen_descr = false, seen_order = false, seen_shape = false;
  char descr[64];
  if (!hdr_eat(&h, '{')) return hdr_fail(&h, "expected '{'");
  while (!hdr_eat(&h, '}')) {
    char key[32];
    TH_TRY(hdr_string(&h, key, sizeof key));
    if (!hdr_eat(&h, ':')) return hdr_fail(&h, "expected ':' after a key");
    bool *seen;
    if (strcmp(key, "descr") == 0) {
      seen = &seen_descr;
      hdr_ws(&h);
      if (h.s[h.pos] == '[')
        return th_error(TH_ERR_IO, "reading .npy: '%s': structured dtypes are not supported", path);
      TH_TRY(hdr_string(&h, descr, sizeof descr));
    } else if (strcmp(key, "fortran_order") == 0) {
      seen = &seen_order;
      TH_TRY(hdr_bool(&h, &out->fortran));
    } else if (strcmp(key, "shape") == 0) {
      seen = &seen_shape;
      TH_TRY(hdr_shape(&h, &out->ndim, out->shape));
    } else {
      return th_error(TH_ERR_IO, "reading .npy: '%s': malformed header: unexpected key '%s'", path, key);
    }
    if (*seen) return th_error(TH_ERR_IO, "reading .npy: '%s': malformed header: duplicate key '%s'", path, key);
    *seen = true;
    if (hdr_eat(&h, ',')) continue;
    if (hdr_eat(&h, '}')) break;
    return hdr_fail(&h, "expected ',' or '}'");
  }
  hdr_ws(&h);
  if (h.s[h.pos] != 0) return hdr_fail(&h, "unexpected text after the dict");
  if (!seen_descr || !seen_order || !seen_shape)
    return th_error(TH_ERR_IO, "reading .npy: '%s': malformed header: missing key '%s'", path,
                    !seen_descr   ? "descr"
                    : !seen_order ? "fortran_order"
                                  : "shape");
  return parse_descr(path, descr, &out->dtype);
}

/* ---- reading ------------------------------------------------------------------------------------ */

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads the preamble and header; on success *data_start is the file offset of the data. */
static th_status read_header(const char *path, FILE *f, uint64_t fsize, npy_header *hdr, uint64_t *data_start) {
  static const char *const who = "reading .npy";
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got == 0) return th_error(TH_ERR_IO, "%s: '%s': the file is empty", who, path);
  if (memcmp(pre, "\x93NUMPY", got < 6 ? got : 6) != 0)
    return th_error(TH_ERR_IO, "%s: '%s': not a .npy file (bad magic)", who, path);
  if (got < 8)
    return th_error(TH_ERR_IO, "%s: '%s': file is truncated after %zu bytes of the preamble", who, path, got);
  unsigned major = pre[6], minor = pre[7];
  if (minor != 0 || major < 1 || major > 3)
    return th_error(TH_ERR_IO, "%s: '%s': unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)", who, path,
                    major, minor);
  size_t lenbytes = major == 1 ? 2 : 4;
  TH_TRY(th_rt_read_exact(who, path, f, pre + 8, lenbytes, "the header length"));
  uint32_t hlen = major == 1 ? (uint32_t)pre[8] | (uint32_t)pre[9] << 8 : le32(pre + 8);
  uint64_t pre_len = 8 + lenbytes;
  if (hlen > NPY_MAX_HEADER)
    return th_error(TH_ERR_IO, "%s: '%s': header length %u is implausibly large", who, path, hlen);
  if (pre_len + hlen > fsize)
    return th_error(TH_ERR_IO, "%s: '%s': file is truncated: the header needs %u bytes, only %llu are left", who, path,
                    hlen, (unsigned long long)(fsize - pre_len));
  char *text = th_malloc((size_t)hlen + 1);
  if (!text) return th_error(TH_ERR_NOMEM, "%s: out of memory reading '%s'", who, path);
  th_status st = th_rt_read_exact(who, path, f, text, hlen, "the header");
  if (st == TH_OK) {
    text[hlen] = 0;
    if (memchr(text, 0, hlen))
      st = th_error(TH_ERR_IO, "%s: '%s': malformed header: it contains a NUL byte", who, path);
    else
      st = parse_header(path, text, hdr);
  }
  th_free(text);
  *data_start = pre_len + hlen;
  return st;
}

static th_status read_file(const char *path, FILE *f, uint64_t fsize, th_tensor **out) {
  static const char *const who = "reading .npy";
  npy_header hdr = {0};
  uint64_t start = 0;
  TH_TRY(read_header(path, f, fsize, &hdr, &start));

  /* Fortran order: the bytes are the C-order layout of the reversed shape. */
  bool transpose = hdr.fortran && hdr.ndim > 1;
  int64_t file_shape[TH_MAX_DIMS];
  for (int i = 0; i < hdr.ndim; i++) file_shape[i] = transpose ? hdr.shape[hdr.ndim - 1 - i] : hdr.shape[i];
  /* Check the data size against the file before allocating anything of that size. */
  uint64_t nbytes = th_dtype_size(hdr.dtype);
  for (int i = 0; i < hdr.ndim; i++) {
    uint64_t d = (uint64_t)hdr.shape[i];
    nbytes = (d != 0 && nbytes > UINT64_MAX / d) ? UINT64_MAX : nbytes * d;
  }
  uint64_t avail = fsize - start;
  if (avail < nbytes)
    return th_error(TH_ERR_IO, "%s: '%s': file is truncated: the data needs %llu bytes, only %llu are present", who,
                    path, (unsigned long long)nbytes, (unsigned long long)avail);
  if (avail > nbytes)
    return th_error(TH_ERR_IO, "%s: '%s': %llu unexpected bytes after the %llu bytes of data", who, path,
                    (unsigned long long)(avail - nbytes), (unsigned long long)nbytes);
  th_tensor *raw = th_tensor_empty(hdr.dtype, hdr.ndim, file_shape);
  if (!raw) {
    if (th_last_status() == TH_ERR_NOMEM) return TH_ERR_NOMEM;
    char why[512]; /* th_last_error() is the buffer th_error writes: copy it first */
    snprintf(why, sizeof why, "%s", th_last_error());
    return th_error(TH_ERR_IO, "%s: '%s': invalid shape: %s", who, path, why);
  }
  th_status st = th_rt_read_exact(who, path, f, th_tensor_data(raw), (size_t)nbytes, "the data");
  if (st != TH_OK) {
    th_tensor_release(raw);
    return st;
  }
  if (!transpose) {
    *out = raw;
    return TH_OK;
  }
  int64_t strides[TH_MAX_DIMS];
  for (int i = 0; i < hdr.ndim; i++) strides[i] = th_tensor_strides(raw)[hdr.ndim - 1 - i];
  th_tensor *v = th_tensor_view(raw, hdr.ndim, hdr.shape, strides, 0);
  th_tensor *c = v ? th_tensor_contiguous_copy(v) : NULL;
  th_tensor_release(v);
  th_tensor_release(raw);
  if (!c) return th_last_status();
  *out = c;
  return TH_OK;
}

th_status th_npy_read(const char *path, th_tensor **out) {
  if (!out) return th_error(TH_ERR_VALUE, "reading .npy: out is NULL");
  *out = NULL;
  FILE *f;
  uint64_t fsize;
  TH_TRY(th_rt_open_read("reading .npy", path, &f, &fsize));
  th_status st = read_file(path, f, fsize, out);
  fclose(f);
  return st;
}

/* ---- writing ------------------------------------------------------------------------------------ */

typedef struct npy_writer {
  const char *path;
  const th_tensor *t;
  const char *preamble;
  size_t preamble_len;
} npy_writer;

static th_status write_body(FILE *f, void *ctx) {
  npy_writer *w = ctx;
  if (fwrite(w->preamble, 1, w->preamble_len, f) != w->preamble_len)
    return th_error(TH_ERR_IO, "writing .npy: cannot write '%s'", w->path);
  return th_rt_write_tensor_data("writing .npy", w->path, f, w->t);
}

th_status th_npy_write(const char *path, const th_tensor *t) {
  static const char *const who = "writing .npy";
  if (!t) return th_error(TH_ERR_VALUE, "%s: the tensor is NULL", who);
  const char *descr = npy_descr(t->dtype);
  if (!descr)
    return th_error(TH_ERR_TYPE, "%s: cannot write '%s': NumPy has no %s dtype; use .safetensors instead", who,
                    path ? path : "(null)", th_dtype_name(t->dtype));
  if (t->device.type != TH_CPU) return th_error(TH_ERR_DEVICE, "%s: only CPU tensors can be written", who);

  /* The dict exactly as numpy 1.24's _write_array_header prints it. */
  char dict[400];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");
  if (t->ndim > 0) { /* room to grow shape[0] in place up to 21 digits (GROWTH_AXIS_MAX_DIGITS) */
    char d0[24];
    int w0 = snprintf(d0, sizeof d0, "%lld", (long long)t->shape[0]);
    for (int i = w0; i < 21; i++) dict[n++] = ' ';
    dict[n] = 0;
  }
  /* magic(6) + version(2) + length(2) + dict + padding + '\n' is a multiple of 64. */
  size_t hlen = (size_t)n + 1, pad = 64 - ((10 + hlen) % 64);
  char pre[512];
  size_t total = 10 + hlen + pad;
  TH_ASSERT(total <= sizeof pre);
  memcpy(pre, "\x93NUMPY\x01\x00", 8);
  pre[8] = (char)((hlen + pad) & 0xff);
  pre[9] = (char)((hlen + pad) >> 8);
  memcpy(pre + 10, dict, (size_t)n);
  memset(pre + 10 + n, ' ', pad);
  pre[total - 1] = '\n';

  npy_writer w = {.path = path, .t = t, .preamble = pre, .preamble_len = total};
  return th_rt_write_atomic(who, path, write_body, &w);
}
