/* The warm pool: sandboxes made in advance, handed out by POST /v1/sandboxes.
 *
 * `sandlotd --pool N` (the default image) or `--pool IMAGE=N` keeps N sandboxes
 * of that image ready (of the daemon's default isolation, or as a prefix
 * says: `--pool vm:IMAGE=N`, `--pool ns:N`; a pool is one image of one
 * isolation, and a request must match both): sandlot_create() done — init running, namespaces,
 * cgroup, storage, seccomp policy, uid range, change-tracking baseline —
 * with the options a create request gets when it asks for nothing.  A
 * request the pool can serve takes the oldest ready sandbox instead of
 * creating one, and the refill thread makes a new one behind it.
 *
 * What the pool can serve.  A pooled sandbox was made with the default
 * limits, so a request is a hit only if its sandlot options equal those
 * field by field (the whole struct is compared, so a field a later version
 * adds is a miss unless it has its default: safe by default).  Applied at
 * hand-out instead: env (sandlot_set_env; no command has run in the
 * sandbox yet, so nothing saw the old environment) and what lives only in
 * the daemon (ttl, idle timeout, metadata; created_at and every clock start
 * at hand-out, in the create route).  Any other request, or one that finds
 * the pool empty, gets a cold create in the request itself ("miss").
 *
 * Clean hand-outs.  A pooled sandbox is handed out once and never comes
 * back: DELETE destroys it like any other.  Before hand-out nothing runs in
 * it but its init, nothing touched its workspace, and its id, workspace
 * image and uid range are its own (the id is chosen when it is made —
 * workspace_assign() — and the daemon's id for it is that id).  A ready
 * sandbox whose init died (killed from outside) is dropped, never handed
 * out.
 *
 * Threads.  One refill thread for all pools makes one sandbox at a time
 * (a create keeps a CPU busy for ~10-20 ms; several at once would starve
 * requests on a small host), the pool missing the most first, and backs
 * off after a failure (0.1 s doubling to 10 s).  A refill starts only
 * REFILL_DEFER_MS after a hand-out (see defer_refill_locked()).  Once a
 * second the thread drops ready sandboxes that died.  A hand-out is a pop
 * under ps->lock plus sandlot_alive(); the marker file (below) is removed
 * later by the refill thread, off the request's path.
 *
 * Accounting.  Before hand-out a pooled sandbox is in neither the sandbox
 * table nor the registry: the API never lists it, and it does not count
 * toward --max-sandboxes (that bounds users' sandboxes; the pools add at
 * most their sizes on top).  While pooled it has a marker file
 * <data-dir>/pool/<id>, so that after a crash (kill -9) the next start
 * removes its cgroups, as sandboxes_recover() does for the registry's
 * running sandboxes; its workspace image goes with the images no sandbox
 * of the registry owns (workspace_recover()), and everything else of it
 * dies with its init.  At shutdown the pools are emptied (destroyed)
 * first, before the users' sandboxes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "core/teardown.h"

#define MAX_POOLS 8
#define MAX_POOL_SIZE 1000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000
#define CHECK_EVERY_MS 1000
#define RECOVER_WAIT_MS 3000
#define REFILL_DEFER_MS 20
#define REFILL_DEFER_MAX_MS 100

struct pool {
	char image[64];
	sandlot_isolation_t isolation;
	char name[72];              /* health and metrics: IMAGE (ns), vm:IMAGE (vm) */
	unsigned size;              /* ready sandboxes to keep */
	sandlot_t **ready;          /* oldest first; capacity size */
	unsigned nready;
	uint64_t hits, miss_empty, miss_options;
	uint64_t failures;          /* refills that failed */
	unsigned fail_streak;
	uint64_t retry_at_ms;       /* monotonic; no refill before (backoff) */
	uint64_t defer_until_ms;    /* monotonic; no refill before (a hand-out) */
	uint64_t defer_since_ms;    /* when the current deferral began, 0 = none */
};

struct pools {
	struct daemon *d;
	pthread_mutex_t lock;       /* everything below */
	pthread_cond_t cond;        /* wakes the refill thread */
	struct pool p[MAX_POOLS];
	unsigned n;
	char (*unmark)[32];         /* ids whose marker is to be removed */
	size_t nunmark, capunmark;
	pthread_t thread;
	int started, quit;
};

/* ---- configuration ----------------------------------------------------------- */

static struct pool *find_pool(struct pools *ps, sandlot_isolation_t isolation, const char *image)
{
	for (unsigned i = 0; i < ps->n; i++)
		if (ps->p[i].isolation == isolation && strcmp(ps->p[i].image, image) == 0)
			return &ps->p[i];
	return NULL;
}

/* --pool [ns:|vm:][IMAGE=]N: the isolation prefix (image names never hold
 * a ':'), else the daemon's default isolation. */
int pool_configure(struct daemon *d, const char *arg, char *msg, size_t msglen)
{
	const char *whole = arg;
	sandlot_isolation_t isolation = d->cfg.default_isolation;
	if (strncmp(arg, "vm:", 3) == 0 || strncmp(arg, "ns:", 3) == 0) {
		isolation = arg[0] == 'v' ? SANDLOT_ISOLATION_VM : SANDLOT_ISOLATION_NS;
		arg += 3;
	}
	const char *eq = strchr(arg, '=');
	char image[64];
	const char *num = arg;
	if (eq) {
		if (eq == arg || (size_t)(eq - arg) >= sizeof(image)) {
			snprintf(msg, msglen, "invalid --pool \"%s\": expected N, IMAGE=N, vm:IMAGE=N "
				 "or ns:IMAGE=N", whole);
			return -1;
		}
		snprintf(image, sizeof(image), "%.*s", (int)(eq - arg), arg);
		num = eq + 1;
	} else {
		snprintf(image, sizeof(image), "%s", d->cfg.default_image ? d->cfg.default_image : "host");
	}
	char *end;
	errno = 0;
	unsigned long n = strtoul(num, &end, 10);
	if (!*num || *end || errno || num[0] == '-' || n > MAX_POOL_SIZE) {
		snprintf(msg, msglen, "invalid --pool \"%s\": the size must be a whole number from 0 "
			 "to %u", whole, MAX_POOL_SIZE);
		return -1;
	}
	sandlot_options_t o;
	sandlot_options_init(&o);
	o.image = image;
	o.data_dir = d->cfg.data_dir;
	o.isolation = isolation;
	sandlot_error_t *err = NULL;
	if (sandlot_options_validate(&o, &err) < 0) {
		snprintf(msg, msglen, "invalid --pool \"%s\": %s", whole, sandlot_error_message(err));
		sandlot_error_free(err);
		return -1;
	}
	if (!d->pools) {
		d->pools = calloc(1, sizeof(*d->pools));
		if (!d->pools) {
			snprintf(msg, msglen, "out of memory");
			return -1;
		}
		d->pools->d = d;
		pthread_mutex_init(&d->pools->lock, NULL);
		pthread_cond_init(&d->pools->cond, NULL);
	}
	struct pools *ps = d->pools;
	struct pool *p = find_pool(ps, isolation, image);
	if (!p) {
		if (ps->n == MAX_POOLS) {
			snprintf(msg, msglen, "at most %d pooled images", MAX_POOLS);
			return -1;
		}
		p = &ps->p[ps->n++];
		snprintf(p->image, sizeof(p->image), "%s", image);
		p->isolation = isolation;
		snprintf(p->name, sizeof(p->name), "%s%s",
			 isolation == SANDLOT_ISOLATION_VM ? "vm:" : "", image);
	}
	p->size = (unsigned)n; /* the last --pool for an image and isolation wins */
	return 0;
}

int pool_wants_vm(struct daemon *d)
{
	struct pools *ps = d->pools;
	for (unsigned i = 0; ps && i < ps->n; i++)
		if (ps->p[i].isolation == SANDLOT_ISOLATION_VM && ps->p[i].size)
			return 1;
	return 0;
}

/* The options of a pooled sandbox: exactly what domain_create_parse() in
 * sandboxes.c gives a request without fields.  Keep the two in step. */
static void pool_options(struct pools *ps, const struct pool *p, sandlot_options_t *o)
{
	sandlot_options_init(o);
	o->image = p->image;
	o->data_dir = ps->d->cfg.data_dir;
	o->isolation = p->isolation;
}

static int str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* Whether a sandbox made with `have` serves a request for `want` once
 * want->env and want's network policy are applied.  Strings compare by
 * content, everything else by bytes, so any field not named here must be
 * equal too. */
static int options_match(const sandlot_options_t *want, const sandlot_options_t *have)
{
	/* A vm sandbox has no network to turn on at hand-out (vm.c refuses
	 * networks): such a request is a cold create, which says so, rather
	 * than a pooled VM dropped for it. */
	if (have->isolation == SANDLOT_ISOLATION_VM && want->network != SANDLOT_NET_NONE)
		return 0;
	sandlot_options_t a = *want;
	a.env = have->env;
	a.network = have->network;
	a.net_allow = have->net_allow;
	a.net_deny = have->net_deny;
	if (str_eq(a.image ? a.image : "host", have->image))
		a.image = have->image;
	if (str_eq(a.hostname, have->hostname))
		a.hostname = have->hostname;
	if (str_eq(a.data_dir, have->data_dir))
		a.data_dir = have->data_dir;
	if (str_eq(a.init_path, have->init_path))
		a.init_path = have->init_path;
	return memcmp(&a, have, sizeof(a)) == 0;
}

/* ---- markers --------------------------------------------------------------------- */

static void marker_path(struct pools *ps, const char *id, char *out, size_t n)
{
	snprintf(out, n, "%s/pool/%s", ps->d->cfg.data_dir, id);
}

static void mark(struct pools *ps, const char *id)
{
	char path[4200];
	marker_path(ps, id, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		daemon_log("pool_marker", "level=warn sandbox=%s msg=\"cannot create %s: %s\"", id,
			   path, strerror(errno));
	else
		close(fd);
}

static void unmark(struct pools *ps, const char *id)
{
	char path[4200];
	marker_path(ps, id, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		daemon_log("pool_marker", "level=warn sandbox=%s msg=\"cannot remove %s: %s\"", id,
			   path, strerror(errno));
}

/* Queue the marker of a handed-out or dropped sandbox for removal by the
 * refill thread (ps->lock held).  If memory runs out, remove it now. */
static void unmark_later_locked(struct pools *ps, const char *id)
{
	if (ps->nunmark == ps->capunmark) {
		size_t cap = ps->capunmark ? ps->capunmark * 2 : 16;
		char (*n)[32] = realloc(ps->unmark, cap * sizeof(*n));
		if (!n) {
			unmark(ps, id);
			return;
		}
		ps->unmark = n;
		ps->capunmark = cap;
	}
	snprintf(ps->unmark[ps->nunmark++], sizeof(ps->unmark[0]), "%s", id);
}

/* Remove the queued markers (ps->lock held; dropped meanwhile). */
static void unmark_queued_locked(struct pools *ps)
{
	while (ps->nunmark) {
		char id[32];
		snprintf(id, sizeof(id), "%s", ps->unmark[--ps->nunmark]);
		pthread_mutex_unlock(&ps->lock);
		unmark(ps, id);
		pthread_mutex_lock(&ps->lock);
	}
}

/* Markers of a previous run that died with sandboxes in its pools: their
 * inits exited when that sandlotd's connections closed (give them a
 * moment), so remove the cgroups named after them, then the markers. */
static void recover_markers(struct pools *ps)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/pool", ps->d->cfg.data_dir);
	cleanup_closedir DIR *dd = opendir(dir);
	if (!dd)
		return;
	char (*ids)[32] = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(dd))) {
		if (strncmp(de->d_name, "sb-", 3) != 0 || strlen(de->d_name) >= sizeof(ids[0]))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			char (*m)[32] = realloc(ids, cap * sizeof(*m));
			if (!m)
				break;
			ids = m;
		}
		snprintf(ids[n++], sizeof(ids[0]), "%s", de->d_name);
	}
	if (!n) {
		free(ids);
		return;
	}
	uint64_t deadline = sandlot__now_ms() + RECOVER_WAIT_MS;
	size_t left;
	for (;;) {
		left = 0;
		for (size_t i = 0; i < n; i++)
			left += sandlot__remove_leftovers(ids[i], 0, NULL) > 0;
		if (!left || sandlot__now_ms() > deadline)
			break;
		usleep(50000);
	}
	for (size_t i = 0; i < n; i++) {
		workspace_remove(ps->d, ids[i]); /* workspace_recover() did, as a rule */
		if (sandlot__remove_leftovers(ids[i], 0, NULL) <= 0)
			unmark(ps, ids[i]);
	}
	daemon_log("pool_recover", "%smarkers=%zu cgroups_left=%zu", left ? "level=warn " : "", n,
		   left);
	free(ids);
}

/* ---- hand-out ---------------------------------------------------------------------- */

/* A hand-out postpones the refill by REFILL_DEFER_MS (ps->lock held): the
 * caller's next calls on the sandbox it just got — typically an exec at
 * once — then have the CPUs to themselves instead of sharing them with a
 * sandlot_create() (on the 2-CPU test host, a refill started at once took
 * the first exec's p50 from about 2.5 to about 4.5 ms).  Hand-outs in quick succession push it further,
 * but never more than REFILL_DEFER_MAX_MS after the first. */
static void defer_refill_locked(struct pool *p)
{
	uint64_t now = sandlot__now_ms();
	if (!p->defer_since_ms || now >= p->defer_until_ms)
		p->defer_since_ms = now;
	uint64_t until = now + REFILL_DEFER_MS;
	if (until > p->defer_since_ms + REFILL_DEFER_MAX_MS)
		until = p->defer_since_ms + REFILL_DEFER_MAX_MS;
	p->defer_until_ms = until;
}

/* Destroy a sandbox that never reached a user (not on the I/O thread). */
static void drop(struct pools *ps, sandlot_t *sb, const char *why)
{
	char id[32];
	snprintf(id, sizeof(id), "%s", sandlot_id(sb));
	sandlot_destroy(sb);
	leftovers_check_after_destroy(id);
	workspace_remove(ps->d, id);
	pthread_mutex_lock(&ps->lock);
	unmark_later_locked(ps, id);
	pthread_cond_signal(&ps->cond);
	pthread_mutex_unlock(&ps->lock);
	if (why)
		daemon_log("pool_drop", "level=warn sandbox=%s reason=\"%s\"", id, why);
}

sandlot_t *pool_take(struct daemon *d, const sandlot_options_t *opts, const char **outcome)
{
	struct pools *ps = d->pools;
	*outcome = NULL;
	if (!ps)
		return NULL;
	/* The isolation is part of the match: an ns request never gets a VM,
	 * nor a vm request a namespace sandbox. */
	struct pool *p = find_pool(ps, opts->isolation, opts->image ? opts->image : "host");
	if (!p || p->size == 0)
		return NULL;
	sandlot_options_t have;
	pool_options(ps, p, &have);
	if (!options_match(opts, &have)) {
		pthread_mutex_lock(&ps->lock);
		p->miss_options++;
		pthread_mutex_unlock(&ps->lock);
		*outcome = "options";
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&ps->lock);
		if (ps->quit || p->nready == 0) {
			p->miss_empty++;
			pthread_mutex_unlock(&ps->lock);
			*outcome = "empty";
			return NULL;
		}
		sandlot_t *sb = p->ready[0];
		memmove(p->ready, p->ready + 1, --p->nready * sizeof(*p->ready));
		defer_refill_locked(p);
		pthread_cond_signal(&ps->cond); /* refill (after the deferral) */
		pthread_mutex_unlock(&ps->lock);

		if (!sandlot_alive(sb)) {
			drop(ps, sb, "its init died while pooled");
			continue;
		}
		sandlot_error_t *err = NULL;
		sandlot_net_policy_t net = { .size = sizeof(net),
					     .mode = opts->network, .allow = opts->net_allow, .deny = opts->net_deny };
		int r = sandlot_set_env(sb, opts->env, &err);
		if (r == 0 && opts->network != SANDLOT_NET_NONE)
			r = sandlot_set_network(sb, &net, &err);
		if (r < 0) {
			/* The entries were validated: what fails here is the host
			 * (ENOMEM, the network set-up).  Give up on this one rather
			 * than hand out a wrong environment or network. */
			char why[300];
			snprintf(why, sizeof(why), "set env or network: %s", sandlot_error_message(err));
			sandlot_error_free(err);
			drop(ps, sb, why);
			pthread_mutex_lock(&ps->lock);
			p->miss_empty++;
			pthread_mutex_unlock(&ps->lock);
			*outcome = "empty";
			return NULL;
		}
		pthread_mutex_lock(&ps->lock);
		p->hits++;
		unmark_later_locked(ps, sandlot_id(sb));
		pthread_mutex_unlock(&ps->lock);
		*outcome = "hit";
		return sb;
	}
}

/* ---- refill ------------------------------------------------------------------------ */

/* The pool missing the most sandboxes and not backing off (ps->lock held);
 * NULL if none needs one now.  *wake_ms: when one will (0 = nothing). */
static struct pool *neediest_locked(struct pools *ps, uint64_t now, uint64_t *wake_ms)
{
	struct pool *best = NULL;
	unsigned best_gap = 0;
	*wake_ms = 0;
	for (unsigned i = 0; i < ps->n; i++) {
		struct pool *p = &ps->p[i];
		if (p->nready >= p->size)
			continue;
		uint64_t not_before = p->retry_at_ms > p->defer_until_ms ? p->retry_at_ms
									  : p->defer_until_ms;
		if (now < not_before) {
			if (!*wake_ms || not_before < *wake_ms)
				*wake_ms = not_before;
			continue;
		}
		if (p->size - p->nready > best_gap) {
			best = p;
			best_gap = p->size - p->nready;
		}
	}
	return best;
}

/* Make one sandbox for p (ps->lock held; dropped meanwhile). */
static void refill_one_locked(struct pools *ps, struct pool *p)
{
	sandlot_options_t o;
	pool_options(ps, p, &o);
	pthread_mutex_unlock(&ps->lock);
	/* Its own kept workspace image, like every sandbox of the daemon, so
	 * that it can be paused once handed out (workspaces.c).  The id is
	 * known before the creation, so the marker covers a crash during it. */
	char wid[32];
	if (o.isolation == SANDLOT_ISOLATION_VM) {
		/* A vm sandbox's workspace is a disk that goes with it
		 * (create_workspace() in sandboxes.c): only the id. */
		sandlot_new_id(&o, wid);
		o.id = wid;
	} else {
		workspace_assign(ps->d, &o, wid);
	}
	mark(ps, wid);
	uint64_t t0 = sandlot__now_ns();
	sandlot_error_t *err = NULL;
	sandlot_t *sb = sandlot_create(&o, &err);
	if (!sb) {
		workspace_remove(ps->d, wid);
		unmark(ps, wid);
	}
	double ms = (double)(sandlot__now_ns() - t0) / 1e6;
	pthread_mutex_lock(&ps->lock);
	if (!sb) {
		p->failures++;
		unsigned streak = p->fail_streak < 16 ? p->fail_streak : 16;
		uint64_t wait = (uint64_t)BACKOFF_MIN_MS << streak;
		if (wait > BACKOFF_MAX_MS)
			wait = BACKOFF_MAX_MS;
		p->fail_streak++;
		p->retry_at_ms = sandlot__now_ms() + wait;
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(err));
		for (char *c = msg; *c; c++)
			if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
				*c = '\'';
		sandlot_error_free(err);
		pthread_mutex_unlock(&ps->lock);
		daemon_log("pool_refill_failed", "level=warn image=%s ms=%.1f retry_ms=%llu error=\"%s\"",
			   p->name, ms, (unsigned long long)wait, msg);
		pthread_mutex_lock(&ps->lock);
		return;
	}
	p->fail_streak = 0;
	p->retry_at_ms = 0;
	if (ps->quit || p->nready >= p->size) {
		/* Stopping (pool_stop destroys only what is in ready[]). */
		pthread_mutex_unlock(&ps->lock);
		drop(ps, sb, NULL);
		pthread_mutex_lock(&ps->lock);
		return;
	}
	p->ready[p->nready++] = sb;
}

/* Drop ready sandboxes whose init died (ps->lock held; dropped meanwhile). */
static void check_alive_locked(struct pools *ps)
{
	for (unsigned i = 0; i < ps->n; i++) {
		struct pool *p = &ps->p[i];
		for (unsigned k = 0; k < p->nready;) {
			sandlot_t *sb = p->ready[k];
			if (sandlot_alive(sb)) {
				k++;
				continue;
			}
			memmove(p->ready + k, p->ready + k + 1, (p->nready - k - 1) * sizeof(*p->ready));
			p->nready--;
			pthread_mutex_unlock(&ps->lock);
			drop(ps, sb, "its init died while pooled");
			pthread_mutex_lock(&ps->lock);
			k = 0; /* the array may have changed meanwhile */
		}
	}
}

static void *refill_main(void *arg)
{
	struct pools *ps = arg;
	recover_markers(ps);
	uint64_t next_check = sandlot__now_ms() + CHECK_EVERY_MS;
	pthread_mutex_lock(&ps->lock);
	while (!ps->quit) {
		unmark_queued_locked(ps);
		uint64_t now = sandlot__now_ms(), wake;
		if (now >= next_check) {
			check_alive_locked(ps);
			next_check = now + CHECK_EVERY_MS;
			continue;
		}
		struct pool *p = neediest_locked(ps, now, &wake);
		if (p) {
			refill_one_locked(ps, p);
			continue;
		}
		if (!wake || wake > next_check)
			wake = next_check;
		/* ps->cond uses CLOCK_MONOTONIC, like sandlot__now_ms(). */
		struct timespec ts = { (time_t)(wake / 1000), (long)(wake % 1000) * 1000000L };
		pthread_cond_timedwait(&ps->cond, &ps->lock, &ts);
	}
	pthread_mutex_unlock(&ps->lock);
	return NULL;
}

int pool_start(struct daemon *d, sandlot_error_t **err)
{
	struct pools *ps = d->pools;
	if (!ps) {
		/* No pool now, but maybe markers of a previous run's that was
		 * killed: what they name is removed here, before anything
		 * starts (the refill thread does it otherwise). */
		struct pools none = { .d = d };
		recover_markers(&none);
		return 0;
	}
	/* Sizes of 0 (--pool host=0) leave no pool at all. */
	unsigned k = 0;
	for (unsigned i = 0; i < ps->n; i++)
		if (ps->p[i].size)
			ps->p[k++] = ps->p[i];
	ps->n = k;
	for (unsigned i = 0; i < ps->n; i++) {
		ps->p[i].ready = calloc(ps->p[i].size, sizeof(sandlot_t *));
		if (!ps->p[i].ready)
			return sandlot__error(err, ENOMEM, "out of memory");
	}
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/pool", d->cfg.data_dir);
	if (sandlot__mkdir_p(dir, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", dir);
	/* The refill thread waits on a monotonic clock (wall-clock jumps must
	 * not stall or rush refills). */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&ps->cond);
	pthread_cond_init(&ps->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (ps->n == 0) {
		recover_markers(ps);
		return 0;
	}
	int rc = pthread_create(&ps->thread, NULL, refill_main, ps);
	if (rc != 0)
		return sandlot__error_errno(err, rc, "start the pool's refill thread");
	ps->started = 1;
	char desc[600] = "";
	size_t len = 0;
	for (unsigned i = 0; i < ps->n && len < sizeof(desc); i++)
		len += (size_t)snprintf(desc + len, sizeof(desc) - len, "%s%s=%u", i ? "," : "",
					ps->p[i].name, ps->p[i].size);
	daemon_log("pool_started", "pools=\"%s\"", desc);
	return 0;
}

void pool_stop(struct daemon *d)
{
	struct pools *ps = d->pools;
	if (!ps)
		return;
	pthread_mutex_lock(&ps->lock);
	ps->quit = 1;
	pthread_cond_broadcast(&ps->cond);
	pthread_mutex_unlock(&ps->lock);
	if (ps->started) {
		pthread_join(ps->thread, NULL);
		ps->started = 0;
	}
	/* No refill and no hand-out from here on (pool_take sees quit). */
	size_t dropped = 0;
	uint64_t t0 = sandlot__now_ms();
	for (unsigned i = 0; i < ps->n; i++) {
		struct pool *p = &ps->p[i];
		pthread_mutex_lock(&ps->lock);
		sandlot_t **v = p->ready;
		unsigned n = p->nready;
		p->ready = NULL;
		p->nready = 0;
		pthread_mutex_unlock(&ps->lock);
		for (unsigned k = 0; k < n; k++)
			drop(ps, v[k], NULL);
		dropped += n;
		free(v);
	}
	pthread_mutex_lock(&ps->lock);
	unmark_queued_locked(ps);
	pthread_mutex_unlock(&ps->lock);
	daemon_log("pool_stopped", "destroyed=%zu ms=%llu", dropped,
		   (unsigned long long)(sandlot__now_ms() - t0));
}

void pool_free(struct daemon *d)
{
	struct pools *ps = d->pools;
	if (!ps)
		return;
	for (unsigned i = 0; i < ps->n; i++)
		free(ps->p[i].ready);
	free(ps->unmark);
	pthread_mutex_destroy(&ps->lock);
	pthread_cond_destroy(&ps->cond);
	free(ps);
	d->pools = NULL;
}

/* ---- health and metrics ------------------------------------------------------------ */

json_t *pool_health(struct daemon *d)
{
	struct pools *ps = d->pools;
	if (!ps || !ps->n)
		return NULL;
	json_t *o = json_object();
	pthread_mutex_lock(&ps->lock);
	for (unsigned i = 0; i < ps->n; i++)
		json_object_set_new(o, ps->p[i].name,
				    json_pack("{s:I, s:I}", "size", (json_int_t)ps->p[i].size, "ready",
					      (json_int_t)ps->p[i].nready));
	pthread_mutex_unlock(&ps->lock);
	return o;
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (*buf && *len + (size_t)n < *cap) {
			*len += (size_t)n;
			return;
		}
		size_t ncap = *cap ? *cap * 2 : 2048;
		while (ncap < *len + (size_t)n + 1)
			ncap *= 2;
		char *nb = realloc(*buf, ncap);
		if (!nb)
			return;
		*buf = nb;
		*cap = ncap;
	}
}

char *pool_metrics(struct daemon *d)
{
	struct pools *ps = d->pools;
	if (!ps || !ps->n)
		return NULL;
	char *b = NULL;
	size_t len = 0, cap = 0;
	pthread_mutex_lock(&ps->lock);
	append(&b, &len, &cap, "# HELP sandlot_pool_size Ready sandboxes each pool keeps (--pool).\n"
				"# TYPE sandlot_pool_size gauge\n");
	for (unsigned i = 0; i < ps->n; i++)
		append(&b, &len, &cap, "sandlot_pool_size{image=\"%s\"} %u\n", ps->p[i].name,
		       ps->p[i].size);
	append(&b, &len, &cap, "# HELP sandlot_pool_ready Sandboxes ready in the pool now.\n"
				"# TYPE sandlot_pool_ready gauge\n");
	for (unsigned i = 0; i < ps->n; i++)
		append(&b, &len, &cap, "sandlot_pool_ready{image=\"%s\"} %u\n", ps->p[i].name,
		       ps->p[i].nready);
	append(&b, &len, &cap, "# HELP sandlot_pool_hits_total Creations served from the pool.\n"
				"# TYPE sandlot_pool_hits_total counter\n");
	for (unsigned i = 0; i < ps->n; i++)
		append(&b, &len, &cap, "sandlot_pool_hits_total{image=\"%s\"} %llu\n", ps->p[i].name,
		       (unsigned long long)ps->p[i].hits);
	append(&b, &len, &cap,
	       "# HELP sandlot_pool_misses_total Creations of a pooled image made cold: the pool "
	       "was empty, or the request's options differ from the pooled sandboxes'.\n"
	       "# TYPE sandlot_pool_misses_total counter\n");
	for (unsigned i = 0; i < ps->n; i++) {
		append(&b, &len, &cap, "sandlot_pool_misses_total{image=\"%s\",reason=\"empty\"} %llu\n",
		       ps->p[i].name, (unsigned long long)ps->p[i].miss_empty);
		append(&b, &len, &cap, "sandlot_pool_misses_total{image=\"%s\",reason=\"options\"} %llu\n",
		       ps->p[i].name, (unsigned long long)ps->p[i].miss_options);
	}
	append(&b, &len, &cap, "# HELP sandlot_pool_refill_failures_total Pool refills that failed "
				"to create a sandbox.\n"
				"# TYPE sandlot_pool_refill_failures_total counter\n");
	for (unsigned i = 0; i < ps->n; i++)
		append(&b, &len, &cap, "sandlot_pool_refill_failures_total{image=\"%s\"} %llu\n",
		       ps->p[i].name, (unsigned long long)ps->p[i].failures);
	pthread_mutex_unlock(&ps->lock);
	return b;
}
