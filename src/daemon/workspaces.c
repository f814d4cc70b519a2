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
 *   pause     POST .../pause: sandlot_pause() keeps what its backend can
 *             (ns sandboxes: the workspace's files, made durable) and ends
 *             the sandbox's processes; then its sandlot_t is destroyed
 *             (memory, cgroup, uid range: all freed) and the workspace
 *             stays.  State "paused".  A paused sandbox counts toward
 *             nothing but disk: not --max-sandboxes, and no TTL or idle
 *             timeout runs.
 *   resume    POST .../resume, or any call that goes through dsb_get()
 *             (exec, files, code, changes, keepalive) on a sandbox created
 *             with auto_resume: sandlot_resume() with the same id and
 *             options on the same workspace.  Files come back byte for
 *             byte; for ns sandboxes processes, interpreter state and the
 *             exec history do not.  The TTL starts again at the resume (or
 *             is set anew by its body).
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
 * The state changes themselves (pause, resume, delete, retention) are
 * lifecycle.c's; this module keeps the files: it names, copies, flushes,
 * removes and recovers kept workspaces.
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

#define SETTLE_WAIT_MS 30000 /* longest wait for a teardown before a snapshot copy */

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

int workspace_try_remove(struct daemon *d, const char *id, int log_busy)
{
	sandlot_options_t o;
	lib_opts(d, &o);
	sandlot_error_t *err = NULL;
	int rc = 0;
	if (sandlot_workspace_remove(&o, id, &err) == 0) {
		daemon_log("workspace_removed", "sandbox=%s", id);
	} else if (sandlot_error_status(err) != ENOENT) {
		rc = sandlot_error_status(err) == EBUSY ? 1 : -1;
		if (rc < 0 || log_busy)
			daemon_log("workspace_remove_failed", "level=warn sandbox=%s error=\"%s\"", id,
				   sandlot_error_message(err));
	}
	sandlot_error_free(err);
	return rc;
}

void workspace_remove(struct daemon *d, const char *id)
{
	if (id && *id)
		workspace_try_remove(d, id, 1);
}

/* Removing the workspace of a sandbox that has just been destroyed.  Its
 * lock can still be held for a moment after its init is gone: every child
 * that another creation clones from sandlotd starts with a copy of each of
 * sandlotd's descriptors, this workspace's lock among them, and keeps it
 * until it has its own in place and closes the rest (milliseconds; much
 * longer on a loaded host, where it may wait for the CPU).  Under 200
 * concurrent create+exec+delete, 314 of 778 removals were refused as busy
 * that way; each left its workspace, with its disk reserved, until the
 * next start of sandlotd, and 25 creates then failed for want of disk.  So
 * a busy removal is tried again for REMOVE_TRY_MS, then by the reaper once
 * a second for a minute, and at shutdown (leftovers_retry_workspace()). */
#define REMOVE_TRY_MS 10 /* not longer: it holds up a teardown thread */
static void remove_settled(struct daemon *d, const char *id)
{
	uint64_t deadline = sandlot__now_ms() + REMOVE_TRY_MS;
	int rc;
	while ((rc = workspace_try_remove(d, id, 0)) == 1 && sandlot__now_ms() < deadline)
		usleep(5000);
	if (rc == 1 && leftovers_retry_workspace(id) < 0) /* out of memory: say so */
		workspace_try_remove(d, id, 1);
}

/* The workspace is complete once its sandbox is gone; make it durable, so
 * that a power cut does not lose a paused workspace. */
void workspace_flush(struct daemon *d, const char *id)
{
	sandlot_options_t o;
	lib_opts(d, &o);
	sandlot_error_t *err = NULL;
	if (sandlot_workspace_sync(&o, &err) < 0)
		daemon_log("workspace_flush_failed", "level=warn sandbox=%s error=\"%s\"", id,
			   sandlot_error_message(err));
	sandlot_error_free(err);
}

/* ---- teardown, retention, from_snapshot -------------------------------------------- */

void workspace_destroyed(struct daemon *d, struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	enum dsb_state st = s->state;
	int has = s->has_workspace, keep = s->workspace_kept;
	pthread_mutex_unlock(&s->lock);
	if (has && keep)
		workspace_flush(d, s->id);
	else if (has && dsb_state_ended(st))
		remove_settled(d, s->id);
	/* (Still running: destroyed by shutdown after the running ones were
	 * ended.  The registry says running, so the next start treats it as
	 * lost and removes the image then.) */
}

void workspace_reap(struct daemon *d, struct dsb *s, int64_t now)
{
	pthread_mutex_lock(&s->lock);
	int64_t keep = (int64_t)s->paused_retention_seconds * 1000;
	if (s->transition || s->copying || !keep || !s->workspace_kept ||
	    !dsb_state_ended(s->state) || s->sb || s->destroy_pending || now < s->ended_ms + keep) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->workspace_kept = 0;
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	daemon_log("workspace_expired", "sandbox=%s", s->id);
	workspace_remove(d, s->id);
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
	if (dsb_settle_locked(src, 0) < 0) {
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
	while (dsb_state_ended(src->state) && (src->sb || src->destroy_pending))
		if (pthread_cond_timedwait(&src->cond, &src->lock, &dl) == ETIMEDOUT)
			break;
	if (dsb_state_ended(src->state) && (src->sb || src->destroy_pending)) {
		pthread_mutex_unlock(&src->lock);
		dsb_release(d, src);
		return sandlot__error(err, EBUSY,
				      "field \"from_snapshot\": sandbox %s is still being torn down",
				      from);
	}
	/* The copy is a workspace of the source's backend (a directory or
	 * an image for ns, a disk for vm): only a sandbox of the same
	 * isolation can start on it. */
	const char *iso = json_string_value(json_object_get(src->options, "isolation"));
	int src_vm = iso && strcmp(iso, "vm") == 0;
	if (src_vm != (opts->isolation == SANDLOT_ISOLATION_VM)) {
		pthread_mutex_unlock(&src->lock);
		dsb_release(d, src);
		return sandlot__error(err, EINVAL,
				      "field \"from_snapshot\": sandbox %s is a%s sandbox; one made "
				      "from its snapshot must be too (\"isolation\": \"%s\")",
				      from, src_vm ? " vm" : "n ns", src_vm ? "vm" : "ns");
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
