/* test_fuser.c — the CPU fusion executor (src/executors/fuser): partition structure under both
 * strategies (regions, outputs, copy_ and the return never moved), the generated source, differential
 * runs against the eager executor on random small DAGs, and the disk cache. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

static char cache_root[256];

static int setup_cache(void **state) {
  (void)state;
  snprintf(cache_root, sizeof cache_root, "%s/fuser-test-cache", TH_BINARY_DIR); /* reruns hit the cache */
  mkdir(cache_root, 0700);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  return 0;
}

static th_trace *parse(const char *text) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<test>", &tr) != TH_OK) fail_msg("parse: %s", th_last_error());
  return tr;
}

static th_trace *partition(const th_trace *tr, th_fuser_strategy s) {
  th_trace *out = NULL;
  if (th_fuser_partition(tr, s, NULL, 0, &out) != TH_OK) fail_msg("partition: %s", th_last_error());
  if (th_trace_verify(out) != TH_OK) fail_msg("verify: %s", th_last_error());
  return out;
}

static const th_bsym *bsym_at(const th_trace *tr, int i) { return tr->bsyms.items[i]; }

static char *print(const th_trace *tr) {
  char *s = th_trace_print(tr, 2);
  assert_non_null(s);
  return s;
}

static void test_chain_one_region(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, b)\n  t1 = prims.mul(t0, 2.0)\n  t2 = prims.exp(t1)\n"
                       "  return (t0, t2)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 2);
    const th_bsym *r = bsym_at(p, 0);
    assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
    assert_string_equal(r->sym->name, "fusion0");
    assert_int_equal(r->nsubs, 3);
    assert_int_equal(r->out.kind, TH_ARG_LIST);
    assert_int_equal(r->out.u.seq.n, 2);
    char *txt = print(p);
    assert_non_null(strstr(txt, "[t0, t2] = fusion0(a, b)"));
    free(txt);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

static void test_dataflow_vs_consecutive(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b, m):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.add(a, b)\n  t1 = prims.matmul(m, m)\n  t2 = prims.mul(t0, 2.0)\n"
                       "  return (t1, t2)\n");
  th_trace *d = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(d->bsyms.n, 3);
  assert_int_equal(bsym_at(d, 0)->sym->id, TH_OP_prims_matmul);
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(bsym_at(d, 1)->out.u.seq.n, 1); /* only t2 leaves */
  th_trace *c = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(c->bsyms.n, 4); /* nothing adjacent: no region, nothing moved */
  assert_int_equal(bsym_at(c, 0)->sym->id, TH_OP_prims_add);
  assert_int_equal(bsym_at(c, 1)->sym->id, TH_OP_prims_matmul);
  th_trace_free(d);
  th_trace_free(c);
  th_trace_free(tr);
  /* a consumer in between closes the region: no single-bsym region, order kept */
  tr = parse("def computation(a, b):\n"
             "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
             "  t0 = prims.add(a, b)\n  t1 = prims.sum(t0, (0,))\n  t2 = prims.mul(t0, 2.0)\n"
             "  return (t1, t2)\n");
  d = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(d->bsyms.n, 4);
  assert_int_equal(bsym_at(d, 0)->sym->id, TH_OP_prims_add);
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_prims_sum);
  th_trace_free(d);
  th_trace_free(tr);
}

static void test_copy_never_moved(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 2.0)\n  t2 = prims.copy_(t1, a)\n"
                       "  t3 = prims.neg(t0)\n  t4 = prims.sin(t3)\n  return t4\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 2)->subs[0]->sym->id, TH_OP_prims_neg);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
  /* seed 004, a += 1: add, copy_, return a — nothing to fuse, nothing moves, RETURN last */
  tr = parse("def computation(a):\n  # a: \"cpu i64[]\"\n  t0 = prims.add(a, 1)\n  t1 = prims.copy_(t0, a)\n"
             "  return a\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 3);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_add);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

static void test_codegen_structure(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n"
                       "  # a: \"cpu f32[4, 5]\"\n  # b: \"cpu bf16[4, 5]\"\n"
                       "  t0 = prims.convert_element_type(b, dtypes.float32)\n  t1 = prims.mul(a, t0)\n"
                       "  t2 = prims.exp(t1)\n  return t2\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  assert_int_equal(th_fuser_codegen(bsym_at(p, 0), &r), TH_OK);
  assert_int_equal(r.nin, 2);
  assert_int_equal(r.nout, 1);
  const char *want[] = {"void fusion_kernel(char **ptrs, const int64_t *shape, const int64_t *st)",
                        "const uint16_t *restrict p0 = (const uint16_t *)ptrs[0];",
                        "const float *restrict p1 = (const float *)ptrs[1];",
                        "#pragma omp parallel for schedule(static) if (nouter * inner >= 32768)",
                        "for (int64_t i = i0; i < i1; i++) {",
                        "const float a0 = th_bf16_to_f32(p0[b0 + i]);",
                        "const float v0 = ((float)a0);",
                        "const float v1 = ((float)((((float)a1) * ((float)v0))));",
                        "const float v2 = ((float)(exp(((float)v1))));",
                        "p2[b2 + i] = (float)v2;"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(r.source, want[i])) {
      fprintf(stderr, "%s\n", r.source);
      fail_msg("missing `%s` in the source above", want[i]);
    }
  th_fuser_region_clear(&r);
  th_trace_free(p);
  th_trace_free(tr);
}

/* ---- differential runs ------------------------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

static double elem(const th_tensor *t, const int64_t *idx) {
  const char *base = th_tensor_data(t);
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
  return th_load_f64(base + off * (int64_t)th_dtype_size(t->dtype), t->dtype);
}

static th_tensor *random_tensor(th_dtype dt, int ndim, const int64_t *shape) {
  th_tensor *t = th_tensor_empty(dt, ndim, shape);
  int64_t n = th_tensor_numel(t);
  char *p = th_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    double v = dt == TH_I64 ? (double)((int)(rnd() % 101) - 50) : ((double)(rnd() % 4001) - 2000.0) / 1000.0;
    th_store_f64(p + i * (int64_t)th_dtype_size(dt), dt, v);
  }
  return t;
}

static const char *dname(th_dtype d) {
  return d == TH_F32 ? "float32" : d == TH_F64 ? "float64" : d == TH_BF16 ? "bfloat16" : "int64";
}
static const char *dshort(th_dtype d) {
  return d == TH_F32 ? "f32" : d == TH_F64 ? "f64" : d == TH_BF16 ? "bf16" : "i64";
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  snprintf(buf + k, n - k, "]");
}

static void tuple_str(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  snprintf(buf + k, n - k, nd == 1 ? ",)" : ")");
}

static th_tensor **run_with(const th_trace *tr, const char *const *ex, int nex, th_tensor **in, int nin, int *nout) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

static int count_regions(const th_trace *tr, const char *const *ex, int nex) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  const th_trace *et = th_program_trace(p);
  if (th_trace_verify(et) != TH_OK) fail_msg("the fused execution trace does not verify: %s", th_last_error());
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    if (b->sym->id == TH_OP_DYNAMIC) {
      n++;
      assert_string_equal(th_bsym_executor(b), "fuser");
    }
  }
  th_program_free(p);
  return n;
}

/* One random case: inputs of dtype dt over `shape` (one transposed, one broadcast from size-1 dims),
 * a chain of ops, a convert round trip; returns whether the trace has transcendental ops. */
static void one_case(int id, int *fused_cases) {
  static const int64_t shapes[][4] = {{0}, {7}, {3, 5}, {1, 4}, {2, 0, 3}, {2, 3, 4}, {5, 1}, {33, 65}};
  static const int ndims[] = {0, 1, 2, 2, 3, 3, 2, 2};
  static const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16, TH_I64};
  int si = (int)(rnd() % 8);
  th_dtype dt = dts[rnd() % 4];
  int nd = ndims[si];
  int64_t shape[4], tshape[4], bshape[4];
  for (int d = 0; d < nd; d++) {
    shape[d] = shapes[si][d];
    tshape[d] = shapes[si][nd - 1 - d];
    bshape[d] = (rnd() % 2) ? 1 : shape[d];
  }
  bool isint = dt == TH_I64, transc = false;
  char text[8192], s1[64], s2[64], s3[64], perm[64], sh[64], bdims[64];
  shape_str(s1, sizeof s1, nd, shape);
  shape_str(s2, sizeof s2, nd, tshape);
  shape_str(s3, sizeof s3, nd, bshape);
  int64_t pv[4], bd[4];
  for (int d = 0; d < nd; d++) pv[d] = nd - 1 - d, bd[d] = d;
  tuple_str(perm, sizeof perm, nd, pv);
  tuple_str(sh, sizeof sh, nd, shape);
  tuple_str(bdims, sizeof bdims, nd, bd);
  size_t k = (size_t)snprintf(text, sizeof text,
                              "def computation(a, b, c, e):\n  # a: \"cpu %s%s\"\n  # b: \"cpu %s%s\"\n"
                              "  # c: \"cpu %s%s\"\n  # e: \"cpu %s%s\"\n"
                              "  v0 = prims.transpose(c, %s)\n  v1 = prims.broadcast_in_dim(e, %s, %s)\n",
                              dshort(dt), s1, dshort(dt), s1, dshort(dt), s2, dshort(dt), s3, perm, sh, bdims);
  const char *vals[32] = {"a", "b", "v0", "v1"};
  th_dtype cdt = dt;
  if (dt == TH_BF16) { /* math prims take f32 and wider: compute in f32 between converts */
    k += (size_t)snprintf(text + k, sizeof text - k,
                          "  fa = prims.convert_element_type(a, dtypes.float32)\n"
                          "  fb = prims.convert_element_type(b, dtypes.float32)\n"
                          "  f0 = prims.convert_element_type(v0, dtypes.float32)\n"
                          "  f1 = prims.convert_element_type(v1, dtypes.float32)\n");
    vals[0] = "fa", vals[1] = "fb", vals[2] = "f0", vals[3] = "f1";
    cdt = TH_F32;
  }
  char names[32][16];
  int nv = 4, nops = 3 + (int)(rnd() % 6);
  for (int i = 0; i < nops; i++) {
    const char *x = vals[rnd() % (unsigned)nv], *y = vals[rnd() % (unsigned)nv];
    snprintf(names[i], sizeof names[i], "w%d", i);
    int op = (int)(rnd() % 9);
    const char *line;
    char buf[256];
    switch (op) {
      case 0: snprintf(buf, sizeof buf, "prims.add(%s, %s)", x, y); break;
      case 1: snprintf(buf, sizeof buf, "prims.sub(%s, %s)", x, y); break;
      case 2: snprintf(buf, sizeof buf, "prims.mul(%s, %s)", x, y); break;
      case 3: snprintf(buf, sizeof buf, "prims.neg(%s)", x); break;
      case 4: snprintf(buf, sizeof buf, isint ? "prims.mul(%s, 3)" : "prims.mul(%s, 0.1)", x); break;
      case 5:
        k += (size_t)snprintf(text + k, sizeof text - k, "  p%d = prims.gt(%s, %s)\n", i, x, y);
        snprintf(buf, sizeof buf, "prims.where(p%d, %s, %s)", i, x, y);
        break;
      case 6:
        if (isint) snprintf(buf, sizeof buf, "prims.bitwise_xor(%s, %s)", x, y);
        else { snprintf(buf, sizeof buf, "prims.tanh(%s)", x); transc = true; }
        break;
      case 7: {
        th_dtype other = isint ? TH_F64 : cdt == TH_F64 ? TH_F32 : TH_BF16;
        k += (size_t)snprintf(text + k, sizeof text - k, "  q%d = prims.convert_element_type(%s, dtypes.%s)\n", i, x,
                              dname(other));
        snprintf(buf, sizeof buf, "prims.convert_element_type(q%d, dtypes.%s)", i, dname(cdt));
        break;
      }
      default:
        if (isint) snprintf(buf, sizeof buf, "prims.sign(%s)", x);
        else { snprintf(buf, sizeof buf, "prims.exp(%s)", x); transc = true; }
        break;
    }
    line = buf;
    k += (size_t)snprintf(text + k, sizeof text - k, "  %s = %s\n", names[i], line);
    vals[nv++] = names[i];
  }
  if (dt == TH_BF16) {
    k += (size_t)snprintf(text + k, sizeof text - k, "  r0 = prims.convert_element_type(%s, dtypes.bfloat16)\n",
                          vals[nv - 1]);
    vals[nv++] = "r0";
  }
  snprintf(text + k, sizeof text - k, "  return (%s, %s)\n", vals[nv - 1], vals[nv > 5 ? nv - 2 : nv - 1]);
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<case>", &tr) != TH_OK) fail_msg("case %d parse: %s\n%s", id, th_last_error(), text);
  th_tensor *in[4] = {random_tensor(dt, nd, shape), random_tensor(dt, nd, shape), random_tensor(dt, nd, tshape),
                      random_tensor(dt, nd, bshape)};
  static const char *const eager[] = {"eager"}, *const fused[] = {"fuser", "eager"};
  int n1 = 0, n2 = 0;
  th_tensor **r1 = run_with(tr, eager, 1, in, 4, &n1);
  th_tensor **r2 = run_with(tr, fused, 2, in, 4, &n2);
  *fused_cases += count_regions(tr, fused, 2) > 0;
  assert_int_equal(n1, n2);
  for (int o = 0; o < n1; o++) {
    assert_int_equal(r1[o]->dtype, r2[o]->dtype);
    assert_int_equal(r1[o]->ndim, r2[o]->ndim);
    int64_t numel = th_tensor_numel(r1[o]), idx[8] = {0};
    for (int64_t q = 0; q < numel; q++) {
      int64_t rem = q;
      for (int d = r1[o]->ndim - 1; d >= 0; d--) {
        idx[d] = rem % r1[o]->shape[d];
        rem /= r1[o]->shape[d];
      }
      double x = elem(r1[o], idx), y = elem(r2[o], idx);
      bool same = (isnan(x) && isnan(y)) || x == y;
      double tol = dt == TH_BF16 ? 1e-2 : 1e-5;
      if (!same && (!transc || !(fabs(x - y) <= tol * (1 + fabs(x)))))
        fail_msg("case %d output %d element %lld: eager %.17g, fuser %.17g\n%s", id, o, (long long)q, x, y, text);
    }
    th_tensor_release(r1[o]);
    th_tensor_release(r2[o]);
  }
  free(r1);
  free(r2);
  for (int i = 0; i < 4; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

static void test_differential(void **state) {
  (void)state;
  int fused = 0;
  for (int i = 0; i < 200; i++) one_case(i, &fused);
  assert_true(fused > 100); /* most cases do fuse */
}

static void test_cache_reused(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[3]\"\n"
                       "  t0 = prims.add(a, 0.123456789)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  assert_int_equal(count_regions(tr, fused, 2), 1);
  long c1 = th_fuser_stat_compiles(), h1 = th_fuser_stat_cache_hits();
  assert_int_equal(count_regions(tr, fused, 2), 1);
  long c2 = th_fuser_stat_compiles(), h2 = th_fuser_stat_cache_hits();
  assert_true(c1 - c0 + h1 - h0 == 1);
  assert_int_equal(c2, c1); /* the second compile hits the disk cache */
  assert_int_equal(h2, h1 + 1);
  th_trace_free(tr);
}

static void test_sha256(void **state) {
  (void)state;
  uint8_t h[32];
  th_fuser_sha256("abc", 3, h);
  static const uint8_t want[4] = {0xba, 0x78, 0x16, 0xbf};
  assert_memory_equal(h, want, 4);
  assert_int_equal(h[31], 0xad);
}

static void test_missing_compiler(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n"
                       "  t0 = prims.add(a, 7.5)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  char *old = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", "/nonexistent/thunder-cc", 1);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "/nonexistent/thunder-cc"));
  assert_non_null(strstr(th_last_error(), "[\"blas\", \"eager\"]"));
  if (old) setenv("CC", old, 1);
  else unsetenv("CC");
  free(old);
  th_trace_free(tr);
}

/* Several processes compile the same new kernel at once; all succeed and agree. */
static void test_concurrent_processes(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[8]\"\n"
                       "  t0 = prims.sub(a, 4.25)\n  t1 = prims.mul(t0, a)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  pid_t pids[4];
  for (int i = 0; i < 4; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char dir[300];
      snprintf(dir, sizeof dir, "%s/fuser-concurrent-%ld", TH_BINARY_DIR, (long)getppid());
      mkdir(dir, 0700); /* a fresh cache: every child compiles, one rename wins */
      setenv("XDG_CACHE_HOME", dir, 1);
      th_compile_options o;
      memset(&o, 0, sizeof o);
      o.executors = fused;
      o.nexecutors = 2;
      th_program *p = NULL;
      _exit(th_program_compile(tr, &o, &p) == TH_OK ? 0 : 1);
    }
  }
  for (int i = 0; i < 4; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_one_region),   cmocka_unit_test(test_dataflow_vs_consecutive),
      cmocka_unit_test(test_copy_never_moved),   cmocka_unit_test(test_codegen_structure),
      cmocka_unit_test(test_sha256),             cmocka_unit_test(test_cache_reused),
      cmocka_unit_test(test_missing_compiler),   cmocka_unit_test(test_differential),
      cmocka_unit_test(test_concurrent_processes),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
