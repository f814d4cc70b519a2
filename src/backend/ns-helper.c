/* The cleanup helper of the `ns` backend: the part of a sandbox's teardown
 * that need not delay the caller.
 *
 * `sandlot run` must exit with the command's status as soon as the command
 * has ended and its output is out; waiting for the sandbox's init to die,
 * removing its cgroup and giving back its storage and uid range would add
 * milliseconds to every run (tens with a loop-mounted workspace).  So a
 * sandbox created with cleanup_helper gets a helper process, forked right
 * after its init (while init sets itself up on another CPU), that holds
 * the sandbox's pidfd, uid slot lock and (with the caller, from creation
 * on) a shared lock on <data_dir>/cleanup.lock, and waits on a lifeline
 * pipe.  The lifeline
 * reads EOF when the caller detaches the sandbox (sandlot_destroy_nowait)
 * or dies — even by SIGKILL — and the helper then does the teardown.  Tools
 * that need everything cleaned up (tests, scripts) take the cleanup lock
 * exclusively: that returns once every helper of that data dir is done.
 *
 * Init stays a child of the caller; once the caller has exited it is
 * reaped by whoever reaps the caller's orphans (the host's PID 1 or a
 * subreaper).  The helper does not need to reap it: its pidfd reads as
 * soon as init has exited, and init exits only after every other process
 * of its pid namespace is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ns.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "linux/syscalls.h"

/* How long the helper waits for init to exit after SIGKILL before it goes
 * on anyway (a process stuck in uninterruptible sleep); the cgroup kill
 * then deals with what is left. */
#define HELPER_KILL_WAIT_MS 10000

/* Root templates the helper takes over from the caller (see helper_main). */
#define SANDLOT_HELPER_MAX_ROOTS 8

int sandlot__ns_cleanup_lock(const char *data_dir, sandlot_error_t **err)
{
	char path[4200];
	if (snprintf(path, sizeof(path), "%s/cleanup.lock", data_dir) >= (int)sizeof(path))
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "open %s", path);
	/* Blocks only while someone holds it exclusively to wait for the
	 * helpers: a moment. */
	while (flock(fd, LOCK_SH) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			return sandlot__error_errno(err, e, "lock %s", path);
		}
	}
	return fd;
}

/* Close every descriptor but those in keep[] (n of them, -1 entries
 * ignored). */
static void close_all_but(const int *keep, size_t n)
{
	int sorted[16];
	size_t k = 0;
	for (size_t i = 0; i < n && k < SANDLOT_ARRAY_SIZE(sorted); i++)
		if (keep[i] >= 0)
			sorted[k++] = keep[i];
	for (size_t i = 1; i < k; i++)
		for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
			int t = sorted[j];
			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	unsigned from = 3;
	for (size_t i = 0; i <= k; i++) {
		unsigned to = i < k ? (unsigned)sorted[i] : ~0U;
		if (to > from && sys_close_range(from, to - 1, 0) < 0 && to != ~0U)
			for (unsigned fd = from; fd < to; fd++)
				close((int)fd);
		if (i < k)
			from = (unsigned)sorted[i] + 1;
	}
}

/* Wait until init has exited (its pidfd reads): then nothing of the
 * sandbox runs any more. */
static void wait_init_gone(struct ns_state *ns)
{
	if (ns->pidfd < 0)
		return;
	uint64_t deadline = sandlot__now_ms() + HELPER_KILL_WAIT_MS;
	for (;;) {
		struct pollfd p = { .fd = ns->pidfd, .events = POLLIN };
		int64_t left = (int64_t)(deadline - sandlot__now_ms());
		if (left <= 0)
			return;
		int r = poll(&p, 1, (int)left);
		if (r > 0 || (r < 0 && errno != EINTR))
			return;
	}
}

/* Show as "sandlot-cleanup SANDBOX-ID" in ps: the helper is a fork of the
 * caller, and the caller's command line (`sandlot run -- CMD...`) would
 * make it look like the command itself.  The arguments live in one block
 * starting at argv[0] (program_invocation_name), as long as
 * /proc/self/cmdline; we overwrite it in place, cut to fit. */
static void set_cmdline(const char *id)
{
	char *start = program_invocation_name;
	char buf[4096];
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (!start || fd < 0)
		goto out;
	ssize_t len = sandlot__read_full(fd, buf, sizeof(buf));
	if (len < 2 || len == (ssize_t)sizeof(buf) || memcmp(buf, start, strlen(start) + 1) != 0)
		goto out; /* not the layout we expect: leave it */
	char want[64];
	int n = snprintf(want, sizeof(want), "sandlot-cleanup%c%s", 0, id) + 1;
	if (n > (int)len)
		n = (int)len;
	memset(start, 0, (size_t)len);
	memcpy(start, want, (size_t)n - 1);
out:
	if (fd >= 0)
		close(fd);
}

static __attribute__((noreturn)) void helper_main(struct ns_state *ns, int lifeline,
						   const char *id, const char *data_dir,
						   const int *roots, size_t nroots)
{
	/* Out of the caller's session and process group: a terminal's ^C or
	 * a kill of the caller's group must not stop the cleanup. */
	setsid();
	static const int quiet[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP,
				     SIGTTIN, SIGTTOU };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(quiet); i++)
		signal(quiet[i], SIG_IGN);
	prctl(PR_SET_NAME, "sandlot-cleanup", 0, 0, 0);
	set_cmdline(id);
	/* A caller started with stdin (or stdout, stderr) closed may have
	 * been given 0..2 for these: move them out of the way of stdio. */
	int *mine[] = { &lifeline, &ns->pidfd, &ns->slot.lock_fd, &ns->cleanup_lock_fd,
			&ns->storage.lock_fd };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(mine); i++)
		if (*mine[i] >= 0 && *mine[i] <= 2) {
			int fd = fcntl(*mine[i], F_DUPFD_CLOEXEC, 3);
			if (fd < 0)
				_exit(1); /* the collector removes what is left */
			*mine[i] = fd;
		}
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		/* Never hold the caller's stdout/stderr open: whoever reads them
		 * would wait for us. */
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
	}
	/* Not the built image's in-use lock: the image is free once the
	 * caller has let go of the sandbox (its dying processes cannot use it
	 * any more), so `sandlot image rm` right after a run is not refused. */
	/* And the caller's root templates: the last close of one unmounts its
	 * ~50 mounts and waits for an RCU grace period, which would otherwise
	 * be part of the caller's exit — after the command's status is out,
	 * but before whoever waits for the caller (a shell) sees it. */
	int keep[5 + SANDLOT_HELPER_MAX_ROOTS] = { lifeline, ns->pidfd, ns->slot.lock_fd,
						   ns->cleanup_lock_fd, ns->storage.lock_fd };
	for (size_t i = 0; i < nroots; i++)
		keep[5 + i] = roots[i] > 2 ? roots[i] : -1;
	close_all_but(keep, 5 + nroots);
	/* Closed with the rest (init has its own reference to the mount). */
	ns->storage.mount_fd = -1;
	/* The sandbox is in its spare network namespace now (the caller
	 * cloned it there before forking us): its mount point can go. */
	sandlot__netns_spare_put(data_dir, ns->spare_netns);
	ns->spare_netns[0] = '\0';

	char c;
	ssize_t n;
	do
		n = read(lifeline, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1)
		_exit(0); /* the caller did the teardown */

	if (ns->pidfd >= 0)
		sys_pidfd_send_signal(ns->pidfd, SIGKILL, NULL, 0);
	wait_init_gone(ns);
	/* Kills anything still inside (nothing, normally) and removes it. */
	sandlot__cgroup_destroy(ns->cg);
	/* Nothing of the sandbox uses its workspace any more: delete it (an
	 * ephemeral one) and drop its lock. */
	sandlot__storage_destroy(&ns->storage);
	sandlot__uid_slot_release(&ns->slot);
	/* While the cleanup lock is still held: whoever waits for the
	 * helpers also waits for this. */
	sandlot__ns_collect_stale(data_dir);
	/* A network namespace or two for the next runs (netns.h), now that
	 * the caller has its result: off every critical path. */
	sandlot__netns_spare_fill(data_dir, SANDLOT_NETNS_SPARE_MAX);
	/* And cgroups with this one's limits (linux/cgroup.h, "spares"). */
	sandlot__cgroup_pool_spare(data_dir, &ns->cg_lim, SANDLOT_CGROUP_SPARE_MAX);
	_exit(0);
}

int sandlot__ns_helper_start(struct ns_state *ns, const char *id, const char *data_dir,
			     sandlot_error_t **err)
{
	int roots[SANDLOT_HELPER_MAX_ROOTS];
	size_t nroots = sandlot__ns_root_templates(roots, SANDLOT_ARRAY_SIZE(roots));
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sandlot__error_errno(err, errno, "cleanup helper pipe");
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return sandlot__error_errno(err, e, "fork the cleanup helper");
	}
	if (pid == 0) {
		close(p[1]);
		helper_main(ns, p[0], id, data_dir, roots, nroots);
	}
	close(p[0]);
	ns->helper_pid = pid;
	ns->helper_fd = p[1];
	return 0;
}

void sandlot__ns_helper_stop(struct ns_state *ns)
{
	if (ns->helper_pid <= 0)
		return;
	if (ns->helper_fd >= 0) {
		if (write(ns->helper_fd, "x", 1) != 1) {
			/* it is gone already: nothing to tell */
		}
		close(ns->helper_fd);
		ns->helper_fd = -1;
	}
	while (waitpid(ns->helper_pid, NULL, 0) < 0 && errno == EINTR)
		;
	ns->helper_pid = 0;
}

int sandlot__ns_helper_detach(struct ns_state *ns)
{
	if (ns->helper_pid <= 0 || ns->helper_fd < 0)
		return -1;
	close(ns->helper_fd);
	ns->helper_fd = -1;
	ns->helper_pid = 0;
	ns->detached = 1;
	return 0;
}
