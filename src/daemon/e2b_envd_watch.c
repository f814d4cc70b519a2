/* filesystem.Filesystem's directory watches (e2b_envd.h): WatchDir (a
 * server stream, the JS SDK) and CreateWatcher / GetWatcherEvents /
 * RemoveWatcher (polled, the Python SDK).
 *
 * sandlot has no inotify into a sandbox: a watch is a reader of the
 * sandbox's changes log (changes.c), which every exec, file call and code
 * cell already appends to, from the cursor the log had when the watch
 * began.  To see what changed without such a call, a watch scans the
 * workspace itself (dsb_scan_changes(), source "watch") before it reads:
 * every POLL_MS on a stream, and on each GetWatcherEvents.  So only
 * /home/user (the workspace the log covers) can be watched, events come
 * up to POLL_MS late, and a file created and removed between two scans
 * is not seen.  Kinds: created → EVENT_TYPE_CREATE, modified →
 * EVENT_TYPE_WRITE, deleted → EVENT_TYPE_REMOVE.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/e2b_envd.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"

#define POLL_MS 250
#define WATCHERS_PER_SANDBOX 64
#define EVENTS_MAX 10000         /* kept for a polled watcher between reads */

struct watch {
	struct watch *next;          /* polled watchers, under watchers_lock */
	char id[40];
	struct daemon *d;
	struct dsb *s;               /* dsb_hold()'s */
	char *dir;                   /* absolute, no trailing slash */
	int recursive;
	uint64_t cursor;             /* the last log entry looked at */
	/* streams */
	int started, ended;
	int keepalive_ms;
	int64_t next_keepalive, deadline, next_poll;
	json_t *queue;               /* events not yet sent / read */
	char *pending;
	size_t plen, poff;
};

static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watch *watchers;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void watch_free(struct watch *w)
{
	if (!w)
		return;
	json_decref(w->queue);
	free(w->pending);
	free(w->dir);
	if (w->s)
		dsb_release(w->d, w->s);
	free(w);
}

/* Scan the workspace (if the sandbox runs) and queue the log's entries
 * after w->cursor that lie in the watched directory.  0, or -1 when the
 * sandbox has ended (it will never change again). */
static int watch_poll(struct watch *w)
{
	struct dsb *s = w->s;
	dsb_busy(s, +1); /* keeps s->sb from being destroyed under the scan */
	pthread_mutex_lock(&s->lock);
	enum dsb_state state = s->state;
	int running = state == DSB_RUNNING && s->sb;
	pthread_mutex_unlock(&s->lock);
	if (running) {
		sandlot_error_t *err = NULL;
		if (dsb_scan_changes(w->d, s, "watch", NULL, NULL, &err) < 0)
			sandlot_error_free(err); /* the log has what it has */
	}
	dsb_busy(s, -1);
	size_t dl = strlen(w->dir);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nchanges; i++) {
		const struct dchange *c = &s->changes[i];
		if (c->cursor <= w->cursor)
			continue;
		w->cursor = c->cursor;
		if (strncmp(c->path, w->dir, dl) != 0 || (dl > 1 && c->path[dl] != '/'))
			continue;
		const char *rel = c->path + dl + (dl > 1 ? 1 : 0);
		if (!*rel || (!w->recursive && strchr(rel, '/')))
			continue;
		if (json_array_size(w->queue) >= EVENTS_MAX)
			continue;
		const char *type = c->kind == 'c' ? "EVENT_TYPE_CREATE"
				   : c->kind == 'd' ? "EVENT_TYPE_REMOVE"
						    : "EVENT_TYPE_WRITE";
		json_array_append_new(w->queue, json_pack("{s:o, s:s}", "name", json_text(rel, strlen(rel)),
							     "type", type));
	}
	pthread_mutex_unlock(&s->lock);
	return state == DSB_RUNNING || state == DSB_PAUSED || state == DSB_STARTING ? 0 : -1;
}

/* A watch of msg's path in the call's sandbox, its log read up to now.
 * NULL having answered. */
static struct watch *watch_new(struct http_req *req, enum e2b_style style, json_t *msg)
{
	int bad = 0, recursive;
	const char *p = e2b_pj_string(msg, "path", NULL, &bad);
	if (bad || !p || !*p || e2b_pj_bool(msg, "recursive", NULL, 0, &recursive) < 0) {
		e2b_answer_error(req, style, "invalid_argument",
				 "path (a string) is required and recursive is a bool");
		return NULL;
	}
	cleanup_free char *abs = e2b_abs_path(p);
	if (!abs) {
		e2b_answer_error(req, style, "internal", "out of memory");
		return NULL;
	}
	if (strcmp(abs, E2B_HOME) != 0 && strncmp(abs, E2B_HOME "/", sizeof(E2B_HOME)) != 0) {
		e2b_answer_error(req, style, "invalid_argument",
				 "only directories under %s can be watched (sandlot tracks the "
				 "changes of the workspace): %s",
				 E2B_HOME, abs);
		return NULL;
	}
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, style, E2B_ENVD_PORT, &sb);
	if (!s)
		return NULL;
	sandlot_stat_t st;
	sandlot_error_t *err = NULL;
	if (sandlot_stat(sb, abs, &st, &err) < 0) {
		dsb_put(req->d, s);
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			e2b_answer_error(req, style, "not_found", "directory not found: %s", abs);
			return NULL;
		}
		e2b_answer_sandlot(req, style, err, abs);
		return NULL;
	}
	if (st.type != SANDLOT_DIR) {
		dsb_put(req->d, s);
		e2b_answer_error(req, style, "invalid_argument", "path is not a directory: %s", abs);
		return NULL;
	}
	struct watch *w = calloc(1, sizeof(*w));
	if (!w || !(w->queue = json_array()) || !(w->dir = strdup(abs))) {
		if (w)
			json_decref(w->queue);
		free(w);
		dsb_put(req->d, s);
		e2b_answer_error(req, style, "internal", "out of memory");
		return NULL;
	}
	/* What changed before the watch began is not its news: scan, then
	 * start after the end of the log. */
	e2b_scan_changes(req->d, s);
	pthread_mutex_lock(&s->lock);
	w->cursor = s->next_cursor ? s->next_cursor - 1 : 0;
	pthread_mutex_unlock(&s->lock);
	w->d = req->d;
	w->s = s;
	dsb_hold(s);
	dsb_put(req->d, s);
	w->recursive = recursive;
	return w;
}

/* ---- WatchDir ------------------------------------------------------------------- */

static ssize_t watch_read(void *ud, char *buf, size_t max, struct http_wait *w_)
{
	struct watch *w = ud;
	if (!w->pending) {
		if (w->ended)
			return 0;
		int64_t now = mono_ms();
		json_t *msg = NULL;
		const char *end_code = NULL, *end_msg = NULL;
		if (!w->started) {
			msg = json_pack("{s:{}}", "start");
			w->started = 1;
		} else if (json_array_size(w->queue) > 0) {
			json_t *ev = json_array_get(w->queue, 0);
			msg = json_pack("{s:O}", "filesystem", ev);
			json_array_remove(w->queue, 0);
		} else if (w->deadline && now >= w->deadline) {
			end_code = "deadline_exceeded";
			end_msg = "the watch reached its timeout";
		} else if (now >= w->next_poll) {
			if (watch_poll(w) < 0 && json_array_size(w->queue) == 0) {
				end_code = "unavailable";
				end_msg = "the sandbox has ended";
			}
			w->next_poll = now + POLL_MS;
			if (!end_code && json_array_size(w->queue) == 0 && w->next_keepalive &&
			    now >= w->next_keepalive) {
				msg = json_pack("{s:{}}", "keepalive");
				w->next_keepalive = now + w->keepalive_ms;
			}
			if (!end_code && !msg && json_array_size(w->queue) > 0) {
				json_t *ev = json_array_get(w->queue, 0);
				msg = json_pack("{s:O}", "filesystem", ev);
				json_array_remove(w->queue, 0);
			}
		}
		if (msg) {
			w->pending = e2b_connect_frame(msg, 0, &w->plen);
			json_decref(msg);
		} else if (end_code) {
			w->pending = e2b_connect_end_frame(end_code, end_msg, &w->plen);
			w->ended = 1;
		} else {
			int64_t t = w->next_poll - now;
			if (w->deadline && w->deadline - now < t)
				t = w->deadline - now;
			w_->fd = -1;
			w_->timeout_ms = t > 0 ? (int)t : 1;
			return HTTP_STREAM_WAIT;
		}
		if (!w->pending)
			return HTTP_STREAM_ERROR;
		w->poff = 0;
	}
	size_t n = w->plen - w->poff < max ? w->plen - w->poff : max;
	memcpy(buf, w->pending + w->poff, n);
	w->poff += n;
	if (w->poff == w->plen) {
		free(w->pending);
		w->pending = NULL;
	}
	return (ssize_t)n;
}

static void watch_stream_free(void *ud, int completed)
{
	(void)completed;
	watch_free(ud);
}

static int watch_dir(struct http_req *req, struct e2b_call *c)
{
	if (!c->stream)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"filesystem.Filesystem/WatchDir is a server stream");
	struct watch *w = watch_new(req, E2B_STREAM, c->msg);
	if (!w)
		return 0;
	int64_t now = mono_ms();
	w->keepalive_ms = c->keepalive_ms;
	w->next_keepalive = c->keepalive_ms ? now + c->keepalive_ms : 0;
	w->deadline = c->timeout_ms ? now + c->timeout_ms : 0;
	w->next_poll = now + POLL_MS;
	return http_stream(req, 200, E2B_CONNECT_STREAM_TYPE, watch_read, watch_stream_free, w);
}

/* ---- polled watchers ---------------------------------------------------------------- */

/* Free the watchers of sandboxes that have ended (nobody will remove
 * them: the SDK's handle went with the sandbox). */
static void sweep(void)
{
	struct watch *dead = NULL;
	pthread_mutex_lock(&watchers_lock);
	for (struct watch **pp = &watchers; *pp;) {
		struct watch *w = *pp;
		pthread_mutex_lock(&w->s->lock);
		int gone = w->s->state != DSB_RUNNING && w->s->state != DSB_PAUSED &&
			   w->s->state != DSB_STARTING;
		pthread_mutex_unlock(&w->s->lock);
		if (gone) {
			*pp = w->next;
			w->next = dead;
			dead = w;
		} else {
			pp = &w->next;
		}
	}
	pthread_mutex_unlock(&watchers_lock);
	while (dead) {
		struct watch *n = dead->next;
		watch_free(dead);
		dead = n;
	}
}

static int create_watcher(struct http_req *req, struct e2b_call *c)
{
	sweep();
	const char *sid = http_header(req, "E2b-Sandbox-Id");
	unsigned n = 0;
	pthread_mutex_lock(&watchers_lock);
	for (struct watch *w = watchers; w; w = w->next)
		n += sid && strcmp(w->s->id, sid) == 0;
	pthread_mutex_unlock(&watchers_lock);
	if (n >= WATCHERS_PER_SANDBOX)
		return e2b_answer_error(req, E2B_UNARY, "resource_exhausted",
					"%d watchers already in this sandbox: remove one first",
					WATCHERS_PER_SANDBOX);
	struct watch *w = watch_new(req, E2B_UNARY, c->msg);
	if (!w)
		return 0;
	sandlot__new_id("w-", w->id);
	pthread_mutex_lock(&watchers_lock);
	w->next = watchers;
	watchers = w;
	pthread_mutex_unlock(&watchers_lock);
	return http_json(req, 200, json_pack("{s:s}", "watcherId", w->id));
}

/* The polled watcher of msg's watcherId in the call's sandbox, taken out
 * of the list (put it back with unlist = 0); NULL having answered. */
static struct watch *take_watcher(struct http_req *req, json_t *msg)
{
	int bad = 0;
	const char *id = e2b_pj_string(msg, "watcherId", "watcher_id", &bad);
	const char *sid = http_header(req, "E2b-Sandbox-Id");
	if (bad || !id || !sid) {
		e2b_answer_error(req, E2B_UNARY, "invalid_argument",
				 "watcherId (a string) is required");
		return NULL;
	}
	struct watch *found = NULL;
	pthread_mutex_lock(&watchers_lock);
	for (struct watch **pp = &watchers; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0 && strcmp((*pp)->s->id, sid) == 0) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&watchers_lock);
	if (!found)
		e2b_answer_error(req, E2B_UNARY, "not_found", "watcher %.64s not found", id);
	return found;
}

static int watcher_events(struct http_req *req, struct e2b_call *c)
{
	struct watch *w = take_watcher(req, c->msg);
	if (!w)
		return 0;
	int alive = watch_poll(w) == 0;
	json_t *events = w->queue;
	w->queue = json_array();
	if (alive) {
		pthread_mutex_lock(&watchers_lock);
		w->next = watchers;
		watchers = w;
		pthread_mutex_unlock(&watchers_lock);
	} else {
		watch_free(w);
	}
	return http_json(req, 200, json_pack("{s:o}", "events", events));
}

static int remove_watcher(struct http_req *req, struct e2b_call *c)
{
	struct watch *w = take_watcher(req, c->msg);
	if (!w)
		return 0;
	watch_free(w);
	return http_json(req, 200, json_object());
}

int e2b_watch_call(struct http_req *req, struct e2b_call *c)
{
	if (strcmp(c->method, "WatchDir") == 0)
		return watch_dir(req, c);
	if (c->stream && (strcmp(c->method, "CreateWatcher") == 0 ||
			  strcmp(c->method, "GetWatcherEvents") == 0 ||
			  strcmp(c->method, "RemoveWatcher") == 0))
		return e2b_answer_error(req, E2B_STREAM, "invalid_argument",
					"filesystem.Filesystem/%s is a unary call", c->method);
	if (strcmp(c->method, "CreateWatcher") == 0)
		return create_watcher(req, c);
	if (strcmp(c->method, "GetWatcherEvents") == 0)
		return watcher_events(req, c);
	if (strcmp(c->method, "RemoveWatcher") == 0)
		return remove_watcher(req, c);
	return 1;
}
