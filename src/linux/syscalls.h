/* Raw system calls that glibc 2.36 does not wrap (or wraps too recently to
 * rely on).  Every bare syscall() in sandlot lives here; each wrapper fails
 * with ENOSYS when the build headers lack the syscall number. */
#ifndef SANDLOT_LINUX_SYSCALLS_H
#define SANDLOT_LINUX_SYSCALLS_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/futex.h>
#include <linux/openat2.h>
/* struct mount_attr, MOUNT_ATTR_* and MOVE_MOUNT_*: glibc (2.36+) has them
 * in <sys/mount.h>, musl (which sandlot-init may be built with) only in
 * the kernel's header, which clashes with glibc's. */
#ifdef __GLIBC__
#include <sys/mount.h>
#else
#include <linux/mount.h>
#endif

static inline int sys_pivot_root(const char *new_root, const char *put_old)
{
#ifdef __NR_pivot_root
	return (int)syscall(__NR_pivot_root, new_root, put_old);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_openat2(int dirfd, const char *path, struct open_how *how)
{
#ifdef __NR_openat2
	return (int)syscall(__NR_openat2, dirfd, path, how, sizeof(*how));
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_close_range(unsigned first, unsigned last, unsigned flags)
{
#ifdef __NR_close_range
	return (int)syscall(__NR_close_range, first, last, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* The mount API calls sandlot-init makes: glibc wraps them since 2.36,
 * musl not at all. */
static inline int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to,
				 unsigned flags)
{
#ifdef __NR_move_mount
	return (int)syscall(__NR_move_mount, from_dfd, from, to_dfd, to, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_open_tree(int dfd, const char *path, unsigned flags)
{
#ifdef __NR_open_tree
	return (int)syscall(__NR_open_tree, dfd, path, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_fsopen(const char *fsname, unsigned flags)
{
#ifdef __NR_fsopen
	return (int)syscall(__NR_fsopen, fsname, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux)
{
#ifdef __NR_fsconfig
	return (int)syscall(__NR_fsconfig, fd, cmd, key, value, aux);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_fsmount(int fd, unsigned flags, unsigned attrs)
{
#ifdef __NR_fsmount
	return (int)syscall(__NR_fsmount, fd, flags, attrs);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* renameat2: glibc has a wrapper, musl 1.2.3 has none. */
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
static inline int sys_renameat2(int olddfd, const char *oldpath, int newdfd, const char *newpath,
				unsigned flags)
{
#ifdef __NR_renameat2
	return (int)syscall(__NR_renameat2, olddfd, oldpath, newdfd, newpath, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_fspick(int dfd, const char *path, unsigned flags)
{
#ifdef __NR_fspick
	return (int)syscall(__NR_fspick, dfd, path, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* Load a kernel module from an open file (sandlot-init in a VM guest:
 * src/init/vm.c). */
static inline int sys_finit_module(int fd, const char *params, int flags)
{
#ifdef __NR_finit_module
	return (int)syscall(__NR_finit_module, fd, params, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_mount_setattr(int dfd, const char *path, unsigned flags,
				    struct mount_attr *attr, size_t size)
{
#ifdef __NR_mount_setattr
	return (int)syscall(__NR_mount_setattr, dfd, path, flags, attr, size);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_pidfd_open(pid_t pid, unsigned flags)
{
#ifdef __NR_pidfd_open
	return (int)syscall(__NR_pidfd_open, pid, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

static inline int sys_pidfd_send_signal(int pidfd, int sig, void *info, unsigned flags)
{
#ifdef __NR_pidfd_send_signal
	return (int)syscall(__NR_pidfd_send_signal, pidfd, sig, info, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* Credentials of the calling thread only.  glibc's setgroups/setres[ug]id
 * in a multi-threaded process broadcast the change to every thread under a
 * lock (nptl setxid); the child of sys_clone_fork() inherits that lock in
 * whatever state another thread of the parent held it — if a thread was
 * being created or exiting at that moment, the child waits on it forever.
 * The child is single-threaded: the raw syscall is what it needs. */
static inline int sys_setgroups0(void)
{
	return (int)syscall(__NR_setgroups, 0, NULL);
}

static inline int sys_setresuid(uid_t r, uid_t e, uid_t s)
{
	return (int)syscall(__NR_setresuid, r, e, s);
}

static inline int sys_setresgid(gid_t r, gid_t e, gid_t s)
{
	return (int)syscall(__NR_setresgid, r, e, s);
}

/* Capability sets of the calling thread (glibc has no wrapper; libcap
 * would be a dependency for two calls).  hdr->version must be
 * _LINUX_CAPABILITY_VERSION_3 with data[2]. */
struct __user_cap_header_struct;
struct __user_cap_data_struct;
static inline int sys_capget(struct __user_cap_header_struct *hdr,
			     struct __user_cap_data_struct *data)
{
	return (int)syscall(__NR_capget, hdr, data);
}

static inline int sys_capset(struct __user_cap_header_struct *hdr,
			     const struct __user_cap_data_struct *data)
{
	return (int)syscall(__NR_capset, hdr, data);
}

/* The filesystem uid/gid of the calling thread.  Like setfsuid(2) they
 * return the previous value and report no error: pass (uid_t)-1 to read
 * the current one. */
static inline uid_t sys_setfsuid(uid_t uid)
{
	return (uid_t)syscall(__NR_setfsuid, uid);
}

static inline gid_t sys_setfsgid(gid_t gid)
{
	return (gid_t)syscall(__NR_setfsgid, gid);
}

/* clone(2) without a new stack: the child continues like after fork() but
 * in the new namespaces given by flags.  Only async-signal-safe calls are
 * allowed in the child of a multi-threaded parent. */
static inline pid_t sys_clone_fork(unsigned long flags)
{
	return (pid_t)syscall(__NR_clone, flags, NULL, NULL, NULL, 0UL);
}

/* What the child of sys_clone_fork() calls between the clone and the exec,
 * as raw syscalls too.  glibc's wrappers would do, but a library that
 * interposes on them may not: ThreadSanitizer's interceptors keep a table
 * of descriptors, shared with the parent's threads, which the child of a
 * raw clone touches unsynchronized (the sanitized daemon's child reported
 * a race in dup2() and died of it before exec).  Functions that run there
 * are marked SANDLOT_CLONE_CHILD, which also keeps a sanitizer's
 * instrumentation out of them. */
#if defined(__SANITIZE_THREAD__)
#define SANDLOT_CLONE_CHILD __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SANDLOT_CLONE_CHILD __attribute__((no_sanitize("thread")))
#endif
#endif
/* AddressSanitizer: the child of sys_clone_vfork() runs on a stack the
 * parent unmaps after the exec; instrumented frames would leave their
 * redzones poisoned in the shadow of memory the parent reuses. */
#if !defined(SANDLOT_CLONE_CHILD) && defined(__SANITIZE_ADDRESS__)
#define SANDLOT_CLONE_CHILD __attribute__((no_sanitize("address")))
#endif
#ifndef SANDLOT_CLONE_CHILD
#define SANDLOT_CLONE_CHILD
#endif

static inline ssize_t sys_read(int fd, void *buf, size_t len)
{
	return (ssize_t)syscall(__NR_read, fd, buf, len);
}

static inline ssize_t sys_write(int fd, const void *buf, size_t len)
{
	return (ssize_t)syscall(__NR_write, fd, buf, len);
}

static inline int sys_close(int fd)
{
	return (int)syscall(__NR_close, fd);
}

/* fcntl(fd, F_DUPFD_CLOEXEC, min). */
static inline int sys_dupfd_cloexec(int fd, int min)
{
	return (int)syscall(__NR_fcntl, fd, F_DUPFD_CLOEXEC, min);
}

/* dup2() semantics (dup3 refuses oldfd == newfd; not every architecture
 * has dup2). */
static inline int sys_dup2(int oldfd, int newfd)
{
	if (oldfd == newfd)
		return syscall(__NR_fcntl, oldfd, F_GETFD) < 0 ? -1 : newfd;
	return (int)syscall(__NR_dup3, oldfd, newfd, 0);
}

/* recvmsg(2); the child of sys_clone_fork() receives the prepared root
 * tree with it. */
static inline ssize_t sys_recvmsg(int fd, struct msghdr *mh, int flags)
{
	return (ssize_t)syscall(__NR_recvmsg, fd, mh, flags);
}

static inline int sys_execve(const char *path, char *const argv[], char *const envp[])
{
	return (int)syscall(__NR_execve, path, argv, envp);
}

static inline __attribute__((noreturn)) void sys_exit_group(int status)
{
	for (;;)
		syscall(__NR_exit_group, status);
}

/* For a clone child that failed before its exec: report "errno what\n"
 * on the status pipe (raw syscalls only, no stdio) and exit 127. */
static inline SANDLOT_CLONE_CHILD __attribute__((noreturn)) void sys_child_fail(int status_fd,
										const char *what)
{
	char buf[200];
	int e = errno, n = 0;
	char num[16];
	int k = 0;
	do {
		num[k++] = (char)('0' + e % 10);
		e /= 10;
	} while (e && k < 15);
	while (k)
		buf[n++] = num[--k];
	buf[n++] = ' ';
	for (const char *p = what; *p && n < (int)sizeof(buf) - 2; p++)
		buf[n++] = *p;
	buf[n++] = '\n';
	if (sys_write(status_fd, buf, (size_t)n) < 0) {
		/* nothing more to do */
	}
	sys_exit_group(127);
}

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* clone3(2) like sys_clone_fork(), born straight into the cgroup v2
 * directory cgroup_fd (CLONE_INTO_CGROUP, Linux 5.7+). */
static inline pid_t sys_clone3_fork(uint64_t flags, int cgroup_fd)
{
#ifdef __NR_clone3
	struct {
		uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
		uint64_t set_tid, set_tid_size, cgroup;
	} args;
	memset(&args, 0, sizeof(args));
	args.flags = flags | CLONE_INTO_CGROUP;
	args.exit_signal = SIGCHLD;
	args.cgroup = (uint64_t)cgroup_fd;
	return (pid_t)syscall(__NR_clone3, &args, sizeof(args));
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* clone(2) sharing the caller's memory until the child execs or exits
 * (CLONE_VM | CLONE_VFORK, as posix_spawn does): fn(arg) runs on `stack`
 * (size bytes, the caller's to unmap once this returns) in the new
 * namespaces given by flags, and the calling thread sleeps until the child
 * has exec'd or exited.  Nothing of the parent's address space is copied,
 * which in a large multi-threaded parent (sandlotd: hundreds of mappings,
 * tens of MiB resident) is most of a fork's cost, and the parent takes no
 * copy-on-write faults afterwards.  *tid gets the child's pid before the
 * child runs (CLONE_PARENT_SETTID), for another thread to act on while
 * this one sleeps.  The child shares the caller's memory and thread
 * pointer: it must not allocate, take locks or return; its errno writes
 * land in the sleeping caller's errno.  Returns the pid, or -1 with errno
 * (then fn never ran). */
static inline pid_t sys_clone_vfork(unsigned long flags, int (*fn)(void *), void *arg,
				    void *stack, size_t size, pid_t *tid)
{
	return (pid_t)clone(fn, (char *)stack + size,
			    (int)(flags | CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID | SIGCHLD),
			    arg, tid);
}

/* unshare(2) for a clone child (SANDLOT_CLONE_CHILD: no interposed
 * wrapper). */
static inline int sys_unshare(unsigned long flags)
{
	return (int)syscall(__NR_unshare, flags);
}

/* Private futex wait and wake on *addr (a process's threads, and the child
 * of sys_clone_vfork(), which shares their memory).  wait returns when
 * *addr != val, on a wake, or on a signal; wake wakes every waiter. */
static inline void sys_futex_wait(int *addr, int val)
{
	syscall(__NR_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static inline void sys_futex_wake(int *addr)
{
	syscall(__NR_futex, addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* What the vm backend's jail child (src/backend/vm.c) calls between clone
 * and exec, raw for the reasons given at SANDLOT_CLONE_CHILD. */
static inline int sys_mount(const char *src, const char *target, const char *type,
			    unsigned long flags, const void *data)
{
	return (int)syscall(__NR_mount, src, target, type, flags, data);
}

static inline int sys_umount2(const char *target, int flags)
{
	return (int)syscall(__NR_umount2, target, flags);
}

static inline int sys_mkdirat(int dfd, const char *path, mode_t mode)
{
	return (int)syscall(__NR_mkdirat, dfd, path, mode);
}

static inline int sys_mknodat(int dfd, const char *path, mode_t mode, dev_t dev)
{
	return (int)syscall(__NR_mknodat, dfd, path, mode, dev);
}

static inline int sys_openat(int dfd, const char *path, int flags, mode_t mode)
{
	return (int)syscall(__NR_openat, dfd, path, flags, mode);
}

static inline int sys_fchmodat(int dfd, const char *path, mode_t mode)
{
	return (int)syscall(__NR_fchmodat, dfd, path, mode);
}

static inline int sys_symlinkat(const char *target, int dfd, const char *path)
{
	return (int)syscall(__NR_symlinkat, target, dfd, path);
}

static inline int sys_chdir(const char *path)
{
	return (int)syscall(__NR_chdir, path);
}

static inline int sys_setns(int fd, int nstype)
{
	return (int)syscall(__NR_setns, fd, nstype);
}

static inline int sys_fchownat(int dfd, const char *path, uid_t uid, gid_t gid, int flags)
{
	return (int)syscall(__NR_fchownat, dfd, path, uid, gid, flags);
}

static inline int sys_prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4,
			    unsigned long a5)
{
	return (int)syscall(__NR_prctl, option, a2, a3, a4, a5);
}

static inline int sys_setrlimit(int resource, const void *rlim)
{
	return (int)syscall(__NR_setrlimit, resource, rlim);
}

/* close_range(2) with flags (CLOSE_RANGE_CLOEXEC = 4: mark, do not close). */
static inline int sys_close_range_flags(unsigned first, unsigned last, unsigned flags)
{
#ifdef __NR_close_range
	return (int)syscall(__NR_close_range, first, last, flags);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* poll(2) through ppoll, which every architecture has (no timeout: NULL). */
static inline int sys_ppoll(void *fds, unsigned long nfds, const struct timespec *ts)
{
	return (int)syscall(__NR_ppoll, fds, nfds, ts, NULL, 0UL);
}

#endif
