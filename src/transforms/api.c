/* api.c — the public entry points of the transforms (thunder/transform.h): argument checks, then the
 * pass in its own file. */
#include "thunder/transform.h"
#include "transforms/transforms.h"

th_status th_transform_dce(const th_trace *tr, th_trace **out) {
  if (!tr || !out) return th_error(TH_ERR_VALUE, "th_transform_dce: %s is NULL", !tr ? "the trace" : "out");
  return th_dce(tr, out);
}

th_status th_transform_autocast(const th_trace *tr, th_dtype dtype, th_trace **out) {
  if (!tr || !out) return th_error(TH_ERR_VALUE, "th_transform_autocast: %s is NULL", !tr ? "the trace" : "out");
  return th_autocast(tr, dtype, out);
}

th_status th_transform_cse(const th_trace *tr, th_trace **out) {
  if (!tr || !out) return th_error(TH_ERR_VALUE, "th_transform_cse: %s is NULL", !tr ? "the trace" : "out");
  return th_cse(tr, out);
}

th_status th_transform_del_last_used(const th_trace *tr, th_trace **out) {
  if (!tr || !out) return th_error(TH_ERR_VALUE, "th_transform_del_last_used: %s is NULL", !tr ? "the trace" : "out");
  return th_del_last_used(tr, out);
}

th_status th_transform_float8(const th_trace *tr, const th_float8_options *opts, th_trace **out) {
  if (!tr || !out) return th_error(TH_ERR_VALUE, "th_transform_float8: %s is NULL", !tr ? "the trace" : "out");
  return th_float8(tr, opts, out);
}
