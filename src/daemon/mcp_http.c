/* MCP over Streamable HTTP (MCP 2025-03-26 and later) at /mcp: see
 * mcp_http.h, docs/mcp.md and spec/openapi.yaml.
 *
 *   POST /mcp     one JSON-RPC message or a batch.  Only notifications or
 *                 responses: 202.  Requests: 200 with the answers, as
 *                 application/json or, when the client accepts it, as an
 *                 SSE stream (text/event-stream) that carries the call's
 *                 notifications/progress before its answer.  initialize
 *                 (without Mcp-Session-Id) starts a session and its answer
 *                 carries the new Mcp-Session-Id; every other POST needs
 *                 that header (missing: 400, unknown or ended: 404).
 *   DELETE /mcp   ends the session: its sandbox is deleted before the 204.
 *   GET /mcp      405: no server-to-client stream is offered (the server
 *                 sends no requests and nothing outside the answers).
 *
 * Every request with an Origin header must come from a loopback origin
 * (http://localhost:PORT, http://127.0.0.1, http://[::1]) or one of
 * --mcp-allow-origin, else 403: the specification asks for this against
 * DNS rebinding.  On TCP the bearer token is checked by http.c as for every
 * route (401).
 *
 * Threads.  A session (struct msess) owns an MCP session of src/mcp and the
 * API client it uses; one thread at a time handles its messages (s->run).
 * The route handlers only parse and check, then hand the messages to a
 * thread of ours (post_thread) and answer with a stream that the thread
 * fills (struct post): so a long run_command holds no worker of the HTTP
 * layer, whose own API requests it needs.  A ping and notifications/
 * cancelled are applied at once, even while a call runs.  A thread also
 * ends a DELETEd session (the request is parked meanwhile); the reaper
 * thread ends sessions idle for --mcp-idle-timeout and keeps the sandboxes
 * of live ones alive.
 *
 * Locking: g.lock guards the table and the counters of every session
 * (refs, busy, last_ms); s->run is taken without g.lock held; p->lock is a
 * leaf.
 */
#include "daemon/mcp_http.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "common/cleanup.h"
#include "common/sbid.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "mcp/headers.h"
#include "mcp/mcp.h"

#define BODY_MAX (64u << 20)           /* a POSTed message (a write_file of ~48 MiB) */
#define RUN_TIMEOUT_MS (5 * 60 * 1000) /* run_command / run_code without timeout_seconds */
#define STREAM_KEEPALIVE_MS 25000      /* something on a quiet answer stream */
#define END_WAIT_MS 30000              /* a DELETE waits this long for the sandbox's end */
#define INFLIGHT_MAX 16                /* requests of one session being handled or waiting */

static const char *const protocol_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26" };

struct msess {
	struct msess *next;
	char id[40];                /* "mcp-" [NODE "-"] 26 of [a-z2-7] (common/sbid.h) */
	int refs;                   /* g.lock: the table, posts, enders */
	int busy;                   /* g.lock: POSTs being handled */
	int in_table;               /* g.lock */
	int64_t last_ms;            /* g.lock: the end of its last request */
	pthread_mutex_t run;        /* one handler of its messages at a time */
	struct client c;
	struct mcp *m;
	int wakefd;                 /* eventfd: wakes io_wait (a cancellation, the end) */
	struct post *cur;           /* under run: where notify() writes */
};

/* The answer to one POST, filled by its thread and read by the stream. */
struct post {
	pthread_mutex_t lock;
	int refs;                   /* the thread, the stream */
	int efd;                    /* eventfd: there is more, or the end */
	char *buf;
	size_t off, len, cap;
	int done, gone, sse;
	int64_t last_out_ms;
	struct msess *s;
	json_t *msg;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;        /* the reaper's clock; threads went down */
	struct daemon *d;
	int started, stopping;
	struct msess *sessions;
	unsigned nsessions;
	unsigned threads;           /* our threads alive (posts, enders) */
	pthread_t reaper;
	char *api_host, *api_token;
	unsigned max_sessions, idle_s;
	char *origins[MCP_ORIGINS_MAX];
	int norigins;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void poke(int fd)
{
	uint64_t one = 1;
	ssize_t n = write(fd, &one, sizeof(one));
	(void)n;   /* a full counter is still readable */
}

static void drain(int fd)
{
	uint64_t v;
	ssize_t n = read(fd, &v, sizeof(v));
	(void)n;
}

/* Run fn(arg) on a detached thread counted in g.threads.  0 or -1. */
static int spawn(void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&g.lock);
	g.threads++;
	pthread_mutex_unlock(&g.lock);
	pthread_t t;
	int rc = pthread_create(&t, &a, fn, arg);
	pthread_attr_destroy(&a);
	if (rc != 0) {
		pthread_mutex_lock(&g.lock);
		g.threads--;
		pthread_cond_broadcast(&g.cond);
		pthread_mutex_unlock(&g.lock);
		errno = rc;
		return -1;
	}
	return 0;
}

static void thread_done(void)
{
	pthread_mutex_lock(&g.lock);
	g.threads--;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
}

/* ---- answers ------------------------------------------------------------------ */

/* A JSON-RPC error as the body of an HTTP error (id null). */
static int rpc_fail(struct http_req *req, int status, int code, const char *msg)
{
	return http_json(req, status, mcp_rpc_error(NULL, code, "%s", msg));
}

/* ---- posts --------------------------------------------------------------------- */

static void post_put(struct post *p)
{
	pthread_mutex_lock(&p->lock);
	int last = --p->refs == 0;
	pthread_mutex_unlock(&p->lock);
	if (!last)
		return;
	json_decref(p->msg);
	free(p->buf);
	close(p->efd);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static void post_append(struct post *p, const char *a, size_t alen, const char *b, size_t blen,
			const char *c, size_t clen)
{
	pthread_mutex_lock(&p->lock);
	size_t need = p->len + alen + blen + clen;
	if (!p->gone && need >= p->len) {
		if (need > p->cap) {
			size_t cap = p->cap ? p->cap : 4096;
			while (cap < need)
				cap *= 2;
			char *nb = realloc(p->buf, cap);
			if (nb) {
				p->buf = nb;
				p->cap = cap;
			}
		}
		if (need <= p->cap) {
			memcpy(p->buf + p->len, a, alen);
			memcpy(p->buf + p->len + alen, b, blen);
			memcpy(p->buf + p->len + alen + blen, c, clen);
			p->len = need;
		}
	}
	pthread_mutex_unlock(&p->lock);
	poke(p->efd);
}

/* One message into the answer: an SSE event, or the JSON body. */
static void post_emit(struct post *p, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text) {
		daemon_log("mcp", "level=error msg=\"cannot encode an answer (out of memory)\"");
		return;
	}
	/* JSON text never holds a raw line break: one data line. */
	if (p->sse)
		post_append(p, "event: message\ndata: ", 21, text, strlen(text), "\n\n", 2);
	else
		post_append(p, "", 0, text, strlen(text), "", 0);
	free(text);
}

static ssize_t post_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	struct post *p = ud;
	for (int pass = 0;; pass++) {
		pthread_mutex_lock(&p->lock);
		int64_t now = mono_ms();
		if (p->off < p->len) {
			size_t n = p->len - p->off < max ? p->len - p->off : max;
			memcpy(buf, p->buf + p->off, n);
			p->off += n;
			if (p->off == p->len)
				p->off = p->len = 0;
			p->last_out_ms = now;
			pthread_mutex_unlock(&p->lock);
			return (ssize_t)n;
		}
		int done = p->done;
		int quiet = now - p->last_out_ms >= STREAM_KEEPALIVE_MS;
		if (!done && quiet && pass) {
			/* A long call without progress: keep the connection from
			 * looking dead (an SSE comment; whitespace before JSON). */
			p->last_out_ms = now;
			pthread_mutex_unlock(&p->lock);
			const char *k = p->sse ? ": keep-alive\n\n" : "\n";
			size_t n = strlen(k) < max ? strlen(k) : max;
			memcpy(buf, k, n);
			return (ssize_t)n;
		}
		pthread_mutex_unlock(&p->lock);
		if (done)
			return 0;
		if (pass) {
			w->fd = p->efd;
			w->timeout_ms = STREAM_KEEPALIVE_MS;
			return HTTP_STREAM_WAIT;
		}
		drain(p->efd);   /* then look again: a poke after this is seen */
	}
}

static void post_stream_free(void *ud, int completed)
{
	(void)completed;
	struct post *p = ud;
	pthread_mutex_lock(&p->lock);
	p->gone = 1;   /* the client went away, or has it all */
	pthread_mutex_unlock(&p->lock);
	post_put(p);
}

/* ---- sessions ------------------------------------------------------------------- */

static void session_put(struct msess *s)
{
	pthread_mutex_lock(&g.lock);
	int last = --s->refs == 0;
	pthread_mutex_unlock(&g.lock);
	if (!last)
		return;
	mcp_free(s->m);
	client_free(&s->c);
	if (s->wakefd >= 0)
		close(s->wakefd);
	pthread_mutex_destroy(&s->run);
	free(s);
}

static void io_wait(void *ud, struct client *c, int timeout_ms)
{
	struct msess *s = ud;
	struct pollfd pfd = { .fd = s->wakefd, .events = POLLIN };
	client_poll(c, &pfd, 1, timeout_ms);
	if (pfd.revents & POLLIN)
		drain(s->wakefd);
}

static void io_notify(void *ud, json_t *msg)
{
	struct msess *s = ud;
	if (s->cur && s->cur->sse)
		post_emit(s->cur, msg);   /* JSON answers carry no notifications */
	else
		json_decref(msg);
}

static void io_log(void *ud, const char *line)
{
	struct msess *s = ud;
	char clean[512];
	size_t n = 0;
	for (const char *p = line; *p && n + 1 < sizeof(clean); p++)
		clean[n++] = *p == '"' || *p == '\\' || *p == '\n' ? '\'' : *p;
	clean[n] = '\0';
	daemon_log("mcp", "session=%.8s msg=\"%s\"", s->id, clean);
}

/* A new session, in the table (one reference for the table, one for the
 * caller), or NULL after answering the request. */
static struct msess *session_new(struct http_req *req)
{
	struct msess *s = calloc(1, sizeof(*s));
	if (!s) {
		rpc_fail(req, 500, -32603, "out of memory");
		return NULL;
	}
	s->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&s->run, NULL);
	sandlot__node_new_id("mcp-", s->id);
	s->refs = 2;
	if (s->wakefd < 0 || client_open(&s->c, "mcp", g.api_host, g.api_token) < 0) {
		daemon_log("mcp", "level=error msg=\"cannot set up a session: %s\"", strerror(errno));
		s->refs = 1;
		session_put(s);
		rpc_fail(req, 500, -32603, "cannot set up an MCP session (see the daemon's log)");
		return NULL;
	}
	/* The sandbox goes away by itself unless the reaper keeps it alive. */
	json_t *body = json_pack("{s:I,s:b,s:{s:s}}", "idle_timeout_seconds", (json_int_t)g.idle_s,
				 "auto_resume", 1, "metadata", "client", "sandlot-mcp-http");
	struct mcp_options o = { .create_body = body, .timeout_ms = RUN_TIMEOUT_MS,
				 .keepalive_ms = g.idle_s * 1000ull / 3, .server_title = "sandlot sandbox" };
	struct mcp_io io = { .wait = io_wait, .notify = io_notify, .log = io_log, .ud = s };
	s->m = body ? mcp_new(&s->c, &o, &io) : NULL;
	json_decref(body);
	if (!s->m) {
		s->refs = 1;
		session_put(s);
		rpc_fail(req, 500, -32603, "out of memory");
		return NULL;
	}
	pthread_mutex_lock(&g.lock);
	if (g.stopping || g.nsessions >= g.max_sessions) {
		int stopping = g.stopping;
		pthread_mutex_unlock(&g.lock);
		s->refs = 1;
		session_put(s);
		char msg[160];
		snprintf(msg, sizeof(msg), stopping ? "sandlotd is stopping"
			 : "too many MCP sessions (%u, --mcp-max-sessions): end one (DELETE /mcp) or "
			   "try again later", g.max_sessions);
		rpc_fail(req, 503, -32000, msg);
		return NULL;
	}
	s->in_table = 1;
	s->last_ms = mono_ms();
	s->next = g.sessions;
	g.sessions = s;
	g.nsessions++;
	pthread_mutex_unlock(&g.lock);
	daemon_log("mcp_session", "session=%.8s started=1", s->id);
	return s;
}

/* The session named by the request's Mcp-Session-Id, with a reference
 * (and busy, if mark_busy), or NULL after answering (400 without the
 * header, 404 for an unknown or ended session). */
static struct msess *session_get(struct http_req *req, int mark_busy)
{
	const char *id = http_header(req, "Mcp-Session-Id");
	if (!id || !*id) {
		rpc_fail(req, 400, -32000, "Bad Request: the Mcp-Session-Id header is required (start a "
			 "session with initialize)");
		return NULL;
	}
	pthread_mutex_lock(&g.lock);
	struct msess *s = g.sessions;
	while (s && strcmp(s->id, id) != 0)
		s = s->next;
	if (s) {
		s->refs++;
		if (mark_busy)
			s->busy++;
	}
	pthread_mutex_unlock(&g.lock);
	if (!s)
		rpc_fail(req, 404, -32001, "Session not found: it ended or never existed (start a new "
			 "one with initialize)");
	return s;
}

/* Take s out of the table (once); 1 if this call did. */
static int session_unlink(struct msess *s)
{
	pthread_mutex_lock(&g.lock);
	int was = s->in_table;
	if (was) {
		struct msess **pp = &g.sessions;
		while (*pp != s)
			pp = &(*pp)->next;
		*pp = s->next;
		s->in_table = 0;
		g.nsessions--;
	}
	pthread_mutex_unlock(&g.lock);
	return was;
}

/* End an unlinked session: abandon what runs, delete its sandbox, drop the
 * table's reference. */
static void session_end(struct msess *s, const char *why)
{
	mcp_stop(s->m);
	poke(s->wakefd);
	pthread_mutex_lock(&s->run);
	const char *sb = mcp_sandbox(s->m);
	char sandbox[40];
	snprintf(sandbox, sizeof(sandbox), "%s", sb ? sb : "none");
	mcp_end(s->m);
	pthread_mutex_unlock(&s->run);
	daemon_log("mcp_session", "session=%.8s ended=%s sandbox=%s", s->id, why, sandbox);
	session_put(s);
}

/* ---- POST /mcp ------------------------------------------------------------------- */

static void *post_thread(void *arg)
{
	struct post *p = arg;
	struct msess *s = p->s;
	pthread_mutex_lock(&s->run);
	s->cur = p;
	json_t *answer = mcp_handle(s->m, p->msg);
	s->cur = NULL;
	pthread_mutex_unlock(&s->run);
	if (answer && p->sse && json_is_array(answer)) {
		/* a batch: one event per answer */
		size_t i;
		json_t *a;
		json_array_foreach(answer, i, a)
			post_emit(p, json_incref(a));
		json_decref(answer);
	} else if (answer) {
		post_emit(p, answer);
	}
	pthread_mutex_lock(&p->lock);
	p->done = 1;
	pthread_mutex_unlock(&p->lock);
	poke(p->efd);
	pthread_mutex_lock(&g.lock);
	s->busy--;
	s->last_ms = mono_ms();
	pthread_mutex_unlock(&g.lock);
	session_put(s);
	post_put(p);
	thread_done();
	return NULL;
}

/* Whether the request may go on: no Origin, a loopback one, or one of
 * --mcp-allow-origin.  Else answers 403. */
static int origin_ok(struct http_req *req)
{
	const char *o = http_header(req, "Origin");
	if (!o)
		return 1;
	for (int i = 0; i < g.norigins; i++)
		if (!strcmp(o, g.origins[i]))
			return 1;
	if (mcp_origin_loopback(o))
		return 1;
	rpc_fail(req, 403, -32000, "Forbidden: this Origin may not use the MCP endpoint (allowed: "
		 "loopback origins and --mcp-allow-origin)");
	return 0;
}

static int running(struct http_req *req)
{
	pthread_mutex_lock(&g.lock);
	int ok = g.started && !g.stopping;
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		rpc_fail(req, 503, -32000, "the MCP endpoint is not serving (sandlotd is starting or "
			 "stopping)");
	return ok;
}

struct body {
	char *data;
	size_t len, cap;
};

static int post_begin(struct http_req *req)
{
	if (!running(req) || !origin_ok(req))
		return -1;
	const char *ct = http_header(req, "Content-Type");
	if (!ct || strncasecmp(ct, "application/json", 16) != 0 || (ct[16] && ct[16] != ';' && ct[16] != ' '))
		return rpc_fail(req, 415, -32000, "Unsupported Media Type: POST a JSON-RPC message with "
				"Content-Type: application/json"), -1;
	const char *acc = http_header(req, "Accept");
	if (!mcp_accepts(acc, "application/json") && !mcp_accepts(acc, "text/event-stream"))
		return rpc_fail(req, 406, -32000, "Not Acceptable: the answers are application/json or "
				"text/event-stream; Accept one of them"), -1;
	const char *pv = http_header(req, "MCP-Protocol-Version");
	if (pv) {
		size_t i = 0;
		while (i < SANDLOT_ARRAY_SIZE(protocol_versions) && strcmp(pv, protocol_versions[i]) != 0)
			i++;
		if (i == SANDLOT_ARRAY_SIZE(protocol_versions)) {
			char msg[200];
			snprintf(msg, sizeof(msg), "Bad Request: unsupported MCP-Protocol-Version \"%.40s\" "
				 "(supported: 2025-11-25, 2025-06-18, 2025-03-26)", pv);
			return rpc_fail(req, 400, -32000, msg), -1;
		}
	}
	req->state = calloc(1, sizeof(struct body));
	if (!req->state)
		return rpc_fail(req, 500, -32603, "out of memory"), -1;
	return 0;
}

static int post_chunk(struct http_req *req, const char *data, size_t len)
{
	struct body *b = req->state;
	if (b->len + len > BODY_MAX) {
		free(b->data);
		free(b);
		req->state = NULL;
		return rpc_fail(req, 413, -32600, "message larger than 64 MiB: not read"), -1;
	}
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		while (cap < b->len + len)
			cap *= 2;
		char *nb = realloc(b->data, cap);
		if (!nb) {
			free(b->data);
			free(b);
			req->state = NULL;
			return rpc_fail(req, 500, -32603, "out of memory"), -1;
		}
		b->data = nb;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
	return 0;
}

static int post_abort(struct http_req *req)
{
	struct body *b = req->state;
	if (b) {
		free(b->data);
		free(b);
		req->state = NULL;
	}
	return 0;
}

/* What the POSTed messages are: initialize requests, other requests. */
static void classify(json_t *msg, int *inits, int *requests, int *count)
{
	size_t n = json_is_array(msg) ? json_array_size(msg) : 1;
	*count = (int)n;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_is_array(msg) ? json_array_get(msg, i) : msg;
		const char *method = json_string_value(json_object_get(m, "method"));
		int notification_or_response = json_is_object(m) &&
			(method ? !json_object_get(m, "id") : json_object_get(m, "result") ||
			 json_object_get(m, "error"));
		if (method && !strcmp(method, "initialize") && json_object_get(m, "id"))
			(*inits)++;
		else if (!notification_or_response)
			(*requests)++;   /* requests, and what the session answers with an error */
	}
}

static int post_end(struct http_req *req)
{
	struct body *b = req->state;
	req->state = NULL;
	json_error_t je;
	json_t *msg = json_loadb(b->data ? b->data : "", b->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	free(b->data);
	free(b);
	if (!msg) {
		char text[300];
		snprintf(text, sizeof(text), "parse error: %s (line %d, column %d)", je.text, je.line,
			 je.column);
		return rpc_fail(req, 400, -32700, text);
	}
	int inits = 0, requests = 0, count = 0;
	classify(msg, &inits, &requests, &count);
	struct msess *s = NULL;
	if (inits) {
		if (count > 1) {
			json_decref(msg);
			return rpc_fail(req, 400, -32600, "invalid request: initialize must be sent alone, "
					"not in a batch");
		}
		if (http_header(req, "Mcp-Session-Id")) {
			json_decref(msg);
			return rpc_fail(req, 400, -32600, "invalid request: initialize starts a session; "
					"send it without Mcp-Session-Id");
		}
		s = session_new(req);
		if (s) {
			pthread_mutex_lock(&g.lock);
			s->busy++;
			pthread_mutex_unlock(&g.lock);
		}
	} else {
		s = session_get(req, requests > 0);
	}
	if (!s) {
		json_decref(msg);
		return 0;
	}
	pthread_mutex_lock(&g.lock);
	int crowded = (inits || requests) && s->busy > INFLIGHT_MAX;   /* counted in busy */
	if (crowded)
		s->busy--;
	pthread_mutex_unlock(&g.lock);
	if (crowded) {
		/* Each waits for its turn on a thread of its own: bounded. */
		session_put(s);
		json_decref(msg);
		return rpc_fail(req, 429, -32000, "too many requests of this session in progress "
				"(at most 16): wait for their answers");
	}
	if (!requests && !inits) {
		/* Notifications and responses: a cancellation applies now. */
		json_t *el, *ignored;
		size_t i;
		if (json_is_array(msg)) {
			json_array_foreach(msg, i, el)
				if (mcp_handle_now(s->m, el, &ignored))
					json_decref(ignored);
		} else if (mcp_handle_now(s->m, msg, &ignored)) {
			json_decref(ignored);
		}
		poke(s->wakefd);
		pthread_mutex_lock(&g.lock);
		s->last_ms = mono_ms();
		pthread_mutex_unlock(&g.lock);
		session_put(s);
		json_decref(msg);
		return http_empty(req, 202);
	}

	int sse = mcp_accepts(http_header(req, "Accept"), "text/event-stream") &&
		  (!mcp_accepts(http_header(req, "Accept"), "application/json") || !inits);
	/* A lone ping is answered here, even while a call runs. */
	json_t *now = NULL;
	if (!inits && json_is_object(msg) && mcp_handle_now(s->m, msg, &now) && now) {
		pthread_mutex_lock(&g.lock);
		s->busy--;
		s->last_ms = mono_ms();
		pthread_mutex_unlock(&g.lock);
		session_put(s);
		json_decref(msg);
		return http_json(req, 200, now);
	}

	struct post *p = calloc(1, sizeof(*p));
	struct http_resp *r = NULL;
	if (p) {
		pthread_mutex_init(&p->lock, NULL);
		p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		p->refs = 2;
		p->sse = sse;
		p->s = s;
		p->msg = msg;
		p->last_out_ms = mono_ms();
		r = p->efd >= 0 ? http_resp_stream(HTTP_SIZE_UNKNOWN, post_read, post_stream_free, p) : NULL;
	}
	if (!r || http_resp_header(r, "Content-Type", sse ? "text/event-stream" : "application/json") < 0 ||
	    (sse && http_resp_header(r, "Cache-Control", "no-cache") < 0) ||
	    http_resp_header(r, "Mcp-Session-Id", s->id) < 0 || spawn(post_thread, p) < 0) {
		if (r)
			http_resp_free(r);   /* drops the stream's reference */
		else if (p)
			post_put(p);
		if (p)
			post_put(p);     /* the thread's, which never ran */
		else
			json_decref(msg);
		if (inits && session_unlink(s))
			session_put(s);
		pthread_mutex_lock(&g.lock);
		s->busy--;
		pthread_mutex_unlock(&g.lock);
		session_put(s);
		return rpc_fail(req, 500, -32603, "cannot start handling the message (see the daemon's log)");
	}
	return http_resp_send(req, 200, r);
}

/* ---- DELETE and GET /mcp ----------------------------------------------------------- */

struct ender {
	struct msess *s;
	int efd;
	int refs;   /* g.lock: the thread, the parked request */
};

static void ender_put(struct ender *e)
{
	pthread_mutex_lock(&g.lock);
	int last = --e->refs == 0;
	pthread_mutex_unlock(&g.lock);
	if (last) {
		close(e->efd);
		free(e);
	}
}

static void *ender_thread(void *arg)
{
	struct ender *e = arg;
	session_end(e->s, "deleted");
	poke(e->efd);
	ender_put(e);
	thread_done();
	return NULL;
}

static void deleted(struct http_req *req, int why)
{
	struct ender *e = req->state;
	req->state = NULL;
	if (why == HTTP_WAKE_READY)
		http_empty(req, 204);
	else if (why == HTTP_WAKE_TIMEOUT)
		rpc_fail(req, 504, -32000, "the session ended, but deleting its sandbox takes long; "
			 "sandlotd finishes it");
	else
		rpc_fail(req, 503, -32000, "sandlotd is stopping");
	ender_put(e);
}

static int mcp_delete(struct http_req *req)
{
	if (!running(req) || !origin_ok(req))
		return 0;
	struct msess *s = session_get(req, 0);
	if (!s)
		return 0;
	if (!session_unlink(s)) {
		session_put(s);
		return rpc_fail(req, 404, -32001, "Session not found: it ended or never existed");
	}
	/* The table's reference goes to session_end(); ours to the ender. */
	session_put(s);
	struct ender *e = calloc(1, sizeof(*e));
	if (e) {
		e->s = s;
		e->refs = 2;
		e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	if (!e || e->efd < 0 || spawn(ender_thread, e) < 0) {
		if (e && e->efd >= 0)
			close(e->efd);
		free(e);
		session_end(s, "deleted");   /* here, then */
		return http_empty(req, 204);
	}
	req->state = e;
	return http_park(req, e->efd, END_WAIT_MS, deleted);
}

static int mcp_get(struct http_req *req)
{
	if (!origin_ok(req))
		return 0;
	http_set_header(req, "Allow", "POST, DELETE");
	return rpc_fail(req, 405, -32000, "Method Not Allowed: this server offers no stream at GET "
			"/mcp (answers come on the POST's own stream)");
}

const struct http_route mcp_routes[] = {
	{ "POST", "/mcp", HTTP_RAW, post_begin, post_chunk, post_end, post_abort },
	{ "DELETE", "/mcp", HTTP_NOBODY, mcp_delete, NULL, NULL, NULL },
	{ "GET", "/mcp", HTTP_NOBODY, mcp_get, NULL, NULL, NULL },
	{ 0 },
};

/* ---- the reaper, start and stop --------------------------------------------------- */

static void *reaper_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g.lock);
	while (!g.stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&g.cond, &g.lock, &ts);
		if (g.stopping)
			break;
		int64_t now = mono_ms();
		struct msess *idle = NULL, *live[64];
		size_t nlive = 0;
		for (struct msess **pp = &g.sessions; *pp;) {
			struct msess *s = *pp;
			if (!s->busy && now - s->last_ms >= (int64_t)g.idle_s * 1000) {
				*pp = s->next;
				s->in_table = 0;
				g.nsessions--;
				s->next = idle;
				idle = s;
				continue;
			}
			if (!s->busy && nlive < SANDLOT_ARRAY_SIZE(live)) {
				s->refs++;
				live[nlive++] = s;
			}
			pp = &s->next;
		}
		pthread_mutex_unlock(&g.lock);
		while (idle) {
			struct msess *s = idle;
			idle = s->next;
			session_end(s, "idle");
		}
		for (size_t i = 0; i < nlive; i++) {
			if (pthread_mutex_trylock(&live[i]->run) == 0) {
				mcp_keepalive(live[i]->m);
				pthread_mutex_unlock(&live[i]->run);
			}
			session_put(live[i]);
		}
		pthread_mutex_lock(&g.lock);
	}
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

int mcp_http_start(struct daemon *d, const struct mcp_http_config *cfg, sandlot_error_t **err)
{
	g.d = d;
	g.api_host = strdup(cfg->api_host);
	g.api_token = cfg->api_token ? strdup(cfg->api_token) : NULL;
	g.max_sessions = cfg->max_sessions;
	g.idle_s = cfg->idle_s;
	for (int i = 0; i < cfg->norigins && i < MCP_ORIGINS_MAX; i++)
		if ((g.origins[g.norigins] = strdup(cfg->origins[i])))
			g.norigins++;
	int rc = g.api_host && (!cfg->api_token || g.api_token) ? pthread_create(&g.reaper, NULL, reaper_thread, NULL)
							      : ENOMEM;
	if (rc != 0) {
		sandlot__error(err, rc, "starting the MCP endpoint: %s", strerror(rc));
		free(g.api_host);
		free(g.api_token);
		g.api_host = g.api_token = NULL;
		return -1;
	}
	pthread_mutex_lock(&g.lock);
	g.started = 1;
	pthread_mutex_unlock(&g.lock);
	daemon_log("mcp_listening", "path=/mcp max_sessions=%u idle_timeout=%u", g.max_sessions, g.idle_s);
	return 0;
}

void mcp_http_stop(void)
{
	pthread_mutex_lock(&g.lock);
	if (!g.started || g.stopping) {
		pthread_mutex_unlock(&g.lock);
		return;
	}
	g.stopping = 1;
	pthread_cond_broadcast(&g.cond);
	struct msess *all = g.sessions;
	for (struct msess *s = all; s; s = s->next)
		s->in_table = 0;
	g.sessions = NULL;
	g.nsessions = 0;
	pthread_mutex_unlock(&g.lock);
	pthread_join(g.reaper, NULL);
	while (all) {
		struct msess *s = all;
		all = s->next;
		session_end(s, "stopping");
	}
	/* Our threads finish quickly once their sessions stopped. */
	pthread_mutex_lock(&g.lock);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	while (g.threads > 0 && pthread_cond_timedwait(&g.cond, &g.lock, &ts) == 0)
		;
	pthread_mutex_unlock(&g.lock);
	free(g.api_host);
	free(g.api_token);
	g.api_host = g.api_token = NULL;
	for (int i = 0; i < g.norigins; i++)
		free(g.origins[i]);
	g.norigins = 0;
}
