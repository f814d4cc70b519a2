/* sandlotd's front door (contract in gate.h).
 *
 * Connection records live in one table (g->byfd, by descriptor) and in the
 * list of their state, each list in the order of its deadlines (every
 * deadline of a state is "entered the state + a constant"), so the sweep
 * only looks at list heads:
 *
 *   PENDING    ours: waiting for a complete head (deadline: accept +
 *              header timeout)
 *   CLOSING    ours: answered with an error, reading what the client still
 *              sends for a moment so that it sees the answer
 *   ADMITTED   libmicrohttpd's, before it read the head we checked (a
 *              safety deadline: it does so at once)
 *   ACTIVE     libmicrohttpd's, a request being served (no deadline here)
 *   IDLE       libmicrohttpd's, kept alive between requests (deadline: end
 *              of the last answer + keep-alive timeout)
 *
 * PENDING and IDLE records are also in their peer's lists, for eviction.
 * A record of libmicrohttpd's is never closed here: it is shut down
 * (shutdown(2), after checking that the descriptor is still the same
 * socket) and libmicrohttpd closes it, telling us through
 * gate_conn_closed() before the descriptor is released — so a descriptor
 * in the table is always the connection the record says.
 */
#include "daemon/gate.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/httphead.h"

#define MAX_LISTENERS 4
#define ACCEPT_BATCH 64          /* accepts per listener per turn of the loop */
#define LINGER_MS 2000           /* after an error answer */
#define LINGER_BYTES (1u << 20)
#define MAX_CLOSING 1024         /* lingering connections; the oldest go first */
#define PEEKS_CHEAP 64           /* peeks of a head before the growth rule */
#define PEEK_GROWTH 4096         /* then: only once this much more arrived */
#define PEER_BUCKETS 4096
#define LISTEN_PAUSE_MS 100      /* after accept() ran out of descriptors */

enum kind { K_WAKE, K_LISTENER, K_CONN };
enum cstate { C_PENDING, C_CLOSING, C_ADMITTED, C_ACTIVE, C_IDLE, C_NSTATES };
enum reason { R_HEADER_TIMEOUT, R_KEEPALIVE, R_PEER_LIMIT, R_LIMIT, R_BAD_REQUEST,
	      R_UNAUTHORIZED, R_NREASONS };
static const char *const reason_names[R_NREASONS] = {
	"header_timeout", "keepalive_timeout", "peer_limit", "limit", "bad_request", "unauthorized",
};

struct item {
	enum kind kind;
};

struct listener {
	struct item it;
	int fd;
	int tcp;
	int paused;
	char *unix_path;             /* to unlink when we stop, if still ours */
	dev_t dev;
	ino_t ino;
};

struct link {
	struct gate_conn *prev, *next;
};

struct clist {
	struct gate_conn *head, *tail;
	unsigned n;
};

struct peer {
	struct peer *next;           /* hash chain */
	unsigned char key[9];        /* 4: IPv4 address, 6: IPv6 /64 */
	unsigned count;              /* connections in all */
	struct clist pend, idle;
};

struct gate_conn {
	struct item it;
	int fd;
	enum cstate state;
	int tcp;
	int in_mhd;                  /* handed to libmicrohttpd */
	int evicted;                 /* shut down, out of the lists, until closed */
	int in_plist;                /* in its peer's pend or idle list */
	ino_t ino;                   /* the socket's inode: is fd still it? */
	struct peer *peer;           /* NULL: a unix socket client */
	uint64_t deadline_ms;
	size_t peeked;
	unsigned npeeks;
	size_t lingered;
	struct link glink, plink;
	struct sockaddr_storage addr;
	socklen_t addrlen;
};

struct gate {
	struct gate_config cfg;
	char *bearer;                /* "Bearer TOKEN" */
	struct listener ls[MAX_LISTENERS];
	int nls;
	struct MHD_Daemon *mhd;
	struct item wake_item;
	int ep, wake;
	pthread_t thread;
	int started;
	pthread_mutex_t lock;        /* everything below */
	pthread_cond_t quiesced_cond;
	int quiesce_asked, quiesced, stop_asked;
	struct clist lists[C_NSTATES];
	unsigned total;
	struct gate_conn **byfd;
	size_t nbyfd;
	struct peer *peers[PEER_BUCKETS];
	uint64_t dropped[R_NREASONS];
	uint64_t listen_paused_until;
	uint64_t emfile_logged_ms;
	char *peekbuf;               /* the door's thread only */
};

/* ---- lists ------------------------------------------------------------------------- */

static struct link *lk(struct gate_conn *c, int per_peer)
{
	return per_peer ? &c->plink : &c->glink;
}

static void list_add(struct clist *l, struct gate_conn *c, int per_peer)
{
	struct link *k = lk(c, per_peer);
	k->next = NULL;
	k->prev = l->tail;
	if (l->tail)
		lk(l->tail, per_peer)->next = c;
	else
		l->head = c;
	l->tail = c;
	l->n++;
}

static void list_del(struct clist *l, struct gate_conn *c, int per_peer)
{
	struct link *k = lk(c, per_peer);
	if (k->prev)
		lk(k->prev, per_peer)->next = k->next;
	else
		l->head = k->next;
	if (k->next)
		lk(k->next, per_peer)->prev = k->prev;
	else
		l->tail = k->prev;
	k->prev = k->next = NULL;
	l->n--;
}

/* ---- peers ------------------------------------------------------------------------- */

/* The per-peer key of a client address: NULL-equivalent (0) for unix
 * clients; IPv4-mapped IPv6 counts as IPv4; IPv6 by /64 (one host usually
 * has a whole /64). */
static int peer_key(const struct sockaddr_storage *ss, unsigned char key[9])
{
	memset(key, 0, 9);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		key[0] = 4;
		memcpy(key + 1, &in->sin_addr, 4);
		return 1;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			key[0] = 4;
			memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, in6->sin6_addr.s6_addr, 8);
		}
		return 1;
	}
	return 0;
}

static size_t peer_bucket(const unsigned char key[9])
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 9; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % PEER_BUCKETS;
}

static struct peer *peer_get(struct gate *g, const unsigned char key[9])
{
	size_t b = peer_bucket(key);
	for (struct peer *p = g->peers[b]; p; p = p->next)
		if (memcmp(p->key, key, 9) == 0)
			return p;
	struct peer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	memcpy(p->key, key, 9);
	p->next = g->peers[b];
	g->peers[b] = p;
	return p;
}

static void peer_put(struct gate *g, struct peer *p)
{
	if (!p || p->count > 0)
		return;
	struct peer **pp = &g->peers[peer_bucket(p->key)];
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	free(p);
}

/* ---- connection records (g->lock held) ---------------------------------------------------- */

static void plist_leave(struct gate_conn *c)
{
	if (!c->in_plist)
		return;
	list_del(c->state == C_PENDING ? &c->peer->pend : &c->peer->idle, c, 1);
	c->in_plist = 0;
}

static void set_state(struct gate *g, struct gate_conn *c, enum cstate s, uint64_t deadline)
{
	list_del(&g->lists[c->state], c, 0);
	plist_leave(c);
	c->state = s;
	c->deadline_ms = deadline;
	list_add(&g->lists[s], c, 0);
	if (c->peer && (s == C_PENDING || s == C_IDLE)) {
		list_add(s == C_PENDING ? &c->peer->pend : &c->peer->idle, c, 1);
		c->in_plist = 1;
	}
}

/* Drop the record (the descriptor is closed by the caller, or was by
 * libmicrohttpd). */
static void conn_forget(struct gate *g, struct gate_conn *c)
{
	if (!c->evicted)
		list_del(&g->lists[c->state], c, 0);
	plist_leave(c);
	if (c->peer) {
		c->peer->count--;
		peer_put(g, c->peer);
	}
	g->total--;
	if ((size_t)c->fd < g->nbyfd && g->byfd[c->fd] == c)
		g->byfd[c->fd] = NULL;
	free(c);
}

/* One of ours: close it now. */
static void conn_close(struct gate *g, struct gate_conn *c)
{
	int fd = c->fd;
	conn_forget(g, c);
	close(fd); /* also leaves the epoll set */
}

/* Whether fd is still the socket c was accepted as. */
static int same_socket(const struct gate_conn *c)
{
	struct stat st;
	return fstat(c->fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == c->ino;
}

/* Close (ours) or shut down (libmicrohttpd's) a connection for `why`. */
static void drop(struct gate *g, struct gate_conn *c, enum reason why)
{
	g->dropped[why]++;
	if (!c->in_mhd) {
		conn_close(g, c);
		return;
	}
	if (c->evicted)
		return;
	if (!same_socket(c)) {
		/* libmicrohttpd let it go without telling (it refused it after
		 * taking it): the descriptor may be someone else's now. */
		conn_forget(g, c);
		return;
	}
	shutdown(c->fd, SHUT_RDWR);
	list_del(&g->lists[c->state], c, 0);
	plist_leave(c);
	c->evicted = 1;
}

static int byfd_set(struct gate *g, int fd, struct gate_conn *c)
{
	if ((size_t)fd >= g->nbyfd) {
		size_t n = g->nbyfd ? g->nbyfd : 1024;
		while (n <= (size_t)fd)
			n *= 2;
		struct gate_conn **nb = realloc(g->byfd, n * sizeof(*nb));
		if (!nb)
			return -1;
		memset(nb + g->nbyfd, 0, (n - g->nbyfd) * sizeof(*nb));
		g->byfd = nb;
		g->nbyfd = n;
	}
	struct gate_conn *old = g->byfd[fd];
	if (old) {
		/* The kernel gave this number out again, so the socket the old
		 * record names was closed without our knowing (see drop()). */
		conn_forget(g, old);
	}
	g->byfd[fd] = c;
	return 0;
}

/* ---- answers of the door ------------------------------------------------------------- */

static const char *reason_phrase(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Error";
	}
}

/* Read and drop what the client has sent so far (at most `max`); returns
 * the bytes dropped, and sets *eof when the client closed its side. */
static size_t discard_input(int fd, size_t max, int *eof)
{
	char buf[16384];
	size_t total = 0;
	*eof = 0;
	while (total < max) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0) {
			*eof = 1;
			break;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				*eof = 1;
			break;
		}
		total += (size_t)n;
	}
	return total;
}

/* Answer an error on a connection of ours and let it linger (CLOSING):
 * {"error": {"code": code, "message": message}}, or E2B's shape
 * {"code": status, "message": message} when e2b is set (e2b.h), with
 * "error": code too when it is 2 (a sandbox's host). */
static void answer_shaped(struct gate *g, struct gate_conn *c, int status, const char *code,
			  const char *message, enum reason why, int e2b)
{
	g->dropped[why]++;
	int eof;
	c->lingered = discard_input(c->fd, LINGER_BYTES, &eof);
	json_t *o;
	if (e2b == 2) { /* a sandbox's host: E2B's shape with our code, as http.c */
		o = json_pack("{s:i, s:s, s:o}", "code", status, "error", code, "message",
			      json_text(message, strlen(message)));
	} else if (e2b) {
		o = json_pack("{s:i, s:o}", "code", status, "message",
			      json_text(message, strlen(message)));
	} else {
		json_t *e = json_pack("{s:s, s:o}", "code", code, "message",
				      json_text(message, strlen(message)));
		o = e ? json_pack("{s:o}", "error", e) : NULL;
	}
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	char head[512];
	size_t blen = body ? strlen(body) + 1 : 0;
	int hn = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
			  status, reason_phrase(status), blen,
			  status == 401 ? "WWW-Authenticate: Bearer\r\n" : "");
	struct iovec iov[3] = { { head, (size_t)hn }, { body, blen ? blen - 1 : 0 }, { "\n", blen ? 1 : 0 } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 3 };
	/* A fresh connection's send buffer takes this at once. */
	if (sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* the client is gone; closed below */
	}
	free(body);
	shutdown(c->fd, SHUT_WR);
	if (eof) {
		conn_close(g, c);
		return;
	}
	set_state(g, c, C_CLOSING, sandlot__now_ms() + LINGER_MS);
}

static void answer(struct gate *g, struct gate_conn *c, int status, const char *code,
		   const char *message, enum reason why)
{
	answer_shaped(g, c, status, code, message, why, 0);
}

/* ---- the door's work ------------------------------------------------------------------- */

/* Constant-time comparison: the time depends only on the lengths. */
static int token_ok(const struct gate *g, const char *got, size_t gl)
{
	if (!got)
		return 0;
	const char *want = g->bearer;
	size_t wl = strlen(want);
	unsigned char diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

struct admitted {
	int fd;
	struct gate_conn *c;
	struct sockaddr_storage addr;
	socklen_t addrlen;
};

/* A pending connection has news.  Appends to adm when it is admitted. */
static void pending_ready(struct gate *g, struct gate_conn *c, uint32_t events,
			  struct admitted *adm, int *nadm)
{
	int avail = 0;
	if (ioctl(c->fd, FIONREAD, &avail) < 0)
		avail = 0;
	int hup = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	if (avail <= 0) {
		if (hup)
			conn_close(g, c); /* left before sending a whole head */
		return;
	}
	size_t want = (size_t)avail < g->cfg.max_head ? (size_t)avail : g->cfg.max_head;
	if (want <= c->peeked && !hup)
		return;
	/* Each look copies the head from its start: after a few, wait for a
	 * real amount more, so that a head trickled a byte at a time costs
	 * linear, not quadratic, work. */
	if (c->npeeks >= PEEKS_CHEAP && want < c->peeked + PEEK_GROWTH && want < g->cfg.max_head &&
	    !hup)
		return;
	ssize_t n = recv(c->fd, g->peekbuf, want, MSG_PEEK | MSG_DONTWAIT);
	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			conn_close(g, c);
		return;
	}
	c->peeked = (size_t)n;
	c->npeeks++;
	struct httphead h;
	int r = httphead_check(g->peekbuf, (size_t)n, g->cfg.max_head, g->cfg.max_target, &h);
	if (r == HTTPHEAD_INCOMPLETE) {
		if (hup)
			conn_close(g, c);
		return;
	}
	if (r == HTTPHEAD_ERROR) {
		answer(g, c, h.status, h.code, h.message, R_BAD_REQUEST);
		return;
	}
	if (c->tcp && g->bearer) {
		/* Under /e2b the token may come in E2B's headers too (e2b.h). */
		int e2b = e2b_path(h.target, h.target_len);
		int ok = token_ok(g, h.auth, h.auth_len);
		struct e2b_keys k = { h.api_key, h.api_key_len, h.access_token, h.access_token_len,
				      h.sandbox_id, h.sandbox_id_len, h.target, h.target_len,
				      h.traffic_token, h.traffic_token_len };
		struct e2b_host eh;
		if (e2b_host_parse(h.host, h.host_len, g->cfg.sandbox_domain, &eh)) {
			/* A sandbox's host: its token, or none if it is public. */
			e2b = 1;
			ok = e2b_host_key_ok(g->bearer + strlen("Bearer "), h.auth, h.auth_len, &k,
					     eh.id);
			if (!ok && eh.id[0] && g->cfg.sandbox_public)
				ok = g->cfg.sandbox_public(g->cfg.public_ud, eh.id);
			if (!ok) {
				answer_shaped(g, c, 401, "unauthorized",
					      "missing or wrong token for this sandbox's host (send the "
					      "sandbox's trafficAccessToken as E2B-Traffic-Access-Token, "
					      "or the daemon's token)", R_UNAUTHORIZED, 2);
				return;
			}
		} else if (e2b) {
			ok |= e2b_key_ok(g->bearer + strlen("Bearer "), &k);
		}
		if (!ok) {
			answer_shaped(g, c, 401, "unauthorized",
				      e2b ? "missing or wrong API key (send the daemon's token as "
					    "X-API-KEY, X-Access-Token or \"Authorization: Bearer TOKEN\")"
					  : "missing or wrong bearer token (send \"Authorization: Bearer "
					    "TOKEN\")",
				      R_UNAUTHORIZED, e2b);
			return;
		}
	}
	/* Admitted: libmicrohttpd reads it from here on. */
	epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
	c->in_mhd = 1;
	set_state(g, c, C_ADMITTED, sandlot__now_ms() + 1000ull * g->cfg.header_timeout_s);
	adm[*nadm].fd = c->fd;
	adm[*nadm].c = c;
	adm[*nadm].addr = c->addr;
	adm[*nadm].addrlen = c->addrlen;
	(*nadm)++;
}

static void closing_ready(struct gate *g, struct gate_conn *c)
{
	int eof;
	c->lingered += discard_input(c->fd, LINGER_BYTES, &eof);
	if (eof || c->lingered >= LINGER_BYTES)
		conn_close(g, c);
}

static void listener_pause(struct gate *g, struct listener *l, int e)
{
	uint64_t now = sandlot__now_ms();
	if (now - g->emfile_logged_ms >= 1000) {
		g->emfile_logged_ms = now;
		daemon_log("http_accept", "level=warn msg=\"cannot accept connections: %s\"",
			   strerror(e));
	}
	struct epoll_event ev = { .events = 0, .data.ptr = l };
	epoll_ctl(g->ep, EPOLL_CTL_MOD, l->fd, &ev);
	l->paused = 1;
	g->listen_paused_until = now + LISTEN_PAUSE_MS;
}

/* Make room for one more connection of peer p: 0 when there is, -1 when
 * the new one must be refused. */
static int make_room(struct gate *g, struct peer *p)
{
	if (p && p->count >= g->cfg.max_per_peer) {
		struct gate_conn *v = p->pend.head ? p->pend.head : p->idle.head;
		if (!v) {
			g->dropped[R_PEER_LIMIT]++;
			return -1;
		}
		drop(g, v, R_PEER_LIMIT);
	}
	if (g->total >= g->cfg.max_connections) {
		struct gate_conn *v = g->lists[C_PENDING].head ? g->lists[C_PENDING].head
			: g->lists[C_CLOSING].head ? g->lists[C_CLOSING].head : g->lists[C_IDLE].head;
		if (!v) {
			g->dropped[R_LIMIT]++;
			return -1;
		}
		if (v->state == C_CLOSING)
			conn_close(g, v); /* on its way out: not a drop of its own */
		else
			drop(g, v, R_LIMIT);
	}
	return 0;
}

static void accept_some(struct gate *g, struct listener *l, struct admitted *adm, int *nadm)
{
	for (int k = 0; k < ACCEPT_BATCH; k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				listener_pause(g, l, errno);
			return;
		}
		unsigned char key[9];
		struct peer *p = l->tcp && peer_key(&ss, key) ? peer_get(g, key) : NULL;
		struct gate_conn *c = NULL;
		struct stat st;
		if ((l->tcp && !p) || make_room(g, p) < 0 || fstat(fd, &st) < 0 ||
		    !(c = calloc(1, sizeof(*c))) || byfd_set(g, fd, c) < 0) {
			free(c);
			peer_put(g, p);
			close(fd);
			continue;
		}
		c->it.kind = K_CONN;
		c->fd = fd;
		c->tcp = l->tcp;
		c->ino = st.st_ino;
		c->peer = p;
		c->addr = ss;
		c->addrlen = sl;
		c->state = C_PENDING;
		if (p)
			p->count++;
		g->total++;
		list_add(&g->lists[C_PENDING], c, 0);
		c->deadline_ms = sandlot__now_ms() + 1000ull * g->cfg.header_timeout_s;
		if (p) {
			list_add(&p->pend, c, 1);
			c->in_plist = 1;
		}
		/* Edge-triggered: each arrival of bytes is one event, and what
		 * was there before the registration is reported once. */
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c };
		if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			conn_close(g, c);
			continue;
		}
		/* A client usually sends its head with the connect: look now
		 * rather than one turn of the loop later.  (If it is not all
		 * there, the edge of what arrives next wakes us.) */
		pending_ready(g, c, 0, adm, nadm);
	}
}

/* Close what is past its deadline; the next deadline in ms (at most 1 s). */
static int sweep(struct gate *g)
{
	uint64_t now = sandlot__now_ms();
	struct gate_conn *c;
	while ((c = g->lists[C_PENDING].head) && c->deadline_ms <= now)
		drop(g, c, R_HEADER_TIMEOUT);
	while ((c = g->lists[C_CLOSING].head) &&
	       (c->deadline_ms <= now || g->lists[C_CLOSING].n > MAX_CLOSING))
		conn_close(g, c);
	while ((c = g->lists[C_ADMITTED].head) && c->deadline_ms <= now)
		drop(g, c, R_HEADER_TIMEOUT);
	while ((c = g->lists[C_IDLE].head) && c->deadline_ms <= now)
		drop(g, c, R_KEEPALIVE);
	if (g->listen_paused_until && now >= g->listen_paused_until) {
		g->listen_paused_until = 0;
		for (int i = 0; i < g->nls; i++) {
			struct listener *l = &g->ls[i];
			if (l->paused && l->fd >= 0) {
				struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };
				epoll_ctl(g->ep, EPOLL_CTL_MOD, l->fd, &ev);
				l->paused = 0;
			}
		}
	}
	uint64_t next = now + 1000;
	static const enum cstate timed[] = { C_PENDING, C_CLOSING, C_ADMITTED, C_IDLE };
	for (size_t i = 0; i < sizeof(timed) / sizeof(timed[0]); i++)
		if ((c = g->lists[timed[i]].head) && c->deadline_ms < next)
			next = c->deadline_ms;
	if (g->listen_paused_until && g->listen_paused_until < next)
		next = g->listen_paused_until;
	return next <= now ? 0 : (int)(next - now);
}

/* Our unix socket file goes, unless someone replaced it meanwhile. */
static void listener_close(struct listener *l)
{
	if (l->fd < 0)
		return;
	close(l->fd);
	l->fd = -1;
	struct stat st;
	if (l->unix_path && stat(l->unix_path, &st) == 0 && st.st_dev == l->dev &&
	    st.st_ino == l->ino)
		unlink(l->unix_path);
}

static void quiesce_locked(struct gate *g)
{
	if (g->quiesced)
		return;
	g->quiesced = 1;
	pthread_cond_broadcast(&g->quiesced_cond);
	for (int i = 0; i < g->nls; i++)
		listener_close(&g->ls[i]);
	while (g->lists[C_PENDING].head)
		conn_close(g, g->lists[C_PENDING].head);
	while (g->lists[C_CLOSING].head)
		conn_close(g, g->lists[C_CLOSING].head);
}

static void *gate_main(void *arg)
{
	struct gate *g = arg;
	struct epoll_event evs[256];
	/* at most one per event and one per accept */
	struct admitted adm[256 + MAX_LISTENERS * ACCEPT_BATCH];
	int timeout = 0;
	for (;;) {
		int n = epoll_wait(g->ep, evs, 256, timeout);
		if (n < 0)
			n = 0;
		int nadm = 0;
		struct listener *ready[MAX_LISTENERS];
		int nready = 0;
		pthread_mutex_lock(&g->lock);
		if (g->stop_asked) {
			pthread_mutex_unlock(&g->lock);
			return NULL;
		}
		if (g->quiesce_asked && !g->quiesced) {
			quiesce_locked(g);
			n = 0; /* the events name connections just closed and freed */
		}
		/* Heads first, then new connections: a client that connected
		 * and sent its head is admitted before a burst of accepts could
		 * evict it. */
		for (int i = 0; i < n; i++) {
			struct item *it = evs[i].data.ptr;
			if (it->kind == K_WAKE) {
				uint64_t v;
				if (read(g->wake, &v, sizeof(v)) < 0) {
					/* drained already */
				}
			} else if (it->kind == K_LISTENER) {
				if (!g->quiesced && nready < MAX_LISTENERS)
					ready[nready++] = (struct listener *)it;
			} else {
				struct gate_conn *c = (struct gate_conn *)it;
				if (c->state == C_PENDING)
					pending_ready(g, c, evs[i].events, adm, &nadm);
				else if (c->state == C_CLOSING)
					closing_ready(g, c);
			}
		}
		for (int i = 0; i < nready; i++)
			if (ready[i]->fd >= 0)
				accept_some(g, ready[i], adm, &nadm);
		timeout = sweep(g);
		pthread_mutex_unlock(&g->lock);
		for (int i = 0; i < nadm; i++) {
			if (MHD_add_connection(g->mhd, adm[i].fd, (struct sockaddr *)&adm[i].addr,
					       adm[i].addrlen) == MHD_YES)
				continue;
			/* libmicrohttpd closed it already. */
			pthread_mutex_lock(&g->lock);
			if ((size_t)adm[i].fd < g->nbyfd && g->byfd[adm[i].fd] == adm[i].c)
				conn_forget(g, adm[i].c);
			pthread_mutex_unlock(&g->lock);
		}
		if (nready > 0 || n == 256)
			timeout = 0; /* maybe more waiting: look again at once */
	}
}

/* ---- libmicrohttpd's side --------------------------------------------------------------- */

struct gate_conn *gate_conn_started(struct gate *g, int fd)
{
	pthread_mutex_lock(&g->lock);
	struct gate_conn *c = fd >= 0 && (size_t)fd < g->nbyfd ? g->byfd[fd] : NULL;
	if (c && !c->in_mhd)
		c = NULL;
	pthread_mutex_unlock(&g->lock);
	return c;
}

void gate_conn_closed(struct gate *g, struct gate_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	conn_forget(g, c);
	pthread_mutex_unlock(&g->lock);
}

void gate_conn_request(struct gate *g, struct gate_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	if (!c->evicted && c->state != C_ACTIVE)
		set_state(g, c, C_ACTIVE, 0);
	pthread_mutex_unlock(&g->lock);
}

void gate_conn_done(struct gate *g, struct gate_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	if (!c->evicted)
		set_state(g, c, C_IDLE, sandlot__now_ms() + 1000ull * g->cfg.keepalive_s);
	pthread_mutex_unlock(&g->lock);
}

/* ---- listening sockets ------------------------------------------------------------------- */

static int listen_unix(const char *path, struct listener *l, sandlot_error_t **err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return sandlot__error(err, ENAMETOOLONG, "socket path %s is too long (max %zu bytes)",
				      path, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);

	cleanup_free char *dir = strdup(path);
	if (!dir)
		return sandlot__error(err, ENOMEM, "out of memory");
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (sandlot__mkdir_p(dir, 0755) < 0)
			return sandlot__error_errno(err, errno, "create socket directory for %s", path);
	}

	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sandlot__error(err, EEXIST, "%s exists and is not a socket; not replacing it",
					      path);
		/* A live daemon answers connect(); a stale socket refuses it. */
		cleanup_close int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe < 0)
			return sandlot__error_errno(err, errno, "socket");
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return sandlot__error(err, EADDRINUSE,
					      "another sandlotd is already listening on %s", path);
		if (errno != ECONNREFUSED && errno != ENOENT)
			return sandlot__error_errno(err, errno, "probe existing socket %s", path);
		if (unlink(path) < 0 && errno != ENOENT)
			return sandlot__error_errno(err, errno, "remove stale socket %s", path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "socket");
	/* Bind with the final mode already (no window where it is 0777). */
	mode_t old = umask(0117);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int e = errno;
	umask(old);
	if (rc < 0) {
		close(fd);
		return sandlot__error_errno(err, e, "bind %s", path);
	}
	chmod(path, 0660);
	if (listen(fd, 1024) < 0) {
		e = errno;
		close(fd);
		unlink(path);
		return sandlot__error_errno(err, e, "listen on %s", path);
	}
	if (stat(path, &st) == 0) {
		l->dev = st.st_dev;
		l->ino = st.st_ino;
	}
	l->unix_path = strdup(path);
	return fd;
}

static int listen_tcp(const char *hostport, sandlot_error_t **err)
{
	char host[256];
	const char *port;
	if (hostport[0] == '[') {
		const char *end = strchr(hostport, ']');
		if (!end || end[1] != ':' || (size_t)(end - hostport - 1) >= sizeof(host))
			return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": expected HOST:PORT",
					      hostport);
		memcpy(host, hostport + 1, (size_t)(end - hostport - 1));
		host[end - hostport - 1] = '\0';
		port = end + 2;
	} else {
		const char *colon = strrchr(hostport, ':');
		if (!colon || (size_t)(colon - hostport) >= sizeof(host))
			return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": expected HOST:PORT",
					      hostport);
		memcpy(host, hostport, (size_t)(colon - hostport));
		host[colon - hostport] = '\0';
		port = colon + 1;
	}
	if (!*port)
		return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": no port", hostport);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (gai != 0)
		return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": %s", hostport,
				      gai_strerror(gai));
	int fd = -1, e = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return sandlot__error_errno(err, e ? e : EADDRNOTAVAIL, "listen on tcp:%s", hostport);
	return fd;
}

int gate_listen(struct gate *g, const char *addr, sandlot_error_t **err)
{
	if (g->nls == MAX_LISTENERS)
		return sandlot__error(err, EINVAL, "at most %d listeners", MAX_LISTENERS);
	struct listener *l = &g->ls[g->nls];
	memset(l, 0, sizeof(*l));
	l->it.kind = K_LISTENER;
	int fd;
	if (strncmp(addr, "unix:", 5) == 0) {
		fd = listen_unix(addr + 5, l, err);
	} else if (strncmp(addr, "tcp:", 4) == 0) {
		if (!g->bearer)
			return sandlot__error(err, EINVAL,
					      "listening on TCP requires a token (--token-file)");
		fd = listen_tcp(addr + 4, err);
		l->tcp = 1;
	} else {
		return sandlot__error(err, EINVAL, "invalid listen address \"%s\": expected unix:PATH "
				      "or tcp:HOST:PORT", addr);
	}
	if (fd < 0) {
		free(l->unix_path);
		l->unix_path = NULL;
		return -1;
	}
	l->fd = fd;
	g->nls++;
	return 0;
}

/* ---- life ------------------------------------------------------------------------------ */

struct gate *gate_new(const struct gate_config *cfg, sandlot_error_t **err)
{
	struct gate *g = calloc(1, sizeof(*g));
	if (!g)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	g->cfg = *cfg;
	g->ep = g->wake = -1;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->quiesced_cond, NULL);
	g->peekbuf = malloc(cfg->max_head);
	if (cfg->token && asprintf(&g->bearer, "Bearer %s", cfg->token) < 0)
		g->bearer = NULL;
	g->ep = epoll_create1(EPOLL_CLOEXEC);
	g->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!g->peekbuf || (cfg->token && !g->bearer) || g->ep < 0 || g->wake < 0) {
		sandlot__error_errno(err, errno ? errno : ENOMEM, "set up the HTTP listener");
		gate_free(g);
		return NULL;
	}
	g->wake_item.kind = K_WAKE;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &g->wake_item };
	epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake, &ev);
	return g;
}

int gate_start(struct gate *g, struct MHD_Daemon *mhd, sandlot_error_t **err)
{
	g->mhd = mhd;
	for (int i = 0; i < g->nls; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &g->ls[i] };
		if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->ls[i].fd, &ev) < 0)
			return sandlot__error_errno(err, errno, "epoll");
	}
	if (pthread_create(&g->thread, NULL, gate_main, g) != 0)
		return sandlot__error_errno(err, errno, "start the HTTP listener thread");
	pthread_setname_np(g->thread, "sandlotd-door");
	g->started = 1;
	return 0;
}

static void poke(struct gate *g)
{
	uint64_t one = 1;
	if (write(g->wake, &one, sizeof(one)) < 0) {
		/* counter full: the thread is being woken anyway */
	}
}

void gate_quiesce(struct gate *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	if (g->started) {
		g->quiesce_asked = 1;
	} else {
		quiesce_locked(g);
	}
	pthread_mutex_unlock(&g->lock);
	if (g->started) {
		poke(g);
		/* Done when the thread has closed the listeners. */
		pthread_mutex_lock(&g->lock);
		while (!g->quiesced)
			pthread_cond_wait(&g->quiesced_cond, &g->lock);
		pthread_mutex_unlock(&g->lock);
	}
}

void gate_free(struct gate *g)
{
	if (!g)
		return;
	if (g->started) {
		pthread_mutex_lock(&g->lock);
		g->stop_asked = 1;
		pthread_mutex_unlock(&g->lock);
		poke(g);
		pthread_join(g->thread, NULL);
	}
	quiesce_locked(g);
	/* Records libmicrohttpd did not report closed (none after
	 * MHD_stop_daemon()). */
	for (int s = 0; s < C_NSTATES; s++)
		while (g->lists[s].head)
			conn_forget(g, g->lists[s].head);
	for (size_t i = 0; i < PEER_BUCKETS; i++)
		while (g->peers[i]) {
			struct peer *p = g->peers[i];
			g->peers[i] = p->next;
			free(p);
		}
	for (int i = 0; i < g->nls; i++)
		free(g->ls[i].unix_path);
	if (g->ep >= 0)
		close(g->ep);
	if (g->wake >= 0)
		close(g->wake);
	free(g->byfd);
	free(g->peekbuf);
	free(g->bearer);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->quiesced_cond);
	free(g);
}

char *gate_metrics(struct gate *g)
{
	unsigned st[C_NSTATES];
	uint64_t dr[R_NREASONS];
	pthread_mutex_lock(&g->lock);
	for (int s = 0; s < C_NSTATES; s++)
		st[s] = g->lists[s].n;
	memcpy(dr, g->dropped, sizeof(dr));
	pthread_mutex_unlock(&g->lock);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	fprintf(f, "# HELP sandlot_http_connections Client connections by state: pending (no "
		   "complete request head yet), active (a request being served), idle (kept "
		   "alive between requests), closing (answered with an error).\n"
		   "# TYPE sandlot_http_connections gauge\n"
		   "sandlot_http_connections{state=\"pending\"} %u\n"
		   "sandlot_http_connections{state=\"active\"} %u\n"
		   "sandlot_http_connections{state=\"idle\"} %u\n"
		   "sandlot_http_connections{state=\"closing\"} %u\n",
		st[C_PENDING], st[C_ADMITTED] + st[C_ACTIVE], st[C_IDLE], st[C_CLOSING]);
	fprintf(f, "# HELP sandlot_http_connections_dropped_total Connections sandlotd closed "
		   "or refused before serving a request on them, by reason.\n"
		   "# TYPE sandlot_http_connections_dropped_total counter\n");
	for (int r = 0; r < R_NREASONS; r++)
		fprintf(f, "sandlot_http_connections_dropped_total{reason=\"%s\"} %llu\n",
			reason_names[r], (unsigned long long)dr[r]);
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}
