/* pending_stubs.c — TEMPORARY weak stand-ins for metas still being written, so the tree links while
 * the op families land. A real definition overrides its stub; this file is deleted once all exist. */
#include "ops/ops_internal.h"

__attribute__((weak)) th_status prims_argminmax_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_binary_exact_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_binary_float_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_binary_math_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_binary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_broadcast_in_dim_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_cat_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_compare_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_convert_element_type_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_copy_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_device_put_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_flip_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_full_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_iota_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_like_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_linear_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_matmul_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_reduction_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_reshape_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_slice_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_squeeze_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_take_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_transpose_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_unary_bool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_unary_exact_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_unary_float_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_unary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_uniform_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_var_mean_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_var_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
__attribute__((weak)) th_status prims_where_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr; (void)args; (void)out;
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: meta not implemented yet", sym->qualname);
}
