/* ops.h — the ops layer as the layers above it see it: the ids of the built-in ops (generated from
 * ops.def, in its row order), schema parsing, the recording-time autocast rules and what op
 * registration shares with the executor registry.
 *
 * The table itself (ops.c) is installed into core's symbol table when the library is loaded, so core
 * looks symbols up without naming any op. */
#ifndef TH_OPS_H
#define TH_OPS_H

#include "core/ir.h"

/* ---- built-in op ids (ops.c's table: th_symbol_get(TH_OP_prims_add)) ------------------------------- */
enum {
#define TH_PRIM(name, schema, tags, meta, cexpr) TH_OP_prims_##name,
#define TH_TORCH(name, schema, tags, decomp, aliases) TH_OP_ltorch_##name,
#include "ops/ops.def"
#undef TH_PRIM
#undef TH_TORCH
  TH_OP_COUNT
};

/* Installs the table into core's symbol table (th_symtab_install); symbols with a TH_TAG_AC_* tag and
 * no rule of their own get th_autocast_tag_rule. It runs by itself when the library is loaded (a
 * constructor); a program linking the static library and no function of ops.c names it to the linker
 * (-Wl,--undefined=th_ops_install). Calling it again changes nothing. */
void th_ops_install(void);

/* ---- schemas (ops.c) --------------------------------------------------------------------------------
 * Parses a PyTorch-style schema "name(T a, T b=..., /, *, T c=...) -> Ret" into *out (parameters and
 * defaults allocated in `arena`). The rows of ops.def and registered ops share it. strict (registered
 * ops): the op and parameter names must be Python identifiers, parameter names unique, a positional
 * parameter without default may not follow one with a default, a None default needs an optional type,
 * and the return must be Tensor, Tensor[], (Tensor, ...) or None. Errors: TH_ERR_VALUE "invalid schema
 * '<text>': <what>". *name / *name_len (may be NULL) receive the op name before '('. */
th_status th_schema_parse(const char *text, th_arena *arena, bool strict, th_schema *out, const char **name,
                          size_t *name_len);

/* ---- autocast rules (autocast.c) --------------------------------------------------------------------
 * The rules recording applies inside an autocast region (th_autocast_fn in core/ir.h), PyTorch AMP's
 * policies:
 *   lower:   float16 / bfloat16 / float32 tensors -> the autocast dtype (TH_TAG_AC_LOWER);
 *   fp32:    float16 / bfloat16 tensors -> float32, unless an explicit `dtype` argument is given
 *            (TH_TAG_AC_FP32; TH_TAG_AC_FP32_CUDA in CUDA regions only);
 *   promote: float16 / bfloat16 / float32 tensors -> the widest of their dtypes (TH_TAG_AC_PROMOTE).
 * float64, integer, bool and fp8 tensors, numbers and tensors on another device type are left alone.
 * th_autocast_tag_rule picks the policy of sym's TH_TAG_AC_* tag for the region's device type; it is
 * the rule the table installs for tagged symbols without one of their own. */
th_status th_autocast_tag_rule(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                               th_device_type device_type);
th_status th_autocast_rule_lower(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                 th_device_type device_type);
th_status th_autocast_rule_fp32(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                th_device_type device_type);
th_status th_autocast_rule_promote(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                   th_device_type device_type);
/* Replaces every tensor in *a (a value, or a tuple/list of them, copied) that is on device_type and
 * whose dtype is in `from` (a bit set of 1u << th_dtype) and differs from `to` by a top-level
 * prims.convert_element_type(t, to). */
th_status th_autocast_cast(th_trace *tr, th_arg *a, th_device_type device_type, unsigned from, th_dtype to);

/* ---- registered ops (op_register.c) -------------------------------------------------------------------
 * th_op_register / th_op_register_ex (thunder/executor.h) live there; the executor registry shares: */

/* True for the module names printed traces use (`prims`, `ltorch`, `torch`, `Tensor`, `thunder`,
 * `dtypes`, `devices`): neither a registered op's module nor an executor's name may take one. */
bool th_op_module_reserved(const char *module);

/* The error of a user callback of op `qualname` that failed with st: its message with the op's name in
 * front (once), or "<op>: <what> failed (<Status>)" when it set none. Returns st. */
th_status th_op_callback_error(const char *qualname, th_status st, const char *what);

#endif
