/* fuser_trace_util.h — helpers shared by the fuser's partition, codegen, row-nest, differential, cache and
 * allocation-failure tests (test_fuser_*.c): a seeded random stream, partitioning a trace and reading its
 * regions, compiling and running with given executors (failing the test on any error), counting fused
 * bsyms, the generated source of a region, random small tensors and shape/dtype spellings. Include after
 * "fuser_test_util.h" (parse, setup_cache) and "core/ir.h", "core/scalar.h", "executors/fuser/fuser.h". */
#ifndef TH_TEST_FUSER_TRACE_UTIL_H
#define TH_TEST_FUSER_TRACE_UTIL_H

static uint64_t rng = 0x9E3779B97F4A7C15ull;
TH_TEST_HELPER uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

TH_TEST_HELPER th_trace *partition(const th_trace *tr, th_fuser_strategy s) {
  th_trace *out = NULL;
  if (th_fuser_partition(tr, s, NULL, 0, &out) != TH_OK) fail_msg("partition: %s", th_last_error());
  if (th_trace_verify(out) != TH_OK) fail_msg("verify: %s", th_last_error());
  return out;
}

TH_TEST_HELPER const th_bsym *bsym_at(const th_trace *tr, int i) { return tr->bsyms.items[i]; }

TH_TEST_HELPER char *print(const th_trace *tr) {
  char *s = th_trace_print(tr, 2);
  assert_non_null(s);
  return s;
}

static const char *const with_fuser[] __attribute__((unused)) = {"fuser", "blas", "eager"};

TH_TEST_HELPER th_program *compile_with(const th_trace *tr, const char *const *ex, int nex) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  if (th_trace_verify(th_program_trace(p)) != TH_OK) fail_msg("execution trace: %s", th_last_error());
  return p;
}

TH_TEST_HELPER int count_id(const th_trace *et, th_op_id id) {
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) n += bsym_at(et, i)->sym->id == id;
  return n;
}

/* The region bsyms' members of every region in et, counted by op. */
TH_TEST_HELPER int count_in_regions(const th_trace *et, th_op_id id) {
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = bsym_at(et, i);
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    for (int j = 0; j < b->nsubs; j++) n += b->subs[j]->sym->id == id;
  }
  return n;
}

/* Every non-utility top-level bsym of et is a fusion region (the whole computation fused). */
TH_TEST_HELPER void assert_all_fused(const th_trace *et, int nregions) {
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

/* The generated function of the first region of p (the unit's source from the regions on). */
TH_TEST_HELPER char *region_source(const th_trace *p, th_fuser_region *r) {
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

TH_TEST_HELPER double elem(const th_tensor *t, const int64_t *idx) {
  const char *base = th_tensor_data(t);
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
  return th_load_f64(base + off * (int64_t)th_dtype_size(t->dtype), t->dtype);
}

TH_TEST_HELPER th_tensor *random_tensor(th_dtype dt, int ndim, const int64_t *shape) {
  th_tensor *t = th_tensor_empty(dt, ndim, shape);
  int64_t n = th_tensor_numel(t);
  char *p = th_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    double v = dt == TH_I64 ? (double)((int)(rnd() % 101) - 50) : ((double)(rnd() % 4001) - 2000.0) / 1000.0;
    th_store_f64(p + i * (int64_t)th_dtype_size(dt), dt, v);
  }
  return t;
}

TH_TEST_HELPER const char *dname(th_dtype d) {
  return d == TH_F32 ? "float32" : d == TH_F64 ? "float64" : d == TH_BF16 ? "bfloat16" : "int64";
}
TH_TEST_HELPER const char *dshort(th_dtype d) {
  return d == TH_F32 ? "f32" : d == TH_F64 ? "f64" : d == TH_BF16 ? "bf16" : "i64";
}

TH_TEST_HELPER void shape_str(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  snprintf(buf + k, n - k, "]");
}

TH_TEST_HELPER void tuple_str(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  snprintf(buf + k, n - k, nd == 1 ? ",)" : ")");
}

TH_TEST_HELPER th_tensor **run_with(const th_trace *tr, const char *const *ex, int nex, th_tensor **in, int nin,
                                    int *nout) {
  th_program *p = compile_with(tr, ex, nex);
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

/* Compiles tr and returns how many bsyms its fusion regions hold (the execution trace must verify). */
TH_TEST_HELPER int count_fused(const th_trace *tr, const char *const *ex, int nex) {
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

#endif
