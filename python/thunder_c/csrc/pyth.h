/* pyth.h — internal declarations of the thunder_c._C extension (CPython API, C11).
 *
 * The extension is a binding: it turns Python objects into the core's values (th_arg) and back,
 * routes every torch call made while tracing to th_trace_call, and runs compiled programs on torch
 * tensors exchanged by DLPack. It decides nothing about what a program computes: ops, their
 * semantics, the transforms and the execution plan are the core's (libthunder).
 *
 * Files: module.c (module init, dtypes, errors, op namespaces); the tracer: proxy.c (recording:
 * Python <-> th_arg, pyth_record, aliasing, autocast mirroring), dispatch.c (the torch-function
 * dispatch table and the callable op objects) and tensor_proxy.c (the TensorProxy type), which share
 * proxy.h; the jitted callable: jit.c (construction, a call, introspection), jit_cache.c (the cache
 * key), jit_trace.c (a cache miss: tracing and compiling an entry) and jit_run.c (running an entry,
 * DLPack both ways), which share jit_internal.h; pytrace.c (Trace and BoundSymbol objects);
 * transforms.c (autocast, float8 and the transforms on Trace objects); extend.c (user executors and
 * operators: Python callables behind the core's extension API); rng.c (random ops follow torch's
 * generator); autograd.c (jitted calls inside PyTorch autograd). */
#ifndef PYTH_H
#define PYTH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include "thunder/thunder.h"

/* ---- module.c --------------------------------------------------------------------------------- */
/* torch objects looked up once at import. */
typedef struct pyth_torch {
  PyObject *torch;                  /* the torch module */
  PyObject *tensor_type;            /* torch.Tensor */
  PyObject *to_dlpack;              /* torch._C._to_dlpack */
  PyObject *from_dlpack;            /* torch._C._from_dlpack */
  PyObject *size_type;              /* torch.Size */
  PyObject *device_type;            /* torch.device */
  PyObject *dtype_type;             /* torch.dtype */
  PyObject *dtypes[TH_DTYPE_COUNT]; /* torch.float32, ..., torch.float8_e5m2: one per th_dtype */
  PyObject *cpu_device;             /* torch.device("cpu") */
  PyObject *is_autocast_enabled, *is_autocast_cpu_enabled, *get_autocast_gpu_dtype, *get_autocast_cpu_dtype,
    *is_grad_enabled, *get_default_dtype;
  PyObject *linecache_getline;
  PyObject *return_types;  /* torch.return_types (named tuples of ops like max(dim)) */
  PyObject *numpy_ndarray; /* numpy.ndarray, or NULL without NumPy */
  PyObject *memory_format_type, *contiguous_format, *preserve_format; /* torch.memory_format and two values */
  PyObject *stand_in;            /* torch.empty(1, device="meta"): the at::Tensor proxies lend torch's C code */
  const void *stand_in_words[3]; /* what a proxy's torch_payload holds (see pyth_proxy) */
} pyth_torch;
extern pyth_torch pyth_T;

/* thunder_c dtype objects (thunder_c.float32, ...): Python type and the objects, by th_dtype. */
extern PyTypeObject pyth_dtype_type;
extern PyObject *pyth_dtypes[TH_DTYPE_COUNT];

/* Raises the Python exception matching status st (RuntimeError, ValueError, TypeError, IndexError,
 * NotImplementedError, SyntaxError -> ValueError-like SyntaxError, MemoryError, OSError) with the
 * core's last error message. Returns NULL for `return pyth_raise(st);`. */
PyObject *pyth_raise(th_status st);

/* A torch.dtype or thunder_c dtype object -> th_dtype. False (no exception set) if not a dtype. */
bool pyth_dtype_from(PyObject *o, th_dtype *out);
/* New reference to torch.<name> with its first argument bound to device_type ("cpu", "cuda"):
 * torch 2.x's device-generic autocast functions (is_autocast_enabled, get_autocast_dtype,
 * set_autocast_enabled) as zero- or one-argument callables. */
PyObject *pyth_torch_for_device(const char *name, const char *device_type);
/* A torch.device, or a device string ("cpu", "cuda:0") -> th_device. False (no exception) if not one. */
bool pyth_device_from(PyObject *o, th_device *out);
/* New reference to the torch.device for d. */
PyObject *pyth_device_to_torch(th_device d);
/* 0 when torch tensor t is one thunder_c reads as a plain tensor: torch.Tensor, nn.Parameter, or a
 * subclass that overrides none of __torch_dispatch__, __torch_function__ and __tensor_flatten__;
 * else -1 with NotImplementedError naming its class (`what`: "input x", "a captured tensor"). */
int pyth_tensor_check_class(PyObject *t, const char *what);

/* ---- the tracer: proxy.c, dispatch.c, tensor_proxy.c ------------------------------------------ */
typedef struct pyth_tracer pyth_tracer;

/* A proxy for a tensor during tracing: the trace value it stands for now (an in-place op makes the
 * same Python object stand for the op's output, the new version). */
typedef struct {
  PyObject_HEAD
    /* A proxy answers isinstance(x, torch.Tensor) (its __class__ is torch.Tensor, so that code checking
   * for tensors traces). torch's C argument parser believes that too: matching an overload with a
   * Scalar where the proxy stands (pow(Scalar, Tensor) for torch.pow(x, 2.0)), it reads the object as
   * a THPVariable. Its payload follows the head and is one of two layouts, told apart at import on a
   * real tensor (module.c, init_stand_in):
   *   - `at::Tensor cdata` (one TensorImpl pointer), then two hook pointers (NULL when unset);
   *   - `c10::MaybeOwned<at::Tensor> cdata` {bool isBorrowed_; union {at::Tensor borrow_, own_}}.
   * These three words mirror the payload as a tensor that is a 1-element meta tensor (dim 1, float32,
   * no grad), kept alive for the process (pyth_T.stand_in), which no such check accepts as a Scalar
   * or an int, so torch goes on to the overload that takes a Tensor there and dispatches to the
   * tracer: {impl, NULL, NULL} for the first layout, {isBorrowed_ = 1, impl, NULL} for the second.
   * pyth_T.stand_in_words holds the words; all zero when neither layout matches. */
    const void *torch_payload[3];
  th_value *value;
  pyth_tracer *tracer; /* the tracing session it belongs to; checked on use */
  unsigned long epoch; /* tracer epoch at creation; a proxy from a finished trace is rejected */
  PyObject *weakrefs;  /* weak references to it (nn.RNNBase keeps weakref.ref of its flat weights) */
} pyth_proxy;
extern PyTypeObject pyth_proxy_type;

/* One tracing session: the trace being recorded, and real tensors captured from outside the
 * function's arguments (closures, module attributes that are not parameters), which become inputs. */
struct pyth_tracer {
  th_trace *trace;
  unsigned long epoch;
  PyObject *lifted;      /* list of captured torch tensors, in input order after the arguments */
  PyObject *lifted_ids;  /* dict id(tensor) -> proxy */
  PyObject *groups;      /* dict proxy -> list: proxies whose tensors may share memory (alias groups) */
  PyObject *grad_leaves; /* set of input proxies whose tensors require grad (no in-place update) */
  int grad_stops;        /* detach(), .data, ops recorded with grad mode off: refused under autograd */
  int nlifted;
  char last_file[512]; /* last source location recorded as a comment */
  int last_line;
  int autocast_pushed;      /* regions pushed on the trace to mirror torch's autocast state */
  PyObject *autocast_state; /* the torch autocast state they mirror (a tuple), or NULL */
  int autocast_forced;      /* > 0 inside thunder_c autocast(fn, dtype): the state is fixed */
  PyObject *pkg_dir;        /* str: frames under this directory (thunder_c, torch) are skipped */
  PyObject *torch_dir;
  PyObject *float8_marks; /* list of linears to convert to float8 (transforms.c, "float8 regions"), or NULL */
};

/* The tracer currently recording (NULL when none). */
extern _Thread_local pyth_tracer *pyth_active;

/* tensor_proxy.c: a new proxy for value v in tracer tr. */
PyObject *pyth_proxy_new(pyth_tracer *tr, th_value *v);

/* Records op `qualname` with Python args (tuple) and kwargs (dict or NULL) in the active trace and
 * returns the output as Python objects (proxies, tuples, numbers). `display` names the op in errors
 * ("torch.nn.functional.linear"). flags are the op's TH_OPF_*: for an in-place op the first
 * argument, a proxy, is rebound to the op's output and returned (`a.add_(1)` returns `a`, now
 * standing for the new version). */
PyObject *pyth_record(const char *qualname, const char *display, unsigned flags, PyObject *args, PyObject *kwargs);

/* dispatch.c: the torch-function entry point: the TorchFunctionMode subclass and
 * TensorProxy.__torch_function__ call this with (func, types, args, kwargs). Maps func to an op of the
 * core, or raises NotImplementedError naming it. */
PyObject *pyth_torch_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Mirrors the caller's torch.autocast state (cpu and cuda: enabled, dtype) onto the trace's autocast
 * regions before an op is recorded; cheap when nothing changed. -1 with an exception on failure. */
int pyth_autocast_sync(pyth_tracer *tr);
/* Ends the mirrored regions (end of tracing). */
void pyth_autocast_clear(pyth_tracer *tr);

/* Puts proxies a and b in one alias group (see proxy.c, "aliasing"). -1 with an exception. */
int pyth_alias_join(pyth_tracer *tr, PyObject *a, PyObject *b);

/* dispatch.c: callable ops (thunder_c.prims.add, bound Tensor methods): a new one for op `qualname`,
 * shown to users as `display`; `swap` exchanges the first two positional arguments (reflected
 * operators); `self` (may be NULL) is prepended to the arguments (a bound method). */
extern PyTypeObject pyth_op_type;
PyObject *pyth_op_new(const char *qualname, const char *display, unsigned flags, bool swap, PyObject *self);
/* Returned by pyth_torch_function when the mode should run func eagerly (metadata reads, constants). */
extern PyObject *pyth_passthrough_marker;

/* Builds the func -> op map (once, at the first trace). -1 with an exception on failure. */
int pyth_dispatch_init(void);

/* Python object -> th_arg for the active trace; real tensors are lifted into inputs. Memory of the
 * argument tree is taken from `pool` (freed by pyth_pool_free). -1 with an exception on failure. */
typedef struct pyth_pool {
  void **blocks;
  int n, cap;
} pyth_pool;
void *pyth_pool_alloc(pyth_pool *p, size_t n);
void pyth_pool_free(pyth_pool *p);
int pyth_to_arg(pyth_tracer *tr, PyObject *o, th_arg *out, pyth_pool *pool, const char *who);
/* th_arg -> Python (tensor values become new proxies). */
PyObject *pyth_from_arg(pyth_tracer *tr, const th_arg *a);

/* ---- pytrace.c --------------------------------------------------------------------------------- */
/* A Trace object viewing `tr`, kept alive by `owner` (which owns the trace). */
PyObject *pyth_trace_wrap(const th_trace *tr, PyObject *owner);
/* An owner object that frees `tr` when the last Trace viewing it goes. */
PyObject *pyth_trace_owner_new(th_trace *tr);
extern PyTypeObject pyth_trace_type;
/* The th_trace of a Trace object, or NULL (no exception) if o is not one. */
const th_trace *pyth_trace_get(PyObject *o);

/* ---- transforms.c ------------------------------------------------------------------------------ */
int pyth_transforms_ready(PyObject *module);
/* The function inside thunder_c.autocast(fn, dtype) (borrowed), or NULL if o is not one. */
PyObject *pyth_autocast_inner(PyObject *o);
/* float8 options from Python (jit's float8=, thunder_c.transforms.float8): None/False leave enabled
 * false; True gives the defaults; a dict may set filter (a callable taking one dict per linear,
 * returning whether to convert it), input_dtype and weight_dtype (thunder_c.float8_e4m3fn /
 * float8_e5m2 or their names). param_names (may stay NULL): trace input name -> module parameter
 * qualified name, shown to the filter. -1 with an exception on bad options. */
typedef struct pyth_float8 {
  bool enabled;
  th_float8_options opts;
  PyObject *filter;      /* owned, or NULL */
  PyObject *param_names; /* owned dict, or NULL */
  PyObject *only;        /* owned set of linear output values (addresses as ints): only these, or NULL: all */
  int only_index;        /* the filter's "index" counts the linears of `only` */
} pyth_float8;
int pyth_float8_parse(PyObject *spec, pyth_float8 *out, const char *who);
void pyth_float8_clear(pyth_float8 *f);
/* th_transform_float8 of tr with f's options; -1 with an exception (the filter's own, or the core's). */
int pyth_float8_apply(pyth_float8 *f, const th_trace *tr, th_trace **out);
/* Float8 regions: linears recorded while tracing that run as float8 whatever the jit's own float8 option
 * says — the F.linear of each torchao Float8Linear module (thunder_c/_torchao.py) and the linears of a
 * float8-jitted function inlined into another trace (jit.c). Marks the eligible top-level linears that
 * tr recorded from bsym index `start` on, with formats in/w and `filter` (may be NULL; a new reference
 * is kept). strict: exactly one eligible linear must be there, else NotImplementedError naming `who`.
 * -1 with an exception. */
int pyth_float8_mark_region(pyth_tracer *tr, int start, th_dtype in, th_dtype w, PyObject *filter, const char *who,
                            bool strict);
/* Converts tr's marked linears in trace `in` (one th_transform_float8 pass per distinct formats and
 * filter; param_names as pyth_float8's, may be NULL): *out is the result, or NULL when nothing is
 * marked. -1 with an exception. */
int pyth_float8_apply_marks(pyth_tracer *tr, const th_trace *in, PyObject *param_names, th_trace **out);

/* ---- jit.c, jit_run.c (the jitted callable; its files share jit_internal.h) ---------------------- */
extern PyTypeObject pyth_jit_type;
int pyth_jit_ready(PyObject *module);
/* jit_run.c: zero-copy DLPack exchange, as a run's outputs and inputs cross: a new torch tensor
 * viewing t (t keeps one reference for it); a new th_tensor viewing torch tensor o (detached; bool as
 * its uint8 view), or NULL with an exception. */
PyObject *pyth_tensor_to_torch(th_tensor *t);
th_tensor *pyth_tensor_from_torch(PyObject *o);

/* ---- extend.c (thunder_c.extend: user executors and operators) ------------------------------------ */
int pyth_extend_ready(PyObject *module);
/* Appends to `pinned` the extend executors whose kernels program p runs (so they live as long as the
 * cache entry holding p). -1 with an exception on failure. NULL p is fine. */
int pyth_extend_pin(const th_program *p, PyObject *pinned);
/* A Python exception raised inside a callback of thunder_c.extend (a kernel, checker, meta or autocast
 * rule) is kept while the core unwinds with its message; pyth_raise calls this first and, when the
 * core's last error is that message, re-raises the very exception (true). Else it drops what was kept. */
bool pyth_extend_restore_error(void);

/* ---- rng.c (random ops follow torch's default CPU generator) ---------------------------------------- */
/* The 32-bit words eager PyTorch draws from its CPU generator for the random ops of tr (the jitted
 * function's computation trace). */
int64_t pyth_rng_eager_draws(const th_trace *tr);
/* Before a call of program p: sets p's generator state from torch.default_generator (its next two words
 * as the key) and advances torch's generator by `draws` words (>= 2, pyth_rng_eager_draws's count for a
 * program that samples). -1 with an exception. */
int pyth_rng_begin(th_program *p, int64_t draws);
/* torch.default_generator's state (a new reference), or NULL with an exception. */
PyObject *pyth_rng_snapshot(void);
/* 0 when torch's default generator is in state `before` (pyth_rng_snapshot; NULL: an exception is
 * already set), else -1 with NotImplementedError: the function seeded or drew from it while traced. */
int pyth_rng_unchanged(PyObject *before);

/* ---- autograd.c (jitted calls inside PyTorch autograd: th_transform_grad's forward and backward) ---- */
typedef struct pyth_grad pyth_grad;
int pyth_autograd_ready(PyObject *module);
/* Runs the grad transform on `tr` (already cleaned by th_compile_prepare; requires_grad: one flag per
 * trace input), compiles the backward into the new *out and the forward into *fwd_prog, both with o
 * and DCE and CSE skipped (each half from the execution pass on). -1 with an exception; nothing set
 * then. */
int pyth_grad_compile(const th_trace *tr, const bool *requires_grad, const th_compile_options *o, th_program **fwd_prog,
                      pyth_grad **out);
void pyth_grad_free(pyth_grad *g); /* NULL is fine */
/* The grad transform's forward trace (the forward program's source) and the backward program. */
const th_trace *pyth_grad_forward_trace(const pyth_grad *g);
const th_program *pyth_grad_backward_program(const pyth_grad *g);
/* A list [backward trace (Grad transform pass), backward execution trace], kept alive by owner. */
PyObject *pyth_grad_backward_traces(const pyth_grad *g, PyObject *owner);
/* One call: runs the forward program fwd on `in` (one per trace input; in_objs: the caller's torch tensor
 * of each, borrowed) and returns the function's result with its output tensors attached to autograd
 * through thunder_c._ThunderFunction. `owner` (the cache entry) is kept alive by the graph. */
PyObject *pyth_grad_run(pyth_grad *g, PyObject *owner, th_program *fwd, int nin, th_tensor *const *in,
                        PyObject *const *in_objs);
/* jit_run.c: the return structure `a` of trace tr from a program's outputs, with the tensor leaves taken in
 * order from tuple tensor_leaves instead (when not NULL). */
PyObject *pyth_build_output(const th_trace *tr, const th_arg *a, th_tensor **outs, int nouts, PyObject *tensor_leaves);

#endif
