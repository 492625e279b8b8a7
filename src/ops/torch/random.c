/* random.c — torch's random samplers drawn inside a trace: rand, randn, randint, randperm and their
 * *_like forms, bernoulli, normal, multinomial, and the in-place samplers uniform_, normal_,
 * bernoulli_, exponential_, cauchy_, log_normal_, geometric_ and random_.
 *
 * Every sampler takes its randomness from the program's Philox stream as ltorch.uniform_like does:
 * prims.get_and_update_rng_state(blocks) hands out the stream's (seed, offset) and advances the offset by
 * the counter blocks the draw reads, and prims.uniform_philox(shape, 0.0, 1.0, seed=, offset=) reads them.
 * get_and_update_rng_state is tagged RANDOM (never CSE'd, reordered or dropped), so two samplers of one
 * program, and two calls of it, draw different numbers; the frontend keys the stream from torch's default
 * generator, so torch.manual_seed(s) makes a call reproducible. The values are thunder-c's own stream,
 * not the numbers eager PyTorch draws; their distributions are the same:
 *   uniform       u in [0, 1) with 24 random bits (53 for float64), scaled to [from, to)
 *   normal        Box-Muller: sqrt(-2 log(1 - u1)) cos(2 pi u2), in float32 (float64 for float64 output)
 *   randint       low + floor(u (high - low)) from a float64 u (every value reachable for ranges up to
 *                 2^53; random_ the same over its range)
 *   randperm      the argsort of n float64 uniforms
 *   bernoulli     u < p
 *   exponential   -log(1 - u) / lambd;  cauchy median + sigma tan(pi (u - 1/2));  log_normal exp(normal);
 *                 geometric ceil(log(1 - u) / log(1 - p)), at least 1
 *   multinomial   Gumbel-max: log p - log(-log(1 - u)) per category; without replacement its top
 *                 num_samples (Gumbel-top-k, the sequential draw's law, first draw first), with
 *                 replacement its argmax over num_samples independent rows of keys.
 * PyTorch's checks that depend on tensor data (bernoulli's p in [0, 1], normal's std >= 0 for a tensor,
 * multinomial's probabilities non-negative with enough non-zero categories) cannot run at trace time and
 * are not made; those of numbers, dtypes and shapes are, with PyTorch's messages.
 *
 * A torch.Generator argument is refused (NotImplementedError, by the frontend before it reaches here):
 * the program has one stream. requires_grad=True is NotImplementedError as for torch.zeros. The gradient
 * of a sampler's tensor inputs (normal's mean and std, bernoulli's p) is zero, as PyTorch's derivatives
 * give; the samplers without tensor inputs, and those whose output only takes its input's shape, are
 * non-differentiable. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

static const th_device cpu_device = {TH_CPU, 0};
static const double pi = 3.141592653589793;

/* ---- arguments ------------------------------------------------------------------------------------ */

static th_status no_generator(const char *op, const th_arg *g) {
  if (g->kind == TH_ARG_NONE) return TH_OK;
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "%s: generator: expected None, but got %s (a jitted function draws from torch's default "
                  "generator)",
                  op, th_arg_kind_name(g));
}

static th_status dev_dtype(const char *op, const th_arg *dev_arg, const th_arg *dt_arg, th_device dflt_dev,
                           th_dtype dflt_dt, th_device *dev, th_dtype *dt) {
  bool has;
  TH_TRY(th_tu_device_arg(op, "device", dev_arg, dev, &has));
  if (!has) *dev = dflt_dev;
  TH_TRY(th_tu_dtype_arg(op, "dtype", dt_arg, dt, &has));
  if (!has) *dt = dflt_dt;
  return TH_OK;
}

/* requires_grad=True: PyTorch's error for a non-floating dtype, else not supported (a leaf autograd
 * would track has no meaning in a trace). */
static th_status no_grad(const char *op, const th_arg *a, th_dtype dt) {
  bool rg;
  TH_TRY(th_tu_bool(op, "requires_grad", a, &rg));
  if (!rg) return TH_OK;
  if (!th_dtype_is_float(dt))
    return th_error(TH_ERR_RUNTIME, "%s: Only Tensors of floating point and complex dtype can require gradients", op);
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "%s: requires_grad=True is not supported (call requires_grad_() on the result outside the "
                  "jitted function)",
                  op);
}

static th_status read_shape(const char *op, const th_arg *a, int64_t shape[TH_MAX_DIMS], int *ndim) {
  TH_TRY(th_meta_int_list(op, "size", a, shape, ndim));
  return th_meta_check_shape(op, shape, *ndim);
}

/* PyTorch's dtype check of a floating sampler: `kernel` is the name its dispatch reports. */
static th_status float_dtype(const char *op, const char *kernel, th_dtype dt) {
  if (th_dtype_is_float(dt) && !th_dtype_is_fp8(dt)) return TH_OK;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"%s\" not implemented for '%s'", op, kernel,
                  th_tu_scalar_type_name(dt));
}

/* The continuous in-place samplers' dtype check (exponential_, cauchy_, log_normal_). */
static th_status continuous_dtype(const char *op, const char *what, th_dtype dt) {
  if (th_dtype_is_float(dt) && !th_dtype_is_fp8(dt)) return TH_OK;
  return th_error(TH_ERR_RUNTIME,
                  "%s: %s is a continuous probability distribution. dtype must be a floating point but you "
                  "specified %s",
                  op, what, th_tu_scalar_type_name(dt));
}

/* ---- draws ---------------------------------------------------------------------------------------- */

/* Uniform samples in [lo, hi) of `shape` and dtype dt (floating): get_and_update_rng_state for the
 * blocks they read (four elements a block, two for float64), then uniform_philox from that state. */
static th_status draw_uniform(th_trace *tr, int ndim, const int64_t *shape, double lo, double hi, th_device dev,
                              th_dtype dt, th_arg *out) {
  int64_t numel;
  if (!th_meta_numel(shape, ndim, &numel))
    return th_error(TH_ERR_VALUE, "random: a sample of %d dims has too many elements", ndim);
  int64_t per = dt == TH_F64 ? 2 : 4, blocks = numel / per + (numel % per != 0);
  th_arg state;
  static const char *const dkw[1] = {"device"};
  th_arg dkwargs[1] = {th_tu_device(dev)}, bargs[1] = {th_arg_int(blocks)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_prims_get_and_update_rng_state, 1, bargs, 1, dkw, dkwargs, &state));
  th_arg items[TH_MAX_DIMS];
  th_arg pargs[3] = {th_tu_ints(items, ndim, shape), th_arg_float(lo), th_arg_float(hi)};
  static const char *const kw[4] = {"device", "dtype", "seed", "offset"};
  th_arg kwargs[4] = {th_tu_device(dev), th_arg_dtype(dt), state.u.seq.items[0], state.u.seq.items[1]};
  return th_tu_call_kw(tr, TH_OP_prims_uniform_philox, 3, pargs, 4, kw, kwargs, out);
}

/* -log(1 - u) of a uniform u in [0, 1): a standard exponential sample, finite. */
static th_status draw_exponential(th_trace *tr, int ndim, const int64_t *shape, th_device dev, th_dtype cdt,
                                  th_arg *out) {
  th_arg u;
  TH_TRY(draw_uniform(tr, ndim, shape, 0.0, 1.0, dev, cdt, &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_neg, u, &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log1p, u, &u));
  return th_tu_call1(tr, TH_OP_ltorch_neg, u, out);
}

/* Standard normal samples in cdt (float32 or float64) by Box-Muller from two uniform draws. */
static th_status draw_normal(th_trace *tr, int ndim, const int64_t *shape, th_device dev, th_dtype cdt, th_arg *out) {
  th_arg r, c;
  TH_TRY(draw_exponential(tr, ndim, shape, dev, cdt, &r));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, r, th_arg_float(2.0), &r));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_sqrt, r, &r));
  TH_TRY(draw_uniform(tr, ndim, shape, 0.0, 1.0, dev, cdt, &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, c, th_arg_float(2.0 * pi), &c));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_cos, c, &c));
  return th_tu_call2(tr, TH_OP_ltorch_mul, r, c, out);
}

/* The dtype samples of dt are computed in: float64 for float64, float32 otherwise. */
static th_dtype sample_dtype(th_dtype dt) { return dt == TH_F64 ? TH_F64 : TH_F32; }

/* ---- rand / randn --------------------------------------------------------------------------------- */

/* rand(size, *, generator, dtype, device, requires_grad) and randn: float32 by default. */
static th_status factory(th_trace *tr, const th_symbol *sym, const th_arg *args, bool normal, th_arg *out) {
  const char *op = sym->qualname;
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  th_dtype dt;
  TH_TRY(read_shape(op, &args[0], shape, &ndim));
  TH_TRY(no_generator(op, &args[1]));
  TH_TRY(dev_dtype(op, &args[3], &args[2], cpu_device, TH_F32, &dev, &dt));
  TH_TRY(float_dtype(op, normal ? "normal_kernel_cpu" : "check_uniform_bounds", dt));
  TH_TRY(no_grad(op, &args[4], dt));
  if (!normal) return draw_uniform(tr, ndim, shape, 0.0, 1.0, dev, dt, out);
  TH_TRY(draw_normal(tr, ndim, shape, dev, sample_dtype(dt), out));
  return th_tu_convert(tr, out, dt);
}
th_status ltorch_rand_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return factory(tr, sym, args, false, out);
}
th_status ltorch_randn_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return factory(tr, sym, args, true, out);
}

/* rand_like(input, *, generator, dtype, device, requires_grad, memory_format) and randn_like: input's
 * shape; its dtype and device by default (the result is contiguous whatever memory_format asks). */
static th_status factory_like(th_trace *tr, const th_symbol *sym, const th_arg *args, bool normal, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  th_device dev;
  th_dtype dt;
  TH_TRY(no_generator(op, &args[1]));
  TH_TRY(dev_dtype(op, &args[3], &args[2], v->device, v->dtype, &dev, &dt));
  TH_TRY(float_dtype(op, normal ? "normal_kernel_cpu" : "check_uniform_bounds", dt));
  TH_TRY(no_grad(op, &args[4], dt));
  if (!normal) return draw_uniform(tr, v->ndim, v->shape, 0.0, 1.0, dev, dt, out);
  TH_TRY(draw_normal(tr, v->ndim, v->shape, dev, sample_dtype(dt), out));
  return th_tu_convert(tr, out, dt);
}
th_status ltorch_rand_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return factory_like(tr, sym, args, false, out);
}
th_status ltorch_randn_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return factory_like(tr, sym, args, true, out);
}

/* ---- randint / randint_like / randperm ------------------------------------------------------------ */

/* The range of an integer dtype and the C type PyTorch's bounds messages name. */
static bool int_range(th_dtype dt, int64_t *lo, int64_t *hi, const char **cname) {
  switch (dt) {
    case TH_BOOL: *lo = 0, *hi = 1, *cname = "bool"; return true;
    case TH_U8: *lo = 0, *hi = 255, *cname = "unsigned char"; return true;
    case TH_I8: *lo = -128, *hi = 127, *cname = "signed char"; return true;
    case TH_I16: *lo = INT16_MIN, *hi = INT16_MAX, *cname = "short"; return true;
    case TH_I32: *lo = INT32_MIN, *hi = INT32_MAX, *cname = "int"; return true;
    case TH_I64: *lo = INT64_MIN, *hi = INT64_MAX, *cname = "long"; return true;
    default: return false;
  }
}

/* The range check of randint and random_: from < to. */
static th_status check_from_to(const char *op, int64_t low, int64_t high) {
  if (low < high) return TH_OK;
  return th_error(TH_ERR_RUNTIME, "%s: random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld", op,
                  (long long)low, (long long)high);
}

/* Integers uniform in [low, last] (inclusive): low + floor(u * count) for u uniform in [0, 1) (float64),
 * of `shape`, converted to dt, after PyTorch's bounds checks for dt. */
static th_status randint_draw(th_trace *tr, const char *op, int64_t low, int64_t last, int ndim, const int64_t *shape,
                              th_device dev, th_dtype dt, th_arg *out) {
  int64_t dlo, dhi;
  const char *cname;
  if (int_range(dt, &dlo, &dhi, &cname)) {
    if (low < dlo || low > dhi) return th_error(TH_ERR_RUNTIME, "%s: from is out of bounds for %s", op, cname);
    if (last > dhi) return th_error(TH_ERR_RUNTIME, "%s: to - 1 is out of bounds for %s", op, cname);
  } else if (th_dtype_is_fp8(dt) || !th_dtype_is_float(dt)) {
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"random_from_to_cpu\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(dt));
  }
  /* the count as an unsigned number (0 for all 2^64 int64 values) */
  uint64_t count = (uint64_t)last - (uint64_t)low + 1u;
  double fcount = count ? (double)count : 18446744073709551616.0;
  th_arg u;
  TH_TRY(draw_uniform(tr, ndim, shape, 0.0, 1.0, dev, TH_F64, &u));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, u, th_arg_float(fcount), &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_floor, u, &u));
  if (count && count <= (1ull << 62)) {
    /* u * count rounds up to count itself where count passes 2^53 */
    TH_TRY(th_tu_call2(tr, TH_OP_prims_minimum, u, th_arg_float((double)(count - 1)), &u));
    TH_TRY(th_tu_convert(tr, &u, TH_I64));
    if (low != 0) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, u, th_arg_int(low), &u));
  } else { /* floor(u * count) may pass INT64_MAX: shift into [low, last] in float64 first */
    double flast = (double)last >= 9223372036854775808.0 ? 9223372036854774784.0 : (double)last;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, u, th_arg_float((double)low), &u));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_minimum, u, th_arg_float(flast), &u));
    TH_TRY(th_tu_convert(tr, &u, TH_I64));
  }
  *out = u;
  return th_tu_convert(tr, out, dt);
}

static th_status read_bound(const char *op, const char *what, const th_arg *a, int64_t *v) {
  if (a->kind == TH_ARG_NONE) return th_error(TH_ERR_TYPE, "%s: missing required argument '%s'", op, what);
  return th_meta_int(op, what, a, v);
}

/* randint(high, size) or randint(low, high, size), *, generator, dtype=int64, device, requires_grad. */
th_status ltorch_randint_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *lo_a = &args[0], *hi_a = &args[1], *size_a = &args[2];
  if (size_a->kind == TH_ARG_NONE) { /* randint(high, size) */
    size_a = &args[1];
    hi_a = &args[0];
    lo_a = NULL;
  }
  int64_t low = 0, high, shape[TH_MAX_DIMS];
  int ndim;
  if (lo_a && lo_a->kind != TH_ARG_NONE) TH_TRY(read_bound(op, "low", lo_a, &low));
  TH_TRY(read_bound(op, "high", hi_a, &high));
  if (size_a->kind == TH_ARG_NONE) return th_error(TH_ERR_TYPE, "%s: missing required argument 'size'", op);
  TH_TRY(read_shape(op, size_a, shape, &ndim));
  TH_TRY(no_generator(op, &args[3]));
  th_device dev;
  th_dtype dt;
  TH_TRY(dev_dtype(op, &args[5], &args[4], cpu_device, TH_I64, &dev, &dt));
  TH_TRY(no_grad(op, &args[6], dt));
  TH_TRY(check_from_to(op, low, high));
  return randint_draw(tr, op, low, high - 1, ndim, shape, dev, dt, out);
}

/* randint_like(input, high) or randint_like(input, low, high), *, generator, dtype, device,
 * requires_grad, memory_format: input's shape, its dtype and device by default. */
th_status ltorch_randint_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  const th_arg *lo_a = &args[1], *hi_a = &args[2];
  if (hi_a->kind == TH_ARG_NONE) { /* randint_like(input, high) */
    hi_a = &args[1];
    lo_a = NULL;
  }
  int64_t low = 0, high;
  if (lo_a) TH_TRY(read_bound(op, "low", lo_a, &low));
  TH_TRY(read_bound(op, "high", hi_a, &high));
  TH_TRY(no_generator(op, &args[3]));
  th_device dev;
  th_dtype dt;
  TH_TRY(dev_dtype(op, &args[5], &args[4], v->device, v->dtype, &dev, &dt));
  TH_TRY(no_grad(op, &args[6], dt));
  TH_TRY(check_from_to(op, low, high));
  return randint_draw(tr, op, low, high - 1, v->ndim, v->shape, dev, dt, out);
}

/* randperm(n, *, generator, dtype=int64, device, requires_grad): the argsort of n float64 uniforms. */
th_status ltorch_randperm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t n;
  TH_TRY(th_meta_int(op, "n", &args[0], &n));
  TH_TRY(th_meta_check_shape(op, &n, 1));
  TH_TRY(no_generator(op, &args[1]));
  th_device dev;
  th_dtype dt;
  TH_TRY(dev_dtype(op, &args[3], &args[2], cpu_device, TH_I64, &dev, &dt));
  TH_TRY(no_grad(op, &args[4], dt));
  int64_t dlo = 0, dhi = 0;
  const char *cname = NULL;
  if (th_dtype_is_fp8(dt) || (!th_dtype_is_float(dt) && !int_range(dt, &dlo, &dhi, &cname)))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"randperm_cpu\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(dt));
  if (!th_dtype_is_float(dt) && n > 0 && n - 1 > dhi)
    return th_error(TH_ERR_RUNTIME, "%s: n: %lld values do not fit dtype %s (the largest is %lld)", op, (long long)n,
                    th_dtype_name(dt), (long long)dhi);
  if (n == 0) return th_tu_full(tr, 1, &n, th_arg_int(0), dev, dt, out);
  th_arg u;
  TH_TRY(draw_uniform(tr, 1, &n, 0.0, 1.0, dev, TH_F64, &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_argsort, u, out));
  return th_tu_convert(tr, out, dt);
}

/* ---- bernoulli ------------------------------------------------------------------------------------ */

/* u < p over `shape` (u uniform in cdt, p a number or a tensor of that shape in cdt), as dtype dt. */
static th_status bernoulli_mask(th_trace *tr, const th_value *like, th_arg p, th_dtype cdt, th_dtype dt, th_arg *out) {
  th_arg u;
  TH_TRY(draw_uniform(tr, like->ndim, like->shape, 0.0, 1.0, like->device, cdt, &u));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, u, p, out));
  return th_tu_convert(tr, out, dt);
}

static th_status prob_number(const char *op, const th_arg *a, double *p) {
  TH_TRY(th_tu_float(op, "p", a, p));
  if (!(*p >= 0.0 && *p <= 1.0))
    return th_error(TH_ERR_RUNTIME, "%s: bernoulli_ expects p to be in [0, 1], but got p=%g", op, *p);
  return TH_OK;
}

/* bernoulli(input, p=None, *, generator): 1 with probability input (a floating tensor of
 * probabilities), or with probability p (a number) in input's shape and dtype. */
th_status ltorch_bernoulli_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  TH_TRY(no_generator(op, &args[2]));
  if (args[1].kind == TH_ARG_NONE) {
    TH_TRY(float_dtype(op, "bernoulli_tensor_cpu_p_", v->dtype));
    th_dtype cdt = sample_dtype(v->dtype);
    th_arg p = args[0];
    TH_TRY(th_tu_convert(tr, &p, cdt));
    return bernoulli_mask(tr, v, p, cdt, v->dtype, out);
  }
  double p;
  TH_TRY(prob_number(op, &args[1], &p));
  return bernoulli_mask(tr, v, th_arg_float(p), sample_dtype(v->dtype), v->dtype, out);
}

/* bernoulli_(input, p=0.5, *, generator): input's elements become 1 with probability p (a number, or
 * a tensor broadcast to input's shape) and 0 otherwise, in input's dtype. */
th_status ltorch_bernoulli__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  TH_TRY(no_generator(op, &args[2]));
  th_arg p = args[1], mask;
  const th_value *pv = th_meta_tensor(&p);
  th_dtype cdt = sample_dtype(v->dtype);
  if (pv) {
    TH_TRY(float_dtype(op, "bernoulli_tensor_cpu_p_", pv->dtype));
    if (pv->dtype == TH_F64) cdt = TH_F64;
    TH_TRY(th_tu_convert(tr, &p, cdt));
    TH_TRY(th_tu_expand(tr, op, &p, v->ndim, v->shape));
  } else {
    double pn;
    TH_TRY(prob_number(op, &p, &pn));
    p = th_arg_float(pn);
  }
  TH_TRY(bernoulli_mask(tr, v, p, cdt, v->dtype, &mask));
  return th_tu_call2(tr, TH_OP_prims_copy_, mask, args[0], out);
}

/* ---- normal --------------------------------------------------------------------------------------- */

static th_status std_number(const char *op, const th_arg *a, double *s) {
  TH_TRY(th_tu_float(op, "std", a, s));
  if (!(*s >= 0.0)) return th_error(TH_ERR_RUNTIME, "%s: normal expects std >= 0.0, but found std %g", op, *s);
  return TH_OK;
}

/* normal(mean, std, size=None, *, generator, dtype, device, requires_grad), PyTorch's four forms:
 * (Tensor mean, Tensor std) broadcast together, (Tensor mean, float std=1), (float mean, Tensor std),
 * each in its tensors' dtype and device; (float mean, float std, size) with dtype (float32) and
 * device. mean + std * z for standard normal z. */
th_status ltorch_normal_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *mean = &args[0], *std = &args[1];
  TH_TRY(no_generator(op, &args[3]));
  const th_value *mv = th_meta_tensor(mean), *sv = th_meta_tensor(std);
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  th_dtype dt;
  th_arg m = *mean, s = *std;
  if (!mv && !sv) {
    if (args[2].kind == TH_ARG_NONE)
      return th_error(TH_ERR_TYPE, "%s: normal(float mean, float std) needs a size (normal(mean, std, size))", op);
    double mn, sn;
    TH_TRY(th_tu_float(op, "mean", mean, &mn));
    TH_TRY(std_number(op, std, &sn));
    TH_TRY(read_shape(op, &args[2], shape, &ndim));
    TH_TRY(dev_dtype(op, &args[5], &args[4], cpu_device, TH_F32, &dev, &dt));
    TH_TRY(float_dtype(op, "normal_kernel_cpu", dt));
    TH_TRY(no_grad(op, &args[6], dt));
    m = th_arg_float(mn);
    s = th_arg_float(sn);
  } else {
    if (args[2].kind != TH_ARG_NONE || args[4].kind != TH_ARG_NONE || args[5].kind != TH_ARG_NONE)
      return th_error(TH_ERR_TYPE,
                      "%s: size, dtype and device are accepted with a float mean and a float std only (a tensor "
                      "mean or std gives the result its shape, dtype and device)",
                      op);
    TH_TRY(no_grad(op, &args[6], TH_F32));
    if (!sv) {
      double sn;
      TH_TRY(std_number(op, std, &sn));
      s = th_arg_float(sn);
    }
    if (mv) TH_TRY(float_dtype(op, "normal_kernel_cpu", mv->dtype));
    if (sv) TH_TRY(float_dtype(op, "normal_kernel_cpu", sv->dtype));
    if (mv && sv) {
      th_arg both[2] = {m, s};
      th_tu_type comp, res;
      TH_TRY(th_tu_promote(op, 2, both, TH_TU_PROMO_PRESERVE, &comp, &res));
      dt = th_tu_tensor_dtype(res);
    } else {
      dt = mv ? mv->dtype : sv->dtype;
    }
    dev = mv ? mv->device : sv->device;
    th_arg both[2] = {m, s};
    TH_TRY(th_tu_broadcast_shape(op, 2, both, &ndim, shape));
  }
  th_dtype cdt = sample_dtype(dt);
  th_arg z;
  TH_TRY(draw_normal(tr, ndim, shape, dev, cdt, &z));
  TH_TRY(th_tu_convert(tr, &m, cdt));
  TH_TRY(th_tu_convert(tr, &s, cdt));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, z, s, &z));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, z, m, out));
  return th_tu_convert(tr, out, dt);
}

/* ---- multinomial ---------------------------------------------------------------------------------- */

/* multinomial(input, num_samples, replacement=False, *, generator): indices (int64) of categories
 * drawn with probability proportional to input's entries along its last dim (input 1-D or 2-D), by the
 * Gumbel-max trick in float64 (module comment). */
th_status ltorch_multinomial_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  int64_t n;
  bool replacement;
  TH_TRY(th_meta_int(op, "num_samples", &args[1], &n));
  TH_TRY(th_tu_bool(op, "replacement", &args[2], &replacement));
  TH_TRY(no_generator(op, &args[3]));
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: multinomial only supports floating-point dtypes for input, got: %s", op,
                    th_tu_scalar_type_name(v->dtype));
  if (v->ndim != 1 && v->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: prob_dist must be 1 or 2 dim", op);
  int64_t k = v->shape[v->ndim - 1];
  if (k == 0) return th_error(TH_ERR_RUNTIME, "%s: number of categories cannot be zero", op);
  if (n <= 0) return th_error(TH_ERR_RUNTIME, "%s: cannot sample n_sample <= 0 samples", op);
  if (!replacement && n > k)
    return th_error(TH_ERR_RUNTIME, "%s: cannot sample n_sample > prob_dist.size(-1) samples without replacement", op);
  th_arg logp = args[0], e, keys;
  TH_TRY(th_tu_convert(tr, &logp, TH_F64));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, logp, &logp));
  if (!replacement) { /* one key per category; the n largest, largest first */
    TH_TRY(draw_exponential(tr, v->ndim, v->shape, v->device, TH_F64, &e));
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, e, &e));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, logp, e, &keys));
    th_arg top;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_topk, keys, th_arg_int(n), &top));
    *out = top.u.seq.items[1];
    return TH_OK;
  }
  /* n rows of keys per distribution: (n, k) or (rows, n, k), each row's argmax one sample */
  int64_t shape[3];
  int ndim = 0;
  if (v->ndim == 2) shape[ndim++] = v->shape[0];
  shape[ndim++] = n;
  shape[ndim++] = k;
  TH_TRY(th_tu_unsqueeze(tr, logp, v->ndim - 1, &logp));
  TH_TRY(draw_exponential(tr, ndim, shape, v->device, TH_F64, &e));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, e, &e));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, logp, e, &keys));
  return th_tu_call2(tr, TH_OP_ltorch_argmax, keys, th_arg_int(-1), out);
}

/* ---- in-place samplers ---------------------------------------------------------------------------- */

/* uniform_(input, from=0, to=1, *, generator): samples in [from, to) in input's dtype. */
th_status ltorch_uniform__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  double lo, hi;
  TH_TRY(th_tu_float(op, "from", &args[1], &lo));
  TH_TRY(th_tu_float(op, "to", &args[2], &hi));
  TH_TRY(no_generator(op, &args[3]));
  TH_TRY(float_dtype(op, "check_uniform_bounds", v->dtype));
  if (!isfinite(lo) || !isfinite(hi))
    return th_error(TH_ERR_RUNTIME, "%s: uniform_ expects from and to to be finite, but got from=%g and to=%g", op, lo,
                    hi);
  if (lo > hi)
    return th_error(TH_ERR_RUNTIME, "%s: uniform_ expects to return a [from, to) range, but found from=%g > to=%g", op,
                    lo, hi);
  th_arg u;
  TH_TRY(draw_uniform(tr, v->ndim, v->shape, lo, hi, v->device, v->dtype, &u));
  return th_tu_call2(tr, TH_OP_prims_copy_, u, args[0], out);
}

/* normal_(input, mean=0, std=1, *, generator) and log_normal_(input, mean=1, std=2): mean + std * z
 * (its exp for log_normal_) in input's dtype. */
static th_status normal_inplace(th_trace *tr, const th_symbol *sym, const th_arg *args, bool log_normal, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  double mean, std;
  TH_TRY(th_tu_float(op, "mean", &args[1], &mean));
  TH_TRY(th_tu_float(op, "std", &args[2], &std));
  TH_TRY(no_generator(op, &args[3]));
  if (log_normal) {
    TH_TRY(continuous_dtype(op, "log_normal", v->dtype));
    if (!(std > 0.0)) return th_error(TH_ERR_RUNTIME, "%s: log_normal_ expects std > 0.0, but found std=%g", op, std);
  } else {
    TH_TRY(float_dtype(op, "normal_kernel_cpu", v->dtype));
    if (!(std >= 0.0)) return th_error(TH_ERR_RUNTIME, "%s: normal expects std >= 0.0, but found std %g", op, std);
  }
  th_arg z;
  TH_TRY(draw_normal(tr, v->ndim, v->shape, v->device, sample_dtype(v->dtype), &z));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, z, th_arg_float(std), &z));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, z, th_arg_float(mean), &z));
  if (log_normal) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, z, &z));
  TH_TRY(th_tu_convert(tr, &z, v->dtype));
  return th_tu_call2(tr, TH_OP_prims_copy_, z, args[0], out);
}
th_status ltorch_normal__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return normal_inplace(tr, sym, args, false, out);
}
th_status ltorch_log_normal__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return normal_inplace(tr, sym, args, true, out);
}

/* exponential_(input, lambd=1, *, generator): -log(1 - u) / lambd in input's dtype. */
th_status ltorch_exponential__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  double lambd;
  TH_TRY(th_tu_float(op, "lambd", &args[1], &lambd));
  TH_TRY(no_generator(op, &args[2]));
  TH_TRY(continuous_dtype(op, "Exponential distribution", v->dtype));
  if (!(lambd > 0.0))
    return th_error(TH_ERR_RUNTIME, "%s: exponential_ expects lambda > 0.0, but found lambda=%g", op, lambd);
  th_arg e;
  TH_TRY(draw_exponential(tr, v->ndim, v->shape, v->device, sample_dtype(v->dtype), &e));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, e, th_arg_float(lambd), &e));
  TH_TRY(th_tu_convert(tr, &e, v->dtype));
  return th_tu_call2(tr, TH_OP_prims_copy_, e, args[0], out);
}

/* cauchy_(input, median=0, sigma=1, *, generator): median + sigma * tan(pi * (u - 1/2)). */
th_status ltorch_cauchy__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  double median, sigma;
  TH_TRY(th_tu_float(op, "median", &args[1], &median));
  TH_TRY(th_tu_float(op, "sigma", &args[2], &sigma));
  TH_TRY(no_generator(op, &args[3]));
  TH_TRY(continuous_dtype(op, "Cauchy distribution", v->dtype));
  if (!(sigma > 0.0)) return th_error(TH_ERR_RUNTIME, "%s: cauchy_ expects sigma > 0.0, but found sigma=%g", op, sigma);
  th_arg c;
  TH_TRY(draw_uniform(tr, v->ndim, v->shape, 0.0, 1.0, v->device, sample_dtype(v->dtype), &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, c, th_arg_float(0.5), &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, c, th_arg_float(pi), &c));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_tan, c, &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, c, th_arg_float(sigma), &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, c, th_arg_float(median), &c));
  TH_TRY(th_tu_convert(tr, &c, v->dtype));
  return th_tu_call2(tr, TH_OP_prims_copy_, c, args[0], out);
}

/* geometric_(input, p, *, generator): the number of Bernoulli(p) trials to the first success,
 * ceil(log(1 - u) / log(1 - p)) (at least 1) in float64, then input's dtype. */
th_status ltorch_geometric__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  double p;
  TH_TRY(th_tu_float(op, "p", &args[1], &p));
  TH_TRY(no_generator(op, &args[2]));
  if (!(p > 0.0 && p < 1.0))
    return th_error(TH_ERR_RUNTIME, "%s: geometric_ expects p to be in (0, 1), but got p=%g", op, p);
  if (th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"geometric_cpu\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(v->dtype));
  th_arg e;
  TH_TRY(draw_exponential(tr, v->ndim, v->shape, v->device, TH_F64, &e)); /* -log(1 - u) */
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, e, th_arg_float(-log1p(-p)), &e));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_ceil, e, &e));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_maximum, e, th_arg_float(1.0), &e));
  TH_TRY(th_tu_convert(tr, &e, v->dtype));
  return th_tu_call2(tr, TH_OP_prims_copy_, e, args[0], out);
}

/* The largest value random_() draws into dt: 2^digits for a floating dtype (every integer up to it is
 * exact), the largest value of an integer dtype, 1 for bool. */
static bool random_top(th_dtype dt, int64_t *top) {
  int64_t lo;
  const char *cname;
  switch (dt) {
    case TH_F64: *top = (int64_t)1 << 53; return true;
    case TH_F32: *top = (int64_t)1 << 24; return true;
    case TH_F16: *top = (int64_t)1 << 11; return true;
    case TH_BF16: *top = (int64_t)1 << 8; return true;
    default: return int_range(dt, &lo, top, &cname);
  }
}

/* random_(input, from=None, to='omitted', *, generator): integers uniform in [from, to) (from 0 by
 * default), in [from, the dtype's top] for to=None, in [0, top] with neither; random_(n) is
 * random_(to=n), as PyTorch's overloads. */
th_status ltorch_random__decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  const th_arg *from_a = &args[1], *to_a = &args[2];
  TH_TRY(no_generator(op, &args[3]));
  int64_t top;
  if (!random_top(v->dtype, &top))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"random_cpu\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(v->dtype));
  bool to_omitted = to_a->kind == TH_ARG_STR && !strcmp(to_a->u.s, "omitted");
  if (!to_omitted && to_a->kind == TH_ARG_STR)
    return th_error(TH_ERR_TYPE, "%s: to: expected an int or None, but got a str", op);
  int64_t low = 0, last = top, high;
  if (to_omitted && from_a->kind != TH_ARG_NONE) { /* random_(to) */
    TH_TRY(th_meta_int(op, "to", from_a, &high));
    TH_TRY(check_from_to(op, 0, high));
    last = high - 1;
  } else if (!to_omitted) {
    if (from_a->kind != TH_ARG_NONE) TH_TRY(th_meta_int(op, "from", from_a, &low));
    if (to_a->kind != TH_ARG_NONE) {
      TH_TRY(th_meta_int(op, "to", to_a, &high));
      TH_TRY(check_from_to(op, low, high));
      last = high - 1;
    } else if (low > top) {
      return th_error(TH_ERR_RUNTIME, "%s: random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                      op, (long long)low, (long long)top);
    }
  }
  th_arg r;
  TH_TRY(randint_draw(tr, op, low, last, v->ndim, v->shape, v->device, v->dtype, &r));
  return th_tu_call2(tr, TH_OP_prims_copy_, r, args[0], out);
}

/* ---- vjp (ops/vjp.h) -------------------------------------------------------------------------------
 * normal and bernoulli: PyTorch's derivatives give their tensor inputs (mean, std, p) a zero gradient;
 * here zeros of each floating tensor input's shape and dtype (no forward value is saved). The samplers
 * without tensor inputs, the *_like forms (only their input's shape is used) and multinomial (integer
 * output) are non-differentiable. The in-place samplers get their gradient from their decomposition:
 * prims.copy_ of a fresh sample gives the overwritten tensor none. */
static th_status random_zero_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)cts;
  for (int i = 0; i < b->nargs; i++) {
    const th_value *v = th_meta_tensor(&b->args[i]);
    if (v && th_dtype_is_float(v->dtype))
      TH_TRY(th_tu_full(tr, v->ndim, v->shape, th_arg_float(0.0), v->device, v->dtype, &grads[i]));
  }
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_random[] = {
  {TH_OP_ltorch_rand, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_rand_like, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_randn, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_randn_like, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_randint, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_randint_like, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_randperm, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_multinomial, TH_VJP_NONDIFF, NULL},
  {TH_OP_ltorch_bernoulli, TH_VJP_RULE, random_zero_vjp},
  {TH_OP_ltorch_normal, TH_VJP_RULE, random_zero_vjp},
};
const int th_vjp_table_torch_random_n = (int)(sizeof th_vjp_table_torch_random / sizeof th_vjp_table_torch_random[0]);
