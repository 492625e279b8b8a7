/* ir.h — internal definitions of the trace IR: values (proxies), symbols and their schemas, bound
 * symbols, traces and the recording machinery that op decompositions use.
 *
 * Identity is by value (pointer / id), never by name: a name is only how a value prints. One
 * th_session (id counter + name supply) is shared by all traces of one compilation, so no two traces
 * of it print one name for two different values. A trace owns an arena with its bsyms and args;
 * values are owned by the session (so a transform's new trace can refer to the values of the old one
 * without copying, and freeing an old trace never dangles them).
 *
 * Recording: th_call() binds arguments against the symbol's schema (defaults filled in, as Thunder's
 * bind does), then runs the symbol's meta (prims: computes output values) or its decomposition
 * (torch-level ops: records subsymbols into a new scope and returns their result), and appends the
 * bound symbol to the current scope. Nothing is appended on error. */
#ifndef TH_IR_H
#define TH_IR_H

#include "core/core.h"
#include "thunder/trace.h"

/* ---- tags (bit set) ------------------------------------------------------------------------------ */
enum {
  TH_TAG_ELEMENTWISE = 1u << 0,
  TH_TAG_REDUCTION = 1u << 1,
  TH_TAG_SHAPE = 1u << 2,    /* layout/shape op */
  TH_TAG_VIEW = 1u << 3,     /* may return a view of its input at run time */
  TH_TAG_IN_PLACE = 1u << 4, /* mutates an argument (functionalized before execution) */
  TH_TAG_RANDOM = 1u << 5,   /* consumes RNG state: an effect, never reordered or CSE'd */
  TH_TAG_DONT_DCE = 1u << 6, /* never removed by DCE */
  TH_TAG_MATMUL = 1u << 7,
  TH_TAG_UTILITY = 1u << 8,   /* RETURN, DEL, COMMENT: no computation */
  TH_TAG_CONVERT = 1u << 9,   /* dtype conversion (fp8-legal) */
  TH_TAG_CREATION = 1u << 10, /* makes a tensor from nothing (full, iota, ...) */
  TH_TAG_FP8_OK = 1u << 11,   /* accepts fp8 tensors (conversion, data movement, layout, scaled mm) */
  TH_TAG_SELECT = 1u << 12,   /* elementwise result is one operand's value, bits unchanged (where) */
  /* autocast policy, as PyTorch AMP's lists */
  TH_TAG_AC_LOWER = 1u << 16,     /* runs in the autocast dtype (matmul, linear, conv, sdpa) */
  TH_TAG_AC_FP32 = 1u << 17,      /* runs in float32 under autocast (PyTorch's CPU fp32 list; CUDA's too) */
  TH_TAG_AC_PROMOTE = 1u << 18,   /* takes the widest floating input dtype */
  TH_TAG_AC_FP32_CUDA = 1u << 19, /* runs in float32 under CUDA autocast only (PyTorch's CUDA-only fp32 list) */
};

/* ---- values (proxies) ---------------------------------------------------------------------------- */
struct th_value {
  uint32_t id;                   /* unique within the session */
  const struct th_session *sess; /* the compilation it belongs to (set by th_value_new_*) */
  const char *name;              /* printing only; owned by the session */
  bool is_tensor;
  th_dtype dtype; /* tensor dtype; number proxies: TH_BOOL / TH_I64 / TH_F64 = Python bool/int/float */
  th_device device;
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  bool requires_grad;
  bool has_value; /* number proxies: value known */
  double fvalue;
  int64_t ivalue;
  /* Collections (Thunder's CollectionProxy, type string "Collection"): the backward trace's inputs
   * saved_for_backward and cotangents and the tuples unpacked from them (C0, C1). Not a tensor and not
   * a number: is_tensor false, dtype TH_DTYPE_COUNT. Its items are what `a, b, = coll`
   * (prims.unpack_sequence) defines; a NULL item is one printed `_` (unused, any value binds). The
   * runtime binds a collection input by its leaves, depth first (th_program_num_inputs). */
  bool is_collection;
  int coll_n;            /* number of items (0 until its unpacking is known) */
  th_value **coll_items; /* coll_n items, session arena */
};

/* ---- schemas --------------------------------------------------------------------------------------
 * Written like PyTorch's native_functions.yaml: "linear(Tensor a, Tensor w, Tensor? bias=None) -> Tensor".
 * A "/" parameter ends the positional-only ones, "*" starts the keyword-only ones. Types:
 *   Tensor Tensor? Tensor[] TensorOrScalar Scalar Scalar? int int? int[] int[]? float float? bool bool?
 *   str str? ScalarType ScalarType? Device Device? Any
 * Returns: Tensor, (Tensor, Tensor), Tensor[], None. */
typedef enum th_ptype {
  TH_PT_TENSOR,
  TH_PT_TENSOR_LIST,
  TH_PT_TENSOR_OR_SCALAR,
  TH_PT_SCALAR,
  TH_PT_INT,
  TH_PT_INT_LIST,
  TH_PT_FLOAT,
  TH_PT_BOOL,
  TH_PT_STR,
  TH_PT_DTYPE,
  TH_PT_DEVICE,
  TH_PT_ANY
} th_ptype;

typedef struct th_param {
  const char *name;
  th_ptype type;
  bool optional; /* "?": None accepted */
  bool posonly;
  bool kwonly;
  bool has_default;
  th_arg deflt; /* constants only (None, bool, int, float, str, int list as TUPLE of INT) */
} th_param;

typedef enum th_rtype { TH_RT_TENSOR, TH_RT_TUPLE, TH_RT_TENSOR_LIST, TH_RT_NONE, TH_RT_ANY } th_rtype;

typedef struct th_schema {
  int nparams;
  th_param *params;
  th_rtype ret;
  int nret; /* TUPLE: number of tensors */
} th_schema;

/* ---- symbols ---------------------------------------------------------------------------------------
 * A symbol's id: the ops layer numbers the rows of its built-in table 0, 1, ... (ops/ops.h generates
 * TH_OP_prims_add, TH_OP_ltorch_add, ... from ops.def); the ids from TH_OP_DYNAMIC up are core's. */
typedef int th_op_id;
enum {
  TH_OP_DYNAMIC = 100000,   /* fusion regions and ops this build does not know (parsed executor ops) */
  TH_OP_REGISTERED = 200000 /* ops registered at run time (th_op_register): TH_OP_REGISTERED + k */
};

typedef struct th_symbol th_symbol;

/* A meta (prims) or decomposition (torch-level ops) receives the bound arguments, one per schema
 * parameter, and sets *out (a VALUE, a TUPLE of values, or NONE). A meta creates its outputs with
 * th_value_new_tensor; a decomposition calls other ops with th_call and returns their outputs. */
typedef th_status (*th_impl_fn)(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out);

/* An autocast rule. While an autocast region is active (th_trace_autocast_push),
 * recording a symbol that has a rule at the trace's top level first calls the rule with the symbol's
 * bound arguments (one per schema parameter, defaults filled in; writable), the region's dtype and its
 * device type (only tensors on that device type are to be touched). The rule records what it needs at
 * the top level (typically prims.convert_element_type of some tensor arguments, th_autocast_cast of
 * ops/ops.h) and replaces those arguments with the results; the symbol is then recorded with the
 * rewritten arguments. Autocast is suspended while the rule runs (its own calls are
 * not cast again) and inside every decomposition (the outer op's inputs are cast already). If the rule
 * or the op fails, everything the rule recorded is dropped (nothing is recorded on error).
 * A symbol's rule is its `autocast` field when set, else the rule of its TH_TAG_AC_* tag that the ops
 * layer installs with its table (th_autocast_rule): an op registered later (a user-defined executor's
 * symbol) carries its own rule by setting `autocast`, and may reuse the ops layer's
 * th_autocast_rule_lower / _fp32 / _promote. */
typedef th_status (*th_autocast_fn)(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                    th_device_type device_type);

struct th_symbol {
  th_op_id id;
  const char *module;   /* "prims", "ltorch", or NULL for dynamic symbols (printed bare: fusion0) */
  const char *name;     /* "add" */
  const char *qualname; /* "prims.add" */
  const char *schema_text;
  unsigned tags;
  bool is_prim;
  th_impl_fn meta;         /* prims */
  th_impl_fn decomp;       /* torch-level ops */
  const char *cexpr;       /* prims: scalar C template for the fuser, or NULL */
  const char *aliases;     /* torch-level: '|'-separated names the parser maps here ("torch.add|Tensor.add") */
  th_schema schema;        /* parsed from schema_text on first use */
  th_autocast_fn autocast; /* its own autocast rule, or NULL: the rule of its TH_TAG_AC_* tag, if any */
};

/* ---- the symbol table (core/symtab.c) ----------------------------------------------------------------
 * Core defines no op. The ops layer installs its built-in table when the library is loaded
 * (th_symtab_install) and adds the ops registered at run time (th_symtab_register); th_symbol_get and
 * th_symbol_lookup read both. The few symbols core itself makes or reads (the statements the printer
 * and parser spell as Python: return, del, comments, sequence unpacking; the shallow copy recording
 * inserts) it finds by role, resolved by qualified name when the table is installed. */
typedef enum th_sym_role {
  TH_SYM_RETURN,          /* prims.python_return: `return x` */
  TH_SYM_DEL,             /* prims.python_del: `del a, b` */
  TH_SYM_COMMENT,         /* prims.comment: `# text` */
  TH_SYM_UNPACK_SEQUENCE, /* prims.unpack_sequence: `C0, C1, = saved_for_backward` */
  TH_SYM_SHALLOW_COPY,    /* prims.shallow_copy: what a decomposition returning its own input records */
  TH_SYM_ROLE_COUNT
} th_sym_role;

/* What the ops layer installs: its table (syms[i].id == i), a function run once before the first
 * lookup of a built-in symbol (it parses the schemas; may be NULL), and the autocast rule of symbols
 * that carry a TH_TAG_AC_* tag and no rule of their own (may be NULL). The table lives for the
 * process. The last installation wins; every role must name a symbol of the table. */
typedef struct th_symtab_builtins {
  const th_symbol *syms;
  int n;
  void (*prepare)(void);
  th_autocast_fn tag_rule;
} th_symtab_builtins;
void th_symtab_install(const th_symtab_builtins *b);

/* Adds a symbol made at run time (th_op_register); it lives for the process. Sets s->id to
 * TH_OP_REGISTERED + k. TH_ERR_VALUE if a symbol of that qualified name is registered already,
 * TH_ERR_NOMEM. Thread-safe. */
th_status th_symtab_register(th_symbol *s);

/* The descriptor of a built-in op (schema parsed), or of a registered op (id TH_OP_REGISTERED + k).
 * NULL for any other id. */
const th_symbol *th_symbol_get(th_op_id id);
/* Lookup by "prims.add", "ltorch.add", an alias ("torch.nn.functional.linear", "Tensor.to"), a
 * bare name ("add" = ltorch.add if it exists, else prims.add), or the qualified name of an op
 * registered with th_op_register ("myex.fused_gelu_linear"). NULL if unknown. */
const th_symbol *th_symbol_lookup(const char *name);
/* The symbol of a role (schema parsed), or NULL while no table is installed. */
const th_symbol *th_symbol_by_role(th_sym_role role);
/* True if sym is (a copy of) the symbol of `role`; compares ids. */
bool th_symbol_has_role(const th_symbol *sym, th_sym_role role);
/* The same for a bound symbol (false without a symbol). */
bool th_bsym_has_role(const th_bsym *b, th_sym_role role);
/* The autocast rule recording applies to sym (see th_autocast_fn): sym->autocast, else the installed
 * rule of the TH_TAG_AC_* tags when sym has one, else NULL. */
th_autocast_fn th_autocast_rule(const th_symbol *sym);

/* A symbol made at run time (fusion regions "fusion0", unknown executor ops from parsed text); it
 * takes any arguments and has no schema. Allocated in tr's arena. */
th_symbol *th_symbol_new_dynamic(th_trace *tr, const char *name);

/* ---- bound symbols ---------------------------------------------------------------------------------- */
struct th_bsym {
  const th_symbol *sym;
  int nargs;
  th_arg *args; /* schema symbols: one per parameter, defaults filled in; dynamic: positional */
  int nkwargs;  /* dynamic symbols only: trailing keyword arguments */
  const char **kwnames;
  th_arg *kwargs;
  th_arg out; /* VALUE, TUPLE/LIST of values, or NONE */
  int nsubs;
  th_bsym **subs;       /* decomposition (printed as comments underneath) */
  const char *executor; /* the executor that claimed it, NULL if none */
  int line;             /* source line when parsed, else 0 */
};

/* ---- sessions and traces ------------------------------------------------------------------------- */
typedef struct th_session th_session;

struct th_trace {
  th_arena *arena;
  th_session *sess;
  const char *fn_name; /* "computation" */
  const char *provenance;
  th_vec inputs;    /* th_value* */
  th_vec bsyms;     /* top-level th_bsym* */
  th_vec *scope;    /* where th_call appends: &bsyms or a decomposition's subsymbol list */
  bool verify_mode; /* metas only: nothing named, nothing appended (the verifier and the parser) */
  bool has_return;
  int nfusions;       /* fusion region counter for names fusion0, fusion1, ... */
  const char *cur_op; /* the op whose meta/decomposition is running (error prefix), or NULL */
  th_vec autocast;    /* th_autocast_region*: the autocast region stack, innermost last (entries past n
                         are popped ones, reused by the next push) */
  bool autocast_busy; /* an autocast rule is running: its own calls are not cast again */
};

/* One autocast region (th_trace_autocast_push). */
typedef struct th_autocast_region {
  th_device_type device_type; /* TH_CPU or TH_CUDA */
  th_dtype dtype;             /* TH_F16 or TH_BF16 (when enabled) */
  bool enabled;               /* false: a `torch.autocast(..., enabled=False)` region */
} th_autocast_region;

/* A new empty trace in the same compilation as `like` (shares its session: ids and names). */
th_trace *th_trace_derive(const th_trace *like, const char *fn_name);

/* Reserves `name` in the session's name supply; TH_ERR_VALUE if already used ("Trying to add the name
 * X to a trace, but that name is already used"). */
th_status th_name_reserve(th_trace *tr, const char *name);
/* A fresh name "<prefix><N>" (one counter for all prefixes, as Thunder). NULL on OOM. */
const char *th_name_fresh(th_trace *tr, const char *prefix);
/* True if the name is used in this compilation. */
bool th_name_used(const th_trace *tr, const char *name);

/* A new tensor value (unnamed until recorded; th_call names it t<N>). NULL on error: ndim beyond
 * TH_MAX_DIMS (TH_ERR_NOT_IMPLEMENTED), a negative extent (TH_ERR_RUNTIME), a shape too large for
 * int64 (TH_ERR_VALUE: the product of its extents, counting 0 as 1, times the element size must fit
 * in int64, so every element count, contiguous stride and byte offset of the value fits; errors are
 * prefixed with the running op, tr->cur_op). requires_grad is kept only for float dtypes (Thunder). */
th_value *th_value_new_tensor(th_trace *tr, th_dtype dtype, th_device device, int ndim, const int64_t *shape,
                              bool requires_grad);
/* Checks the invariant th_value_new_tensor establishes (rank, extents, int64 bound) on a value made
 * elsewhere (the parser writes type comments into values directly). `who` prefixes the message
 * ("value x: shape [...] has more elements than fit in int64"). TH_OK for number proxies. */
th_status th_value_check(const th_value *v, const char *who);
/* True if s is an ASCII Python identifier that is not a Python keyword (what a printed trace may use
 * as a name). */
bool th_is_py_name(const char *s);

/* A new number proxy (dtype TH_BOOL/TH_I64/TH_F64), value known or not. */
th_value *th_value_new_number(th_trace *tr, th_dtype pytype, bool has_value, double f, int64_t i);
/* Gives v a fresh name if it has none. */
th_status th_value_name_if_needed(th_trace *tr, th_value *v);

/* Names v `name` (reserved in the session, which keeps the string; TH_ERR_VALUE if already used). */
th_status th_value_set_name(th_trace *tr, th_value *v, const char *name);
/* A new collection value (unnamed, no items yet; see th_value.is_collection). NULL on OOM. */
th_value *th_value_new_collection(th_trace *tr);
/* Sets the items of collection c (copied into the session's arena; NULL items allowed). */
th_status th_collection_set_items(th_trace *tr, th_value *c, int n, th_value *const *items);
/* A `prims.unpack_sequence(c, n)` bsym (not appended) whose output is the TUPLE of c's items (a NULL
 * item is TH_ARG_NONE, printed `_`): `C0, C1, = saved_for_backward`. NULL on OOM. */
th_bsym *th_unpack_sequence_new(th_trace *tr, th_value *c);

/* Records a call of symbol `sym` with positional args (and keyword args by name) into the current
 * scope; see the file comment. *out receives the output. */
th_status th_call_kw(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, int nkw,
                     const char *const *kwnames, const th_arg *kwargs, th_arg *out);
/* Positional-only shorthand used by decompositions. */
th_status th_call(th_trace *tr, th_op_id op, int nargs, const th_arg *args, th_arg *out);
/* Binds args against sym's schema into a full parameter array (arena). Errors name the op and
 * the parameter ("ltorch.add() got an unexpected keyword argument 'beta'"). */
th_status th_schema_bind(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, int nkw,
                         const char *const *kwnames, const th_arg *kwargs, th_arg **bound);
/* Runs sym's meta/decomposition on already-bound args without recording (verify mode). */
th_status th_symbol_infer(th_trace *tr, const th_symbol *sym, const th_arg *bound, th_arg *out);

/* Appends a ready-made bsym to the current scope (parser, transforms). */
th_status th_trace_append(th_trace *tr, th_bsym *b);
th_bsym *th_bsym_new(th_trace *tr, const th_symbol *sym, int nargs, const th_arg *args, th_arg out);

/* Deep-copies an argument into tr's arena (strings, sequences); values are shared, not copied.
 * Rejects malformed arguments with TH_ERR_VALUE (never crashes on them): an unknown kind, a NULL
 * value / string / object, a sequence with n < 0 or NULL items, a DICT without keys, nesting deeper
 * than 1000, and a value of another compilation ("value t0 belongs to another trace") or one that
 * fails th_value_check. */
th_status th_arg_copy(th_trace *tr, const th_arg *src, th_arg *dst);
/* Calls fn on every value in an arg (recursively through sequences). */
void th_arg_foreach_value(const th_arg *a, void (*fn)(th_value *v, void *ctx), void *ctx);

/* ---- bound-symbol helpers (core/bsym.c) ----------------------------------------------------------- */

/* True if bsym b must survive DCE whatever its outputs: it or any subsymbol (recursively) is tagged
 * TH_TAG_DONT_DCE (return, copy_, uniform), TH_TAG_RANDOM or TH_TAG_IN_PLACE. */
bool th_bsym_has_effect(const th_bsym *b);

/* Deep-copies bsym src (arguments, outputs, subsymbols, a dynamic symbol, the executor name) into
 * dst's arena; values are shared, not copied, except that `map` (may be NULL) substitutes each value
 * met on the way (map returns its argument to keep it). */
typedef th_value *(*th_value_map_fn)(th_value *v, void *ctx);
th_status th_bsym_clone(th_trace *dst, const th_bsym *src, th_value_map_fn map, void *ctx, th_bsym **out);

/* Which parts of a bound symbol th_bsym_foreach_value visits (a bit set). */
enum {
  TH_BSYM_ARGS = 1u << 0,   /* the arguments (schema symbols: one per parameter) */
  TH_BSYM_KWARGS = 1u << 1, /* the keyword arguments (dynamic symbols) */
  TH_BSYM_OUT = 1u << 2,    /* the outputs */
  TH_BSYM_INPUTS = TH_BSYM_ARGS | TH_BSYM_KWARGS,
  TH_BSYM_ALL = TH_BSYM_ARGS | TH_BSYM_KWARGS | TH_BSYM_OUT,
};
/* Calls fn on every value b references in the parts `what` names, in the order arguments, keyword
 * arguments, outputs, each through nested sequences as th_arg_foreach_value; subsymbols are not
 * visited. */
void th_bsym_foreach_value(const th_bsym *b, unsigned what, void (*fn)(th_value *v, void *ctx), void *ctx);

/* 1 + the largest value id among tr's inputs and every value its bsyms reference at any depth
 * (arguments, keyword arguments, outputs, subsymbols included); 0 for an empty trace. Sizes the
 * per-value arrays of passes indexed by value id. */
uint32_t th_trace_id_bound(const th_trace *tr);

/* Dead Code Elimination applied in place to tr's top-level bsym list (no new trace, no provenance;
 * core/dce.c): a backward walk from the return keeps a bsym when one of its outputs is needed later or
 * when it has an effect (th_bsym_has_effect); comments are kept, a del keeps only the values still
 * defined (dropped when none is). Subsymbols are not touched. The pass that makes a new trace is the
 * transforms layer's th_dce. */
th_status th_dce_in_place(th_trace *tr);

/* A monotonic clock in milliseconds, for the "(took N milliseconds)" of provenance strings:
 * N = (long)(th_pass_clock_ms() - start), floored as Thunder does. */
double th_pass_clock_ms(void);

/* "cpu f32[2, 2]" / "int 4" / "float 3.0" / "bool True" — Thunder's type string. */
void th_value_type_string(const th_value *v, char *buf, size_t n);

#endif
