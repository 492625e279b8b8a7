/* thunder/trace.h — the trace IR: values (proxies), bound symbols, traces; build, print, parse, verify.
 *
 * A trace is straight-line code: its inputs, a list of bound symbols (bsyms: an op applied to
 * arguments, producing output proxies, with its decomposition as subsymbols) and a return. It prints
 * as Thunder prints it (runnable-looking Python) and parses back from that text. Every value has a
 * unique id within its compilation; its name (t0, x, ...) is only for printing. A trace owns an arena
 * holding everything in it; th_trace_free releases it at once.
 *
 * Arguments are plain values (th_arg): a proxy or a Python-like constant (None, bool, int, float,
 * str, dtype, device, tuple, list, dict, slice, ...). */
#ifndef THUNDER_TRACE_H
#define THUNDER_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "thunder/device.h"
#include "thunder/dtype.h"
#include "thunder/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TH_MAX_DIMS 8 /* tensors of rank above this are rejected with TH_ERR_NOT_IMPLEMENTED */

typedef struct th_trace th_trace;
typedef struct th_value th_value;
typedef struct th_bsym th_bsym;

typedef enum th_arg_kind {
  TH_ARG_NONE = 0, /* Python None (also an absent optional argument) */
  TH_ARG_VALUE,    /* a proxy: tensor or number */
  TH_ARG_BOOL,
  TH_ARG_INT,
  TH_ARG_FLOAT,
  TH_ARG_STR,
  TH_ARG_DTYPE,
  TH_ARG_DEVICE,
  TH_ARG_TUPLE,
  TH_ARG_LIST,
  TH_ARG_DICT, /* string keys (seq.keys) */
  TH_ARG_SLICE,
  TH_ARG_ELLIPSIS,
  TH_ARG_OBJECT /* an opaque named object printed by name (e.g. _torch_memory_format_0) */
} th_arg_kind;

typedef struct th_arg {
  th_arg_kind kind;
  union {
    th_value *value;
    bool b;
    int64_t i;
    double f;
    const char *s; /* STR and OBJECT: owned by the trace (or the caller, for arguments passed in) */
    th_dtype dtype;
    th_device device;
    struct {
      int n;
      struct th_arg *items;
      const char **keys; /* DICT only */
    } seq;
    struct {
      bool has_start, has_stop, has_step;
      int64_t start, stop, step;
    } slice;
  } u;
} th_arg;

/* Small constructors for C callers. */
static inline th_arg th_arg_none(void) {
  th_arg a = {TH_ARG_NONE, {0}};
  return a;
}
static inline th_arg th_arg_value(th_value *v) {
  th_arg a = {TH_ARG_VALUE, {0}};
  a.u.value = v;
  return a;
}
static inline th_arg th_arg_bool(bool b) {
  th_arg a = {TH_ARG_BOOL, {0}};
  a.u.b = b;
  return a;
}
static inline th_arg th_arg_int(int64_t i) {
  th_arg a = {TH_ARG_INT, {0}};
  a.u.i = i;
  return a;
}
static inline th_arg th_arg_float(double f) {
  th_arg a = {TH_ARG_FLOAT, {0}};
  a.u.f = f;
  return a;
}
static inline th_arg th_arg_str(const char *s) {
  th_arg a = {TH_ARG_STR, {0}};
  a.u.s = s;
  return a;
}
static inline th_arg th_arg_dtype(th_dtype d) {
  th_arg a = {TH_ARG_DTYPE, {0}};
  a.u.dtype = d;
  return a;
}
static inline th_arg th_arg_device(th_device d) {
  th_arg a = {TH_ARG_DEVICE, {0}};
  a.u.device = d;
  return a;
}
static inline th_arg th_arg_tuple(int n, th_arg *items) {
  th_arg a = {TH_ARG_TUPLE, {0}};
  a.u.seq.n = n;
  a.u.seq.items = items;
  a.u.seq.keys = 0;
  return a;
}
static inline th_arg th_arg_list(int n, th_arg *items) {
  th_arg a = {TH_ARG_LIST, {0}};
  a.u.seq.n = n;
  a.u.seq.items = items;
  a.u.seq.keys = 0;
  return a;
}

/* What kind of Python value an arg is, for error messages: "Tensor", "int", "float", "tuple", ...
 * (a NULL arg reads "None"). */
const char *th_arg_kind_name(const th_arg *a);

/* ---- traces ------------------------------------------------------------------------------------ */

/* A new, empty trace for function `fn_name` ("computation" if NULL) that starts a new compilation
 * (its own id counter and name supply). fn_name is printed as code: it must be an ASCII Python
 * identifier that is not a keyword (else NULL, TH_ERR_VALUE). Returns NULL (TH_ERR_NOMEM) on
 * allocation failure. */
th_trace *th_trace_new(const char *fn_name);
/* Frees the trace and everything in its arena. NULL is fine. */
void th_trace_free(th_trace *tr);

/* Adds a tensor input. name may be NULL (a fresh t<N>); otherwise it must be an ASCII Python
 * identifier that is not a keyword ("invalid input name 'def': not a Python identifier") and not
 * already used in this compilation. shape has ndim entries (0 <= ndim <= TH_MAX_DIMS, each >= 0; NULL
 * only when ndim is 0), and the product of the extents (0 counted as 1) times the element size must
 * fit in int64 ("shape [99999999999, 99999999999] has more elements than fit in int64"): every value
 * of a trace is bounded so, meta outputs included. device: cpu, cuda:N (N >= 0) or meta (the index of
 * cpu and meta is ignored). Returns NULL on error (TH_ERR_VALUE for a NULL trace, a bad name, dtype,
 * device or shape; TH_ERR_NOT_IMPLEMENTED above TH_MAX_DIMS). */
th_value *th_trace_add_tensor_input(th_trace *tr, const char *name, th_dtype dtype, th_device device, int ndim,
                                    const int64_t *shape);

/* Records one call of op `qualname` ("ltorch.add", "prims.linear", "add" = ltorch.add) at the
 * trace's top level, binding the positional and keyword arguments against the op's schema
 * (defaults filled in, as Thunder's bind does) and running its meta (prims) or its decomposition
 * (torch-level ops, recorded as subsymbols). On success *out is the output: a VALUE, a TUPLE of
 * values, or NONE. Errors: unknown op (TH_ERR_VALUE), bad arguments (TH_ERR_TYPE), and the op's own
 * meta errors (shapes, dtypes), with PyTorch/Thunder wording. Nothing is recorded on error.
 * Misuse is TH_ERR_VALUE, never a crash: tr, qualname or out NULL; nargs or nkwargs negative; args
 * NULL with nargs > 0; kwnames / kwargs (or one of the names) NULL with nkwargs > 0; an argument of an
 * unknown kind, dtype or device, a NULL value, string or object name, a tuple/list/dict with a
 * negative length or NULL items, a dict without keys, nesting deeper than 1000, an OBJECT name that is
 * not a Python identifier (it prints bare), and a value of another compilation ("ltorch.neg: argument
 * 'a': value t0 belongs to another trace"). */
th_status th_trace_call(th_trace *tr, const char *qualname, int nargs, const th_arg *args, int nkwargs,
                        const char *const *kwnames, const th_arg *kwargs, th_arg *out);

/* Appends a comment line ("# text") at the trace's top level, as Thunder records source locations
 * ("# /path/f.py:3: \tz = x + y"). text is copied; a newline or other control character (tab
 * excepted) is TH_ERR_VALUE, as are NULL arguments. */
th_status th_trace_add_comment(th_trace *tr, const char *text);

/* Sets the return value (any th_arg: a value, a tuple/list/dict of values, None). Appends the RETURN
 * bsym; it must be the last call. A NULL trace and malformed arguments are TH_ERR_VALUE, as for
 * th_trace_call (a NULL value, a value of another compilation, ...). */
th_status th_trace_set_return(th_trace *tr, th_arg ret);

/* Like th_trace_set_return, and the return also carries `updated`: the final versions of the inputs
 * the trace updates in place (the outputs of their last prims.copy_ / prims.update_aliases), so that
 * every pass, sort and fusion keeps those updates before the return by data dependence. They are not
 * printed (`return t2`) and not outputs of the program. Each must be a tensor value of this
 * compilation (TH_ERR_VALUE otherwise; nupdated < 0, or updated NULL with nupdated > 0, too). */
th_status th_trace_set_return_updated(th_trace *tr, th_arg ret, int nupdated, th_value *const *updated);

/* Prints the trace in Thunder's format. print_depth -1 prints every subsymbol level (str(trace)),
 * 1 prints top-level bsyms only (trace.python()). Returns a malloc'd NUL-terminated string the
 * caller frees with free(), or NULL on allocation failure. */
char *th_trace_print(const th_trace *tr, int print_depth);

/* Parses trace text (Thunder's printed format). filename is used in error messages. On a syntax error
 * returns TH_ERR_SYNTAX with "file:line:col: message" followed by the line and a caret. *out is set
 * only on success; the caller frees it with th_trace_free. */
th_status th_trace_parse(const char *text, const char *filename, th_trace **out);

/* Checks the trace: every bsym's meta re-run reproduces the recorded shape, dtype and device of
 * each output; each value is defined before use and defined once; RETURN is present and last.
 * TH_ERR_VERIFY with a message naming the value and the op on failure. */
th_status th_trace_verify(const th_trace *tr);

/* Provenance line ("Constructed by Dead Code Elimination (took 0 milliseconds)"), printed as
 * "# Constructed by ..." above the trace. NULL clears it. The string is copied. It is printed as a
 * comment, so it must be one line: a newline, carriage return or other control character (tab
 * excepted) is TH_ERR_VALUE, as is a NULL trace. */
th_status th_trace_set_provenance(th_trace *tr, const char *pss);

/* ---- inspection --------------------------------------------------------------------------------
 * NULL-safe: a NULL trace, value or bsym reads as empty (0 counts, NULL pointers and names, None
 * outputs, th_value_dtype TH_DTYPE_COUNT, th_value_device cpu); an index out of range gives NULL.
 * th_value_numel is -1 if the element count overflows int64, which only a parsed value that was
 * never used or compiled can have (every other value is bounded, see th_trace_add_tensor_input). */
int th_trace_num_inputs(const th_trace *tr);
th_value *th_trace_input(const th_trace *tr, int i);
/* The return value (TH_ARG_NONE if no RETURN). */
th_arg th_trace_output(const th_trace *tr);
int th_trace_num_bsyms(const th_trace *tr);
const th_bsym *th_trace_bsym(const th_trace *tr, int i);

const char *th_value_name(const th_value *v);
/* Collections (Thunder's CollectionProxy, type string "Collection"): the inputs of a backward trace
 * (saved_for_backward, cotangents, th_transform_grad) and the tuples unpacked from them (C0, C1).
 * Neither a tensor nor a number (th_value_dtype gives TH_DTYPE_COUNT). Its items are the values its
 * `a, b, = coll` line defines (th_value_item: NULL for one printed `_`); false / 0 / NULL for a value
 * that is not a collection or an index out of range. */
bool th_value_is_collection(const th_value *v);
int th_value_num_items(const th_value *v);
th_value *th_value_item(const th_value *v, int i);
uint32_t th_value_id(const th_value *v);
bool th_value_is_tensor(const th_value *v);
th_dtype th_value_dtype(const th_value *v);
th_device th_value_device(const th_value *v);
int th_value_ndim(const th_value *v);
const int64_t *th_value_shape(const th_value *v);
int64_t th_value_numel(const th_value *v);

/* "prims.add", "ltorch.linear", "fusion0", ... */
const char *th_bsym_qualname(const th_bsym *b);
th_arg th_bsym_output(const th_bsym *b);
/* b's arguments, one per schema parameter (defaults filled in) for ops of the table, positional ones
 * for dynamic symbols (fusion regions); 0 / TH_ARG_NONE out of range. */
int th_bsym_num_args(const th_bsym *b);
th_arg th_bsym_arg(const th_bsym *b, int i);
int th_bsym_num_subsymbols(const th_bsym *b);
/* Whether output `v` of b may share memory with one of b's tensor arguments at run time: b is a view
 * op (reshape, transpose, getitem, ...), or its decomposition produces v through view prims only
 * (ltorch.to to the same dtype is prims.shallow_copy of its input). Frontends use it to know which
 * tensors an in-place update can show through (PyTorch's aliasing). False for NULL. */
bool th_bsym_output_may_alias(const th_bsym *b, const th_value *v);
const th_bsym *th_bsym_subsymbol(const th_bsym *b, int i);

/* ---- the op table ------------------------------------------------------------------------------
 * What ops this build knows, for frontends that map their own spellings onto them (the Python
 * package maps torch.add, torch.Tensor.add and Tensor.__add__ to ltorch.add from these aliases). */
enum {
  TH_OPF_PRIM = 1u << 0,     /* a primitive (prims.*) */
  TH_OPF_IN_PLACE = 1u << 1, /* mutates its first argument; its output is that argument's new version */
  TH_OPF_VIEW = 1u << 2,     /* may return a view of its input at run time (reshape, getitem, ...) */
  TH_OPF_RANDOM = 1u << 3,   /* consumes the random stream (dropout, uniform) */
  TH_OPF_UTILITY = 1u << 4,  /* return, del, comment: structure, not computation (not callable) */
};
/* Number of built-in ops. */
int th_op_count(void);
/* Op i (0 <= i < th_op_count()): qualified name ("ltorch.add"), NULL out of range. */
const char *th_op_qualname(int i);
/* Op i's PyTorch spellings, '|'-separated ("torch.add|Tensor.add|torch.Tensor.add|Tensor.__add__");
 * "" for prims and ops with none, NULL out of range. "Tensor.x" means torch.Tensor.x. */
const char *th_op_aliases(int i);
/* Op i's schema, PyTorch style ("add(TensorOrScalar a, TensorOrScalar b, /, *, Scalar? alpha=None) ->
 * Tensor"); NULL out of range. */
const char *th_op_schema(int i);
/* Op i's TH_OPF_* flags (0 out of range). */
unsigned th_op_flags(int i);

/* ---- autocast regions ----------------------------------------------------------------------------
 * `with torch.autocast(device_type, dtype, enabled):` around recording, as PyTorch AMP. Regions nest
 * (a stack per trace). While one is active, th_trace_call applies the autocast rule of every op that
 * has one as it records it at the top level: the op's tensor arguments are converted by top-level
 * prims.convert_element_type bsyms recorded before it, then the op is recorded on the converted
 * values (so `prims.linear(x, w, None)` on f32 x, w under a bfloat16 region records convert(x),
 * convert(w) and a bfloat16 prims.linear). Policies, one per op, as PyTorch's CPU autocast lists:
 *   lower precision (matmul, mm, bmm, linear, addmm, baddbmm, scaled_dot_product_attention,
 *     prims.matmul, prims.linear): float16 / bfloat16 / float32 tensors -> the region's dtype;
 *   float32 (prod, cross_entropy, nll_loss, mse_loss; in CUDA regions also exp, log, pow, sum,
 *     softmax, log_softmax, layer_norm, ... as CUDA's list): float16 / bfloat16 tensors -> float32,
 *     unless the call gives an explicit dtype;
 *   promote (cat, stack): float16 / bfloat16 / float32 tensors -> the widest of their dtypes.
 * float64, integer, bool and fp8 tensors and numbers are never converted. Which region applies to a
 * call: the innermost region of the call's device type, which is cpu if any tensor argument is on
 * the CPU, else cuda if any is on a CUDA device (tensors on another device type are left alone, so
 * CPU tensors in a cuda region are not converted); an enabled=false region switches autocast off for
 * its device type. Inside an op's decomposition nothing more is converted (its inputs already were).
 * Errors (TH_ERR_VALUE): a NULL trace; device_type not TH_CPU / TH_CUDA ("User specified an
 * unsupported autocast device_type 'meta'"); an enabled region whose dtype is not float16 or bfloat16
 * ("autocast: `dtype` is expected to be either float16 or bfloat16, but float32"; a disabled region
 * ignores its dtype); pop with no region open. */
th_status th_trace_autocast_push(th_trace *tr, th_device_type device_type, th_dtype dtype, bool enabled);
th_status th_trace_autocast_pop(th_trace *tr);

#ifdef __cplusplus
}
#endif
#endif
