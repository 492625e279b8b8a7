/* thunder/error.h — status codes and the last-error message.
 *
 * Every call that can fail on user input returns a th_status (or NULL) and leaves a one-line message
 * for th_last_error(): the op, the argument, expected vs actual, worded like PyTorch/Thunder
 * ("Expected a.dtype=float32 and b.dtype=bfloat16 to be the same"). The message is thread-local and
 * stays valid until the next failing call on the same thread. The library never exits or aborts on
 * user input. */
#ifndef THUNDER_ERROR_H
#define THUNDER_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum th_status {
  TH_OK = 0,
  TH_ERR_RUNTIME,         /* RuntimeError in PyTorch/Thunder: shape/dtype mismatch in an op */
  TH_ERR_VALUE,           /* ValueError: a value outside its allowed set */
  TH_ERR_TYPE,            /* TypeError: wrong kind of argument */
  TH_ERR_INDEX,           /* IndexError: dimension out of range */
  TH_ERR_NOT_IMPLEMENTED, /* NotImplementedError: valid but unsupported */
  TH_ERR_SYNTAX,          /* trace text that does not parse */
  TH_ERR_VERIFY,          /* a trace whose recorded metadata disagrees with its metas */
  TH_ERR_IO,              /* file missing, unreadable, truncated or malformed */
  TH_ERR_NOMEM,           /* an allocation failed */
  TH_ERR_DEVICE           /* the requested device does not exist on this machine */
} th_status;

/* The message of the most recent failure on this thread ("" if none). Owned by the library. */
const char *th_last_error(void);

/* The status of the most recent failure on this thread (TH_OK if none since th_clear_error). */
th_status th_last_status(void);

/* Short name of a status ("RuntimeError", "ValueError", ...), as the Python layer raises it. */
const char *th_status_name(th_status s);

/* Clears the last-error message. */
void th_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
