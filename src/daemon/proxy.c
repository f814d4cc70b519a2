/* The HTTP proxy to exposed ports: ANY /v1/sandboxes/{id}/ports/{port}/...
 *
 * What reaches an exposed port through the API — for remote users of the
 * TCP listener with a token, who cannot reach the host's 127.0.0.1 — is
 * proxied as HTTP/1.1 to the server inside, over a connection opened with
 * sandlot_port_connect() (one per request: "Connection: close").
 *
 *   request   the method, the rest of the path after /ports/{port} and the
 *             query, as sent (still percent-encoded); the client's headers
 *             except hop-by-hop ones (Connection and what it names,
 *             Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Expect,
 *             Proxy-*) and except the API's own credentials: Authorization
 *             is dropped whenever it carried the daemon's bearer token, so
 *             the token never reaches code in the sandbox.  Host becomes
 *             127.0.0.1:PORT (what development servers accept); the
 *             original goes in X-Forwarded-Host, with X-Forwarded-Proto and
 *             X-Forwarded-Prefix (/v1/sandboxes/{id}/ports/{port}, for
 *             applications that build absolute links).  A body is passed
 *             on as it arrives, with its Content-Length, or chunked.
 *   response  parsed with http-parser (answer.c): its status and
 *             headers (hop-by-hop ones dropped), and its body as it
 *             arrives, with its length when it gave one, else chunked.
 *   upgrade   a request with "Upgrade" (a WebSocket) is sent with it; a
 *             101 answer switches the client's connection over, and from
 *             then on the port relay (ports.c) moves the bytes both ways.
 *   errors    (JSON, from the API): 404 port_not_exposed, 502 bad_gateway
 *             when nothing listens on the port inside or the server's
 *             answer is not HTTP, 504 gateway_timeout when it does not take
 *             the request.  A server that answers more than PROXY_EARLY_MAX
 *             before reading the whole request body gets 502 too: the API
 *             server cannot send an answer while a request body is still
 *             coming (the port's URL relays such full-duplex streams).
 *
 * A sandbox's host (e2b.h): a request whose Host is PORT-ID.DOMAIN (any
 * path) is proxied the same way to that port (proxy_host_route; http.c
 * routes it by its Host).  Then the target is the request's own; there is
 * no X-Forwarded-Prefix; E2B's credential headers are dropped
 * (E2B-Traffic-Access-Token, and X-API-KEY or X-Access-Token carrying the
 * daemon's or the sandbox's token); errors have E2B's shape with our code
 * ({"code": status, "error", "message"}).  A sandbox created through /e2b
 * has every port of its loopback reachable so (E2B exposes no ports
 * explicitly); any other only its exposed ports.
 *
 * Waiting: the request body goes up from the worker pool for calls that
 * may wait (http_long_wait(): send_up() waits while the server takes
 * nothing, watching the client for a hang-up, at most
 * PROXY_WRITE_TIMEOUT_MS); waiting for the answer's head and for its body
 * parks on the upstream socket (http_park(), HTTP_STREAM_WAIT), so a slow
 * server inside holds no thread.  Removing the port or ending the sandbox
 * shuts the upstream socket down (ports_track), which ends a request in
 * progress.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/answer.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "daemon/e2b.h"

#define PROXY_HEAD_MAX (64u * 1024)      /* the request head we build */
#define PROXY_EARLY_MAX (1u << 20)       /* answer bytes kept while the body is sent */
#define PROXY_WRITE_TIMEOUT_MS 60000     /* the server takes no request bytes */
#define PROXY_READ_CHUNK (64u * 1024)

struct prx {
	struct daemon *d;
	struct dsb *s;                       /* dsb_get()'s busy reference */
	unsigned port;
	int host_mode;                       /* came by a sandbox's host */
	int any_port;                        /* every port reachable (not only exposed ones) */
	int up;                              /* the connection into the sandbox */
	struct ptrack *tracked;
	int client_fd;
	int head_req, upgrade_req, chunked_up;
	int write_failed, early_overflow, timed_out;
	/* Answer bytes read while the request body was being sent. */
	char *early;
	size_t early_len;
	struct answer ans;                   /* the answer, parsed */
	char *rbuf;                          /* PROXY_READ_CHUNK bytes, for reads */
	char prefix[96];                     /* /v1/sandboxes/{id}/ports/{port} */
};

static void prx_free(struct prx *p)
{
	if (!p)
		return;
	if (p->up >= 0) {
		ports_untrack(p->tracked); /* before close: the number may be reused */
		close(p->up);
	}
	if (p->s)
		dsb_put(p->d, p->s);
	free(p->early);
	answer_free(&p->ans);
	free(p->rbuf);
	free(p);
}

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 1024;
	while (c < need)
		c *= 2;
	char *n = realloc(*buf, c);
	if (!n)
		return -1;
	*buf = n;
	*cap = c;
	return 0;
}

/* ---- the request head --------------------------------------------------------- */

struct head {
	char *p;
	size_t len, cap;
	int failed;
};

static void hprintf(struct head *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void hprintf(struct head *h, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || h->failed || h->len + (size_t)n + 1 > PROXY_HEAD_MAX ||
	    grow(&h->p, &h->cap, h->len + (size_t)n + 1) < 0) {
		h->failed = 1;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(h->p + h->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	h->len += (size_t)n;
}

/* Whether `list` (a Connection header's value) names header `name`. */
static int token_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		size_t len = strcspn(p, ", \t");
		if (len == n && strncasecmp(p, name, n) == 0)
			return 1;
		p += len;
	}
	return 0;
}

static int hop_by_hop(const char *name)
{
	static const char *const names[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(name, names[i]) == 0)
			return 1;
	return 0;
}

struct copy_ctx {
	struct http_req *req;
	struct head *h;
	const char *connection;              /* the client's Connection header */
	const char *bearer;                  /* "Bearer TOKEN" of the daemon, or NULL */
	int host_mode;
	const char *token;                   /* the daemon's token, or NULL */
	const char *scoped;                  /* the sandbox's access token, or NULL */
};

/* Constant-time string equality (the daemon's token). */
static int same_secret(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;
	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)(b[i] ^ (i < la ? a[i] : 0));
	return diff == 0;
}

static int copy_header(void *ud, const char *name, const char *value)
{
	struct copy_ctx *c = ud;
	if (hop_by_hop(name) || strcasecmp(name, "Host") == 0 || strcasecmp(name, "Expect") == 0 ||
	    strcasecmp(name, "Content-Length") == 0 || strncasecmp(name, "X-Forwarded-", 12) == 0)
		return 0;
	if (c->connection && token_listed(c->connection, name))
		return 0;
	if (strcasecmp(name, "Authorization") == 0 &&
	    (c->req->token_auth || (c->bearer && same_secret(value, c->bearer))))
		return 0; /* the API's credentials, not the application's */
	if (c->host_mode) {
		/* E2B's proxy's header, and E2B's keys when they are ours. */
		if (strcasecmp(name, "E2B-Traffic-Access-Token") == 0)
			return 0;
		if ((strcasecmp(name, "X-API-KEY") == 0 || strcasecmp(name, "X-Access-Token") == 0) &&
		    ((c->token && same_secret(value, c->token)) ||
		     (c->scoped && same_secret(value, c->scoped))))
			return 0;
	}
	hprintf(c->h, "%s: %s\r\n", name, value);
	return 0;
}

/* The request line and headers for the server inside. */
static int build_head(struct http_req *req, struct prx *p, const char *target, struct head *h)
{
	const char *connection = http_header(req, "Connection");
	const char *upgrade = http_header(req, "Upgrade");
	const char *host = http_header(req, "Host");
	const char *cl = http_header(req, "Content-Length");
	const char *te = http_header(req, "Transfer-Encoding");
	p->upgrade_req = upgrade && connection && token_listed(connection, "upgrade");
	char bearer[600] = "";
	if (req->d->cfg.token)
		snprintf(bearer, sizeof(bearer), "Bearer %s", req->d->cfg.token);
	hprintf(h, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n", req->method, target, p->port);
	char scoped[E2B_ACCESS_TOKEN_LEN + 1] = "";
	if (p->host_mode && req->d->cfg.token)
		e2b_access_token(req->d->cfg.token, p->s->id, strlen(p->s->id), scoped);
	struct copy_ctx c = { req, h, connection, bearer[0] ? bearer : NULL, p->host_mode,
			      req->d->cfg.token, scoped[0] ? scoped : NULL };
	http_headers_each(req, copy_header, &c);
	if (host)
		hprintf(h, "X-Forwarded-Host: %s\r\n", host);
	hprintf(h, "X-Forwarded-Proto: http\r\n");
	if (!p->host_mode)
		hprintf(h, "X-Forwarded-Prefix: %s\r\n", p->prefix);
	if (p->upgrade_req)
		hprintf(h, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
	else
		hprintf(h, "Connection: close\r\n");
	if (cl) {
		hprintf(h, "Content-Length: %s\r\n", cl);
	} else if (te) {
		/* libmicrohttpd decoded the client's chunks; ours are new. */
		p->chunked_up = 1;
		hprintf(h, "Transfer-Encoding: chunked\r\n");
	}
	hprintf(h, "\r\n");
	return h->failed ? -1 : 0;
}

/* ---- talking to the server inside ------------------------------------------------- */

/* Keep answer bytes that arrive while we still send the request. */
static int read_early(struct prx *p)
{
	char buf[16384];
	ssize_t n = recv(p->up, buf, sizeof(buf), MSG_DONTWAIT);
	if (n <= 0)
		return n == 0 || errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (p->early_len + (size_t)n > PROXY_EARLY_MAX) {
		p->early_overflow = 1;
		return -1;
	}
	char *e = realloc(p->early, p->early_len + (size_t)n);
	if (!e)
		return -1;
	memcpy(e + p->early_len, buf, (size_t)n);
	p->early = e;
	p->early_len += (size_t)n;
	return 0;
}

/* Send all of data to the server; while it takes nothing, keep what it
 * answers meanwhile.  0, or -1 (sets write_failed, early_overflow or
 * timed_out; the request is then answered at its end). */
static int send_up(struct prx *p, const char *data, size_t len)
{
	uint64_t deadline = sandlot__now_ms() + PROXY_WRITE_TIMEOUT_MS;
	while (len > 0) {
		ssize_t w = send(p->up, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			data += w;
			len -= (size_t)w;
			deadline = sandlot__now_ms() + PROXY_WRITE_TIMEOUT_MS;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR) {
			p->write_failed = 1;
			return -1;
		}
		int64_t left = (int64_t)(deadline - sandlot__now_ms());
		if (left <= 0) {
			p->timed_out = 1;
			return -1;
		}
		struct pollfd pf[2] = { { .fd = p->up, .events = POLLOUT | POLLIN },
					{ .fd = p->client_fd, .events = POLLRDHUP } };
		int r = poll(pf, p->client_fd >= 0 ? 2 : 1, (int)left);
		if (r < 0 && errno != EINTR)
			return p->write_failed = 1, -1;
		if (r > 0 && p->client_fd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return p->write_failed = 1, -1;
		if (r > 0 && (pf[0].revents & POLLIN) && read_early(p) < 0) {
			p->write_failed = 1;
			return -1;
		}
	}
	return 0;
}

/* The steps below never block: each says PROXY_AGAIN when it needs the
 * server's socket to become readable, and the request or the answer's
 * stream then parks on it. */
#define PROXY_AGAIN (-2)

/* Read what the server has: bytes read, 0 at its EOF, PROXY_AGAIN, or -1. */
static ssize_t read_up(struct prx *p, char *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(p->up, buf, len, MSG_DONTWAIT);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? PROXY_AGAIN : -1;
	}
}

/* One step towards the answer's head: 1 when it is complete, PROXY_AGAIN,
 * or -1 with *why. */
static int head_step(struct prx *p, const char **why)
{
	if (p->early_len) {
		char *e = p->early;
		size_t n = p->early_len;
		p->early = NULL;
		p->early_len = 0;
		int rc = answer_feed(&p->ans, e, n);
		free(e);
		if (rc < 0)
			goto bad;
	}
	char buf[16384];
	while (!p->ans.head_done) {
		ssize_t n = read_up(p, buf, sizeof(buf));
		if (n == PROXY_AGAIN)
			return PROXY_AGAIN;
		if (n < 0) {
			*why = "the connection to the server inside failed";
			return -1;
		}
		if (n == 0) {
			*why = "the server inside closed the connection without answering";
			return -1;
		}
		if (answer_feed(&p->ans, buf, (size_t)n) < 0)
			goto bad;
	}
	return 1;
bad:
	*why = p->ans.too_big ? "the server inside answered with a header larger than 64 KiB "
				"or 128 headers"
			      : "the server inside did not answer with HTTP";
	return -1;
}

/* ---- the answer's body, as the client takes it ------------------------------------- */

/* Up to max bytes of the body into buf: bytes, 0 at its end, PROXY_AGAIN,
 * or -1 (the server failed or cut it short). */
static ssize_t body_step(struct prx *p, char *buf, size_t max)
{
	struct answer *a = &p->ans;
	for (;;) {
		if (a->body_len > a->body_off) {
			size_t n = a->body_len - a->body_off;
			if (n > max)
				n = max;
			memcpy(buf, a->body + a->body_off, n);
			a->body_off += n;
			if (a->body_off == a->body_len)
				a->body_off = a->body_len = 0;
			return (ssize_t)n;
		}
		if (a->msg_done)
			return 0;
		/* Decode straight into buf: the decoded body is never longer
		 * than the raw bytes it came from. */
		a->out = buf;
		a->out_len = 0;
		a->out_cap = max;
		int rc;
		if (a->raw_len) {
			size_t n = a->raw_len > max ? max : a->raw_len;
			char *r = a->raw + a->raw_off;
			a->raw_off += n;
			a->raw_len -= n;
			rc = answer_feed(a, r, n);
		} else {
			if (!p->rbuf)
				p->rbuf = malloc(PROXY_READ_CHUNK);
			ssize_t n = p->rbuf ? read_up(p, p->rbuf, max < PROXY_READ_CHUNK ? max
											: PROXY_READ_CHUNK)
					    : -1;
			if (n < 0) {
				a->out = NULL;
				return n; /* PROXY_AGAIN or -1 */
			}
			/* n == 0: EOF ends a body that runs to the close, and is
			 * an error for one that had a length (cut short). */
			rc = answer_feed(a, p->rbuf, (size_t)n);
			if (n == 0 && !a->msg_done)
				rc = -1;
		}
		size_t got = a->out_len;
		a->out = NULL;
		if (rc < 0)
			return -1;
		if (got)
			return (ssize_t)got;
	}
}

static ssize_t body_read(void *ud, char *buf, size_t max, struct http_wait *w)
{
	struct prx *p = ud;
	ssize_t n = body_step(p, buf, max);
	if (n == PROXY_AGAIN) {
		w->fd = p->up;
		w->timeout_ms = -1;
		return HTTP_STREAM_WAIT;
	}
	return n < 0 ? HTTP_STREAM_ERROR : n;
}

static void body_done(void *ud, int completed)
{
	prx_free(ud);
}

/* ---- upgrades -------------------------------------------------------------------------- */

static void upgraded(void *ud, int sock, const char *extra, size_t extra_len, void *handle)
{
	struct prx *p = ud;
	int up = p->up;
	ports_untrack(p->tracked);
	p->tracked = NULL;
	p->up = -1;
	ports_adopt(p->s, p->port, p->any_port, sock, http_upgrade_close, handle, extra, extra_len,
		    up, p->ans.raw ? p->ans.raw + p->ans.raw_off : NULL, p->ans.raw_len);
	prx_free(p);
}

static void upgrade_dropped(void *ud)
{
	prx_free(ud);
}

/* The 101 answer to the client, with the server's headers. */
static int answer_upgrade(struct http_req *req, struct prx *p)
{
	struct http_resp *r = http_resp_upgrade(upgraded, upgrade_dropped, p);
	if (!r)
		return http_error(req, 500, "internal", "out of memory");
	for (unsigned i = 0; i < p->ans.nhdrs; i++) {
		const char *name = answer_header_name(&p->ans, i);
		const char *value = answer_header_value(&p->ans, i);
		if (strcasecmp(name, "Connection") == 0 || strcasecmp(name, "Content-Length") == 0 ||
		    strcasecmp(name, "Transfer-Encoding") == 0)
			continue;
		http_resp_header(r, name, value);
	}
	return http_resp_send(req, 101, r);
}

/* ---- the route ------------------------------------------------------------------------ */

static int proxy_error(struct http_req *req, struct prx *p, int status, const char *code,
		       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int proxy_error(struct http_req *req, struct prx *p, int status, const char *code,
		       const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	http_error(req, status, code, "%s", msg);
	prx_free(p);
	req->state = NULL;
	return -1;
}

/* The target for the server: the raw URI after /v1/sandboxes/ID/ports/PORT
 * (the path's fifth '/' starts it). */
static const char *target_of(const char *uri)
{
	const char *t = uri;
	for (int slashes = 0; *t; t++)
		if (*t == '/' && ++slashes == 6)
			return t;
	return "/";
}

/* The sandbox of a request to its host, busy (dsb_put()), or NULL having
 * answered: 404 unknown, 409 paused (unless it resumes on use), 410
 * ended. */
static struct dsb *host_sandbox(struct http_req *req)
{
	const char *id = req->params[0];
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_get(req->d, id, &err);
	if (s)
		return s;
	int st = sandlot_error_status(err);
	if (st == ENOENT)
		http_error(req, 404, "sandbox_not_found", "sandbox %.64s not found", id);
	else if (st == DOMAIN_EPAUSED)
		http_error(req, 409, "sandbox_paused",
			   "sandbox %.64s is paused: resume it first (Sandbox.connect(), or POST "
			   "/v1/sandboxes/%.64s/resume)", id, id);
	else {
		const char *code;
		int hs = http_status_of(err, &code);
		http_error(req, hs, code, "%s", err ? sandlot_error_message(err) : "out of memory");
	}
	sandlot_error_free(err);
	return NULL;
}

static int proxy_begin(struct http_req *req)
{
	struct daemon *d = req->d;
	unsigned long port = 0;
	const char *ps = req->params[1];
	const char *q = ps;
	for (; *q >= '0' && *q <= '9' && port <= 65535; q++)
		port = port * 10 + (unsigned long)(*q - '0');
	if (q == ps || *q || port < 1 || port > 65535)
		return http_error(req, 400, "bad_request", "invalid port \"%.16s\": expected 1 to "
				  "65535", ps), -1;
	struct prx *p = calloc(1, sizeof(*p));
	if (!p)
		return http_error(req, 500, "internal", "out of memory"), -1;
	p->d = d;
	p->up = -1;
	p->port = (unsigned)port;
	p->client_fd = req->client_fd;
	p->head_req = strcmp(req->method, "HEAD") == 0;
	http_long_wait(req); /* send_up() waits while the server takes nothing */
	answer_init(&p->ans, p->head_req);
	req->state = p;
	p->host_mode = req->host_routed;
	p->s = p->host_mode ? host_sandbox(req) : dsb_get(d, req, req->params[0]);
	if (!p->s) {
		req->state = NULL;
		free(p);
		return -1; /* answered */
	}
	snprintf(p->prefix, sizeof(p->prefix), "/v1/sandboxes/%s/ports/%u", p->s->id, p->port);
	p->any_port = p->host_mode && e2b_sandbox_all_ports(p->s);
	if (!p->any_port && !ports_exposed(p->s, p->port)) {
		char list[PORTS_MAX * 8] = "";
		size_t o = 0;
		pthread_mutex_lock(&p->s->lock);
		for (unsigned i = 0; i < p->s->nports && o + 8 < sizeof(list); i++)
			o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%u", i ? ", " : "",
					      (unsigned)p->s->ports[i].port);
		pthread_mutex_unlock(&p->s->lock);
		return proxy_error(req, p, 404, "port_not_exposed",
				   "port %u is not exposed in sandbox %s (exposed: %s); add it with "
				   "POST /v1/sandboxes/%s/ports%s", p->port, p->s->id,
				   list[0] ? list : "none", p->s->id,
				   p->host_mode ? " (sandboxes created through /e2b reach every port "
						  "by their host)" : "");
	}
	sandlot_error_t *err = NULL;
	p->up = sandlot_port_connect(p->s->sb, p->port, 0, &err);
	if (p->up < 0) {
		int st = sandlot_error_status(err);
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(err));
		sandlot_error_free(err);
		if (st == ECONNREFUSED)
			return proxy_error(req, p, 502, "bad_gateway",
					   "nothing is listening on port %u in sandbox %s (start a server "
					   "on 0.0.0.0:%u or 127.0.0.1:%u inside)", p->port, p->s->id,
					   p->port, p->port);
		if (st == ETIMEDOUT)
			return proxy_error(req, p, 504, "gateway_timeout", "sandbox %s: %s", p->s->id,
					   msg);
		if (st == EPIPE)
			return proxy_error(req, p, 410, "sandbox_gone", "sandbox %s: %s", p->s->id, msg);
		return proxy_error(req, p, 502, "bad_gateway", "sandbox %s: %s", p->s->id, msg);
	}
	int one = 1;
	setsockopt(p->up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	p->tracked = ports_track(p->s, p->port, p->any_port, p->up);
	if (!p->tracked) {
		if (p->any_port)
			return proxy_error(req, p, 410, "sandbox_gone", "sandbox %s is no longer running",
					   p->s->id);
		return proxy_error(req, p, 404, "port_not_exposed",
				   "port %u of sandbox %s was just removed", p->port, p->s->id);
	}
	struct head h = { 0 };
	if (build_head(req, p, p->host_mode ? req->uri : target_of(req->uri), &h) < 0) {
		free(h.p);
		return proxy_error(req, p, 431, "bad_request",
				   "the request's header is too large to pass on (over %u bytes)",
				   PROXY_HEAD_MAX);
	}
	send_up(p, h.p, h.len);
	free(h.p);
	return 0;
}

static int proxy_chunk(struct http_req *req, const char *data, size_t len)
{
	struct prx *p = req->state;
	if (p->write_failed || p->timed_out || p->early_overflow)
		return 0; /* dropped: answered at the end */
	if (p->chunked_up) {
		char size[32];
		int n = snprintf(size, sizeof(size), "%zx\r\n", len);
		if (send_up(p, size, (size_t)n) == 0 && send_up(p, data, len) == 0)
			send_up(p, "\r\n", 2);
	} else {
		send_up(p, data, len);
	}
	return 0;
}

static int proxy_head(struct http_req *req, int why);

static void proxy_head_wait(struct http_req *req, int why)
{
	proxy_head(req, why);
}

static int proxy_end(struct http_req *req)
{
	struct prx *p = req->state;
	if (p->chunked_up && !p->write_failed && !p->timed_out && !p->early_overflow)
		send_up(p, "0\r\n\r\n", 5);
	if (p->early_overflow)
		return proxy_error(req, p, 502, "bad_gateway",
				   "the server on port %u answered more than %u bytes before reading "
				   "the whole request body, which the API cannot relay (use the "
				   "port's url for full-duplex streams)", p->port, PROXY_EARLY_MAX);
	if (p->timed_out)
		return proxy_error(req, p, 504, "gateway_timeout",
				   "the server on port %u took none of the request for %u s", p->port,
				   PROXY_WRITE_TIMEOUT_MS / 1000);
	return proxy_head(req, HTTP_WAKE_READY);
}

/* The answer's head, then the answer: parked on the upstream socket until
 * the head is complete (p stays in req->state meanwhile). */
static int proxy_head(struct http_req *req, int why)
{
	struct prx *p = req->state;
	if (why == HTTP_WAKE_GONE || why == HTTP_WAKE_STOP)
		return proxy_error(req, p, 502, "bad_gateway", "port %u of sandbox %s: %s", p->port,
				   p->s->id, why == HTTP_WAKE_GONE ? "the client went away"
				   : "sandlotd is stopping");
	const char *reason = NULL;
	int rc = head_step(p, &reason);
	if (rc == PROXY_AGAIN)
		return http_park(req, p->up, -1, proxy_head_wait);
	if (rc < 0)
		return proxy_error(req, p, 502, "bad_gateway", "port %u of sandbox %s: %s", p->port,
				   p->s->id, reason);
	req->state = NULL;
	if (p->ans.status == 101) {
		if (!p->upgrade_req || !answer_upgraded(&p->ans)) {
			req->state = p;
			return proxy_error(req, p, 502, "bad_gateway",
					   "the server on port %u switched protocols (101) without being "
					   "asked to", p->port);
		}
		return answer_upgrade(req, p);
	}
	answer_resume(&p->ans);
	struct http_resp *r = http_resp_stream(p->ans.length == ANSWER_NO_LENGTH ? HTTP_SIZE_UNKNOWN
										: p->ans.length,
					       body_read, body_done, p);
	if (!r)
		return http_error(req, 500, "internal", "out of memory");
	for (unsigned i = 0; i < p->ans.nhdrs; i++) {
		const char *name = answer_header_name(&p->ans, i);
		const char *value = answer_header_value(&p->ans, i);
		if (hop_by_hop(name) || strcasecmp(name, "Content-Length") == 0)
			continue;
		http_resp_header(r, name, value);
	}
	return http_resp_send(req, (int)p->ans.status, r);
}

static int proxy_abort(struct http_req *req)
{
	prx_free(req->state);
	req->state = NULL;
	return 0;
}

/* Not in a table: http.c gives it the requests to a sandbox's host, with
 * the sandbox and the port as params. */
const struct http_route proxy_host_route = { "*", "PORT-SANDBOXID.DOMAIN", HTTP_RAW, proxy_begin,
					     proxy_chunk, proxy_end, proxy_abort };

const struct http_route proxy_routes[] = {
	{ "*", "/v1/sandboxes/{}/ports/{}/*", HTTP_RAW, proxy_begin, proxy_chunk, proxy_end,
	  proxy_abort },
	{ 0 },
};
