/* sandlotd code contexts (spec/openapi.yaml "Code contexts",
 * spec/interpreter.md): long-lived interpreter hosts inside a sandbox that
 * run cells and keep their state.
 *
 * Model.  Each context is a `struct ctx` in one global list (g_lock), keyed
 * by sandbox id and context id.  Its host is an ordinary libsandlot proc
 * (stdin pipe for requests, stdout for JSON lines), so it dies with its
 * sandbox without any hook in sandboxes.c: structures of sandboxes that
 * are no longer running are freed lazily by sweep() on the next code call.
 *
 * Threads.  on_output/on_exit run on libsandlot's I/O thread: they split
 * stdout into lines, parse them, queue the messages under c->lock and wake
 * the cell's owner (c->cond and an eventfd its request or stream parks on).  Nothing in
 * them blocks.  c->lock is a leaf; never call libsandlot while holding it
 * (the callbacks run with the connection lock held).  The proc handle is
 * used by several threads (interrupt, delete) and freed by one: users count
 * themselves in c->proc_users, as in execs.c.
 *
 * One cell at a time per context (c->busy); a second gets 409.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "common/util.h"

extern const char sandlot__python_host_text[];
extern const char sandlot__js_host_text[];

#define READY_WAIT_MS 30000
#define INTR_RESEND_MS 2000
#define INTR_KILL_MS 5000
#define OUTPUT_CAP (16u << 20)      /* per stream per cell, kept for the result */
#define LINE_CAP (64u << 20)        /* a part-assembled message */

struct msg {
	struct msg *next;
	json_t *j;
};

struct ctx {
	struct ctx *next;           /* g_ctxs, under g_lock */
	char sbid[32];
	char id[48];
	char lang[16];
	int refs;                   /* under g_lock: list + borrowers */
	int removed;                /* out of the list (deleted / sandbox gone) */

	pthread_mutex_t lock;       /* everything below */
	pthread_cond_t cond;
	int efd;                    /* eventfd: wake the cell's owner */
	sandlot_proc_t *proc;
	int proc_users;
	int started;                /* a host was started (proc valid) */
	int exited;                 /* its on_exit ran */
	int death_reported;         /* a cell's result said state_lost for this exit */
	sandlot_exit_t ex;
	int ready;
	long pid;                   /* the host's pid in the sandbox (registry:
				     * a vm sandbox's host may be re-attached) */
	char *lb;                   /* stdout line buffer */
	size_t lblen, lbcap;
	char *part;                 /* "part" assembly */
	size_t partlen;
	char errtail[2048];         /* last host stderr (start failures) */
	size_t errlen;
	struct msg *head, *tail;
	int busy;                   /* a cell runs */
	uint64_t seq;               /* cell counter */
	int64_t intr_ms;            /* monotonic time of the first SIGINT of this cell */
	int intr_count;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ctx *g_ctxs;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void wake_locked(struct ctx *c)
{
	uint64_t one = 1;
	if (c->efd >= 0 && write(c->efd, &one, sizeof(one)) < 0) {
		/* saturated: a wake-up is pending */
	}
	pthread_cond_broadcast(&c->cond);
}

static void free_msgs(struct msg *m)
{
	while (m) {
		struct msg *n = m->next;
		json_decref(m->j);
		free(m);
		m = n;
	}
}

/* ---- callbacks (I/O thread) -------------------------------------------- */

static void push_locked(struct ctx *c, json_t *j)
{
	const char *type = json_string_value(json_object_get(j, "type"));
	if (type && strcmp(type, "part") == 0) {
		const char *data = json_string_value(json_object_get(j, "data"));
		size_t n = data ? strlen(data) : 0;
		if (c->partlen + n < LINE_CAP) {
			char *p = realloc(c->part, c->partlen + n + 1);
			if (p) {
				memcpy(p + c->partlen, data, n);
				c->partlen += n;
				p[c->partlen] = 0;
				c->part = p;
			}
		}
		int more = json_is_true(json_object_get(j, "more"));
		json_decref(j);
		if (more || !c->part)
			return;
		j = json_loadb(c->part, c->partlen, 0, NULL);
		free(c->part);
		c->part = NULL;
		c->partlen = 0;
		if (!j)
			return;
		type = json_string_value(json_object_get(j, "type"));
	}
	if (type && strcmp(type, "ready") == 0) {
		c->ready = 1;
		json_decref(j);
		return;
	}
	struct msg *m = malloc(sizeof(*m));
	if (!m) {
		json_decref(j);
		return;
	}
	m->next = NULL;
	m->j = j;
	if (c->tail)
		c->tail->next = m;
	else
		c->head = m;
	c->tail = m;
}

static int on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct ctx *c = ud;
	pthread_mutex_lock(&c->lock);
	if (stream == SANDLOT_STDERR) {
		/* diagnostics of the host: keep the tail for start failures */
		size_t n = len < sizeof(c->errtail) ? len : sizeof(c->errtail);
		const char *src = (const char *)data + (len - n);
		if (c->errlen + n > sizeof(c->errtail)) {
			size_t drop = c->errlen + n - sizeof(c->errtail);
			memmove(c->errtail, c->errtail + drop, c->errlen - drop);
			c->errlen -= drop;
		}
		memcpy(c->errtail + c->errlen, src, n);
		c->errlen += n;
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	if (c->lblen + len + 1 > c->lbcap) {
		size_t cap = c->lbcap ? c->lbcap : 4096;
		while (cap < c->lblen + len + 1)
			cap *= 2;
		char *p = realloc(c->lb, cap);
		if (!p) {
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		c->lb = p;
		c->lbcap = cap;
	}
	memcpy(c->lb + c->lblen, data, len);
	c->lblen += len;
	size_t start = 0;
	int any = 0;
	for (size_t i = c->lblen - len; i < c->lblen; i++) {
		if (c->lb[i] != '\n')
			continue;
		json_t *j = json_loadb(c->lb + start, i - start, 0, NULL);
		if (json_is_object(j)) {
			push_locked(c, j);
			any = 1;
		} else {
			json_decref(j);
		}
		start = i + 1;
	}
	if (start > 0) {
		memmove(c->lb, c->lb + start, c->lblen - start);
		c->lblen -= start;
	}
	if (any)
		wake_locked(c);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

struct reap {
	struct ctx *c;
	sandlot_proc_t *p;
};

static void ctx_put(struct ctx *c);

/* Free the proc of a host that ended (so that its sandbox handle, which it
 * holds, goes as soon as the sandbox is destroyed), unless a new host has
 * replaced it meanwhile. */
static void *reap_main(void *arg)
{
	struct reap *r = arg;
	struct ctx *c = r->c;
	pthread_mutex_lock(&c->lock);
	while (c->proc_users > 0)
		pthread_cond_wait(&c->cond, &c->lock);
	sandlot_proc_t *p = c->proc == r->p ? r->p : NULL;
	if (p)
		c->proc = NULL;
	pthread_mutex_unlock(&c->lock);
	if (p)
		sandlot_proc_free(p);
	ctx_put(c);
	free(r);
	return NULL;
}

static void on_exit_cb(void *ud, const sandlot_exit_t *ex)
{
	struct ctx *c = ud;
	pthread_mutex_lock(&c->lock);
	c->ex = *ex;
	c->exited = 1;
	sandlot_proc_t *p = c->proc;
	wake_locked(c);
	pthread_mutex_unlock(&c->lock);
	struct reap *r = p ? malloc(sizeof(*r)) : NULL;
	if (!r)
		return;
	r->c = c;
	r->p = p;
	pthread_mutex_lock(&g_lock);
	c->refs++;
	pthread_mutex_unlock(&g_lock);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 256u << 10);
	pthread_t t;
	if (pthread_create(&t, &a, reap_main, r) != 0) {
		pthread_mutex_lock(&g_lock);
		c->refs--;  /* the list still holds it: never the last */
		pthread_mutex_unlock(&g_lock);
		free(r);
	}
	pthread_attr_destroy(&a);
}

/* ---- the proc handle ----------------------------------------------------- */

static sandlot_proc_t *proc_get(struct ctx *c)
{
	pthread_mutex_lock(&c->lock);
	sandlot_proc_t *p = c->proc;
	if (p)
		c->proc_users++;
	pthread_mutex_unlock(&c->lock);
	return p;
}

static void proc_put(struct ctx *c)
{
	pthread_mutex_lock(&c->lock);
	if (--c->proc_users == 0)
		pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void ctx_kill(struct ctx *c, int sig)
{
	sandlot_proc_t *p = proc_get(c);
	if (!p)
		return;
	sandlot_proc_kill(p, sig, NULL);
	proc_put(c);
}

/* Free the host's proc (kills it if it still runs). */
static void proc_release(struct ctx *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->proc_users > 0)
		pthread_cond_wait(&c->cond, &c->lock);
	sandlot_proc_t *p = c->proc;
	c->proc = NULL;
	pthread_mutex_unlock(&c->lock);
	if (p)
		sandlot_proc_free(p);
}

/* ---- the context table -------------------------------------------------- */

static struct ctx *ctx_new(const char *sbid, const char *id, const char *lang)
{
	struct ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	snprintf(c->sbid, sizeof(c->sbid), "%s", sbid);
	snprintf(c->id, sizeof(c->id), "%s", id);
	snprintf(c->lang, sizeof(c->lang), "%s", lang);
	c->refs = 1;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	return c;
}

static void ctx_free(struct ctx *c)
{
	proc_release(c);
	free_msgs(c->head);
	free(c->lb);
	free(c->part);
	if (c->efd >= 0)
		close(c->efd);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void ctx_put(struct ctx *c)
{
	pthread_mutex_lock(&g_lock);
	int last = --c->refs == 0;
	pthread_mutex_unlock(&g_lock);
	if (last)
		ctx_free(c);
}

/* Take c out of the list (g_lock held); the list's reference is returned
 * to the caller to put. */
static void unlink_locked(struct ctx *c)
{
	for (struct ctx **pp = &g_ctxs; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->removed = 1;
}

static int sandbox_running(struct daemon *d, const char *sbid)
{
	struct dsb *s = dsb_find(d, sbid);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	int live = s->state == DSB_RUNNING || s->state == DSB_STARTING || s->state == DSB_PAUSED;
	pthread_mutex_unlock(&s->lock);
	dsb_release(d, s);
	return live;
}

/* Free the contexts of sandboxes that ended (their hosts died with them). */
static void sweep(struct daemon *d)
{
	char ids[64][32];
	size_t n = 0;
	pthread_mutex_lock(&g_lock);
	for (struct ctx *c = g_ctxs; c && n < 64; c = c->next) {
		int dup = 0;
		for (size_t i = 0; i < n; i++)
			dup |= strcmp(ids[i], c->sbid) == 0;
		if (!dup)
			snprintf(ids[n++], 32, "%s", c->sbid);
	}
	pthread_mutex_unlock(&g_lock);
	for (size_t i = 0; i < n; i++) {
		if (sandbox_running(d, ids[i]))
			continue;
		for (;;) {
			struct ctx *victim = NULL;
			pthread_mutex_lock(&g_lock);
			for (struct ctx *c = g_ctxs; c; c = c->next)
				if (strcmp(c->sbid, ids[i]) == 0) {
					victim = c;
					break;
				}
			if (victim)
				unlink_locked(victim);
			pthread_mutex_unlock(&g_lock);
			if (!victim)
				break;
			ctx_put(victim);
		}
	}
}

/* A reference to context id of sandbox sbid, or NULL. */
static struct ctx *ctx_find(const char *sbid, const char *id)
{
	pthread_mutex_lock(&g_lock);
	struct ctx *c = g_ctxs;
	for (; c; c = c->next)
		if (strcmp(c->sbid, sbid) == 0 && strcmp(c->id, id) == 0)
			break;
	if (c)
		c->refs++;
	pthread_mutex_unlock(&g_lock);
	return c;
}

/* Find or add (the default contexts are made on first use). */
static struct ctx *ctx_get_or_add(const char *sbid, const char *id, const char *lang)
{
	pthread_mutex_lock(&g_lock);
	struct ctx *c = g_ctxs;
	for (; c; c = c->next)
		if (strcmp(c->sbid, sbid) == 0 && strcmp(c->id, id) == 0)
			break;
	if (!c && (c = ctx_new(sbid, id, lang))) {
		c->next = g_ctxs;
		g_ctxs = c;
	}
	if (c)
		c->refs++;
	pthread_mutex_unlock(&g_lock);
	return c;
}

static const char *valid_lang(const char *l)
{
	if (!l)
		return NULL;
	if (strcmp(l, "python") == 0 || strcmp(l, "javascript") == 0 || strcmp(l, "bash") == 0)
		return l;
	return NULL;
}

/* ---- the host ------------------------------------------------------------ */

/* Start a fresh host for c (the old one, if any, has exited and is freed).
 * The caller owns the cell slot (c->busy).  0, or -1 with msg. */
static int host_start(struct daemon *d, struct dsb *s, struct ctx *c, char *msg, size_t msglen)
{
	proc_release(c);
	pthread_mutex_lock(&c->lock);
	free_msgs(c->head);
	c->head = c->tail = NULL;
	c->lblen = 0;
	free(c->part);
	c->part = NULL;
	c->partlen = 0;
	c->errlen = 0;
	c->exited = 0;
	c->death_reported = 0;
	c->ready = 0;
	c->started = 0;
	memset(&c->ex, 0, sizeof(c->ex));
	pthread_mutex_unlock(&c->lock);

	const char *argv[6] = { 0 };
	if (strcmp(c->lang, "javascript") == 0) {
		argv[0] = "sh";
		argv[1] = "-c";
		argv[2] = "exec node -e \"$0\" sandlot-fds=3,4 3<&0 4>&1";
		argv[3] = sandlot__js_host_text;
	} else {
		argv[0] = "python3";
		argv[1] = "-c";
		argv[2] = sandlot__python_host_text;
		if (strcmp(c->lang, "bash") == 0)
			argv[3] = "bash";
	}
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->state == DSB_RUNNING ? s->sb : NULL;
	pthread_mutex_unlock(&s->lock);
	if (!sb) {
		snprintf(msg, msglen, "sandbox %s is not running", s->id);
		return -1;
	}
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .stdin_pipe = 1 };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .on_exit = on_exit_cb, .userdata = c };
	sandlot_error_t *err = NULL;
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, &err);
	if (!p) {
		snprintf(msg, msglen, "could not start the %s host: %s", c->lang,
			 err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
		return -1;
	}
	int64_t deadline = mono_ms() + READY_WAIT_MS;
	pthread_mutex_lock(&c->lock);
	c->proc = p;
	c->started = 1;
	while (!c->ready && !c->exited) {
		int64_t left = deadline - mono_ms();
		if (left <= 0)
			break;
		struct timespec ts;
		sandlot__deadline_in(&ts, CLOCK_MONOTONIC, left);
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	int ok = c->ready;
	int exited = c->exited;
	char tail[512];
	size_t tl = c->errlen < sizeof(tail) - 1 ? c->errlen : sizeof(tail) - 1;
	memcpy(tail, c->errtail + (c->errlen - tl), tl);
	tail[tl] = 0;
	if (ok)
		c->pid = (long)sandlot_proc_pid(p);
	long pid = c->pid;
	pthread_mutex_unlock(&c->lock);
	if (ok) {
		registry_save_context(d, c->sbid, c->id, c->lang, pid);
		return 0;
	}
	ctx_kill(c, SIGKILL);
	snprintf(msg, msglen, "the %s host %s: %s", c->lang,
		 exited ? "exited before it was ready" : "did not become ready", tl ? tail : "");
	daemon_log("code_host_failed", "sandbox=%s context=%s", c->sbid, c->id);
	return -1;
}

/* Take over c's host where it still runs: a vm sandbox resumed from a pause
 * with memory keeps its processes, and init hands a command an earlier
 * connection left running to the next one that asks for its pid
 * (sandlot_exec_attach()).  The caller owns the cell slot.  1 attached (the
 * context's state is intact), 0 not (no such host: start a fresh one). */
static int host_attach(struct dsb *s, struct ctx *c)
{
	pthread_mutex_lock(&c->lock);
	long pid = c->pid;
	pthread_mutex_unlock(&c->lock);
	if (pid <= 0)
		return 0;
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->state == DSB_RUNNING ? s->sb : NULL;
	pthread_mutex_unlock(&s->lock);
	if (!sb)
		return 0;
	proc_release(c);
	pthread_mutex_lock(&c->lock);
	free_msgs(c->head);
	c->head = c->tail = NULL;
	c->lblen = 0;
	free(c->part);
	c->part = NULL;
	c->partlen = 0;
	c->errlen = 0;
	pthread_mutex_unlock(&c->lock);
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .on_exit = on_exit_cb, .userdata = c };
	sandlot_error_t *err = NULL;
	sandlot_proc_t *p = sandlot_exec_attach(sb, (pid_t)pid, &cb, &err);
	if (!p) {
		daemon_log("code_host_not_attached", "sandbox=%s context=%s pid=%ld: %s", c->sbid,
			   c->id, pid, err ? sandlot_error_message(err) : "?");
		sandlot_error_free(err);
		return 0;
	}
	pthread_mutex_lock(&c->lock);
	c->proc = p;
	c->started = 1;
	c->exited = 0;
	c->death_reported = 0;
	c->ready = 1;
	memset(&c->ex, 0, sizeof(c->ex));
	pthread_mutex_unlock(&c->lock);
	daemon_log("code_host_attached", "sandbox=%s context=%s pid=%ld", c->sbid, c->id, pid);
	return 1;
}

/* A context this sandlotd does not know but its registry does: one made by
 * an earlier sandlotd, whose host may still run (host_attach()).  A new
 * reference, or NULL. */
static struct ctx *ctx_revive(struct daemon *d, const char *sbid, const char *id)
{
	char lang[16];
	long pid = 0;
	if (registry_load_context(d, sbid, id, lang, sizeof(lang), &pid) != 1 || !valid_lang(lang))
		return NULL;
	struct ctx *c = ctx_get_or_add(sbid, id, lang);
	if (!c)
		return NULL;
	pthread_mutex_lock(&c->lock);
	if (!c->started && c->pid == 0)
		c->pid = pid;
	pthread_mutex_unlock(&c->lock);
	return c;
}

/* ---- cells ---------------------------------------------------------------- */

struct cell {
	struct daemon *d;
	struct dsb *s;
	struct ctx *c;
	char rid[32];
	int64_t hard_ms;            /* 0 = none */
	int killed;
	int state_lost;
	int done;
	int released;               /* c->busy cleared for this cell */
	char *out[3];
	size_t outlen[3];
	json_t *displays;
	int64_t started;
	/* streaming */
	char *buf;
	size_t len, off;
	int phase;                  /* 0 running, 1 done */
};

static void cell_append(struct cell *k, int st, const char *s)
{
	size_t n = strlen(s);
	if (k->outlen[st] + n > OUTPUT_CAP)
		return;
	char *p = realloc(k->out[st], k->outlen[st] + n + 1);
	if (!p)
		return;
	memcpy(p + k->outlen[st], s, n);
	k->outlen[st] += n;
	p[k->outlen[st]] = 0;
	k->out[st] = p;
}

static json_t *final_result(struct cell *k, json_t *hostres)
{
	json_t *o = json_object();
	json_object_set_new(o, "type", json_string("result"));
	json_object_set_new(o, "context", json_string(k->c->id));
	json_object_set_new(o, "language", json_string(k->c->lang));
	json_object_set_new(o, "stdout", json_string(k->out[1] ? k->out[1] : ""));
	json_object_set_new(o, "stderr", json_string(k->out[2] ? k->out[2] : ""));
	json_object_set(o, "displays", k->displays);
	if (hostres) {
		const char *keys[] = { "status", "value", "data", "error", "execution_count",
				       "exit_code", "cwd", "restarted", "value_truncated" };
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			json_t *v = json_object_get(hostres, keys[i]);
			if (v)
				json_object_set(o, keys[i], v);
		}
	} else {
		json_object_set_new(o, "status", json_string("error"));
		json_object_set_new(o, "value", json_null());
		json_object_set_new(o, "data", json_null());
	}
	/* What the cell did to the workspace, recorded in the sandbox's
	 * change log (GET .../changes, source = the context id) as an
	 * exec's changes are. */
	json_t *changes = NULL;
	int changes_truncated = 0;
	sandlot_error_t *err = NULL;
	if (dsb_scan_changes(k->d, k->s, k->c->id, &changes, &changes_truncated, &err) < 0) {
		sandlot_error_free(err);
		changes = NULL;
		changes_truncated = 1; /* not known */
	}
	json_object_set_new(o, "changes", changes ? changes : json_array());
	json_object_set_new(o, "changes_truncated", json_boolean(changes_truncated));
	json_object_set_new(o, "duration_ms", json_integer(mono_ms() - k->started));
	json_object_set_new(o, "state_lost", json_boolean(k->state_lost));
	return o;
}

static json_t *died_error(struct cell *k)
{
	struct ctx *c = k->c;
	char v[256];
	pthread_mutex_lock(&c->lock);
	sandlot_exit_t ex = c->ex;
	pthread_mutex_unlock(&c->lock);
	if (k->killed) {
		snprintf(v, sizeof(v), "the %s interpreter did not stop and was killed; its state is lost",
			 c->lang);
		return json_pack("{s:s,s:s,s:[]}", "name", "Killed", "value", v, "traceback");
	}
	if (ex.signal)
		snprintf(v, sizeof(v), "the %s interpreter was killed by signal %d (SIG%s); its state is lost",
			 c->lang, ex.signal, sigabbrev_np(ex.signal) ? sigabbrev_np(ex.signal) : "?");
	else
		snprintf(v, sizeof(v), "the %s interpreter exited with status %d; its state is lost",
			 c->lang, ex.exit_code);
	return json_pack("{s:s,s:s,s:[]}", "name", "InterpreterDied", "value", v, "traceback");
}

/* The context takes its next cell from now on: as soon as the result is
 * made, before it reaches the client (which may send the next cell the
 * moment it reads it), not when the answer's connection is done with. */
static void cell_release(struct cell *k)
{
	if (k->released)
		return;
	k->released = 1;
	pthread_mutex_lock(&k->c->lock);
	k->c->busy = 0;
	pthread_mutex_unlock(&k->c->lock);
}

/* Interrupt the cell (SIGINT) unless that was done already. */
static void cell_interrupt_once(struct cell *k)
{
	struct ctx *c = k->c;
	pthread_mutex_lock(&c->lock);
	int first = c->intr_ms == 0;
	if (first) {
		c->intr_ms = mono_ms();
		c->intr_count = 1;
	}
	pthread_mutex_unlock(&c->lock);
	if (first)
		ctx_kill(c, SIGINT);
}

/* The next event of the cell: a stdout/stderr/display message, or the final
 * result (then k->done); NULL when there is none yet: then wait for c->efd
 * or *wait_ms (the interrupt and kill timers) and call again.  Never waits
 * itself. */
static json_t *cell_step(struct cell *k, int *wait_ms)
{
	struct ctx *c = k->c;
	/* Drain before looking: news after this wakes the next wait. */
	uint64_t v;
	if (read(c->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing new */
	}
	for (;;) {
		pthread_mutex_lock(&c->lock);
		struct msg *m = c->head;
		if (m) {
			c->head = m->next;
			if (!c->head)
				c->tail = NULL;
		}
		int exited = c->exited;
		int64_t intr = c->intr_ms;
		int icount = c->intr_count;
		pthread_mutex_unlock(&c->lock);
		if (m) {
			json_t *j = m->j;
			free(m);
			const char *id = json_string_value(json_object_get(j, "id"));
			const char *type = json_string_value(json_object_get(j, "type"));
			if (!id || !type || strcmp(id, k->rid) != 0) {
				json_decref(j);
				continue;
			}
			if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
				const char *data = json_string_value(json_object_get(j, "data"));
				cell_append(k, type[3] == 'o' ? 1 : 2, data ? data : "");
				json_object_del(j, "id");
				return j;
			}
			if (strcmp(type, "display") == 0) {
				json_object_del(j, "id");
				json_array_append(k->displays, j);
				return j;
			}
			if (strcmp(type, "result") == 0) {
				json_t *o = final_result(k, j);
				json_decref(j);
				k->done = 1;
				cell_release(k);
				return o;
			}
			json_decref(j);
			continue;
		}
		if (exited) {
			k->state_lost = 1;
			pthread_mutex_lock(&c->lock);
			c->death_reported = 1;
			pthread_mutex_unlock(&c->lock);
			json_t *o = final_result(k, NULL);
			json_object_set_new(o, "error", died_error(k));
			k->done = 1;
			cell_release(k);
			daemon_log("code_host_lost", "sandbox=%s context=%s", c->sbid, c->id);
			return o;
		}
		int64_t now = mono_ms();
		if (!k->killed && ((k->hard_ms && now >= k->hard_ms) ||
				   (intr && now >= intr + INTR_KILL_MS))) {
			k->killed = 1;
			ctx_kill(c, SIGKILL);
		} else if (intr && icount == 1 && now >= intr + INTR_RESEND_MS) {
			pthread_mutex_lock(&c->lock);
			c->intr_count++;
			pthread_mutex_unlock(&c->lock);
			ctx_kill(c, SIGINT);
		}
		*wait_ms = 250;
		return NULL;
	}
}

/* Run the cell to its end, dropping its events but the last (the result,
 * returned).  Blocks: after an interrupt, at most until its kill
 * (INTR_KILL_MS). */
static json_t *cell_drain(struct cell *k)
{
	while (!k->done) {
		int ms;
		json_t *ev = cell_step(k, &ms);
		if (ev && k->done)
			return ev;
		if (ev) {
			json_decref(ev);
			continue;
		}
		struct pollfd p = { .fd = k->c->efd, .events = POLLIN };
		poll(&p, 1, ms);
	}
	return NULL;
}

static void cell_free(struct cell *k)
{
	cell_release(k);
	ctx_put(k->c);
	json_decref(k->displays);
	free(k->out[1]);
	free(k->out[2]);
	free(k->buf);
	free(k);
}

/* ---- routes ---------------------------------------------------------------- */

/* Answer err (http_error_from) and free it.  Returns 0. */
static int answer_err(struct http_req *req, sandlot_error_t *err)
{
	http_error_from(req, err);
	sandlot_error_free(err);
	return 0;
}

static int code_fields(json_t *body, const char *const *allowed, sandlot_error_t **err);

/* code_fields() of the request's body: 0, or -1 having answered 400. */
static int check_fields(struct http_req *req, const char *const *allowed)
{
	sandlot_error_t *err = NULL;
	if (code_fields(req->json, allowed, &err) < 0)
		return answer_err(req, err), -1;
	return 0;
}

static ssize_t stream_read(void *ud, char *out, size_t max, struct http_wait *w)
{
	struct cell *k = ud;
	for (;;) {
		if (k->off < k->len) {
			size_t n = k->len - k->off;
			if (n > max)
				n = max;
			memcpy(out, k->buf + k->off, n);
			k->off += n;
			return (ssize_t)n;
		}
		free(k->buf);
		k->buf = NULL;
		k->len = k->off = 0;
		if (k->done)
			return 0;
		int ms;
		json_t *ev = cell_step(k, &ms);
		if (!ev) {
			w->fd = k->c->efd;
			w->timeout_ms = ms;
			return HTTP_STREAM_WAIT;
		}
		char *t = json_dumps(ev, JSON_COMPACT);
		json_decref(ev);
		if (!t)
			return HTTP_STREAM_ERROR;
		size_t n = strlen(t);
		char *t2 = realloc(t, n + 2);
		if (!t2) {
			free(t);
			return HTTP_STREAM_ERROR;
		}
		t2[n] = '\n';
		k->buf = t2;
		k->len = n + 1;
	}
}

static void stream_free(void *ud, int completed)
{
	struct cell *k = ud;
	(void)completed;
	if (!k->done) {
		/* the client left: interrupt the cell, finish it quietly */
		cell_interrupt_once(k);
		json_decref(cell_drain(k));
	}
	struct daemon *d = k->d;
	struct dsb *s = k->s;
	cell_free(k);
	dsb_busy(s, -1);
	dsb_release(d, s);
}

/* A buffered cell: parked until its result.  A client that hangs up
 * interrupts the cell, which is finished quietly. */
static void code_wait(struct http_req *req, int why)
{
	struct cell *k = req->state;
	json_t *ev = NULL;
	if (why == HTTP_WAKE_GONE || why == HTTP_WAKE_STOP) {
		req->client_fd = -1; /* its hang-up has been seen */
		cell_interrupt_once(k);
		if (why == HTTP_WAKE_STOP)
			ev = cell_drain(k);
	}
	for (;;) {
		int ms = 250;
		if (!k->done)
			ev = cell_step(k, &ms);
		if (!ev && !k->done) {
			http_park(req, k->c->efd, ms, code_wait);
			return;
		}
		if (k->done) {
			struct dsb *s = k->s;
			json_t *res = ev ? ev : json_pack("{s:s}", "status", "error");
			json_object_del(res, "type");
			cell_free(k);
			req->state = NULL;
			http_json(req, 200, res);
			dsb_put(req->d, s);
			return;
		}
		json_decref(ev);
	}
}

/* The fields of a code request, checked as POST .../code checks them. */
static int code_fields(json_t *body, const char *const *allowed, sandlot_error_t **err)
{
	if (!json_is_object(body))
		return sandlot__error(err, EINVAL, "the body must be a JSON object");
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		int ok = 0;
		for (size_t i = 0; allowed[i]; i++)
			ok |= strcmp(key, allowed[i]) == 0;
		if (!ok)
			return sandlot__error(err, EINVAL, "unknown field \"%s\"", key);
	}
	return 0;
}

int domain_code_parse(json_t *body, struct domain_code_req *r, sandlot_error_t **err)
{
	static const char *const fields[] = { "language", "code", "context", "timeout_ms", NULL };
	memset(r, 0, sizeof(*r));
	if (code_fields(body, fields, err) < 0)
		return -1;
	json_t *jl = json_object_get(body, "language");
	json_t *jc = json_object_get(body, "code");
	json_t *jx = json_object_get(body, "context");
	json_t *jt = json_object_get(body, "timeout_ms");
	r->language = valid_lang(json_string_value(jl));
	if (jl && !r->language)
		return sandlot__error(err, EINVAL,
				      "\"language\" must be \"python\", \"javascript\" or \"bash\"");
	if (!json_is_string(jc))
		return sandlot__error(err, EINVAL, "\"code\" (a string) is required");
	if (jx && !json_is_string(jx))
		return sandlot__error(err, EINVAL, "\"context\" must be a string");
	if (jt && (!json_is_integer(jt) || json_integer_value(jt) <= 0 ||
		   json_integer_value(jt) > 86400000))
		return sandlot__error(err, EINVAL, "\"timeout_ms\" must be 1..86400000");
	if (!jx && !r->language)
		return sandlot__error(err, EINVAL, "give \"language\" or \"context\"");
	r->code = jc;
	r->context = json_string_value(jx);
	r->timeout_ms = jt ? (uint64_t)json_integer_value(jt) : 0;
	return 0;
}

/* Start the cell of r in s ("got"): its context (r->context, or the
 * default one of r->language, made on first use) claimed, its host
 * started if it is not running, the code sent.  The cell (cell_free), or
 * NULL with ENOENT (no such context), EINVAL (a context of another
 * language), DOMAIN_ECTXBUSY, DOMAIN_EINTERP, ENOMEM. */
static struct cell *cell_begin(struct daemon *d, struct dsb *s, const struct domain_code_req *r,
			       sandlot_error_t **err)
{
	struct ctx *c;
	char defid[48];
	if (r->context) {
		c = ctx_find(s->id, r->context);
		if (!c)
			c = ctx_revive(d, s->id, r->context);
		if (!c) {
			sandlot__error(err, ENOENT, "no context %.60s in sandbox %s", r->context, s->id);
			return NULL;
		}
		if (r->language && strcmp(r->language, c->lang) != 0) {
			sandlot__error(err, EINVAL, "context %s is a %s context", c->id, c->lang);
			ctx_put(c);
			return NULL;
		}
	} else {
		snprintf(defid, sizeof(defid), "default-%s", r->language);
		c = ctx_find(s->id, defid);
		if (!c)
			c = ctx_revive(d, s->id, defid);
		if (!c)
			c = ctx_get_or_add(s->id, defid, r->language);
		if (!c) {
			sandlot__error(err, ENOMEM, "out of memory");
			return NULL;
		}
	}
	pthread_mutex_lock(&c->lock);
	int busy = c->busy;
	if (!busy) {
		c->busy = 1;
		c->intr_ms = 0;
		c->intr_count = 0;
	}
	int need_start = !c->started || c->exited || !c->proc;
	pthread_mutex_unlock(&c->lock);
	if (busy) {
		sandlot__error(err, DOMAIN_ECTXBUSY, "context %s is running a cell", c->id);
		ctx_put(c);
		return NULL;
	}
	struct cell *k = calloc(1, sizeof(*k));
	if (!k) {
		pthread_mutex_lock(&c->lock);
		c->busy = 0;
		pthread_mutex_unlock(&c->lock);
		ctx_put(c);
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	k->d = d;
	k->s = s;
	k->c = c;
	k->displays = json_array();
	k->started = mono_ms();
	if (need_start) {
		/* A host that died between cells (killed from inside the sandbox,
		 * out of memory) took its state with it, and no result has said
		 * so yet: this cell's does. */
		pthread_mutex_lock(&c->lock);
		k->state_lost = c->started && c->exited && !c->death_reported;
		/* A host of an earlier sandlotd: lost unless re-attached. */
		int earlier = !c->started && c->pid > 0;
		pthread_mutex_unlock(&c->lock);
		char msg[768];
		int attached = host_attach(s, c);
		if (attached)
			k->state_lost = 0;
		else if (earlier)
			k->state_lost = 1;
		if (!attached && host_start(d, s, c, msg, sizeof(msg)) < 0) {
			cell_free(k);
			sandlot__error(err, DOMAIN_EINTERP, "%s", msg);
			return NULL;
		}
	}
	pthread_mutex_lock(&c->lock);
	c->seq++;
	snprintf(k->rid, sizeof(k->rid), "c-%llu", (unsigned long long)c->seq);
	pthread_mutex_unlock(&c->lock);
	json_t *rq = json_pack("{s:s,s:s,s:O}", "id", k->rid, "kind", "execute", "code", r->code);
	if (r->timeout_ms) {
		json_object_set_new(rq, "timeout_ms", json_integer((json_int_t)r->timeout_ms));
		k->hard_ms = k->started + (int64_t)r->timeout_ms + INTR_KILL_MS;
	}
	char *line = json_dumps(rq, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(rq);
	size_t n = line ? strlen(line) : 0;
	if (line) {
		char *l2 = realloc(line, n + 2);
		if (l2) {
			line = l2;
			line[n++] = '\n';
		}
	}
	sandlot_proc_t *p = proc_get(c);
	if (p) {
		sandlot_proc_write_stdin(p, line, n, NULL); /* a failure shows as the host's exit */
		proc_put(c);
	}
	free(line);
	dsb_touch(s);
	return k;
}

json_t *domain_code_run(struct daemon *d, struct dsb *s, const struct domain_code_req *r,
			int (*on_event)(void *ud, json_t *event), void *ud, sandlot_error_t **err)
{
	sweep(d);
	struct cell *k = cell_begin(d, s, r, err);
	if (!k)
		return NULL;
	json_t *result = NULL;
	int stopped = 0;
	while (!k->done) {
		int ms = 250;
		json_t *ev = cell_step(k, &ms);
		if (ev && k->done) {
			result = ev;
			break;
		}
		if (ev) {
			if (on_event && !stopped && on_event(ud, ev) != 0) {
				stopped = 1; /* the caller gave up: interrupt, finish quietly */
				cell_interrupt_once(k);
			}
			json_decref(ev);
			continue;
		}
		struct pollfd pf = { .fd = k->c->efd, .events = POLLIN };
		poll(&pf, 1, ms);
	}
	cell_free(k);
	if (!result)
		result = json_pack("{s:s}", "status", "error");
	json_object_del(result, "type");
	return result;
}

static int handle_code(struct http_req *req)
{
	struct daemon *d = req->d;
	struct domain_code_req r;
	sandlot_error_t *err = NULL;
	if (domain_code_parse(req->json, &r, &err) < 0)
		return answer_err(req, err);
	sweep(d);
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	struct cell *k = cell_begin(d, s, &r, &err);
	if (!k) {
		dsb_put(d, s);
		return answer_err(req, err);
	}
	if (http_wants_ndjson(req)) {
		dsb_busy(s, +1);
		dsb_hold(s);
		http_stream(req, 200, "application/x-ndjson", stream_read, stream_free, k);
		dsb_put(d, s);
		return 0;
	}
	/* The wait owns k and the dsb_get() of s. */
	req->state = k;
	code_wait(req, HTTP_WAKE_READY);
	return 0;
}

static json_t *ctx_json(struct ctx *c)
{
	pthread_mutex_lock(&c->lock);
	int busy = c->busy, alive = c->started && !c->exited;
	pthread_mutex_unlock(&c->lock);
	return json_pack("{s:s,s:s,s:b,s:b}", "id", c->id, "language", c->lang, "busy", busy,
			 "alive", alive);
}

/* ---- contexts in the domain layer (domain.h) ---------------------------------- */

int domain_context_lang_ok(const char *lang)
{
	return valid_lang(lang) != NULL;
}

json_t *domain_context_create(struct daemon *d, struct dsb *s, const char *lang,
			      sandlot_error_t **err)
{
	if (!valid_lang(lang)) {
		sandlot__error(err, EINVAL,
			       "\"language\" must be \"python\", \"javascript\" or \"bash\"");
		return NULL;
	}
	sweep(d);
	char id[32];
	sandlot__new_id("ctx-", id);
	struct ctx *c = ctx_get_or_add(s->id, id, lang);
	if (!c) {
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	/* Start the host now, so that the first cell finds it ready. */
	pthread_mutex_lock(&c->lock);
	c->busy = 1;
	pthread_mutex_unlock(&c->lock);
	char msg[768];
	int rc = host_start(d, s, c, msg, sizeof(msg));
	pthread_mutex_lock(&c->lock);
	c->busy = 0;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		pthread_mutex_lock(&g_lock);
		int was = !c->removed;
		unlink_locked(c);
		pthread_mutex_unlock(&g_lock);
		if (was)
			ctx_put(c);
		ctx_put(c);
		sandlot__error(err, DOMAIN_EINTERP, "%s", msg);
		return NULL;
	}
	json_t *o = json_pack("{s:s,s:s}", "id", c->id, "language", c->lang);
	ctx_put(c);
	return o;
}

json_t *domain_context_list(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	sweep(d);
	struct ctx *list[256];
	size_t n = 0;
	pthread_mutex_lock(&g_lock);
	for (struct ctx *c = g_ctxs; c && n < 256; c = c->next)
		if (strcmp(c->sbid, s->id) == 0) {
			c->refs++;
			list[n++] = c;
		}
	pthread_mutex_unlock(&g_lock);
	json_t *arr = json_array();
	for (size_t i = n; i-- > 0;) {
		json_array_append_new(arr, ctx_json(list[i]));
		ctx_put(list[i]);
	}
	if (!arr)
		sandlot__error(err, ENOMEM, "out of memory");
	return arr;
}

int domain_context_delete(struct daemon *d, struct dsb *s, const char *id, sandlot_error_t **err)
{
	struct ctx *c = ctx_find(s->id, id);
	if (!c)
		c = ctx_revive(d, s->id, id);
	if (!c)
		return sandlot__error(err, ENOENT, "no context %.60s in sandbox %s", id, s->id);
	registry_forget_context(d, s->id, id);
	pthread_mutex_lock(&g_lock);
	int was = !c->removed;
	unlink_locked(c);
	pthread_mutex_unlock(&g_lock);
	/* Close its stdin (the host exits), then kill what is left: a cell
	 * running on it ends as InterpreterDied. */
	sandlot_proc_t *p = proc_get(c);
	if (p) {
		sandlot_proc_close_stdin(p, NULL);
		sandlot_proc_kill(p, SIGKILL, NULL);
		proc_put(c);
	}
	if (was)
		ctx_put(c);
	ctx_put(c);
	return 0;
}

json_t *domain_context_interrupt(struct daemon *d, struct dsb *s, const char *id,
				 const char *lang, sandlot_error_t **err)
{
	(void)d;
	char defid[48];
	if (!id) {
		snprintf(defid, sizeof(defid), "default-%s", valid_lang(lang) ? lang : "python");
		id = defid;
	}
	struct ctx *c = ctx_find(s->id, id);
	if (!c) {
		sandlot__error(err, ENOENT, "no context %.60s in sandbox %s", id, s->id);
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	int busy = c->busy;
	if (busy && c->intr_ms == 0) {
		c->intr_ms = mono_ms();
		c->intr_count = 1;
	}
	pthread_mutex_unlock(&c->lock);
	if (busy)
		ctx_kill(c, SIGINT);
	json_t *o = json_pack("{s:s,s:b}", "context", c->id, "interrupted", busy);
	ctx_put(c);
	return o;
}

/* ---- context routes ---------------------------------------------------------------- */

static int handle_ctx_create(struct http_req *req)
{
	struct daemon *d = req->d;
	static const char *const fields[] = { "language", NULL };
	if (check_fields(req, fields) < 0)
		return 0;
	const char *lang = json_string_value(json_object_get(req->json, "language"));
	if (!valid_lang(lang))
		return http_error(req, 400, "bad_request",
				  "\"language\" must be \"python\", \"javascript\" or \"bash\"");
	sweep(d);
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *o = domain_context_create(d, s, lang, &err);
	dsb_put(d, s);
	return o ? http_json(req, 201, o) : answer_err(req, err);
}

static int handle_ctx_list(struct http_req *req)
{
	struct daemon *d = req->d;
	sweep(d);
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *arr = domain_context_list(d, s, &err);
	dsb_put(d, s);
	return arr ? http_json(req, 200, json_pack("{s:o}", "contexts", arr)) : answer_err(req, err);
}

static int handle_ctx_delete(struct http_req *req)
{
	struct daemon *d = req->d;
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	int rc = domain_context_delete(d, s, req->params[1], &err);
	dsb_put(d, s);
	return rc == 0 ? http_empty(req, 204) : answer_err(req, err);
}

static int handle_interrupt(struct http_req *req)
{
	struct daemon *d = req->d;
	static const char *const fields[] = { "context", "language", NULL };
	if (req->json && check_fields(req, fields) < 0)
		return 0;
	const char *id = json_string_value(json_object_get(req->json, "context"));
	const char *lang = json_string_value(json_object_get(req->json, "language"));
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *o = domain_context_interrupt(d, s, id, lang, &err);
	dsb_put(d, s);
	return o ? http_json(req, 200, o) : answer_err(req, err);
}

/* ---- for other surfaces (daemon.h, code_*) ---------------------------------- */

struct code_cell *code_cell_start(struct daemon *d, struct dsb *s, const char *lang,
				  const char *ctx_id, const char *code, int *status, char *msg,
				  size_t msglen)
{
	sweep(d);
	if (!ctx_id && !valid_lang(lang)) {
		*status = 400;
		snprintf(msg, msglen, "language must be python, javascript or bash");
		return NULL;
	}
	json_t *js = code ? json_string(code) : NULL;
	if (!js) {
		*status = 500;
		snprintf(msg, msglen, "out of memory");
		return NULL;
	}
	struct domain_code_req r = { .language = ctx_id ? NULL : lang, .context = ctx_id, .code = js };
	sandlot_error_t *err = NULL;
	struct cell *k = cell_begin(d, s, &r, &err);
	json_decref(js);
	if (!k) {
		*status = http_status_of(err, NULL);
		snprintf(msg, msglen, "%s", sandlot_error_message(err));
		sandlot_error_free(err);
		return NULL;
	}
	dsb_busy(s, +1);
	dsb_hold(s);
	return (struct code_cell *)k;
}

json_t *code_cell_next(struct code_cell *k, int *fd, int *wait_ms)
{
	struct cell *cell = (struct cell *)k;
	if (cell->done)
		return NULL;
	json_t *ev = cell_step(cell, wait_ms);
	*fd = cell->c->efd;
	return ev;
}

int code_cell_done(struct code_cell *k)
{
	return ((struct cell *)k)->done;
}

const char *code_cell_context(struct code_cell *k)
{
	return ((struct cell *)k)->c->id;
}

void code_cell_end(struct code_cell *k)
{
	stream_free((struct cell *)k, 0);
}

int code_ctx_create(struct daemon *d, struct dsb *s, const char *lang, char id[48], char *msg,
		    size_t msglen)
{
	sweep(d);
	if (!valid_lang(lang)) {
		snprintf(msg, msglen, "language must be python, javascript or bash");
		return -1;
	}
	sandlot__new_id("ctx-", id);
	struct ctx *c = ctx_get_or_add(s->id, id, lang);
	if (!c) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	pthread_mutex_lock(&c->lock);
	c->busy = 1;
	pthread_mutex_unlock(&c->lock);
	int rc = host_start(d, s, c, msg, msglen);
	pthread_mutex_lock(&c->lock);
	c->busy = 0;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		pthread_mutex_lock(&g_lock);
		int was = !c->removed;
		unlink_locked(c);
		pthread_mutex_unlock(&g_lock);
		if (was)
			ctx_put(c);
	}
	ctx_put(c);
	return rc;
}

json_t *code_ctx_list(struct daemon *d, struct dsb *s)
{
	sweep(d);
	json_t *arr = json_array();
	pthread_mutex_lock(&g_lock);
	for (struct ctx *c = g_ctxs; c; c = c->next)
		if (strcmp(c->sbid, s->id) == 0)
			json_array_insert_new(arr, 0, json_pack("{s:s,s:s}", "id", c->id,
								"language", c->lang));
	pthread_mutex_unlock(&g_lock);
	return arr;
}

int code_ctx_restart(struct daemon *d, struct dsb *s, const char *id, int remove, char *msg,
		     size_t msglen)
{
	struct ctx *c = ctx_find(s->id, id);
	if (!c) {
		snprintf(msg, msglen, "no context %.60s in sandbox %s", id, s->id);
		return -ENOENT;
	}
	if (remove) {
		registry_forget_context(d, s->id, id);
		pthread_mutex_lock(&g_lock);
		int was = !c->removed;
		unlink_locked(c);
		pthread_mutex_unlock(&g_lock);
		if (was)
			ctx_put(c);
	}
	sandlot_proc_t *p = proc_get(c);
	if (p) {
		sandlot_proc_close_stdin(p, NULL);
		sandlot_proc_kill(p, SIGKILL, NULL);
		proc_put(c);
	}
	int rc = 0;
	if (!remove) {
		pthread_mutex_lock(&c->lock);
		int busy = c->busy;
		if (!busy)
			c->busy = 1;
		pthread_mutex_unlock(&c->lock);
		if (busy) {
			/* the running cell ends as InterpreterDied; its next one
			 * starts a fresh host */
			ctx_put(c);
			return 0;
		}
		pthread_mutex_lock(&c->lock);
		while (!c->exited && c->started)
			pthread_cond_wait(&c->cond, &c->lock);
		c->death_reported = 1; /* asked for: no cell reports it as lost */
		pthread_mutex_unlock(&c->lock);
		rc = host_start(d, s, c, msg, msglen) < 0 ? -EIO : 0;
		pthread_mutex_lock(&c->lock);
		c->busy = 0;
		pthread_mutex_unlock(&c->lock);
	}
	ctx_put(c);
	return rc;
}

const struct http_route code_routes[] = {
	{ "POST", "/v1/sandboxes/{}/code", HTTP_JSON, handle_code, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/code/interrupt", HTTP_JSON, handle_interrupt, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/contexts", HTTP_JSON, handle_ctx_create, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/contexts", HTTP_NOBODY, handle_ctx_list, NULL, NULL, NULL },
	{ "DELETE", "/v1/sandboxes/{}/contexts/{}", HTTP_NOBODY, handle_ctx_delete, NULL, NULL, NULL },
	{ 0 },
};
