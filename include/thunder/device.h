/* thunder/device.h — devices, printed as Thunder prints them ("cpu", "cuda:0", "meta"). */
#ifndef THUNDER_DEVICE_H
#define THUNDER_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum th_device_type { TH_CPU = 0, TH_CUDA, TH_META } th_device_type;

typedef struct th_device {
  th_device_type type;
  int index; /* CUDA ordinal; 0 for cpu and meta */
} th_device;

/* Writes "cpu", "cuda:N" or "meta" into buf (at most n bytes, NUL-terminated). Returns buf. */
char *th_device_str(th_device d, char *buf, size_t n);
/* Parses "cpu", "cuda", "cuda:N", "meta". A bare "cuda" means index 0. False if malformed. */
bool th_device_parse(const char *s, th_device *out);
bool th_device_eq(th_device a, th_device b);

#ifdef __cplusplus
}
#endif
#endif
