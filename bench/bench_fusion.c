/* bench_fusion.c — the fusion executor on memory-bound workloads, next to the unfused
 * executors and the machine's bandwidth floor, measured side by side in one run.
 *
 * Workloads (each written as trace text with ltorch-level ops, in f32 and bf16):
 *   gelu_tanh   gelu(x * 2 + 1, approximate='tanh'), x [16777216]
 *   bias_gelu   gelu(x + b, approximate='tanh'), x [8192, 3072], b [3072]
 *   softmax     softmax(x, -1), x [8192, 1024]
 *   layer_norm  layer_norm(x, (1024,), w, b, 1e-5), x [8192, 1024]
 *   rms_norm    x * rsqrt(mean(x * x, -1, keepdim=True) + 1e-6) * w, written out, x [8192, 1024]
 *
 * Rows per workload and dtype, interleaved (one of each per round, after one warm-up round):
 *   floor (copy)    an OpenMP copy of x into a buffer of the same size with ordinary stores (read once,
 *                   write once: the bytes any kernel of the workload must move, at the rate a STREAM copy
 *                   measures; the floor the fusion targets use), buffers allocated and touched beforehand
 *   floor (stream)  the same copy with non-temporal stores (no read for ownership of the written lines:
 *                   the machine's physical floor, below the copy floor)
 *   fused    th_program_run with executors --fused (default fuser,blas,eager)
 *   unfused  th_program_run with executors --unfused (default blas,eager: the eager executor's kernels)
 *   (either LIST may be "default": the library's default executors)
 * Each row: min / median / max ms, GB/s effective (input + output bytes / median), ratios to both floors
 * and unfused/this (medians), the number of fusion regions in the program, and for the fused row the
 * largest |fused - unfused| over the output (a sanity check, not a test).
 * Then compile-time rows for the fused executors (bench_util.h, bu_compile_rows): cold (a new process
 * with XDG_CACHE_HOME at a fresh empty directory), warm in a new process, warm in this process.
 * Lines starting with "@" repeat the figures for bench/run_fusion.sh.
 *
 * Usage: bench_fusion [--rounds N=10] [--only name,name] [--dtypes f32,bf16] [--compile-reps N=3]
 *                     [--fused LIST] [--unfused LIST]
 * Threads: OpenMP's default (set OMP_NUM_THREADS=2). Internal: bench_fusion --probe NAME DTYPE LIST
 * (the compile-time child). */
#include "bench_util.h"

typedef struct {
  const char *name;
  int ndim;
  int64_t shape[2];
  int nparams; /* vectors of the last dim: bias / weight */
  const char *params[2];
  float lo, hi;     /* input value range */
  const char *body; /* trace lines after the signature and the type comments */
} workload;

static const workload WORKLOADS[] = {
  {"gelu_tanh",
   1,
   {16777216, 0},
   0,
   {NULL, NULL},
   -2.0f,
   2.0f,
   "  t0 = ltorch.mul(x, 2.0)\n"
   "  t1 = ltorch.add(t0, 1.0, alpha=None)\n"
   "  t2 = ltorch.gelu(t1, approximate='tanh')\n"
   "  return t2\n"},
  {"bias_gelu",
   2,
   {8192, 3072},
   1,
   {"b", NULL},
   -3.0f,
   3.0f,
   "  t0 = ltorch.add(x, b, alpha=None)\n"
   "  t1 = ltorch.gelu(t0, approximate='tanh')\n"
   "  return t1\n"},
  {"softmax",
   2,
   {8192, 1024},
   0,
   {NULL, NULL},
   -4.0f,
   4.0f,
   "  t0 = ltorch.softmax(x, -1)\n"
   "  return t0\n"},
  {"layer_norm",
   2,
   {8192, 1024},
   2,
   {"w", "b"},
   -2.0f,
   2.0f,
   "  t0 = ltorch.layer_norm(x, (1024,), w, b, 1e-05)\n"
   "  return t0\n"},
  {"rms_norm",
   2,
   {8192, 1024},
   1,
   {"w", NULL},
   -2.0f,
   2.0f,
   "  t0 = ltorch.mul(x, x)\n"
   "  t1 = ltorch.mean(t0, -1, True)\n"
   "  t2 = ltorch.add(t1, 1e-06, alpha=None)\n"
   "  t3 = ltorch.rsqrt(t2)\n"
   "  t4 = ltorch.mul(x, t3)\n"
   "  t5 = ltorch.mul(t4, w)\n"
   "  return t5\n"},
};
#define NWORKLOADS ((int)(sizeof WORKLOADS / sizeof WORKLOADS[0]))

static const workload *find_workload(const char *name) {
  for (int i = 0; i < NWORKLOADS; i++)
    if (!strcmp(WORKLOADS[i].name, name)) return &WORKLOADS[i];
  return NULL;
}

/* The trace text of w in dtype dt (a malloc'd string). */
static char *gen_text(const workload *w, const char *dt) {
  size_t cap = 4096;
  char *s = malloc(cap);
  int64_t last = w->shape[w->ndim - 1];
  int n = snprintf(s, cap, "def computation(x%s%s%s%s):\n", w->nparams > 0 ? ", " : "",
                   w->nparams > 0 ? w->params[0] : "", w->nparams > 1 ? ", " : "", w->nparams > 1 ? w->params[1] : "");
  if (w->ndim == 1)
    n += snprintf(s + n, cap - (size_t)n, "  # x: \"cpu %s[%lld]\"\n", dt, (long long)w->shape[0]);
  else
    n += snprintf(s + n, cap - (size_t)n, "  # x: \"cpu %s[%lld, %lld]\"\n", dt, (long long)w->shape[0],
                  (long long)w->shape[1]);
  for (int i = 0; i < w->nparams; i++)
    n += snprintf(s + n, cap - (size_t)n, "  # %s: \"cpu %s[%lld]\"\n", w->params[i], dt, (long long)last);
  snprintf(s + n, cap - (size_t)n, "%s", w->body);
  return s;
}

/* Inputs of w's trace, filled deterministically (weights near 1, biases small). */
static int make_inputs(const th_trace *tr, const workload *w, th_tensor **in) {
  int nin = th_trace_num_inputs(tr);
  for (int i = 0; i < nin; i++) {
    const th_value *v = th_trace_input(tr, i);
    in[i] = th_tensor_empty(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
    if (i == 0)
      bu_fill(in[i], 12345u, w->lo, w->hi);
    else if (!strcmp(th_value_name(v), "w"))
      bu_fill(in[i], 777u + (unsigned)i, 0.5f, 1.5f);
    else
      bu_fill(in[i], 999u + (unsigned)i, -0.5f, 0.5f);
  }
  return nin;
}

static th_status run_once(th_program *p, int nin, th_tensor **in, double *ms, th_tensor **keep) {
  int nout = 0;
  th_tensor **out = NULL;
  double t0 = bu_now_ms();
  th_status st = th_program_run(p, nin, in, &nout, &out);
  *ms = bu_now_ms() - t0;
  if (st != TH_OK) return st;
  for (int i = 0; i < nout; i++) {
    if (i == 0 && keep)
      *keep = out[0];
    else
      th_tensor_release(out[i]);
  }
  free(out);
  return TH_OK;
}

typedef struct {
  int rounds, compile_reps;
  bu_execs fused, unfused;
  char fused_label[128], unfused_label[128];
} options;

static void bench_one(const workload *w, const char *dt, const options *o) {
  char *text = gen_text(w, dt);
  th_trace *tr = NULL;
  if (th_trace_parse(text, w->name, &tr) != TH_OK) {
    printf("| %s | %s | (trace does not parse: %s) |\n", w->name, dt, th_last_error());
    free(text);
    return;
  }
  th_program *p[2] = {NULL, NULL};
  const bu_execs *ex[2] = {&o->fused, &o->unfused};
  const char *kind[2] = {"fused", "unfused"};
  for (int k = 0; k < 2; k++)
    if (bu_compile(tr, ex[k], &p[k]) != TH_OK) {
      printf("| %s | %s | %s | (compile failed: %s) |\n", w->name, dt, kind[k], th_last_error());
      p[k] = NULL;
    }
  th_tensor *in[4];
  int nin = make_inputs(tr, w, in);
  int64_t bytes = 0;
  for (int i = 0; i < nin; i++) bytes += th_tensor_numel(in[i]) * (int64_t)th_dtype_size(th_tensor_dtype(in[i]));
  size_t xbytes = (size_t)th_tensor_numel(in[0]) * th_dtype_size(th_tensor_dtype(in[0]));
  bytes += (int64_t)xbytes; /* the output: x's shape and dtype */
  char *fsrc = malloc(xbytes), *fdst = malloc(xbytes);
  if (!fsrc || !fdst) {
    fprintf(stderr, "bench_fusion: out of memory for the floor's buffers (%zu bytes each)\n", xbytes);
    exit(1);
  }
  memcpy(fsrc, th_tensor_data(in[0]), xbytes);
  memset(fdst, 1, xbytes);
  double *ms[4]; /* floor (copy), floor (stream), fused, unfused */
  for (int k = 0; k < 4; k++) ms[k] = calloc((size_t)o->rounds, sizeof(double));
  double maxdiff = -1;
  bool failed[2] = {p[0] == NULL, p[1] == NULL};
  for (int r = -1; r < o->rounds; r++) { /* round -1 warms up (and compares the outputs) */
    for (int f = 0; f < 2; f++) {
      double t0 = bu_now_ms();
      if (f == 0)
        bu_copy(fdst, fsrc, xbytes);
      else
        bu_copy_stream(fdst, fsrc, xbytes);
      double tf = bu_now_ms() - t0;
      if (r >= 0) ms[f][r] = tf;
    }
    th_tensor *keep[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
      if (failed[k]) continue;
      double t;
      if (run_once(p[k], nin, in, &t, r < 0 ? &keep[k] : NULL) != TH_OK) {
        printf("| %s | %s | %s | (run failed: %s) |\n", w->name, dt, kind[k], th_last_error());
        failed[k] = true;
        continue;
      }
      if (r >= 0) ms[k + 2][r] = t;
    }
    if (keep[0] && keep[1]) maxdiff = bu_max_abs_diff(keep[0], keep[1]);
    th_tensor_release(keep[0]);
    th_tensor_release(keep[1]);
  }
  bu_stats s[4];
  for (int k = 0; k < 4; k++) s[k] = bu_stats_of(ms[k], o->rounds);
  const char *labels[4] = {"floor (copy)", "floor (stream)", o->fused_label, o->unfused_label};
  const char *kinds[4] = {"floor", "floor_stream", "fused", "unfused"};
  for (int k = 0; k < 4; k++) {
    if (k > 1 && failed[k - 2]) continue;
    double gbs = (double)bytes / (s[k].med * 1e6);
    char ratio_unf[32] = "", diff[32] = "", regions[16] = "";
    if (!failed[1]) snprintf(ratio_unf, sizeof ratio_unf, "%.2fx", s[3].med / s[k].med);
    if (k == 2 && maxdiff >= 0) snprintf(diff, sizeof diff, "%.3g", maxdiff);
    if (k > 1) snprintf(regions, sizeof regions, "%d", bu_regions(p[k - 2]));
    printf("| %s | %s | %s | %s | %.2f / %.2f / %.2f | %.1f | %.2fx | %.2fx | %s | %s |\n", w->name, dt, labels[k],
           regions, s[k].min, s[k].med, s[k].max, gbs, s[k].med / s[0].med, s[k].med / s[1].med, ratio_unf, diff);
    bu_emit("@row %s %s %s %.4f %.4f %.4f %lld %s", w->name, dt, kinds[k], s[k].min, s[k].med, s[k].max,
            (long long)bytes, regions[0] ? regions : "-");
  }
  fflush(stdout);
  for (int k = 0; k < 4; k++) free(ms[k]);
  free(fsrc);
  free(fdst);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_program_free(p[0]);
  th_program_free(p[1]);
  th_trace_free(tr);
  free(text);
}

/* Compile-time rows of w in dt for the fused executors (cold / warm, bench_util.h). */
static void compile_one(const workload *w, const char *dt, const options *o) {
  char *text = gen_text(w, dt);
  th_trace *tr = NULL;
  if (th_trace_parse(text, w->name, &tr) != TH_OK) {
    free(text);
    return;
  }
  char *args[] = {"bench_fusion", "--probe", (char *)w->name, (char *)dt, (char *)o->fused_label, NULL};
  bu_compile_rows(w->name, dt, o->fused_label, args, tr, &o->fused, o->compile_reps);
  fflush(stdout);
  th_trace_free(tr);
  free(text);
}

static bool selected(const workload *w, const char *only) {
  if (!only) return true;
  char buf[256], key[64];
  snprintf(buf, sizeof buf, ",%s,", only);
  snprintf(key, sizeof key, ",%s,", w->name);
  return strstr(buf, key) != NULL;
}

static int probe(const char *name, const char *dt, const char *list) {
  const workload *w = find_workload(name);
  bu_execs e;
  if (!w || !bu_execs_parse(list, &e)) return 2;
  char *text = gen_text(w, dt);
  th_trace *tr = NULL;
  if (th_trace_parse(text, name, &tr) != TH_OK) {
    fprintf(stderr, "probe: %s\n", th_last_error());
    free(text);
    return 1;
  }
  th_tensor *in[4];
  int nin = make_inputs(tr, w, in);
  int rc = bu_probe_child(tr, &e, nin, in);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  free(text);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_fusion [--rounds N] [--only name,name] [--dtypes f32,bf16] [--compile-reps N] "
                  "[--fused LIST] [--unfused LIST]\n  workloads:");
  for (int i = 0; i < NWORKLOADS; i++) fprintf(stderr, " %s", WORKLOADS[i].name);
  fprintf(stderr, "\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--probe")) return probe(argv[2], argv[3], argv[4]);
  options o;
  memset(&o, 0, sizeof o);
  o.rounds = 10;
  o.compile_reps = 3;
  const char *fused = "fuser,blas,eager", *unfused = "blas,eager", *only = NULL, *dtypes = "f32,bf16";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (!strcmp(a, "--rounds"))
      o.rounds = atoi(v);
    else if (!strcmp(a, "--compile-reps"))
      o.compile_reps = atoi(v);
    else if (!strcmp(a, "--only"))
      only = v;
    else if (!strcmp(a, "--dtypes"))
      dtypes = v;
    else if (!strcmp(a, "--fused"))
      fused = v;
    else if (!strcmp(a, "--unfused"))
      unfused = v;
    else
      return usage();
    i++;
  }
  if (o.rounds < 1 || o.rounds > 10000 || o.compile_reps < 0 || o.compile_reps > 100) return usage();
  if (!bu_execs_parse(fused, &o.fused) || !bu_execs_parse(unfused, &o.unfused)) return usage();
  bu_execs_label(&o.fused, o.fused_label, sizeof o.fused_label);
  bu_execs_label(&o.unfused, o.unfused_label, sizeof o.unfused_label);
  if (only) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", only);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
      if (!find_workload(t)) return usage();
  }
  printf("bench_fusion: %d rounds, %d OpenMP threads, compile reps %d\n\n", o.rounds, omp_get_max_threads(),
         o.compile_reps);
  printf("| workload | dtype | row (executors) | fusion regions | min / median / max ms | GB/s | /floor (copy) "
         "| /floor (stream) | unfused/this | max abs diff vs unfused |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int pass = 0; pass < 2; pass++) { /* timings, then compile times */
    if (pass == 1) {
      if (o.compile_reps == 0) break;
      printf("\n");
      bu_compile_header();
    }
    char dbuf[64];
    snprintf(dbuf, sizeof dbuf, "%s", dtypes);
    char *dsave = NULL;
    for (char *dt = strtok_r(dbuf, ",", &dsave); dt; dt = strtok_r(NULL, ",", &dsave)) {
      if (strcmp(dt, "f32") && strcmp(dt, "bf16")) return usage();
      for (int i = 0; i < NWORKLOADS; i++) {
        if (!selected(&WORKLOADS[i], only)) continue;
        if (pass == 0)
          bench_one(&WORKLOADS[i], dt, &o);
        else
          compile_one(&WORKLOADS[i], dt, &o);
      }
    }
  }
  bu_emit_flush();
  return 0;
}
