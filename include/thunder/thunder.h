/* thunder/thunder.h — umbrella header of thunder-c: a trace compiler for tensor programs.
 *
 * Include this to get the whole public API: dtypes and devices, the trace IR (build, print, parse,
 * verify), runtime tensors and file formats, program compilation and execution, and the extension API
 * (new operators and executors). */
#ifndef THUNDER_THUNDER_H
#define THUNDER_THUNDER_H

#include "thunder/device.h"
#include "thunder/dtype.h"
#include "thunder/error.h"
#include "thunder/executor.h"
#include "thunder/jit.h"
#include "thunder/tensor.h"
#include "thunder/trace.h"
#include "thunder/transform.h"

#endif
