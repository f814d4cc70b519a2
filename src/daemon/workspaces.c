/* Kept workspaces: pause, resume, snapshots, and how long they are kept.
 *
 * Every sandbox the daemon creates keeps /home/user and /tmp in a kept
 * workspace of libsandlot's storage pool named by its id
 * (<data-dir>/storage/mnt/kept/<id>: a directory under a quota, owners
 * stored as sandbox uids and shown through an idmapped mount, so any later
 * sandbox, whatever its host uid range, can use it).  While the sandbox
 * runs this costs nothing more than an ephemeral workspace, and it is what
 * the routes below build on:
 *
 *   pause     POST .../pause: the sandbox's processes are killed and its
 *             sandlot_t destroyed (memory, cgroup, uid range: all freed);
 *             the workspace is flushed (syncfs of the pool) and stays.
 *             State "paused".  A paused sandbox counts toward nothing but
 *             disk: not --max-sandboxes, and no TTL or idle timeout runs.
 *   resume    POST .../resume, or any call that goes through dsb_get()
 *             (exec, files, code, changes, keepalive) on a sandbox created
 *             with auto_resume: a new sandlot_t with the same id and options
 *             on the same workspace.  Files come back byte for byte;
 *             processes, interpreter state and the exec history do not.  The
 *             TTL starts again at the resume (or is set anew by its body).
 *   retention A paused sandbox is kept paused_retention_seconds (default
 *             --paused-retention, 7 days; 0 = for good); then it expires
 *             with reason "paused_retention" and its workspace goes.  A
 *             sandbox that expires (TTL, idle) keeps its workspace just as
 *             long (workspace_kept), so that POST /v1/sandboxes with
 *             "from_snapshot" can still bring its files back in a new
 *             sandbox (a snapshot of it: no copy): the way agent frameworks
 *             re-create an expired container.  DELETE removes a kept
 *             workspace at once; deleted, failed and lost sandboxes keep none.
 *   restarts  Paused sandboxes and kept workspaces survive sandlotd restarts,
 *             clean or kill -9: the registry has them and the pool has their
 *             files (a clean stop still deletes the *running* ones, as
 *             before).  At start-up workspaces that nothing owns any more are
 *             removed, and images of the former layout
 *             (<data-dir>/workspaces/<id>.img, an ext4 image per sandbox)
 *             are brought into the pool and deleted.
 *
 * Transitions.  A pause sets the state to paused at once (dsb_get stops
 * handing the sandbox out; the registry says paused, so even a kill -9 in
 * the middle leaves a paused sandbox) and s->transition until the old
 * handle is destroyed and the workspace flushed; a resume keeps the state
 * paused and sets s->transition until the new handle is in place.  Anyone
 * who needs a settled state (auto-resume, DELETE, another pause or resume,
 * a from_snapshot copy) waits on s->cond for transition to drop; a resume
 * also waits for s->copying (from_snapshot copies of its workspace) to
 * drop.  Underneath, libsandlot's lock on the workspace makes sure that two
 * sandboxes never use it at once, whatever the daemon does.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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
#include "daemon/domain.h"
#include "linux/cgroup.h"

#define SETTLE_WAIT_MS 30000 /* longest wait for a pause or resume in progress */

/* ---- workspaces ---------------------------------------------------------------- */

static void lib_opts(struct daemon *d, sandlot_options_t *o)
{
	sandlot_options_init(o);
	o->data_dir = d->cfg.data_dir;
	o->disk_overcommit = d->cfg.disk_overcommit;
}

int workspace_exists(struct daemon *d, const char *id)
{
	sandlot_options_t o;
	lib_opts(d, &o);
	uint64_t bytes;
	sandlot_error_t *err = NULL;
	int rc = sandlot_workspace_size(&o, id, &bytes, &err);
	sandlot_error_free(err);
	return rc == 0;
}

void workspace_assign(struct daemon *d, sandlot_options_t *opts, char id[32])
{
	/* The name of resources prepared for such a sandbox, when there are
	 * some (sandlot_prepare() in main.c). */
	sandlot_new_id(opts, id);
	opts->id = id;
	opts->workspace = id;
	opts->disk_overcommit = d->cfg.disk_overcommit;
}

void workspace_remove(struct daemon *d, const char *id)
{
	if (!id || !*id)
		return;
	sandlot_options_t o;
	lib_opts(d, &o);
	sandlot_error_t *err = NULL;
	if (sandlot_workspace_remove(&o, id, &err) == 0)
		daemon_log("workspace_removed", "sandbox=%s", id);
	else if (sandlot_error_status(err) != ENOENT)
		daemon_log("workspace_remove_failed", "level=warn sandbox=%s error=\"%s\"", id,
			   sandlot_error_message(err));
	sandlot_error_free(err);
}

/* The workspace is complete once its sandbox is gone; make it durable, so
 * that a power cut does not lose a paused workspace. */
static void flush_workspace(struct daemon *d, const char *id)
{
	sandlot_options_t o;
	lib_opts(d, &o);
	sandlot_error_t *err = NULL;
	if (sandlot_workspace_sync(&o, &err) < 0)
		daemon_log("workspace_flush_failed", "level=warn sandbox=%s error=\"%s\"", id,
			   sandlot_error_message(err));
	sandlot_error_free(err);
}

/* ---- state helpers ------------------------------------------------------------- */

static int ended(enum dsb_state st)
{
	return st != DSB_STARTING && st != DSB_RUNNING && st != DSB_PAUSED;
}

/* Wait (s->lock held) until no pause or resume — and with `copies`, no copy
 * of the image — is in progress.  0, or -1 after SETTLE_WAIT_MS. */
static int settle_locked(struct dsb *s, int copies)
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

/* Pause s.  0 when it is paused (now or already), -1 with err. */
static int do_pause(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	if (settle_locked(s, 0) < 0) {
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
	pid_t pid = s->init_pid;
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	daemon_fault("pause-after-registry");
	__atomic_sub_fetch(&d->nrunning, 1, __ATOMIC_SEQ_CST);
	/* Kills its commands and init, destroys the handle (or leaves that to
	 * the reaper while a request still holds it), then workspace_destroyed()
	 * flushes the image and ends the transition. */
	dsb_stop(d, s, pid);
	daemon_log("paused", "sandbox=%s ms=%.1f", s->id, (double)(sandlot__now_ns() - t0) / 1e6);
	return 0;
}

void workspace_destroyed(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	enum dsb_state st = s->state;
	int has = s->has_workspace, keep = s->workspace_kept;
	pthread_mutex_unlock(&s->lock);
	if (has && keep)
		flush_workspace(d, s->id);
	else if (has && ended(st))
		workspace_remove(d, s->id);
	/* (Still running: destroyed by shutdown after the running ones were
	 * ended.  The registry says running, so the next start treats it as
	 * lost and removes the image then.) */
	pthread_mutex_lock(&s->lock);
	if (s->transition && st == DSB_PAUSED)
		s->transition = 0;
	/* Also wakes from_snapshot copies waiting for the teardown. */
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void workspace_on_end_locked(struct daemon *d, struct dsb *s, enum dsb_state state)
{
	/* Expiry is what agent frameworks recover from (from_snapshot); an
	 * explicit DELETE, a failure or a lost sandbox keeps nothing. */
	s->workspace_kept = s->has_workspace && state == DSB_EXPIRED;
}

/* ---- resume ------------------------------------------------------------------------ */

/* The sandlot options a sandbox was created with, from its normalised JSON
 * (sandboxes.c, parse_create): image, memory, cpus, pids, disk, env.  *env
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
		if (settle_locked(s, 1) < 0) {
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
		if (live >= d->cfg.max_sandboxes) {
			pthread_mutex_unlock(&d->lock);
			return sandlot__error(err, EAGAIN,
					      "%u sandboxes are running or starting, the limit of this "
					      "daemon (--max-sandboxes); sandbox %s stays paused", live,
					      s->id);
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
		sb = sandlot_create(&opts, &e);
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
		s->init_pid = sandlot_init_pid(sb);
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
		cgroup_check_after_destroy(s->id);
		flush_workspace(d, s->id);
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
	daemon_log("resumed", "sandbox=%s ms=%.1f init_pid=%d", s->id, ms, (int)sandlot_init_pid(sb));
	/* Its exposed ports listen again (the same host ports when free). */
	if (ports_open(s, &e) < 0) {
		char msg[600];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(e));
		for (char *c = msg; *c; c++)
			if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
				*c = '\'';
		daemon_log("ports_failed", "level=warn sandbox=%s error=\"%s\"", s->id, msg);
		sandlot_error_free(e);
	}
	return 0;
}

int workspace_wake(struct daemon *d, struct dsb *s, sandlot_error_t **err)
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
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return NULL;
	json_t *o = do_pause(d, s, err) < 0 ? NULL : dsb_to_json(s);
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

/* ---- delete, retention, from_snapshot -------------------------------------------- */

int workspace_delete(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	if (settle_locked(s, 0) < 0) {
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

void workspace_reap(struct daemon *d, struct dsb *s, int64_t now)
{
	pthread_mutex_lock(&s->lock);
	int64_t keep = (int64_t)s->paused_retention_seconds * 1000;
	if (s->transition || s->copying || !keep || !s->workspace_kept) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (s->state == DSB_PAUSED && now >= s->paused_ms + keep) {
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
		return;
	}
	if (ended(s->state) && !s->sb && !s->destroy_pending && now >= s->ended_ms + keep) {
		s->workspace_kept = 0;
		registry_save(d, s);
		pthread_mutex_unlock(&s->lock);
		daemon_log("workspace_expired", "sandbox=%s", s->id);
		workspace_remove(d, s->id);
		return;
	}
	pthread_mutex_unlock(&s->lock);
}

int workspace_forgettable_locked(struct dsb *s)
{
	return s->state != DSB_PAUSED && !s->workspace_kept && !s->transition && !s->copying;
}

int workspace_from_snapshot(struct daemon *d, const char *from, int disk_given,
			    sandlot_options_t *opts, char id[32], sandlot_error_t **err)
{
	struct dsb *src = dsb_find(d, from);
	if (!src) {
		return sandlot__error(err, ENOENT,
				      "field \"from_snapshot\": no sandbox %s (unknown, or forgotten with "
				      "its workspace)", from);
	}
	pthread_mutex_lock(&src->lock);
	if (settle_locked(src, 0) < 0) {
		pthread_mutex_unlock(&src->lock);
		dsb_release(d, src);
		return sandlot__error(err, EBUSY, "a pause or resume of sandbox %s is in progress",
				      from);
	}
	if (src->state != DSB_PAUSED && !src->workspace_kept) {
		const char *st = dsb_state_name(src->state);
		int running = src->state == DSB_RUNNING;
		pthread_mutex_unlock(&src->lock);
		dsb_release(d, src);
		if (running)
			return sandlot__error(err, EBUSY,
					      "field \"from_snapshot\": sandbox %s is running; pause it "
					      "first", from);
		return sandlot__error(err, EBUSY,
				      "field \"from_snapshot\": sandbox %s (%s) has no kept workspace",
				      from, st);
	}
	/* A sandbox that has just expired still has its workspace in use (and
	 * locked) until its teardown is done, a few ms to END_WAIT_MS later:
	 * wait for it rather than fail with "in use". */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += SETTLE_WAIT_MS / 1000;
	while (ended(src->state) && (src->sb || src->destroy_pending))
		if (pthread_cond_timedwait(&src->cond, &src->lock, &dl) == ETIMEDOUT)
			break;
	if (ended(src->state) && (src->sb || src->destroy_pending)) {
		pthread_mutex_unlock(&src->lock);
		dsb_release(d, src);
		return sandlot__error(err, EBUSY,
				      "field \"from_snapshot\": sandbox %s is still being torn down",
				      from);
	}
	src->copying++;
	pthread_mutex_unlock(&src->lock);

	int rc = -1;
	sandlot_options_t o;
	lib_opts(d, &o);
	uint64_t bytes = 0;
	sandlot_error_t *e = NULL;
	if (sandlot_workspace_size(&o, src->id, &bytes, &e) < 0) {
		sandlot__error(err, ENOENT, "field \"from_snapshot\": the workspace of %s is gone",
			       from);
	} else if (disk_given && opts->disk_bytes != bytes) {
		sandlot__error(err, EINVAL,
			       "field \"disk\": a sandbox made from_snapshot has the disk size of the "
			       "snapshot (%llu bytes); leave \"disk\" out", (unsigned long long)bytes);
	} else {
		uint64_t t0 = sandlot__now_ns();
		workspace_assign(d, opts, id);
		if (sandlot_workspace_copy(&o, src->id, id, err) < 0) {
			sandlot_release_id(id); /* no sandbox will have it */
		} else {
			opts->disk_bytes = bytes;
			daemon_log("snapshot_copied", "from=%s to=%s ms=%.1f", from, id,
				   (double)(sandlot__now_ns() - t0) / 1e6);
			rc = 0;
		}
	}
	sandlot_error_free(e);
	pthread_mutex_lock(&src->lock);
	src->copying--;
	pthread_cond_broadcast(&src->cond);
	pthread_mutex_unlock(&src->lock);
	dsb_release(d, src);
	return rc;
}

/* ---- start-up --------------------------------------------------------------------- */

/* Whether sandbox `id` owns a kept workspace: paused, or ended with its
 * files kept for its retention. */
static int owned(struct daemon *d, const char *id)
{
	struct dsb *s = dsb_find(d, id);
	int own = 0;
	if (s) {
		pthread_mutex_lock(&s->lock);
		own = s->state == DSB_PAUSED || s->workspace_kept;
		pthread_mutex_unlock(&s->lock);
		dsb_release(d, s);
	}
	return own;
}

/* Images of the former layout: <data-dir>/workspaces/<id>.img.  An owned
 * one comes into the pool (then goes); an image that cannot be brought in
 * stays where it is, for the operator, and its sandbox cannot resume; the
 * rest (lost sandboxes, half-made copies *.tmp-*) go. */
static void import_former(struct daemon *d, sandlot_options_t *o)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/workspaces", d->cfg.data_dir);
	cleanup_closedir DIR *dd = opendir(dir);
	if (!dd)
		return;
	struct dirent *de;
	while ((de = readdir(dd))) {
		if (de->d_name[0] == '.')
			continue;
		char path[4500], id[40] = "";
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		size_t len = strlen(de->d_name);
		if (len > 4 && strcmp(de->d_name + len - 4, ".img") == 0 && len - 4 < sizeof(id))
			snprintf(id, sizeof(id), "%.*s", (int)(len - 4), de->d_name);
		if (!*id || !owned(d, id)) {
			if (unlink(path) == 0)
				daemon_log("workspace_removed", "path=\"%s\" reason=\"not owned\"", path);
			continue;
		}
		uint64_t t0 = sandlot__now_ns();
		sandlot_error_t *err = NULL;
		if (sandlot_workspace_import(o, id, path, &err) < 0) {
			daemon_log("workspace_import_failed", "level=error sandbox=%s path=\"%s\" "
				   "error=\"%s\"", id, path, sandlot_error_message(err));
			sandlot_error_free(err);
			continue;
		}
		unlink(path);
		daemon_log("workspace_imported", "sandbox=%s path=\"%s\" ms=%.1f", id, path,
			   (double)(sandlot__now_ns() - t0) / 1e6);
	}
	rmdir(dir); /* once empty, the former layout is gone */
}

void workspace_recover(struct daemon *d)
{
	sandlot_options_t o;
	lib_opts(d, &o);
	import_former(d, &o);
	char **names = NULL;
	sandlot_error_t *err = NULL;
	if (sandlot_workspace_list(&o, &names, &err) < 0) {
		daemon_log("workspaces", "level=error error=\"%s\"", sandlot_error_message(err));
		sandlot_error_free(err);
		return;
	}
	/* Owned: a paused sandbox's, or an ended one's kept for its retention.
	 * Anything else — lost sandboxes, pooled ones of a killed daemon —
	 * goes. */
	size_t kept = 0, removed = 0;
	for (size_t i = 0; names[i]; i++) {
		if (owned(d, names[i])) {
			kept++;
			continue;
		}
		if (sandlot_workspace_remove(&o, names[i], &err) == 0) {
			removed++;
			daemon_log("workspace_removed", "sandbox=%s reason=\"not owned\"", names[i]);
		} else {
			daemon_log("workspace_remove_failed", "level=warn sandbox=%s error=\"%s\"",
				   names[i], sandlot_error_message(err));
			sandlot_error_free(err);
			err = NULL;
		}
	}
	sandlot_strv_free(names);
	daemon_log("workspaces", "kept=%zu removed=%zu", kept, removed);
}
