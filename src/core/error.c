/* error.c — the thread-local last-error message and status (see thunder/error.h). */
#include <stdio.h>

#include "core/core.h"
#include "thunder/executor.h"

static _Thread_local char last_msg[1024];
static _Thread_local th_status last_status = TH_OK;

th_status th_verror(th_status code, const char *fmt, va_list ap) {
  vsnprintf(last_msg, sizeof last_msg, fmt, ap);
  last_status = code;
  return code;
}

th_status th_error(th_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_verror(code, fmt, ap);
  va_end(ap);
  return code;
}

/* The public spelling of th_error for user callbacks (thunder/executor.h). */
th_status th_set_error(th_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  th_verror(st, fmt, ap);
  va_end(ap);
  return st;
}

const char *th_last_error(void) { return last_msg; }
th_status th_last_status(void) { return last_status; }

void th_clear_error(void) {
  last_msg[0] = 0;
  last_status = TH_OK;
}

const char *th_status_name(th_status s) {
  switch (s) {
    case TH_OK: return "OK";
    case TH_ERR_RUNTIME: return "RuntimeError";
    case TH_ERR_VALUE: return "ValueError";
    case TH_ERR_TYPE: return "TypeError";
    case TH_ERR_INDEX: return "IndexError";
    case TH_ERR_NOT_IMPLEMENTED: return "NotImplementedError";
    case TH_ERR_SYNTAX: return "SyntaxError";
    case TH_ERR_VERIFY: return "VerificationError";
    case TH_ERR_IO: return "IOError";
    case TH_ERR_NOMEM: return "MemoryError";
    case TH_ERR_DEVICE: return "DeviceError";
  }
  return "Error";
}
