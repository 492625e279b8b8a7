/* kernel.h — operator executors: the implementations (kernels) they claim bound symbols with, and the
 * registry of user executors. What a kernel sees at run time is the runtime's (runtime/kernel.h). */
#ifndef TH_KERNEL_H
#define TH_KERNEL_H

#include "core/ir.h"
#include "ops/ops.h"
#include "runtime/kernel.h"
#include "thunder/executor.h"

/* ---- executors ---------------------------------------------------------------------------------------
 * An operator executor claims bsyms of the symbols it implements; `checker` (optional, the public
 * th_checker_fn of thunder/executor.h) may refuse a particular call (dtype, shape). The eager executor
 * implements every prim; the BLAS executor takes prims.matmul / prims.linear in f32 and bf16 (f64
 * and every other dtype stay with the eager executor), prims.scaled_mm, and prims.convolution in f32
 * and bf16 (blas_conv.c). Executors users make with
 * th_executor_new (executors/registry.c) are descriptors of the same type, whose impls run
 * th_rt_user_kernel_adapter. */
typedef struct th_operator_impl {
  th_op_id op;
  th_rt_kernel_fn kernel;
  th_checker_fn checker; /* NULL: accepts every call */
} th_operator_impl;

typedef struct th_executor_desc {
  const char *name; /* "eager", "blas" */
  int nimpls;
  const th_operator_impl *impls;
} th_executor_desc;

/* Built-in executors, defined in src/executors/eager/ and src/executors/blas.c. */
extern const th_executor_desc th_eager_executor;
extern const th_executor_desc th_blas_executor;

/* True when oneDNN has a bf16 matmul on this CPU (AVX-512 BF16 / AMX); without one the BLAS executor
 * computes bf16 GEMMs in float32 on widened operands, and the execution transform spells that out in
 * the trace when the fuser runs (passes.c), so the conversions fuse with their neighbours. */
bool th_blas_has_native_bf16(void);

/* ---- GEMM epilogues (blas.c) ------------------------------------------------------------------------
 * Elementwise ops after a GEMM that oneDNN's matmul applies to the f32 accumulator as post-ops, before
 * the one conversion to the output dtype. The execution transform (passes.c) folds a GEMM and a chain
 * of them into one bsym the BLAS executor claims; its kernel reads the chain back from the subsymbols. */
typedef enum {
  TH_BLAS_EPI_GELU_TANH,
  TH_BLAS_EPI_GELU_ERF,
  TH_BLAS_EPI_SILU,
  TH_BLAS_EPI_RELU,
  TH_BLAS_EPI_ADD,     /* + a tensor of the output's shape and dtype (a residual): operand */
  TH_BLAS_EPI_SCALE,   /* * a constant number: alpha */
  TH_BLAS_EPI_CONVERT, /* to dtype (f32 or bf16): the output dtype, no rounding in between */
} th_blas_epi_kind;

typedef struct {
  th_blas_epi_kind kind;
  float alpha;
  const th_arg *operand; /* ADD: the residual (an argument of the op's bsym) */
  th_dtype dtype;        /* the op's output dtype */
} th_blas_epi;

#define TH_BLAS_EPI_MAX 4

/* Whether top-level bsym g is a GEMM the BLAS executor can run with an epilogue: prims.linear,
 * ltorch.linear, prims.matmul (not both operands batched) or ltorch.matmul of two matrices, f32 or
 * bf16, K > 0. */
bool th_blas_epilogue_gemm(const th_bsym *g);
/* Whether bsym e, given the chain's current value v as an operand, is an epilogue op; fills *op. */
bool th_blas_epilogue_op(const th_bsym *e, const th_value *v, th_blas_epi *op);
/* Whether oneDNN makes a matmul primitive for GEMM g followed by ops[0..n) on this CPU (probed with
 * dense layouts of g's shapes). */
bool th_blas_epilogue_supported(const th_bsym *g, const th_blas_epi *ops, int n);

/* ---- user executors (executors/registry.c) ------------------------------------------------------------
 * th_registry_snapshot: *out = a private copy of the registered executor `name` (its name, impls and
 * kernels as they are now), for one compilation, or NULL if there is none (TH_OK either way;
 * TH_ERR_NOMEM on allocation failure). Free with th_registry_snapshot_free (NULL is fine). th_registry_user_kernel: the public kernel behind impl of
 * descriptor d (a snapshot), or NULL for built-in kernels. th_registry_executor_names: "a, b" of the
 * registered executors, for messages. The runtime hands a step's user kernel to the adapter through
 * th_rt_user_kernel. */
th_status th_registry_snapshot(const char *name, th_executor_desc **out);
void th_registry_snapshot_free(th_executor_desc *d);
th_kernel_fn th_registry_user_kernel(const th_executor_desc *d, const th_operator_impl *impl);
/* The user pointer behind impl of descriptor d (th_executor_add_impl_ex), else NULL; the runtime keeps
 * it per step and hands it to the adapter (th_rt_user_data, read by th_kernel_user). */
void *th_registry_user_data(const th_executor_desc *d, const th_operator_impl *impl);
/* Whether impl of executor d claims b: its th_checker_ex_fn (user executors' th_executor_add_impl_ex;
 * an error fails the compilation, with the op's name in front), else its plain checker (NULL: yes). */
th_status th_registry_check(const th_executor_desc *d, const th_operator_impl *impl, const th_bsym *b, bool *claims);
void th_registry_executor_names(char *buf, size_t n);
th_status th_rt_user_kernel_adapter(th_rt_env *env, const th_bsym *b);

#endif
