/* bench_gpt2.c — time per forward of a GPT-2 block through thunder-c (parse -> compile -> run), with
 * and without the fusion executor, next to the GEMM floor, side by side in one run.
 *
 * Usage: bench_gpt2 [B T C H] [f32|bf16] [iters] [--executors LIST]... [--compile-reps N] [--no-floor]
 *   defaults: 8 256 768 12 f32 10, --executors fuser,blas,eager --executors blas,eager, --compile-reps 0
 * The block (pre-norm layer norm, causal self-attention through scaled_dot_product_attention, tanh-GELU
 * MLP, residuals) is generated as trace text with the requested sizes and dtype (bf16: every input and
 * weight bf16; the torch-level ops compute elementwise math in f32 and round, matmuls run through the
 * BLAS executor), parsed, and compiled once per executor list. Rows, interleaved (one of each per
 * iteration, after one warm-up iteration):
 *   GEMM peak   `ltorch.linear` of the MLP's first matmul ([B*T, C] x [4C, C]^T, no bias) through the BLAS
 *               executor (oneDNN; bench_linear shows a program runs at the raw primitive's speed): its
 *               GFLOP/s is the library's measured GEMM peak at this size
 *   GEMM floor  the block's FLOPs (the four linears and the two attention matmuls) at that peak
 *   one row per --executors list ("default" = the library's default list): min / median / max ms,
 *               GFLOP/s, /floor, and reference/this where the reference is the first explicit list
 *               without "fuser" (the unfused executors); the largest
 *               |output - reference output| is printed as a sanity check (not a test)
 * With --compile-reps N > 0: compile-time rows per list (bench_util.h: cold in a new process with an
 * empty XDG_CACHE_HOME, warm in a new process, warm in this process). "@" lines at the end repeat the
 * figures for bench/run_fusion.sh. Threads: OpenMP's default (set OMP_NUM_THREADS). Internal:
 * bench_gpt2 --probe B T C H DTYPE LIST (the compile-time child). */
#include "bench_util.h"

static char *gen(int B, int T, int C, int H, const char *dt) {
  size_t cap = 16384;
  char *s = malloc(cap);
  int hs = C / H;
  snprintf(
    s, cap,
    "def computation(x, ln1w, ln1b, wqkv, bqkv, wproj, bproj, ln2w, ln2b, wfc, bfc, wout, bout):\n"
    "  # x: \"cpu %s[%d, %d, %d]\"\n  # ln1w: \"cpu %s[%d]\"\n  # ln1b: \"cpu %s[%d]\"\n"
    "  # wqkv: \"cpu %s[%d, %d]\"\n  # bqkv: \"cpu %s[%d]\"\n  # wproj: \"cpu %s[%d, %d]\"\n"
    "  # bproj: \"cpu %s[%d]\"\n  # ln2w: \"cpu %s[%d]\"\n  # ln2b: \"cpu %s[%d]\"\n"
    "  # wfc: \"cpu %s[%d, %d]\"\n  # bfc: \"cpu %s[%d]\"\n  # wout: \"cpu %s[%d, %d]\"\n  # bout: \"cpu %s[%d]\"\n"
    "  h = ltorch.layer_norm(x, (%d,), ln1w, ln1b, 1e-05)\n"
    "  qkv = ltorch.linear(h, wqkv, bqkv)\n"
    "  (q, k, v) = ltorch.split(qkv, %d, 2)\n"
    "  q4 = ltorch.reshape(q, (%d, %d, %d, %d))\n  k4 = ltorch.reshape(k, (%d, %d, %d, %d))\n"
    "  v4 = ltorch.reshape(v, (%d, %d, %d, %d))\n"
    "  qh = ltorch.transpose(q4, 1, 2)\n  kh = ltorch.transpose(k4, 1, 2)\n  vh = ltorch.transpose(v4, 1, 2)\n"
    "  y = ltorch.scaled_dot_product_attention(qh, kh, vh, None, 0.0, True, scale=None)\n"
    "  yt = ltorch.transpose(y, 1, 2)\n  yc = ltorch.reshape(yt, (%d, %d, %d))\n"
    "  attn = ltorch.linear(yc, wproj, bproj)\n  x1 = ltorch.add(x, attn, alpha=None)\n"
    "  h2 = ltorch.layer_norm(x1, (%d,), ln2w, ln2b, 1e-05)\n  fc = ltorch.linear(h2, wfc, bfc)\n"
    "  g = ltorch.gelu(fc, approximate='tanh')\n  mlp = ltorch.linear(g, wout, bout)\n"
    "  out = ltorch.add(x1, mlp, alpha=None)\n  return out\n",
    dt, B, T, C, dt, C, dt, C, dt, 3 * C, C, dt, 3 * C, dt, C, C, dt, C, dt, C, dt, C, dt, 4 * C, C, dt, 4 * C, dt, C,
    4 * C, dt, C, C, C, B, T, H, hs, B, T, H, hs, B, T, H, hs, B, T, C, C);
  return s;
}

/* Inputs of the block's trace: x in [-1, 1), layer-norm weights in [0.5, 1.5), the rest in [-0.05, 0.05). */
static int make_inputs(const th_trace *tr, th_tensor **in) {
  int nin = th_trace_num_inputs(tr);
  for (int i = 0; i < nin; i++) {
    const th_value *v = th_trace_input(tr, i);
    const char *name = th_value_name(v);
    in[i] = th_tensor_empty(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
    if (!strcmp(name, "x"))
      bu_fill(in[i], 4242u, -1.0f, 1.0f);
    else if (!strcmp(name, "ln1w") || !strcmp(name, "ln2w"))
      bu_fill(in[i], 100u + (unsigned)i, 0.5f, 1.5f);
    else
      bu_fill(in[i], 100u + (unsigned)i, -0.05f, 0.05f);
  }
  return nin;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_gpt2 [B T C H] [f32|bf16] [iters] [--executors LIST]... [--compile-reps N] "
                  "[--no-floor]\n");
  return 2;
}

int main(int argc, char **argv) {
  int B = 8, T = 256, C = 768, H = 12, iters = 10, compile_reps = 0;
  bool floor = true;
  const char *dt = "f32";
  if (argc == 8 && !strcmp(argv[1], "--probe")) { /* the compile-time child */
    bu_execs e;
    if (!bu_execs_parse(argv[7], &e)) return 2;
    char *text = gen(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argv[6]);
    th_trace *tr = NULL;
    if (th_trace_parse(text, "gpt2_block", &tr) != TH_OK) {
      fprintf(stderr, "bench_gpt2: %s\n", th_last_error());
      return 1;
    }
    th_tensor *in[16];
    int nin = make_inputs(tr, in);
    int rc = bu_probe_child(tr, &e, nin, in);
    for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
    free(text);
    return rc;
  }
  enum { MAXL = 6 };
  bu_execs lists[MAXL];
  char labels[MAXL][128];
  int nl = 0, npos = 0;
  const char *pos[6];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--executors") && i + 1 < argc) {
      if (nl == MAXL || !bu_execs_parse(argv[++i], &lists[nl])) return usage();
      nl++;
    } else if (!strcmp(argv[i], "--compile-reps") && i + 1 < argc) {
      compile_reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--no-floor")) {
      floor = false;
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      return usage();
    } else {
      if (npos == 6) return usage();
      pos[npos++] = argv[i];
    }
  }
  if (npos >= 4) {
    B = atoi(pos[0]);
    T = atoi(pos[1]);
    C = atoi(pos[2]);
    H = atoi(pos[3]);
  } else if (npos != 0) {
    return usage();
  }
  if (npos >= 5) dt = pos[4];
  if (npos >= 6) iters = atoi(pos[5]);
  if (B < 1 || T < 1 || C < 1 || H < 1 || C % H || iters < 1 || compile_reps < 0 ||
      (strcmp(dt, "f32") && strcmp(dt, "bf16")))
    return usage();
  if (iters > 256) iters = 256;
  if (nl == 0) {
    bu_execs_parse("fuser,blas,eager", &lists[nl++]);
    bu_execs_parse("blas,eager", &lists[nl++]);
  }
  int ref = -1; /* the reference: the first list without the fuser */
  for (int k = 0; k < nl; k++) {
    bu_execs_label(&lists[k], labels[k], sizeof labels[k]);
    if (ref < 0 && lists[k].n > 0 && !bu_execs_has(&lists[k], "fuser")) ref = k;
  }

  char *text = gen(B, T, C, H, dt);
  th_trace *tr = NULL;
  if (th_trace_parse(text, "gpt2_block", &tr) != TH_OK) {
    fprintf(stderr, "bench_gpt2: %s\n", th_last_error());
    return 1;
  }
  th_program *p[MAXL];
  for (int k = 0; k < nl; k++)
    if (bu_compile(tr, &lists[k], &p[k]) != TH_OK) {
      fprintf(stderr, "bench_gpt2: compile (%s): %s\n", labels[k], th_last_error());
      return 1;
    }
  /* the GEMM peak: the MLP's first matmul, alone */
  int M = B * T;
  char gtext[512];
  snprintf(gtext, sizeof gtext,
           "def computation(a, w):\n  # a: \"cpu %s[%d, %d]\"\n  # w: \"cpu %s[%d, %d]\"\n"
           "  t0 = ltorch.linear(a, w, None)\n  return t0\n",
           dt, M, C, dt, 4 * C, C);
  th_trace *gtr = NULL;
  th_program *gp = NULL;
  bu_execs gex;
  bu_execs_parse("blas,eager", &gex);
  th_tensor *gin[2] = {NULL, NULL};
  if (floor) {
    if (th_trace_parse(gtext, "gemm", &gtr) != TH_OK || bu_compile(gtr, &gex, &gp) != TH_OK) {
      fprintf(stderr, "bench_gpt2: GEMM floor: %s\n", th_last_error());
      return 1;
    }
    for (int i = 0; i < 2; i++) {
      const th_value *v = th_trace_input(gtr, i);
      gin[i] = th_tensor_empty(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
      bu_fill(gin[i], 7u + (unsigned)i, -0.5f, 0.5f);
    }
  }
  int nin = th_trace_num_inputs(tr);
  th_tensor *in[16];
  make_inputs(tr, in);
  double t[MAXL + 1][256];
  double maxdiff[MAXL];
  th_tensor *first[MAXL];
  for (int it = -1; it < iters; it++) { /* iteration -1 warms up and keeps the outputs for the check */
    for (int k = 0; k <= nl; k++) {
      th_program *prog = k < nl ? p[k] : gp;
      if (!prog) continue;
      th_tensor **outs = NULL;
      int nout = 0;
      double t0 = bu_now_ms();
      if (th_program_run(prog, k < nl ? nin : 2, k < nl ? in : gin, &nout, &outs) != TH_OK) {
        fprintf(stderr, "bench_gpt2: run (%s): %s\n", k < nl ? labels[k] : "GEMM", th_last_error());
        return 1;
      }
      double t1 = bu_now_ms();
      if (it >= 0) t[k][it] = t1 - t0;
      for (int i = 0; i < nout; i++) {
        if (it < 0 && k < nl && i == 0)
          first[k] = outs[0];
        else
          th_tensor_release(outs[i]);
      }
      free(outs);
    }
  }
  for (int k = 0; k < nl; k++) maxdiff[k] = ref >= 0 ? bu_max_abs_diff(first[k], first[ref]) : -1;
  for (int k = 0; k < nl; k++) th_tensor_release(first[k]);

  double flops = 2.0 * B * T * (double)C * C * (3 + 1 + 4 + 4) + 2.0 * 2.0 * B * T * (double)T * C;
  double gemm_flops = 2.0 * M * (double)(4 * C) * C;
  bu_stats st[MAXL + 1];
  memset(st, 0, sizeof st);
  for (int k = 0; k <= nl; k++)
    if (k < nl || floor) st[k] = bu_stats_of(t[k], iters);
  double peak = floor ? gemm_flops / (st[nl].med * 1e6) : 0, floor_ms = floor ? flops / (peak * 1e6) : 0;
  printf("gpt2_block B=%d T=%d C=%d H=%d %s, %.1f GFLOP per forward, %d iterations, %d OpenMP threads\n\n", B, T, C, H,
         dt, flops / 1e9, iters, omp_get_max_threads());
  printf("| row | fusion regions | min / median / max ms | GFLOP/s (median) | /GEMM floor | %s/this | max abs diff vs "
         "%s |\n|---|---|---|---|---|---|---|\n",
         ref >= 0 ? labels[ref] : "-", ref >= 0 ? labels[ref] : "-");
  if (floor) {
    printf("| GEMM peak: linear [%d, %d] x [%d, %d]^T (%.2f GFLOP), blas | | %.2f / %.2f / %.2f | %.1f | | | |\n", M, C,
           4 * C, C, gemm_flops / 1e9, st[nl].min, st[nl].med, st[nl].max, peak);
    printf("| GEMM floor: %.1f GFLOP at %.1f GFLOP/s | | %.1f | %.1f | 1.00x | | |\n", flops / 1e9, peak, floor_ms,
           peak);
    bu_emit("@gpt2 %s gemm_peak %.4f %.4f %.4f - %.3f", dt, st[nl].min, st[nl].med, st[nl].max, peak);
    bu_emit("@gpt2 %s gemm_floor %.4f %.4f %.4f - %.3f", dt, floor_ms, floor_ms, floor_ms, peak);
  }
  for (int k = 0; k < nl; k++) {
    char fl[32] = "", rr[32] = "", md[32] = "";
    if (floor) snprintf(fl, sizeof fl, "%.2fx", st[k].med / floor_ms);
    if (ref >= 0) snprintf(rr, sizeof rr, "%.2fx", st[ref].med / st[k].med);
    if (ref >= 0 && k != ref) snprintf(md, sizeof md, "%.3g", maxdiff[k]);
    printf("| %s | %d | %.1f / %.1f / %.1f | %.1f | %s | %s | %s |\n", labels[k], bu_regions(p[k]), st[k].min,
           st[k].med, st[k].max, flops / (st[k].med * 1e6), fl, rr, md);
    bu_emit("@gpt2 %s %s %.4f %.4f %.4f %d %.3f", dt, labels[k], st[k].min, st[k].med, st[k].max, bu_regions(p[k]),
            flops / (st[k].med * 1e6));
  }
  fflush(stdout);
  if (compile_reps > 0) {
    printf("\n");
    bu_compile_header();
    char sb[16], st_[16], sc[16], sh[16];
    snprintf(sb, sizeof sb, "%d", B);
    snprintf(st_, sizeof st_, "%d", T);
    snprintf(sc, sizeof sc, "%d", C);
    snprintf(sh, sizeof sh, "%d", H);
    for (int k = 0; k < nl; k++) {
      char *args[] = {"bench_gpt2", "--probe", sb, st_, sc, sh, (char *)dt, labels[k], NULL};
      bu_compile_rows("gpt2_block", dt, labels[k], args, tr, &lists[k], compile_reps);
      fflush(stdout);
    }
  }
  bu_emit_flush();
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_tensor_release(gin[0]);
  th_tensor_release(gin[1]);
  for (int k = 0; k < nl; k++) th_program_free(p[k]);
  th_program_free(gp);
  th_trace_free(gtr);
  th_trace_free(tr);
  free(text);
  return 0;
}
