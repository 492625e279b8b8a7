/* tmpfiles.h — scratch-file helpers shared by the cmocka tests that read and write files. Include after
 * <cmocka.h>. Each test program creates its own directory into `tmpdir` (mkdtemp) before use. */
#ifndef TH_TEST_TMPFILES_H
#define TH_TEST_TMPFILES_H

#include <stdio.h>

static char tmpdir[256];

/* tmpdir/name; the result stays valid for the next three calls. */
static const char *path_in(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

/* Writes n bytes to path (created or truncated); fails the test on error. */
static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

#endif
