/* api.c — the public entry points of the transforms (thunder/transform.h): argument checks, then the
 * pass in its own file. */
#include "thunder/transform.h"
#include "transforms/transforms.h"

th_status th_transform_dce(const th_trace *tr, th_trace **out) {
  if (!tr || !out)
    return th_error(TH_ERR_VALUE, "th_transform_dce: %s is NULL", !tr ? "the trace" : "out");
  return th_dce(tr, out);
}
