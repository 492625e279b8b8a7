/* proxy.h — declarations shared by the tracer's three files: proxy.c (recording: Python <-> th_arg,
 * pyth_record, aliasing), dispatch.c (the dispatch table and the callable op objects) and
 * tensor_proxy.c (the TensorProxy type). The extension's other files see the tracer through pyth.h. */
#ifndef PYTH_PROXY_H
#define PYTH_PROXY_H

#include "pyth.h"

/* ---- tensor_proxy.c ------------------------------------------------------------------------------ */

/* Whether proxy p belongs to the trace being recorded (a proxy kept after its trace has ended is not). */
bool pyth_proxy_live(const pyth_proxy *p);
/* The proxy's value, or NULL with RuntimeError if the proxy outlived its trace. */
th_value *pyth_proxy_value(PyObject *o);

/* ---- dispatch.c ---------------------------------------------------------------------------------- */

/* An op as the tracer calls it: qualified name, the spelling users know (for errors), flags, and
 * whether the first two positional arguments are swapped (Tensor.__rsub__(a, b) is b - a). */
typedef struct {
  PyObject_HEAD PyObject *qualname; /* str */
  PyObject *display;                /* str */
  unsigned flags;
  bool swap;
  PyObject *self; /* bound methods (x.add): the proxy; NULL otherwise */
} pyth_op;

/* dict: Tensor method name -> pyth_op (filled by pyth_dispatch_init). */
extern PyObject *pyth_methods;

/* Records op with args (a tuple; its first two swapped for a reflected op) and kwargs (a dict or
 * NULL) by pyth_record; op->self is not prepended (calling the op object does that). */
PyObject *pyth_op_call_args(pyth_op *op, PyObject *args, PyObject *kwargs);
/* 1 and *flags = the op's TH_OPF_* when qualname names an op of the core, else 0. */
int pyth_qualname_flags(const char *qualname, unsigned *flags);
/* Whether name (torch.randn, torch.rand_like, Tensor.normal_, torch.bernoulli, ...) is one of torch's
 * random samplers. */
bool pyth_is_random_factory(const char *name);
/* What the refusal of a random sampler thunder_c does not build adds to "<name> is not supported". */
#define PYTH_RANDOM_UNSUPPORTED                                                                                        \
  "a jitted function draws random numbers with torch.rand, randn, randint, randperm, normal, bernoulli, "              \
  "multinomial, their _like forms and Tensor.uniform_, normal_, bernoulli_, exponential_, cauchy_, "                   \
  "log_normal_, geometric_ and random_ (draw this one outside and pass the tensor in as an argument)"

#endif
