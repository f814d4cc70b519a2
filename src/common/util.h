/* Small helpers shared by libsandlot, the CLI and the daemon. */
#ifndef SANDLOT_COMMON_UTIL_H
#define SANDLOT_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "error.h"

/* Write all n bytes, retrying on EINTR and short writes.  0 or -1 (errno). */
int sandlot__write_all(int fd, const void *buf, size_t n);
/* Read until n bytes or EOF.  Returns bytes read, or -1 (errno). */
ssize_t sandlot__read_full(int fd, void *buf, size_t n);
/* Write a short string to a file (e.g. cgroup or /proc knobs): open with
 * O_WRONLY|O_CLOEXEC (plus O_CREAT|O_TRUNC when create), write, close. */
int sandlot__write_file(const char *path, const char *data, int create);
/* Read a whole small file (at most max bytes) into a new NUL-terminated string. */
char *sandlot__read_file(const char *path, size_t max);
/* mkdir -p with mode; existing directories are fine. */
int sandlot__mkdir_p(const char *path, mode_t mode);
/* A new globally unique id: prefix followed by 26 lowercase base32 chars
 * (128 random bits from getrandom).  buf must hold strlen(prefix)+27. */
void sandlot__new_id(const char *prefix, char *buf);
/* Why `name` (len bytes) cannot be the name of an entry in a directory,
 * or NULL if it can: it must not be empty, "." or "..", nor hold a '/' or
 * a NUL.  Names come from the sandbox (a LIST answer) and are joined into
 * paths, on the host too: every such name goes through this first. */
const char *sandlot__entry_name_problem(const void *name, size_t len);

/* A file that ships with sandlot, found beside this process's executable:
 * the first of `rel` (paths relative to the executable's directory, each
 * beginning with '/'), then of `sys` (absolute paths; may be NULL), for
 * which the candidate followed by `probe` ("" for the candidate itself, or
 * e.g. "/vmlinux" to find a directory by a file in it) passes
 * access(mode).  Returns the candidate (without probe; canonical when
 * found beside the executable) in a new string the caller frees, or NULL
 * with errno ENOENT when none does (ENOMEM when out of memory). */
char *sandlot__find_beside_self(const char *const *rel, const char *const *sys,
				const char *probe, int mode);

/* *ts = clock's time now plus ms milliseconds: a deadline for
 * pthread_cond_timedwait() on a condition of that clock. */
void sandlot__deadline_in(struct timespec *ts, clockid_t clock, uint64_t ms);

/* Monotonic clock in ms / ns. */
uint64_t sandlot__now_ms(void);
uint64_t sandlot__now_ns(void);

/* sendmsg() of buf[len] with `fd` (when >= 0) passed as SCM_RIGHTS, retried
 * on EINTR, without SIGPIPE.  What sendmsg() returns. */
ssize_t sandlot__send_with_fd(int sock, const void *buf, size_t len, int fd);

/* Descriptors a process keeps for a long time (one set per live sandbox in
 * sandlotd) are moved to numbers from here up, so that the numbers below
 * stay few and dense: the ones new descriptors take (the lowest free),
 * which a clone child keeps with close_range(CLOSE_RANGE_UNSHARE) without
 * copying the rest of the table (src/backend/ns.c), and which libnftables'
 * select() needs below FD_SETSIZE (src/linux/nft.c). */
#define SANDLOT_FD_PARK_MIN 1024

/* Move *fd (>= 0) to the lowest free number >= SANDLOT_FD_PARK_MIN,
 * close-on-exec, and close the old number: the open file (its locks, its
 * status flags) is the same.  Where that fails (RLIMIT_NOFILE at or below
 * the bound, no free number) *fd stays as it was: parking only saves time,
 * it is never needed.  A negative *fd or one parked already is left. */
void sandlot__fd_park(int *fd);

/* With SANDLOT_TRACE set, print to stderr the time since the previous
 * call, labelled `phase` (NULL just resets the clock).  For benchmarks. */
void sandlot__trace(const char *phase);

#endif
