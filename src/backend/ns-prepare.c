/* sandlot_prepare() for the `ns` backend: a background thread that keeps a
 * set of prepared cgroups filled (src/linux/cgroup.h, "prepared cgroups")
 * and the root tree of the likely image built (ns-root.c), so that a
 * sandbox's creation finds both ready, and a stock of network namespaces
 * (linux/netns.h: plain ones, and ones with egress set up) made ahead.  It is woken whenever a sandbox took
 * a prepared cgroup (sandlot__ns_prepare_taken), and otherwise sleeps.
 *
 * This process is the preparer of the data directory's pool from the first
 * call with a count until a call with count 0, which waits for a fill under
 * way, removes the free prepared cgroups and lets go of the pool (sandlotd
 * does that when it stops).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ns.h"
#include "core/internal.h"
#include "core/images.h"
#include "common/sbid.h"
#include "common/util.h"
#include "linux/netns.h"

/* Network namespaces kept made: plain (most sandboxes), and with egress set
 * up (sandboxes with a network). */
#define NETNS_PLAIN 8
#define NETNS_EGRESS 4

/* A fill does not start the moment a sandbox takes something prepared: it
 * competed for the CPUs with that very sandbox's start — its init setting
 * itself up, its first command — and on 2 CPUs made create + first exec of
 * sandlotd about 0.5 ms slower (p50; create alone up to 1 ms).  It waits
 * until nothing was taken for FILL_QUIET_MS (a sandbox has usually run its
 * first command by then), but no longer than FILL_DEFER_MAX_MS after the
 * first take and no longer than FILL_BATCH takes (a sandbox takes a
 * cgroup and a network namespace: 4 sandboxes, half the stock of plain
 * namespaces), so that a burst of creations never runs the stock dry
 * for want of a fill. */
#define FILL_QUIET_MS 10
#define FILL_DEFER_MAX_MS 50
#define FILL_BATCH 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int started, work, busy;
static unsigned count;                      /* 0: not preparing */
static struct sandlot_cgroup_limits limits;
static char hostname[80], user[80], rootfs[4400], data_dir[4200];
static int has_rootfs;
static int hold_fd = -1;                    /* preparer.lock of data_dir's pool */
static unsigned taken;                      /* takes since the last fill began */
static uint64_t first_taken_ms, last_taken_ms; /* of those, CLOCK_MONOTONIC */

/* With `lock` held: wait while the fill is deferred (FILL_QUIET_MS). */
static void defer_fill_locked(void)
{
	while (count && taken > 0 && taken < FILL_BATCH) {
		uint64_t now = sandlot__now_ms();
		uint64_t due = last_taken_ms + FILL_QUIET_MS;
		if (due > first_taken_ms + FILL_DEFER_MAX_MS)
			due = first_taken_ms + FILL_DEFER_MAX_MS;
		if (now >= due)
			break;
		struct timespec dl;
		sandlot__deadline_in(&dl, CLOCK_REALTIME, due - now);
		pthread_cond_timedwait(&cond, &lock, &dl);
	}
	taken = 0;
}

static void *prepare_main(void *arg)
{
	for (;;) {
		pthread_mutex_lock(&lock);
		while (!work)
			pthread_cond_wait(&cond, &lock);
		defer_fill_locked();
		work = 0;
		unsigned n = count;
		struct sandlot_cgroup_limits lim = limits;
		char h[sizeof(hostname)], u[sizeof(user)], r[sizeof(rootfs)], dd[sizeof(data_dir)];
		memcpy(h, hostname, sizeof(h));
		memcpy(u, user, sizeof(u));
		memcpy(r, rootfs, sizeof(r));
		memcpy(dd, data_dir, sizeof(dd));
		int with_rootfs = has_rootfs;
		busy = n > 0;
		pthread_mutex_unlock(&lock);
		if (!n)
			continue;
		sandlot__cgroup_pool_fill(dd, &lim, n);
		sandlot__netns_pool_fill();
		/* The tree is built once (then cloned, as long as the host's /etc
		 * stays the same); a clone made and dropped at once costs a few
		 * microseconds. */
		struct ns_root_key k = { .rootfs = with_rootfs ? r : NULL, .hostname = h, .user_name = u };
		struct ns_root root;
		if (sandlot__ns_root_clone(&k, &root, 1, NULL) == 0)
			sandlot__ns_root_release(&root);
		pthread_mutex_lock(&lock);
		busy = 0;
		pthread_cond_broadcast(&idle_cond);
		pthread_mutex_unlock(&lock);
	}
	return arg;
}

/* Stop preparing for the current data directory: wait for a fill under
 * way, remove the free prepared cgroups, let go of the pool.  Called with
 * `lock` held. */
static void stop_locked(void)
{
	count = 0;
	while (busy)
		pthread_cond_wait(&idle_cond, &lock);
	sandlot__cgroup_pool_release(data_dir, hold_fd);
	sandlot__netns_pool_want(0, 0);
	hold_fd = -1;
	data_dir[0] = '\0';
}

void sandlot__ns_prepare_taken(void)
{
	pthread_mutex_lock(&lock);
	if (started && count) {
		uint64_t now = sandlot__now_ms();
		if (taken++ == 0)
			first_taken_ms = now;
		last_taken_ms = now;
		work = 1;
		pthread_cond_signal(&cond);
	}
	pthread_mutex_unlock(&lock);
}

static void limits_of(const sandlot_options_t *o, struct sandlot_cgroup_limits *lim)
{
	lim->memory_bytes = o->memory_bytes;
	lim->cpus_milli = o->cpus_milli;
	lim->pids = o->pids;
}

int sandlot__ns_prepare(const sandlot_options_t *likely, unsigned n, sandlot_error_t **err)
{
	const char *dd = sandlot__data_dir(likely->data_dir);
	if (strlen(dd) >= sizeof(data_dir))
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	if (!n) {
		pthread_mutex_lock(&lock);
		stop_locked();
		pthread_mutex_unlock(&lock);
		return 0;
	}
	/* The image's user and rootfs, as a sandbox on it would have them. */
	struct sandlot_image img;
	memset(&img, 0, sizeof(img));
	img.lock_fd = -1;
	const char *image = likely->image ? likely->image : "host";
	if (strcmp(image, "host") != 0 && sandlot__image_open(dd, image, &img, err) < 0)
		return -1;
	pthread_mutex_lock(&lock);
	int rc = 0;
	if (hold_fd >= 0 && strcmp(data_dir, dd) != 0)
		stop_locked(); /* another data directory from now on */
	if (hold_fd < 0) {
		/* (A pool left by a preparer that was killed is ours now: its
		 * free cgroups count towards n.) */
		hold_fd = sandlot__cgroup_pool_hold(dd, err);
		if (hold_fd < 0)
			rc = -1;
		else
			snprintf(data_dir, sizeof(data_dir), "%s", dd);
	}
	if (rc == 0) {
		count = n;
		sandlot__netns_pool_want(NETNS_PLAIN, NETNS_EGRESS);
		limits_of(likely, &limits);
		snprintf(hostname, sizeof(hostname), "%s",
			 likely->hostname ? likely->hostname : "sandlot");
		snprintf(user, sizeof(user), "%s", img.user ? img.user : "user");
		has_rootfs = img.lock_fd >= 0;
		if (has_rootfs)
			snprintf(rootfs, sizeof(rootfs), "%s/images/%s/rootfs", dd, img.digest);
		work = 1;
	}
	if (rc == 0 && !started) {
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		int e = pthread_create(&t, &attr, prepare_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
		if (e) {
			rc = sandlot__error_errno(err, e, "start the preparing thread");
			stop_locked();
		} else {
			started = 1;
		}
	}
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);
	/* The image stays usable while sandboxes use it; preparing holds no
	 * lock on it (its tree is only a clone source, like any bind). */
	sandlot__image_release(&img);
	return rc;
}

void sandlot__ns_new_id(const sandlot_options_t *opts, char id[32])
{
	struct sandlot_cgroup_limits lim;
	limits_of(opts, &lim);
	if (!sandlot__cgroup_pool_take(sandlot__data_dir(opts->data_dir), &lim, id))
		sandlot__sbid_new(id);
	else
		sandlot__ns_prepare_taken();
}
