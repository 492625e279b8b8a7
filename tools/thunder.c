/* thunder.c — the `thunder` command-line tool: check and run programs written in Thunder's trace format.
 *
 *   thunder run PROGRAM [--input NAME=FILE | --input FILE.safetensors]... [--random-inputs SEED]
 *               [--device cpu] [--executors fuser,blas,eager] [--output FILE] [--print-trace]
 *               [--print-traces] [--quiet]
 *               [--autocast bf16|f16] [--float8]
 *               [--grad [--cotangents FILE]]
 *   thunder check PROGRAM [--autocast bf16|f16] [--float8] [--grad]
 *   thunder --help
 *
 * `run` parses and verifies the trace, binds each input (from a .npy file, a tensor of a .safetensors
 * file, or deterministic random values), compiles it for the CPU (th_program_compile: verify, DCE, CSE,
 * the execution pass, the fuser, Delete Last Used; --print-traces prints each stage's trace after a
 * `# stage: <name>` line, as thunder_c.last_traces lists them), runs it, prints summary statistics of
 * every output and optionally writes them (.npy: one output; .safetensors: all, named output0...).
 * --autocast applies the autocast transform (th_transform_autocast) to the parsed trace first; --float8
 * then the float8 training transform (th_transform_float8: every linear as dynamic per-tensor scaled
 * fp8 math with _scaled_mm, e4m3fn for inputs and weights).
 * --grad (last) differentiates: check prints the forward and backward traces of th_transform_grad; run
 * cleans the trace first (th_compile_prepare: verify, DCE, CSE), splits it with the grad transform,
 * compiles both from the execution pass on, runs them, the backward with cotangents of ones (or
 * --cotangents FILE), and prints the gradients.
 * Input dtypes and shapes come from the trace's argument comments and are checked against the files.
 * Exit status: 0 success, 1 user error (one line on stderr naming file, line, op and argument),
 * 2 bad usage. Output files are written atomically: a failure never leaves a partial file. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "thunder/thunder.h"

#define MAX_BINDINGS 256

static const char *usage_text =
  "usage: thunder run PROGRAM [options]   compile and run a trace on the CPU\n"
  "       thunder check PROGRAM [--autocast bf16|f16] [--float8] [--grad]\n"
  "                                       parse, verify and print a trace (--grad: its forward\n"
  "                                       and backward traces, th_transform_grad)\n"
  "       thunder --help                  this text\n"
  "\n"
  "PROGRAM is a tensor program in Lightning Thunder's printed trace format\n"
  "(def computation(...): with one `# name: \"cpu f32[2, 3]\"` comment per input).\n"
  "\n"
  "run options:\n"
  "  --input NAME=FILE      bind input NAME to FILE (.npy, or the tensor NAME of a .safetensors file)\n"
  "  --input FILE.safetensors\n"
  "                         bind every input named like a tensor in FILE\n"
  "  --random-inputs SEED   fill inputs not bound by --input with deterministic random values\n"
  "                         (floats uniform in [-1, 1), integers in [0, 16), bools 0/1)\n"
  "  --device cpu           run a trace recorded for another device (cuda:0) on the CPU\n"
  "  --executors LIST       executors in priority order (default fuser,blas,eager; fuser compiles\n"
  "                         fusion regions with $CC, cached in $XDG_CACHE_HOME/thunder-c,\n"
  "                         else ~/.cache/thunder-c; least recently used kernels go beyond\n"
  "                         $THUNDER_CACHE_MAX_MB MiB: default 1024, 0 for no bound)\n"
  "  --output FILE          write the outputs: FILE.npy (a single output) or FILE.safetensors\n"
  "  --print-trace          also print the execution trace (torch-level ops decomposed into\n"
  "                         the prims the executors run) before running\n"
  "  --print-traces         also print the trace of every compile stage (dce, cse, execution,\n"
  "                         fuser, del_last_used), each after a `# stage: <name>` line\n"
  "  --quiet                do not print the input trace and output statistics\n"
  "  --grad                 also differentiate: run the forward and backward traces of the grad\n"
  "                         transform and print (with --output: write, as grad_<input>) the\n"
  "                         gradient of every floating input\n"
  "  --cotangents FILE      the output gradients for --grad (default: ones): FILE.npy for a single\n"
  "                         output tensor, or FILE.safetensors with cotangent0, cotangent1, ...\n"
  "\n"
  "run and check options:\n"
  "  --autocast bf16|f16    apply autocast first, as `torch.autocast` with that dtype: matmul,\n"
  "                         linear, sdpa run in it; prod, cross_entropy, nll_loss, mse_loss in\n"
  "                         float32; cat and stack take the widest input dtype (PyTorch's CPU lists)\n"
  "  --float8               then run every linear as fp8 math (torchao's float8 training recipe with\n"
  "                         dynamic per-tensor scales: amax -> scale = 448 / amax -> saturated cast to\n"
  "                         float8_e4m3fn for input and weight -> torch._scaled_mm)\n"
  "\n"
  "exit status: 0 success, 1 error in the program or its inputs, 2 bad usage\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "thunder: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nrun `thunder --help` for usage\n");
  return 2;
}

#define MAX_PROGRAM_BYTES ((size_t)64 << 20) /* a trace text larger than 64 MiB is refused */

/* Reads PROGRAM into a NUL-terminated heap string. Regular files and pipes only (not directories or
 * devices like /dev/zero), at most MAX_PROGRAM_BYTES; a NUL byte inside is an error (the text would
 * be cut there silently). Prints the error and returns NULL on failure. */
static char *read_file(const char *path) {
  struct stat stt;
  if (stat(path, &stt) != 0) {
    fprintf(stderr, "thunder: %s: cannot open: %s\n", path, strerror(errno));
    return NULL;
  }
  if (!S_ISREG(stt.st_mode) && !S_ISFIFO(stt.st_mode)) {
    fprintf(stderr, "thunder: %s: not a regular file\n", path);
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "thunder: %s: cannot open: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  const char *err = buf ? NULL : "out of memory";
  while (!err) {
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
    if (len + 1 < cap) continue;
    if (cap > MAX_PROGRAM_BYTES) {
      err = "larger than 64 MiB; not a trace";
      break;
    }
    char *nb = realloc(buf, cap *= 2);
    if (!nb)
      err = "out of memory";
    else
      buf = nb;
  }
  if (!err && ferror(f)) err = strerror(errno);
  if (!err && memchr(buf, 0, len)) err = "contains a NUL byte; not a text file";
  fclose(f);
  if (err) {
    fprintf(stderr, "thunder: %s: cannot read: %s\n", path, err);
    free(buf);
    return NULL;
  }
  buf[len] = 0;
  return buf;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Prints the library's error for `what` as one line. */
static int fail(const char *what) {
  const char *msg = th_last_error();
  if (what && *what)
    fprintf(stderr, "thunder: %s: %s\n", what, msg);
  else
    fprintf(stderr, "thunder: %s\n", msg);
  return 1;
}

typedef struct {
  const char *name; /* points into argv (NAME=FILE, name_len bytes); NULL: bind all tensors of a
                       .safetensors file by name */
  size_t name_len;
  const char *path;
} binding;

/* ---- random inputs: splitmix64, deterministic per (seed, input index) ------------------------------ */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static th_tensor *random_tensor(const th_value *v, uint64_t seed, int index) {
  th_dtype dt = th_value_dtype(v);
  th_tensor *t = th_tensor_empty(dt, th_value_ndim(v), th_value_shape(v));
  if (!t) return NULL;
  uint64_t s = seed * 1000003ull + (uint64_t)index;
  int64_t n = th_tensor_numel(t);
  unsigned char *p = th_tensor_data(t);
  size_t sz = th_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = splitmix64(&s);
    double u = (double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0; /* [-1, 1) */
    unsigned char *e = p + (size_t)i * sz;
    switch (dt) {
      case TH_BOOL: *e = (unsigned char)(r & 1); break;
      case TH_U8: *e = (uint8_t)(r % 16); break;
      case TH_I8: *(int8_t *)e = (int8_t)(r % 16); break;
      case TH_I16: {
        int16_t x = (int16_t)(r % 16);
        memcpy(e, &x, 2);
        break;
      }
      case TH_I32: {
        int32_t x = (int32_t)(r % 16);
        memcpy(e, &x, 4);
        break;
      }
      case TH_I64: {
        int64_t x = (int64_t)(r % 16);
        memcpy(e, &x, 8);
        break;
      }
      case TH_F16: {
        uint16_t x = th_f32_to_f16((float)u);
        memcpy(e, &x, 2);
        break;
      }
      case TH_BF16: {
        uint16_t x = th_f32_to_bf16((float)u);
        memcpy(e, &x, 2);
        break;
      }
      case TH_F32: {
        float x = (float)u;
        memcpy(e, &x, 4);
        break;
      }
      case TH_F64: memcpy(e, &u, 8); break;
      case TH_F8E4M3FN: *e = th_f32_to_f8e4m3fn((float)u, false); break;
      case TH_F8E5M2: *e = th_f32_to_f8e5m2((float)u, false); break;
      default: break;
    }
  }
  return t;
}

static void format_type(th_dtype dt, int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", th_dtype_short(dt));
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Checks a file tensor against the input's recorded dtype and shape. */
/* True if t has v's dtype and shape; else prints "<what> from <path>: expected ..., got ..." where what
 * is `input 'x'` (what NULL) or the caller's description. */
static bool check_tensor(const char *prog, const th_value *v, const th_tensor *t, const char *path, const char *what) {
  bool ok = th_tensor_dtype(t) == th_value_dtype(v) && th_tensor_ndim(t) == th_value_ndim(v);
  for (int i = 0; ok && i < th_value_ndim(v); i++) ok = th_tensor_shape(t)[i] == th_value_shape(v)[i];
  if (!ok) {
    char want[128], got[128];
    format_type(th_value_dtype(v), th_value_ndim(v), th_value_shape(v), want, sizeof want);
    format_type(th_tensor_dtype(t), th_tensor_ndim(t), th_tensor_shape(t), got, sizeof got);
    if (what)
      fprintf(stderr, "thunder: %s: %s from %s: expected %s, got %s\n", prog, what, path, want, got);
    else
      fprintf(stderr, "thunder: %s: input '%s' from %s: expected %s, got %s\n", prog, th_value_name(v), path, want,
              got);
  }
  return ok;
}

static bool check_input(const char *prog, const th_value *v, const th_tensor *t, const char *path) {
  return check_tensor(prog, v, t, path, NULL);
}

/* The tensors of one .safetensors file, read once. */
typedef struct {
  int n;
  char **names;
  th_tensor **tensors;
} tensor_file;

/* The tensor named `name` in f (borrowed), or NULL. */
static th_tensor *tensor_file_find(const tensor_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->names[i], name)) return f->tensors[i];
  return NULL;
}

static bool name_is(const binding *b, const char *name) {
  return b->name && strlen(name) == b->name_len && !strncmp(b->name, name, b->name_len);
}

/* Binds the inputs named by one --input option; prints the error and returns false on failure. */
static bool bind_one(const char *prog, th_trace *tr, const binding *b, th_tensor **inputs) {
  int nin = th_trace_num_inputs(tr);
  int target = -1;
  for (int i = 0; b->name && i < nin; i++)
    if (name_is(b, th_value_name(th_trace_input(tr, i)))) target = i;
  if (b->name && target < 0) {
    fprintf(stderr, "thunder: %s: --input %.*s=...: the program has no input named '%.*s' (its inputs:", prog,
            (int)b->name_len, b->name, (int)b->name_len, b->name);
    for (int i = 0; i < nin && i < 16; i++)
      fprintf(stderr, "%s %s", i ? "," : "", th_value_name(th_trace_input(tr, i)));
    fprintf(stderr, "%s)\n", nin > 16 ? ", ..." : "");
    return false;
  }
  if (ends_with(b->path, ".npy")) {
    th_tensor *t = NULL;
    if (th_npy_read(b->path, &t) != TH_OK) return fail(prog), false;
    const th_value *v = th_trace_input(tr, target);
    if (!check_input(prog, v, t, b->path)) {
      th_tensor_release(t);
      return false;
    }
    th_tensor_release(inputs[target]);
    inputs[target] = t;
    return true;
  }
  tensor_file f = {0};
  if (th_safetensors_read(b->path, &f.n, &f.names, &f.tensors) != TH_OK) return fail(prog), false;
  bool ok = true;
  int bound = 0;
  for (int i = 0; ok && i < nin; i++) {
    const th_value *v = th_trace_input(tr, i);
    if (b->name && i != target) continue;
    th_tensor *t = tensor_file_find(&f, th_value_name(v));
    if (!t && b->name && f.n == 1) t = f.tensors[0]; /* NAME=FILE holding a single tensor */
    if (!t) {
      if (b->name) {
        fprintf(stderr, "thunder: %s: %s has no tensor named '%s'\n", prog, b->path, th_value_name(v));
        ok = false;
      }
      continue;
    }
    if (!check_input(prog, v, t, b->path)) {
      ok = false;
      break;
    }
    th_tensor_retain(t);
    th_tensor_release(inputs[i]);
    inputs[i] = t;
    bound++;
  }
  if (ok && !bound) {
    fprintf(stderr, "thunder: %s: --input %s: no tensor in it is named like an input of the program\n", prog, b->path);
    ok = false;
  }
  th_safetensors_free(f.n, f.names, f.tensors);
  return ok;
}

static void print_stats(const char *label, const th_tensor *t) {
  if (!t) { /* a None in the returned structure */
    printf("%s: None\n", label);
    return;
  }
  char ty[128];
  format_type(th_tensor_dtype(t), th_tensor_ndim(t), th_tensor_shape(t), ty, sizeof ty);
  int64_t n = th_tensor_numel(t);
  double sum = 0, sumsq = 0, mn = INFINITY, mx = -INFINITY;
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = th_tensor_get_f64(t, i);
    if (!isfinite(x)) {
      nonfinite++;
      continue;
    }
    sum += x;
    sumsq += x * x;
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
  int64_t m = n - nonfinite;
  double mean = m ? sum / (double)m : NAN;
  double var = m ? sumsq / (double)m - mean * mean : NAN;
  printf("%s: %s  mean %.6g  std %.6g  min %.6g  max %.6g", label, ty, mean, var > 0 ? sqrt(var) : 0.0, m ? mn : NAN,
         m ? mx : NAN);
  if (nonfinite) printf("  non-finite %lld", (long long)nonfinite);
  printf("\n  first values:");
  for (int64_t i = 0; i < n && i < 6; i++) printf(" %.6g", th_tensor_get_f64(t, i));
  printf("%s\n", n > 6 ? " ..." : "");
}

/* --autocast VALUE: bf16/bfloat16 or f16/float16; false for anything else. */
static bool parse_autocast(const char *v, th_dtype *dt) {
  if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16"))
    *dt = TH_BF16;
  else if (!strcmp(v, "f16") || !strcmp(v, "float16"))
    *dt = TH_F16;
  else
    return false;
  return true;
}

/* Replaces *tr by its autocast trace; prints the error and returns false on failure. */
static bool apply_autocast(const char *prog, th_trace **tr, th_dtype dt) {
  th_trace *ac = NULL;
  if (th_transform_autocast(*tr, dt, &ac) != TH_OK) return fail(prog), false;
  th_trace_free(*tr);
  *tr = ac;
  return true;
}

/* Replaces *tr by its float8 trace (default options); prints the error and returns false on failure. */
static bool apply_float8(const char *prog, th_trace **tr) {
  th_trace *f8 = NULL;
  if (th_transform_float8(*tr, NULL, &f8) != TH_OK) return fail(prog), false;
  th_trace_free(*tr);
  *tr = f8;
  return true;
}

/* ---- --grad: the forward and backward traces of th_transform_grad ------------------------------------- */

/* check --grad: prints the forward trace, then the backward trace. */
static int check_grad(const char *prog, const th_trace *tr) {
  th_trace *fwd = NULL, *bwd = NULL;
  if (th_transform_grad(tr, NULL, &fwd, &bwd) != TH_OK) return fail(prog);
  char *f = th_trace_print(fwd, -1), *b = th_trace_print(bwd, -1);
  if (f) fputs(f, stdout);
  putchar('\n');
  if (b) fputs(b, stdout);
  free(f);
  free(b);
  /* what rematerialization saves: the same transform without it (layout errors cannot happen here) */
  th_trace *f0 = NULL, *b0 = NULL;
  th_grad_layout L = {0}, L0 = {0};
  th_grad_forward_layout(fwd, &L);
  bool have0 = th_transform_grad_remat(tr, NULL, false, &f0, &b0) == TH_OK && th_grad_forward_layout(f0, &L0) == TH_OK;
  printf("# %s: ok (grad: forward %d top-level bound symbols, backward %d; saved for backward %lld bytes", prog,
         th_trace_num_bsyms(fwd), th_trace_num_bsyms(bwd), (long long)L.saved_bytes);
  if (have0) printf(", %lld without rematerialization", (long long)L0.saved_bytes);
  printf(")\n");
  th_trace_free(f0);
  th_trace_free(b0);
  th_trace_free(fwd);
  th_trace_free(bwd);
  return 0;
}

/* A tensor of ones like v. */
static th_tensor *ones_like_value(const th_value *v) {
  th_dtype dt = th_value_dtype(v);
  th_tensor *t = th_tensor_empty(dt, th_value_ndim(v), th_value_shape(v));
  if (!t) return NULL;
  unsigned char *p = th_tensor_data(t);
  size_t sz = th_dtype_size(dt);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) {
    unsigned char *e = p + (size_t)i * sz;
    switch (dt) {
      case TH_F16: {
        uint16_t x = th_f32_to_f16(1.0f);
        memcpy(e, &x, 2);
        break;
      }
      case TH_BF16: {
        uint16_t x = th_f32_to_bf16(1.0f);
        memcpy(e, &x, 2);
        break;
      }
      case TH_F32: {
        float x = 1.0f;
        memcpy(e, &x, 4);
        break;
      }
      case TH_F64: {
        double x = 1.0;
        memcpy(e, &x, 8);
        break;
      }
      default: memset(e, 0, sz); break; /* integer outputs get no gradient: their cotangent is unused */
    }
  }
  return t;
}

/* Names for write_named: output<i>, and (grad_names) grad_<input name> after the outputs. */
typedef struct {
  const th_trace *tr;
  int noutput;
} grad_names;

static void output_name(int i, char *buf, size_t n, const void *ctx) {
  (void)ctx;
  snprintf(buf, n, "output%d", i);
}

static void grad_name(int i, char *buf, size_t n, const void *ctx) {
  const grad_names *g = ctx;
  if (i < g->noutput)
    snprintf(buf, n, "output%d", i);
  else
    snprintf(buf, n, "grad_%s", th_value_name(th_trace_input(g->tr, i - g->noutput)));
}

/* Writes the non-NULL tensors of ts[0..n) to the .safetensors file path, tensor i named by name(i);
 * prints the error and returns false on failure. */
static bool write_named(const char *prog, const char *path, int n, th_tensor *const *ts,
                        void (*name)(int, char *, size_t, const void *), const void *ctx) {
  char(*names)[256] = calloc((size_t)n + 1, sizeof *names);
  const char **np = calloc((size_t)n + 1, sizeof *np);
  th_tensor **keep = calloc((size_t)n + 1, sizeof *keep);
  int k = 0;
  for (int i = 0; names && np && keep && i < n; i++) {
    if (!ts[i]) continue;
    name(i, names[k], sizeof names[k], ctx);
    np[k] = names[k];
    keep[k++] = ts[i];
  }
  bool alloc = names && np && keep;
  th_status st = alloc ? th_safetensors_write(path, k, np, keep) : TH_ERR_NOMEM;
  free(names);
  free(np);
  free(keep);
  if (st != TH_OK) {
    if (!alloc)
      fprintf(stderr, "thunder: %s: out of memory\n", prog);
    else
      fail(prog);
    return false;
  }
  return true;
}

/* The cotangents of run --grad: ones like each output tensor, or from FILE (.npy: the only output
 * tensor; .safetensors: cotangent0, cotangent1, ... one per output tensor). */
static bool load_cotangents(const char *prog, const th_trace *fwd, const char *path, int n, th_tensor **cots) {
  th_arg r = th_trace_output(fwd);
  const th_arg *flat = &r.u.seq.items[0].u.seq.items[2];
  tensor_file f = {0, NULL, NULL};
  th_tensor *single = NULL;
  bool ok = true;
  if (path && ends_with(path, ".npy")) {
    if (n != 1) {
      fprintf(stderr,
              "thunder: %s: --cotangents %s: the program returns %d tensors; use a .safetensors file with "
              "cotangent0...\n",
              prog, path, n);
      return false;
    }
    if (th_npy_read(path, &single) != TH_OK) return fail(prog), false;
  } else if (path && th_safetensors_read(path, &f.n, &f.names, &f.tensors) != TH_OK) {
    return fail(prog), false;
  }
  for (int i = 0; ok && i < n; i++) {
    const th_value *v = flat->u.seq.items[i].u.value;
    char name[32];
    snprintf(name, sizeof name, "cotangent%d", i);
    if (!path) {
      if (!(cots[i] = ones_like_value(v))) ok = fail(prog) == 0;
      continue;
    }
    th_tensor *t = single ? single : tensor_file_find(&f, name);
    if (!t) {
      fprintf(stderr, "thunder: %s: --cotangents %s: no tensor named '%s'\n", prog, path, name);
      ok = false;
    } else {
      char what[96];
      snprintf(what, sizeof what, "--cotangents: %s (for output %d)", single ? "the cotangent" : name, i);
      if ((ok = check_tensor(prog, v, t, path, what))) {
        th_tensor_retain(t);
        cots[i] = t;
      }
    }
  }
  /* a tensor the program has no output for is a mistake in the file, not something to ignore */
  for (int j = 0; ok && path && !single && j < f.n; j++) {
    int k = -1;
    if (sscanf(f.names[j], "cotangent%d", &k) != 1 || k < 0 || k >= n) {
      fprintf(stderr,
              "thunder: %s: --cotangents %s: unexpected tensor '%s' (the program returns %d tensor%s: "
              "cotangent0..cotangent%d)\n",
              prog, path, f.names[j], n, n == 1 ? "" : "s", n - 1);
      ok = false;
    }
  }
  th_tensor_release(single);
  if (path && !single) th_safetensors_free(f.n, f.names, f.tensors);
  return ok;
}

/* --print-traces: one stage's trace after its `# stage: <prefix><name>` line. */
static void print_stage(const char *prefix, const char *name, const th_trace *t) {
  char *s = th_trace_print(t, -1);
  if (s) printf("# stage: %s%s\n%s", prefix, name, s);
  free(s);
}

/* --print-traces: the stages a program recorded. */
static void print_program_stages(const char *prefix, const th_program *p) {
  for (int i = 0; i < th_program_num_traces(p); i++) {
    const char *name = NULL;
    const th_trace *t = th_program_stage_trace(p, i, &name);
    print_stage(prefix, name, t);
  }
}

/* run --grad: forward, then backward with the cotangents; prints (and writes) outputs and gradients. */
static int run_grad(const char *prog, const th_trace *tr, th_tensor **inputs, const th_compile_options *opts,
                    const char *cot_path, const char *output, bool quiet, bool print_trace, bool print_traces) {
  int rc = 1, nf = 0, nb = 0, nin = th_trace_num_inputs(tr), ns = 0, ncot = 0;
  th_trace *dce = NULL, *cse = NULL, *fwd = NULL, *bwd = NULL;
  th_program *pf = NULL, *pb = NULL;
  th_tensor **fo = NULL, **go = NULL, **bin = NULL;
  th_grad_layout L;
  /* verify, DCE and CSE before the split; each half from the execution pass on */
  th_compile_options split = *opts;
  split.skip_stages |= TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE;
  if (th_compile_prepare(tr, opts, &dce, &cse) != TH_OK || th_transform_grad(cse, NULL, &fwd, &bwd) != TH_OK ||
      th_grad_forward_layout(fwd, &L) != TH_OK || th_program_compile(fwd, &split, &pf) != TH_OK ||
      th_program_compile(bwd, &split, &pb) != TH_OK) {
    fail(prog);
    goto done;
  }
  if (!quiet) {
    char *f = th_trace_print(fwd, -1), *b = th_trace_print(bwd, -1);
    if (f && b) printf("%s\n%s", f, b);
    free(f);
    free(b);
  }
  if (print_trace) {
    char *f = th_trace_print(th_program_trace(pf), -1), *b = th_trace_print(th_program_trace(pb), -1);
    if (f && b) printf("%s# the execution traces: what the executors run\n%s\n%s", quiet ? "" : "\n", f, b);
    free(f);
    free(b);
  }
  if (print_traces) {
    if (!quiet || print_trace) printf("\n");
    print_stage("", "dce", dce);
    print_stage("", "cse", cse);
    print_stage("", "grad_forward", fwd);
    print_program_stages("forward ", pf);
    print_stage("", "grad_backward", bwd);
    print_program_stages("backward ", pb);
  }
  if (th_program_run(pf, nin, inputs, &nf, &fo) != TH_OK) {
    fail(prog);
    goto done;
  }
  ns = L.nsaved_tensors + L.nsaved_other;
  ncot = L.nflat_output;
  int nbin = ns + ncot;
  bin = calloc((size_t)nbin + 1, sizeof *bin);
  if (!bin) goto done;
  for (int i = 0; i < ns; i++) bin[i] = fo[L.noutput + L.nflat_args + L.nflat_output + i];
  if (!load_cotangents(prog, fwd, cot_path, L.nflat_output, bin + ns)) goto done;
  if (th_program_run(pb, nbin, bin, &nb, &go) != TH_OK) {
    fail(prog);
    goto done;
  }
  if (!quiet) {
    printf("\n# outputs of %s\n", prog);
    for (int i = 0; i < L.noutput; i++) {
      char label[32];
      snprintf(label, sizeof label, "output%d", i);
      print_stats(label, fo[i]);
    }
    printf("\n# gradients (cotangents: %s)\n", cot_path ? cot_path : "ones");
    for (int i = 0; i < nb; i++) {
      char label[256];
      snprintf(label, sizeof label, "grad_%s", th_value_name(th_trace_input(tr, i)));
      print_stats(label, go[i]);
    }
  }
  if (output) { /* outputs as output<i>, gradients as grad_<input> (None skipped) */
    th_tensor **ts = calloc((size_t)(L.noutput + nb) + 1, sizeof *ts);
    for (int i = 0; ts && i < L.noutput + nb; i++) ts[i] = i < L.noutput ? fo[i] : go[i - L.noutput];
    grad_names gn = {tr, L.noutput};
    bool ok = ts && write_named(prog, output, L.noutput + nb, ts, grad_name, &gn);
    if (!ts) fprintf(stderr, "thunder: %s: out of memory\n", prog);
    free(ts);
    if (!ok) goto done;
  }
  rc = 0;
done:
  for (int i = 0; bin && i < ncot; i++) th_tensor_release(bin[ns + i]); /* the cotangents (NULL: not loaded) */
  free(bin);
  for (int i = 0; i < nf; i++) th_tensor_release(fo[i]);
  for (int i = 0; i < nb; i++) th_tensor_release(go[i]);
  free(fo);
  free(go);
  th_program_free(pf);
  th_program_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(dce);
  th_trace_free(cse);
  return rc;
}

static int cmd_check(int argc, char **argv) {
  const char *prog = NULL;
  bool grad = false;
  bool autocast = false, float8 = false;
  th_dtype ac_dtype = TH_BF16;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--autocast")) {
      if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) return usage_error("%s needs a value", a);
      if (autocast) return usage_error("--autocast given twice%s", "");
      if (!parse_autocast(argv[++i], &ac_dtype))
        return usage_error("--autocast expects bf16 or f16, got '%s'", argv[i]);
      autocast = true;
    } else if (!strcmp(a, "--float8")) {
      if (float8) return usage_error("--float8 given twice%s", "");
      float8 = true;
    } else if (!strcmp(a, "--grad")) {
      grad = true;
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s'", a);
    } else if (!prog) {
      prog = a;
    } else {
      return usage_error("check takes exactly one PROGRAM%s", "");
    }
  }
  if (!prog) return usage_error("check takes exactly one PROGRAM%s", "");
  char *text = read_file(prog);
  if (!text) return 1;
  th_trace *tr = NULL;
  th_status st = th_trace_parse(text, prog, &tr);
  free(text);
  if (st != TH_OK) return fail("");
  st = th_trace_verify(tr);
  if (st == TH_OK && autocast) {
    if (!apply_autocast(prog, &tr, ac_dtype)) {
      th_trace_free(tr);
      return 1;
    }
    st = th_trace_verify(tr);
  }
  if (st == TH_OK && float8) {
    if (!apply_float8(prog, &tr)) {
      th_trace_free(tr);
      return 1;
    }
    st = th_trace_verify(tr);
  }
  if (st != TH_OK) {
    th_trace_free(tr);
    return fail(prog);
  }
  if (grad) {
    int grc = check_grad(prog, tr);
    th_trace_free(tr);
    return grc;
  }
  char *s = th_trace_print(tr, -1);
  if (s) fputs(s, stdout);
  free(s);
  printf("# %s: ok (%d inputs, %d top-level bound symbols)\n", prog, th_trace_num_inputs(tr), th_trace_num_bsyms(tr));
  th_trace_free(tr);
  return 0;
}

static int cmd_run(int argc, char **argv) {
  const char *prog = NULL, *output = NULL, *executors = NULL, *cotangents = NULL;
  bool grad = false;
  bool has_seed = false, print_trace = false, print_traces = false, quiet = false, device_cpu = false;
  bool autocast = false, float8 = false;
  th_dtype ac_dtype = TH_BF16;
  uint64_t seed = 0;
  binding binds[MAX_BINDINGS];
  int nbinds = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    bool needs_value = !strcmp(a, "--input") || !strcmp(a, "--random-inputs") || !strcmp(a, "--device") ||
                       !strcmp(a, "--output") || !strcmp(a, "--executors") || !strcmp(a, "--cotangents") ||
                       !strcmp(a, "--autocast");
    if (needs_value && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) return usage_error("%s needs a value", a);
    if (!strcmp(a, "--input")) {
      const char *v = argv[++i];
      const char *eq = strchr(v, '=');
      if (nbinds == MAX_BINDINGS) return usage_error("too many --input options%s", "");
      if (eq) {
        if (eq == v || !eq[1]) return usage_error("--input expects NAME=FILE, got '%s'", v);
        binds[nbinds] = (binding){v, (size_t)(eq - v), eq + 1};
        for (int k = 0; k < nbinds; k++)
          if (binds[k].name && binds[k].name_len == binds[nbinds].name_len &&
              !strncmp(binds[k].name, v, binds[k].name_len))
            return usage_error("input '%s' is bound twice", v);
        nbinds++;
      } else if (ends_with(v, ".safetensors")) {
        binds[nbinds++] = (binding){NULL, 0, v};
      } else {
        return usage_error("--input expects NAME=FILE or FILE.safetensors, got '%s'", v);
      }
    } else if (!strcmp(a, "--random-inputs")) {
      const char *v = argv[++i];
      char *end;
      errno = 0;
      unsigned long long sd = strtoull(v, &end, 10);
      if (has_seed) return usage_error("--random-inputs given twice%s", "");
      if (!*v || strspn(v, "0123456789") != strlen(v) || *end || errno)
        return usage_error("--random-inputs expects a non-negative integer seed, got '%s'", v);
      seed = sd;
      has_seed = true;
    } else if (!strcmp(a, "--device")) {
      if (strcmp(argv[++i], "cpu")) return usage_error("--device: only 'cpu' is available, got '%s'", argv[i]);
      device_cpu = true;
    } else if (!strcmp(a, "--output")) {
      if (output) return usage_error("--output given twice%s", "");
      output = argv[++i];
      if (!ends_with(output, ".npy") && !ends_with(output, ".safetensors"))
        return usage_error("--output must end in .npy or .safetensors, got '%s'", output);
    } else if (!strcmp(a, "--executors")) {
      executors = argv[++i];
      if (!*executors || strspn(executors, ",") == strlen(executors) || strstr(executors, ",,"))
        return usage_error("--executors expects a comma-separated list of executor names, got '%s'", executors);
    } else if (!strcmp(a, "--autocast")) {
      if (autocast) return usage_error("--autocast given twice%s", "");
      if (!parse_autocast(argv[++i], &ac_dtype))
        return usage_error("--autocast expects bf16 or f16, got '%s'", argv[i]);
      autocast = true;
    } else if (!strcmp(a, "--float8")) {
      if (float8) return usage_error("--float8 given twice%s", "");
      float8 = true;
    } else if (!strcmp(a, "--grad")) {
      grad = true;
    } else if (!strcmp(a, "--cotangents")) {
      if (cotangents) return usage_error("--cotangents given twice%s", "");
      cotangents = argv[++i];
      if (!ends_with(cotangents, ".npy") && !ends_with(cotangents, ".safetensors"))
        return usage_error("--cotangents must end in .npy or .safetensors, got '%s'", cotangents);
    } else if (!strcmp(a, "--print-trace")) {
      print_trace = true;
    } else if (!strcmp(a, "--print-traces")) {
      print_traces = true;
    } else if (!strcmp(a, "--quiet")) {
      quiet = true;
    } else if (a[0] == '-') {
      return usage_error("unknown option '%s'", a);
    } else if (!prog) {
      prog = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
  }
  if (!prog) return usage_error("run: missing PROGRAM%s", "");
  if (cotangents && !grad) return usage_error("--cotangents needs --grad%s", "");
  if (grad && output && !ends_with(output, ".safetensors"))
    return usage_error("with --grad, --output writes outputs and gradients: give a .safetensors file, not '%s'",
                       output);

  int rc = 1;
  th_trace *tr = NULL;
  th_program *p = NULL;
  th_tensor **inputs = NULL;
  th_tensor **outs = NULL;
  int nout = 0, nin = 0;
  const char *exec_names[16];
  char *exec_buf = NULL;
  int nexec = 0;

  char *text = read_file(prog);
  if (!text) goto done;
  th_status st = th_trace_parse(text, prog, &tr);
  free(text);
  if (st != TH_OK) {
    fail("");
    goto done;
  }
  if (autocast && !apply_autocast(prog, &tr, ac_dtype)) goto done;
  if (float8 && !apply_float8(prog, &tr)) goto done;
  inputs = calloc((size_t)th_trace_num_inputs(tr) + 1, sizeof *inputs);
  if (!inputs) {
    fprintf(stderr, "thunder: %s: out of memory\n", prog);
    goto done;
  }
  nin = th_trace_num_inputs(tr);
  /* bind inputs, in the order given (a later option overrides an earlier one for the same input) */
  for (int b = 0; b < nbinds; b++)
    if (!bind_one(prog, tr, &binds[b], inputs)) goto done;
  for (int i = 0; i < nin; i++) {
    if (inputs[i]) continue;
    const th_value *v = th_trace_input(tr, i);
    if (!has_seed) {
      fprintf(stderr, "thunder: %s: input '%s' is not bound: pass --input %s=FILE or --random-inputs SEED\n", prog,
              th_value_name(v), th_value_name(v));
      goto done;
    }
    inputs[i] = random_tensor(v, seed, i);
    if (!inputs[i]) {
      fail(prog);
      goto done;
    }
  }

  th_compile_options opts = {0};
  opts.seed = has_seed ? seed : 0;
  if (device_cpu) {
    opts.has_device_override = true;
    opts.device_override = (th_device){TH_CPU, 0};
  }
  if (executors) {
    exec_buf = strdup(executors);
    for (char *tok = strtok(exec_buf, ","); tok && nexec < 16; tok = strtok(NULL, ",")) exec_names[nexec++] = tok;
    opts.executors = exec_names;
    opts.nexecutors = nexec;
  }
  if (grad) {
    rc = run_grad(prog, tr, inputs, &opts, cotangents, output, quiet, print_trace, print_traces);
    goto done;
  }
  if (th_program_compile(tr, &opts, &p) != TH_OK) {
    fail(prog);
    goto done;
  }
  if (!quiet) {
    char *s = th_trace_print(tr, -1);
    if (s) fputs(s, stdout);
    free(s);
  }
  if (print_trace) {
    char *s = th_trace_print(th_program_trace(p), -1);
    if (s) printf("%s# the execution trace: what the executors run\n%s", quiet ? "" : "\n", s);
    free(s);
  }
  if (print_traces) {
    if (!quiet || print_trace) printf("\n");
    print_program_stages("", p);
  }
  if (th_program_run(p, nin, inputs, &nout, &outs) != TH_OK) {
    fail(prog);
    goto done;
  }
  if (!quiet) {
    printf("\n# outputs of %s\n", prog);
    for (int i = 0; i < nout; i++) {
      char label[32];
      snprintf(label, sizeof label, "output%d", i);
      print_stats(label, outs[i]);
    }
  }
  if (output) {
    int ntensors = 0;
    for (int i = 0; i < nout; i++) ntensors += outs[i] != NULL;
    if (ntensors == 0) {
      fprintf(stderr, "thunder: %s: --output %s: the program returns no tensor\n", prog, output);
      goto done;
    }
    if (ends_with(output, ".npy")) {
      if (nout != 1) {
        fprintf(stderr, "thunder: %s: --output %s: the program has %d outputs; use a .safetensors file\n", prog, output,
                nout);
        goto done;
      }
      if (th_npy_write(output, outs[0]) != TH_OK) {
        fail(prog);
        goto done;
      }
    } else {
      /* tensors keep their position in the name (output0, output2, ...); None entries are skipped */
      if (!write_named(prog, output, nout, outs, output_name, NULL)) goto done;
    }
  }
  rc = 0;
done:
  for (int i = 0; i < nout; i++) th_tensor_release(outs[i]);
  free(outs);
  for (int i = 0; i < nin; i++) th_tensor_release(inputs[i]);
  free(inputs);
  free(exec_buf);
  th_program_free(p);
  th_trace_free(tr);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (!strcmp(argv[1], "check")) return cmd_check(argc - 2, argv + 2);
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", argv[1]);
}
