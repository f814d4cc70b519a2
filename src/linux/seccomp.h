/* The seccomp filter applied to every command run inside a sandbox.
 *
 * The policy is the text of spec/seccomp-policy.txt (its syntax is documented
 * at the top of that file), compiled into the binary at build time as
 * sandlot__seccomp_policy_text.  The parent side turns it into a classic BPF
 * program once per process and hands it to sandlot-init in CONFIG's SECCOMP
 * record (spec/protocol.md); the child side — init, in the forked child,
 * after dropping privileges and setting no_new_privs, right before execve —
 * loads that raw `struct sock_filter` array with
 * prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog).
 *
 * The program kills the process (SIGSYS) on any architecture other than the
 * native one (i386 `int $0x80`, x32 system call numbers), fails unlisted
 * system calls with the policy's default errno and explicitly denied ones
 * with EPERM.
 */

#ifndef SANDLOT_LINUX_SECCOMP_H
#define SANDLOT_LINUX_SECCOMP_H

/* Include as "linux/seccomp.h": src/ is searched for quoted includes only
 * (-iquote, see meson.build), so this file never shadows the kernel's
 * <linux/seccomp.h>, which libseccomp's header below includes. */
#include <seccomp.h>

#include "common/error.h"

/* NUL-terminated text of spec/seccomp-policy.txt (generated source). */
extern const char sandlot__seccomp_policy_text[];
/* The FNV-1a 64 hash of that text (offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3, a byte at a time), computed when it is generated. */
extern const unsigned long long sandlot__seccomp_policy_fnv;

/* Build (once per process, cached, thread-safe) the BPF program for the
 * policy compiled into the binary and return a sealed memfd holding the raw
 * `struct sock_filter` array (as produced by seccomp_export_bpf()).  The memfd
 * is close-on-exec and sealed against writing, growing, shrinking and further
 * sealing, so a reader may trust that its size and contents never change.
 * The fd is owned by the module: do not close it; callers dup it or pass it
 * to children (a dup2 clears close-on-exec on the copy).  Read it with
 * pread() from offset 0: the shared file offset is not at 0.  Returns the fd,
 * or -1 with *err set (and nothing cached: a later call tries again).
 * With cache_dir, the compiled program is also kept on disk there (keyed by
 * the policy text and libseccomp's version) so the next process loads it
 * instead of compiling it; NULL means compile. */
int sandlot__seccomp_program_fd(const char *cache_dir, sandlot_error_t **err);

/* The same program as bytes, for CONFIG's SECCOMP record: the raw
 * `struct sock_filter` array in *prog (owned by the module, never changes,
 * valid for the life of the process) and its size in *len.  0, or -1 with
 * *err (nothing cached: a later call tries again). */
int sandlot__seccomp_program(const char *cache_dir, const void **prog, size_t *len,
			     sandlot_error_t **err);

/* Parse policy text into a new libseccomp filter context for the native
 * architecture, with the bad-architecture action set to kill the process.
 * On success stores the context in *out (the caller releases it with
 * seccomp_release()) and returns the number of policy rules (lines that are
 * rules, not `default` or `define`).  On failure returns -1 with *err set to
 * an EINVAL error naming the offending line ("seccomp policy line 12: unknown
 * system call 'foo'"), and *out is left untouched.  Exposed for unit tests. */
int sandlot__seccomp_compile(const char *policy_text, scmp_filter_ctx *out, sandlot_error_t **err);

#endif
