/* process.Process of E2B's envd (e2b_envd.h): commands as sandlot execs.
 *
 * Model.  Every command started by Start is a `struct eproc` in one table
 * (procs, under procs_lock) while it runs, keyed by its sandbox and its pid
 * inside the sandbox (and its tag, if it has one): that is what Connect,
 * SendInput, SendSignal, CloseStdin and List look up.  A command that has
 * ended leaves the table (E2B lists and finds only running processes).
 *
 * Output.  Each stream reading a command (Start's own, and one per
 * Connect) is a `struct sub` with a queue of its own: on_output appends
 * each piece to every queue, so a client that connects later gets the
 * output from then on, as envd does.  When a queue holds more than
 * QUEUE_HIGH bytes, on_output pauses the command (flow control, as
 * execs.c's streams do) until the readers have brought their queues under
 * QUEUE_LOW; output that arrives while nobody reads is dropped.
 *
 * Threads.  on_output and on_exit run on libsandlot's I/O thread: they
 * take p->lock, append, and wake the readers' eventfds; they never call
 * libsandlot.  A watcher thread per running command waits for its pid
 * (init's STARTED has no callback, so it polls, backing off from 1 ms),
 * then for its end, then frees the proc handle once no caller uses it
 * (p->users) and drops the busy count that kept the sandbox from being
 * destroyed under the handle.  Lock order: procs_lock → p->lock.
 *
 * Lifetime.  p->refs counts the table, the watcher and each sub; the last
 * unref frees p and lets go of its sandbox (dsb_release).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/e2b_envd.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/util.h"

#define QUEUE_HIGH (1u << 20)
#define QUEUE_LOW (256u << 10)
#define EVENT_MAX (48u << 10)       /* output bytes per data event */
#define PROCS_PER_SANDBOX 256
#define WATCHER_STACK (256u << 10)
#define PID_POLL_MAX_MS 20

struct chunk {
	struct chunk *next;
	int stream;
	size_t len, off;
	char data[];
};

struct eproc;

struct sub {
	struct sub *next;
	struct eproc *p;
	int efd;
	struct chunk *head, *tail;
	size_t queued;
	int is_start;              /* Start's stream (else a Connect) */
	int started, ended;        /* start event / end of stream produced */
	int keepalive_ms;
	int64_t deadline;          /* monotonic ms; 0: none */
	int64_t next_keepalive;
	char *pending;             /* a frame partly handed out */
	size_t plen, poff;
};

struct eproc {
	struct eproc *next;        /* in procs, under procs_lock */
	char sid[32];
	struct daemon *d;
	struct dsb *s;             /* dsb_hold()'s */
	int listed;                /* in procs */
	int refs;                  /* __atomic */
	json_t *config;            /* ProcessConfig as listed */
	char *tag;
	int stdin_pipe;

	pthread_mutex_t lock;      /* everything below */
	pthread_cond_t cond;
	sandlot_proc_t *proc;
	int users, freeing;
	pid_t pid;
	int exited;
	sandlot_exit_t ex;
	int paused;
	struct sub *subs;
};

static pthread_mutex_t procs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct eproc *procs;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void eproc_unref(struct eproc *p)
{
	if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	json_decref(p->config);
	free(p->tag);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	dsb_release(p->d, p->s);
	free(p);
}

static void wake_subs_locked(struct eproc *p)
{
	uint64_t one = 1;
	for (struct sub *u = p->subs; u; u = u->next)
		if (write(u->efd, &one, sizeof(one)) < 0) {
			/* the counter is saturated: the reader is awake anyway */
		}
	pthread_cond_broadcast(&p->cond);
}

/* ---- the proc handle ------------------------------------------------------- */

static sandlot_proc_t *proc_get(struct eproc *p)
{
	pthread_mutex_lock(&p->lock);
	sandlot_proc_t *h = p->freeing ? NULL : p->proc;
	if (h)
		p->users++;
	pthread_mutex_unlock(&p->lock);
	return h;
}

static void proc_put(struct eproc *p)
{
	pthread_mutex_lock(&p->lock);
	if (--p->users == 0)
		pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* ---- libsandlot's callbacks (I/O thread) --------------------------------------- */

static int on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct eproc *p = ud;
	int pause = 0;
	pthread_mutex_lock(&p->lock);
	for (struct sub *u = p->subs; u; u = u->next) {
		if (u->ended)
			continue;
		struct chunk *c = malloc(sizeof(*c) + len);
		if (!c)
			continue; /* that reader misses this piece */
		c->next = NULL;
		c->stream = stream;
		c->len = len;
		c->off = 0;
		memcpy(c->data, data, len);
		if (u->tail)
			u->tail->next = c;
		else
			u->head = c;
		u->tail = c;
		u->queued += len;
		if (u->queued > QUEUE_HIGH)
			pause = 1;
	}
	if (pause)
		p->paused = 1;
	wake_subs_locked(p);
	pthread_mutex_unlock(&p->lock);
	return pause;
}

static void on_exit_cb(void *ud, const sandlot_exit_t *ex)
{
	struct eproc *p = ud;
	pthread_mutex_lock(&p->lock);
	p->ex = *ex;
	p->exited = 1;
	wake_subs_locked(p);
	pthread_mutex_unlock(&p->lock);
}

/* ---- the watcher ------------------------------------------------------------ */

static void unlist(struct eproc *p)
{
	pthread_mutex_lock(&procs_lock);
	if (p->listed) {
		for (struct eproc **pp = &procs; *pp; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		p->listed = 0;
	}
	pthread_mutex_unlock(&procs_lock);
	if (!p->listed)
		eproc_unref(p); /* the table's reference (once: listed is now 0) */
}

static void *watcher(void *ud)
{
	struct eproc *p = ud;
	int step = 1;
	pthread_mutex_lock(&p->lock);
	while (!p->pid && !p->exited) {
		pid_t pid = sandlot_proc_pid(p->proc);
		if (pid) {
			p->pid = pid;
			break;
		}
		struct timespec dl;
		sandlot__deadline_in(&dl, CLOCK_REALTIME, (uint64_t)step);
		pthread_cond_timedwait(&p->cond, &p->lock, &dl);
		step = step * 2 > PID_POLL_MAX_MS ? PID_POLL_MAX_MS : step * 2;
	}
	if (!p->pid)
		p->pid = sandlot_proc_pid(p->proc);
	wake_subs_locked(p);
	pthread_mutex_unlock(&p->lock);

	sandlot_exit_t ex = { .size = sizeof(ex) };
	sandlot_error_t *err = NULL;
	if (sandlot_proc_wait(p->proc, &ex, &err) < 0) {
		pthread_mutex_lock(&p->lock);
		if (!p->exited) {
			memset(&p->ex, 0, sizeof(p->ex));
			p->ex.exit_code = -1;
			p->ex.start_error = EPIPE;
			snprintf(p->ex.error, sizeof(p->ex.error), "%s",
				 err ? sandlot_error_message(err) : "the sandbox went away");
			p->exited = 1;
			wake_subs_locked(p);
		}
		pthread_mutex_unlock(&p->lock);
		sandlot_error_free(err);
	}
	unlist(p);
	pthread_mutex_lock(&p->lock);
	p->freeing = 1;
	while (p->users > 0)
		pthread_cond_wait(&p->cond, &p->lock);
	sandlot_proc_t *h = p->proc;
	p->proc = NULL;
	pthread_mutex_unlock(&p->lock);
	sandlot_proc_free(h);
	dsb_busy(p->s, -1);
	eproc_unref(p);
	return NULL;
}

/* ---- streams of events ----------------------------------------------------------- */

static struct sub *sub_new(struct eproc *p, int is_start, struct e2b_call *c)
{
	struct sub *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (u->efd < 0) {
		free(u);
		return NULL;
	}
	u->p = p;
	u->is_start = is_start;
	u->keepalive_ms = c->keepalive_ms;
	int64_t now = mono_ms();
	u->next_keepalive = c->keepalive_ms ? now + c->keepalive_ms : 0;
	/* Start's timeout kills the command (its exec timeout); a
	 * Connect's only ends that stream. */
	u->deadline = !is_start && c->timeout_ms ? now + c->timeout_ms : 0;
	return u;
}

static void sub_attach(struct eproc *p, struct sub *u)
{
	__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&p->lock);
	u->next = p->subs;
	p->subs = u;
	pthread_mutex_unlock(&p->lock);
}

static void free_chunks(struct chunk *c)
{
	while (c) {
		struct chunk *n = c->next;
		free(c);
		c = n;
	}
}

/* Undo a pause once no reader's queue is over QUEUE_LOW. */
static void maybe_resume(struct eproc *p)
{
	pthread_mutex_lock(&p->lock);
	int resume = p->paused;
	for (struct sub *u = p->subs; u && resume; u = u->next)
		if (u->queued > QUEUE_LOW)
			resume = 0;
	if (resume)
		p->paused = 0;
	pthread_mutex_unlock(&p->lock);
	if (resume) {
		sandlot_proc_t *h = proc_get(p);
		if (h) {
			sandlot_proc_resume_output(h);
			proc_put(p);
		}
	}
}

static void sub_free(void *ud, int completed)
{
	(void)completed;
	struct sub *u = ud;
	struct eproc *p = u->p;
	pthread_mutex_lock(&p->lock);
	for (struct sub **pp = &p->subs; *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	maybe_resume(p);
	free_chunks(u->head);
	free(u->pending);
	close(u->efd);
	free(u);
	eproc_unref(p);
}

static char *event_frame(json_t *event, size_t *len)
{
	json_t *msg = json_pack("{s:o}", "event", event);
	if (!msg)
		return NULL;
	char *f = e2b_connect_frame(msg, 0, len);
	json_decref(msg);
	return f;
}

static json_t *data_event(int stream, const char *data, size_t len)
{
	char *b64 = sandlot__base64_encode_alloc(data, len, NULL);
	if (!b64)
		return NULL;
	json_t *ev = json_pack("{s:{s:s}}", "data", stream == SANDLOT_STDERR ? "stderr" : "stdout",
			       b64);
	free(b64);
	return ev;
}

/* envd's EndEvent: Go's ProcessState.String() as the status. */
static json_t *end_event(const sandlot_exit_t *ex)
{
	char status[64];
	int exited = ex->signal == 0;
	if (exited)
		snprintf(status, sizeof(status), "exit status %d", ex->exit_code);
	else
		snprintf(status, sizeof(status), "signal: %s",
			 ex->signal == SIGKILL ? "killed"
			 : ex->signal == SIGTERM ? "terminated"
						 : strsignal(ex->signal));
	json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", exited ? ex->exit_code : -1,
				"exited", exited, "status", status);
	if (end && ex->oom_killed)
		json_object_set_new(end, "error", json_string("the sandbox ran out of memory"));
	return end ? json_pack("{s:o}", "end", end) : NULL;
}

/* The next frame of u, into u->pending: 1, 0 if there is nothing now, -1
 * out of memory. */
static int next_frame(struct sub *u, int64_t now)
{
	struct eproc *p = u->p;
	json_t *ev = NULL;
	const char *end_code = NULL;
	char end_msg[320];
	int popped = 0;
	pthread_mutex_lock(&p->lock);
	if (!u->started) {
		if (!p->pid && !p->exited) {
			pthread_mutex_unlock(&p->lock);
			return 0;
		}
		if (p->exited && p->ex.start_error) {
			end_code = p->ex.start_error == ENOENT ? "not_found" : "internal";
			snprintf(end_msg, sizeof(end_msg), "the command could not start: %s",
				 p->ex.error);
		} else {
			ev = json_pack("{s:{s:i}}", "start", "pid", (int)p->pid);
			u->started = 1;
		}
	} else if (u->head) {
		struct chunk *c = u->head;
		size_t n = c->len - c->off;
		if (n > EVENT_MAX)
			n = EVENT_MAX;
		ev = data_event(c->stream, c->data + c->off, n);
		c->off += n;
		u->queued -= n;
		if (c->off == c->len) {
			u->head = c->next;
			if (!u->head)
				u->tail = NULL;
			free(c);
		}
		popped = 1;
	} else if (p->exited) {
		if (p->ex.timed_out && u->is_start) {
			end_code = "deadline_exceeded";
			snprintf(end_msg, sizeof(end_msg),
				 "the command ran past its timeout and was killed");
		} else if (p->ex.start_error) {
			end_code = "unavailable";
			snprintf(end_msg, sizeof(end_msg), "%s", p->ex.error);
		} else if (u->started == 1) {
			ev = end_event(&p->ex);
			u->started = 2; /* end event given: the end of stream follows */
		}
	} else if (u->deadline && now >= u->deadline) {
		end_code = "deadline_exceeded";
		snprintf(end_msg, sizeof(end_msg), "the stream reached its timeout");
	} else if (u->next_keepalive && now >= u->next_keepalive) {
		ev = json_pack("{s:{}}", "keepalive");
		u->next_keepalive = now + u->keepalive_ms;
	} else if (!(p->exited && u->started == 2)) {
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	int finished = !ev && (end_code || (p->exited && u->started == 2));
	pthread_mutex_unlock(&p->lock);
	if (popped)
		maybe_resume(p);
	if (ev) {
		u->pending = event_frame(ev, &u->plen);
	} else if (finished) {
		u->pending = e2b_connect_end_frame(end_code, end_code ? end_msg : NULL, &u->plen);
		u->ended = 1;
	} else {
		return 0;
	}
	u->poff = 0;
	return u->pending ? 1 : -1;
}

static ssize_t sub_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	struct sub *u = ud;
	uint64_t drain;
	if (read(u->efd, &drain, sizeof(drain)) < 0) {
		/* nothing signalled: fine */
	}
	if (!u->pending) {
		if (u->ended)
			return 0;
		int64_t now = mono_ms();
		int rc = next_frame(u, now);
		if (rc < 0)
			return HTTP_STREAM_ERROR;
		if (rc == 0) {
			int64_t t = -1;
			if (u->next_keepalive)
				t = u->next_keepalive - now;
			if (u->deadline && (t < 0 || u->deadline - now < t))
				t = u->deadline - now;
			w->fd = u->efd;
			w->timeout_ms = t < 0 ? -1 : t > 0 ? (int)t : 1;
			return HTTP_STREAM_WAIT;
		}
	}
	size_t n = u->plen - u->poff < max ? u->plen - u->poff : max;
	memcpy(buf, u->pending + u->poff, n);
	u->poff += n;
	if (u->poff == u->plen) {
		free(u->pending);
		u->pending = NULL;
	}
	return (ssize_t)n;
}

/* ---- lookups --------------------------------------------------------------------- */

/* The running command of sandbox sid selected by msg's "process" ({"pid"}
 * or {"tag"}), with a reference; NULL having answered. */
static struct eproc *find_proc(struct http_req *req, enum e2b_style style, const char *sid,
			       json_t *msg)
{
	json_t *sel = e2b_pj_get(msg, "process", NULL);
	uint32_t pid = 0;
	int bad = 0;
	const char *tag = e2b_pj_string(sel, "tag", NULL, &bad);
	if (!json_is_object(sel) || bad || e2b_pj_uint32(sel, "pid", NULL, &pid) < 0 ||
	    (!tag && pid == 0)) {
		e2b_answer_error(req, style, "invalid_argument",
				 "process: select the process by {\"pid\": N} or {\"tag\": \"...\"}");
		return NULL;
	}
	struct eproc *found = NULL;
	pthread_mutex_lock(&procs_lock);
	for (struct eproc *p = procs; p; p = p->next) {
		if (strcmp(p->sid, sid) != 0)
			continue;
		pthread_mutex_lock(&p->lock);
		int exited = p->exited; /* ended: its watcher unlists it soon */
		pid_t ppid = p->pid;
		pthread_mutex_unlock(&p->lock);
		if (exited)
			continue;
		if (tag ? (p->tag && strcmp(p->tag, tag) == 0) : (uint32_t)ppid == pid) {
			found = p;
			__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
			break;
		}
	}
	pthread_mutex_unlock(&procs_lock);
	if (!found) {
		if (tag)
			e2b_answer_error(req, style, "not_found",
					 "process with tag %.64s not found", tag);
		else
			e2b_answer_error(req, style, "not_found", "process with pid %u not found",
					 pid);
	}
	return found;
}

/* ---- Start ------------------------------------------------------------------------- */

/* argv and env of a ProcessConfig; 0, or -1 with msg. */
static int parse_config(json_t *cfg, const char ***argv, const char ***env, const char **cwd,
			char *msg, size_t msglen)
{
	int bad = 0;
	const char *cmd = e2b_pj_string(cfg, "cmd", NULL, &bad);
	*cwd = e2b_pj_string(cfg, "cwd", NULL, &bad);
	if (bad || !cmd || !*cmd) {
		snprintf(msg, msglen, "process.cmd: a command is required");
		return -1;
	}
	json_t *args = e2b_pj_get(cfg, "args", NULL);
	json_t *envs = e2b_pj_get(cfg, "envs", NULL);
	if ((args && !json_is_array(args)) || (envs && !json_is_object(envs))) {
		snprintf(msg, msglen, "process.args must be a list and process.envs a map");
		return -1;
	}
	size_t na = json_array_size(args), ne = json_object_size(envs);
	if (na > 4096 || ne > 4096) {
		snprintf(msg, msglen, "process: too many args or envs");
		return -1;
	}
	*argv = calloc(na + 2, sizeof(char *));
	*env = calloc(ne + 1, sizeof(char *));
	if (!*argv || !*env) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	(*argv)[0] = cmd;
	for (size_t i = 0; i < na; i++) {
		json_t *a = json_array_get(args, i);
		if (!json_is_string(a)) {
			snprintf(msg, msglen, "process.args[%zu] is not a string", i);
			return -1;
		}
		(*argv)[i + 1] = json_string_value(a);
	}
	size_t i = 0;
	const char *k;
	json_t *v;
	json_object_foreach(envs, k, v)
	{
		if (!json_is_string(v) || !*k || strchr(k, '=')) {
			snprintf(msg, msglen, "process.envs[%.64s]: a name without '=' and a string",
				 k);
			return -1;
		}
		char *kv;
		if (asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0) {
			snprintf(msg, msglen, "out of memory");
			return -1;
		}
		(*env)[i++] = kv;
	}
	return 0;
}

static void free_env(const char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free((char *)env[i]);
	free(env);
}

static unsigned count_running(const char *sid)
{
	unsigned n = 0;
	pthread_mutex_lock(&procs_lock);
	for (struct eproc *p = procs; p; p = p->next)
		n += strcmp(p->sid, sid) == 0;
	pthread_mutex_unlock(&procs_lock);
	return n;
}

static int start(struct http_req *req, struct e2b_call *c)
{
	if (!c->stream)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"process.Process/Start is a server stream "
					"(application/connect+json)");
	json_t *cfg = e2b_pj_get(c->msg, "process", NULL);
	if (e2b_pj_get(c->msg, "pty", NULL))
		return e2b_answer_error(req, E2B_STREAM, "unimplemented",
					"PTY sessions are not supported by sandlotd");
	int bad = 0, stdin_pipe;
	const char *tag = e2b_pj_string(c->msg, "tag", NULL, &bad);
	if (bad || e2b_pj_bool(c->msg, "stdin", NULL, 1, &stdin_pipe) < 0)
		return e2b_answer_error(req, E2B_STREAM, "invalid_argument",
					"tag must be a string and stdin a bool");
	const char **argv = NULL, **env = NULL, *cwd = NULL;
	char msg[256];
	if (!json_is_object(cfg)) {
		return e2b_answer_error(req, E2B_STREAM, "invalid_argument",
					"process: the command to start is required");
	}
	if (parse_config(cfg, &argv, &env, &cwd, msg, sizeof(msg)) < 0) {
		free(argv);
		free_env(env);
		return e2b_answer_error(req, E2B_STREAM, "invalid_argument", "%s", msg);
	}
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_STREAM, E2B_ENVD_PORT, &sb);
	if (!s) {
		free(argv);
		free_env(env);
		return 0;
	}
	if (count_running(s->id) >= PROCS_PER_SANDBOX) {
		free(argv);
		free_env(env);
		dsb_put(req->d, s);
		return e2b_answer_error(req, E2B_STREAM, "resource_exhausted",
					"%d commands already run in this sandbox",
					PROCS_PER_SANDBOX);
	}
	struct eproc *p = calloc(1, sizeof(*p));
	struct sub *u = p ? sub_new(p, 1, c) : NULL;
	if (!u) {
		free(p);
		free(argv);
		free_env(env);
		dsb_put(req->d, s);
		return e2b_answer_error(req, E2B_STREAM, "internal", "out of memory");
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	snprintf(p->sid, sizeof(p->sid), "%s", s->id);
	p->d = req->d;
	p->s = s;
	dsb_hold(s);
	p->refs = 2; /* the table, the watcher */
	p->stdin_pipe = stdin_pipe;
	p->tag = tag ? strdup(tag) : NULL;
	p->config = json_deep_copy(cfg);
	sub_attach(p, u);
	/* Listed before it starts, so that the watcher's unlist() always
	 * finds it there, however quickly the command ends. */
	pthread_mutex_lock(&procs_lock);
	p->next = procs;
	procs = p;
	p->listed = 1;
	pthread_mutex_unlock(&procs_lock);

	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv, .env = env, .cwd = cwd,
				     .stdin_pipe = stdin_pipe,
				     .timeout_ms = (uint64_t)c->timeout_ms };
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .on_exit = on_exit_cb,
					.userdata = p };
	sandlot_error_t *err = NULL;
	dsb_busy(s, +1); /* until the proc handle is freed (the watcher) */
	/* Not under p->lock: on_output takes it on libsandlot's I/O thread. */
	sandlot_proc_t *h = sandlot_exec(sb, &spec, &cb, &err);
	pthread_mutex_lock(&p->lock);
	p->proc = h;
	pthread_mutex_unlock(&p->lock);
	free(argv);
	free_env(env);
	pthread_attr_t attr;
	pthread_t t;
	int started = 0;
	if (p->proc) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, WATCHER_STACK);
		started = pthread_create(&t, &attr, watcher, p) == 0;
		pthread_attr_destroy(&attr);
		if (!started) {
			sandlot_proc_kill(p->proc, SIGKILL, NULL);
			sandlot_proc_wait(p->proc, NULL, NULL);
			sandlot_proc_free(p->proc);
			p->proc = NULL;
		}
	}
	if (!started) {
		dsb_busy(s, -1);
		dsb_put(req->d, s);
		sub_free(u, 0);
		unlist(p);      /* drops the table's reference */
		eproc_unref(p); /* the watcher's */
		if (err)
			return e2b_answer_sandlot(req, E2B_STREAM, err, "starting the command");
		return e2b_answer_error(req, E2B_STREAM, "internal",
					"cannot start a thread for the command");
	}
	dsb_put(req->d, s);
	return http_stream(req, 200, E2B_CONNECT_STREAM_TYPE, sub_read, sub_free, u);
}

/* ---- the other calls ------------------------------------------------------------------ */

static int connect_proc(struct http_req *req, struct e2b_call *c, struct dsb *s)
{
	struct eproc *p = find_proc(req, E2B_STREAM, s->id, c->msg);
	if (!p)
		return 0;
	struct sub *u = sub_new(p, 0, c);
	if (!u) {
		eproc_unref(p);
		return e2b_answer_error(req, E2B_STREAM, "internal", "out of memory");
	}
	sub_attach(p, u);
	eproc_unref(p); /* the sub holds its own */
	return http_stream(req, 200, E2B_CONNECT_STREAM_TYPE, sub_read, sub_free, u);
}

static int list_procs(struct http_req *req, struct dsb *s)
{
	json_t *list = json_array();
	pthread_mutex_lock(&procs_lock);
	for (struct eproc *p = procs; p; p = p->next) {
		if (strcmp(p->sid, s->id) != 0)
			continue;
		pthread_mutex_lock(&p->lock);
		pid_t pid = p->exited ? 0 : p->pid;
		pthread_mutex_unlock(&p->lock);
		if (!pid)
			continue;
		json_t *info = json_pack("{s:O, s:i}", "config", p->config, "pid", (int)pid);
		if (info && p->tag)
			json_object_set_new(info, "tag", json_string(p->tag));
		json_array_append_new(list, info);
	}
	pthread_mutex_unlock(&procs_lock);
	return http_json(req, 200, json_pack("{s:o}", "processes", list));
}

static int send_input(struct http_req *req, struct e2b_call *c, struct dsb *s)
{
	json_t *input = e2b_pj_get(c->msg, "input", NULL);
	if (e2b_pj_get(input, "pty", NULL))
		return e2b_answer_error(req, E2B_UNARY, "unimplemented",
					"PTY input is not supported by sandlotd");
	json_t *data = e2b_pj_get(input, "stdin", NULL);
	size_t len = 0;
	cleanup_free unsigned char *bytes = data ? e2b_pj_bytes(data, &len) : NULL;
	if (!bytes)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"input.stdin: base64 bytes are required");
	struct eproc *p = find_proc(req, E2B_UNARY, s->id, c->msg);
	if (!p)
		return 0;
	if (!p->stdin_pipe) {
		eproc_unref(p);
		return e2b_answer_error(req, E2B_UNARY, "failed_precondition",
					"the process was started without stdin (start it with "
					"stdin: true to send input)");
	}
	sandlot_proc_t *h = proc_get(p);
	sandlot_error_t *err = NULL;
	int rc = h ? sandlot_proc_write_stdin(h, bytes, len, &err) : -1;
	if (h)
		proc_put(p);
	eproc_unref(p);
	if (rc < 0) {
		if (!err || sandlot_error_status(err) == EPIPE) {
			sandlot_error_free(err);
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"the process has ended or closed its stdin");
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, "sending input");
	}
	return http_json(req, 200, json_object());
}

static int send_signal(struct http_req *req, struct e2b_call *c, struct dsb *s)
{
	json_t *v = e2b_pj_get(c->msg, "signal", NULL);
	int sig = 0;
	if (json_is_string(v)) {
		const char *n = json_string_value(v);
		sig = !strcmp(n, "SIGNAL_SIGKILL") ? SIGKILL : !strcmp(n, "SIGNAL_SIGTERM") ? SIGTERM : 0;
	} else if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		sig = i == SIGKILL || i == SIGTERM ? (int)i : 0;
	}
	if (!sig)
		return e2b_answer_error(req, E2B_UNARY, "invalid_argument",
					"signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM");
	struct eproc *p = find_proc(req, E2B_UNARY, s->id, c->msg);
	if (!p)
		return 0;
	sandlot_proc_t *h = proc_get(p);
	sandlot_error_t *err = NULL;
	int rc = h ? sandlot_proc_kill(h, sig, &err) : -1;
	if (h)
		proc_put(p);
	eproc_unref(p);
	if (rc < 0) {
		if (!h) {
			return e2b_answer_error(req, E2B_UNARY, "not_found",
						"the process has ended");
		}
		return e2b_answer_sandlot(req, E2B_UNARY, err, "sending the signal");
	}
	return http_json(req, 200, json_object());
}

static int close_stdin(struct http_req *req, struct e2b_call *c, struct dsb *s)
{
	struct eproc *p = find_proc(req, E2B_UNARY, s->id, c->msg);
	if (!p)
		return 0;
	sandlot_proc_t *h = p->stdin_pipe ? proc_get(p) : NULL;
	sandlot_error_t *err = NULL;
	int rc = h ? sandlot_proc_close_stdin(h, &err) : 0;
	if (h)
		proc_put(p);
	eproc_unref(p);
	if (rc < 0 && sandlot_error_status(err) != EPIPE)
		return e2b_answer_sandlot(req, E2B_UNARY, err, "closing stdin");
	sandlot_error_free(err);
	return http_json(req, 200, json_object());
}

int e2b_process_call(struct http_req *req, struct e2b_call *c)
{
	if (strcmp(c->method, "Start") == 0)
		return start(req, c);
	enum e2b_style style = c->stream ? E2B_STREAM : E2B_UNARY;
	int is_connect = strcmp(c->method, "Connect") == 0;
	static const char *const unary[] = { "List", "SendInput", "SendSignal", "CloseStdin" };
	int known = is_connect;
	for (size_t i = 0; i < sizeof(unary) / sizeof(unary[0]); i++)
		known |= strcmp(c->method, unary[i]) == 0;
	if (!known)
		return e2b_answer_error(req, style, "unimplemented",
					"process.Process/%.64s is not served by sandlotd "
					"(no PTY, no client streams)",
					c->method);
	if (is_connect != c->stream)
		return e2b_answer_error(req, style, "invalid_argument",
					"process.Process/%.64s is a %s call", c->method,
					is_connect ? "server-streaming" : "unary");
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, style, E2B_ENVD_PORT, &sb);
	if (!s)
		return 0;
	if (is_connect)
		connect_proc(req, c, s);
	else if (strcmp(c->method, "List") == 0)
		list_procs(req, s);
	else if (strcmp(c->method, "SendInput") == 0)
		send_input(req, c, s);
	else if (strcmp(c->method, "SendSignal") == 0)
		send_signal(req, c, s);
	else
		close_stdin(req, c, s);
	dsb_put(req->d, s);
	return 0;
}
