/* blas_conv.h — the BLAS executor's convolution (blas_conv.c): prims.convolution through oneDNN's
 * convolution and deconvolution primitives, registered in blas.c's table. */
#ifndef TH_BLAS_CONV_H
#define TH_BLAS_CONV_H

#include "executors/kernel.h"

/* Runs prims.convolution (float32 or bfloat16) with a cached oneDNN primitive. */
th_status th_blas_convolution_kernel(th_rt_env *env, const th_bsym *b);
/* Claims a call when oneDNN creates a primitive for it: float32 / bfloat16 operands of one dtype, no
 * empty tensor, and a problem its convolution (or, transposed, deconvolution) descriptor accepts. */
bool th_blas_convolution_checker(const th_bsym *b);

#endif
