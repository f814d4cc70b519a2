/* sandlot_prepare() for the `ns` backend: a background thread that keeps a
 * set of prepared cgroups filled (src/linux/cgroup.h, "prepared cgroups")
 * and the root tree of the likely image built (ns-root.c), so that a
 * sandbox's creation finds both ready.  It is woken whenever a sandbox took
 * a prepared cgroup (sandlot__ns_prepare_taken), and otherwise sleeps.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns.h"
#include "core/internal.h"
#include "core/images.h"
#include "common/util.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int started, work;
static unsigned count;                      /* 0: not preparing */
static struct sandlot_cgroup_limits limits;
static char hostname[80], user[80], rootfs[4400];
static int has_rootfs;

static void *prepare_main(void *arg)
{
	for (;;) {
		pthread_mutex_lock(&lock);
		while (!work)
			pthread_cond_wait(&cond, &lock);
		work = 0;
		unsigned n = count;
		struct sandlot_cgroup_limits lim = limits;
		char h[sizeof(hostname)], u[sizeof(user)], r[sizeof(rootfs)];
		memcpy(h, hostname, sizeof(h));
		memcpy(u, user, sizeof(u));
		memcpy(r, rootfs, sizeof(r));
		int with_rootfs = has_rootfs;
		pthread_mutex_unlock(&lock);
		if (!n)
			continue;
		sandlot__cgroup_pool_fill(&lim, n);
		/* The tree is built once (then cloned, as long as the host's /etc
		 * stays the same); a clone made and dropped at once costs a few
		 * microseconds. */
		struct ns_root_key k = { .rootfs = with_rootfs ? r : NULL, .hostname = h, .user_name = u };
		struct ns_root root;
		if (sandlot__ns_root_clone(&k, &root, 1, NULL) == 0)
			sandlot__ns_root_release(&root);
	}
	return arg;
}

void sandlot__ns_prepare_taken(void)
{
	pthread_mutex_lock(&lock);
	if (started && count) {
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
	/* The image's user and rootfs, as a sandbox on it would have them. */
	struct sandlot_image img;
	memset(&img, 0, sizeof(img));
	img.lock_fd = img.root_fd = -1;
	const char *image = likely->image ? likely->image : "host";
	const char *dd = sandlot__data_dir(likely->data_dir);
	if (strcmp(image, "host") != 0 && sandlot__image_open(dd, image, &img, err) < 0)
		return -1;
	pthread_mutex_lock(&lock);
	count = n;
	limits_of(likely, &limits);
	snprintf(hostname, sizeof(hostname), "%s", likely->hostname ? likely->hostname : "sandlot");
	snprintf(user, sizeof(user), "%s", img.user ? img.user : "user");
	has_rootfs = img.lock_fd >= 0;
	if (has_rootfs)
		snprintf(rootfs, sizeof(rootfs), "%s/images/%s/rootfs", dd, img.digest);
	work = 1;
	int rc = 0;
	if (!started && n) {
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
		if (e)
			rc = sandlot__error_errno(err, e, "start the preparing thread");
		else
			started = 1;
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
	if (!sandlot__cgroup_pool_take(&lim, id))
		sandlot__new_id("sb-", id);
	else
		sandlot__ns_prepare_taken();
}
