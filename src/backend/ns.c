/* The `ns` backend: a sandbox made of Linux namespaces, a cgroup, a seccomp
 * filter and its own storage, with sandlot-init as PID 1.
 *
 * Parent side (host root, this file):
 *   1. take a host uid range, create the cgroup, prepare storage — all
 *      before clone, so the child needs no malloc;
 *   2. create the network namespace (as host root, so the sandbox's user
 *      namespace does not own it: src/linux/netns.h) and, from inside it,
 *      clone into new user, pid, mount, ipc and uts namespaces — in a
 *      large process (sandlotd) sharing its memory until the child execs
 *      (sys_clone_vfork(): a fork of sandlotd would copy hundreds of
 *      mappings per sandbox), in a small one (sandlot run) fork-style,
 *      which costs it less (small_process());
 *   3. write the child's uid/gid maps, put it into the cgroup, make it
 *      immune to the OOM killer (commands are not), then release it — after
 *      a vfork-style clone from a thread of its own while the cloning thread
 *      sleeps (release_child());
 *   4. core sends init its configuration (CONFIG, spec/protocol.md) and
 *      waits for the answer; ready reads the status pipe, where only the
 *      child's failures before exec are reported (exec closes it: empty
 *      EOF).
 * Child side (before exec, async-signal-safe only): wait for release,
 * become uid 0 of the new namespace, move fds into place (init.h lists
 * them: this backend's way of handing init the workspace, image, root tree,
 * lock and event counters), exec init.  Init then builds the root filesystem
 * (src/init/setup.c) as CONFIG says.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/close_range.h>

#include "backend.h"
#include "ns.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "core/internal.h"
#include "init/init.h"
#include "linux/cgroup.h"
#include "linux/nsconnect.h"
#include "linux/netns.h"
#include "linux/storage.h"
#include "linux/syscalls.h"
#include "linux/userns.h"
#include "net/policy.h"


static void ns_kill_init(struct ns_state *ns)
{
	if (ns->pid > 0) {
		if (ns->pidfd >= 0)
			sys_pidfd_send_signal(ns->pidfd, SIGKILL, NULL, 0);
		else
			kill(ns->pid, SIGKILL);
		/* When PID 1 of a pid namespace dies the kernel kills every other
		 * process in it and reaps them before the init is reaped. */
		while (waitpid(ns->pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		ns->pid = 0;
		sandlot__trace("destroy: reap");
	}
}

static void close_image(struct ns_state *ns)
{
	if (ns->image_fd >= 0)
		close(ns->image_fd);
	ns->image_fd = -1;
}

static void ns_release(struct ns_state *ns)
{
	close_image(ns);
	if (ns->detached) {
		/* The cleanup helper has its own copy of all of this and does
		 * the teardown: only let go of ours. */
		sandlot__cgroup_close(ns->cg);
	} else {
		ns_kill_init(ns);
		sandlot__cgroup_destroy(ns->cg);
		sandlot__trace("destroy: cgroup");
	}
	ns->cg = NULL;
	if (ns->pidfd >= 0)
		close(ns->pidfd);
	ns->pidfd = -1;
	/* init is gone (or, detached, the helper waits for that): nothing of
	 * the sandbox uses its workspace any more.  Detached, the helper
	 * deletes it; we only close our handles (the helper's copy of the lock
	 * descriptor keeps the workspace locked until then). */
	if (ns->detached)
		ns->storage.ephemeral = 0;
	sandlot__storage_destroy(&ns->storage);
	sandlot__uid_slot_release(&ns->slot);
	struct sandlot_netns_ready left = { .ns_fd = ns->netns_fd, .nft = ns->egress_nft };
	memcpy(left.fds, ns->egress_fds, sizeof(left.fds));
	sandlot__netns_ready_close(&left);
	ns->netns_fd = -1;
	/* The cleanup helper put it back when it started; without one
	 * (it could not start), here. */
	if (!ns->detached && ns->spare_netns[0])
		sandlot__netns_spare_put(ns->data_dir, ns->spare_netns);
	ns->spare_netns[0] = '\0';
	ns->egress_nft = NULL;
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		ns->egress_fds[i] = -1;
	if (ns->cleanup_lock_fd >= 0)
		close(ns->cleanup_lock_fd);
	ns->cleanup_lock_fd = -1;
	if (ns->status_fd >= 0)
		close(ns->status_fd);
	ns->status_fd = -1;
	/* After our own teardown, so the helper's copies of the locks go
	 * last. */
	sandlot__ns_helper_stop(ns);
}

/* Child after clone: only raw syscalls (the parent may be multi-threaded,
 * so malloc and stdio locks may be held by threads that do not exist here);
 * a failure goes to the status pipe (sys_child_fail). */
struct child_args {
	const struct sandlot_cgroup_join *join;
	int sync_rd, status_wr, sock, storage_fd, image_fd, lock_fd, devnull;
	int oom_fd, pids_fd;
	const char *init_path;
	int *tid; /* sys_clone_vfork(): set by the kernel, woken here */
	int sync_wr; /* the parent's end: closed here at once */
	/* Cloned with CLONE_FILES (sharing the parent's descriptor table):
	 * one more than the highest descriptor above, which the child keeps
	 * in a table of its own; 0: cloned with a copy of the table. */
	unsigned files_end;
};

/* The end of the descriptors child_main() uses (child_args.files_end). */
static unsigned child_fds_end(const struct child_args *a)
{
	int fds[] = { a->sync_rd,   a->status_wr, a->sock,	  a->storage_fd, a->image_fd,
		      a->lock_fd,   a->devnull,	  a->oom_fd,	  a->pids_fd };
	int top = -1;
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(fds); i++)
		if (fds[i] > top)
			top = fds[i];
	for (int i = 0; i < a->join->ntasks; i++)
		if (a->join->tasks_fd[i] > top)
			top = a->join->tasks_fd[i];
	return (unsigned)top + 1;
}

static SANDLOT_CLONE_CHILD __attribute__((noreturn)) void child_main(const struct child_args *a)
{
	char c;
	/* The releasing thread waits for the pid the kernel stored. */
	if (a->tid)
		sys_futex_wake(a->tid);
	/* Sharing sandlotd's descriptor table (CLONE_FILES): a table of our
	 * own before anything else, with only the descriptors below files_end
	 * in it.  Copying the whole table instead (a clone without CLONE_FILES)
	 * took a reference on each of the thousands a daemon holds for its
	 * live sandboxes, each then dropped again by the close_range() below:
	 * at 1,000 live sandboxes about 0.8 ms of CPU per create, growing with
	 * the number (perf; sandlot__fd_park() keeps the daemon's long-lived
	 * descriptors above the ones a create uses).  A kernel without
	 * CLOSE_RANGE_UNSHARE (before 5.9) copies the whole table.  Until this
	 * is done nothing here may close or replace a descriptor: it would be
	 * the daemon's. */
	if (a->files_end && sys_close_range(a->files_end, ~0U, CLOSE_RANGE_UNSHARE) < 0 &&
	    sys_unshare(CLONE_FILES) < 0)
		sys_child_fail(a->status_wr, "unshare the descriptor table");
	/* Our copy of the parent's end of the sync socket goes first, so that
	 * a parent that dies before the go leaves us an EOF, not a wait for
	 * ever. */
	sys_close(a->sync_wr);
	/* Into the sandbox's cgroup before anything else (v1; on v2 the
	 * child was born there). */
	if (sandlot__cgroup_join_self(a->join) < 0)
		sys_child_fail(a->status_wr, "join the sandbox cgroup");
	/* Wait until the parent wrote our uid map and cgroup: one byte on
	 * the sync socket, with the prepared root tree attached when there
	 * is one.  EOF means the parent gave up on us. */
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf),
	};
	ssize_t n;
	do
		n = sys_recvmsg(a->sync_rd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		sys_exit_group(1);
	/* (By hand, not memcpy: nothing a sanitizer intercepts runs here.) */
	int root_fd = -1;
	struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
	if (ch && ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS &&
	    ch->cmsg_len == CMSG_LEN(sizeof(int))) {
		const unsigned char *d = CMSG_DATA(ch);
		unsigned char *o = (unsigned char *)&root_fd;
		for (size_t i = 0; i < sizeof(int); i++)
			o[i] = d[i];
	}
	/* Raw syscalls: see sys_setgroups0() (glibc's wrappers can deadlock
	 * here when the parent is multi-threaded, as sandlotd is). */
	if (sys_setgroups0() < 0)
		sys_child_fail(a->status_wr, "setgroups");
	if (sys_setresgid(0, 0, 0) < 0 || sys_setresuid(0, 0, 0) < 0)
		sys_child_fail(a->status_wr, "become root of the user namespace");

	/* Move the descriptors init expects to 3..11 (init.h; 4 and 5 stay
	 * closed), going through high numbers first so no dup2 clobbers a
	 * source. */
	enum { NFDS = INIT_FD_LAST - INIT_FD_PROTO + 1 };
	int src[NFDS] = { a->sock,    -1,         -1,      a->storage_fd, a->image_fd,
			  a->lock_fd, root_fd,    a->oom_fd, a->pids_fd };
	int hi[NFDS];
	for (int i = 0; i < NFDS; i++) {
		hi[i] = -1;
		if (src[i] >= 0 && (hi[i] = sys_dupfd_cloexec(src[i], 100)) < 0)
			sys_child_fail(a->status_wr, "dup");
	}
	/* /dev/null too: in a process with few descriptors it can be one of
	 * 3..11 itself, and the dup2s below would then turn it into another.
	 * And the status pipe, which stays above them, close-on-exec: a
	 * successful exec closes it (the parent reads EOF). */
	_Static_assert(INIT_FD_LAST < 100, "init's descriptors are below the dup targets");
	int devnull = sys_dupfd_cloexec(a->devnull, 100);
	if (devnull < 0)
		sys_child_fail(a->status_wr, "dup");
	int status_fd = sys_dupfd_cloexec(a->status_wr, 100);
	if (status_fd < 0)
		sys_child_fail(a->status_wr, "dup");
	for (int i = 0; i < NFDS; i++)
		if (hi[i] >= 0 && sys_dup2(hi[i], INIT_FD_PROTO + i) < 0)
			sys_child_fail(status_fd, "dup2");
	if (sys_dup2(devnull, 0) < 0 || sys_dup2(devnull, 1) < 0 || sys_dup2(devnull, 2) < 0)
		sys_child_fail(status_fd, "dup2 stdio");
	/* Absent ones closed, so that init can tell (no fd 9 unless a tree
	 * came), and nothing above INIT_FD_LAST but the status pipe. */
	for (int i = 0; i < NFDS; i++)
		if (hi[i] < 0)
			sys_close(INIT_FD_PROTO + i);
	if (sys_close_range(INIT_FD_LAST + 1, (unsigned)status_fd - 1, 0) < 0 ||
	    sys_close_range((unsigned)status_fd + 1, ~0U, 0) < 0) {
		for (int fd = INIT_FD_LAST + 1; fd < 1024; fd++)
			if (fd != status_fd)
				sys_close(fd);
	}
	/* Init takes no arguments: its configuration comes over fd 3. */
	char *const argv[] = { (char *)"sandlot-init", NULL };
	char *const envp[] = { NULL };
	sys_execve(a->init_path, argv, envp);
	sys_child_fail(status_fd, "exec sandlot-init");
}

static SANDLOT_CLONE_CHILD int child_entry(void *arg)
{
	child_main(arg);
}

/* Preparing the root tree (ns-root.c) in a thread of its own, while this
 * one takes the uid range, cgroup and storage and clones the child: the
 * first time in a process that is a few hundred microseconds of mount
 * calls, which would otherwise delay every `sandlot run`. */
struct root_job {
	struct ns_root_key key;
	char rootfs[4200];
	struct ns_root root;
	pthread_t thread;
	int rc;
};

static void *root_job_main(void *arg)
{
	struct root_job *j = arg;
	/* A host where it cannot be done just gets the old way: init builds
	 * the root. */
	sandlot__trace(NULL);
	j->rc = sandlot__ns_root_clone(&j->key, &j->root, 1, NULL);
	sandlot__trace("root: built");
	return NULL;
}

/* 1 when a thread was started (join it), 0 when the job is done. */
static int root_job_start(struct root_job *j, const struct sandlot *sb)
{
	memset(j, 0, sizeof(*j));
	j->root.fd = -1;
	j->key.hostname = sb->hostname;
	j->key.user_name = sb->img.user ? sb->img.user : "user";
	if (sb->img.lock_fd >= 0) {
		snprintf(j->rootfs, sizeof(j->rootfs), "%s/images/%s/rootfs", sb->data_dir,
			 sb->img.digest);
		j->key.rootfs = j->rootfs;
	}
	/* Prepared already (a long-running process): a clone, right here. */
	if ((j->rc = sandlot__ns_root_clone(&j->key, &j->root, 0, NULL)) == 0)
		return 0;
	/* Signals stay with the caller's threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&j->thread, NULL, root_job_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		/* No thread: do it here. */
		root_job_main(j);
		return 0;
	}
	return 1;
}

static int root_job_join(struct root_job *j)
{
	pthread_join(j->thread, NULL);
	return j->rc;
}

/* Release the child: one byte, with the root tree (root_fd >= 0). */
static int send_go(int sock, int root_fd)
{
	return sandlot__send_with_fd(sock, "g", 1, root_fd) == 1 ? 0 : -1;
}

/* The clone child's stack (sys_clone_vfork): child_main needs a few KiB. */
#define CHILD_STACK (64u << 10)
/* The releasing thread's (release_job_start()). */
#define RELEASE_STACK (256u << 10)

/* What the parent does between the clone and the "go": the child's uid
 * and gid maps, its workspace and image seen through its user namespace,
 * its cgroup (unless it joined by itself: `added`), the OOM killer kept
 * off it, and the prepared root tree, idmapped, sent with the go.  Runs on
 * the creating thread after a fork-style clone, on a thread of its own
 * during a vfork-style one (release_job_start()). */
struct release {
	struct ns_state *ns;
	struct root_job *rj;
	int root_job_started; /* rj's thread is still to be joined */
	int added, sync_wr;
	pid_t pid;
	int rc;
	sandlot_error_t *err;
	/* vfork-style: */
	int thread_started; /* release_child() runs on `thread` */
	pthread_t thread;
	int tid; /* the child's pid (CLONE_PARENT_SETTID), -1: no child */
};

/* 0 with the child released, or -1 with r->err (not released: the caller
 * makes sure the child ends).  Joins r->rj's thread either way. */
static int release_child(struct release *r)
{
	struct ns_state *ns = r->ns;
	pid_t pid = r->pid;
	int rc = -1;
	/* (SANDLOT_TRACE: on the releasing thread these phases are named
	 * "release: ..." and timed from the child's start, apart from the
	 * creating thread's, which go on meanwhile.) */
	int own = r->thread_started;
	if (sandlot__userns_write_maps(pid, ns->slot.base, &r->err) < 0)
		goto out;
	sandlot__trace(own ? "release: uid map" : "uid map");
	/* The workspace stores sandbox uids: show it through the new
	 * namespace's mapping, before init attaches it. */
	if (sandlot__storage_idmap(&ns->storage, pid, &r->err) < 0)
		goto out;
	sandlot__ns_image_idmap(ns->image_fd, pid);
	if (!r->added && sandlot__cgroup_add_pid(ns->cg, pid, &r->err) < 0)
		goto out;
	sandlot__trace(own ? "release: cgroup add" : "cgroup add");
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", (int)pid);
	/* Keep the OOM killer off init: it needs CAP_SYS_RESOURCE, which some
	 * hosts' root lacks; there commands still rank above init because
	 * init_drop_privileges() raises their score. */
	if (sandlot__write_file(path, "-1000", 0) < 0 && errno != EACCES && errno != EPERM) {
		sandlot__error_errno(&r->err, errno, "protect sandbox init from the OOM killer");
		goto out;
	}
	/* The prepared root, idmapped through the new user namespace, goes
	 * with the "go"; without one, init builds the root itself. */
	int root_rc = r->root_job_started ? root_job_join(r->rj) : r->rj->rc;
	r->root_job_started = 0;
	if (root_rc == 0) {
		sandlot__ns_root_idmap(&r->rj->root, pid);
		sandlot__trace(own ? "release: root tree" : "root tree");
	}
	if (send_go(r->sync_wr, r->rj->root.fd) < 0) {
		sandlot__error_errno(&r->err, errno, "release the sandbox's init");
		goto out;
	}
	rc = 0;
out:
	if (r->root_job_started)
		root_job_join(r->rj);
	r->root_job_started = 0;
	return r->rc = rc;
}

static void *release_main(void *arg)
{
	struct release *r = arg;
	int t;
	while ((t = __atomic_load_n(&r->tid, __ATOMIC_ACQUIRE)) == 0)
		sys_futex_wait(&r->tid, 0);
	sandlot__trace(NULL);
	if (t < 0) {
		/* No child: only the root job to wait for. */
		if (r->root_job_started)
			root_job_join(r->rj);
		r->root_job_started = 0;
		return NULL;
	}
	r->pid = t;
	/* Not released: the child reads EOF and exits, which wakes the
	 * creating thread from its clone. */
	if (release_child(r) < 0)
		shutdown(r->sync_wr, SHUT_RDWR);
	return NULL;
}

/* Whether this process is small enough that copying its address space
 * (a fork-style clone) costs less than handing the release to a thread:
 * `sandlot run`'s 3 MiB resident fork in about 0.1 ms, where the thread's
 * start and hand-offs cost about 0.45 ms (bench/startup.py, SANDLOT_CLONE=fork
 * vs vfork).  sandlotd is 12.5 to 14 MiB resident with a few sandboxes and
 * hundreds of mappings: its fork, the copy-on-write faults of its threads
 * after it and the copy's teardown at the child's exec made a sequential
 * create 0.6 to 0.9 ms slower than the vfork-style clone (bench/daemon_exec.py,
 * SANDLOT_CLONE=fork vs vfork, 150 creates each); hence a bound well between
 * the two. */
static int small_process(void)
{
	char buf[128];
	cleanup_close int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	unsigned long size, resident;
	if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
		return 0;
	return resident * (unsigned long)sysconf(_SC_PAGESIZE) < (8ul << 20);
}

/* Start the thread that releases the child of a vfork-style clone.  1 when
 * started (then clone with &r->tid, or release_job_cancel()), 0 when the
 * caller releases the child itself after a fork-style clone. */
static int release_job_start(struct release *r)
{
	/* SANDLOT_CLONE=fork or vfork: that clone whatever the process's
	 * size, to compare. */
	const char *how = getenv("SANDLOT_CLONE");
	if (how && strcmp(how, "fork") == 0)
		return 0;
	if (!(how && strcmp(how, "vfork") == 0) && small_process())
		return 0;
#if defined(__SANITIZE_THREAD__)
#define CLONE_FORK_ONLY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLONE_FORK_ONLY 1
#endif
#endif
#ifdef CLONE_FORK_ONLY
	/* ThreadSanitizer intercepts clone() as a fork: its child-side
	 * bookkeeping, in memory this process shares with the child, then
	 * marks the daemon itself as a multi-threaded fork's child, which may
	 * start no thread.  Its builds clone fork-style. */
	return 0;
#endif
	r->tid = 0;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r->thread_started = 1;
	/* A small stack: glibc frees the stacks of joined threads beyond its
	 * 40 MiB cache, munmap() included, under the process-wide lock that
	 * every pthread_create() and join takes too.  With the default 8 MiB
	 * that was nearly every join in a burst of creates in sandlotd, and
	 * the creates waited on that lock for about a third of the time they
	 * spent blocked on mutexes (perf, off-CPU).  release_child() needs a
	 * few KiB. */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, RELEASE_STACK);
	int rc = pthread_create(&r->thread, &attr, release_main, r);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		r->thread_started = 0;
	return rc == 0;
}

/* No clone after release_job_start(): end its thread. */
static void release_job_cancel(struct release *r)
{
	__atomic_store_n(&r->tid, -1, __ATOMIC_RELEASE);
	sys_futex_wake(&r->tid);
	pthread_join(r->thread, NULL);
}

/* Hand e up to the caller's err (which may be NULL: then it goes). */
static void pass_error(sandlot_error_t **err, sandlot_error_t *e)
{
	if (err) {
		sandlot_error_free(*err);
		*err = e;
	} else {
		sandlot_error_free(e);
	}
}

/* Read the child's report: EOF with no data means init was exec'd (what
 * fails after that, init answers CONFIG with). */
static int read_status(int fd, sandlot_error_t **err)
{
	char buf[600];
	size_t len = 0;
	uint64_t deadline = sandlot__now_ms() + 10000;
	for (;;) {
		int64_t left = (int64_t)(deadline - sandlot__now_ms());
		if (left <= 0)
			return sandlot__error(err, ETIMEDOUT, "sandbox setup did not finish in 10 s");
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sandlot__error_errno(err, errno, "wait for sandbox setup");
		if (r == 0)
			continue;
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sandlot__error_errno(err, errno, "read sandbox setup status");
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == sizeof(buf) - 1)
			break;
	}
	if (len == 0)
		return 0;
	buf[len] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = '\0';
	char *end;
	long e = strtol(buf, &end, 10);
	if (end == buf || e <= 0 || e > 4095)
		e = EIO;
	while (*end == ' ')
		end++;
	return sandlot__error(err, (int)e, "sandbox setup failed: %s", *end ? end : buf);
}

/* Remove cgroups and ephemeral workspaces that a killed sandlot process
 * could not (SIGKILL leaves nothing else behind: the sandbox's processes
 * and mounts die with its init), and the free prepared cgroups of a
 * preparer that was killed (whatever its data directory).  At most once a
 * minute per data directory, and only cgroups that are empty and older
 * than 30 s and workspaces that no process holds. */
void sandlot__ns_collect_stale(const char *data_dir)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/gc.stamp", data_dir);
	struct stat st;
	if (stat(path, &st) == 0 && time(NULL) - st.st_mtime < 60)
		return;
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		return;
	futimens(fd, NULL);
	sandlot__cgroup_pool_reclaim();
	sandlot__netns_spare_sweep();
	sandlot__cgroup_cleanup_stale("sb-", 30);
	sandlot__pool_sweep(data_dir);
}

/* sandlot__fd_park() what a live sandbox holds until its end: its init's
 * pidfd and protocol socket (*conn), its network namespace and listeners,
 * its uid range's and workspace's locks (five descriptors per sandbox
 * without a network policy). */
static void park_fds(struct ns_state *ns, int *conn)
{
	sandlot__fd_park(conn);
	sandlot__fd_park(&ns->pidfd);
	sandlot__fd_park(&ns->netns_fd);
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		sandlot__fd_park(&ns->egress_fds[i]);
	sandlot__fd_park(&ns->slot.lock_fd);
	sandlot__fd_park(&ns->storage.lock_fd);
	sandlot__fd_park(&ns->cleanup_lock_fd);
}

/* start, or with `resume` resume: the same, on a kept workspace that must
 * exist (what a pause kept is its files). */
static int start_sandbox(struct sandlot *sb, int resume, sandlot_error_t **err)
{
	struct ns_state *ns = calloc(1, sizeof(*ns));
	if (!ns)
		return sandlot__error(err, ENOMEM, "out of memory");
	ns->pidfd = -1;
	ns->netns_fd = -1;
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++)
		ns->egress_fds[i] = -1;
	ns->slot.lock_fd = -1;
	ns->storage.mount_fd = ns->storage.lock_fd = -1;
	ns->image_fd = -1;
	ns->helper_fd = -1;
	ns->cleanup_lock_fd = -1;
	ns->status_fd = -1;
	ns->data_dir = sb->data_dir;

	cleanup_close int sync_rd = -1, sync_wr = -1, status_rd = -1, status_wr = -1;
	cleanup_close int sock_host = -1, sock_child = -1, devnull = -1;
	cleanup_close int oom_fd = -1, pids_fd = -1;
	int fds[2];

	struct root_job rj;
	struct release rel;
	memset(&rel, 0, sizeof(rel));
	rel.ns = ns;
	rel.rj = &rj;
	rel.sync_wr = -1;
	sandlot__trace(NULL);
	rel.root_job_started = root_job_start(&rj, sb);
	/* With a helper, the helper collects, off the critical path. */
	if (!sb->opts.cleanup_helper)
		sandlot__ns_collect_stale(sb->data_dir);
	else if ((ns->cleanup_lock_fd = sandlot__ns_cleanup_lock(sb->data_dir, err)) < 0)
		goto fail;
	if (sandlot__uid_slot_acquire(sb->data_dir, &ns->slot, err) < 0)
		goto fail;
	sandlot__trace("uid slot");
	struct sandlot_cgroup_limits lim = {
		.memory_bytes = sb->opts.memory_bytes,
		.cpus_milli = sb->opts.cpus_milli,
		.pids = sb->opts.pids,
	};
	/* A prepared cgroup when there is one (its name becomes the sandbox's
	 * id); a new one otherwise. */
	char pooled[32];
	int prepared = !sb->id_given && sandlot__cgroup_pool_take(sb->data_dir, &lim, pooled);
	if (prepared) {
		memcpy(sb->id, pooled, sizeof(pooled));
		sandlot__ns_prepare_taken();
	}
	ns->cg_lim = lim;
	ns->cg = sandlot__cgroup_create(sb->id, &lim, err);
	if (!ns->cg)
		goto fail;
	sandlot__trace(prepared ? "cgroup (prepared)" : "cgroup");
	/* Init reports what the kernel counted there around every command
	 * (EXIT's OOM_KILLS and PIDS_REFUSED). */
	sandlot__cgroup_event_fds(ns->cg, &oom_fd, &pids_fd);
	int want = (int)sb->opts.storage | (resume ? SANDLOT_STORAGE_EXISTING : 0);
	if (sandlot__storage_create(sb->data_dir, sb->id, sb->opts.disk_bytes, want,
				    sb->opts.workspace, sb->opts.disk_overcommit, &ns->storage,
				    err) < 0)
		goto fail;
	sandlot__trace("storage");
	if (sb->img.lock_fd >= 0) {
		if ((ns->image_fd = sandlot__ns_image_mount(sb->data_dir, sb->img.digest, err)) < 0)
			goto fail;
		sandlot__trace("image");
	}
	/* A socket, not a pipe: the prepared root tree travels with the "go". */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
		goto fail_errno;
	sync_rd = fds[0], sync_wr = fds[1];
	if (pipe2(fds, O_CLOEXEC) < 0)
		goto fail_errno;
	status_rd = fds[0], status_wr = fds[1];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
		goto fail_errno;
	sock_host = fds[0], sock_child = fds[1];
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		goto fail_errno;

	/* init's part of CONFIG that only this backend knows: where the
	 * workspace and the root come from. */
	struct sandlot_init_config *ic = &sb->init_cfg;
	if (ns->storage.kind == SANDLOT_STORAGE_TMPFS) {
		ic->flags |= SL_CONFIG_TMPFS;
		ic->disk = ns->storage.bytes;
	}
	if (ns->image_fd >= 0)
		ic->flags |= SL_CONFIG_IMAGE;
	/* RLIMIT_FSIZE a little above the disk size: a file can never grow past
	 * the storage anyway, and the storage's ENOSPC (a clean write error)
	 * must come before the rlimit's SIGXFSZ (a kill). */
	ic->fsize = ns->storage.bytes + (1ull << 20);
	struct sandlot_cgroup_join join;
	if (sandlot__cgroup_join_prepare(ns->cg, &join, err) < 0)
		goto fail;
	struct child_args ca = {
		.join = &join,
		.sync_rd = sync_rd, .status_wr = status_wr, .sock = sock_child,
		.storage_fd = ns->storage.mount_fd,
		.image_fd = ns->image_fd, .lock_fd = ns->storage.lock_fd, .devnull = devnull,
		.oom_fd = oom_fd, .pids_fd = pids_fd,
		.init_path = sb->init_path,
		.sync_wr = sync_wr,
	};

	/* No CLONE_NEWNET: the child starts in the namespace this thread is
	 * in between netns_new and netns_leave, which the host owns. */
	const unsigned long flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
				    CLONE_NEWUTS;
	pid_t pid = -1;
	/* A namespace made ahead (sandlot_prepare()) when there is one of the
	 * kind, else a new one. */
	struct sandlot_netns_ready ready;
	int egress = sb->net_policy && sb->net_policy->mode != SANDLOT_NET_NONE;
	int made_ahead = sandlot__netns_pool_take(egress, &ready) == 0;
	if (made_ahead) {
		sandlot__ns_prepare_taken();
		ns->netns_fd = ready.ns_fd;
		memcpy(ns->egress_fds, ready.fds, sizeof(ns->egress_fds));
		ns->egress_nft = ready.nft;
	} else if (!egress && sb->opts.cleanup_helper) {
		/* One a previous run's cleanup helper left (netns.h). */
		ns->netns_fd = sandlot__netns_spare_take(sb->data_dir, ns->spare_netns);
		made_ahead = ns->netns_fd >= 0;
	}
	sandlot__trace(made_ahead ? "netns (spare)" : "netns (none)");
	/* The child's release on a thread of its own, so that this one can
	 * sleep in a vfork-style clone (release_job_start()). */
	rel.sync_wr = sync_wr;
	/* v1: the child joins by itself; v2: the releasing thread moves it
	 * (clone3's CLONE_INTO_CGROUP takes no function to run).  Set before
	 * the thread starts, which reads it. */
	rel.added = join.ntasks > 0;
	void *stack = MAP_FAILED;
	int vfork = release_job_start(&rel);
	if (vfork) {
		stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (stack == MAP_FAILED) {
			release_job_cancel(&rel);
			rel.thread_started = 0;
			vfork = 0;
		}
	}
	int net_saved = -1;
	if (made_ahead ? sandlot__netns_enter(ns->netns_fd, &net_saved, err) < 0
		       : sandlot__netns_new(&ns->netns_fd, &net_saved, err) < 0) {
		if (vfork) {
			release_job_cancel(&rel);
			munmap(stack, CHILD_STACK);
		}
		sandlot__cgroup_join_close(&join);
		goto fail;
	}
	if (vfork) {
		ca.tid = &rel.tid;
		ca.files_end = child_fds_end(&ca);
		pid = sys_clone_vfork(flags | CLONE_FILES, child_entry, &ca, stack, CHILD_STACK,
				      &rel.tid);
		/* Back once the child exec'd init or exited (its errno writes
		 * went to this thread's errno: only a failed clone's counts). */
		int clone_errno = errno;
		sandlot__trace("clone to exec");
		sandlot__netns_leave(&net_saved);
		if (pid < 0)
			release_job_cancel(&rel);
		else
			pthread_join(rel.thread, NULL);
		munmap(stack, CHILD_STACK);
		sandlot__cgroup_join_close(&join);
		if (pid < 0) {
			sandlot__error_errno(err, clone_errno, "clone sandbox namespaces");
			goto fail;
		}
		ns->pid = pid;
		if (rel.rc < 0) {
			/* Not released: the child read EOF and exited. */
			pass_error(err, steal_pointer(&rel.err));
			goto fail;
		}
	} else {
		if (join.dir_fd >= 0) {
			pid = sys_clone3_fork(flags, join.dir_fd);
			rel.added = pid >= 0;
			if (pid < 0 && errno != ENOSYS && errno != E2BIG && errno != EINVAL) {
				sandlot__error_errno(err, errno, "clone sandbox namespaces into its cgroup");
				sandlot__netns_leave(&net_saved);
				sandlot__cgroup_join_close(&join);
				goto fail;
			}
		}
		if (pid < 0) {
			rel.added = join.ntasks > 0; /* the child joins by itself */
			pid = sys_clone_fork(flags | SIGCHLD);
		}
		if (pid == 0)
			child_main(&ca);
		int clone_errno = errno;
		sandlot__netns_leave(&net_saved);
		sandlot__cgroup_join_close(&join);
		if (pid < 0) {
			sandlot__error_errno(err, clone_errno, "clone sandbox namespaces");
			goto fail;
		}
		ns->pid = pid;
		rel.pid = pid;
		if (release_child(&rel) < 0) {
			pass_error(err, steal_pointer(&rel.err));
			goto fail;
		}
	}
	ns->pidfd = sys_pidfd_open(pid, 0);
	sandlot__trace("clone, release");

	close(sync_rd), sync_rd = -1;
	close(status_wr), status_wr = -1;
	close(sock_child), sock_child = -1;
	if (oom_fd >= 0)
		close(oom_fd), oom_fd = -1;
	if (pids_fd >= 0)
		close(pids_fd), pids_fd = -1;
	sandlot__ns_root_release(&rj.root);
	close(sync_wr), sync_wr = -1;
	/* Forked while init sets itself up (on another CPU, where there is
	 * one), before this process has any other thread. */
	if (sb->opts.cleanup_helper) {
		if (sandlot__ns_helper_start(ns, sb->id, sb->data_dir, err) < 0)
			goto fail;
		sandlot__trace("helper");
	}

	ns->status_fd = steal_fd(&status_rd);
	sb->conn_fd = steal_fd(&sock_host);
	sb->backend = ns;
	/* In a large process (sandlotd) what the sandbox holds for its life
	 * goes high, out of the way of the next sandbox's clone (child_main()). */
	if (vfork)
		park_fds(ns, &sb->conn_fd);
	return 0;

fail_errno:
	sandlot__error_errno(err, errno, "create sandbox");
fail:
	if (rel.root_job_started)
		root_job_join(&rj);
	sandlot__ns_root_release(&rj.root);
	sandlot_error_free(rel.err);
	ns_release(ns);
	free(ns);
	return -1;
}

static int ns_start(struct sandlot *sb, sandlot_error_t **err)
{
	return start_sandbox(sb, 0, err);
}

static int ns_resume(struct sandlot *sb, sandlot_error_t **err)
{
	return start_sandbox(sb, 1, err);
}

static int ns_ready(struct sandlot *sb, sandlot_error_t **err)
{
	struct ns_state *ns = sb->backend;
	int rc = read_status(ns->status_fd, err);
	close(ns->status_fd);
	ns->status_fd = -1;
	sandlot__trace("init setup");
	/* Init has attached the storage in its own namespace (or failed): the
	 * host's handles are no longer needed and must not keep them alive. */
	sandlot__storage_release(&ns->storage);
	close_image(ns);
	return rc;
}

static void ns_kill(struct sandlot *sb)
{
	if (sb->backend)
		ns_kill_init(sb->backend);
}

static void ns_stop(struct sandlot *sb)
{
	const struct ns_state *ns = sb->backend;
	/* Our child, not reaped before release: the pid cannot have been
	 * reused.  Killing a pid namespace's init kills all in it. */
	if (!ns || ns->pid <= 0)
		return;
	if (ns->pidfd < 0 || sys_pidfd_send_signal(ns->pidfd, SIGKILL, NULL, 0) < 0)
		kill(ns->pid, SIGKILL);
}

/* Files only: what a pause keeps is the kept workspace, whose files are
 * complete once every process of the sandbox is gone, and durable after a
 * sync of the storage pool.  Running state is not kept: saving processes
 * needs CRIU, and Debian 12's (3.17) fails on the kernels sandlot runs on
 * ("vdso: Unexpected rt vDSO area bounds"). */
static int ns_pause(struct sandlot *sb, unsigned flags, sandlot_error_t **err)
{
	const struct ns_state *ns = sb->backend;
	if (flags & SANDLOT_PAUSE_MEMORY)
		return sandlot__error(err, ENOTSUP,
				      "ns sandboxes pause their files only: their running state "
				      "(processes, memory) cannot be saved");
	if (!ns || ns->pid <= 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	if (ns->storage.kind != SANDLOT_STORAGE_POOL || ns->storage.ephemeral)
		return sandlot__error(err, EINVAL, "the sandbox has no kept workspace");
	sandlot__trace(NULL);
	ns_stop(sb);
	/* Until init has exited, which in a pid namespace is after every other
	 * process in it: no writer is left.  WNOWAIT: release reaps it. */
	siginfo_t si;
	while (waitid(P_PID, (id_t)ns->pid, &si, WEXITED | WNOWAIT) < 0)
		if (errno != EINTR)
			return sandlot__error_errno(err, errno, "wait for the sandbox to end");
	sandlot__trace("pause: ended");
	if (sandlot__workspace_sync(sb->data_dir, err) < 0)
		return -1;
	sandlot__trace("pause: sync");
	return 0;
}

static int ns_ended(const struct sandlot *sb)
{
	const struct ns_state *ns = sb->backend;
	if (!ns || ns->pid <= 0)
		return 1;
	/* WNOWAIT: release reaps it (and only then may the pid be reused). */
	siginfo_t si = { 0 };
	if (waitid(P_PID, (id_t)ns->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD;
	return si.si_pid == ns->pid;
}

/* A sandbox's cgroup is named after its id; the rest of what it holds on
 * the host (uid range, network namespace, mounts) goes with its processes,
 * and its workspace belongs to the caller (sandlot_workspace_*). */
static unsigned ns_remove_leftovers(const char *id, int kill)
{
	return (unsigned)sandlot__cgroup_remove_named(id, kill);
}

static int ns_detach(struct sandlot *sb)
{
	struct ns_state *ns = sb->backend;
	if (!ns || ns->helper_pid <= 0)
		return -1;
	/* Dying starts now; the helper waits for the end of it. */
	if (ns->pidfd >= 0)
		sys_pidfd_send_signal(ns->pidfd, SIGKILL, NULL, 0);
	return sandlot__ns_helper_detach(ns);
}

static void ns_release_sb(struct sandlot *sb)
{
	struct ns_state *ns = sb->backend;
	if (!ns)
		return;
	ns_release(ns);
	free(ns);
	sb->backend = NULL;
}

static int ns_usage(struct sandlot *sb, sandlot_usage_t *out, sandlot_error_t **err)
{
	struct ns_state *ns = sb->backend;
	if (!ns)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	return sandlot__cgroup_usage(ns->cg, out, err);
}

static pid_t ns_init_pid(const struct sandlot *sb)
{
	const struct ns_state *ns = sb->backend;
	return ns ? ns->pid : 0;
}

/* The sandbox's network namespace: the one ns_start() made for it (whose
 * descriptor we hold), else its init's, entered through the pidfd (Linux
 * 5.8+; the pid is our unreaped child, so it cannot have been reused), or
 * through /proc/PID/ns/net where setns() takes no pidfd. */
static int ns_port_connect(struct sandlot *sb, uint16_t port, unsigned timeout_ms,
			   sandlot_error_t **err)
{
	struct ns_state *ns = sb->backend;
	if (!ns || ns->pid <= 0)
		return sandlot__error(err, EPIPE, "the sandbox is gone");
	/* The namespace the host made for the sandbox (ns_start). */
	if (ns->netns_fd >= 0)
		return sandlot__netns_connect_loopback(ns->netns_fd, port, (int)timeout_ms, err);
	if (ns->pidfd >= 0) {
		sandlot_error_t *e = NULL;
		int fd = sandlot__netns_connect_loopback(ns->pidfd, port, (int)timeout_ms, &e);
		if (fd >= 0 || sandlot_error_status(e) != EINVAL) {
			if (fd < 0) {
				if (err)
					*err = e;
				else
					sandlot_error_free(e);
			}
			return fd;
		}
		sandlot_error_free(e);
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)ns->pid);
	cleanup_close int nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0)
		return sandlot__error_errno(err, errno, "open the sandbox's network namespace");
	return sandlot__netns_connect_loopback(nsfd, port, (int)timeout_ms, err);
}

static int ns_netns_fd(const struct sandlot *sb)
{
	const struct ns_state *ns = sb->backend;
	return ns ? ns->netns_fd : -1;
}

static int ns_take_egress(struct sandlot *sb, int fds[3], struct sandlot_nft **nft)
{
	struct ns_state *ns = sb->backend;
	if (!ns || ns->egress_fds[0] < 0 || !ns->egress_nft)
		return 0;
	for (int i = 0; i < SANDLOT_NETNS_NFDS; i++) {
		fds[i] = ns->egress_fds[i];
		ns->egress_fds[i] = -1;
	}
	*nft = ns->egress_nft;
	ns->egress_nft = NULL;
	return 1;
}

const struct sandlot_backend_ops sandlot__backend_ns = {
	.name = "ns",
	.start = ns_start,
	.ready = ns_ready,
	.kill = ns_kill,
	.stop = ns_stop,
	.ended = ns_ended,
	.detach = ns_detach,
	.release = ns_release_sb,
	.usage = ns_usage,
	.init_pid = ns_init_pid,
	.prepare = sandlot__ns_prepare,
	.new_id = sandlot__ns_new_id,
	.port_connect = ns_port_connect,
	.netns_fd = ns_netns_fd,
	.remove_leftovers = ns_remove_leftovers,
	.take_egress = ns_take_egress,
	.pause = ns_pause,
	.resume = ns_resume,
	.snapshot = sandlot__workspace_copy,
	.workspace_size = sandlot__workspace_size,
	.workspace_remove = sandlot__workspace_remove,
	.workspace_list = sandlot__workspace_list,
	.workspace_sync = sandlot__workspace_sync,
	.storage_info = sandlot__pool_info,
	.storage_grow = sandlot__pool_grow,
	.storage_unmount = sandlot__pool_unmount,
	.workspace_import = sandlot__workspace_import,
	.workspace_import_tar = sandlot__workspace_import_tar,
	.workspace_export = sandlot__workspace_export,
};
