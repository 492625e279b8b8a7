/* test_fuser.c — the CPU fusion executor (src/executors/fuser): partition structure under both
 * strategies (regions, outputs, copy_/random ops and the return never moved, no cycles, reductions and
 * layout ops joining, softmax/layer_norm/rms_norm/var_mean as one region each, independent chains
 * merged as nests of one region, seed 003's fp8 scaling as one region), the generated source (checked
 * against golden files in tests/golden/fuser/), differential runs against the eager executor on random
 * small DAGs (batched: several cases per program), the disk cache, 8 processes compiling at once, the
 * missing-compiler error and the dump option. Numerics of reductions, norms, layouts and dtypes:
 * test_fuser_numerics.c. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

static char cache_root[256];

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}


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
  /* dataflow: a consumer in between (maximum is not fusible) seals the region — it must run before the
   * consumer — but later bsyms that read nothing made from the consumer on still join it */
  tr = parse("def computation(a, b):\n"
             "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
             "  t0 = prims.add(a, b)\n  t1 = prims.maximum(t0, b)\n  t2 = prims.mul(t0, 2.0)\n"
             "  t3 = prims.sub(t1, t2)\n  t4 = prims.neg(t3)\n  return (t1, t4)\n");
  d = partition(tr, TH_FUSER_DATAFLOW);
  char *txt = print(d);
  assert_int_equal(d->bsyms.n, 4);
  assert_non_null(strstr(txt, "[t0, t2] = fusion0(a, b)")); /* add and mul, before maximum */
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_prims_maximum);
  /* sub reads maximum's output: it cannot run before maximum, so it starts the next region */
  assert_non_null(strstr(txt, "[t4] = fusion1(t1, t2)"));
  free(txt);
  th_trace_free(d);
  c = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(c->bsyms.n, 4); /* add alone, maximum, then [mul, sub, neg] adjacent, return */
  assert_int_equal(bsym_at(c, 0)->sym->id, TH_OP_prims_add);
  assert_int_equal(bsym_at(c, 1)->sym->id, TH_OP_prims_maximum);
  th_trace_free(c);
  th_trace_free(tr);
}

/* dataflow: the bf16 rounding of a GEMM result is sunk to its first reader, so it does not end a region
 * that later independent work can still join (a weight gradient's convert between a recomputed GELU
 * and its gradient) */
static void test_gemm_convert_sunk(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, w):\n"
                       "  # x: \"cpu f32[2, 2]\"\n  # w: \"cpu f32[2, 2]\"\n"
                       "  t0 = prims.mul(x, 2.0)\n  t1 = prims.matmul(t0, w)\n"
                       "  t2 = prims.convert_element_type(t1, dtypes.bfloat16)\n  t3 = prims.sin(t0)\n"
                       "  t4 = prims.neg(t3)\n  return (t2, t4)\n");
  th_trace *d = partition(tr, TH_FUSER_DATAFLOW);
  char *txt = print(d);
  assert_int_equal(d->bsyms.n, 4);
  assert_non_null(strstr(txt, "[t0, t4] = fusion0(x)")); /* mul, sin, neg: one region before the GEMM */
  assert_int_equal(bsym_at(d, 1)->sym->id, TH_OP_prims_matmul);
  assert_int_equal(bsym_at(d, 2)->sym->id, TH_OP_prims_convert_element_type); /* sunk to the return */
  assert_int_equal(bsym_at(d, 3)->sym->id, TH_OP_prims_python_return);
  free(txt);
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

/* ---- compiled programs --------------------------------------------------------------------------- */

static const char *const with_fuser[] = {"fuser", "blas", "eager"};

static th_program *compile_with(const th_trace *tr, const char *const *ex, int nex) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  if (th_trace_verify(th_program_trace(p)) != TH_OK) fail_msg("execution trace: %s", th_last_error());
  return p;
}

static int count_id(const th_trace *et, th_op_id id) {
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) n += bsym_at(et, i)->sym->id == id;
  return n;
}

/* The region bsyms' members of every region in et, counted by op. */
static int count_in_regions(const th_trace *et, th_op_id id) {
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    for (int j = 0; j < b->nsubs; j++) n += b->subs[j]->sym->id == id;
  }
  return n;
}

/* Every non-utility top-level bsym of et is a fusion region (the whole computation fused). */
static void assert_all_fused(const th_trace *et, int nregions) {
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    if (b->sym->tags & TH_TAG_UTILITY) continue;
    if (b->sym->id != TH_OP_DYNAMIC) {
      char *txt = print(et);
      fprintf(stderr, "%s\n", txt);
      free(txt);
      fail_msg("%s left outside the fusion regions", b->sym->qualname);
    }
    n++;
  }
  assert_int_equal(n, nregions);
}

/* ---- partition structure ------------------------------------------------------------------------ */

/* Seed 004 with work to fuse around the copy_: regions never cross it, RETURN stays last. */
static void test_seed004_fused(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, b)\n  t2 = prims.copy_(t1, a)\n"
                       "  t3 = prims.sin(a)\n  t4 = prims.neg(t3)\n  return (a, t4)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 0)->subs[1]->sym->id, TH_OP_prims_mul);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_copy_);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC); /* sin(a) reads a after the copy */
    assert_int_equal(bsym_at(p, 2)->subs[0]->sym->id, TH_OP_prims_sin);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  /* and it runs: a is updated in place, t4 = -sin(a + 1) * b ... of the updated a */
  th_program *prog = compile_with(tr, with_fuser, 3);
  int64_t shape[1] = {4};
  th_tensor *a = th_tensor_empty(TH_F32, 1, shape), *b = th_tensor_empty(TH_F32, 1, shape);
  for (int i = 0; i < 4; i++) ((float *)th_tensor_data(a))[i] = (float)i, ((float *)th_tensor_data(b))[i] = 0.5f;
  th_tensor *in[2] = {a, b}, **out = NULL;
  int nout = 0;
  assert_int_equal(th_program_run(prog, 2, in, &nout, &out), TH_OK);
  for (int i = 0; i < 4; i++) {
    float na = ((float)i + 1.0f) * 0.5f;
    assert_true(((float *)th_tensor_data(a))[i] == na);
    assert_float_equal(th_tensor_get_f64(out[1], i), -sin((double)na), 1e-6);
  }
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  th_tensor_release(a);
  th_tensor_release(b);
  th_program_free(prog);
  th_trace_free(tr);
}

/* A random op is an effect: nothing moves across it, so no region spans it. */
static void test_effects_not_crossed(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[4]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 2.0)\n"
                       "  t2 = prims.uniform((4,), 0.0, 1.0, device=devices.Device(\"cpu\"), dtype=dtypes.float32)\n"
                       "  t3 = prims.exp(t1)\n  t4 = prims.sin(t3)\n  return (t2, t4)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 4);
    assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 0)->out.u.seq.n, 1); /* t1 */
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_uniform);
    assert_int_equal(bsym_at(p, 2)->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 3)->sym->id, TH_OP_prims_python_return);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

/* A non-member between members that consumes the region closes it; a later region may read both.
 * The partitioned trace is in dependency order (it verifies: every value defined before its use). */
static void test_no_cycles(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, m):\n  # a: \"cpu f32[3, 3]\"\n  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.add(a, 1.0)\n  t1 = prims.mul(t0, 3.0)\n  u = prims.matmul(m, m)\n"
                       "  t2 = prims.maximum(t1, a)\n  t3 = prims.mul(t2, 2.0)\n  t4 = prims.add(t0, t3)\n"
                       "  t5 = prims.matmul(u, t4)\n  t6 = prims.exp(t5)\n  t7 = prims.sum(t6, (0, 1))\n"
                       "  return (t7, u)\n");
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s); /* verifies */
    int r = count_id(p, TH_OP_DYNAMIC);
    assert_int_equal(r, 3);
    /* maximum sits between the first two regions, the matmuls stay where they were relative to them */
    int i_max = -1, i_r0 = -1, i_r1 = -1;
    for (int i = 0; i < p->bsyms.n; i++) {
      const th_bsym *b = bsym_at(p, i);
      if (b->sym->id == TH_OP_prims_maximum) i_max = i;
      if (b->sym->id == TH_OP_DYNAMIC && i_r0 < 0) i_r0 = i;
      else if (b->sym->id == TH_OP_DYNAMIC && i_r1 < 0) i_r1 = i;
    }
    assert_true(i_r0 < i_max && i_max < i_r1);
    th_trace_free(p);
  }
  th_trace_free(tr);
}

/* Reductions join the region of the pointwise ops around them; only what leaves is an output. */
static void test_reductions_join(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                       "  t0 = prims.mul(x, x)\n  t1 = prims.sum(t0, (1,))\n  t2 = prims.sqrt(t1)\n"
                       "  t3 = prims.amax(x, (0, 1))\n  t4 = prims.neg(t3)\n  return (t2, t4)\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(p->bsyms.n, 2);
  const th_bsym *r = bsym_at(p, 0);
  assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(r->nsubs, 5);
  assert_int_equal(r->out.u.seq.n, 2); /* t2, t4: t0, t1, t3 never leave */
  th_fz_plan plan;
  assert_int_equal(th_fz_plan_build((const th_bsym *const *)r->subs, r->nsubs, &plan), TH_OK);
  assert_int_equal(plan.nnest, 2); /* rows of [6, 10], and the full reduction of x */
  assert_int_equal(plan.nest[0].r, 1);
  assert_int_equal(plan.nest[1].r, 2);
  th_fz_plan_free(&plan);
  th_trace_free(p);
  /* a reduction over the leading dims joins too, as a column nest (test_fuser_columns.c) */
  th_trace *t2 = parse("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                       "  t0 = prims.mul(x, x)\n  t1 = prims.sum(t0, (0,))\n  t2 = prims.sqrt(t1)\n  return t2\n");
  p = partition(t2, TH_FUSER_DATAFLOW);
  assert_int_equal(count_id(p, TH_OP_prims_sum), 0);
  assert_int_equal(p->bsyms.n, 2);
  assert_int_equal(bsym_at(p, 0)->nsubs, 3);
  th_trace_free(p);
  th_trace_free(t2);
  th_trace_free(tr);
}

/* softmax, log_softmax, layer_norm, rms_norm, var_mean: one region each, nothing left outside. */
static void test_norms_one_region(void **state) {
  (void)state;
  static const char *const progs[] = {
      "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n  t0 = ltorch.softmax(x, 1)  # t0: \"cpu f32[8, 33]\"\n"
      "  return t0\n",
      "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n  t0 = ltorch.log_softmax(x, 1)  # t0: \"cpu f32[8, 33]\"\n"
      "  return t0\n",
      "def computation(x, w, b):\n  # x: \"cpu f32[2, 8, 33]\"\n  # w: \"cpu f32[33]\"\n  # b: \"cpu f32[33]\"\n"
      "  t0 = ltorch.layer_norm(x, [33], w, b, 1e-05)  # t0: \"cpu f32[2, 8, 33]\"\n  return t0\n",
      "def computation(x, w):\n  # x: \"cpu f32[2, 8, 33]\"\n  # w: \"cpu f32[33]\"\n"
      "  t0 = ltorch.rms_norm(x, [33], w, 1e-06)  # t0: \"cpu f32[2, 8, 33]\"\n  return t0\n",
      "def computation(x):\n  # x: \"cpu f32[8, 33]\"\n"
      "  (t0, t1) = ltorch.var_mean(x, 1)\n  t2 = ltorch.sqrt(t0)  # t2: \"cpu f32[8]\"\n  return (t2, t1)\n",
  };
  static const th_op_id reds[][2] = {{TH_OP_prims_amax, TH_OP_prims_sum},
                                     {TH_OP_prims_amax, TH_OP_prims_sum},
                                     {TH_OP_prims_var_mean, TH_OP_prims_var_mean},
                                     {TH_OP_prims_sum, TH_OP_prims_sum},
                                     {TH_OP_prims_var_mean, TH_OP_prims_var_mean}};
  for (size_t k = 0; k < sizeof progs / sizeof *progs; k++) {
    th_trace *tr = parse(progs[k]);
    th_program *prog = compile_with(tr, with_fuser, 3);
    const th_trace *et = th_program_trace(prog);
    assert_all_fused(et, 1);
    assert_true(count_in_regions(et, reds[k][0]) >= 1);
    assert_true(count_in_regions(et, reds[k][1]) >= 1);
    th_program_free(prog);
    th_trace_free(tr);
  }
}

/* Independent chains of different shapes (an unrelated matmul between) are nests of one region. */
static void test_horizontal_merge(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, c, m):\n  # a: \"cpu f32[4, 5]\"\n  # c: \"cpu f32[7]\"\n"
                       "  # m: \"cpu f32[3, 3]\"\n"
                       "  t0 = prims.exp(a)\n  t1 = prims.matmul(m, m)\n  t2 = prims.neg(c)\n"
                       "  t3 = prims.mul(t0, 2.0)\n  t4 = prims.sin(t2)\n  t5 = prims.sum(t3, (1,))\n"
                       "  return (t1, t5, t4)\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  assert_int_equal(p->bsyms.n, 3);
  assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_matmul);
  const th_bsym *r = bsym_at(p, 1);
  assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
  assert_int_equal(r->nsubs, 5);
  th_fuser_region reg;
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_int_equal(th_fuser_codegen(r, ir, &reg), TH_OK);
  assert_int_equal(reg.nnest, 2);
  th_fuser_region_clear(&reg);
  th_ir_ctx_free(ir);
  th_trace_free(p);
  /* consecutive: the matmul splits them */
  p = partition(tr, TH_FUSER_CONSECUTIVE);
  assert_int_equal(count_id(p, TH_OP_DYNAMIC), 1); /* neg, mul, sin, sum after the matmul; exp alone */
  assert_int_equal(bsym_at(p, 0)->sym->id, TH_OP_prims_exp);
  th_trace_free(p);
  th_trace_free(tr);
}

/* Seed 003 as prims (the torchao float8 linear of PR #1415): per-tensor amax, scale, saturating
 * casts of input and weight, the fp8 converts, the weight's transpose/clone/transpose, dequantized
 * for the matmul. Everything up to the matmul is one region; the transposed fp8 weight is written
 * transposed (contiguous); results are eager's bit for bit (every op is exact). */
static const char seed003[] =
    "def computation(input, weight):\n"
    "  # input: \"cpu bf16[16, 32]\"\n  # weight: \"cpu bf16[64, 32]\"\n"
    "  t173 = prims.convert_element_type(input, dtypes.float32)\n  t174 = prims.abs(t173)\n"
    "  t199 = prims.convert_element_type(weight, dtypes.float32)\n  t200 = prims.abs(t199)\n"
    "  t177 = prims.amax(t174, (0, 1))\n  t203 = prims.amax(t200, (0, 1))\n"
    "  t9 = prims.convert_element_type(t177, dtypes.float64)\n  t64 = prims.convert_element_type(t203, dtypes.float64)\n"
    "  t180 = prims.ne(t9, t9)\n  t181 = prims.gt(t9, 1e-12)\n  t182 = prims.where(t181, t9, 1e-12)\n"
    "  t14 = prims.where(t180, t9, t182)\n"
    "  t206 = prims.ne(t64, t64)\n  t207 = prims.gt(t64, 1e-12)\n  t208 = prims.where(t207, t64, 1e-12)\n"
    "  t68 = prims.where(t206, t64, t208)\n"
    "  res = prims.div(448.0, t14)\n  scale = prims.convert_element_type(res, dtypes.float32)\n"
    "  t187 = prims.broadcast_in_dim(scale, (16, 32), ())\n  t188 = prims.mul(t173, t187)\n"
    "  t69 = prims.div(448.0, t68)\n  weight_scale = prims.convert_element_type(t69, dtypes.float32)\n"
    "  t213 = prims.broadcast_in_dim(weight_scale, (64, 32), ())\n  t214 = prims.mul(t199, t213)\n"
    "  t247 = prims.reciprocal(scale)\n"
    "  t189 = prims.ne(t188, t188)\n  t190 = prims.gt(t188, -448.0)\n  t191 = prims.where(t190, t188, -448.0)\n"
    "  t192 = prims.where(t189, t188, t191)\n  t193 = prims.ne(t192, t192)\n  t194 = prims.lt(t192, 448.0)\n"
    "  t195 = prims.where(t194, t192, 448.0)\n  t196 = prims.where(t193, t192, t195)\n"
    "  t248 = prims.reciprocal(weight_scale)\n"
    "  t215 = prims.ne(t214, t214)\n  t216 = prims.gt(t214, -448.0)\n  t217 = prims.where(t216, t214, -448.0)\n"
    "  t218 = prims.where(t215, t214, t217)\n  t219 = prims.ne(t218, t218)\n  t220 = prims.lt(t218, 448.0)\n"
    "  t221 = prims.where(t220, t218, 448.0)\n  t222 = prims.where(t219, t218, t221)\n"
    "  t197 = prims.convert_element_type(t196, dtypes.float8_e4m3fn)\n"
    "  t223 = prims.convert_element_type(t222, dtypes.float8_e4m3fn)\n"
    "  t241 = prims.reshape(t197, (16, 32))\n  t234 = prims.transpose(t223, (1, 0))\n"
    "  t244 = prims.transpose(t234, (1, 0))\n  t245 = prims.clone(t244)\n  t246 = prims.transpose(t245, (1, 0))\n"
    "  a16 = prims.convert_element_type(t241, dtypes.float32)\n  b16 = prims.convert_element_type(t246, dtypes.float32)\n"
    "  t249 = prims.matmul(a16, b16)\n"
    "  return (t249, t241, t246, t247, t248)\n";

static void test_seed003_one_region(void **state) {
  (void)state;
  th_trace *tr = parse(seed003);
  for (int s = 0; s < 2; s++) {
    th_trace *p = partition(tr, (th_fuser_strategy)s);
    assert_int_equal(p->bsyms.n, 3); /* fusion0, the matmul, return */
    const th_bsym *r = bsym_at(p, 0);
    assert_int_equal(r->sym->id, TH_OP_DYNAMIC);
    assert_int_equal(bsym_at(p, 1)->sym->id, TH_OP_prims_matmul);
    int amax = 0, fp8 = 0, layout = 0;
    for (int j = 0; j < r->nsubs; j++) {
      th_op_id id = r->subs[j]->sym->id;
      amax += id == TH_OP_prims_amax;
      fp8 += id == TH_OP_prims_convert_element_type && th_dtype_is_fp8(r->subs[j]->out.u.value->dtype);
      layout += id == TH_OP_prims_transpose || id == TH_OP_prims_clone || id == TH_OP_prims_reshape;
    }
    assert_int_equal(amax, 2);
    assert_int_equal(fp8, 2);
    assert_int_equal(layout, 5);
    th_trace_free(p);
  }
  th_tensor *in[2];
  int64_t s0[2] = {16, 32}, s1[2] = {64, 32};
  in[0] = th_tensor_empty(TH_BF16, 2, s0);
  in[1] = th_tensor_empty(TH_BF16, 2, s1);
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < th_tensor_numel(in[k]); i++)
      ((uint16_t *)th_tensor_data(in[k]))[i] = th_f32_to_bf16((float)((int)(rnd() % 2001) - 1000) / 37.0f);
  static const char *const eager[] = {"eager"};
  th_program *pe = compile_with(tr, eager, 1), *pf = compile_with(tr, with_fuser, 3);
  assert_int_equal(count_id(th_program_trace(pf), TH_OP_DYNAMIC), 1);
  th_tensor **oe = NULL, **of = NULL;
  int ne = 0, nf = 0;
  assert_int_equal(th_program_run(pe, 2, in, &ne, &oe), TH_OK);
  assert_int_equal(th_program_run(pf, 2, in, &nf, &of), TH_OK);
  assert_int_equal(ne, nf);
  for (int o = 0; o < ne; o++) { /* exact ops: equal element for element (eager's t246 is a view) */
    assert_int_equal(oe[o]->dtype, of[o]->dtype);
    for (int64_t i = 0; i < th_tensor_numel(oe[o]); i++) {
      double x = th_tensor_get_f64(oe[o], i), y = th_tensor_get_f64(of[o], i);
      if (!(x == y || (isnan(x) && isnan(y)) || (o == 0 && fabs(x - y) <= 1e-5 * (1 + fabs(x)))))
        fail_msg("output %d element %lld: eager %.9g fused %.9g", o, (long long)i, x, y);
    }
  }
  assert_true(th_tensor_is_contiguous(of[2])); /* the transposed fp8 weight, written transposed */
  assert_false(th_tensor_is_contiguous(oe[2])); /* (eager's is a transposed view) */
  for (int o = 0; o < ne; o++) th_tensor_release(oe[o]), th_tensor_release(of[o]);
  free(oe);
  free(of);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(pe);
  th_program_free(pf);
  th_trace_free(tr);
}

/* The generated function of the first region of p (the unit's source from the regions on). */
static char *region_source(const th_trace *p, th_fuser_region *r) {
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_non_null(ir);
  if (th_fuser_codegen(bsym_at(p, 0), ir, r) != TH_OK) fail_msg("codegen: %s", th_last_error());
  size_t at = 0;
  char *src = th_fuser_unit_source(ir, &at, NULL);
  assert_non_null(src);
  char *body = strdup(src + at);
  free(src);
  th_ir_ctx_free(ir);
  return body;
}

static void test_codegen_structure(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n"
                       "  # a: \"cpu f32[4, 5]\"\n  # b: \"cpu bf16[4, 5]\"\n"
                       "  t0 = prims.convert_element_type(b, dtypes.float32)\n  t1 = prims.mul(a, t0)\n"
                       "  t2 = prims.exp(t1)\n  return t2\n");
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  assert_int_equal(r.nslots, 3);
  assert_int_equal(r.nnest, 1);
  const char *want[] = {"void fusion0(char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T)",
                        "const uint16_t *restrict p0 = (const uint16_t *)P[0];",
                        "const float *restrict p1 = (const float *)P[1];",
                        "float *restrict p2 = (float *)P[2];",
                        "#pragma omp parallel for schedule(static) if (nouter * inner >= 32768)",
                        "#pragma omp simd",
                        "for (int64_t i = i0; i < i1; i++) {",
                        "const float a0 = th_sc_bf16_to_f32(p0[b0 + i]);",
                        "const float v0 = a0;",
                        "const float v1 = (float)((((float)a1) * ((float)v0)));",
                        "const float v2 = (float)(exp(((float)v1)));",
                        "p2[b2 + i] = (float)v2;"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(src, want[i])) {
      fprintf(stderr, "%s\n", src);
      fail_msg("missing `%s` in the source above", want[i]);
    }
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  th_trace_free(tr);
}

/* ---- differential runs ------------------------------------------------------------------------------- */




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
  th_program *p = compile_with(tr, ex, nex);
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

/* Row buffers: exp(x - max) is needed by the sum's pass and later ones, e / s by the second sum's pass
 * and the outputs; both are computed once per row into per-thread buffers (short contiguous rows),
 * else recomputed (rows over the buffer length, strided rows). Each variant against a float64
 * reference: softmax p = e / sum(e), out = p / sum(p * p), and e itself. */
static const char rowbuf_trace[] =
    "def computation(x):\n  # x: \"cpu f32%s\"\n%s"
    "  t0 = prims.amax(x1, (1,))\n  t1 = prims.broadcast_in_dim(t0, %s, (0,))\n  t2 = prims.sub(x1, t1)\n"
    "  t3 = prims.exp(t2)\n  t4 = prims.sum(t3, (1,))\n  t5 = prims.broadcast_in_dim(t4, %s, (0,))\n"
    "  t6 = prims.div(t3, t5)\n  t7 = prims.mul(t6, t6)\n  t8 = prims.sum(t7, (1,))\n"
    "  t9 = prims.broadcast_in_dim(t8, %s, (0,))\n  t10 = prims.div(t6, t9)\n  return (t10, t3)\n";

static void rowbuf_case(int64_t R, int64_t C, bool transposed) {
  char in_shape[64], dom[64], text[2048];
  int64_t dshape[2] = {R, C}, ishape[2] = {transposed ? C : R, transposed ? R : C};
  shape_str(in_shape, sizeof in_shape, 2, ishape);
  tuple_str(dom, sizeof dom, 2, dshape);
  char x1[128];
  if (transposed) snprintf(x1, sizeof x1, "  x1 = prims.transpose(x, (1, 0))\n");
  else snprintf(x1, sizeof x1, "  x1 = prims.reshape(x, %s)\n", dom);
  snprintf(text, sizeof text, rowbuf_trace, in_shape, x1, dom, dom, dom);
  th_trace *tr = parse(text);
  th_tensor *x = random_tensor(TH_F32, 2, ishape);
  int nout = 0;
  th_tensor **out = run_with(tr, with_fuser, 3, &x, 1, &nout);
  assert_int_equal(nout, 2);
  double *e = malloc(sizeof(double) * (size_t)C), *pp = malloc(sizeof(double) * (size_t)C);
  for (int64_t r = 0; r < R; r++) {
    double mx = -INFINITY, s = 0, q = 0;
    for (int64_t c = 0; c < C; c++) {
      int64_t ix[2] = {transposed ? c : r, transposed ? r : c};
      e[c] = elem(x, ix);
      if (e[c] > mx) mx = e[c];
    }
    for (int64_t c = 0; c < C; c++) s += (e[c] = exp((double)(float)(e[c] - mx)));
    for (int64_t c = 0; c < C; c++) {
      pp[c] = e[c] / s;
      q += pp[c] * pp[c];
    }
    for (int64_t c = 0; c < C; c++) {
      double got_e = th_tensor_get_f64(out[1], r * C + c), got = th_tensor_get_f64(out[0], r * C + c);
      if (fabs(got_e - e[c]) > 4e-7 * e[c] || fabs(got - pp[c] / q) > 2e-6 * (pp[c] / q))
        fail_msg("[%lld, %lld] of %s: e %.9g (want %.9g), out %.9g (want %.9g)", (long long)r, (long long)c, text,
                 got_e, e[c], got, pp[c] / q);
    }
  }
  free(e);
  free(pp);
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  th_tensor_release(x);
  th_trace_free(tr);
}

static void test_row_buffers(void **state) {
  (void)state;
  char text[2048];
  snprintf(text, sizeof text, rowbuf_trace, "[6, 1000]", "  x1 = prims.reshape(x, (6, 1000))\n", "(6, 1000)",
           "(6, 1000)", "(6, 1000)");
  th_trace *tr = parse(text);
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  /* two float buffers of 4096 (32 KiB per thread), one store and at least one load of each */
  const char *want[] = {"const int uc = ic && ninner <= 4096;", "if (uc) {", "] = v", " = rb"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(src, want[i])) {
      fprintf(stderr, "%s\n", src);
      fail_msg("missing `%s` in the source above", want[i]);
    }
  int nbuf = 0;
  for (const char *q = src; (q = strstr(q, "_Alignas(32) float rb")); q++) nbuf++;
  assert_int_equal(nbuf, 2);
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  th_trace_free(tr);
  rowbuf_case(6, 1000, false);   /* buffered */
  rowbuf_case(3, 20000, false);  /* rows over the buffer length: recomputed */
  rowbuf_case(1000, 6, true);    /* strided rows: recomputed */
  rowbuf_case(5, 4096, false);   /* exactly the buffer length */
  rowbuf_case(5, 4097, false);   /* one over: recomputed */
}

/* Compiles tr and returns how many bsyms its fusion regions hold (the execution trace must verify). */
static int count_fused(const th_trace *tr, const char *const *ex, int nex) {
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
      n += b->nsubs;
      assert_string_equal(th_bsym_executor(b), "fuser");
    }
  }
  th_program_free(p);
  return n;
}

/* One random case, names prefixed k<id>_: inputs a b c e of dtype dt over `shape` (c transposed in the
 * trace, e broadcast from size-1 dims), a chain of ops, a convert round trip. Appends its inputs' type
 * comments to `head`, its lines to `body`, its two outputs to `rets`; returns whether it has
 * transcendental ops (compared with a tolerance). */
typedef struct {
  th_dtype dt;
  int nd;
  int64_t shape[4], tshape[4], bshape[4];
  bool transc;
} dcase;

#define SB_ADD(buf, ...) snprintf((buf) + strlen(buf), sizeof(buf) - strlen(buf), __VA_ARGS__)

static char d_params[4096], d_head[16384], d_body[131072], d_rets[4096];

static void one_case(int id, dcase *c) {
  static const int64_t shapes[][4] = {{0}, {7}, {3, 5}, {1, 4}, {2, 0, 3}, {2, 3, 4}, {5, 1}, {33, 65}};
  static const int ndims[] = {0, 1, 2, 2, 3, 3, 2, 2};
  static const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16, TH_I64};
  int si = (int)(rnd() % 8);
  th_dtype dt = c->dt = dts[rnd() % 4];
  int nd = c->nd = ndims[si];
  for (int d = 0; d < nd; d++) {
    c->shape[d] = shapes[si][d];
    c->tshape[d] = shapes[si][nd - 1 - d];
    c->bshape[d] = (rnd() % 2) ? 1 : c->shape[d];
  }
  bool isint = dt == TH_I64;
  c->transc = false;
  char s1[64], s2[64], s3[64], perm[64], sh[64], bdims[64], P[16];
  snprintf(P, sizeof P, "k%d_", id);
  shape_str(s1, sizeof s1, nd, c->shape);
  shape_str(s2, sizeof s2, nd, c->tshape);
  shape_str(s3, sizeof s3, nd, c->bshape);
  int64_t pv[4], bd[4];
  for (int d = 0; d < nd; d++) pv[d] = nd - 1 - d, bd[d] = d;
  tuple_str(perm, sizeof perm, nd, pv);
  tuple_str(sh, sizeof sh, nd, c->shape);
  tuple_str(bdims, sizeof bdims, nd, bd);
  SB_ADD(d_params, "%s%sa, %sb, %sc, %se", d_params[0] ? ", " : "", P, P, P, P);
  SB_ADD(d_head, "  # %sa: \"cpu %s%s\"\n  # %sb: \"cpu %s%s\"\n  # %sc: \"cpu %s%s\"\n  # %se: \"cpu %s%s\"\n", P,
         dshort(dt), s1, P, dshort(dt), s1, P, dshort(dt), s2, P, dshort(dt), s3);
  SB_ADD(d_body, "  %sv0 = prims.transpose(%sc, %s)\n  %sv1 = prims.broadcast_in_dim(%se, %s, %s)\n", P, P, perm, P, P,
         sh, bdims);
  char vals[32][40];
  int nv = 4;
  snprintf(vals[0], sizeof vals[0], "%sa", P);
  snprintf(vals[1], sizeof vals[1], "%sb", P);
  snprintf(vals[2], sizeof vals[2], "%sv0", P);
  snprintf(vals[3], sizeof vals[3], "%sv1", P);
  th_dtype cdt = dt;
  if (dt == TH_BF16) { /* math prims take f32 and wider: compute in f32 between converts */
    for (int i = 0; i < 4; i++) {
      SB_ADD(d_body, "  %sf%d = prims.convert_element_type(%s, dtypes.float32)\n", P, i, vals[i]);
      snprintf(vals[i], sizeof vals[i], "%sf%d", P, i);
    }
    cdt = TH_F32;
  }
  int nops = 3 + (int)(rnd() % 6);
  for (int i = 0; i < nops; i++) {
    const char *x = vals[rnd() % (unsigned)nv], *y = vals[rnd() % (unsigned)nv];
    char buf[256];
    switch (rnd() % 9) {
      case 0: snprintf(buf, sizeof buf, "prims.add(%s, %s)", x, y); break;
      case 1: snprintf(buf, sizeof buf, "prims.sub(%s, %s)", x, y); break;
      case 2: snprintf(buf, sizeof buf, "prims.mul(%s, %s)", x, y); break;
      case 3: snprintf(buf, sizeof buf, "prims.neg(%s)", x); break;
      case 4: snprintf(buf, sizeof buf, isint ? "prims.mul(%s, 3)" : "prims.mul(%s, 0.1)", x); break;
      case 5:
        SB_ADD(d_body, "  %sp%d = prims.gt(%s, %s)\n", P, i, x, y);
        snprintf(buf, sizeof buf, "prims.where(%sp%d, %s, %s)", P, i, x, y);
        break;
      case 6:
        if (isint) snprintf(buf, sizeof buf, "prims.bitwise_xor(%s, %s)", x, y);
        else snprintf(buf, sizeof buf, "prims.tanh(%s)", x), c->transc = true;
        break;
      case 7: {
        th_dtype other = isint ? TH_F64 : cdt == TH_F64 ? TH_F32 : TH_BF16;
        SB_ADD(d_body, "  %sq%d = prims.convert_element_type(%s, dtypes.%s)\n", P, i, x, dname(other));
        snprintf(buf, sizeof buf, "prims.convert_element_type(%sq%d, dtypes.%s)", P, i, dname(cdt));
        break;
      }
      default:
        if (isint) snprintf(buf, sizeof buf, "prims.sign(%s)", x);
        else snprintf(buf, sizeof buf, "prims.exp(%s)", x), c->transc = true;
        break;
    }
    SB_ADD(d_body, "  %sw%d = %s\n", P, i, buf);
    snprintf(vals[nv++], sizeof vals[0], "%sw%d", P, i);
  }
  if (dt == TH_BF16) {
    SB_ADD(d_body, "  %sr0 = prims.convert_element_type(%s, dtypes.bfloat16)\n", P, vals[nv - 1]);
    snprintf(vals[nv++], sizeof vals[0], "%sr0", P);
  }
  SB_ADD(d_rets, "%s%s, %s", d_rets[0] ? ", " : "", vals[nv - 1], vals[nv > 5 ? nv - 2 : nv - 1]);
}

/* `ncases` random cases in one program (one compilation), fused vs eager. Returns the bsyms fused. */
static int differential_batch(int first, int ncases) {
  dcase cs[16];
  d_params[0] = d_head[0] = d_body[0] = d_rets[0] = 0;
  for (int i = 0; i < ncases; i++) one_case(first + i, &cs[i]);
  size_t n = strlen(d_params) + strlen(d_head) + strlen(d_body) + strlen(d_rets) + 64;
  char *text = malloc(n);
  snprintf(text, n, "def computation(%s):\n%s%s  return (%s)\n", d_params, d_head, d_body, d_rets);
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<cases>", &tr) != TH_OK) fail_msg("cases %d.. parse: %s\n%s", first, th_last_error(), text);
  th_tensor *in[64];
  for (int i = 0; i < ncases; i++) {
    in[4 * i] = random_tensor(cs[i].dt, cs[i].nd, cs[i].shape);
    in[4 * i + 1] = random_tensor(cs[i].dt, cs[i].nd, cs[i].shape);
    in[4 * i + 2] = random_tensor(cs[i].dt, cs[i].nd, cs[i].tshape);
    in[4 * i + 3] = random_tensor(cs[i].dt, cs[i].nd, cs[i].bshape);
  }
  static const char *const eager[] = {"eager"}, *const fused[] = {"fuser", "eager"};
  int n1 = 0, n2 = 0;
  th_tensor **r1 = run_with(tr, eager, 1, in, 4 * ncases, &n1);
  th_tensor **r2 = run_with(tr, fused, 2, in, 4 * ncases, &n2);
  int fused_bsyms = count_fused(tr, fused, 2);
  assert_int_equal(n1, n2);
  assert_int_equal(n1, 2 * ncases);
  for (int o = 0; o < n1; o++) {
    const dcase *c = &cs[o / 2];
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
      double tol = c->dt == TH_BF16 ? 1e-2 : 1e-5;
      if (!same && (!c->transc || !(fabs(x - y) <= tol * (1 + fabs(x)))))
        fail_msg("case %d output %d element %lld: eager %.17g, fuser %.17g\n%s", first + o / 2, o % 2, (long long)q,
                 x, y, text);
    }
    th_tensor_release(r1[o]);
    th_tensor_release(r2[o]);
  }
  free(r1);
  free(r2);
  for (int i = 0; i < 4 * ncases; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  free(text);
  return fused_bsyms;
}

/* 200 random cases in 20 programs: exact ops bit for bit, transcendental ones to a tolerance. */
static void test_differential(void **state) {
  (void)state;
  int fused = 0;
  for (int i = 0; i < 20; i++) fused += differential_batch(10 * i, 10);
  assert_true(fused > 200 * 4); /* most of the ~6 ops per case are fused */
}

static void test_cache_reused(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[3]\"\n"
                       "  t0 = prims.add(a, 0.123456789)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  assert_int_equal(count_fused(tr, fused, 2), 2);
  long c1 = th_fuser_stat_compiles(), h1 = th_fuser_stat_cache_hits();
  assert_int_equal(count_fused(tr, fused, 2), 2);
  long c2 = th_fuser_stat_compiles(), h2 = th_fuser_stat_cache_hits();
  assert_true(c1 - c0 + h1 - h0 == 1);
  assert_int_equal(c2, c1); /* the second compile hits the disk cache */
  assert_int_equal(h2, h1 + 1);
  th_trace_free(tr);
}

/* A $XDG_CACHE_HOME whose parents do not exist yet: the cache directory is made with its parents
 * (mkdir -p), mode 0700, and the kernel compiles into it. */
static void test_cache_dir_created(void **state) {
  (void)state;
  char root[512], xdg[600], dir[700];
  snprintf(root, sizeof root, "%s/fuser-nested-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(xdg, sizeof xdg, "%s/a/b", root);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  struct stat sb;
  assert_int_not_equal(stat(root, &sb), 0); /* fresh */
  setenv("XDG_CACHE_HOME", xdg, 1);
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[5]\"\n"
                       "  t0 = prims.add(a, 0.375)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  assert_int_equal(count_fused(tr, fused, 2), 2);
  th_trace_free(tr);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  assert_int_equal(stat(dir, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0700);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

static void test_sha256(void **state) {
  (void)state;
  uint8_t h[32];
  th_fuser_sha256("abc", 3, h);
  static const uint8_t want[4] = {0xba, 0x78, 0x16, 0xbf};
  assert_memory_equal(h, want, 4);
  assert_int_equal(h[31], 0xad);
}

/* signbit(neg(x)) over bf16 in a vectorized loop: gcc 12.2 used to stop with an internal compiler
 * error on the builtin (found by test_fuser_fuzz); the kernel must compile, fuse and give the sign bit
 * of every code (-0, NaN payloads and all), checked against the bf16 code's own top bit. */
static void test_signbit_vectorized(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu bf16[65536]\"\n"
                       "  t0 = ltorch.neg(a)\n  t1 = ltorch.signbit(t0)\n  return (t1,)\n");
  static const char *const fused[] = {"fuser", "eager"};
  assert_true(count_fused(tr, fused, 2) >= 2); /* neg and signbit (with their decompositions' converts) */
  int64_t n = 65536;
  th_tensor *a = th_tensor_new(TH_BF16, 1, &n);
  uint16_t *codes = th_tensor_data(a);
  for (int64_t i = 0; i < n; i++) codes[i] = (uint16_t)i; /* every bf16 code */
  int nout = 0, nout_e = 0;
  static const char *const eager[] = {"eager"};
  th_tensor **out = run_with(tr, fused, 2, &a, 1, &nout);
  th_tensor **ref = run_with(tr, eager, 1, &a, 1, &nout_e);
  assert_int_equal(nout, 1);
  assert_int_equal(nout_e, 1);
  const uint8_t *sb = th_tensor_data(out[0]), *sr = th_tensor_data(ref[0]);
  for (int64_t i = 0; i < n; i++) {
    bool nan = (codes[i] & 0x7f80) == 0x7f80 && (codes[i] & 0x7f);
    /* neg flips the sign bit of every non-NaN code; a NaN result is bf16's canonical 0x7fc0 (c10's
     * scalar rounding, as the eager executor stores it), so there the eager executor is the reference */
    int want = nan ? sr[i] : !((codes[i] >> 15) & 1);
    if (sb[i] != want || sr[i] != want)
      fail_msg("code 0x%04x: signbit(neg) fused %d, eager %d, want %d", (unsigned)codes[i], sb[i], sr[i], want);
  }
  th_tensor_release(ref[0]);
  free(ref);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(a);
  th_trace_free(tr);
}

/* prims.where in a fused loop is a bit select (the prelude's th_fz_where: a `?:` there kept gcc from
 * vectorizing the loop): every element is the exact bits of a or of b, NaN payloads and -0.0 included,
 * in each compute class (float for f32/bf16, double, int64, bool), with a computed predicate and a
 * constant operand, as eager computes them. */
static void test_where_select(void **state) {
  (void)state;
  static const char *const dts[] = {"f32", "bf16", "f64", "i64", "b8"};
  static const th_dtype tds[] = {TH_F32, TH_BF16, TH_F64, TH_I64, TH_BOOL};
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  for (int k = 0; k < 5; k++) {
    char text[800];
    snprintf(text, sizeof text,
             "def computation(p, a, b):\n  # p: \"cpu i32[4099]\"\n  # a: \"cpu %s[4099]\"\n  # b: \"cpu %s[4099]\"\n"
             "  t0 = prims.gt(p, 0)\n  t1 = prims.where(t0, a, b)\n  t2 = prims.lt(p, -1)\n"
             "  t3 = prims.where(t2, %s, t1)\n  return t3\n",
             dts[k], dts[k], tds[k] == TH_BOOL ? "True" : tds[k] == TH_I64 ? "7" : "-0.0");
    th_trace *tr = parse(text);
    assert_int_equal(count_fused(tr, fused, 2), 4);
    int64_t n = 4099;
    th_tensor *in[3] = {th_tensor_new(TH_I32, 1, &n), th_tensor_new(tds[k], 1, &n), th_tensor_new(tds[k], 1, &n)};
    int32_t *pd = th_tensor_data(in[0]);
    size_t es = th_dtype_size(tds[k]);
    unsigned char *ad = th_tensor_data(in[1]), *bd = th_tensor_data(in[2]);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
      pd[i] = (int32_t)(i % 5) - 2; /* -2 -1 0 1 2: b, b, b, a, a; -2 also takes the constant */
      for (size_t j = 0; j < es; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        ad[i * es + j] = (unsigned char)(r >> 56);
        bd[i * es + j] = (unsigned char)(r >> 48);
      }
      if (tds[k] == TH_BOOL) ad[i] &= 1, bd[i] &= 1;
      if (tds[k] == TH_F32 && i % 7 == 0) memcpy(ad + i * es, &(uint32_t){0x7fa00001u + (uint32_t)i}, 4); /* NaN payloads */
      if (tds[k] == TH_F32 && i % 11 == 0) memcpy(bd + i * es, &(uint32_t){0x80000000u}, 4);              /* -0.0 */
    }
    int nout = 0, nref = 0;
    th_tensor **out = run_with(tr, fused, 2, in, 3, &nout), **ref = run_with(tr, eager, 1, in, 3, &nref);
    assert_int_equal(nout, 1);
    const unsigned char *o = th_tensor_data(out[0]), *e = th_tensor_data(ref[0]);
    for (int64_t i = 0; i < n; i++) {
      /* the expected bits straight from the inputs, except the constant: eager's value for it */
      const unsigned char *want = pd[i] < -1 ? e + i * es : pd[i] > 0 ? ad + i * es : bd + i * es;
      if (tds[k] == TH_BF16 && (want[1] & 0x7f) == 0x7f && (want[0] & 0x80) && (want[0] & 0x7f))
        want = e + i * es; /* a bf16 NaN is stored as c10's canonical NaN (eager and fused alike) */
      if (memcmp(o + i * es, want, es) || memcmp(e + i * es, want, es))
        fail_msg("where %s, element %lld (p = %d): fused %02x%02x, eager %02x%02x, a %02x%02x, b %02x%02x", dts[k],
                 (long long)i, pd[i], o[i * es + es - 1], o[i * es], e[i * es + es - 1], e[i * es], ad[i * es + es - 1],
                 ad[i * es], bd[i * es + es - 1], bd[i * es]);
      if (pd[i] < -1 && tds[k] != TH_BOOL && tds[k] != TH_I64) { /* -0.0: only the sign bit set */
        bool neg0 = true;
        for (size_t j = 0; j < es; j++) neg0 &= o[i * es + j] == (j + 1 == es ? 0x80 : 0);
        assert_true(neg0);
      }
    }
    th_tensor_release(out[0]);
    th_tensor_release(ref[0]);
    free(out);
    free(ref);
    for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
  }
}

/* The tanh GELU's tail x * 0.5 * (1 + tanh(z)) is emitted as x / (1 + e^(-2z)) (codegen's algebraic
 * rewrite) in every operand order, also when an intermediate is a region output too, and never for
 * another constant. Against float64 x sigmoid(2z) (z: the exact float32 argument eager computes) the
 * fused result is within 3 ulp wherever it is normal, where eager's product form loses its digits near
 * tanh(z) = -1; where tanh(z) rounds to +-1 the bits are eager's (x, -0, NaN for -inf). */
static void test_gelu_tanh_tail(void **state) {
  (void)state;
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  static const char *const tails[] = {
      "  t6 = prims.add(1.0, t5)\n  t7 = prims.mul(0.5, x)\n  t8 = prims.mul(t7, t6)\n  return (t8, t4)\n",
      "  t6 = prims.add(t5, 1.0)\n  t7 = prims.mul(x, 0.5)\n  t8 = prims.mul(t6, t7)\n  return (t8, t4)\n",
      "  t6 = prims.add(1.0, t5)\n  t7 = prims.mul(0.5, x)\n  t8 = prims.mul(t7, t6)\n  return (t8, t4, t6)\n",
      "  t6 = prims.add(1.0, t5)\n  t7 = prims.mul(0.25, x)\n  t8 = prims.mul(t7, t6)\n  return (t8, t4)\n",
  };
  enum { N = 20011 };
  int64_t n = N;
  th_tensor *in = th_tensor_new(TH_F32, 1, &n);
  float *xd = th_tensor_data(in);
  for (int i = 0; i < N - 6; i++) xd[i] = -16.0f + 24.0f * (float)i / (float)(N - 7); /* through z = -9.01 */
  const float sp[6] = {-INFINITY, INFINITY, NAN, -0.0f, -1e30f, 3e38f};
  memcpy(xd + N - 6, sp, sizeof sp);
  for (int k = 0; k < 4; k++) {
    char text[1200];
    snprintf(text, sizeof text,
             "def computation(x):\n  # x: \"cpu f32[%d]\"\n  t0 = prims.mul(x, x)\n  t1 = prims.mul(t0, x)\n"
             "  t2 = prims.mul(0.044715, t1)\n  t3 = prims.add(x, t2)\n  t4 = prims.mul(0.7978845608028654, t3)\n"
             "  t5 = prims.tanh(t4)\n%s",
             N, tails[k]);
    th_trace *tr = parse(text);
    th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
    th_fuser_region r;
    char *src = region_source(p, &r);
    bool rewritten = strstr(src, "th_m_x_sigmoid2f(") != NULL;
    if (rewritten != (k < 3)) fail_msg("tail %d: th_m_x_sigmoid2f %s in\n%s", k, rewritten ? "used" : "missing", src);
    free(src);
    th_fuser_region_clear(&r);
    th_trace_free(p);
    int nout = 0, nref = 0;
    th_tensor **out = run_with(tr, fused, 2, &in, 1, &nout), **ref = run_with(tr, eager, 1, &in, 1, &nref);
    const float *o = th_tensor_data(out[0]), *e = th_tensor_data(ref[0]), *z = th_tensor_data(ref[1]);
    assert_memory_equal(th_tensor_data(out[1]), z, sizeof(float) * N); /* the argument: exact ops, same bits */
    if (nout == 3) { /* 1 + tanh(z) itself still computed (mathlib's tanh against eager's: an ulp of 1 apart) */
      const float *o6 = th_tensor_data(out[2]), *e6 = th_tensor_data(ref[2]);
      for (int i = 0; i < N; i++)
        if (!(fabsf(o6[i] - e6[i]) <= 0x1p-23f) && !(isnan(o6[i]) && isnan(e6[i])))
          fail_msg("1 + tanh(z) at x = %a: fused %a, eager %a", xd[i], o6[i], e6[i]);
    }
    double c = k == 3 ? 0.25 : 0.5, worst_fused = 0, worst_eager = 0;
    for (int i = 0; i < N; i++) {
      double want = (double)xd[i] * (2 * c) / (1 + exp(-2 * (double)z[i])); /* x c (1 + tanh z) */
      bool tie = fabsf(z[i]) > 0x1.205966p+3f || isnan(z[i]); /* tanh(z) rounds to +-1 (2|z| >= 26 ln 2) */
      if (tie || k == 3) {
        if (tie && k < 3 && memcmp(&o[i], &e[i], 4) && !(isnan(o[i]) && isnan(e[i])))
          fail_msg("tail %d, x = %a: fused %a, eager %a (tanh(z) rounds to +-1)", k, xd[i], o[i], e[i]);
        continue;
      }
      if (!isfinite(want) || fabs(want) < 0x1p-126) continue;
      double u = ldexp(1.0, ilogb(want) - 23);
      worst_fused = fmax(worst_fused, fabs(o[i] - want) / u);
      worst_eager = fmax(worst_eager, fabs(e[i] - want) / u);
    }
    if (k < 3) {
      if (worst_fused > 3) fail_msg("tail %d: fused %.2f ulp from x sigmoid(2z)", k, worst_fused);
      assert_true(worst_eager > 1000); /* the cancellation the rewrite avoids: eager's product form */
    }
    for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
    for (int i = 0; i < nref; i++) th_tensor_release(ref[i]);
    free(out);
    free(ref);
    th_trace_free(tr);
  }
  th_tensor_release(in);
}

/* Broadcast sinking (passes.c): causal attention's mask, `eq(bias, 0)` on [1, 1, T, T] broadcast to
 * [B, H, T, T] for a where, is recomputed after the broadcast, so the scaling, the mask and the softmax
 * are one region (before: the scaled scores were a region's output, written and read back). Not sunk:
 * an expensive op (exp) before the broadcast, and a broadcast whose only consumer is not fusible (a
 * matmul). Outputs against the eager executor: the exact parts bit for bit, the softmax within 1e-6. */
static void test_broadcast_sinking(void **state) {
  (void)state;
  static const char *const fused[] = {"fuser", "blas", "eager"}, *const eager[] = {"blas", "eager"};
  th_trace *tr = parse("def computation(x, bias, e):\n  # x: \"cpu f32[2, 3, 16, 16]\"\n"
                       "  # bias: \"cpu f32[1, 1, 16, 16]\"\n  # e: \"cpu f32[3, 16, 16]\"\n"
                       "  s = prims.mul(x, 0.25)\n  m = prims.eq(bias, 0.0)\n"
                       "  mb = prims.broadcast_in_dim(m, (2, 3, 16, 16), (0, 1, 2, 3))\n"
                       "  w = prims.where(mb, -float('inf'), s)\n  t0 = prims.amax(w, (3,))\n"
                       "  t1 = prims.broadcast_in_dim(t0, (2, 3, 16, 16), (0, 1, 2))\n  t2 = prims.sub(w, t1)\n"
                       "  t3 = prims.exp(t2)\n  t4 = prims.sum(t3, (3,))\n"
                       "  t5 = prims.broadcast_in_dim(t4, (2, 3, 16, 16), (0, 1, 2))\n  y = prims.div(t3, t5)\n"
                       "  ee = prims.exp(e)\n  eb = prims.broadcast_in_dim(ee, (2, 3, 16, 16), (1, 2, 3))\n"
                       "  z = prims.add(eb, x)\n  c = prims.neg(bias)\n"
                       "  cb = prims.broadcast_in_dim(c, (2, 3, 16, 16), (0, 1, 2, 3))\n"
                       "  mm = prims.matmul(cb, x)\n  return (y, w, z, mm)\n");
  th_program *p = compile_with(tr, fused, 3);
  const th_trace *et = th_program_trace(p);
  /* the attention part is one region holding the eq (sunk) and the mul; exp(e) and the matmul's
   * neg(bias) stay unsunk: exp(e) is a region member of its own nest or eager, neg(bias) is not moved */
  assert_int_equal(count_in_regions(et, TH_OP_prims_eq), 1);
  assert_int_equal(count_in_regions(et, TH_OP_prims_mul), 1);
  const th_bsym *att = NULL;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    bool has_eq = false, has_sum = false;
    for (int j = 0; j < b->nsubs; j++) {
      has_eq |= b->subs[j]->sym->id == TH_OP_prims_eq;
      has_sum |= b->subs[j]->sym->id == TH_OP_prims_sum;
    }
    if (has_eq) {
      assert_true(has_sum); /* the mask is computed in the softmax's region */
      att = b;
      /* the eq reads a broadcast of the input bias (and no computed value is broadcast to it) */
      for (int j = 0; j < b->nsubs; j++)
        if (b->subs[j]->sym->id == TH_OP_prims_eq) {
          const th_value *a = b->subs[j]->args[0].u.value;
          assert_int_equal(th_value_ndim(a), 4);
          assert_int_equal(th_value_shape(a)[0], 2);
        }
    }
  }
  assert_non_null(att);
  /* exp(e) and neg(bias) still run on their own shapes (3-D / [1, 1, 16, 16]), wherever they run */
  int exp_e = 0, neg = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    int n = b->sym->id == TH_OP_DYNAMIC ? b->nsubs : 1;
    for (int j = 0; j < n; j++) {
      const th_bsym *x = b->sym->id == TH_OP_DYNAMIC ? b->subs[j] : b;
      const th_value *o = x->out.kind == TH_ARG_VALUE ? x->out.u.value : NULL;
      if (x->sym->id == TH_OP_prims_exp && th_value_ndim(x->args[0].u.value) == 3) exp_e += th_value_ndim(o) == 3;
      if (x->sym->id == TH_OP_prims_exp) assert_true(th_value_ndim(x->args[0].u.value) == th_value_ndim(o));
      if (x->sym->id == TH_OP_prims_neg) neg += th_value_shape(o)[0] == 1;
      if (x->sym->id == TH_OP_prims_neg) assert_int_equal(th_value_shape(o)[0], 1);
    }
  }
  assert_int_equal(exp_e, 1);
  assert_int_equal(neg, 1);
  th_program_free(p);
  th_tensor *in[3];
  int64_t sx[4] = {2, 3, 16, 16}, sb[4] = {1, 1, 16, 16}, se[3] = {3, 16, 16};
  in[0] = th_tensor_new(TH_F32, 4, sx);
  in[1] = th_tensor_new(TH_F32, 4, sb);
  in[2] = th_tensor_new(TH_F32, 3, se);
  float *xd = th_tensor_data(in[0]), *bd = th_tensor_data(in[1]), *ed = th_tensor_data(in[2]);
  for (int i = 0; i < 2 * 3 * 16 * 16; i++) xd[i] = (float)((i * 37) % 101) / 25.0f - 2.0f;
  for (int i = 0; i < 16 * 16; i++) bd[i] = (i % 16) <= (i / 16) ? 1.0f : 0.0f; /* a causal tril */
  for (int i = 0; i < 3 * 16 * 16; i++) ed[i] = (float)(i % 7) / 7.0f;
  int nf = 0, ne = 0;
  th_tensor **of = run_with(tr, fused, 3, in, 3, &nf), **oe = run_with(tr, eager, 2, in, 3, &ne);
  assert_int_equal(nf, 4);
  assert_memory_equal(th_tensor_data(of[1]), th_tensor_data(oe[1]), sizeof(float) * 2 * 3 * 16 * 16); /* w: exact */
  assert_memory_equal(th_tensor_data(of[3]), th_tensor_data(oe[3]), sizeof(float) * 2 * 3 * 16 * 16); /* matmul */
  const float *yf = th_tensor_data(of[0]), *ye = th_tensor_data(oe[0]), *zf = th_tensor_data(of[2]),
              *ze = th_tensor_data(oe[2]);
  for (int i = 0; i < 2 * 3 * 16 * 16; i++) {
    if (!(fabsf(yf[i] - ye[i]) <= 1e-6f)) fail_msg("softmax element %d: fused %g, eager %g", i, yf[i], ye[i]);
    if (!(fabsf(zf[i] - ze[i]) <= 1e-6f * fabsf(ze[i]))) fail_msg("exp(e) + x element %d: fused %g, eager %g", i, zf[i], ze[i]);
    if ((i % 16) > ((i / 16) % 16)) assert_true(yf[i] == 0.0f); /* masked: exactly 0 */
  }
  for (int i = 0; i < 4; i++) th_tensor_release(of[i]), th_tensor_release(oe[i]);
  free(of);
  free(oe);
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  /* an operand used twice is sunk once: 10 chained `t = add(t, t)` (and where(t, t, t)) give 10 adds
   * after the broadcast, not 2^8 (before: 256 broadcasts and 255 adds; 3^8 for the where chain) */
  char text[2048] = "def computation(a, c, m):\n  # a: \"cpu f32[4]\"\n  # c: \"cpu f32[5, 4]\"\n  # m: \"cpu b8[4]\"\n"
                    "  t0 = prims.add(a, a)\n  w0 = prims.where(m, m, m)\n";
  for (int k = 1; k < 10; k++)
    snprintf(text + strlen(text), sizeof text - strlen(text), "  t%d = prims.add(t%d, t%d)\n  w%d = prims.where(w%d, w%d, w%d)\n",
             k, k - 1, k - 1, k, k - 1, k - 1, k - 1);
  snprintf(text + strlen(text), sizeof text - strlen(text),
           "  b = prims.broadcast_in_dim(t9, (5, 4), (1,))\n  wb = prims.broadcast_in_dim(w9, (5, 4), (1,))\n"
           "  y = prims.add(b, c)\n  z = prims.where(wb, y, c)\n  return z\n");
  tr = parse(text);
  p = compile_with(tr, fused, 3);
  et = th_program_trace(p);
  int nadd = count_in_regions(et, TH_OP_prims_add) + count_id(et, TH_OP_prims_add),
      nwhere = count_in_regions(et, TH_OP_prims_where) + count_id(et, TH_OP_prims_where);
  if (nadd > 12 || nwhere > 12) fail_msg("sinking duplicated shared operands: %d adds, %d wheres", nadd, nwhere);
  th_program_free(p);
  th_trace_free(tr);
}

/* A read whose inner dims reach only stride-0 dims of its view chain (a per-row input broadcast along the
 * rows, a [R, 1] input expanded) is loaded once per row (per chunk in a pointwise nest) and does not
 * disable the nest's contiguous fast path (before, its stride 0 failed the `T == 1` test and every loop
 * of the nest ran strided and scalar). Checked in the source (the load `p<s>[b<s>]`, no stride test of
 * that slot), and the results bit for bit against eager (exact ops), also for rows of length 0. */
static void inv_case(const char *text, const char *const *names, int nnames, const int64_t (*shapes)[3],
                     const int *ndims, bool check_source) {
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  th_trace *tr = parse(text);
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  for (int i = 0; i < r.nslots && check_source; i++) { /* (a size-0 dim may read as invariant: nothing is read) */
    if (r.slots[i].is_out) continue;
    bool inv = false;
    for (int k = 0; k < nnames; k++) inv |= !strcmp(th_value_name(r.slots[i].v), names[k]);
    const th_fz_nest *N = &r.nests[r.slots[i].nest];
    char load[64], stride[64];
    snprintf(load, sizeof load, "p%d[b%d]", i, i); /* a strided or contiguous load is p<s>[b<s> + ...] */
    snprintf(stride, sizeof stride, "T[%d] ==", i * TH_MAX_DIMS + N->nd - 1);
    if (inv != (strstr(src, load) != NULL) || inv == (strstr(src, stride) != NULL))
      fail_msg("slot %d (%s, %s): expected %s\n%s", i, th_value_name(r.slots[i].v), inv ? "invariant" : "not",
               inv ? "a per-row load and no stride test" : "a strided load", src);
  }
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  int nin = th_trace_num_inputs(tr);
  th_tensor *in[8];
  assert_true(nin <= 8);
  for (int i = 0; i < nin; i++) {
    in[i] = th_tensor_new(TH_F32, ndims[i], shapes[i]);
    float *d = th_tensor_data(in[i]);
    for (int64_t e = 0; e < th_tensor_numel(in[i]); e++) d[e] = (float)((e * 7 + i * 13) % 23) * 0.25f - 2.0f;
  }
  int nf = 0, ne = 0;
  th_tensor **of = run_with(tr, fused, 2, in, nin, &nf), **oe = run_with(tr, eager, 1, in, nin, &ne);
  assert_int_equal(nf, ne);
  for (int i = 0; i < nf; i++)
    assert_memory_equal(th_tensor_data(of[i]), th_tensor_data(oe[i]), (size_t)th_tensor_numel(oe[i]) * 4);
  for (int i = 0; i < nf; i++) th_tensor_release(of[i]), th_tensor_release(oe[i]);
  free(of);
  free(oe);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

static void test_invariant_reads(void **state) {
  (void)state;
  static const char *const rows_names[] = {"r", "e", "q"};
  char text[2048];
  for (int c = 0; c < 2; c++) {
    int64_t n = c ? 0 : 50; /* rows of length 0 read nothing */
    snprintf(text, sizeof text,
             "def computation(x, r, e, w, q):\n  # x: \"cpu f32[37, %lld]\"\n  # r: \"cpu f32[37]\"\n"
             "  # e: \"cpu f32[37, 1]\"\n  # w: \"cpu f32[%lld]\"\n  # q: \"cpu f32[37]\"\n"
             "  rb = prims.broadcast_in_dim(r, (37, %lld), (0,))\n  eb = prims.broadcast_in_dim(e, (37, %lld), (0, 1))\n"
             "  wb = prims.broadcast_in_dim(w, (37, %lld), (1,))\n  q1 = prims.reshape(q, (37, 1))\n"
             "  qb = prims.broadcast_in_dim(q1, (37, %lld), (0, 1))\n  t0 = prims.sub(x, rb)\n  t1 = prims.mul(t0, eb)\n"
             "  t2 = prims.add(t1, wb)\n  t3 = prims.mul(t2, qb)\n  s = prims.sum(t3, (1,))\n"
             "  sb = prims.broadcast_in_dim(s, (37, %lld), (0,))\n  y = prims.sub(t3, sb)\n  return (y, s)\n",
             (long long)n, (long long)n, (long long)n, (long long)n, (long long)n, (long long)n, (long long)n);
    const int64_t shapes[5][3] = {{37, n}, {37}, {37, 1}, {n}, {37}};
    const int ndims[5] = {2, 1, 2, 1, 1};
    inv_case(text, rows_names, 3, shapes, ndims, n > 0);
  }
  /* pointwise: a per-row input along the last dim of a 3-D domain, through a transpose */
  static const char *const pw_names[] = {"r"};
  const int64_t shapes[2][3] = {{4, 9, 33}, {9, 4}};
  const int ndims[2] = {3, 2};
  inv_case("def computation(x, r):\n  # x: \"cpu f32[4, 9, 33]\"\n  # r: \"cpu f32[9, 4]\"\n"
           "  rt = prims.transpose(r, (1, 0))\n  rb = prims.broadcast_in_dim(rt, (4, 9, 33), (0, 1))\n"
           "  t0 = prims.mul(x, rb)\n  y = prims.add(t0, 1.0)\n  return y\n",
           pw_names, 1, shapes, ndims, true);
}

/* The next row's prefetches (codegen.c, row_loop): spread in chunks over the pass that computes a
 * row-buffered value that calls a function (softmax's exp, pass 2: reads with rw = 0, the output with
 * rw = 1), else over the output pass (a buffered division included); no other pass prefetches. Results against the eager executor over row lengths around
 * the 256-element chunk, past the 16 KiB limit (no prefetch) and transposed (the strided path). */
static char *section(const char *src, const char *from, const char *to) {
  const char *a = strstr(src, from), *b = to ? strstr(src, to) : src + strlen(src);
  if (!a || !b || b < a) fail_msg("no section %s .. %s in\n%s", from, to ? to : "(end)", src);
  return strndup(a, (size_t)(b - a));
}

static void pf_case(const char *body, const char *pf_from, const char *pf_to, bool bitwise) {
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  static const int64_t shapes[][2] = {{7, 1}, {7, 63}, {7, 64}, {5, 65}, {3, 255}, {3, 256}, {4, 257}, {3, 1000}, {2, 5000}, {1, 100}, {9, 130}};
  for (int c = 0; c < (int)(sizeof shapes / sizeof *shapes) + 1; c++) {
    bool tr_in = c == (int)(sizeof shapes / sizeof *shapes); /* last: x transposed (strided rows) */
    int64_t R = tr_in ? 6 : shapes[c][0], C = tr_in ? 70 : shapes[c][1];
    char text[1024];
    if (tr_in)
      snprintf(text, sizeof text, "def computation(xt):\n  # xt: \"cpu f32[%lld, %lld]\"\n"
               "  x = prims.transpose(xt, (1, 0))\n%s", (long long)C, (long long)R, body);
    else
      snprintf(text, sizeof text, "def computation(x):\n  # x: \"cpu f32[%lld, %lld]\"\n%s", (long long)R, (long long)C, body);
    for (int k = 0; k < 2; k++) { /* the shape placeholders RR and CC */
      char *at;
      while ((at = strstr(text, k ? "CC" : "RR"))) {
        char num[24];
        int n = snprintf(num, sizeof num, "%lld", (long long)(k ? C : R));
        memmove(at + n, at + 2, strlen(at + 2) + 1);
        memcpy(at, num, (size_t)n);
      }
    }
    th_trace *tr = parse(text);
    if (C == 64) { /* the structure (a [7, 1] trace folds differently) */
      th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
      th_fuser_region r;
      char *src = region_source(p, &r);
      char *in = section(src, pf_from, pf_to), *before = section(src, "/* pass 1 */", pf_from);
      /* a chunk of 256 floats: 16 lines of 64 bytes each, for reading (x) and for writing (y) */
      assert_non_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 0, 0, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 960, 0, 3)"));
      assert_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 1024, 0, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf1 + jb * 4 + 0, 1, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf1 + jb * 4 + 960, 1, 3)"));
      assert_null(strstr(before, "__builtin_prefetch"));
      /* rows shorter than one chunk share pages: no next-row prefetch for them */
      assert_non_null(strstr(src, "T[0] == ninner && ninner >= 256 && "));
      if (pf_to) {
        char *after = section(src, pf_to, NULL);
        assert_null(strstr(after, "__builtin_prefetch"));
        free(after);
      }
      free(in), free(before), free(src);
      th_fuser_region_clear(&r);
      th_trace_free(p);
    }
    int64_t shp[2] = {tr_in ? C : R, tr_in ? R : C};
    th_tensor *x = th_tensor_new(TH_F32, 2, shp);
    float *d = th_tensor_data(x);
    for (int64_t e = 0; e < R * C; e++) d[e] = (float)((e * 7 + 3) % 23) * 0.25f - 2.0f;
    int nf = 0, ne = 0;
    th_tensor **of = run_with(tr, fused, 2, &x, 1, &nf), **oe = run_with(tr, eager, 1, &x, 1, &ne);
    assert_int_equal(nf, 1);
    assert_int_equal(ne, 1);
    const float *f = th_tensor_data(of[0]), *g = th_tensor_data(oe[0]);
    for (int64_t e = 0; e < R * C; e++)
      if (bitwise ? memcmp(f + e, g + e, 4) != 0 : fabsf(f[e] - g[e]) > 2e-6f * fabsf(g[e]))
        fail_msg("[%lld, %lld]%s element %lld: fused %a, eager %a", (long long)R, (long long)C, tr_in ? " (transposed)" : "",
                 (long long)e, f[e], g[e]);
    th_tensor_release(of[0]), th_tensor_release(oe[0]), th_tensor_release(x);
    free(of), free(oe);
    th_trace_free(tr);
  }
}

static void test_row_prefetch(void **state) {
  (void)state;
  /* softmax: max (pass 1), exp kept in a row buffer and summed (pass 2), the division (outputs) */
  pf_case("  m = prims.amax(x, (1,))\n  mb = prims.broadcast_in_dim(m, (RR, CC), (0,))\n  t = prims.sub(x, mb)\n"
          "  e = prims.exp(t)\n  s = prims.sum(e, (1,))\n  sb = prims.broadcast_in_dim(s, (RR, CC), (0,))\n"
          "  y = prims.div(e, sb)\n  return y\n",
          "/* pass 2 */", "/* the outputs */", false);
  /* a row-buffered division is not enough work to hide the chunks' reduction epilogues: the output pass */
  pf_case("  d = prims.div(x, 4.0)\n  s = prims.sum(d, (1,))\n  sb = prims.broadcast_in_dim(s, (RR, CC), (0,))\n"
          "  y = prims.sub(d, sb)\n  return y\n",
          "/* the outputs */", NULL, true);
  /* no row buffer: centring by the row mean prefetches in the output pass (sums of quarters are exact) */
  pf_case("  s = prims.sum(x, (1,))\n  m = prims.div(s, 4.0)\n  mb = prims.broadcast_in_dim(m, (RR, CC), (0,))\n"
          "  y = prims.sub(x, mb)\n  return y\n",
          "/* the outputs */", NULL, true);
}

static int count_files(const char *dir, const char *prefix, const char *suffix);

/* $CC with arguments (make's convention: split at blanks) compiles; the flag reaches the compiler
 * (an -include of a missing file makes the compile fail, naming the whole $CC). */
static void test_cc_with_arguments(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n"
                       "  t0 = prims.add(a, 2.25)\n  t1 = prims.mul(t0, a)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  char *old = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", "cc  -DTHUNDER_UNUSED_FLAG=1", 1);
  assert_int_equal(count_fused(tr, fused, 2), 2);
  setenv("CC", "cc -include /nonexistent/thunder-test.h", 1); /* the compiler runs and fails */
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "cc -include /nonexistent/thunder-test.h failed"));
  if (old) setenv("CC", old, 1);
  else unsetenv("CC");
  free(old);
  th_trace_free(tr);
}

/* A damaged cache entry (an emptied .so, as a full disk or a killed copy leaves it) is rebuilt, not
 * reported forever: a child process fills a fresh cache, the entry is truncated, this process (which
 * never loaded it) compiles the same unit again. */
static void test_damaged_cache_entry(void **state) {
  (void)state;
  char xdg[400], dir[440];
  snprintf(xdg, sizeof xdg, "%.300s/fuser-damaged-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char *text = "def computation(a):\n  # a: \"cpu f64[4]\"\n"
                     "  t0 = prims.add(a, 0.8125)\n  t1 = prims.mul(t0, t0)\n  return t1\n";
  static const char *const fused[] = {"fuser", "eager"};
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    th_trace *t = NULL;
    th_compile_options o;
    memset(&o, 0, sizeof o);
    o.executors = fused;
    o.nexecutors = 2;
    th_program *p = NULL;
    int ok = th_trace_parse(text, "<child>", &t) == TH_OK && th_program_compile(t, &o, &p) == TH_OK;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "for f in '%s'/fusion-*.so; do : > \"$f\"; done", dir);
  assert_int_equal(system(cmd), 0);
  th_trace *tr = parse(text);
  long c0 = th_fuser_stat_compiles();
  int64_t n = 4;
  th_tensor *a = th_tensor_new(TH_F64, 1, &n);
  for (int i = 0; i < 4; i++) ((double *)th_tensor_data(a))[i] = i;
  int nout = 0;
  th_tensor **out = run_with(tr, fused, 2, &a, 1, &nout);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1); /* rebuilt */
  assert_true(th_tensor_get_f64(out[0], 3) == 3.8125 * 3.8125);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(a);
  th_trace_free(tr);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
  assert_int_equal(system(cmd), 0);
}

static void test_missing_compiler(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n"
                       "  t0 = prims.add(a, 7.5)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  th_trace *lone = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n  t0 = prims.add(a, 7.5)\n  return t0\n");
  static const char *const fused[] = {"fuser", "eager"}, *const unfused[] = {"blas", "eager"};
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
  assert_int_equal(th_program_compile(tr, NULL, &p), TH_ERR_NOT_IMPLEMENTED); /* the default list fuses */
  /* a program without regions needs no compiler; blas,eager runs everything */
  assert_int_equal(th_program_compile(lone, &o, &p), TH_OK);
  th_program_free(p);
  o.executors = unfused;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  int64_t shape[1] = {3};
  th_tensor *a = th_tensor_empty(TH_F32, 1, shape), **out = NULL;
  for (int i = 0; i < 3; i++) ((float *)th_tensor_data(a))[i] = (float)i;
  int nout = 0;
  assert_int_equal(th_program_run(p, 1, &a, &nout, &out), TH_OK);
  assert_true(th_tensor_get_f64(out[0], 2) == 9.5 * 9.5);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(a);
  th_program_free(p);
  if (old) setenv("CC", old, 1);
  else unsetenv("CC");
  free(old);
  th_trace_free(lone);
  th_trace_free(tr);
}

static int count_files(const char *dir, const char *prefix, const char *suffix) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c '^%s.*%s$'", dir, prefix, suffix);
  FILE *f = popen(cmd, "r");
  int n = -1;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
  }
  return n;
}

/* ---- the cache's bound ---- */
static void make_kernel_file(const char *dir, const char *name, size_t bytes, time_t age_s) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < bytes; i++) fputc((int)(i * 131 % 251) + 1, f); /* written: blocks allocated */
  fclose(f);
  struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool file_there(const char *dir, const char *name, struct stat *st) {
  char path[700];
  struct stat tmp;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, st ? st : &tmp) == 0;
}

static th_status compile_text(const char *text) {
  th_trace *tr = parse(text);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  th_program *p = NULL;
  th_status st = th_program_compile(tr, &o, &p);
  th_program_free(p);
  th_trace_free(tr);
  return st;
}

/* THUNDER_CACHE_MAX_MB bounds the kernel cache: after a build over the bound, the least recently used
 * kernels go (oldest mtime first, stopping as soon as the kernels fill at most 80% of the bound), never
 * one used within the last minute nor a file that is not a kernel; temporary files a day old go too. The
 * running estimate (trim.txt) spares builds under the bound a scan, and an hour-old one is rescanned. A
 * hit marks its entry used; 0 means no bound; a value that is not a whole number of MiB is TH_ERR_VALUE. */
static void test_cache_bound(void **state) {
  (void)state;
  char xdg[400], dir[440];
  snprintf(xdg, sizeof xdg, "%.300s/fuser-bound-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", xdg, dir);
  assert_int_equal(system(cmd), 0);
  setenv("XDG_CACHE_HOME", xdg, 1);
  /* six stale kernels of 256 KiB, fake0 the least recently used, one used 10 s ago, and bystanders */
  enum { NFAKE = 6 };
  char fake[NFAKE][32];
  for (int k = 0; k < NFAKE; k++) {
    snprintf(fake[k], sizeof fake[k], "fusion-fake%d.so", k);
    make_kernel_file(dir, fake[k], 256 << 10, 10 * 86400 - 3600 * k);
  }
  make_kernel_file(dir, "fusion-fresh.so", 256 << 10, 10);
  make_kernel_file(dir, "tmp-crashed.c", 100, 2 * 86400);
  make_kernel_file(dir, "tmp-busy.c", 100, 30);
  make_kernel_file(dir, "cc-0123.txt", 100, 30 * 86400);
  make_kernel_file(dir, "notes.txt", 300 << 10, 30 * 86400);
  struct stat st;
  long long fake_bytes[NFAKE];
  for (int k = 0; k < NFAKE; k++) {
    assert_true(file_there(dir, fake[k], &st));
    fake_bytes[k] = (long long)st.st_blocks * 512;
  }
  assert_true(file_there(dir, "fusion-fresh.so", &st));
  long long fresh_bytes = (long long)st.st_blocks * 512;

  const char *prog = "def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.625)\n"
                     "  t1 = prims.mul(t0, t0)\n  return t1\n";
  /* a bad bound is refused before anything is looked up or built */
  static const char *const bad[] = {"abc", " 5", "-1", "5MB", "1e3", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("THUNDER_CACHE_MAX_MB", bad[i], 1);
    assert_int_equal(compile_text(prog), TH_ERR_VALUE);
    char want[200];
    snprintf(want, sizeof want, "THUNDER_CACHE_MAX_MB: expected the kernel cache's bound in MiB, an integer from 0 "
                                "(no bound) to 1073741824, got '%s'", bad[i]);
    if (!strstr(th_last_error(), want)) fail_msg("'%s': %s", bad[i], th_last_error());
  }
  assert_int_equal(count_files(dir, "fusion-", ".so"), NFAKE + 1);

  /* no bound: a build removes nothing */
  setenv("THUNDER_CACHE_MAX_MB", "0", 1);
  long c0 = th_fuser_stat_compiles();
  assert_int_equal(compile_text(prog), TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1);
  assert_int_equal(count_files(dir, "fusion-", ".so"), NFAKE + 2);
  assert_true(file_there(dir, "tmp-crashed.c", NULL)); /* without a bound the cache is not even scanned */

  /* 1 MiB: another build trims the least recently used */
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.75)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 2);
  /* the two real kernels, the fresh one and the bystanders stay; the stale ones go oldest first */
  assert_true(file_there(dir, "fusion-fresh.so", NULL));
  assert_true(file_there(dir, "tmp-busy.c", NULL));
  assert_true(file_there(dir, "cc-0123.txt", NULL));
  assert_true(file_there(dir, "notes.txt", NULL));
  assert_false(file_there(dir, "tmp-crashed.c", NULL));
  long long real_bytes = 0;
  FILE *ls = NULL;
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-[0-9a-f]*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  char name[256];
  int nreal = 0;
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    assert_true(file_there(dir, name, &st));
    real_bytes += (long long)st.st_blocks * 512, nreal++;
  }
  pclose(ls);
  assert_int_equal(nreal, 2);
  long long total = real_bytes + fresh_bytes, target = (1LL << 20) / 5 * 4;
  int first_kept = NFAKE;
  for (int k = 0; k < NFAKE; k++)
    if (file_there(dir, fake[k], NULL)) {
      if (first_kept == NFAKE) first_kept = k;
      total += fake_bytes[k];
    } else {
      assert_true(first_kept == NFAKE); /* removed ones are a prefix of the use order */
    }
  assert_true(total <= target);                                          /* removed enough */
  assert_true(first_kept > 0 && total + fake_bytes[first_kept - 1] > target); /* and no more */

  /* the running estimate: trim.txt holds the kernels' total as the scan left it and when it ran; a build
   * under the bound adds its kernel to it without listing the cache (the time stays); an hour-old
   * estimate makes the next build scan again, which finds a kernel planted by hand */
  long long est = 0, when = 0, est2 = 0, when2 = 0;
  char tpath[700];
  snprintf(tpath, sizeof tpath, "%s/trim.txt", dir);
  FILE *tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est, &when), 2);
  fclose(tf);
  assert_true(est == total);
  assert_true(when >= time(NULL) - 60 && when <= time(NULL));
  when -= 600; /* ten minutes old: a scan would set it to now */
  tf = fopen(tpath, "w");
  assert_non_null(tf);
  fprintf(tf, "%lld %lld\n", est, when);
  fclose(tf);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.875)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est2, &when2), 2);
  fclose(tf);
  long long now_bytes = fresh_bytes;
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-.*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    if (!strcmp(name, "fusion-fresh.so")) continue;
    assert_true(file_there(dir, name, &st));
    now_bytes += (long long)st.st_blocks * 512;
  }
  pclose(ls);
  assert_true(when2 == when);      /* no scan */
  assert_true(est2 == now_bytes);  /* the new kernel added: the estimate is still exact */
  make_kernel_file(dir, "fusion-planted.so", 2 << 20, 30 * 86400);
  tf = fopen(tpath, "w");
  assert_non_null(tf);
  fprintf(tf, "%lld %lld\n", est2, (long long)time(NULL) - 3700);
  fclose(tf);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.9375)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  assert_false(file_there(dir, "fusion-planted.so", NULL)); /* rescanned: the oldest went */
  tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est2, &when2), 2);
  fclose(tf);
  assert_true(when2 >= time(NULL) - 60);

  /* a hit marks its entry used: the first real kernel made a week old is touched by compiling it again */
  assert_int_equal(setenv("THUNDER_CACHE_MAX_MB", "0", 1), 0);
  snprintf(cmd, sizeof cmd, "touch -d '7 days ago' '%s'/fusion-[0-9a-f]*.so", dir);
  assert_int_equal(system(cmd), 0);
  time_t before = time(NULL);
  long h0 = th_fuser_stat_cache_hits();
  assert_int_equal(compile_text(prog), TH_OK);
  assert_int_equal(th_fuser_stat_cache_hits(), h0 + 1);
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-[0-9a-f]*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  int touched = 0;
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    assert_true(file_there(dir, name, &st));
    touched += st.st_mtime >= before;
  }
  pclose(ls);
  assert_int_equal(touched, 1);

  unsetenv("THUNDER_CACHE_MAX_MB");
  setenv("XDG_CACHE_HOME", cache_root, 1);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
  assert_int_equal(system(cmd), 0);
}

/* A unit of three regions compiled in parts: with THUNDER_FUSER_JOBS=3 each region is compiled with -c by
 * its own compiler process and the objects are linked into the one cached object; with 1 the unit is one
 * -shared run. A $CC wrapper logs every run and fails a part holding a given function; both builds give
 * eager's results bit for bit, a failing part fails the compile naming the compiler's message and leaves
 * no temporary file, and an out-of-range THUNDER_FUSER_JOBS is a clear error. */
static int count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[8192];
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  if (f) fclose(f);
  return n;
}

static void test_parallel_parts(void **state) {
  (void)state;
  static const char text[] = "def computation(a, b):\n  # a: \"cpu f32[4, 4]\"\n  # b: \"cpu f32[4, 4]\"\n"
                             "  t0 = prims.add(a, 1.5)\n  t1 = prims.mul(t0, t0)\n  t2 = prims.matmul(t1, b)\n"
                             "  t3 = prims.sub(t2, 0.25)\n  t4 = prims.mul(t3, a)\n  t5 = prims.matmul(t4, b)\n"
                             "  t6 = prims.neg(t5)\n  t7 = prims.mul(t6, 3.0)\n  return t7\n";
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  char root[400], wrap[500], log[500], cmd[1400];
  snprintf(root, sizeof root, "%.300s/fuser-parts-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(wrap, sizeof wrap, "%s/cc-wrap.sh", root);
  snprintf(log, sizeof log, "%s/cc.log", root);
  assert_int_equal(mkdir(root, 0700), 0);
  FILE *f = fopen(wrap, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\necho \"$*\" >> \"$THUNDER_TEST_CC_LOG\"\nfor a in \"$@\"; do case \"$a\" in *.c)\n"
        "  if [ -n \"$THUNDER_TEST_CC_FAIL\" ] && grep -q \"$THUNDER_TEST_CC_FAIL\" \"$a\"; then\n"
        "    echo \"injected failure\" >&2; exit 1; fi;; esac; done\nexec cc \"$@\"\n",
        f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(wrap, 0700), 0);
  char *old_cc = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", wrap, 1);
  setenv("THUNDER_TEST_CC_LOG", log, 1);
  th_trace *tr = parse(text);
  int64_t shape[2] = {4, 4};
  th_tensor *in[2] = {random_tensor(TH_F32, 2, shape), random_tensor(TH_F32, 2, shape)};
  int ne = 0;
  th_tensor **want = run_with(tr, eager, 1, in, 2, &ne);
  const char *jobs[2] = {"3", "1"};
  for (int k = 0; k < 2; k++) {
    char xdg[500], dir[540];
    snprintf(xdg, sizeof xdg, "%s/cache%d", root, k);
    snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("THUNDER_FUSER_JOBS", jobs[k], 1);
    remove(log);
    assert_int_equal(count_fused(tr, fused, 2), 6);
    if (k == 0) { /* one -c run per region, then one link of the three objects */
      assert_int_equal(count_lines(log, " -c "), 3);
      assert_int_equal(count_lines(log, "-shared"), 1);
      assert_int_equal(count_lines(log, ".o -lm"), 1);
    } else {
      assert_int_equal(count_lines(log, " -c "), 0);
      assert_int_equal(count_lines(log, "-shared"), 1);
    }
    int n = 0;
    th_tensor **got = run_with(tr, fused, 2, in, 2, &n); /* loads the cached object */
    assert_int_equal(n, 1);
    assert_memory_equal(th_tensor_data(got[0]), th_tensor_data(want[0]), 16 * sizeof(float));
    th_tensor_release(got[0]);
    free(got);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
  }
  /* a failing part: the compile fails with the compiler's message, nothing is left behind */
  char xdg[500], dir[540];
  snprintf(xdg, sizeof xdg, "%s/cache-fail", root);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  setenv("THUNDER_FUSER_JOBS", "3", 1);
  setenv("THUNDER_TEST_CC_FAIL", "void fusion1(", 1);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_RUNTIME);
  assert_null(p);
  assert_non_null(strstr(th_last_error(), "injected failure"));
  assert_non_null(strstr(th_last_error(), "on a generated kernel (exit 1)"));
  assert_int_equal(count_files(dir, "fusion-", ".so"), 0);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  unsetenv("THUNDER_TEST_CC_FAIL");
  /* THUNDER_FUSER_JOBS out of range or not a number: an error even where the unit is cached (cache0) */
  snprintf(xdg, sizeof xdg, "%s/cache0", root);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char *bad[] = {"0", "9", "two", "2x", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("THUNDER_FUSER_JOBS", bad[i], 1);
    assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
    char want_msg[128];
    snprintf(want_msg, sizeof want_msg, "THUNDER_FUSER_JOBS: expected an integer from 1 to 8, got '%s'", bad[i]);
    assert_non_null(strstr(th_last_error(), want_msg));
  }
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  unsetenv("THUNDER_FUSER_JOBS");
  unsetenv("THUNDER_TEST_CC_LOG");
  if (old_cc) setenv("CC", old_cc, 1);
  else unsetenv("CC");
  free(old_cc);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  th_tensor_release(want[0]);
  free(want);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* Eight processes compile the same new unit into a fresh cache at once: all succeed, run and agree;
 * one object is left, no temporary file. */
static void test_concurrent_processes(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[8]\"\n"
                       "  t0 = prims.sub(a, 4.25)\n  t1 = prims.mul(t0, a)\n  t2 = prims.sum(t1, (0,))\n"
                       "  return (t1, t2)\n");
  static const char *const fused[] = {"fuser", "eager"};
  char dir[300];
  snprintf(dir, sizeof dir, "%s/fuser-concurrent-XXXXXX", TH_BINARY_DIR);
  assert_non_null(mkdtemp(dir));
  enum { NPROC = 8 };
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      setenv("XDG_CACHE_HOME", dir, 1);
      th_compile_options o;
      memset(&o, 0, sizeof o);
      o.executors = fused;
      o.nexecutors = 2;
      th_program *p = NULL;
      if (th_program_compile(tr, &o, &p) != TH_OK) _exit(1);
      int64_t shape[1] = {8};
      th_tensor *a = th_tensor_empty(TH_F32, 1, shape), **out = NULL;
      for (int k = 0; k < 8; k++) ((float *)th_tensor_data(a))[k] = (float)k;
      int nout = 0;
      if (th_program_run(p, 1, &a, &nout, &out) != TH_OK || nout != 2) _exit(2);
      double want = 0;
      for (int k = 0; k < 8; k++) want += ((float)k - 4.25f) * (float)k;
      _exit(th_tensor_get_f64(out[1], 0) == (double)(float)want ? 0 : 3);
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("process %d: status %d", i, status);
  }
  char sub[400];
  snprintf(sub, sizeof sub, "%s/thunder-c", dir);
  assert_int_equal(count_files(sub, "fusion-", ".so"), 1);
  assert_int_equal(count_files(sub, "tmp-", ""), 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  th_trace_free(tr);
}

/* th_compile_options.dump_dir: the program's unit is written there; a cached unit loads fast. */
static void test_dump_and_cached_load(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[5, 6]\"\n"
                       "  t0 = prims.exp(a)\n  t1 = prims.sum(t0, (1,))\n  return t1\n");
  char dir[300];
  snprintf(dir, sizeof dir, "%s/fuser-dump-XXXXXX", TH_BINARY_DIR);
  assert_non_null(mkdtemp(dir));
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  o.dump_dir = dir;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  th_program_free(p);
  assert_int_equal(count_files(dir, "computation-", ".c"), 1);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "grep -c '^void fusion0(char' %s/computation-*.c", dir);
  FILE *f = popen(cmd, "r");
  int n = 0;
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%d", &n), 1);
  pclose(f);
  assert_int_equal(n, 1);
  /* the dump opens with the regions' slots under the trace's names: the input a and the output t1 */
  snprintf(cmd, sizeof cmd, "cat %s/computation-*.c", dir);
  f = popen(cmd, "r");
  assert_non_null(f);
  char head[4096];
  size_t got = fread(head, 1, sizeof head - 1, f);
  head[got] = 0;
  pclose(f);
  const char *slots = " * fusion0:\n *   P[0] in  a f32[5, 6]\n *   P[1] out t1 f32[5]\n */\n";
  if (!strstr(head, slots)) fail_msg("the dump does not open with\n%s\nbut with\n%.600s", slots, head);
  assert_true(strstr(head, slots) < strstr(head, "#include <tgmath.h>"));
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  /* the unit is in the cache now: compiling again loads it without running the compiler (how fast is
   * bench_fusion's "warm" rows: a benchmark, not a timed test) */
  th_trace *pt = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_int_equal(th_fuser_codegen(bsym_at(pt, 0), ir, &r), TH_OK);
  char *src = th_fuser_unit_source(ir, NULL, NULL);
  void *h = NULL;
  assert_int_equal(th_fuser_compile(src, 0, NULL, &h), TH_OK); /* may compile (another unit text than the program's) */
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  assert_int_equal(th_fuser_compile(src, 0, NULL, &h), TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0);
  assert_int_equal(th_fuser_stat_cache_hits(), h0 + 1);
  assert_non_null(th_fuser_symbol(h, "fusion0"));
  free(src);
  th_fuser_region_clear(&r);
  th_ir_ctx_free(ir);
  th_trace_free(pt);
  th_trace_free(tr);
}

/* The Nth allocation fails, for every N until compiling (then running) succeeds: each failure is
 * TH_ERR_NOMEM with no program, no outputs and nothing leaked (the ASan build checks the leaks). */
static void test_fault_injection(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, r):\n  # x: \"cpu f32[4, 6]\"\n  # r: \"cpu f32[6, 4]\"\n"
                       "  rt = prims.transpose(r, (1, 0))\n  t0 = prims.add(x, rt)\n  t1 = prims.amax(t0, (1,))\n"
                       "  t2 = prims.broadcast_in_dim(t1, (4, 6), (0,))\n  t3 = prims.sub(t0, t2)\n"
                       "  t4 = prims.exp(t3)\n  t5 = prims.transpose(t4, (1, 0))\n  return (t5, t1)\n");
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  th_program *p = NULL;
  int ok_at = 0;
  for (long n = 1; n < 100000 && !ok_at; n++) {
    th_alloc_fail_after(n);
    th_status st = th_program_compile(tr, &o, &p);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok_at = (int)n;
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s", n, th_last_error());
    assert_null(p);
  }
  assert_true(ok_at > 1);
  assert_int_equal(count_id(th_program_trace(p), TH_OP_DYNAMIC), 1);
  int64_t sx[2] = {4, 6}, sr[2] = {6, 4};
  th_tensor *in[2] = {th_tensor_empty(TH_F32, 2, sx), th_tensor_empty(TH_F32, 2, sr)};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 24; i++) ((float *)th_tensor_data(in[k]))[i] = (float)((i * 7 + k) % 11) / 4.0f;
  int run_ok = 0;
  for (long n = 1; n < 100000 && !run_ok; n++) {
    th_tensor **out = NULL;
    int nout = -1;
    th_alloc_fail_after(n);
    th_status st = th_program_run(p, 2, in, &nout, &out);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      run_ok = (int)n;
      assert_int_equal(nout, 2);
      th_tensor_release(out[0]);
      th_tensor_release(out[1]);
      free(out);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(out);
  }
  assert_true(run_ok > 1);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- golden sources ----------------------------------------------------------------------------------
 * tests/golden/fuser/<name>.c pin the emitter's output for a few kernels: each was written by
 * generating it once and reviewing it line by line (loop structure, pragmas, loads/stores through the
 * right strides, rounding helpers, accumulators), not by trusting the generator. A codegen change that
 * alters one fails here; regenerate with THUNDER_UPDATE_GOLDEN=1 and review the diff. */
static void golden(const char *name, const char *text) {
  th_trace *tr = parse(text);
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  char path[600];
  snprintf(path, sizeof path, "%s/tests/golden/fuser/%s.c", TH_SOURCE_DIR, name);
  const char *upd = getenv("THUNDER_UPDATE_GOLDEN");
  if (upd && upd[0] == '1') {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(src, f);
    fclose(f);
  }
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("missing golden file %s (THUNDER_UPDATE_GOLDEN=1 writes it)", path);
  static char want[1 << 16];
  size_t n = fread(want, 1, sizeof want - 1, f);
  want[n] = 0;
  fclose(f);
  if (strcmp(want, src)) {
    fprintf(stderr, "---- generated ----\n%s", src);
    fail_msg("%s differs from the generated source above (THUNDER_UPDATE_GOLDEN=1 regenerates)", path);
  }
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  th_trace_free(tr);
}

static void test_golden(void **state) {
  (void)state;
  /* softmax over the last dim: a row nest, max then sum of exp, then the outputs */
  golden("softmax", "def computation(x):\n  # x: \"cpu f32[4, 6]\"\n"
                    "  t0 = prims.amax(x, (1,))\n  t1 = prims.broadcast_in_dim(t0, (4, 1), (0,))\n"
                    "  t2 = prims.broadcast_in_dim(t1, (4, 6), (0, 1))\n  t3 = prims.sub(x, t2)\n"
                    "  t4 = prims.exp(t3)\n  t5 = prims.sum(t4, (1,))\n  t6 = prims.broadcast_in_dim(t5, (4, 1), (0,))\n"
                    "  t7 = prims.broadcast_in_dim(t6, (4, 6), (0, 1))\n  t8 = prims.div(t4, t7)\n  return t8\n");
  /* layer norm of bf16 input in f32: var_mean's two passes, weight and bias read broadcast */
  golden("layer_norm",
         "def computation(x, w, b):\n  # x: \"cpu bf16[2, 3, 8]\"\n  # w: \"cpu f32[8]\"\n  # b: \"cpu f32[8]\"\n"
         "  x32 = prims.convert_element_type(x, dtypes.float32)\n"
         "  (v, m) = prims.var_mean(x32, (2,), correction=0.0)\n  t0 = prims.add(v, 1e-05)\n  t1 = prims.rsqrt(t0)\n"
         "  t2 = prims.broadcast_in_dim(m, (2, 3, 8), (0, 1))\n  t3 = prims.broadcast_in_dim(t1, (2, 3, 8), (0, 1))\n"
         "  t4 = prims.sub(x32, t2)\n  t5 = prims.mul(t4, t3)\n  t6 = prims.broadcast_in_dim(w, (2, 3, 8), (2,))\n"
         "  t7 = prims.mul(t5, t6)\n  t8 = prims.broadcast_in_dim(b, (2, 3, 8), (2,))\n  t9 = prims.add(t7, t8)\n"
         "  y = prims.convert_element_type(t9, dtypes.bfloat16)\n  return y\n");
  /* causal attention's masked softmax: the mask broadcast from [1, 1, T, T], where as a bit select (a `?:`
   * kept gcc from vectorizing the loops holding it) */
  golden("masked_softmax",
         "def computation(x, m):\n  # x: \"cpu f32[2, 3, 5, 5]\"\n  # m: \"cpu b8[1, 1, 5, 5]\"\n"
         "  t0 = prims.broadcast_in_dim(m, (2, 3, 5, 5), (0, 1, 2, 3))\n  t1 = prims.where(t0, -float('inf'), x)\n"
         "  t2 = prims.amax(t1, (3,))\n  t3 = prims.broadcast_in_dim(t2, (2, 3, 5, 5), (0, 1, 2))\n"
         "  t4 = prims.sub(t1, t3)\n  t5 = prims.exp(t4)\n  t6 = prims.sum(t5, (3,))\n"
         "  t7 = prims.broadcast_in_dim(t6, (2, 3, 5, 5), (0, 1, 2))\n  t8 = prims.div(t5, t7)\n  return t8\n");
  /* fp8 quantization of a sliced input, stored transposed; plus a full reduction (amax) */
  golden("bf16_column_sum", /* a bias gradient under autocast: convert, sum over the batch, convert */
         "def computation(g):\n  # g: \"cpu bf16[64, 48]\"\n  t0 = prims.convert_element_type(g, dtypes.float32)\n"
         "  t1 = prims.sum(t0, (0,))\n  t2 = prims.convert_element_type(t1, dtypes.bfloat16)\n  return t2\n");
  golden("fp8_transpose",
         "def computation(w):\n  # w: \"cpu f32[6, 10]\"\n  s = prims.slice_prim(w, (0, 2), (6, 10), (1, 1))\n"
         "  a = prims.abs(s)\n  m = prims.amax(a, (0, 1))\n  c = prims.mul(s, 2.0)\n"
         "  q = prims.convert_element_type(c, dtypes.float8_e4m3fn)\n  t = prims.transpose(q, (1, 0))\n"
         "  return (m, t)\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_one_region),     cmocka_unit_test(test_dataflow_vs_consecutive), cmocka_unit_test(test_gemm_convert_sunk),
      cmocka_unit_test(test_copy_never_moved),     cmocka_unit_test(test_seed004_fused),
      cmocka_unit_test(test_effects_not_crossed),  cmocka_unit_test(test_no_cycles),
      cmocka_unit_test(test_reductions_join),      cmocka_unit_test(test_norms_one_region),
      cmocka_unit_test(test_horizontal_merge),     cmocka_unit_test(test_seed003_one_region),
      cmocka_unit_test(test_codegen_structure),    cmocka_unit_test(test_golden),
      cmocka_unit_test(test_row_buffers),
      cmocka_unit_test(test_sha256),               cmocka_unit_test(test_cache_reused),       cmocka_unit_test(test_cache_dir_created),
      cmocka_unit_test(test_missing_compiler),   cmocka_unit_test(test_cc_with_arguments), cmocka_unit_test(test_damaged_cache_entry), cmocka_unit_test(test_cache_bound),   cmocka_unit_test(test_signbit_vectorized), cmocka_unit_test(test_where_select),     cmocka_unit_test(test_gelu_tanh_tail),     cmocka_unit_test(test_broadcast_sinking),     cmocka_unit_test(test_invariant_reads),     cmocka_unit_test(test_row_prefetch),     cmocka_unit_test(test_differential),
      cmocka_unit_test(test_concurrent_processes), cmocka_unit_test(test_parallel_parts), cmocka_unit_test(test_dump_and_cached_load),
      cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
