/* jit_internal.h — what the files of the jitted callable share: jit.c (the callable: construction, a
 * call, introspection), jit_cache.c (the cache key of a call), jit_trace.c (a cache miss: tracing the
 * function and compiling its trace into an entry) and jit_run.c (running an entry's program on torch
 * tensors). */
#ifndef PYTH_JIT_INTERNAL_H
#define PYTH_JIT_INTERNAL_H

#include <dlpack/dlpack.h>

#include "pyth.h"

/* Interned attribute and method names (pyth_jit_ready). */
typedef struct {
  PyObject *requires_grad, *detach, *dtype, *is_neg, *training, *parameters, *buffers, *enter, *exit;
} jit_strings;
extern jit_strings jit_s;

/* thunder_c._ThunderMode (_set_mode_class), and thunder_c._torchao.prepare (_set_module_hook): called
 * with the list of a module's submodules before it is traced, it returns a callable that undoes what it
 * did (or None). NULL until set. */
extern PyObject *jit_mode_class, *jit_module_hook, *jit_recorder_class;

/* ---- the tensors of one call -------------------------------------------------------------------- */

typedef struct {
  PyObject *tensor;  /* borrowed: the caller's tensor */
  PyObject *capsule; /* owned: its DLPack export */
  DLManagedTensor *m;
  bool requires_grad;
} call_tensor;

typedef struct {
  call_tensor *t;
  int n, cap;
  call_tensor local[8];
} tensor_list;
/* ---- cache entries ------------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD th_trace
    *traces[6]; /* owned: the initial trace, [float8], and under autograd DCE and CSE (th_compile_prepare) */
  int ntraces;
  th_program *prog;
  PyObject *lifted;   /* list of captured torch tensors (inputs after the arguments and parameters) */
  PyObject *pinned;   /* objects whose identity is in the key (kept alive so ids are not reused) */
  int nargs_tensors;  /* tensors among the arguments */
  int *param_input;   /* per parameter slot: its input index (shared parameters share one) */
  int nparams_in;     /* distinct parameter inputs */
  pyth_grad *grad;    /* owned: the backward of a call under autograd (autograd.c), or NULL */
  int64_t rng_draws;  /* the words torch's generator advances by per call (rng.c); 0: no dropout */
  PyObject *writes;   /* module attributes forward assigns, replayed after each run (jit_apply_writes): a
                      * list of (submodule __dict__, name) per computed tensor, in the order of the
                      * program's extra outputs, then (__dict__, name, value) per None/number/str */
  PyObject *ret_type; /* the type of a returned dict subclass (transformers' ModelOutput), else NULL */
} pyth_entry;

extern PyTypeObject jit_entry_type;

/* ---- the jitted callable ------------------------------------------------------------------------- */

typedef enum { CACHE_CONSTANT_VALUES, CACHE_SAME_INPUT, CACHE_NONE } cache_mode;

typedef struct {
  PyObject_HEAD PyObject *fn; /* the function, module, or Trace */
  bool is_module;
  const th_trace *given_trace; /* jit(trace): run this trace as it is */
  PyObject *slots;             /* modules: list of (owner dict, key, qualified name) per parameter/buffer */
  PyObject *submodules;        /* modules: list of submodules (their `training` flags are in the key) */
  PyObject *arg_names;         /* list of parameter names of fn (for input names), may be empty */
  PyObject *code_fn;           /* the Python function whose closure and globals are guarded, or NULL */
  PyObject *attr_slots;        /* modules: list of (submodule __dict__, name) of plain tensor/number attributes */
  PyObject *structure;         /* modules: structure_of() when the slots were collected */
  PyObject *cache;             /* dict: key bytes -> entry */
  PyObject *last;              /* the entry of the last call */
  cache_mode mode;
  const char **executors;
  int nexecutors;
  PyObject *executor_names; /* list of str (owns the strings executors point into), then the executor
                             * objects given (thunder_c.extend executors: kept alive with the function) */
  long long hits, misses;
  PyObject *recorder; /* thunder_c._compile_stats._Recorder: the misses' reasons, made on the first miss */
  PyObject *weakrefs;
  pyth_float8 float8; /* jit(..., float8=...): the float8 transform on every trace (transforms.c) */
  PyObject *dump_dir; /* jit(..., dump_fusions=dir): str, each program's fusion source written there */
  PyObject *written;  /* modules: dict id(submodule __dict__) -> set of the attribute names some entry's
                       * forward assigns (left out of the structure and the key: the runs set them) */
} pyth_jit;

/* ---- jit_cache.c ---------------------------------------------------------------------------------- */

/* The cache key of a call of j on (args, kwargs) (bytes, a new reference; NULL with an exception): the
 * caller's state, every argument (tensors by their DLPack records and requires_grad, exported into tl
 * in order; other values by value, or identity, added to *ids), what the function reads besides its
 * arguments, a module's plain attributes, parameter slots and training flags, and which tensors share
 * memory. */
PyObject *jit_cache_key(pyth_jit *j, PyObject *args, PyObject *kwargs, tensor_list *tl, PyObject **ids);
void jit_tl_free(tensor_list *l);
/* Exports torch tensor t by DLPack: a new capsule and its managed tensor (detached when it requires
 * grad; *requires_grad, when not NULL, says whether it does). 0, or -1 with an exception. */
int jit_export_tensor(PyObject *t, bool *requires_grad, PyObject **capsule, DLManagedTensor **managed);
/* first[i] = the smallest index of the run of overlapping tensors that tensor i belongs to (i itself
 * when it shares memory with no other). -1 with MemoryError. */
int jit_alias_roots(const tensor_list *l, int32_t *first);

/* ---- jit_trace.c ---------------------------------------------------------------------------------- */

/* Traces the function on proxies of (args, kwargs) and compiles it into a new entry (NULL with an
 * exception). */
pyth_entry *jit_compile_entry(pyth_jit *j, PyObject *args, PyObject *kwargs, const tensor_list *tl);
/* After a run of entry e: assigns the module attributes its forward assigned (e->writes) from the extra
 * outputs, and replaces *res by the function's own result. 0, or -1 with an exception. */
int jit_apply_writes(pyth_entry *e, PyObject **res);
/* When the function returned a dict subclass (a ModelOutput): *res (a dict) rebuilt as that type.
 * 0, or -1 with an exception. */
int jit_rebuild_result(pyth_entry *e, PyObject **res);
/* Whether some entry's forward assigns attribute `key` of the submodule whose __dict__ is md. */
bool jit_attr_written(const pyth_jit *j, PyObject *md, PyObject *key);
/* The trace input of call tensor i (arguments first, then module parameter slots), or -1. */
int jit_tensor_input_index(const pyth_jit *j, const pyth_entry *e, int i);

/* ---- jit_run.c ------------------------------------------------------------------------------------ */

/* Runs entry e on the call's tensors tl: the function's result (NULL with an exception). */
PyObject *jit_run_entry(pyth_jit *j, pyth_entry *e, tensor_list *tl);
/* Whether the tensors an entry captured still have the dtype and shape its trace recorded. */
bool jit_lifted_still_match(pyth_entry *e);

#endif
