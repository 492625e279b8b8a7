/* eager_internal.h — what the eager executor's files share: the strided N-d loop, operand binding,
 * argument readers, the conversion copy, and the kernel of every prim.
 *
 * The eager executor is the always-correct reference: one kernel per prim family, reading any strided
 * layout and any dtype through core/scalar.h. Every elementwise-shaped loop goes through one
 * iterator (th_eg_iter): up to TH_EG_MAX_OPS operands laid over one loop shape, each with its own byte
 * strides (0 where an operand broadcasts: 0-dim tensors, numbers, expanded views; negative for flip).
 * The iterator drops size-1 dims and merges dims that are contiguous for every operand, so a
 * contiguous tensor is one long row; the work is handed to a row function (ctx, p[], bs[], n) that
 * processes n elements starting at p[k] with byte stride bs[k] per operand — where the fast paths
 * live. Large loops split into chunks run by OpenMP threads (the row function must be thread-safe).
 *
 * Files and what each exports (banners below follow this order):
 *   eager.c        the iterator, operand binding, argument readers, the copy; th_eager_executor
 *   elementwise.c  unary, binary, compare, where, convert_element_type kernels
 *   reduction.c    sum, prod, amax, amin, var, var_mean, argmax, argmin
 *   shape.c        broadcast_in_dim, reshape, transpose, slice_prim, squeeze, flip, cat, take, clone,
 *                  shallow_copy, copy_, device_put
 *   creation.c     full, iota, uniform, uniform_philox, get_and_update_rng_state
 *   linalg.c       matmul, linear
 *   scaled_mm.c    scaled_mm (the fp8 GEMM: decode tables, ISA-selected micro-kernels)
 *   scan.c         sort, topk, kthvalue, cumsum, cumprod, logcumsumexp, cummax, cummin */
#ifndef TH_EAGER_INTERNAL_H
#define TH_EAGER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/scalar.h"
#include "executors/kernel.h"

#define TH_EG_MAX_OPS 4     /* out + up to three inputs (where) */
#define TH_EG_PAR_MIN 32768 /* elements of work below which a loop stays on one thread */

/* ---- eager.c: strided iteration ---------------------------------------------------------------- */

/* Processes n elements: operand k's first element is at p[k], the next ones bs[k] bytes apart. */
typedef void (*th_eg_row_fn)(void *ctx, char *const *p, const int64_t *bs, int64_t n);

typedef struct th_eg_iter {
  int nops;
  int ndim;                               /* after coalescing; >= 1 */
  int64_t numel;                          /* 0: nothing to do */
  int64_t shape[TH_MAX_DIMS];             /* innermost last */
  int64_t bs[TH_MAX_DIMS][TH_EG_MAX_OPS]; /* bs[d][k]: byte stride of operand k along dim d */
  char *base[TH_EG_MAX_OPS];
} th_eg_iter;

/* Sets up a loop over `shape` (ndim dims) for nops operands: operand k starts at base[k] and moves
 * bstrides[k][d] bytes along dim d. Size-1 dims are dropped and contiguous neighbours merged. */
void th_eg_iter_init(th_eg_iter *it, int nops, int ndim, const int64_t *shape, char *const *base,
                     const int64_t (*bstrides)[TH_MAX_DIMS]);
/* Runs fn over the flat (row-major) element range [begin, end) of the loop. */
void th_eg_iter_range(const th_eg_iter *it, int64_t begin, int64_t end, th_eg_row_fn fn, void *ctx);
/* The same with other operand base pointers (the loop reused at many places: reductions). */
void th_eg_iter_range_from(const th_eg_iter *it, char *const *base, int64_t begin, int64_t end, th_eg_row_fn fn,
                           void *ctx);
/* Runs fn over the whole loop; with `parallel`, loops above TH_EG_PAR_MIN elements split into chunks
 * run by OpenMP threads. */
void th_eg_iter_run(const th_eg_iter *it, th_eg_row_fn fn, void *ctx, bool parallel);

/* ---- eager.c: operands ------------------------------------------------------------------------------ */

/* One input of an elementwise loop, laid over the loop shape. A number argument is stored in `num`
 * (base points there) with stride 0; a tensor of lower rank broadcasts right-aligned (size-1 dims and
 * missing leading dims get stride 0), which covers 0-dim CPU tensors acting as scalars. The struct is
 * self-referential for numbers: never copy it after binding. */
typedef struct th_eg_operand {
  char *base;
  th_dtype dtype;
  bool is_number;
  bool number_is_float;    /* numbers: the Python type (float vs int/bool) */
  int64_t bs[TH_MAX_DIMS]; /* byte strides over the loop shape */
  union {
    double f;
    int64_t i;
    unsigned char bytes[8];
  } num;
} th_eg_operand;

/* Binds b->args[argi] (a tensor or a number) over the loop shape. A number is stored in num_dtype
 * (the cast PyTorch applies to a Python scalar joining a tensor op), or as float64/int64 by its
 * Python type when num_dtype is TH_DTYPE_COUNT. Errors: a tensor whose shape does not broadcast to
 * the loop shape (TH_ERR_RUNTIME), an argument that is neither (TH_ERR_TYPE). */
th_status th_eg_bind(th_rt_env *env, const th_bsym *b, int argi, int ndim, const int64_t *shape, th_dtype num_dtype,
                     th_eg_operand *o);
/* Binds a tensor the same way (who names the op in errors). */
th_status th_eg_bind_tensor(const th_tensor *t, int ndim, const int64_t *shape, const char *who, th_eg_operand *o);
/* The byte strides of a tensor of exactly the loop's rank (bs has ndim entries). */
void th_eg_tensor_bstrides(const th_tensor *t, int64_t *bs);
/* Pointer to t's element [0, ..., 0]. */
char *th_eg_data(const th_tensor *t);

/* ---- eager.c: arguments and outputs ------------------------------------------------------------- */

/* The k-th output value of b (b->out a VALUE for k == 0, or a TUPLE/LIST), or NULL. */
const th_value *th_eg_out_value(const th_bsym *b, int k);
/* Allocates the k-th output of b (contiguous; a number output becomes a 0-dim tensor of its Python
 * type); NULL with an error set. */
th_tensor *th_eg_alloc_out(th_rt_env *env, const th_bsym *b, int k);
/* The tensor argument b->args[i]; NULL with an error naming the op and the parameter otherwise. */
th_tensor *th_eg_tensor_arg(th_rt_env *env, const th_bsym *b, int i);
/* An int argument (constant or known number proxy). */
th_status th_eg_int_arg(th_rt_env *env, const th_bsym *b, int i, int64_t *v);
/* A float (or int) argument. */
th_status th_eg_float_arg(th_rt_env *env, const th_bsym *b, int i, double *v);
/* An int[] argument (TUPLE or LIST of ints) into v[max]; *n gets its length. */
th_status th_eg_int_list_arg(th_rt_env *env, const th_bsym *b, int i, int64_t *v, int max, int *n);
/* The op's qualified name for messages ("prims.add"). */
const char *th_eg_name(const th_bsym *b);

/* ---- eager.c: copy with conversion ------------------------------------------------------------------ */

/* Copies the src view into the dst view (both over `shape`, ndim dims, byte strides; strides may be 0
 * or negative for src), converting src_dt to dst_dt with PyTorch's cast semantics. */
void th_eg_copy(char *dst, th_dtype dst_dt, const int64_t *dst_bs, const char *src, th_dtype src_dt,
                const int64_t *src_bs, int ndim, const int64_t *shape);
/* Copies tensor src into tensor dst of the same shape (any strides and dtypes). */
void th_eg_copy_tensor(th_tensor *dst, const th_tensor *src);
/* reshape's view rule (ATen's computeStride, shape.c): the strides viewing (oshape, ostride) as nshape,
 * or false when no view exists (reshape then copies). Shared with the fuser's input views. */
bool th_eg_view_strides(int ond, const int64_t *oshape, const int64_t *ostride, int nnd, const int64_t *nshape,
                        int64_t *nstride);

/* ---- compute classes -------------------------------------------------------------------------------- */
/* How an elementwise op computes for a dtype: f16/bf16/fp8/f32 in float32 (rounded once on store),
 * f64 in float64, bool and integers in int64 (stores keep the low bits: PyTorch's wrap-around). */
typedef enum th_eg_class { TH_EG_CF32, TH_EG_CF64, TH_EG_CI64 } th_eg_class;

static inline th_eg_class th_eg_class_of(th_dtype dt) {
  if (dt == TH_F64) return TH_EG_CF64;
  if (th_dtype_is_float(dt)) return TH_EG_CF32;
  return TH_EG_CI64;
}

/* True if p is aligned for an element of `size` bytes (fast paths dereference typed pointers). */
static inline bool th_eg_aligned(const void *p, size_t size) { return ((uintptr_t)p % size) == 0; }

/* ---- the kernels (one per prim family; dispatch inside on b->sym->id) ------------------------------- */
/* elementwise.c */
th_status th_eg_unary_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_binary_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_compare_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_where_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_convert_element_type_ref(th_rt_env *env, const th_bsym *b);
/* reduction.c */
th_status th_eg_reduce_ref(th_rt_env *env, const th_bsym *b); /* sum prod amax amin var var_mean */
th_status th_eg_argminmax_ref(th_rt_env *env, const th_bsym *b);
/* shape.c */
th_status th_eg_broadcast_in_dim_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_reshape_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_transpose_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_slice_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_squeeze_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_flip_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_cat_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_take_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_clone_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_stride_order_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_update_aliases_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_shallow_copy_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_copy__ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_device_put_ref(th_rt_env *env, const th_bsym *b);
/* creation.c */
th_status th_eg_full_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_iota_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_uniform_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_uniform_philox_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_get_and_update_rng_state_ref(th_rt_env *env, const th_bsym *b);
/* linalg.c */
th_status th_eg_matmul_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_linear_ref(th_rt_env *env, const th_bsym *b);
/* scaled_mm.c */
th_status th_eg_scaled_mm_ref(th_rt_env *env, const th_bsym *b);

/* conv */
th_status th_eg_convolution_ref(th_rt_env *env, const th_bsym *b); /* conv.c */

/* norm */

/* pool */
/* pool.c: the pooling and resampling prims */
th_status th_eg_max_pool_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_adaptive_max_pool_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_pool_scatter_add_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_pool_gather_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_avg_pool_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_avg_pool_backward_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_adaptive_avg_pool_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_adaptive_avg_pool_backward_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_resample_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_resample_backward_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_im2col_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_col2im_ref(th_rt_env *env, const th_bsym *b);

/* index */
/* index.c: take_along_axis; scatter, scatter_add, scatter_reduce, index_add (dispatch on the op) */
th_status th_eg_take_along_axis_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_scatter_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_masked_scatter_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_masked_select_pad_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_searchsorted_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_tri_indices_ref(th_rt_env *env, const th_bsym *b);

/* scan */
/* scan.c: sort, topk, kthvalue, cumsum, cumprod, logcumsumexp, cummax, cummin */
th_status th_eg_sort_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_topk_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_kthvalue_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_cumsum_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_cumprod_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_logcumsumexp_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_cummax_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_cummin_ref(th_rt_env *env, const th_bsym *b);

/* attention */
/* attention.c: the flash attention prims (tiled, online softmax; OpenMP over batch x heads x blocks) */
th_status th_eg_sdpa_flash_ref(th_rt_env *env, const th_bsym *b);
th_status th_eg_sdpa_flash_backward_ref(th_rt_env *env, const th_bsym *b);

/* random */

/* stat */
/* stat.c: mode (ATen's CPU kernel, std::sort tie order included) */
th_status th_eg_mode_ref(th_rt_env *env, const th_bsym *b);

/* linalg_lapack.c: linalg_solve, linalg_slogdet, linalg_cholesky, linalg_eigh, linalg_svd (LAPACKE) */
th_status th_eg_linalg_lapack_ref(th_rt_env *env, const th_bsym *b);

/* ---- scaled_mm.c: the fp8 GEMM (also for tests and benchmarks) ----------------------------------------
 * C[M, N] (float32, row stride ldc) = decode(a) @ decode(b) with float32 accumulation; a [M, K] and
 * b [K, N] are fp8 codes with element strides a_m/a_k and b_k/b_n (any, 0 and negative included),
 * decoded through atab/btab (th_eg_fp8_table). K == 0 gives zeros. TH_ERR_RUNTIME for an ISA this CPU
 * lacks, TH_ERR_NOMEM for the packing buffers. */
typedef enum th_eg_isa { TH_EG_ISA_PORTABLE = 0, TH_EG_ISA_AVX2, TH_EG_ISA_AVX512 } th_eg_isa;
typedef struct th_eg_fp8_gemm_args {
  int64_t M, N, K;
  const uint8_t *a;
  const float *atab;
  int64_t a_m, a_k;
  const uint8_t *b;
  const float *btab;
  int64_t b_k, b_n;
  float *c;
  int64_t ldc;
} th_eg_fp8_gemm_args;
th_status th_eg_fp8_gemm(th_eg_isa isa, const th_eg_fp8_gemm_args *g);
/* The exact float32 value of each of the 256 codes of fp8 dtype dt; NULL for other dtypes. */
const float *th_eg_fp8_table(th_dtype dt);
/* Whether this CPU runs the micro-kernel of isa; its name ("portable", "avx2", "avx512"). */
bool th_eg_isa_supported(th_eg_isa isa);
const char *th_eg_isa_name(th_eg_isa isa);
/* The ISA prims.scaled_mm uses: $THUNDER_FP8_GEMM (portable / avx2 / avx512) when this CPU has it,
 * else the widest the CPU has. */
th_eg_isa th_eg_fp8_gemm_isa(void);

#endif
