/* fuzz_parser.c — libFuzzer target for the trace parser: any bytes go to th_trace_parse; a trace
 * that parses is printed at both depths, verified, and its printed text parsed again (the printer
 * must write what the parser reads). Nothing may crash, leak or hit undefined behaviour.
 *
 * Build (from the repository root):
 *   clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
 *     -Iinclude -Isrc $(find src -name '*.c') tests/fuzz/fuzz_parser.c \
 *     -I/usr/include/cjson -lcjson -ldnnl -lm -fopenmp -o fuzz_parser
 * Run (seed corpus = the golden traces):
 *   mkdir -p corpus && find tests/golden -name '*.py' -exec cp {} corpus/ ';' && \
 *     ./fuzz_parser -max_total_time=120 corpus
 * libFuzzer's -rss_limit_mb (2048 by default) and -malloc_limit_mb=1024 turn memory that grows faster
 * than the input (a string literal costing the rest of its line, per-level allocations of deep
 * nesting) into a reported failure; -timeout=10 does the same for quadratic time.
 *
 * Also checked: a text that parses parses the same with CRLF line endings and with a UTF-8 BOM.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "thunder/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0; /* the parser reads a C string: an embedded NUL ends the text */
  th_trace *tr = NULL;
  if (th_trace_parse(text, "fuzz.py", &tr) == TH_OK) {
    char *all = th_trace_print(tr, -1);
    char *top = th_trace_print(tr, 1);
    (void)th_trace_verify(tr);
    if (all) {
      /* what the printer writes must parse, and print the same again */
      th_trace *again = NULL;
      if (th_trace_parse(all, "printed.py", &again) == TH_OK) {
        char *all2 = th_trace_print(again, -1);
        if (all2 && strcmp(all, all2) != 0) abort();
        free(all2);
        th_trace_free(again);
      }
    }
    /* the same text with CRLF line endings and a BOM is the same trace (a text with CRs already
     * would change its line structure: skipped) */
    if (all && !strchr(text, '\r')) {
      size_t n = strlen(text), lines = 0;
      for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
      char *crlf = malloc(3 + n + lines + 1);
      if (crlf) {
        size_t k = 0;
        if (strncmp(text, "\xEF\xBB\xBF", 3)) { /* one BOM (the text may have its own) */
          memcpy(crlf, "\xEF\xBB\xBF", 3);
          k = 3;
        }
        for (size_t i = 0; i < n; i++) {
          if (text[i] == '\n') crlf[k++] = '\r';
          crlf[k++] = text[i];
        }
        crlf[k] = 0;
        th_trace *again = NULL;
        if (th_trace_parse(crlf, "crlf.py", &again) != TH_OK) abort();
        char *all2 = th_trace_print(again, -1);
        if (all2 && strcmp(all, all2) != 0) abort();
        free(all2);
        th_trace_free(again);
        free(crlf);
      }
    }
    free(all);
    free(top);
    th_trace_free(tr);
  }
  free(text);
  return 0;
}
