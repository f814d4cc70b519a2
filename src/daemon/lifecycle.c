/* The state machine of a sandbox, in one place: every change of a
 * sandbox's state is made here (but creation, sandboxes.c, and the
 * start-up's "lost", sandboxes.c's recovery).
 *
 *   starting → running                 domain_create (sandboxes.c)
 *   running  → paused                   domain_sandbox_pause
 *   paused   → running                  domain_sandbox_resume, or any
 *                                       domain_sandbox_get() with auto_resume
 *   running  → expired | deleted | failed   dsb_end (the reaper: ttl, idle,
 *                                       init died; DELETE; shutdown)
 *   paused   → deleted                  domain_sandbox_delete
 *   paused   → expired                  dsb_reap_paused (paused_retention)
 *   paused   → lost                     a resume that finds its workspace gone
 *
 * A pause of a paused sandbox and a resume of a running one succeed; both
 * refuse an ended one (DOMAIN_EENDED), as every call on it does.
 *
 * Transitions.  A pause sets the state to paused at once (domain_sandbox_get
 * stops handing the sandbox out; the registry says paused, so even a kill
 * -9 in the middle leaves a paused sandbox) and s->transition until the old
 * handle is destroyed and the workspace flushed (dsb_destroyed); a resume
 * keeps the state paused and sets s->transition until the new handle is in
 * place.  Anyone who needs a settled state (auto-resume, DELETE, another
 * pause or resume, a from_snapshot copy) waits on s->cond for transition
 * to drop (dsb_settle_locked); a resume also waits for s->copying
 * (from_snapshot copies of its workspace, workspaces.c) to drop.
 * Underneath, libsandlot's lock on the workspace makes sure that two
 * sandboxes never use it at once, whatever the daemon does.
 *
 * Ending.  dsb_end() first stops new borrowers (the state changes under
 * s->lock), kills the sandbox's init — so every library call still running
 * on it fails promptly with EPIPE — and destroys the handle only once busy
 * has dropped to 0 (dsb_stop); if that takes longer than END_WAIT_MS, the
 * destroy is left to the reaper thread (sandboxes.c).
 *
 * Teardown in the background.  Once its state has changed and its init has
 * been killed, an ended sandbox is gone from the API's view: what is left
 * is waiting for its processes to die and freeing what they held (cgroup,
 * workspace, uid range, network namespace), a few milliseconds of work
 * that nobody needs to wait for.  So while sandlotd is busy (creations or
 * other teardowns in progress) dsb_end() hands that part to the teardown
 * threads (at most TEARDOWN_THREADS) and returns: a DELETE answers 204
 * without it, and under a burst of creates and deletes it no longer
 * competes with every create for the CPU.  An otherwise idle sandlotd
 * tears down in the caller, as before: a DELETE then answers with the host
 * already clean.  The queue is bounded (TEARDOWN_BACKLOG): past that, and
 * while sandlotd stops, the caller tears down itself too.  A creation that
 * fails for want of what a pending teardown still holds (a uid range, disk
 * reservations) waits for the queue and tries once more
 * (dsb_teardowns_wait); sandboxes_shutdown() waits for every queued
 * teardown (dsb_teardowns_drain), so nothing outlives the daemon's stop.
 * A teardown thread never waits for borrowers: a sandbox still busy is left
 * to the reaper (destroy_pending), which its last borrower wakes.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "core/private.h"
#include "daemon/archives.h"
#include "daemon/daemon.h"
#include "core/teardown.h"
#include "daemon/domain.h"
#include "daemon/node.h"

/* Provided by execs.c; weak so the daemon links while it is a placeholder. */
#pragma weak execs_release

#define END_WAIT_MS 5000
#define TEARDOWN_THREADS 2
#define TEARDOWN_BACKLOG 1024
#define SETTLE_WAIT_MS 30000 /* longest wait for a pause or resume in progress */

/* ---- errors and lookups ------------------------------------------------------ */

static int wake(struct daemon *d, struct dsb *s, sandlot_error_t **err);

/* DOMAIN_EENDED with the state and the reason (s->lock held). */
static int error_ended_locked(struct dsb *s, sandlot_error_t **err)
{
	if (archive_moved_reason(s->id, s->end_reason, err)) /* 410 sandbox_moved */
		return -1;
	sandlot__error(err, DOMAIN_EENDED, "sandbox %s has ended: %s (%s)", s->id,
		       dsb_state_name(s->state), s->end_reason ? s->end_reason : "no reason recorded");
	sandlot__error_detail(err, "state", dsb_state_name(s->state));
	sandlot__error_detail(err, "end_reason", s->end_reason);
	return -1;
}

int domain_error_ended(struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	error_ended_locked(s, err);
	pthread_mutex_unlock(&s->lock);
	return -1;
}

struct dsb *domain_sandbox_get(struct daemon *d, const char *id, sandlot_error_t **err)
{
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return NULL;
	pthread_mutex_lock(&s->lock);
	if (s->state == DSB_PAUSED) {
		/* Resumed here when it has auto_resume. */
		pthread_mutex_unlock(&s->lock);
		if (wake(d, s, err) < 0) {
			dsb_release(d, s);
			return NULL;
		}
		pthread_mutex_lock(&s->lock);
	}
	if (s->state != DSB_RUNNING || !s->sb) {
		error_ended_locked(s, err);
		pthread_mutex_unlock(&s->lock);
		dsb_release(d, s);
		return NULL;
	}
	s->busy++;
	s->last_active_ms = daemon_now_ms();
	int setting_up = s->setting_up;
	pthread_mutex_unlock(&s->lock);
	if (setting_up && dsb_setup_wait(d, s, err) < 0) {
		dsb_release(d, s); /* (its busy reference went with the failure) */
		return NULL;
	}
	return s;
}

sandlot_t *domain_sandbox_handle(struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->state == DSB_RUNNING ? s->sb : NULL;
	if (!sb)
		error_ended_locked(s, err);
	pthread_mutex_unlock(&s->lock);
	return sb;
}

/* ---- set-up --------------------------------------------------------------------- */

int dsb_setup_wait(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->setting_up && s->state == DSB_RUNNING ? s->sb : NULL;
	pthread_mutex_unlock(&s->lock);
	if (!sb)
		return 0;
	sandlot_error_t *e = NULL;
	if (sandlot_wait_ready(sb, &e) == 0) {
		pthread_mutex_lock(&s->lock);
		if (s->sb == sb)
			s->setting_up = 0;
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	/* setting_up stays: a request that comes before the state has changed
	 * below gets the same (remembered) answer and ends up here too. */
	char reason[600];
	snprintf(reason, sizeof(reason), "failed: %s", sandlot_error_message(e));
	sandlot_error_free(e);
	dsb_busy(s, -1);
	dsb_end(d, s, DSB_FAILED, reason); /* a no-op if it ended meanwhile */
	return domain_error_ended(s, err);
}

/* The set-up sweep (dsb_setup_sweep_add): oldest first, linked through
 * s->setup_next, each holding a reference.  Not sooner than
 * SETUP_SWEEP_MS: a create is usually followed by a request at once, and
 * that request's wait is the one on the critical path (the sweep would
 * only compete with it for the CPU). */
#define SETUP_SWEEP_MS 20
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct dsb *head, *tail;
	struct daemon *d;
	int started, closed;
	pthread_t thread;
} sweep = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

/* Wait for the set-up of s, if nobody did and it still runs. */
static void sweep_one(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	int wait = s->setting_up && s->state == DSB_RUNNING && s->sb;
	if (wait)
		s->busy++; /* not an API call: last_active_ms stays */
	pthread_mutex_unlock(&s->lock);
	if (wait && dsb_setup_wait(d, s, NULL) == 0)
		dsb_busy(s, -1);
}

static void *sweep_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sweep.lock);
	while (!sweep.closed) {
		struct dsb *s = sweep.head;
		if (!s) {
			pthread_cond_wait(&sweep.cond, &sweep.lock);
			continue;
		}
		uint64_t now = sandlot__now_ms();
		if (now < s->setup_due_ms) {
			struct timespec dl;
			sandlot__deadline_in(&dl, CLOCK_REALTIME, (unsigned)(s->setup_due_ms - now));
			pthread_cond_timedwait(&sweep.cond, &sweep.lock, &dl);
			continue;
		}
		sweep.head = s->setup_next;
		if (!sweep.head)
			sweep.tail = NULL;
		s->setup_next = NULL;
		pthread_mutex_unlock(&sweep.lock);
		sweep_one(sweep.d, s);
		dsb_release(sweep.d, s);
		pthread_mutex_lock(&sweep.lock);
	}
	pthread_mutex_unlock(&sweep.lock);
	return NULL;
}

void dsb_setup_sweep_add(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&sweep.lock);
	if (sweep.closed) {
		pthread_mutex_unlock(&sweep.lock);
		return;
	}
	if (!sweep.started) {
		sweep.d = d;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 256 << 10);
		sweep.started = pthread_create(&sweep.thread, &a, sweep_main, NULL) == 0;
		pthread_attr_destroy(&a);
		if (!sweep.started) {
			/* The first request (or the reaper, should init die)
			 * still learns the outcome; only the handles stay
			 * longer. */
			pthread_mutex_unlock(&sweep.lock);
			return;
		}
	}
	dsb_hold(s);
	s->setup_due_ms = sandlot__now_ms() + SETUP_SWEEP_MS;
	s->setup_next = NULL;
	if (sweep.tail)
		sweep.tail->setup_next = s;
	else
		sweep.head = s;
	sweep.tail = s;
	if (sweep.head == s)
		pthread_cond_signal(&sweep.cond);
	pthread_mutex_unlock(&sweep.lock);
}

void dsb_setup_sweep_stop(void)
{
	pthread_mutex_lock(&sweep.lock);
	sweep.closed = 1;
	pthread_cond_broadcast(&sweep.cond);
	int started = sweep.started;
	sweep.started = 0;
	pthread_mutex_unlock(&sweep.lock);
	if (started)
		pthread_join(sweep.thread, NULL);
	/* Nothing is added once closed: the rest is ours. */
	struct dsb *s = sweep.head;
	sweep.head = sweep.tail = NULL;
	while (s) {
		struct dsb *next = s->setup_next;
		s->setup_next = NULL;
		dsb_release(sweep.d, s);
		s = next;
	}
}

/* ---- ending ------------------------------------------------------------------ */

static void stop_begin(struct dsb *s, sandlot_t *stop);
static void stop_finish(struct daemon *d, struct dsb *s, unsigned wait_ms);

/* The teardown queue: ended sandboxes whose stop_finish() is still to run,
 * oldest first, linked through s->teardown_next (each holds a reference),
 * served by up to TEARDOWN_THREADS threads made on demand.  `closed` once
 * dsb_teardowns_drain() has begun: nothing more is queued. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	struct dsb *head, *tail;
	unsigned queued, active, nthreads;
	int closed;
	pthread_t threads[TEARDOWN_THREADS];
} td = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.idle = PTHREAD_COND_INITIALIZER,
};

static void *teardown_main(void *arg)
{
	struct daemon *d = arg;
	pthread_mutex_lock(&td.lock);
	for (;;) {
		while (!td.head && !td.closed)
			pthread_cond_wait(&td.work, &td.lock);
		struct dsb *s = td.head;
		if (!s)
			break; /* closed, and nothing left */
		td.head = s->teardown_next;
		if (!td.head)
			td.tail = NULL;
		s->teardown_next = NULL;
		td.queued--;
		td.active++;
		pthread_mutex_unlock(&td.lock);
		stop_finish(d, s, 0);
		dsb_release(d, s);
		pthread_mutex_lock(&td.lock);
		td.active--;
		if (!td.head && !td.active)
			pthread_cond_broadcast(&td.idle);
	}
	pthread_mutex_unlock(&td.lock);
	return NULL;
}

/* Queue s's stop_finish() for a teardown thread: 1, or 0 when the caller
 * must do it: sandlotd is otherwise idle (no creation and no other
 * teardown in progress: then finishing it here costs the caller a
 * millisecond or two, and the host is clean when the answer goes), the
 * queue is closed or full, or no thread can run it. */
static int teardown_submit(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&d->lock);
	unsigned creating = d->ncreating;
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_lock(&td.lock);
	if (td.closed || td.queued >= TEARDOWN_BACKLOG ||
	    (creating == 0 && td.queued + td.active == 0)) {
		pthread_mutex_unlock(&td.lock);
		return 0;
	}
	/* A thread more while the queue holds more than the busy ones can
	 * take: one teardown waiting for a slow kill does not hold up the
	 * next. */
	if (td.nthreads < TEARDOWN_THREADS && td.queued + td.active >= td.nthreads) {
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if (pthread_create(&td.threads[td.nthreads], NULL, teardown_main, d) == 0)
			td.nthreads++;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (td.nthreads == 0) {
		pthread_mutex_unlock(&td.lock);
		return 0;
	}
	dsb_hold(s);
	s->teardown_next = NULL;
	if (td.tail)
		td.tail->teardown_next = s;
	else
		td.head = s;
	td.tail = s;
	td.queued++;
	pthread_cond_signal(&td.work);
	pthread_mutex_unlock(&td.lock);
	return 1;
}

int dsb_teardowns_wait(unsigned timeout_ms)
{
	struct timespec dl;
	sandlot__deadline_in(&dl, CLOCK_REALTIME, timeout_ms);
	pthread_mutex_lock(&td.lock);
	int waited = td.head || td.active;
	while (td.head || td.active)
		if (pthread_cond_timedwait(&td.idle, &td.lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&td.lock);
	return waited;
}

unsigned dsb_teardowns_pending(void)
{
	pthread_mutex_lock(&td.lock);
	unsigned n = td.queued + td.active;
	pthread_mutex_unlock(&td.lock);
	return n;
}

void dsb_teardowns_drain(void)
{
	pthread_mutex_lock(&td.lock);
	td.closed = 1;
	pthread_cond_broadcast(&td.work);
	unsigned n = td.nthreads;
	pthread_mutex_unlock(&td.lock);
	/* The threads leave once the queue is empty. */
	for (unsigned i = 0; i < n; i++)
		pthread_join(td.threads[i], NULL);
	pthread_mutex_lock(&td.lock);
	td.nthreads = 0;
	pthread_mutex_unlock(&td.lock);
}

static const char *end_event(enum dsb_state st)
{
	switch (st) {
	case DSB_EXPIRED: return "expired";
	case DSB_DELETED: return "deleted";
	case DSB_LOST: return "lost";
	case DSB_FAILED: return "failed";
	default: return "ended";
	}
}

void dsb_end(struct daemon *d, struct dsb *s, enum dsb_state state, const char *reason)
{
	pthread_mutex_lock(&s->lock);
	if (!dsb_state_live(s->state)) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->state = state;
	s->ended_ms = daemon_now_ms();
	free(s->end_reason);
	s->end_reason = strdup(reason ? reason : end_event(state));
	/* Expiry is what agent frameworks recover from (from_snapshot): its
	 * workspace is kept; an explicit DELETE, a failure or a lost sandbox
	 * keeps nothing. */
	s->workspace_kept = s->has_workspace && state == DSB_EXPIRED;
	sandlot_t *sb = s->sb;
	int64_t lived = s->ended_ms - s->created_ms;
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);

	__atomic_sub_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&d->m.sandboxes_ended, 1, __ATOMIC_RELAXED);
	char why[256];
	snprintf(why, sizeof(why), "%s", reason ? reason : "");
	daemon_log_quote(why);
	daemon_log(end_event(state), "%ssandbox=%s reason=\"%s\" lived_ms=%lld",
		   state == DSB_FAILED ? "level=warn " : "", s->id, why, (long long)lived);
	stop_begin(s, sb);
	if (!teardown_submit(d, s))
		stop_finish(d, s, END_WAIT_MS);
	/* Ended for good: its changes log goes now, not when it is forgotten
	 * an hour later (its memory, its share of the budget, its rows). */
	dsb_changes_release(d, s);
}

/* dsb_stop()'s first half: its exec streams and ports closed, its init
 * killed.  Borrowers may still be in calls on it: they end as killed. */
static void stop_begin(struct dsb *s, sandlot_t *stop)
{
	ports_close(s);
	if (execs_release)
		execs_release(s);
	if (stop)
		sandlot__stop(stop);
}

void dsb_stop(struct daemon *d, struct dsb *s, sandlot_t *stop)
{
	stop_begin(s, stop);
	stop_finish(d, s, END_WAIT_MS);
}

/* dsb_stop()'s second half: wait up to wait_ms for the borrowers to let
 * go, then destroy the handle and free what it held (dsb_destroyed); if a
 * borrower still holds it then, leave the destroy to the reaper. */
static void stop_finish(struct daemon *d, struct dsb *s, unsigned wait_ms)
{
	struct timespec dl;
	sandlot__deadline_in(&dl, CLOCK_REALTIME, wait_ms);
	pthread_mutex_lock(&s->lock);
	while (s->busy > 0 && wait_ms > 0) {
		if (pthread_cond_timedwait(&s->cond, &s->lock, &dl) == ETIMEDOUT)
			break;
	}
	if (s->busy > 0) {
		/* Its last dsb_put() wakes the reaper (busy_down_locked). */
		s->destroy_pending = 1;
		int busy = s->busy;
		pthread_mutex_unlock(&s->lock);
		if (wait_ms > 0)
			daemon_log("destroy_deferred", "level=warn sandbox=%s busy=%d", s->id, busy);
		return;
	}
	sandlot_t *sb = s->sb;
	pthread_mutex_unlock(&s->lock);
	/* Destroy before clearing s->sb: the reaper's liveness check uses sb
	 * only while s is running, which it no longer is. */
	sandlot_destroy(sb);
	pthread_mutex_lock(&s->lock);
	s->sb = NULL;
	pthread_mutex_unlock(&s->lock);
	leftovers_check_after_destroy(s->id);
	dsb_destroyed(d, s);
}


/* ---- settling ----------------------------------------------------------------- */

int dsb_settle_locked(struct dsb *s, int copies)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += SETTLE_WAIT_MS / 1000;
	while (s->transition || (copies && s->copying))
		if (pthread_cond_timedwait(&s->cond, &s->lock, &dl) == ETIMEDOUT)
			return s->transition || (copies && s->copying) ? -1 : 0;
	return 0;
}

/* ---- pause ------------------------------------------------------------------------ */

/* Pause s (flags: SANDLOT_PAUSE_*).  0 when it is paused (now or
 * already), -1 with err. */
static int do_pause(struct daemon *d, struct dsb *s, unsigned flags, sandlot_error_t **err)
{
	/* Not in the middle of its set-up: init pauses only once it serves. */
	dsb_busy(s, +1);
	if (dsb_setup_wait(d, s, err) < 0)
		return -1;
	dsb_busy(s, -1);
	pthread_mutex_lock(&s->lock);
	if (dsb_settle_locked(s, 0) < 0) {
		pthread_mutex_unlock(&s->lock);
		return sandlot__error(err, EBUSY, "a pause or resume of sandbox %s is still in progress",
				      s->id);
	}
	if (s->state == DSB_PAUSED) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	if (s->state != DSB_RUNNING) {
		pthread_mutex_unlock(&s->lock);
		return domain_error_ended(s, err);
	}
	if (!s->has_workspace) {
		pthread_mutex_unlock(&s->lock);
		return sandlot__error(err, EBUSY,
				      "sandbox %s has no kept workspace (it was made without one), so it "
				      "cannot be paused", s->id);
	}
	daemon_fault("pause-before-registry");
	uint64_t t0 = sandlot__now_ns();
	s->state = DSB_PAUSED;
	s->transition = 1;
	s->paused_ms = daemon_now_ms();
	s->workspace_kept = 1;
	sandlot_t *sb = s->sb;
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	daemon_fault("pause-after-registry");
	/* The backend keeps what a resume needs (for ns sandboxes: the files,
	 * made durable) and ends the sandbox's processes; commands in flight
	 * end as killed. */
	sandlot_error_t *e = NULL;
	if (sb && sandlot_pause(sb, flags, &e) < 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(e));
		daemon_log_quote(msg);
		if (sandlot_alive(sb)) {
			/* Refused, nothing done: it runs on as it was. */
			pthread_mutex_lock(&s->lock);
			s->state = DSB_RUNNING;
			s->transition = 0;
			s->paused_ms = 0;
			s->workspace_kept = 0;
			registry_save(d, s);
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
			daemon_log("pause_failed", "level=warn sandbox=%s error=\"%s\"", s->id, msg);
			if (err)
				*err = e;
			else
				sandlot_error_free(e);
			return -1;
		}
		/* Ended: paused with what reached the disk. */
		daemon_log("pause_incomplete", "level=warn sandbox=%s error=\"%s\"", s->id, msg);
		sandlot_error_free(e);
	}
	__atomic_sub_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
	/* Stops its exec streams and ports, destroys the handle (or leaves
	 * that to the reaper while a request still holds it), then
	 * dsb_destroyed() ends the transition. */
	dsb_stop(d, s, sb);
	daemon_log("paused", "sandbox=%s ms=%.1f", s->id, (double)(sandlot__now_ns() - t0) / 1e6);
	return 0;
}

void dsb_destroyed(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	enum dsb_state st = s->state;
	pthread_mutex_unlock(&s->lock);
	workspace_destroyed(d, s);
	pthread_mutex_lock(&s->lock);
	if (s->transition && st == DSB_PAUSED)
		s->transition = 0; /* the pause is complete */
	/* Also wakes from_snapshot copies waiting for the teardown. */
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* ---- resume ------------------------------------------------------------------------ */

/* The sandlot options a sandbox was created with, from its normalised JSON
 * (sandboxes.c, domain_create_parse): image, memory, cpus, pids, disk, env.  *env
 * receives the "K=V" strings to free with free_env(). */
static int options_from_json(struct daemon *d, json_t *j, sandlot_options_t *o, char ***env)
{
	sandlot_options_init(o);
	o->data_dir = d->cfg.data_dir;
	*env = NULL;
	json_t *v;
	if ((v = json_object_get(j, "image")) && json_is_string(v))
		o->image = json_string_value(v);
	if ((v = json_object_get(j, "memory")) && json_is_integer(v))
		o->memory_bytes = (uint64_t)json_integer_value(v);
	if ((v = json_object_get(j, "cpus")) && json_is_number(v))
		o->cpus_milli = (uint32_t)(json_number_value(v) * 1000.0 + 0.5);
	if ((v = json_object_get(j, "pids")) && json_is_integer(v))
		o->pids = (uint32_t)json_integer_value(v);
	if ((v = json_object_get(j, "disk")) && json_is_integer(v))
		o->disk_bytes = (uint64_t)json_integer_value(v);
	if ((v = json_object_get(j, "isolation")) && json_is_string(v))
		o->isolation = strcmp(json_string_value(v), "vm") == 0 ? SANDLOT_ISOLATION_VM
								       : SANDLOT_ISOLATION_NS;
	json_t *e = json_object_get(j, "env");
	if (json_is_object(e) && json_object_size(e) > 0) {
		char **kv = calloc(json_object_size(e) + 1, sizeof(char *));
		if (!kv)
			return -1;
		size_t n = 0;
		const char *k;
		json_t *ev;
		json_object_foreach(e, k, ev) {
			if (!json_is_string(ev))
				continue;
			size_t len = strlen(k) + json_string_length(ev) + 2;
			if (!(kv[n] = malloc(len)))
				break;
			snprintf(kv[n++], len, "%s=%s", k, json_string_value(ev));
		}
		*env = kv;
		o->env = (const char *const *)kv;
	}
	return 0;
}

static void free_env(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

/* The error of a resume whose sandlot_create() failed with e (taken):
 * capacity (EAGAIN), disk (ENOSPC, EDQUOT) and a workspace in use (EBUSY)
 * keep their status; anything else is the daemon's failure (EIO). */
static int create_error(sandlot_error_t *e, sandlot_error_t **err)
{
	int st = sandlot_error_status(e);
	if (st != EAGAIN && st != ENOSPC && st != EDQUOT && st != EBUSY)
		sandlot__error(err, EIO, "%s", sandlot_error_message(e));
	else if (err)
		*err = e, e = NULL;
	sandlot_error_free(e);
	return -1;
}

/* Resume s (ttl: a new ttl_seconds, or NULL to keep its own).  0 when it
 * runs (now or already), -1 with err; on failure it stays paused. */
static int do_resume(struct daemon *d, struct dsb *s, const uint32_t *ttl, sandlot_error_t **err)
{
	/* Settle, then claim the transition and a creation slot together
	 * (lock order d->lock → s->lock). */
	for (;;) {
		pthread_mutex_lock(&s->lock);
		if (dsb_settle_locked(s, 1) < 0) {
			pthread_mutex_unlock(&s->lock);
			return sandlot__error(err, EBUSY,
					      "a pause, resume or snapshot copy of sandbox %s is still in "
					      "progress", s->id);
		}
		enum dsb_state st = s->state;
		if (st == DSB_RUNNING && ttl) {
			s->ttl_seconds = *ttl;
			s->expires_ms = *ttl ? daemon_now_ms() + (int64_t)*ttl * 1000 : 0;
			registry_save(d, s);
		}
		pthread_mutex_unlock(&s->lock);
		if (st == DSB_RUNNING)
			return 0;
		if (st != DSB_PAUSED)
			return domain_error_ended(s, err);
		pthread_mutex_lock(&d->lock);
		unsigned live = __atomic_load_n(&d->nrunning, __ATOMIC_SEQ_CST) + d->ncreating;
		if (d->stopping) {
			pthread_mutex_unlock(&d->lock);
			return sandlot__error(err, ESHUTDOWN, "sandlotd is shutting down");
		}
		if (node_resume_admit_locked(d, s, live, err) < 0) {
			pthread_mutex_unlock(&d->lock);
			return -1;
		}
		pthread_mutex_lock(&s->lock);
		int ok = s->state == DSB_PAUSED && !s->transition && !s->copying;
		if (ok) {
			s->transition = 1;
			d->ncreating++;
		}
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_unlock(&d->lock);
		if (ok)
			break;
	}
	/* An archived sandbox runs only where the store says it lives
	 * (archives.c): a stale copy is deleted here, never resumed.  Checked
	 * (and claimed in the store) with the transition held, so that no
	 * archive of it can run in between. */
	if (archive_fence_check(d, s, err) < 0) {
		pthread_mutex_lock(&d->lock);
		d->ncreating--;
		pthread_mutex_lock(&s->lock);
		s->transition = 0;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		pthread_mutex_unlock(&d->lock);
		return -1;
	}

	uint64_t t0 = sandlot__now_ns();
	sandlot_options_t opts;
	char **env = NULL;
	struct network_req net = { 0 };
	sandlot_t *sb = NULL;
	sandlot_error_t *e = NULL;
	int gone = !workspace_exists(d, s->id);
	pthread_mutex_lock(&s->lock);
	int rc = gone ? 0 : options_from_json(d, s->options, &opts, &env);
	/* The network policy it had when paused (PUT .../network included). */
	if (!gone && rc == 0)
		rc = network_from_json(s->options, &opts, &net);
	pthread_mutex_unlock(&s->lock);
	if (gone) {
		/* Never on a fresh workspace: that would look like a resume and
		 * have lost every file.  (The error comes below, once it is lost.) */
	} else if (rc < 0) {
		sandlot__error(err, ENOMEM, "out of memory");
	} else {
		opts.id = s->id;
		opts.workspace = s->id;
		opts.disk_overcommit = d->cfg.disk_overcommit;
		sb = sandlot_resume(&opts, &e);
		if (!sb)
			create_error(e, err);
		e = NULL;
	}
	free_env(env);
	network_req_free(&net);

	/* Publish under d->lock, as the create route does, so that a shutdown
	 * either sees it running (and ends it) or we see the shutdown. */
	int64_t now = daemon_now_ms();
	pthread_mutex_lock(&d->lock);
	d->ncreating--;
	int stopping = d->stopping;
	pthread_mutex_lock(&s->lock);
	if (sb && !stopping) {
		__atomic_add_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
		s->sb = sb;
		s->setting_up = 0; /* resumed: ready when sandlot_resume() returned */
		s->state = DSB_RUNNING;
		s->paused_ms = 0;
		s->workspace_kept = 0;
		s->last_active_ms = now;
		if (ttl)
			s->ttl_seconds = *ttl;
		s->expires_ms = s->ttl_seconds ? now + (int64_t)s->ttl_seconds * 1000 : 0;
	} else if (gone) {
		s->state = DSB_LOST;
		s->ended_ms = now;
		s->workspace_kept = 0;
		free(s->end_reason);
		s->end_reason = strdup("lost: its workspace is gone");
	}
	s->transition = 0;
	pthread_cond_broadcast(&s->cond);
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&d->lock);

	double ms = (double)(sandlot__now_ns() - t0) / 1e6;
	if (sb && stopping) {
		/* Never handed out: back to paused as it was. */
		sandlot_destroy(sb);
		leftovers_check_after_destroy(s->id);
		workspace_flush(d, s->id);
		return sandlot__error(err, ESHUTDOWN, "sandlotd is shutting down");
	}
	if (!sb) {
		if (gone)
			domain_error_ended(s, err);
		char msg[600];
		snprintf(msg, sizeof(msg), "%s",
			 gone ? "its workspace is gone" : err && *err ? sandlot_error_message(*err) : "?");
		for (char *c = msg; *c; c++)
			if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
				*c = '\'';
		daemon_log("resume_failed", "level=warn sandbox=%s ms=%.1f error=\"%s\"", s->id, ms, msg);
		return -1;
	}
	daemon_log("resumed", "sandbox=%s ms=%.1f init_pid=%d", s->id, ms, (int)sandlot__init_pid(sb));
	/* Its exposed ports listen again (the same host ports when free). */
	if (ports_open(s, &e) < 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(e));
		daemon_log_quote(msg);
		daemon_log("ports_failed", "level=warn sandbox=%s error=\"%s\"", s->id, msg);
		sandlot_error_free(e);
	}
	return 0;
}

/* domain_sandbox_get() found s paused: resume it if it has auto_resume
 * (after any pause or resume in progress), else DOMAIN_EPAUSED.  0 when
 * the caller may go on (s running again), -1 with err. */
static int wake(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	int auto_resume = s->auto_resume;
	if (!auto_resume && s->state == DSB_PAUSED) {
		sandlot__error(err, DOMAIN_EPAUSED,
			       "sandbox %s is paused: POST /v1/sandboxes/%s/resume first (or create "
			       "sandboxes with \"auto_resume\": true)", s->id, s->id);
		sandlot__error_detail(err, "state", "paused");
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	pthread_mutex_unlock(&s->lock);
	if (!auto_resume)
		return 0; /* resumed meanwhile: the caller looks again */
	return do_resume(d, s, NULL, err);
}

/* ---- pause and resume by id --------------------------------------------------------- */

json_t *domain_sandbox_pause(struct daemon *d, const char *id, sandlot_error_t **err)
{
	return domain_sandbox_pause_with(d, id, 0, err);
}

json_t *domain_sandbox_pause_with(struct daemon *d, const char *id, unsigned flags,
				  sandlot_error_t **err)
{
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return NULL;
	json_t *o = do_pause(d, s, flags, err) < 0 ? NULL : dsb_to_json(s);
	dsb_release(d, s);
	return o;
}

json_t *domain_sandbox_resume(struct daemon *d, const char *id, const uint32_t *ttl,
			      sandlot_error_t **err)
{
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return NULL;
	json_t *o = do_resume(d, s, ttl, err) < 0 ? NULL : dsb_to_json(s);
	dsb_release(d, s);
	return o;
}


/* ---- delete and retention ------------------------------------------------------- */

/* Delete s when it is not running: a paused one is deleted, an ended one
 * loses its kept workspace (0); otherwise -1 with DOMAIN_EENDED (EBUSY
 * while a pause or resume is in progress). */
static int delete_stopped(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	if (dsb_settle_locked(s, 0) < 0) {
		pthread_mutex_unlock(&s->lock);
		return sandlot__error(err, EBUSY, "a pause or resume of sandbox %s is still in progress",
				      s->id);
	}
	if (s->state == DSB_RUNNING) { /* a resume finished meanwhile */
		pthread_mutex_unlock(&s->lock);
		dsb_end(d, s, DSB_DELETED, "deleted");
		return 0;
	}
	if (s->state == DSB_PAUSED) {
		s->state = DSB_DELETED;
		s->ended_ms = daemon_now_ms();
		s->workspace_kept = 0;
		free(s->end_reason);
		s->end_reason = strdup("deleted");
		registry_save(d, s);
		pthread_mutex_unlock(&s->lock);
		__atomic_add_fetch(&d->m.sandboxes_ended, 1, __ATOMIC_RELAXED);
		daemon_log("deleted", "sandbox=%s reason=\"deleted\" paused=1", s->id);
		dsb_changes_release(d, s);
		workspace_remove(d, s->id);
		return 0;
	}
	if (s->workspace_kept) {
		s->workspace_kept = 0;
		registry_save(d, s);
		pthread_mutex_unlock(&s->lock);
		workspace_remove(d, s->id);
		return 0;
	}
	pthread_mutex_unlock(&s->lock);
	return domain_error_ended(s, err);
}

int domain_sandbox_delete(struct daemon *d, const char *id, sandlot_error_t **err)
{
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return -1;
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	if (!dsb_state_live(s->state)) {
		/* Paused, or ended with its workspace kept. */
		pthread_mutex_unlock(&s->lock);
		rc = delete_stopped(d, s, err);
	} else {
		pthread_mutex_unlock(&s->lock);
		dsb_end(d, s, DSB_DELETED, "deleted");
	}
	dsb_release(d, s);
	return rc;
}


void dsb_reap_paused(struct daemon *d, struct dsb *s, int64_t now)
{
	pthread_mutex_lock(&s->lock);
	int64_t keep = (int64_t)s->paused_retention_seconds * 1000;
	if (s->state != DSB_PAUSED || s->transition || s->copying || !keep || !s->workspace_kept ||
	    now < s->paused_ms + keep) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->state = DSB_EXPIRED;
	s->ended_ms = now;
	s->workspace_kept = 0;
	free(s->end_reason);
	s->end_reason = strdup("paused_retention");
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	__atomic_add_fetch(&d->m.sandboxes_ended, 1, __ATOMIC_RELAXED);
	daemon_log("expired", "sandbox=%s reason=\"paused_retention\"", s->id);
	dsb_changes_release(d, s);
	workspace_remove(d, s->id);
}
