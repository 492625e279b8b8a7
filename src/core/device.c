/* device.c — printing, parsing and comparing devices (see thunder/device.h).
 *
 * The accepted spellings follow torch.device: "cpu", "meta", "cuda" (index 0) and "cuda:N" where N is
 * a decimal ordinal without sign or leading zeros ("cuda:0", "cuda:12"; not "cuda:", "cuda:01",
 * "cuda:-1", "cuda: 1"). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "thunder/device.h"

char *th_device_str(th_device d, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  switch (d.type) {
    case TH_CPU: snprintf(buf, n, "cpu"); break;
    case TH_CUDA: snprintf(buf, n, "cuda:%d", d.index); break;
    case TH_META: snprintf(buf, n, "meta"); break;
    default: snprintf(buf, n, "?"); break;
  }
  return buf;
}

/* Parses a CUDA ordinal: digits only, no leading zeros, at most INT_MAX. */
static bool parse_index(const char *s, int *out) {
  long v = 0;
  if (*s < '0' || *s > '9') return false;
  if (s[0] == '0' && s[1] != '\0') return false;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + (*s - '0');
    if (v > INT_MAX) return false;
  }
  *out = (int)v;
  return true;
}

bool th_device_parse(const char *s, th_device *out) {
  th_device d = {TH_CPU, 0};
  if (!s || !out) return false;
  if (strcmp(s, "cpu") == 0) {
    d.type = TH_CPU;
  } else if (strcmp(s, "meta") == 0) {
    d.type = TH_META;
  } else if (strcmp(s, "cuda") == 0) {
    d.type = TH_CUDA;
  } else if (strncmp(s, "cuda:", 5) == 0 && parse_index(s + 5, &d.index)) {
    d.type = TH_CUDA;
  } else {
    return false;
  }
  *out = d;
  return true;
}

/* cpu and meta carry no index, so only the type decides for them. */
bool th_device_eq(th_device a, th_device b) {
  if (a.type != b.type) return false;
  return a.type != TH_CUDA || a.index == b.index;
}
