/* sandlotd exec routes: buffered, NDJSON-streamed and background execs
 * (spec/openapi.yaml, /v1/sandboxes/{id}/exec and /execs).
 *
 * Model.  Every exec is a `struct dexec`, listed (newest first) in its
 * sandbox's history s->execs from the moment it starts until the history
 * bound pushes it out or the sandbox ends.  Its output goes to one of two
 * kinds of buffer, chosen by how it was started:
 *
 *   queue     (streamed execs) on_output appends chunks and the stream's
 *             reader takes them off.  When more than QUEUE_HIGH bytes wait,
 *             on_output returns 1: libsandlot then returns no credit to
 *             init, init stops reading the command's pipes and the command
 *             blocks on write.  The reader resumes the exec once the queue
 *             is below QUEUE_LOW.  A slow client therefore slows the
 *             command down instead of growing the daemon.
 *   retained  (buffered and background execs) chunks are kept, at most
 *             output_limit bytes per stream; the rest is dropped and the
 *             result says "truncated".  Never pauses.  Followers
 *             (?follow=1) walk the chunks with a cursor of their own.
 *
 * Threads.  on_output and on_exit run on libsandlot's I/O thread with the
 * sandbox connection's lock held: they take e->lock briefly, append, and
 * wake the waiters (an eventfd each, for http_wait, and e->cond); they
 * never call into libsandlot.  Other threads call libsandlot only without
 * e->lock held.  Lock order: s->lock → e->lock, and (inside libsandlot)
 * conn->lock → e->lock.  e->lock is a leaf.
 *
 * The proc handle.  Several threads use e->proc (kill, stdin, resume) and
 * one frees it.  A user enters with proc_get() (counted in e->proc_users
 * under e->lock) and may then call sandlot_proc_*() unlocked; proc_free()
 * waits until the users have left.  A proc must be freed before its
 * sandbox handle is destroyed, and dsb_end() destroys it only once the
 * sandbox is no longer busy: so every exec holds a busy count until its
 * proc is freed (buffered: the request's own; streamed and background: one
 * of their own, e->busy_held).
 *
 * Finishing.  After on_exit, one thread runs finish_exec(): frees the proc,
 * scans the workspace for the exec's changes, builds the result, counts
 * metrics and drops the exec's busy count.  That thread is the request's
 * worker when its parked wait ends (buffered), the stream's reader on a
 * worker (streamed), a watcher thread started with
 * the exec (background: a thread per *running* background exec, never one
 * per idle sandbox) or, when the sandbox ends, execs_release(), which kills
 * every exec and finishes those that have ended, so that a client that
 * stopped reading cannot hold the sandbox's destruction back.
 *
 * Lifetime.  e->refs counts the history list, the runner (request, stream
 * or watcher), each follower and each helper thread; the last
 * exec_unref() frees the exec.  Whoever uses e->s holds the sandbox by
 * dsb_get() or dsb_hold().
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "common/base64.h"
#include "common/util.h"

#define DEFAULT_TIMEOUT_MS 300000u
#define DEFAULT_OUTPUT_LIMIT (1u << 20)
#define MAX_OUTPUT_LIMIT (64u << 20)
#define QUEUE_HIGH (1u << 20)          /* pause a streamed exec above this */
#define QUEUE_LOW (256u << 10)         /* and resume it below this */
#define CHUNK_MIN (16u << 10)          /* chunk capacity: small writes coalesce */
#define EVENT_MAX (64u << 10)          /* output bytes per NDJSON event */
#define HISTORY_MAX 64                 /* execs listed per sandbox (running ones beyond) */
#define HISTORY_BYTES (16u << 20)      /* output kept by finished execs per sandbox */
#define STDIN_INLINE (256u << 10)      /* within libsandlot's initial stdin credit */
#define KILL_WAIT_MS 3000              /* execs_release: how long SIGKILLed execs may take */
#define PID_WAIT_MS 2000               /* at most, for init's STARTED (normally < 1 ms) */
#define WATCHER_STACK (256u << 10)

enum mode { MODE_BUFFERED, MODE_STREAM, MODE_BACKGROUND };
static const char *const mode_names[] = { "buffered", "stream", "background" };

struct chunk {
	struct chunk *next;
	int stream;                /* SANDLOT_STDOUT or SANDLOT_STDERR */
	size_t len, cap;
	char data[];
};

struct waiter {
	struct waiter *next;
	int fd;                    /* eventfd, or -1 (then the waiter polls) */
	int output;                /* woken by output too, not only by the end */
};

struct dexec {
	struct dexec *next;        /* in s->execs, under s->lock */
	char id[32];
	struct daemon *d;
	struct dsb *s;
	enum mode mode;
	int base64;                /* output as base64 instead of text */
	size_t limit;              /* retained bytes per stream */
	json_t *command;           /* argv, for status */
	int64_t started_ms;
	int refs;                  /* __atomic */

	pthread_mutex_t lock;      /* guards everything below */
	pthread_cond_t cond;       /* broadcast with every notify */
	sandlot_proc_t *proc;
	int proc_users, proc_freeing;
	int starting;              /* sandlot_exec() in progress */
	int stdin_pipe, stdin_closed, stdin_busy;
	pid_t pid;
	struct chunk *head, *tail;
	size_t queued;             /* MODE_STREAM: bytes waiting for the reader */
	size_t kept[3];            /* retained bytes per stream */
	int truncated;
	int paused;                /* on_output asked libsandlot to pause */
	int discard;               /* drop further output (killed, reader gone) */
	struct waiter *waiters;
	int exited;                /* on_exit has run; ex is valid */
	sandlot_exit_t ex;
	int finishing, finished;   /* finish_exec() started / done */
	json_t *result;            /* ExecResult without output, once finished */
	char *result_text;         /* the same, serialised (for exit events) */
	int released;              /* its sandbox is ending */
	int busy_held;             /* holds a dsb_busy() count, dropped by finish_exec */
};

/* ---- small helpers ------------------------------------------------------ */

/* Bytes at the end of buf that start a UTF-8 sequence it does not finish
 * (0-3): held back so that a character split between two pieces of output
 * is not turned into two U+FFFD. */
static size_t utf8_incomplete_tail(const char *buf, size_t len)
{
	for (size_t back = 1; back <= 3 && back <= len; back++) {
		unsigned char c = (unsigned char)buf[len - back];
		if ((c & 0xC0) == 0x80)
			continue; /* continuation byte: look further back */
		size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
		if (c >= 0xF8)
			return 0;
		return need > back ? back : 0;
	}
	return 0;
}

/* Signal by number (1-64) or name ("KILL", "SIGTERM", case-insensitive). */
static int parse_signal(json_t *v)
{
	if (json_is_integer(v)) {
		json_int_t n = json_integer_value(v);
		return n >= 1 && n <= 64 ? (int)n : -1;
	}
	if (!json_is_string(v))
		return -1;
	const char *name = json_string_value(v);
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (int sig = 1; sig < 32; sig++) {
		const char *abbrev = sigabbrev_np(sig);
		if (abbrev && strcasecmp(abbrev, name) == 0)
			return sig;
	}
	return -1;
}

static void drain_fd(int fd)
{
	uint64_t v;
	if (fd >= 0 && read(fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing pending */
	}
}

static uint64_t latest_cursor(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t c = s->next_cursor > 0 ? s->next_cursor - 1 : 0;
	pthread_mutex_unlock(&s->lock);
	return c;
}

static int sandbox_live(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	int live = s->state == DSB_RUNNING && s->sb != NULL;
	pthread_mutex_unlock(&s->lock);
	return live;
}

/* ---- the exec object ---------------------------------------------------- */

static void exec_ref(struct dexec *e)
{
	__atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
}

static void free_chunks(struct chunk *c)
{
	while (c) {
		struct chunk *n = c->next;
		free(c);
		c = n;
	}
}

static void exec_unref(struct dexec *e)
{
	if (!e || __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* Nobody else can reach e now; proc is NULL on every path that ends
	 * here except a start that never got one. */
	if (e->proc)
		sandlot_proc_free(e->proc);
	free_chunks(e->head);
	while (e->waiters) {
		struct waiter *w = e->waiters;
		e->waiters = w->next;
		if (w->fd >= 0)
			close(w->fd);
		free(w);
	}
	json_decref(e->command);
	json_decref(e->result);
	free(e->result_text);
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

static struct dexec *exec_new(struct daemon *d, struct dsb *s, enum mode mode)
{
	struct dexec *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	sandlot__new_id("ex-", e->id);
	e->d = d;
	e->s = s;
	e->mode = mode;
	e->refs = 1;
	e->started_ms = daemon_now_ms();
	pthread_mutex_init(&e->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cond, &ca);
	pthread_condattr_destroy(&ca);
	return e;
}

/* Wake every waiter.  e->lock held. */
/* Wake the waiters: every one, or with `output` (news that is only more
 * output) those that read it.  e->lock held. */
static void notify_locked(struct dexec *e, int output)
{
	uint64_t one = 1;
	for (struct waiter *w = e->waiters; w; w = w->next)
		if (w->fd >= 0 && (!output || w->output) && write(w->fd, &one, sizeof(one)) < 0) {
			/* EAGAIN: the counter is saturated, a wake-up is pending */
		}
	pthread_cond_broadcast(&e->cond);
}

/* A wake-up channel for one reader: at the end of the command, and with
 * `output` at each piece of output too.  NULL only when out of memory;
 * without an eventfd the waiter polls (fd -1, short timeouts). */
static struct waiter *waiter_add(struct dexec *e, int output)
{
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->output = output;
	w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_lock(&e->lock);
	w->next = e->waiters;
	e->waiters = w;
	pthread_mutex_unlock(&e->lock);
	return w;
}

static void waiter_remove(struct dexec *e, struct waiter *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&e->lock);
	for (struct waiter **pp = &e->waiters; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	pthread_mutex_unlock(&e->lock);
	if (w->fd >= 0)
		close(w->fd);
	free(w);
}

static int waiter_fd(struct waiter *w)
{
	return w ? w->fd : -1;
}

/* Append output.  e->lock held.  0, or -1 when out of memory. */
static int append_locked(struct dexec *e, int stream, const void *data, size_t len)
{
	struct chunk *t = e->tail;
	if (t && t->stream == stream && t->cap - t->len >= len) {
		memcpy(t->data + t->len, data, len);
		t->len += len;
		return 0;
	}
	size_t cap = len > CHUNK_MIN ? len : CHUNK_MIN;
	struct chunk *c = malloc(sizeof(*c) + cap);
	if (!c)
		return -1;
	c->next = NULL;
	c->stream = stream;
	c->len = len;
	c->cap = cap;
	memcpy(c->data, data, len);
	if (t)
		t->next = c;
	else
		e->head = c;
	e->tail = c;
	return 0;
}

/* ---- libsandlot callbacks (I/O thread, connection lock held) ----------- */

static int on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct dexec *e = ud;
	int pause = 0, st = stream == SANDLOT_STDERR ? SANDLOT_STDERR : SANDLOT_STDOUT;
	pthread_mutex_lock(&e->lock);
	if (e->pid == 0 && e->proc)
		e->pid = sandlot_proc_pid(e->proc);
	if (e->discard) {
		/* dropped: nobody will read it */
	} else if (e->mode == MODE_STREAM) {
		if (append_locked(e, st, data, len) == 0) {
			e->queued += len;
			if (e->queued > QUEUE_HIGH)
				pause = e->paused = 1;
		} else {
			e->truncated = 1;
		}
	} else {
		size_t room = e->limit > e->kept[st] ? e->limit - e->kept[st] : 0;
		if (len > room) {
			e->truncated = 1;
			len = room;
		}
		if (len > 0) {
			if (append_locked(e, st, data, len) == 0)
				e->kept[st] += len;
			else
				e->truncated = 1;
		}
	}
	notify_locked(e, 1);
	pthread_mutex_unlock(&e->lock);
	return pause;
}

static void on_exit_cb(void *ud, const sandlot_exit_t *ex)
{
	struct dexec *e = ud;
	pthread_mutex_lock(&e->lock);
	if (e->pid == 0 && e->proc)
		e->pid = sandlot_proc_pid(e->proc);
	e->ex = *ex;
	e->exited = 1;
	notify_locked(e, 0);
	pthread_mutex_unlock(&e->lock);
}

/* ---- the proc handle ---------------------------------------------------- */

/* Enter as a user of e->proc: returns it (leave with proc_put) or NULL if
 * there is none (start failed, being freed, gone).  Waits for a start in
 * progress.  Never on the I/O thread. */
static sandlot_proc_t *proc_get(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	while (e->starting)
		pthread_cond_wait(&e->cond, &e->lock);
	sandlot_proc_t *p = e->proc_freeing ? NULL : e->proc;
	if (p)
		e->proc_users++;
	pthread_mutex_unlock(&e->lock);
	return p;
}

static void proc_put(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	if (--e->proc_users == 0)
		pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Free the proc once it has exited (waits for its users to leave, and for a
 * free already under way in another thread).  Idempotent. */
static void proc_free(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	while (e->proc_users > 0 || e->proc_freeing)
		pthread_cond_wait(&e->cond, &e->lock);
	sandlot_proc_t *p = e->proc;
	if (!p) {
		pthread_mutex_unlock(&e->lock);
		return;
	}
	e->proc_freeing = 1;
	pthread_mutex_unlock(&e->lock);
	sandlot_proc_free(p);
	pthread_mutex_lock(&e->lock);
	e->proc = NULL;
	e->proc_freeing = 0;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Signal the exec's process group.  0, or -1 if it has no running process. */
static int exec_kill(struct dexec *e, int sig, sandlot_error_t **err)
{
	sandlot_proc_t *p = proc_get(e);
	if (!p)
		return -1;
	int rc = sandlot_proc_kill(p, sig, err);
	proc_put(e);
	return rc;
}

/* Nobody will read further output: drop it (and what is queued) and undo a
 * pause, so the command can run to its end (or die of a kill) instead of
 * blocking on a full pipe. */
static void exec_discard_output(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	e->discard = 1;
	int was_paused = e->paused;
	e->paused = 0;
	if (e->mode == MODE_STREAM) {
		free_chunks(e->head);
		e->head = e->tail = NULL;
		e->queued = 0;
	}
	pthread_mutex_unlock(&e->lock);
	if (was_paused) {
		sandlot_proc_t *p = proc_get(e);
		if (p) {
			sandlot_proc_resume_output(p);
			proc_put(e);
		}
	}
}

static void wait_exited(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	while (!e->exited)
		pthread_cond_wait(&e->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
}

/* Wait until the command's pid is known, i.e. init has started it (its
 * STARTED reply has no callback, so poll, backing off from 1 ms), or it
 * produced output or ended (STARTED always comes first), or max_ms pass.
 * Returns the pid, or 0 (start failed, or no news in time). */
static pid_t wait_pid(struct dexec *e, int max_ms)
{
	struct timespec now, dl;
	clock_gettime(CLOCK_MONOTONIC, &now);
	uint64_t end = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000 + (uint64_t)max_ms;
	long step_ms = 1;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		if (e->pid == 0 && e->proc && !e->proc_freeing)
			e->pid = sandlot_proc_pid(e->proc);
		if (e->pid || e->exited || e->head)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		uint64_t t = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
		if (t >= end)
			break;
		uint64_t until = t + (uint64_t)step_ms < end ? t + (uint64_t)step_ms : end;
		dl.tv_sec = (time_t)(until / 1000);
		dl.tv_nsec = (long)(until % 1000) * 1000000L;
		pthread_cond_timedwait(&e->cond, &e->lock, &dl);
		if (step_ms < 32)
			step_ms *= 2;
	}
	pid_t pid = e->pid;
	pthread_mutex_unlock(&e->lock);
	return pid;
}

/* ---- results ------------------------------------------------------------ */

static json_t *output_json(struct dexec *e, const char *buf, size_t len)
{
	if (!e->base64)
		return json_text(buf, len);
	char *b = sandlot__base64_encode_alloc(buf, len, &len);
	json_t *s = b ? json_stringn(b, len) : NULL;
	free(b);
	return s ? s : json_string("");
}

/* The retained output of one stream, concatenated.  e->lock held. */
static char *collect_locked(struct dexec *e, int stream, size_t *len)
{
	size_t n = 0;
	for (struct chunk *c = e->head; c; c = c->next)
		if (c->stream == stream)
			n += c->len;
	char *buf = malloc(n + 1);
	if (!buf) {
		*len = 0;
		return NULL;
	}
	size_t o = 0;
	for (struct chunk *c = e->head; c; c = c->next)
		if (c->stream == stream) {
			memcpy(buf + o, c->data, c->len);
			o += c->len;
		}
	*len = o;
	return buf;
}

/* Add "stdout" and "stderr" (what was retained) to o. */
static void add_output(struct dexec *e, json_t *o)
{
	size_t lo, le;
	pthread_mutex_lock(&e->lock);
	char *out = collect_locked(e, SANDLOT_STDOUT, &lo);
	char *err = collect_locked(e, SANDLOT_STDERR, &le);
	pthread_mutex_unlock(&e->lock);
	json_object_set_new(o, "stdout", output_json(e, out, lo));
	json_object_set_new(o, "stderr", output_json(e, err, le));
	free(out);
	free(err);
}

static json_t *build_result(struct dexec *e, json_t *changes, int changes_truncated,
			    uint64_t cursor)
{
	const sandlot_exit_t *x = &e->ex;
	json_t *o = json_object();
	json_object_set_new(o, "exec_id", json_string(e->id));
	json_object_set_new(o, "exit_code",
			    x->signal || x->exit_code < 0 ? json_null() : json_integer(x->exit_code));
	json_object_set_new(o, "signal", x->signal ? json_integer(x->signal) : json_null());
	json_object_set_new(o, "timed_out", json_boolean(x->timed_out));
	json_object_set_new(o, "oom_killed", json_boolean(x->oom_killed));
	json_object_set_new(o, "pids_limited", json_boolean(x->pids_limited));
	pthread_mutex_lock(&e->lock);
	int truncated = e->truncated;
	pthread_mutex_unlock(&e->lock);
	json_object_set_new(o, "truncated", json_boolean(truncated));
	json_object_set_new(o, "duration_ms", json_integer((json_int_t)x->duration_ms));
	if (x->start_error)
		json_object_set_new(o, "error", json_string(x->error));
	json_object_set_new(o, "changes", changes);
	json_object_set_new(o, "changes_truncated", json_boolean(changes_truncated));
	json_object_set_new(o, "cursor", json_integer((json_int_t)cursor));
	return o;
}

static void count_finished(struct daemon *d, const sandlot_exit_t *x)
{
	static const uint64_t bounds[7] = { 10, 50, 100, 500, 1000, 5000, 30000 };
	__atomic_add_fetch(&d->m.execs_finished, 1, __ATOMIC_RELAXED);
	if (x->start_error)
		__atomic_add_fetch(&d->m.exec_failures, 1, __ATOMIC_RELAXED);
	if (x->timed_out)
		__atomic_add_fetch(&d->m.exec_timeouts, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->m.exec_ms_sum, x->duration_ms, __ATOMIC_RELAXED);
	int b = 0;
	while (b < 7 && x->duration_ms > bounds[b])
		b++;
	__atomic_add_fetch(&d->m.exec_ms_bucket[b], 1, __ATOMIC_RELAXED);
}

/* Run once the command has ended (e->exited): free the proc, record the
 * workspace changes it made, build the result, count it.  Exactly one
 * caller does the work; a second returns at once (it then waits for
 * e->finished itself if it needs the result). */
static void finish_exec(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	int skip = e->finishing || !e->exited;
	e->finishing = 1;
	int released = e->released;
	pthread_mutex_unlock(&e->lock);
	if (skip)
		return;
	proc_free(e);

	json_t *changes = NULL;
	int changes_truncated = 1; /* unless a scan says what changed */
	if (!released && sandbox_live(e->s)) {
		sandlot_error_t *err = NULL;
		if (dsb_scan_changes(e->d, e->s, e->id, &changes, &changes_truncated, &err) < 0) {
			daemon_log("exec_changes_failed", "sandbox=%s exec=%s error=\"%s\"", e->s->id,
				   e->id, err ? sandlot_error_message(err) : "?");
			sandlot_error_free(err);
			changes = NULL;
			changes_truncated = 1;
		}
	}
	if (!changes)
		changes = json_array();
	json_t *result = build_result(e, changes, changes_truncated, latest_cursor(e->s));
	char *text = json_dumps(result, JSON_COMPACT);
	count_finished(e->d, &e->ex);
	const sandlot_exit_t *x = &e->ex;
	daemon_log("exec_end",
		   "sandbox=%s exec=%s mode=%s exit_code=%d signal=%d timed_out=%d oom=%d "
		   "duration_ms=%" PRIu64 "%s%s%s",
		   e->s->id, e->id, mode_names[e->mode], x->exit_code, x->signal, x->timed_out,
		   x->oom_killed, x->duration_ms, x->start_error ? " error=\"" : "",
		   x->start_error ? x->error : "", x->start_error ? "\"" : "");

	pthread_mutex_lock(&e->lock);
	e->result = result;
	e->result_text = text;
	e->finished = 1;
	int busy = e->busy_held;
	e->busy_held = 0;
	notify_locked(e, 0);
	pthread_mutex_unlock(&e->lock);
	/* The command and its proc are gone: the sandbox may now be idle (or
	 * destroyed), even if a slow client is still reading the stream. */
	if (busy)
		dsb_busy(e->s, -1);
}

static void finish_and_wait(struct dexec *e)
{
	finish_exec(e);
	pthread_mutex_lock(&e->lock);
	while (!e->finished)
		pthread_cond_wait(&e->cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
}

/* ExecStatus.  With output, the retained stdout/stderr (none for streamed
 * execs: their output went to the stream). */
static json_t *exec_status(struct dexec *e, int with_output)
{
	json_t *o = json_object();
	json_object_set_new(o, "exec_id", json_string(e->id));
	pthread_mutex_lock(&e->lock);
	int finished = e->finished, truncated = e->truncated;
	pid_t pid = e->pid;
	json_t *result = finished ? json_deep_copy(e->result) : NULL;
	pthread_mutex_unlock(&e->lock);
	json_object_set_new(o, "state", json_string(finished ? "exited" : "running"));
	/* A copy, as sandboxes.c copies options and metadata: the answer is
	 * written out after exec_unref(), and the last reference to e may go
	 * in another thread.  jansson's reference count is atomic, but its
	 * last decrement has no acquire ordering (and ThreadSanitizer, which
	 * does not see into the library, reported the free racing with the
	 * writer's read of a shared command). */
	json_object_set_new(o, "command", json_deep_copy(e->command));
	json_object_set_new(o, "mode", json_string(mode_names[e->mode]));
	json_object_set_new(o, "output", json_string(e->base64 ? "base64" : "text"));
	json_object_set_new(o, "started_at", json_time(e->started_ms));
	json_object_set_new(o, "pid", pid > 0 ? json_integer(pid) : json_null());
	json_object_set_new(o, "truncated", json_boolean(truncated));
	if (with_output && e->mode != MODE_STREAM)
		add_output(e, o);
	if (result)
		json_object_set_new(o, "result", result);
	return o;
}

/* ---- history ------------------------------------------------------------ */

/* Insert e (newest first) and drop the oldest finished execs while the
 * list is over HISTORY_MAX entries or finished execs hold more than
 * HISTORY_BYTES of output and results (the newest finished one is always
 * kept).  A result counts four times its serialised size, about what its
 * JSON tree and text take: its changes array may be up to
 * --changes-answer-bytes, and 64 of those must not stay around.
 * Running execs are never dropped.  s->lock held.  Takes a reference for
 * the list. */
static void history_add_locked(struct dsb *s, struct dexec *e)
{
	exec_ref(e);
	e->next = s->execs;
	s->execs = e;
	s->nexecs++;
	unsigned seen = 0, finished = 0;
	size_t bytes = 0;
	for (struct dexec **pp = &s->execs; *pp;) {
		struct dexec *x = *pp;
		seen++;
		pthread_mutex_lock(&x->lock);
		int done = x->finished;
		size_t kept = x->kept[1] + x->kept[2] +
			      (x->result_text ? 4 * strlen(x->result_text) : 0);
		pthread_mutex_unlock(&x->lock);
		if (done) {
			finished++;
			bytes += kept;
			if (seen > HISTORY_MAX || (finished > 1 && bytes > HISTORY_BYTES)) {
				*pp = x->next;
				s->nexecs--;
				seen--;
				exec_unref(x);
				continue;
			}
		}
		pp = &x->next;
	}
}

static void history_remove(struct dsb *s, struct dexec *e)
{
	int found = 0;
	pthread_mutex_lock(&s->lock);
	for (struct dexec **pp = &s->execs; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			s->nexecs--;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	if (found)
		exec_unref(e);
}

/* The exec `id` of s with a reference, or NULL. */
static struct dexec *history_find(struct dsb *s, const char *id)
{
	struct dexec *found = NULL;
	pthread_mutex_lock(&s->lock);
	for (struct dexec *e = s->execs; e; e = e->next)
		if (strcmp(e->id, id) == 0) {
			exec_ref(e);
			found = e;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	return found;
}

void execs_release(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	struct dexec *list = s->execs;
	s->execs = NULL;
	s->nexecs = 0;
	pthread_mutex_unlock(&s->lock);

	/* Let any start in progress finish (it then has its proc), then kill. */
	for (struct dexec *e = list; e; e = e->next) {
		pthread_mutex_lock(&e->lock);
		e->released = 1;
		while (e->starting)
			pthread_cond_wait(&e->cond, &e->lock);
		pthread_mutex_unlock(&e->lock);
		exec_discard_output(e);
		exec_kill(e, SIGKILL, NULL);
	}

	/* Finish what has ended (frees the proc and drops the busy count even
	 * when the exec's own thread is a stream stalled on a slow client).
	 * An exec that outlives KILL_WAIT_MS (stuck in the kernel) is left to
	 * its own thread: it ends at the latest when the caller kills the
	 * sandbox's init, and that thread holds the sandbox busy until it has
	 * freed the proc, so the handle is never destroyed under it. */
	struct timespec dl;
	sandlot__deadline_in(&dl, CLOCK_MONOTONIC, KILL_WAIT_MS);
	for (struct dexec *e = list; e; e = e->next) {
		pthread_mutex_lock(&e->lock);
		int rc = 0;
		while (!e->exited && rc == 0)
			rc = pthread_cond_timedwait(&e->cond, &e->lock, &dl);
		int exited = e->exited;
		pthread_mutex_unlock(&e->lock);
		if (exited)
			finish_exec(e);
		else
			daemon_log("exec_slow_to_die", "level=warn sandbox=%s exec=%s", s->id, e->id);
	}
	while (list) {
		struct dexec *n = list->next;
		exec_unref(list);
		list = n;
	}
}

/* ---- request parsing ---------------------------------------------------- */

void domain_exec_req_free(struct domain_exec_req *r)
{
	free(r->argv);
	for (size_t i = 0; r->env && r->env[i]; i++)
		free(r->env[i]);
	free(r->env);
	free(r->stdin_data);
	json_decref(r->command);
	memset(r, 0, sizeof(*r));
}

/* A JSON string without NUL bytes (jansson may allow \u0000). */
static int plain_string(json_t *v)
{
	return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

#define BAD(...) (snprintf(msg, msz, __VA_ARGS__), -1)

static int parse_exec_req(json_t *body, struct domain_exec_req *r, char *msg, size_t msz)
{
	memset(r, 0, sizeof(*r));
	r->timeout_ms = DEFAULT_TIMEOUT_MS;
	r->limit = DEFAULT_OUTPUT_LIMIT;
	if (!json_is_object(body))
		return BAD("the body must be a JSON object with \"command\" or \"argv\"");
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		if (strcmp(key, "command") == 0 || strcmp(key, "argv") == 0 ||
		    strcmp(key, "stdin") == 0 || strcmp(key, "stdin_base64") == 0) {
			/* below */
		} else if (strcmp(key, "cwd") == 0) {
			if (!plain_string(v) || !json_string_length(v))
				return BAD("\"cwd\" must be a non-empty string");
			r->cwd = json_string_value(v);
		} else if (strcmp(key, "env") == 0) {
			if (!json_is_object(v))
				return BAD("\"env\" must be an object of strings");
			size_t n = json_object_size(v), i = 0;
			r->env = calloc(n + 1, sizeof(char *));
			if (!r->env)
				return BAD("out of memory");
			const char *k;
			json_t *ev;
			json_object_foreach(v, k, ev) {
				if (!*k || strchr(k, '='))
					return BAD("\"env\": invalid variable name \"%s\"", k);
				if (!plain_string(ev))
					return BAD("\"env\": the value of \"%s\" must be a string", k);
				if (asprintf(&r->env[i], "%s=%s", k, json_string_value(ev)) < 0) {
					r->env[i] = NULL;
					return BAD("out of memory");
				}
				i++;
			}
		} else if (strcmp(key, "timeout_ms") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return BAD("\"timeout_ms\" must be an integer >= 0 (0 = no timeout)");
			r->timeout_ms = (uint64_t)json_integer_value(v);
		} else if (strcmp(key, "background") == 0) {
			if (!json_is_boolean(v))
				return BAD("\"background\" must be true or false");
			r->background = json_is_true(v);
		} else if (strcmp(key, "output") == 0) {
			const char *o = json_string_value(v);
			if (!o || (strcmp(o, "text") != 0 && strcmp(o, "base64") != 0))
				return BAD("\"output\" must be \"text\" or \"base64\"");
			r->base64 = strcmp(o, "base64") == 0;
		} else if (strcmp(key, "output_limit") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > (json_int_t)MAX_OUTPUT_LIMIT)
				return BAD("\"output_limit\" must be an integer from 0 to %u", MAX_OUTPUT_LIMIT);
			r->limit = (size_t)json_integer_value(v);
		} else {
			return BAD("unknown field \"%s\"", key);
		}
	}

	json_t *command = json_object_get(body, "command"), *argv = json_object_get(body, "argv");
	if ((command != NULL) == (argv != NULL))
		return BAD("give exactly one of \"command\" (a shell string) and \"argv\" (an array)");
	r->command = json_array();
	if (command) {
		if (!plain_string(command))
			return BAD("\"command\" must be a string");
		r->argv = calloc(4, sizeof(char *));
		if (!r->argv)
			return BAD("out of memory");
		r->argv[0] = "/bin/sh";
		r->argv[1] = "-c";
		r->argv[2] = json_string_value(command);
		for (int i = 0; i < 3; i++)
			json_array_append_new(r->command, json_string(r->argv[i]));
	} else {
		if (!json_is_array(argv) || json_array_size(argv) == 0)
			return BAD("\"argv\" must be a non-empty array of strings");
		size_t n = json_array_size(argv);
		r->argv = calloc(n + 1, sizeof(char *));
		if (!r->argv)
			return BAD("out of memory");
		for (size_t i = 0; i < n; i++) {
			json_t *a = json_array_get(argv, i);
			if (!plain_string(a))
				return BAD("\"argv\"[%zu] must be a string", i);
			r->argv[i] = json_string_value(a);
			json_array_append_new(r->command, json_string(r->argv[i]));
		}
		if (!r->argv[0][0])
			return BAD("\"argv\"[0] must not be empty");
	}

	json_t *in = json_object_get(body, "stdin"), *in64 = json_object_get(body, "stdin_base64");
	if (in && in64)
		return BAD("give at most one of \"stdin\" and \"stdin_base64\"");
	if (in) {
		if (!json_is_string(in))
			return BAD("\"stdin\" must be a string");
		r->stdin_len = json_string_length(in);
		r->stdin_data = malloc(r->stdin_len + 1);
		if (!r->stdin_data)
			return BAD("out of memory");
		memcpy(r->stdin_data, json_string_value(in), r->stdin_len);
		r->has_stdin = 1;
	} else if (in64) {
		if (!json_is_string(in64))
			return BAD("\"stdin_base64\" must be a string");
		size_t n = json_string_length(in64);
		r->stdin_data = malloc(sandlot__base64_decoded_max(n));
		if (!r->stdin_data)
			return BAD("out of memory");
		ssize_t got = sandlot__base64_decode(json_string_value(in64), n, r->stdin_data);
		if (got < 0)
			return BAD("\"stdin_base64\" is not valid base64");
		r->stdin_len = (size_t)got;
		r->has_stdin = 1;
	}
	return 0;
}

#undef BAD

int domain_exec_parse(json_t *body, struct domain_exec_req *r, sandlot_error_t **err)
{
	char msg[512];
	if (parse_exec_req(body, r, msg, sizeof(msg)) < 0)
		return sandlot__error(err, EINVAL, "%s", msg);
	return 0;
}

/* ---- starting ----------------------------------------------------------- */

struct feeder {
	struct dexec *e;
	unsigned char *data;
	size_t len;
	int close;
};

/* Write to the exec's stdin (and close it if asked). 0 or -1. */
static int feed_stdin(struct dexec *e, const void *data, size_t len, int close_after,
		      sandlot_error_t **err)
{
	sandlot_proc_t *p = proc_get(e);
	if (!p)
		return sandlot__error(err, EPIPE, "stdin: the command has ended");
	int rc = sandlot_proc_write_stdin(p, data, len, err);
	if (rc == 0 && close_after)
		rc = sandlot_proc_close_stdin(p, err);
	proc_put(e);
	if (close_after) {
		pthread_mutex_lock(&e->lock);
		e->stdin_closed = 1;
		pthread_mutex_unlock(&e->lock);
	}
	return rc;
}

static void *feeder_main(void *arg)
{
	struct feeder *f = arg;
	feed_stdin(f->e, f->data, f->len, f->close, NULL);
	pthread_mutex_lock(&f->e->lock);
	f->e->stdin_busy = 0;
	pthread_mutex_unlock(&f->e->lock);
	exec_unref(f->e);
	free(f->data);
	free(f);
	return NULL;
}

static int start_detached(void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, WATCHER_STACK);
	pthread_t t;
	int rc = pthread_create(&t, &a, fn, arg);
	pthread_attr_destroy(&a);
	return rc;
}

/* Start the command of r as e in s.  0, or -1 with err (e is then out of
 * the history; the caller drops its ref). */
static int exec_launch(struct dsb *s, struct dexec *e, struct domain_exec_req *r,
		       sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->state == DSB_RUNNING ? s->sb : NULL;
	if (sb) {
		e->starting = 1;
		history_add_locked(s, e);
	}
	pthread_mutex_unlock(&s->lock);
	if (!sb)
		return domain_error_ended(s, err);

	e->stdin_pipe = r->has_stdin || r->background;
	sandlot_exec_spec_t spec = {
		.size = sizeof(spec), .argv = r->argv,
		.env = (const char *const *)r->env,
		.cwd = r->cwd,
		.stdin_pipe = e->stdin_pipe,
		.timeout_ms = r->timeout_ms,
	};
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .on_exit = on_exit_cb, .userdata = e };
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, err);
	pthread_mutex_lock(&e->lock);
	e->proc = p;
	e->starting = 0;
	if (p && e->pid == 0)
		e->pid = sandlot_proc_pid(p);
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	if (!p) {
		history_remove(s, e);
		__atomic_add_fetch(&e->d->m.exec_failures, 1, __ATOMIC_RELAXED);
		return -1;
	}
	__atomic_add_fetch(&e->d->m.execs_started, 1, __ATOMIC_RELAXED);

	if (r->has_stdin) {
		pthread_mutex_lock(&e->lock);
		e->stdin_busy = 1;
		pthread_mutex_unlock(&e->lock);
		struct feeder *f = NULL;
		if (r->stdin_len > STDIN_INLINE && (f = calloc(1, sizeof(*f)))) {
			/* More than the first credit window: the command may have to
			 * read some before it is all in, while we already serve its
			 * output, so a thread of its own feeds it. */
			f->e = e;
			f->data = r->stdin_data;
			f->len = r->stdin_len;
			f->close = 1;
			exec_ref(e);
			if (start_detached(feeder_main, f) == 0) {
				r->stdin_data = NULL;
				return 0;
			}
			exec_unref(e);
			free(f);
		}
		/* Within the credit window the write never blocks. */
		feed_stdin(e, r->stdin_data, r->stdin_len, 1, NULL);
		pthread_mutex_lock(&e->lock);
		e->stdin_busy = 0;
		pthread_mutex_unlock(&e->lock);
	}
	return 0;
}

/* ---- NDJSON streams: the exec's own, and followers ---------------------- */

enum phase { PH_START, PH_DATA, PH_FLUSH, PH_EXIT, PH_DONE };

struct stream {
	struct daemon *d;
	struct dsb *s;
	struct dexec *e;
	struct waiter *w;
	int waited;                 /* the last read parked on w */
	int owner;                  /* the exec's own stream (queue) vs a follower */
	enum phase phase;
	/* follower's position in the retained chunks */
	struct chunk *cur;
	size_t cur_off;
	char *piece;                /* EVENT_MAX bytes copied out of the chunks */
	/* text mode: a UTF-8 sequence split at the end of the last event */
	char carry[3][4];
	size_t carry_len[3];
	/* NDJSON bytes produced and not yet handed to libmicrohttpd */
	char *buf;
	size_t len, off, cap;
};

static int buf_add(struct stream *st, const char *data, size_t len)
{
	if (st->len + len > st->cap) {
		size_t cap = st->cap ? st->cap : 4096;
		while (cap < st->len + len)
			cap *= 2;
		char *nb = realloc(st->buf, cap);
		if (!nb)
			return -1;
		st->buf = nb;
		st->cap = cap;
	}
	memcpy(st->buf + st->len, data, len);
	st->len += len;
	return 0;
}

static int buf_add_json(struct stream *st, json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!text)
		return -1;
	int rc = buf_add(st, text, strlen(text));
	free(text);
	return rc < 0 ? -1 : buf_add(st, "\n", 1);
}

/* One stdout/stderr event.  In text mode a trailing incomplete UTF-8
 * sequence is carried over to the next event of the stream unless final. */
static int emit_data(struct stream *st, int stream, const char *data, size_t len, int final)
{
	char *tmp = NULL;
	struct dexec *e = st->e;
	if (!e->base64) {
		size_t cl = st->carry_len[stream];
		if (cl) {
			tmp = malloc(cl + len);
			if (!tmp)
				return -1;
			memcpy(tmp, st->carry[stream], cl);
			memcpy(tmp + cl, data, len);
			data = tmp;
			len += cl;
			st->carry_len[stream] = 0;
		}
		if (!final) {
			size_t keep = utf8_incomplete_tail(data, len);
			memcpy(st->carry[stream], data + len - keep, keep);
			st->carry_len[stream] = keep;
			len -= keep;
		}
	}
	int rc = 0;
	if (len > 0) {
		json_t *o = json_object();
		json_object_set_new(o, "type", json_string(stream == SANDLOT_STDERR ? "stderr" : "stdout"));
		json_object_set_new(o, "data", output_json(e, data, len));
		rc = buf_add_json(st, o);
	}
	free(tmp);
	return rc;
}

/* Owner: take the next queued piece of output.  e->lock held; sets
 * *resume when the exec was paused and the queue is now low. */
static struct chunk *queue_pop_locked(struct dexec *e, int *resume)
{
	struct chunk *c = e->head;
	if (!c)
		return NULL;
	e->head = c->next;
	if (!e->head)
		e->tail = NULL;
	e->queued -= c->len;
	if (e->paused && e->queued < QUEUE_LOW) {
		e->paused = 0;
		*resume = 1;
	}
	return c;
}

/* Produce the next NDJSON line(s) into st->buf.  Returns 1 when it made
 * progress, 0 when the caller has to wait (up to *wait_ms) for news. */
static int stream_step(struct stream *st, int *wait_ms)
{
	struct dexec *e = st->e;
	*wait_ms = 30000;
	switch (st->phase) {
	case PH_START: {
		pid_t pid = wait_pid(e, PID_WAIT_MS);
		json_t *o = json_object();
		json_object_set_new(o, "type", json_string("start"));
		json_object_set_new(o, "exec_id", json_string(e->id));
		json_object_set_new(o, "pid", pid > 0 ? json_integer(pid) : json_null());
		json_object_set_new(o, "output", json_string(e->base64 ? "base64" : "text"));
		st->phase = PH_DATA;
		return buf_add_json(st, o) < 0 ? -1 : 1;
	}
	case PH_DATA: {
		if (st->owner) {
			int resume = 0;
			pthread_mutex_lock(&e->lock);
			struct chunk *c = queue_pop_locked(e, &resume);
			int exited = e->exited;
			pthread_mutex_unlock(&e->lock);
			if (resume) {
				sandlot_proc_t *p = proc_get(e);
				if (p) {
					sandlot_proc_resume_output(p);
					proc_put(e);
				}
			}
			if (c) {
				int rc = emit_data(st, c->stream, c->data, c->len, 0);
				free(c);
				return rc < 0 ? -1 : 1;
			}
			if (!exited)
				return 0;
			/* on_exit comes after the last output: all of it is out. */
			st->phase = PH_FLUSH;
			return 1;
		}
		/* follower: walk the retained chunks */
		if (!st->piece && !(st->piece = malloc(EVENT_MAX)))
			return -1;
		char *piece = st->piece;
		size_t n = 0;
		int stream = 0;
		pthread_mutex_lock(&e->lock);
		if (e->mode != MODE_STREAM) {
			if (!st->cur && e->head) {
				st->cur = e->head;
				st->cur_off = 0;
			}
			while (st->cur && st->cur_off == st->cur->len && st->cur->next) {
				st->cur = st->cur->next;
				st->cur_off = 0;
			}
			if (st->cur && st->cur_off < st->cur->len) {
				n = st->cur->len - st->cur_off;
				if (n > EVENT_MAX)
					n = EVENT_MAX;
				memcpy(piece, st->cur->data + st->cur_off, n);
				stream = st->cur->stream;
				st->cur_off += n;
			}
		}
		int finished = e->finished;
		pthread_mutex_unlock(&e->lock);
		if (n > 0)
			return emit_data(st, stream, piece, n, 0) < 0 ? -1 : 1;
		if (!finished)
			return 0;
		st->phase = PH_FLUSH;
		return 1;
	}
	case PH_FLUSH:
		/* What is left of split UTF-8 sequences, then the result. */
		for (int k = 1; k <= 2; k++)
			if (st->carry_len[k] && emit_data(st, k, "", 0, 1) < 0)
				return -1;
		if (st->owner)
			finish_exec(e);
		st->phase = PH_EXIT;
		return 1;
	case PH_EXIT: {
		pthread_mutex_lock(&e->lock);
		while (!e->finished)
			pthread_cond_wait(&e->cond, &e->lock);
		pthread_mutex_unlock(&e->lock);
		/* result_text is immutable once finished */
		static const char head[] = "{\"type\":\"exit\",\"result\":";
		if (buf_add(st, head, sizeof(head) - 1) < 0 ||
		    buf_add(st, e->result_text ? e->result_text : "null",
			    e->result_text ? strlen(e->result_text) : 4) < 0 ||
		    buf_add(st, "}\n", 2) < 0)
			return -1;
		st->phase = PH_DONE;
		return 1;
	}
	case PH_DONE:
		break;
	}
	return 1;
}

/* The stream's read function (http.h): NDJSON lines, or HTTP_STREAM_WAIT
 * on the stream's waiter eventfd when the exec has nothing new. */
static ssize_t stream_read(void *ud, char *out, size_t max, struct http_wait *w)
{
	struct stream *st = ud;
	for (;;) {
		if (st->off < st->len) {
			size_t n = st->len - st->off;
			if (n > max)
				n = max;
			memcpy(out, st->buf + st->off, n);
			st->off += n;
			return (ssize_t)n;
		}
		st->len = st->off = 0;
		if (st->phase == PH_DONE)
			return 0;
		int fd = waiter_fd(st->w);
		if (st->waited) {
			/* Before looking: news after this wakes the next wait. */
			drain_fd(fd);
			st->waited = 0;
		}
		int wait_ms;
		int rc = stream_step(st, &wait_ms);
		if (rc < 0)
			return HTTP_STREAM_ERROR;
		if (rc > 0)
			continue;
		/* Nothing new: park (a client that goes away meanwhile ends the
		 * stream, and stream_free kills the command). */
		st->waited = 1;
		w->fd = fd;
		w->timeout_ms = fd < 0 && wait_ms > 20 ? 20 : wait_ms;
		return HTTP_STREAM_WAIT;
	}
}

static void stream_free(void *ud, int completed)
{
	struct stream *st = ud;
	struct dexec *e = st->e;
	if (st->owner) {
		pthread_mutex_lock(&e->lock);
		int finished = e->finished;
		pthread_mutex_unlock(&e->lock);
		if (!finished) {
			/* The client went away (or the response failed): a
			 * disconnect kills the command. */
			exec_discard_output(e);
			exec_kill(e, SIGKILL, NULL);
			wait_exited(e);
			finish_exec(e);
		}
	}
	waiter_remove(e, st->w);
	dsb_release(st->d, st->s);
	exec_unref(e);
	free(st->buf);
	free(st->piece);
	free(st);
}

/* Answer req with an NDJSON stream of e.  Takes its own references (exec
 * and sandbox hold).  The owner stream (the exec's own) finishes the exec,
 * and kills the command when the client leaves. */
static int stream_answer(struct http_req *req, struct dsb *s, struct dexec *e, int owner)
{
	struct stream *st = calloc(1, sizeof(*st));
	if (!st)
		return -1;
	st->d = req->d;
	st->s = s;
	st->e = e;
	st->owner = owner;
	st->w = waiter_add(e, 1);
	exec_ref(e);
	dsb_hold(s);
	http_stream(req, 200, "application/x-ndjson", stream_read, stream_free, st);
	return 0;
}

/* ---- background execs --------------------------------------------------- */

static void *watcher_main(void *arg)
{
	struct dexec *e = arg;
	wait_exited(e);
	finish_exec(e);
	dsb_release(e->d, e->s);
	exec_unref(e);
	return NULL;
}

/* ---- routes ------------------------------------------------------------- */

/* Buffered: the request parks until the command ends (a client that hangs
 * up kills it), then answers with the result. */
struct buffered {
	struct dsb *s;
	struct dexec *e;
	struct waiter *w;
};

static void buffered_answer(struct http_req *req, struct buffered *b)
{
	waiter_remove(b->e, b->w);
	finish_and_wait(b->e);
	json_t *o = json_deep_copy(b->e->result);
	add_output(b->e, o);
	http_json(req, 200, o);
	exec_unref(b->e);
	dsb_put(req->d, b->s);
	free(b);
	req->state = NULL;
}

static void buffered_wait(struct http_req *req, int why)
{
	struct buffered *b = req->state;
	struct dexec *e = b->e;
	int fd = waiter_fd(b->w);
	if (why == HTTP_WAKE_GONE || why == HTTP_WAKE_STOP) {
		exec_discard_output(e);
		exec_kill(e, SIGKILL, NULL);
		wait_exited(e);
		buffered_answer(req, b);
		return;
	}
	/* Drain before looking: news after this wakes the next wait. */
	drain_fd(fd);
	pthread_mutex_lock(&e->lock);
	int exited = e->exited;
	pthread_mutex_unlock(&e->lock);
	if (exited) {
		buffered_answer(req, b);
		return;
	}
	http_park(req, fd, fd < 0 ? 20 : 30000, buffered_wait);
}

/* Make and start the exec of r in s ("got") in `mode`: *ep (a reference
 * of the caller's) and, buffered, its waiter *wp.  Streamed and background
 * execs hold a busy count of their own (finish_exec drops it).  0, or -1
 * with err (ESHUTDOWN, DOMAIN_EENDED, ENOMEM, sandlot_exec's). */
static int exec_begin(struct daemon *d, struct dsb *s, struct domain_exec_req *r, enum mode mode,
		      struct dexec **ep, struct waiter **wp, sandlot_error_t **err)
{
	if (__atomic_load_n(&d->stopping, __ATOMIC_RELAXED))
		return sandlot__error(err, ESHUTDOWN, "sandlotd is shutting down");
	struct dexec *e = exec_new(d, s, mode);
	if (!e)
		return sandlot__error(err, ENOMEM, "out of memory");
	e->base64 = r->base64;
	e->limit = r->limit;
	e->command = json_incref(r->command);
	/* Registered before the start so that no wake-up is missed.  Only the
	 * end wakes it: a buffered answer has nothing to do with output as it
	 * comes, and each wake-up is a round through the parking thread and a
	 * worker (two per exec of a command that prints a line). */
	struct waiter *w = mode == MODE_BUFFERED ? waiter_add(e, 0) : NULL;
	/* Streamed and background execs outlive this request's busy count:
	 * they hold one of their own until finish_exec. */
	if (mode != MODE_BUFFERED) {
		e->busy_held = 1;
		dsb_busy(s, +1);
	}
	if (exec_launch(s, e, r, err) < 0) {
		if (e->busy_held) {
			e->busy_held = 0;
			dsb_busy(s, -1);
		}
		waiter_remove(e, w);
		exec_unref(e);
		return -1;
	}
	*ep = e;
	if (wp)
		*wp = w;
	return 0;
}

/* A background exec runs on its own: its watcher thread finishes it.  The
 * status to answer (pid once init has started it), or NULL with err (it
 * was killed then). */
static json_t *exec_detach(struct dexec *e, sandlot_error_t **err)
{
	exec_ref(e);
	dsb_hold(e->s);
	if (start_detached(watcher_main, e) != 0) {
		exec_kill(e, SIGKILL, NULL);
		watcher_main(e);
		sandlot__error(err, EAGAIN, "could not start a thread for the exec");
		return NULL;
	}
	wait_pid(e, PID_WAIT_MS);
	return exec_status(e, 0);
}

json_t *domain_exec_start(struct daemon *d, struct dsb *s, struct domain_exec_req *r,
			  sandlot_error_t **err)
{
	struct dexec *e;
	r->background = 1; /* a stdin pipe, as for background execs of the API */
	if (exec_begin(d, s, r, MODE_BACKGROUND, &e, NULL, err) < 0)
		return NULL;
	json_t *o = exec_detach(e, err);
	exec_unref(e);
	return o;
}

static int handle_exec(struct http_req *req)
{
	struct daemon *d = req->d;
	struct domain_exec_req r;
	sandlot_error_t *err = NULL;
	if (domain_exec_parse(req->json, &r, &err) < 0) {
		domain_exec_req_free(&r);
		http_error_from(req, err);
		sandlot_error_free(err);
		return 0;
	}
	if (__atomic_load_n(&d->stopping, __ATOMIC_RELAXED)) {
		domain_exec_req_free(&r);
		return http_error(req, 503, "shutting_down", "sandlotd is shutting down");
	}
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s) {
		domain_exec_req_free(&r);
		return 0;
	}
	enum mode mode = r.background ? MODE_BACKGROUND
		: http_wants_ndjson(req) ? MODE_STREAM : MODE_BUFFERED;
	struct dexec *e;
	struct waiter *w = NULL;
	int rc = exec_begin(d, s, &r, mode, &e, &w, &err);
	domain_exec_req_free(&r);
	if (rc < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
		dsb_put(d, s);
		return 0;
	}

	switch (mode) {
	case MODE_BUFFERED: {
		struct buffered *b = malloc(sizeof(*b));
		if (!b) {
			exec_discard_output(e);
			exec_kill(e, SIGKILL, NULL);
			wait_exited(e);
			waiter_remove(e, w);
			finish_and_wait(e);
			http_error(req, 500, "internal", "out of memory");
			break;
		}
		/* The wait owns the request's exec reference and dsb_get(). */
		*b = (struct buffered){ .s = s, .e = e, .w = w };
		req->state = b;
		buffered_wait(req, HTTP_WAKE_READY);
		return 0;
	}
	case MODE_STREAM:
		if (stream_answer(req, s, e, 1) < 0) {
			exec_discard_output(e);
			exec_kill(e, SIGKILL, NULL);
			wait_exited(e);
			finish_exec(e);
			http_error(req, 500, "internal", "out of memory");
		}
		break;
	case MODE_BACKGROUND: {
		json_t *o = exec_detach(e, &err);
		if (!o) {
			http_error(req, 500, "internal", "%s", sandlot_error_message(err));
			sandlot_error_free(err);
		} else {
			http_json(req, 202, o);
		}
		break;
	}
	}
	exec_unref(e);
	dsb_put(d, s);
	return 0;
}

static int valid_exec_id(const char *id)
{
	if (strncmp(id, "ex-", 3) != 0 || strlen(id) != 29)
		return 0;
	for (const char *p = id + 3; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '2' && *p <= '7')))
			return 0;
	return 1;
}

/* Exec `id` of s, with a reference (exec_unref), or NULL with EINVAL (a
 * malformed id) or ENOENT. */
static struct dexec *exec_find(struct dsb *s, const char *id, sandlot_error_t **err)
{
	if (!valid_exec_id(id)) {
		sandlot__error(err, EINVAL, "invalid exec id \"%.40s\"", id);
		return NULL;
	}
	struct dexec *e = history_find(s, id);
	if (!e)
		sandlot__error(err, ENOENT, "no exec %s in sandbox %s", id, s->id);
	return e;
}

/* dsb_get + exec lookup for the /execs/{exec} routes.  On failure answers
 * and returns NULL. */
static struct dexec *get_exec(struct http_req *req, struct dsb **sp)
{
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return NULL;
	sandlot_error_t *err = NULL;
	struct dexec *e = exec_find(s, req->params[1], &err);
	if (!e) {
		dsb_put(req->d, s);
		http_error_from(req, err);
		sandlot_error_free(err);
		return NULL;
	}
	*sp = s;
	return e;
}

/* ---- the domain's exec calls (domain.h) -------------------------------------- */

json_t *domain_exec_list(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	(void)d;
	/* References under s->lock, JSON outside it (results can be big). */
	size_t n = 0;
	pthread_mutex_lock(&s->lock);
	struct dexec **list = calloc(s->nexecs + 1, sizeof(*list));
	for (struct dexec *e = s->execs; list && e && n < s->nexecs; e = e->next) {
		exec_ref(e);
		list[n++] = e;
	}
	pthread_mutex_unlock(&s->lock);
	if (!list) {
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	/* Running first, then newest first. */
	json_t *running = json_array(), *done = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *st = exec_status(list[i], 0);
		const char *state = json_string_value(json_object_get(st, "state"));
		json_array_append_new(state && strcmp(state, "running") == 0 ? running : done, st);
		exec_unref(list[i]);
	}
	free(list);
	json_array_extend(running, done);
	json_decref(done);
	return running;
}

json_t *domain_exec_get(struct daemon *d, struct dsb *s, const char *id, sandlot_error_t **err)
{
	(void)d;
	struct dexec *e = exec_find(s, id, err);
	if (!e)
		return NULL;
	json_t *o = exec_status(e, 1);
	exec_unref(e);
	return o;
}

json_t *domain_exec_wait(struct daemon *d, struct dsb *s, const char *id, uint64_t timeout_ms,
			 sandlot_error_t **err)
{
	(void)d;
	struct dexec *e = exec_find(s, id, err);
	if (!e)
		return NULL;
	struct timespec dl;
	sandlot__deadline_in(&dl, CLOCK_MONOTONIC, timeout_ms);
	int rc = 0;
	pthread_mutex_lock(&e->lock);
	while (!e->finished && rc != ETIMEDOUT)
		rc = timeout_ms ? pthread_cond_timedwait(&e->cond, &e->lock, &dl)
				: pthread_cond_wait(&e->cond, &e->lock);
	int finished = e->finished;
	pthread_mutex_unlock(&e->lock);
	json_t *o = NULL;
	if (finished)
		o = exec_status(e, 1);
	else
		sandlot__error(err, ETIMEDOUT, "exec %s is still running after %llu ms", e->id,
			       (unsigned long long)timeout_ms);
	exec_unref(e);
	return o;
}

int domain_exec_kill(struct daemon *d, struct dsb *s, const char *id, int sig,
		     sandlot_error_t **err)
{
	(void)d;
	struct dexec *e = exec_find(s, id, err);
	if (!e)
		return -1;
	sandlot_error_t *e2 = NULL;
	int rc = exec_kill(e, sig, &e2);
	if (rc < 0 && !e2)
		sandlot__error(&e2, EBUSY, "exec %s has ended", e->id);
	if (rc < 0 && err)
		*err = e2, e2 = NULL;
	sandlot_error_free(e2);
	exec_unref(e);
	return rc;
}

/* Claim e's stdin for one feeder.  0, or -1 with EBUSY saying why not. */
static int stdin_claim(struct dexec *e, sandlot_error_t **err)
{
	const char *why = NULL;
	pthread_mutex_lock(&e->lock);
	if (!e->stdin_pipe)
		why = "was started without a stdin pipe (give \"background\": true)";
	else if (e->exited)
		why = "has ended";
	else if (e->stdin_closed)
		why = "has its stdin closed";
	else if (e->stdin_busy)
		why = "is being fed by another request";
	else
		e->stdin_busy = 1;
	pthread_mutex_unlock(&e->lock);
	return why ? sandlot__error(err, EBUSY, "exec %s %s", e->id, why) : 0;
}

static void stdin_unclaim(struct dexec *e)
{
	pthread_mutex_lock(&e->lock);
	e->stdin_busy = 0;
	pthread_mutex_unlock(&e->lock);
}

/* feed_stdin() with its failures as EBUSY "exec ID: why". */
static int stdin_feed(struct dexec *e, const void *data, size_t len, int eof,
		      sandlot_error_t **err)
{
	sandlot_error_t *e2 = NULL;
	if (feed_stdin(e, data, len, eof, &e2) == 0)
		return 0;
	sandlot__error(err, EBUSY, "exec %s: %s", e->id,
		       e2 ? sandlot_error_message(e2) : "stdin is closed");
	sandlot_error_free(e2);
	return -1;
}

int domain_exec_stdin(struct daemon *d, struct dsb *s, const char *id, const void *data,
		      size_t len, int eof, sandlot_error_t **err)
{
	(void)d;
	struct dexec *e = exec_find(s, id, err);
	if (!e)
		return -1;
	int rc = stdin_claim(e, err);
	if (rc == 0) {
		rc = len ? stdin_feed(e, data, len, 0, err) : 0;
		if (rc == 0 && eof)
			rc = stdin_feed(e, NULL, 0, 1, err);
		stdin_unclaim(e);
	}
	exec_unref(e);
	return rc;
}

/* ---- the other exec routes --------------------------------------------------- */

static int handle_list(struct http_req *req)
{
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *arr = domain_exec_list(req->d, s, &err);
	dsb_put(req->d, s);
	if (!arr) {
		http_error_from(req, err);
		sandlot_error_free(err);
		return 0;
	}
	return http_json(req, 200, json_pack("{s:o}", "execs", arr));
}

static int handle_get(struct http_req *req)
{
	const char *follow = http_query(req, "follow");
	if (follow && strcmp(follow, "0") != 0 && strcmp(follow, "1") != 0)
		return http_error(req, 400, "bad_request", "\"follow\" must be 0 or 1");
	struct dsb *s;
	struct dexec *e = get_exec(req, &s);
	if (!e)
		return 0;
	if (follow && strcmp(follow, "1") == 0) {
		if (stream_answer(req, s, e, 0) < 0)
			http_error(req, 500, "internal", "out of memory");
	} else {
		http_json(req, 200, exec_status(e, 1));
	}
	exec_unref(e);
	dsb_put(req->d, s);
	return 0;
}

static int handle_kill(struct http_req *req)
{
	int sig = SIGKILL;
	if (req->json) {
		if (!json_is_object(req->json))
			return http_error(req, 400, "bad_request", "the body must be a JSON object");
		const char *key;
		json_t *v;
		json_object_foreach(req->json, key, v) {
			if (strcmp(key, "signal") != 0)
				return http_error(req, 400, "bad_request", "unknown field \"%s\"", key);
			sig = parse_signal(v);
			if (sig < 0)
				return http_error(req, 400, "bad_request",
						  "\"signal\" must be a signal number (1-64) or name "
						  "(\"TERM\", \"SIGKILL\")");
		}
	}
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	if (domain_exec_kill(req->d, s, req->params[1], sig, &err) < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
	} else {
		http_empty(req, 204);
	}
	dsb_put(req->d, s);
	return 0;
}

/* POST .../execs/{exec}/stdin: raw body to stdin, ?eof=1 closes it after. */
struct stdin_req {
	struct dsb *s;
	struct dexec *e;
	int eof;
};

static void stdin_req_free(struct http_req *req)
{
	struct stdin_req *st = req->state;
	if (!st)
		return;
	stdin_unclaim(st->e);
	exec_unref(st->e);
	dsb_put(req->d, st->s);
	free(st);
	req->state = NULL;
}

static int stdin_begin(struct http_req *req)
{
	const char *eof = http_query(req, "eof");
	if (eof && strcmp(eof, "0") != 0 && strcmp(eof, "1") != 0)
		return http_error(req, 400, "bad_request", "\"eof\" must be 0 or 1"), -1;
	struct dsb *s;
	struct dexec *e = get_exec(req, &s);
	if (!e)
		return -1;
	sandlot_error_t *err = NULL;
	if (stdin_claim(e, &err) < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
		exec_unref(e);
		dsb_put(req->d, s);
		return -1;
	}
	struct stdin_req *st = calloc(1, sizeof(*st));
	if (!st) {
		stdin_unclaim(e);
		exec_unref(e);
		dsb_put(req->d, s);
		return http_error(req, 500, "internal", "out of memory"), -1;
	}
	st->s = s;
	st->e = e;
	st->eof = eof && strcmp(eof, "1") == 0;
	req->state = st;
	http_long_wait(req); /* feeding waits while the command does not read */
	return 0;
}

static int stdin_chunk(struct http_req *req, const char *data, size_t len)
{
	struct stdin_req *st = req->state;
	if (!st || len == 0)
		return 0;
	sandlot_error_t *err = NULL;
	if (stdin_feed(st->e, data, len, 0, &err) < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
		stdin_req_free(req);
		return -1;
	}
	return 0;
}

static int stdin_end(struct http_req *req)
{
	struct stdin_req *st = req->state;
	if (!st)
		return 0;
	sandlot_error_t *err = NULL;
	if (st->eof && stdin_feed(st->e, NULL, 0, 1, &err) < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
	} else {
		http_empty(req, 204);
	}
	stdin_req_free(req);
	return 0;
}

static int stdin_abort(struct http_req *req)
{
	stdin_req_free(req);
	return 0;
}

const struct http_route exec_routes[] = {
	{ "POST", "/v1/sandboxes/{}/exec", HTTP_JSON, handle_exec, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/execs", HTTP_NOBODY, handle_list, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/execs/{}", HTTP_NOBODY, handle_get, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/execs/{}/stdin", HTTP_RAW, stdin_begin, stdin_chunk, stdin_end,
	  stdin_abort },
	{ "POST", "/v1/sandboxes/{}/execs/{}/kill", HTTP_JSON, handle_kill, NULL, NULL, NULL },
	{ 0 },
};
