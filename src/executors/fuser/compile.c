/* compile.c — compiling a translation unit of fusion regions into a shared object, with a disk cache.
 *
 * One unit per program (codegen.c: every region of it, after the prelude) and one shared object per unit.
 * The compiler is $CC (else cc; split at blanks like make: CC="ccache gcc" works), run through
 * posix_spawnp (no shell) with
 *   -O2 -march=native -std=c11 -ffp-contract=off -fno-math-errno -fwrapv -fopenmp -fPIC
 * (-march=$THUNDER_FUSER_MARCH in place of -march=native where that is set: march_flag)
 * (-ffp-contract=off: no FMA contraction, so x * 2 + 1 rounds as the eager executor does; -fwrapv:
 * integer arithmetic wraps as eager's; -fno-math-errno changes no result, as nothing reads errno, and
 * lets sqrt vectorize. Not -fno-trapping-math: it lets gcc fold (float)(int64_t)x into trunc(x), which
 * keeps the sign of -0.0 where the cast gives +0.0.) -O2 rather than -O1: the kernels are mostly
 * compute-bound on AVX2 (a float exp or a bf16 rounding per element), and -O2 runs them faster; its
 * strict aliasing also keeps `omp simd` reduction accumulators in registers, which -O1 reloads from the
 * stack on every iteration. -O2 compiles slower than -O1 (it also vectorizes the scalar strided
 * fallbacks), so a unit with several regions is compiled in parts at once: the regions are dealt into
 * up to one part per CPU (THUNDER_FUSER_JOBS overrides; at most TH_FUSER_MAX_JOBS), largest first onto
 * the smallest part, each part (the prelude and its functions) is compiled with -c by its own process,
 * and the objects are linked with -shared, so a unit of many regions cold-compiles in about -O1's time
 * on two cores. A unit with one region (or one job) is one `-shared` run. Not -O3: it compiles much
 * slower than -O2 for little more speed (bench/README.md, "Notes behind the code").
 *
 * The cache directory is $XDG_CACHE_HOME/thunder-c, else $HOME/.cache/thunder-c (made with its parents,
 * 0700). The key is the SHA-256 (FIPS 180-4) of the source, the compiler's name and `--version` output,
 * the flags and the host CPU (cpu_init: -march=native builds for it), however many parts the object was
 * built in; a compiled object is written to a temporary file in the cache directory and renamed into
 * place (rename(2) is atomic), so processes compiling the same unit at once never see a partial file. The
 * `--version` output (read through a pipe) is itself cached per process and on disk (cc-<hash>.txt, keyed
 * by the compiler binary's path, size, mtime and inode), so a warm start runs no process at all: hashing,
 * one access(2) and one dlopen. A cache entry that does not load because it is damaged (truncated,
 * emptied, not an object for this machine: entry_damaged) is removed and built again; one this process
 * cannot load for another reason (no descriptors left) is kept and the error returned. Loaded objects
 * stay loaded for the process (a program may hold their functions).
 *
 * The cache is bounded, as ccache's is: $THUNDER_CACHE_MAX_MB MiB of kernels (default 1024; 0: no bound).
 * A hit sets the entry's mtime (atime is not kept on relatime/noatime mounts), and after each build, when
 * the kernels' total exceeds the bound, the least recently used are removed until they fill 80% of it
 * (the cache is listed only when a running estimate of the total, trim.txt, says so, or hourly; never
 * on a hit). Entries used in the last minute are never removed (another process may be between its
 * build and its dlopen), so the bound is soft under a burst of new kernels. A process that loses an
 * entry between its access(2) and dlopen builds it again; one that has it loaded keeps its mapping. The
 * same scan removes temporary files a killed compile left behind once they are a day old. Without a
 * bound nothing is scanned.
 *
 * A cache directory this process may not write (another user's, made readable; a read-only mount)
 * still serves hits, and a miss is built in a private temporary directory under $TMPDIR, loaded, and
 * not kept (build_private). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "executors/fuser/fuser.h"

#if defined(__x86_64__)
#define TH_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define TH_ELF_MACHINE EM_AARCH64
#else
#define TH_ELF_MACHINE 0 /* not checked */
#endif

extern char **environ;

static atomic_long n_compiles, n_hits;
long th_fuser_stat_compiles(void) { return atomic_load(&n_compiles); }
long th_fuser_stat_cache_hits(void) { return atomic_load(&n_hits); }

/* ---- SHA-256 ------------------------------------------------------------------------------------------ */
static const uint32_t K256[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

typedef struct {
  uint32_t h[8];
  uint64_t len;
  uint8_t buf[64];
  size_t nbuf;
} sha256_ctx;

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256_ctx *c, const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
    uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = cc;
    cc = b;
    b = a;
    a = t1 + t2;
  }
  c->h[0] += a;
  c->h[1] += b;
  c->h[2] += cc;
  c->h[3] += d;
  c->h[4] += e;
  c->h[5] += f;
  c->h[6] += g;
  c->h[7] += h;
}

static void sha256_init(sha256_ctx *c) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, h0, sizeof h0);
  c->len = 0;
  c->nbuf = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n) {
  const uint8_t *p = data;
  c->len += n;
  while (n) {
    size_t k = 64 - c->nbuf < n ? 64 - c->nbuf : n;
    memcpy(c->buf + c->nbuf, p, k);
    c->nbuf += k;
    p += k;
    n -= k;
    if (c->nbuf == 64) {
      sha256_block(c, c->buf);
      c->nbuf = 0;
    }
  }
}

static void sha256_final(sha256_ctx *c, uint8_t out[32]) {
  uint64_t bits = c->len * 8;
  uint8_t pad = 0x80, zero = 0, lenb[8];
  sha256_update(c, &pad, 1);
  while (c->nbuf != 56) sha256_update(c, &zero, 1);
  for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(c, lenb, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(c->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)c->h[i];
  }
}

void th_fuser_sha256(const void *data, size_t n, uint8_t out[32]) {
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, data, n);
  sha256_final(&c, out);
}

/* ---- running the compiler ---------------------------------------------------------------------------- */
static const char *const FLAGS[] = {"-O2",     "-march=native", "-std=c11", "-ffp-contract=off", "-fno-math-errno",
                                    "-fwrapv", "-fopenmp",      "-fPIC"};
#define NFLAGS ((int)(sizeof FLAGS / sizeof *FLAGS))

/* The -march flag: -march=$THUNDER_FUSER_MARCH where that is set (x86-64-v3 builds the kernels as for
 * an AVX2 CPU without AVX-512, x86-64 as for SSE2 only: the fallback paths, tested on a CPU that has
 * more), else -march=native. The value is a gcc/clang CPU or ISA-level name: letters, digits, '.', '_',
 * '-' (at most 63). It replaces FLAGS[1] in every command and in the cache key. */
#define MARCH_MAX 63
static bool march_valid(const char *e) {
  size_t n = strlen(e);
  if (n == 0 || n > MARCH_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = e[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
          ch == '-'))
      return false;
  }
  return e[0] != '-';
}
static const char *march_flag(void) {
  static _Thread_local char buf[MARCH_MAX + 16];
  const char *e = getenv("THUNDER_FUSER_MARCH");
  if (!e || !e[0] || !march_valid(e)) return FLAGS[1];
  snprintf(buf, sizeof buf, "-march=%s", e);
  return buf;
}
static th_status march_check(void) {
  const char *e = getenv("THUNDER_FUSER_MARCH");
  if (e && e[0] && !march_valid(e))
    return th_error(TH_ERR_VALUE,
                    "fuser: THUNDER_FUSER_MARCH: expected a CPU or ISA-level name for -march (letters, digits, "
                    "'.', '_', '-'; at most %d characters; e.g. x86-64-v3), got '%s'",
                    MARCH_MAX, e);
  return TH_OK;
}

static const char *compiler(void) {
  const char *cc = getenv("CC");
  return cc && cc[0] ? cc : "cc";
}

/* $CC split at blanks into at most max-1 words, as make does (`CC="ccache gcc"`, `CC="gcc -m64"`; no
 * quoting), in buf; the words are NULL-terminated in words. Returns the count (0: nothing but blanks).
 * cc_check has made sure that every word fits. */
static int cc_words(const char *cc, char *buf, size_t n, char **words, int max) {
  snprintf(buf, n, "%s", cc);
  int k = 0;
  for (char *p = buf; *p && k < max - 1;) {
    while (*p == ' ' || *p == '\t') *p++ = '\0';
    if (!*p) break;
    words[k++] = p;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  words[k] = NULL;
  return k;
}
#define CC_MAXWORDS 16
#define CC_MAXLEN 1023

/* $CC must fit cc_words' buffers: a longer one would lose its last words silently. */
static th_status cc_check(const char *cc) {
  int nw = 0;
  for (const char *p = cc; *p;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    nw++;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  size_t len = strlen(cc);
  if (nw > CC_MAXWORDS - 1 || len > CC_MAXLEN)
    return th_error(TH_ERR_VALUE,
                    "fuser: $CC: expected at most %d words and %d characters, got %d words and %zu characters",
                    CC_MAXWORDS - 1, CC_MAXLEN, nw, len);
  return TH_OK;
}

/* run()/reap() results below 0 (0..255: the exit status; 256 + n: killed by signal n) */
enum {
  RUN_NOSTART = -1, /* the program could not be started (not found, not executable): errno in *err */
  RUN_LOG = -2,     /* the log file could not be opened: errno in *err */
  RUN_NOWAIT = -3,  /* it ran, but its exit status is gone: SIGCHLD ignored or the child reaped elsewhere */
};

/* Spawns argv with fd as its stdout and stderr (the caller closes fd): 0 and *pid, or RUN_NOSTART. */
static int spawn_fd(char *const *argv, int fd, pid_t *pid, int *err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  int rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    *err = rc;
    return RUN_NOSTART;
  }
  return 0;
}

/* Starts argv with stdout+stderr to log_path (or /dev/null), opened here first so that a log that cannot
 * be written is told apart from a compiler that cannot be started. Returns 0 and *pid, RUN_LOG or
 * RUN_NOSTART (errno in *err). */
static int spawn(char *const *argv, const char *log_path, pid_t *pid, int *err) {
  int fd = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *err = errno;
    return RUN_LOG;
  }
  int rc = spawn_fd(argv, fd, pid, err);
  close(fd);
  return rc;
}

/* Waits for a spawned process: its exit status, 256 + the signal that killed it, RUN_NOSTART (exit 127:
 * the shell convention for a program that could not be run) or RUN_NOWAIT (waitpid: ECHILD, which is
 * what it answers, once the child has ended, when SIGCHLD is ignored). */
static int reap(pid_t pid, int *err) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      *err = errno;
      return RUN_NOWAIT;
    }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    *err = ENOENT;
    return RUN_NOSTART;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 256 + WTERMSIG(status) : 255;
}

/* Runs argv to completion: spawn's error or reap's result. */
static int run(char *const *argv, const char *log_path, int *err) {
  pid_t pid;
  int rc = spawn(argv, log_path, &pid, err);
  return rc != 0 ? rc : reap(pid, err);
}

/* Runs argv to completion with its stdout and stderr read through a pipe into out (n bytes, NUL-terminated,
 * the rest discarded): as run(), RUN_LOG when no pipe can be made. No file is written anywhere. */
static int run_capture(char *const *argv, char *out, size_t n, int *err) {
  int fds[2];
  out[0] = 0;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *err = errno;
    return RUN_LOG;
  }
  pid_t pid;
  int rc = spawn_fd(argv, fds[1], &pid, err);
  close(fds[1]);
  size_t got = 0;
  char sink[512];
  for (;;) { /* until EOF: the child, and anything it started, closed the pipe */
    char *at = got + 1 < n ? out + got : sink;
    size_t room = got + 1 < n ? n - 1 - got : sizeof sink;
    ssize_t r = read(fds[0], at, room);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (at != sink) got += (size_t)r;
  }
  out[got] = 0;
  close(fds[0]);
  return rc != 0 ? rc : reap(pid, err);
}

static char *read_file(const char *path, size_t max) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = th_malloc(max + 1);
  size_t n = buf ? fread(buf, 1, max, f) : 0;
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

static th_status missing_compiler(const char *cc) {
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "the fuser cannot run the C compiler '%s' ($CC, else cc); install one or set $CC, or compile "
                  "with executors [\"blas\", \"eager\"]",
                  cc);
}

/* mkdir -p: creates path and any missing parents (mode 0700 for the ones it makes). */
static int mkdir_p(const char *path) {
  char buf[4096];
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, len + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

static th_status cache_dir(char *dir, size_t n) {
  const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (x && x[0] == '/') {
    snprintf(dir, n, "%s/thunder-c", x);
  } else if (home && home[0]) {
    snprintf(dir, n, "%s/.cache/thunder-c", home);
  } else {
    return th_error(TH_ERR_RUNTIME, "fuser: neither $XDG_CACHE_HOME nor $HOME is set (needed for the kernel cache)");
  }
  if (mkdir_p(dir) != 0)
    return th_error(TH_ERR_RUNTIME, "fuser: cannot create the cache directory %s: %s", dir, strerror(errno));
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return th_error(TH_ERR_RUNTIME, "fuser: the kernel cache %s is not a directory (set $XDG_CACHE_HOME elsewhere)",
                    dir);
  return TH_OK;
}

static mtx_t ver_mtx;
static once_flag ver_once = ONCE_FLAG_INIT;
static char ver_cc[256], ver_text[2048];
static bool ver_ok;
static void ver_init(void) { mtx_init(&ver_mtx, mtx_plain); }

/* The compiler binary behind cc: cc itself when it names a path, else the first match on $PATH. */
static bool resolve(const char *cc, char *out, size_t n) {
  if (strchr(cc, '/')) {
    snprintf(out, n, "%s", cc);
    return access(out, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  if (!path || !path[0]) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(out, n, "%.*s/%s", (int)len, len ? p : ".", cc);
    if (access(out, X_OK) == 0) return true;
    p += len + (e ? 1 : 0);
  }
  return false;
}

/* The compiler's `--version` output: cached per $CC value in the process, and on disk keyed by the
 * binary's identity (path, size, mtime, inode; a reinstalled compiler gets a new key). */
static th_status compiler_version(const char *cc, const char *dir, char *out, size_t n) {
  call_once(&ver_once, ver_init);
  mtx_lock(&ver_mtx);
  if (ver_ok && !strcmp(ver_cc, cc)) {
    snprintf(out, n, "%s", ver_text);
    mtx_unlock(&ver_mtx);
    return TH_OK;
  }
  char bin[4096], key[4400], disk[4400];
  struct stat sb;
  disk[0] = 0;
  char wbuf[1024], *w[CC_MAXWORDS + 1];
  if (cc_words(cc, wbuf, sizeof wbuf, w, CC_MAXWORDS) > 0 && resolve(w[0], bin, sizeof bin) && stat(bin, &sb) == 0) {
    snprintf(key, sizeof key, "%s|%s|%lld|%lld|%lld|%lld", cc, bin, (long long)sb.st_size, (long long)sb.st_mtime,
             (long long)sb.st_ino, (long long)sb.st_dev);
    uint8_t h[32];
    th_fuser_sha256(key, strlen(key), h);
    size_t k = (size_t)snprintf(disk, sizeof disk, "%s/cc-", dir);
    for (int i = 0; i < 8 && k + 2 < sizeof disk; i++, k += 2) snprintf(disk + k, 3, "%02x", h[i]);
    snprintf(disk + k, sizeof disk - k, ".txt");
    char *text = read_file(disk, sizeof ver_text - 1);
    if (text && text[0]) {
      snprintf(ver_text, sizeof ver_text, "%s", text);
      th_free(text);
      snprintf(ver_cc, sizeof ver_cc, "%s", cc);
      ver_ok = true;
      snprintf(out, n, "%s", ver_text);
      mtx_unlock(&ver_mtx);
      return TH_OK;
    }
    th_free(text);
  }
  char ccbuf[1024], *argv[CC_MAXWORDS + 2];
  int nw = cc_words(cc, ccbuf, sizeof ccbuf, argv, CC_MAXWORDS);
  if (nw == 0) argv[nw++] = "cc";
  argv[nw++] = "--version";
  argv[nw] = NULL;
  char *text = th_malloc(sizeof ver_text);
  if (!text) {
    mtx_unlock(&ver_mtx);
    return th_error(TH_ERR_NOMEM, "fuser: out of memory");
  }
  int err = 0, rc = run_capture(argv, text, sizeof ver_text, &err);
  if (rc != 0 && !(rc == RUN_NOWAIT && text[0])) { /* without an exit status, its output tells */
    th_free(text);
    mtx_unlock(&ver_mtx);
    if (rc == RUN_LOG)
      return th_error(TH_ERR_RUNTIME, "fuser: cannot read the output of '%s --version': %s", cc, strerror(err));
    return missing_compiler(cc);
  }
  if (text[0] && disk[0]) { /* the disk cache entry: written aside and renamed (readers see all or nothing);
                              * best effort, as a cache that is not ours to write is still read */
    char tmp[4450];
    snprintf(tmp, sizeof tmp, "%s/tmp-version-%ld-%lx.txt", dir, (long)getpid(), (unsigned long)thrd_current());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
      size_t len = strlen(text);
      bool ok = write(fd, text, len) == (ssize_t)len && fchmod(fd, 0644) == 0;
      if (close(fd) != 0 || !ok || rename(tmp, disk) != 0) unlink(tmp);
    }
  }
  snprintf(ver_text, sizeof ver_text, "%s", text ? text : "");
  th_free(text);
  snprintf(ver_cc, sizeof ver_cc, "%s", cc);
  ver_ok = true;
  snprintf(out, n, "%s", ver_text);
  mtx_unlock(&ver_mtx);
  return TH_OK;
}

/* The host CPU as -march=native sees it: from /proc/cpuinfo's first processor, the lines that name the
 * model and the instruction set (x86 vendor_id, cpu family, model, model name, stepping, flags; Arm
 * CPU implementer/architecture/variant/part, Features; RISC-V isa), read once per process. Part of the
 * cache key, so a cache shared by machines with other CPUs (an NFS home) never hands one of them a kernel
 * built for instructions it lacks ("Illegal instruction"). "unknown" where there is no /proc/cpuinfo. */
static char cpu_text[8192];
static once_flag cpu_once = ONCE_FLAG_INIT;
static void cpu_init(void) {
  static const char *const keys[] = {"vendor_id",        "cpu family",  "model",    "model name",
                                     "stepping",         "flags",       "Features", "CPU implementer",
                                     "CPU architecture", "CPU variant", "CPU part", "isa"};
  snprintf(cpu_text, sizeof cpu_text, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  size_t at = 0;
  char line[8192];
  int procs = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "processor", 9) && ++procs > 1) break; /* the first processor's block */
    char *colon = strchr(line, ':');
    if (!colon) continue;
    size_t kl = (size_t)(colon - line);
    while (kl && (line[kl - 1] == ' ' || line[kl - 1] == '\t')) kl--;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      if (strlen(keys[k]) == kl && !strncmp(line, keys[k], kl)) {
        int w = snprintf(cpu_text + at, sizeof cpu_text - at, "%s", line);
        if (w > 0 && at + (size_t)w < sizeof cpu_text) at += (size_t)w;
        break;
      }
  }
  fclose(f);
  if (!at) snprintf(cpu_text, sizeof cpu_text, "unknown");
}

/* Whether e (an environment variable's value) is a decimal integer in [lo, hi], with an optional '+' and
 * nothing else (no blanks, no sign but '+'); its value in *v. */
static bool env_integer(const char *e, long long lo, long long hi, long long *v) {
  bool digits = (e[0] >= '0' && e[0] <= '9') || (e[0] == '+' && e[1] >= '0' && e[1] <= '9');
  char *end = NULL;
  errno = 0;
  *v = strtoll(e, &end, 10);
  return digits && !errno && !*end && *v >= lo && *v <= hi;
}

/* The compiler processes a cache miss may run at once: $THUNDER_FUSER_JOBS (1 to TH_FUSER_MAX_JOBS), else
 * the CPUs this process may run on (its affinity mask), at most TH_FUSER_MAX_JOBS. */
static th_status compile_jobs(int *jobs) {
  const char *e = getenv("THUNDER_FUSER_JOBS");
  if (e && e[0]) {
    long long v;
    if (!env_integer(e, 1, TH_FUSER_MAX_JOBS, &v))
      return th_error(TH_ERR_VALUE, "fuser: THUNDER_FUSER_JOBS: expected an integer from 1 to %d, got '%s'",
                      TH_FUSER_MAX_JOBS, e);
    *jobs = (int)v;
    return TH_OK;
  }
  cpu_set_t set;
  long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  *jobs = n < 1 ? 1 : n > TH_FUSER_MAX_JOBS ? TH_FUSER_MAX_JOBS : (int)n;
  return TH_OK;
}

/* The cache's bound in bytes: $THUNDER_CACHE_MAX_MB MiB (0: none, *bytes = 0), default TH_FUSER_CACHE_MB. */
static th_status cache_bound(long long *bytes) {
  const char *e = getenv("THUNDER_CACHE_MAX_MB");
  long long mb = TH_FUSER_CACHE_MB;
  if (e && e[0] && !env_integer(e, 0, 1LL << 30, &mb))
    return th_error(TH_ERR_VALUE,
                    "fuser: THUNDER_CACHE_MAX_MB: expected the kernel cache's bound in MiB, an integer from 0 "
                    "(no bound) to %lld, got '%s'",
                    1LL << 30, e);
  *bytes = mb << 20;
  return TH_OK;
}

typedef struct {
  char *name;
  struct timespec used; /* mtime: a hit sets it */
  long long bytes;
} cache_entry;

static int by_use(const void *a, const void *b) {
  const struct timespec *x = &((const cache_entry *)a)->used, *y = &((const cache_entry *)b)->used;
  return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                : (x->tv_nsec != y->tv_nsec ? (x->tv_nsec < y->tv_nsec ? -1 : 1) : 0);
}

static bool has_affixes(const char *s, const char *pre, const char *suf) {
  size_t n = strlen(s), np = strlen(pre), ns = strlen(suf);
  return n >= np + ns && !strncmp(s, pre, np) && !strcmp(s + n - ns, suf);
}

/* Scans the cache in dir against `bound` bytes (> 0): when its kernels (fusion-*.so, counted by the
 * blocks they take) exceed it, removes the least recently used ones not used in the last
 * TH_FUSER_CACHE_GRACE_S seconds until the rest fill at most 80% of it; removes temporary files over a
 * day old. Returns the kernels' total after that (-1: the directory cannot be listed). Best effort: what
 * cannot be read or removed is left (a read-only cache shared with other users). */
static long long cache_scan(const char *dir, long long bound) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int fd = dirfd(d);
  time_t now = time(NULL);
  cache_entry *ent = NULL;
  size_t n = 0, cap = 0;
  long long total = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    bool kernel = has_affixes(de->d_name, "fusion-", ".so"), tmp = !strncmp(de->d_name, "tmp-", 4);
    if (!kernel && !tmp) continue;
    struct stat st;
    if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (tmp) {
      if (st.st_mtime < now - 86400) unlinkat(fd, de->d_name, 0);
      continue;
    }
    long long bytes = (long long)st.st_blocks * 512;
    total += bytes;
    if (st.st_mtime >= now - TH_FUSER_CACHE_GRACE_S) continue; /* counted, never removed */
    if (n == cap) {
      size_t nc = cap ? 2 * cap : 256;
      cache_entry *g = th_realloc(ent, nc * sizeof *g);
      if (!g) break;
      ent = g, cap = nc;
    }
    char *name = th_strdup(de->d_name);
    if (!name) break;
    ent[n++] = (cache_entry){name, st.st_mtim, bytes};
  }
  if (total > bound && n) {
    qsort(ent, n, sizeof *ent, by_use);
    long long target = bound / 5 * 4;
    for (size_t i = 0; i < n && total > target; i++) /* ENOENT: a concurrent trim took it, which counts */
      if (unlinkat(fd, ent[i].name, 0) == 0 || errno == ENOENT) total -= ent[i].bytes;
  }
  for (size_t i = 0; i < n; i++) th_free(ent[i].name);
  th_free(ent);
  closedir(d);
  return total;
}

/* After a build that added `added` bytes: the bound kept without listing the cache on every build (a
 * scan of a large cache costs a sizeable part of a build). trim.txt in the cache holds
 * "<bytes> <time>": the kernels' total at the last scan plus what builds added since, and when that scan
 * ran; it is read and rewritten under an exclusive flock, so concurrent builds lose no addition and scan
 * one at a time. The cache is scanned (cache_scan) only when the estimate would pass the bound, when the
 * scan is TH_FUSER_CACHE_RESCAN_S old (kernels added or removed by hand), or when there is no readable
 * estimate (none yet, or a process died writing it). */
static void cache_trim(const char *dir, long long bound, long long added) {
  char path[4400];
  snprintf(path, sizeof path, "%s/trim.txt", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (flock(fd, LOCK_EX) != 0) {
    close(fd);
    return;
  }
  char text[64];
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  text[got > 0 ? got : 0] = 0;
  long long now = (long long)time(NULL), est = -1, when = 0;
  if (sscanf(text, "%lld %lld", &est, &when) != 2) est = -1;
  long long total = est + added;
  if (est < 0 || when > now || now - when >= TH_FUSER_CACHE_RESCAN_S || total > bound) {
    total = cache_scan(dir, bound);
    when = now;
  }
  if (total >= 0) {
    int n = snprintf(text, sizeof text, "%lld %lld\n", total, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) (void)ftruncate(fd, 0); /* no estimate */
  }
  close(fd); /* releases the lock */
}

/* One compiler process of a build: its temporary source, output and log, and how it ended. */
typedef struct {
  char c[4400], out[4400], log[4400];
  pid_t pid;
  int rc, err; /* as run() */
  bool started;
} job;

/* Writes the n slices [at[i], at[i] + len[i]) of text to path. */
static th_status write_slices(const char *path, const char *text, int n, const size_t *at, const size_t *len) {
  FILE *f = fopen(path, "wb");
  bool ok = f != NULL;
  for (int i = 0; ok && i < n; i++) ok = fwrite(text + at[i], 1, len[i], f) == len[i];
  if (f && fclose(f) != 0) ok = false;
  if (ok) return TH_OK;
  int e = errno;
  if (f) unlink(path);
  return th_error(TH_ERR_RUNTIME, "fuser: cannot write %s: %s", path, strerror(e));
}

/* argv for `cc FLAGS <mode> -o out in... [-lm]` (-lm unless mode is -c) in argv (CC_MAXWORDS + NFLAGS +
 * TH_FUSER_MAX_JOBS + 8 entries); ccbuf holds $CC's words. */
static void cc_argv(char **argv, char *ccbuf, size_t nccbuf, const char *cc, const char *mode, const char *out, int nin,
                    char *const *in) {
  int k = cc_words(cc, ccbuf, nccbuf, argv, CC_MAXWORDS);
  if (k == 0) argv[k++] = "cc";
  for (int i = 0; i < NFLAGS; i++) argv[k++] = (char *)(i == 1 ? march_flag() : FLAGS[i]);
  argv[k++] = (char *)mode;
  argv[k++] = "-o";
  argv[k++] = (char *)out;
  for (int i = 0; i < nin; i++) argv[k++] = in[i];
  if (strcmp(mode, "-c") != 0) argv[k++] = "-lm";
  argv[k] = NULL;
}

/* The error of a finished job, or TH_OK. A job whose exit status is gone (RUN_NOWAIT) succeeded if it
 * wrote its output; the object is loaded before it enters the cache, which catches any other garbage. */
static th_status job_status(const char *cc, const job *j, const char *what) {
  struct stat sb;
  if (j->rc == 0 || (j->rc == RUN_NOWAIT && stat(j->out, &sb) == 0 && sb.st_size > 0)) return TH_OK;
  if (j->rc == RUN_NOSTART) return missing_compiler(cc);
  if (j->rc == RUN_LOG) return th_error(TH_ERR_RUNTIME, "fuser: cannot write %s: %s", j->log, strerror(j->err));
  char how[96];
  if (j->rc == RUN_NOWAIT)
    snprintf(how, sizeof how, "(no exit status: SIGCHLD is ignored or reaped elsewhere; no output)");
  else if (j->rc >= 256)
    snprintf(how, sizeof how, "(killed by signal %d)", j->rc - 256);
  else
    snprintf(how, sizeof how, "(exit %d)", j->rc);
  char *msg = read_file(j->log, 600);
  th_status st = th_error(TH_ERR_RUNTIME, "fuser: %s failed %s %s: %s", cc, what, how, msg ? msg : "");
  th_free(msg);
  return st;
}

/* The source length of function i of a unit of total bytes whose nfn functions start at fn_at. */
static size_t fn_len(const size_t *fn_at, int nfn, size_t total, int i) {
  return (i + 1 < nfn ? fn_at[i + 1] : total) - fn_at[i];
}

/* Compiles source into the cache entry `so`: in one compiler run, or (nfn > 1 functions starting at fn_at
 * and more than one job) in parts compiled to objects at once and then linked. Temporary files are named
 * after hex and this process and thread, and removed; the object is renamed into place. */

static th_status build(const char *cc, const char *dir, const char *hex, const char *source, size_t total, int nfn,
                       const size_t *fn_at, int njobs, const char *so) {
  int nparts = nfn > 1 && njobs > 1 ? (nfn < njobs ? nfn : njobs) : 1;
  unsigned long tag = (unsigned long)thrd_current() ^ ((unsigned long)getpid() << 20);
  char tmp_so[4400];
  snprintf(tmp_so, sizeof tmp_so, "%s/tmp-%s-%ld-%lx.so", dir, hex, (long)getpid(), tag);
  job *jobs = th_calloc((size_t)nparts + 1, sizeof *jobs); /* the parts, then the link */
  int *part = th_calloc((size_t)nfn + 1, sizeof *part);
  size_t *at = th_calloc((size_t)nfn + 1, sizeof *at), *len = th_calloc((size_t)nfn + 1, sizeof *len);
  th_status st = TH_OK;
  if (!jobs || !part || !at || !len) {
    st = th_error(TH_ERR_NOMEM, "fuser: out of memory starting a compile");
    goto done;
  }
  /* the parts: each function (largest first) to the part with the least source so far */
  size_t load[TH_FUSER_MAX_JOBS] = {0};
  for (int n = 0; n < nfn && nparts > 1; n++) {
    int best = -1;
    size_t bl = 0;
    for (int i = 0; i < nfn; i++) {
      size_t l = fn_len(fn_at, nfn, total, i);
      if (part[i] == 0 && (best < 0 || l > bl)) best = i, bl = l;
    }
    int to = 0;
    for (int k = 1; k < nparts; k++)
      if (load[k] < load[to]) to = k;
    part[best] = to + 1; /* 0: not placed yet */
    load[to] += bl;
  }
  for (int k = 0; k < nparts && st == TH_OK; k++) {
    job *j = &jobs[k];
    snprintf(j->c, sizeof j->c, "%s/tmp-%s-%ld-%lx-%d.c", dir, hex, (long)getpid(), tag, k);
    snprintf(j->log, sizeof j->log, "%s/tmp-%s-%ld-%lx-%d.log", dir, hex, (long)getpid(), tag, k);
    int ns = 0;
    if (nparts == 1) {
      at[ns] = 0, len[ns++] = total;
      snprintf(j->out, sizeof j->out, "%s", tmp_so);
    } else {
      at[ns] = 0, len[ns++] = fn_at[0]; /* the header and prelude */
      for (int i = 0; i < nfn; i++)
        if (part[i] == k + 1) at[ns] = fn_at[i], len[ns++] = fn_len(fn_at, nfn, total, i);
      snprintf(j->out, sizeof j->out, "%s/tmp-%s-%ld-%lx-%d.o", dir, hex, (long)getpid(), tag, k);
    }
    st = write_slices(j->c, source, ns, at, len);
  }
  /* all parts at once */
  for (int k = 0; k < nparts && st == TH_OK; k++) {
    job *j = &jobs[k];
    char ccbuf[1024], *argv[CC_MAXWORDS + NFLAGS + TH_FUSER_MAX_JOBS + 8], *in[1] = {j->c};
    cc_argv(argv, ccbuf, sizeof ccbuf, cc, nparts == 1 ? "-shared" : "-c", j->out, 1, in);
    int rc = spawn(argv, j->log, &j->pid, &j->err);
    if (rc != 0) {
      j->rc = rc;
      st = job_status(cc, j, "on a generated kernel");
    } else {
      j->started = true;
    }
  }
  for (int k = 0; k < nparts; k++)
    if (jobs[k].started) jobs[k].rc = reap(jobs[k].pid, &jobs[k].err);
  for (int k = 0; k < nparts && st == TH_OK; k++) st = job_status(cc, &jobs[k], "on a generated kernel");
  if (st == TH_OK && nparts > 1) { /* link the objects */
    job *j = &jobs[nparts];
    snprintf(j->log, sizeof j->log, "%s/tmp-%s-%ld-%lx-link.log", dir, hex, (long)getpid(), tag);
    snprintf(j->out, sizeof j->out, "%s", tmp_so);
    char ccbuf[1024], *argv[CC_MAXWORDS + NFLAGS + TH_FUSER_MAX_JOBS + 8], *in[TH_FUSER_MAX_JOBS];
    for (int k = 0; k < nparts; k++) in[k] = jobs[k].out;
    cc_argv(argv, ccbuf, sizeof ccbuf, cc, "-shared", tmp_so, nparts, in);
    j->rc = run(argv, j->log, &j->err);
    st = job_status(cc, j, "linking the generated kernels");
  }
  atomic_fetch_add(&n_compiles, 1);
  if (st == TH_OK && access(tmp_so, R_OK) != 0)
    st = th_error(TH_ERR_RUNTIME,
                  "fuser: the C compiler '%s' exited 0 but wrote no object file; set $CC to a C compiler or "
                  "compile with executors [\"blas\", \"eager\"]",
                  cc);
  if (st == TH_OK) { /* an object that does not load never enters the cache (a linker that wrote garbage) */
    void *probe = dlopen(tmp_so, RTLD_NOW | RTLD_LOCAL);
    if (!probe)
      st = th_error(TH_ERR_RUNTIME, "fuser: %s built an object that does not load: %s", cc, dlerror());
    else
      dlclose(probe); /* loaded again from its final name below, which debuggers and perf can find */
  }
  if (st == TH_OK && rename(tmp_so, so) != 0)
    st = th_error(TH_ERR_RUNTIME, "fuser: cannot rename into %s: %s", so, strerror(errno));
done:
  for (int k = 0; jobs && k <= nparts; k++) {
    if (jobs[k].c[0]) unlink(jobs[k].c);
    if (jobs[k].log[0]) unlink(jobs[k].log);
    if (k < nparts && nparts > 1 && jobs[k].out[0]) unlink(jobs[k].out);
  }
  if (st != TH_OK) unlink(tmp_so);
  th_free(jobs);
  th_free(part);
  th_free(at);
  th_free(len);
  return st;
}

/* Whether the cache entry at path cannot be a loadable object for this process: shorter than an ELF
 * header, not ELF, another class or machine, or shorter than its section header table says (truncated).
 * False when the file cannot be read (too many open files, no memory): a dlopen that failed for such a
 * reason says nothing about the entry, which other processes may be using. */
static bool entry_damaged(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf64_Ehdr h;
  struct stat st;
  bool bad = false;
  if (fstat(fd, &st) == 0) {
    ssize_t n = pread(fd, &h, sizeof h, 0);
    bad = n != (ssize_t)sizeof h || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || h.e_ident[EI_CLASS] != ELFCLASS64 ||
          (TH_ELF_MACHINE && h.e_machine != TH_ELF_MACHINE) ||
          (uint64_t)st.st_size < h.e_shoff + (uint64_t)h.e_shnum * h.e_shentsize;
  }
  close(fd);
  return bad;
}

/* A miss in a cache this process may not write (another user's, read-only: it still serves hits): the
 * unit is built in a private temporary directory under $TMPDIR (else /tmp), loaded, and not kept. */
static th_status build_private(const char *cc, const char *dir, const char *hex, const char *source, size_t total,
                               int nfn, const size_t *fn_at, int njobs, void **handle) {
  const char *tmp = getenv("TMPDIR");
  const char *base = tmp && tmp[0] == '/' ? tmp : "/tmp";
  char own[4200], so[4400];
  int len = snprintf(own, sizeof own, "%s/thunder-c-XXXXXX", base);
  if (len < 0 || (size_t)len >= sizeof own || !mkdtemp(own))
    return th_error(TH_ERR_RUNTIME,
                    "fuser: the kernel cache %.300s is not writable, and no private build directory can be made "
                    "in $TMPDIR (%.300s): %s",
                    dir, base, len < 0 || (size_t)len >= sizeof own ? strerror(ENAMETOOLONG) : strerror(errno));
  snprintf(so, sizeof so, "%s/fusion-%s.so", own, hex);
  th_status st = build(cc, own, hex, source, total, nfn, fn_at, njobs, so);
  void *lib = st == TH_OK ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (st == TH_OK && !lib) st = th_error(TH_ERR_RUNTIME, "fuser: cannot load %s: %s", so, dlerror());
  DIR *d = opendir(own); /* emptied (a loaded object stays mapped; a compiler may leave files, -save-temps) */
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
      if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
  }
  rmdir(own);
  if (st == TH_OK) *handle = lib;
  return st;
}

th_status th_fuser_compile(const char *source, int nfn, const size_t *fn_at, void **handle) {
  *handle = NULL;
  int njobs = 1;
  long long bound = 0;
  TH_TRY(compile_jobs(&njobs)); /* all three checked on every call, not only when a build needs them */
  TH_TRY(cache_bound(&bound));
  size_t total = strlen(source);
  for (int i = 0; i < nfn; i++) /* offsets that do not split the source into functions: one part */
    if (fn_at[i] > total || (i && fn_at[i] <= fn_at[i - 1])) nfn = 0;
  const char *cc = compiler();
  TH_TRY(cc_check(cc));
  TH_TRY(march_check());
  char dir[4200];
  TH_TRY(cache_dir(dir, sizeof dir));
  char ver[2048];
  TH_TRY(compiler_version(cc, dir, ver, sizeof ver));
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, source, total + 1);
  sha256_update(&c, cc, strlen(cc) + 1);
  sha256_update(&c, ver, strlen(ver) + 1);
  call_once(&cpu_once, cpu_init);
  sha256_update(&c, cpu_text, strlen(cpu_text) + 1);
  for (int i = 0; i < NFLAGS; i++) {
    const char *fl = i == 1 ? march_flag() : FLAGS[i];
    sha256_update(&c, fl, strlen(fl) + 1);
  }
  uint8_t h[32];
  sha256_final(&c, h);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
  char so[4400];
  snprintf(so, sizeof so, "%s/fusion-%s.so", dir, hex);
  struct stat st0;
  if (access(so, R_OK) == 0 && stat(so, &st0) == 0) {
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!lib) { /* gone (another process's trim, and maybe rebuilt by a third since), damaged, or no room */
      char why[512];
      const char *e = dlerror();
      snprintf(why, sizeof why, "%s", e ? e : "");
      struct stat st1;
      bool there = stat(so, &st1) == 0;
      /* another file now, even on a reused inode number (its change time differs) */
      bool other = there && (st1.st_ino != st0.st_ino || st1.st_dev != st0.st_dev ||
                             st1.st_ctim.tv_sec != st0.st_ctim.tv_sec || st1.st_ctim.tv_nsec != st0.st_ctim.tv_nsec);
      if (other)
        lib = dlopen(so, RTLD_NOW | RTLD_LOCAL); /* a new entry took its place */
      else if (there && entry_damaged(so))
        unlink(so); /* the very entry that did not load (truncated, emptied, another architecture) */
      else if (there && !(lib = dlopen(so, RTLD_NOW | RTLD_LOCAL))) /* sound: once more, then it is kept */
        return th_error(TH_ERR_RUNTIME, "fuser: cannot load %s: %s", so, why[0] ? why : "dlopen failed");
    }
    if (lib) {
      atomic_fetch_add(&n_hits, 1);
      /* recently used, for cache_trim (best effort: a read-only cache; a symlink's target is not touched) */
      utimensat(AT_FDCWD, so, NULL, AT_SYMLINK_NOFOLLOW);
      *handle = lib;
      return TH_OK;
    }
  }
  if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0)
    return build_private(cc, dir, hex, source, total, nfn, fn_at, njobs, handle);
  /* Built, renamed into place, then loaded: a hit elsewhere that failed on the entry this replaced can
   * still remove it in between (above, in its narrow window between stat and unlink); then once more. */
  void *lib = NULL;
  for (int attempt = 0; !lib; attempt++) {
    TH_TRY(build(cc, dir, hex, source, total, nfn, fn_at, njobs, so));
    lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!lib && (attempt || access(so, F_OK) == 0))
      return th_error(TH_ERR_RUNTIME, "fuser: cannot load %s: %s", so, dlerror());
  }
  struct stat sn;
  if (bound) /* after the load: never in the way of this process's own entry */
    cache_trim(dir, bound, stat(so, &sn) == 0 ? (long long)sn.st_blocks * 512 : 0);
  *handle = lib;
  return TH_OK;
}

th_fuser_fn th_fuser_symbol(void *handle, const char *name) {
  void *f = dlsym(handle, name);
  th_fuser_fn fn = NULL;
  memcpy(&fn, &f, sizeof fn); /* dlsym's object pointer to the function */
  return fn;
}
