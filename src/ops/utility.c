/* utility.c — prims that compute nothing: python_return (prints "return ..."), python_del
 * ("del a, b") and comment ("# text"). Their meta records no outputs. */
#include "ops/ops_internal.h"

th_status prims_utility_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr;
  (void)sym;
  (void)args;
  *out = th_arg_none();
  return TH_OK;
}
