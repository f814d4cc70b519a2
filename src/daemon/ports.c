/* Exposed ports: a server inside a sandbox, reachable from the host.
 *
 * A sandbox has at most PORTS_MAX exposed ports (the "ports" create option,
 * and the routes below).  For each, sandlotd listens on an ephemeral port
 * of the host's 127.0.0.1 (the port's "url" in the sandbox record) and
 * relays every connection it accepts there to the port on the sandbox's own
 * loopback, which it opens with sandlot_port_connect() (the ns backend
 * makes that socket inside the sandbox's network namespace).  The HTTP
 * proxy route (proxy.c) reaches the same ports through the API, for remote
 * users with a token.  Nothing else leads into a sandbox: it has no route
 * to the host, and the host none to it.
 *
 * Model and runtime.  The list of exposed ports is part of the sandbox
 * (s->ports[], under s->lock, mirrored into options.ports so the registry
 * keeps it across restarts); each entry's host_port is the host listener's
 * port while the sandbox runs, 0 while it is paused or ended (hint keeps
 * the last one, tried first when the listener is made again on resume).
 * The runtime — listeners, relayed connections, the upstream sockets of
 * proxied requests — is a struct psb per running sandbox (s->psb), owned
 * by this module under P.lock.  Lock order: s->lock → P.lock; the relay
 * thread takes P.lock only, never s->lock.
 *
 * One relay thread serves every listener and connection with epoll:
 * connections are edge-triggered, bytes go through one scratch buffer and
 * are kept only when the receiving side is full (then that direction stops
 * reading until it drained), so an idle connection holds no buffer.
 * Half-closes are passed on (EOF → shutdown(SHUT_WR) on the other side);
 * an error on either side closes both.  Opening the sandbox side blocks
 * (a thread enters the namespace; a full accept queue waits up to 5 s), so
 * each accepted connection gets a short-lived connector thread that marks
 * the sandbox busy while it connects, then hands the pair to the relay.
 *
 * Items (listeners, connections) are freed only by the relay thread, after
 * the batch of events that may still point at them: other threads close
 * them (epoll DEL, close) and put them on the grave list.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/daemon.h"

#define CONNS_PER_SANDBOX 256     /* relayed connections (incl. connecting) */
#define CONNS_TOTAL 8192          /* for the whole daemon: 2 fds each */
#define SCRATCH_SIZE (64u * 1024)
#define PUMP_ROUNDS 16            /* reads per direction before others get a turn */
#define CONNECTOR_STACK (64u * 1024)
#define TOUCH_EVERY_MS 1000       /* relayed traffic counts as activity */

enum pkind { PK_WAKE, PK_LISTEN, PK_SIDE };

struct pitem {
	enum pkind kind;
};

struct psb;
struct pconn;

struct plisten {
	struct pitem it;
	struct psb *owner;
	uint16_t port, host_port;
	int fd;
	int dead;
	struct plisten *grave_next;
};

struct pside {
	struct pitem it;
	struct pconn *c;
	int fd;
	int readable, writable, rd_eof, wr_shut, in_epoll;
	/* Bytes read from this side that the other side could not take yet. */
	char *pend;
	size_t pend_off, pend_len;
};

struct pconn {
	struct pside side[2];         /* 0: the host's client, 1: the sandbox */
	struct psb *owner;
	uint16_t port;
	int any;                      /* not by an exposure: stays when the port is unexposed */
	int dead;
	int queued;                   /* on P.ready */
	void (*close0)(void *ud);     /* closes side 0's fd (an upgraded HTTP
	                               * connection: its server closes it) */
	void *close0_ud;
	struct pconn *prev, *next;    /* owner's list */
	struct pconn *ready_next, *grave_next;
};

struct ptrack {                       /* a proxied request's upstream socket */
	int fd;
	uint16_t port;
	int any;                             /* as pconn's */
	struct psb *owner;                   /* holds a reference */
	struct ptrack *prev, *next;
};

struct psb {
	struct dsb *s;                /* dsb_hold()ed while the psb exists */
	int refs;                     /* s->psb, connections, connectors, tracks */
	int closed;
	struct plisten *ls[PORTS_MAX];
	unsigned nls;
	struct pconn *conns;
	unsigned nconns;              /* relayed, plus connecting */
	struct ptrack *tracks;
	int64_t touched_ms;
	int touch_wanted;
};

static struct {
	pthread_mutex_t lock;
	struct daemon *d;
	int epfd, wake_fd;
	struct pitem wake_item;
	pthread_t thread;
	int started, quit;
	unsigned total;               /* relayed connections, all sandboxes */
	struct pconn *ready;          /* connections with more to pump */
	struct plisten *grave_ls;
	struct pconn *grave_conns;
	char *scratch;
	uint64_t accepted, refused, relayed_bytes;
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .wake_fd = -1 };

static void wake_loop(void)
{
	uint64_t one = 1;
	if (P.wake_fd >= 0 && write(P.wake_fd, &one, sizeof(one)) < 0) {
		/* the counter is full: the loop is awake anyway */
	}
}

/* ---- model ----------------------------------------------------------------- */

int ports_parse_one(json_t *v, uint16_t *out, char *msg, size_t n)
{
	if (!json_is_integer(v)) {
		snprintf(msg, n, "a port must be an integer from 1 to 65535");
		return -1;
	}
	json_int_t p = json_integer_value(v);
	if (p < 1 || p > 65535) {
		snprintf(msg, n, "invalid port %lld: expected 1 to 65535", (long long)p);
		return -1;
	}
	*out = (uint16_t)p;
	return 0;
}

int ports_parse(json_t *v, uint16_t *out, unsigned *count, char *msg, size_t n)
{
	*count = 0;
	if (!json_is_array(v)) {
		snprintf(msg, n, "expected an array of port numbers, e.g. [8000, 8888]");
		return -1;
	}
	if (json_array_size(v) > PORTS_MAX) {
		snprintf(msg, n, "%zu ports given; a sandbox exposes at most %u", json_array_size(v),
			 PORTS_MAX);
		return -1;
	}
	size_t i;
	json_t *e;
	json_array_foreach(v, i, e) {
		uint16_t p;
		if (ports_parse_one(e, &p, msg, n) < 0)
			return -1;
		for (unsigned k = 0; k < *count; k++) {
			if (out[k] == p) {
				snprintf(msg, n, "port %u is listed twice", (unsigned)p);
				return -1;
			}
		}
		out[(*count)++] = p;
	}
	return 0;
}

/* options.ports from s->ports (s->lock held). */
static void sync_options_locked(struct dsb *s)
{
	json_t *arr = json_array();
	for (unsigned i = 0; i < s->nports; i++)
		json_array_append_new(arr, json_integer(s->ports[i].port));
	json_object_set_new(s->options, "ports", arr);
}

void ports_set_locked(struct dsb *s, const uint16_t *list, unsigned n)
{
	s->nports = 0;
	for (unsigned i = 0; i < n && i < PORTS_MAX; i++)
		s->ports[s->nports++] = (struct dport){ .port = list[i] };
	sync_options_locked(s);
}

void ports_load_locked(struct dsb *s)
{
	json_t *arr = json_object_get(s->options, "ports");
	uint16_t list[PORTS_MAX];
	unsigned n = 0;
	char msg[128];
	s->nports = 0;
	if (arr && ports_parse(arr, list, &n, msg, sizeof(msg)) == 0)
		for (unsigned i = 0; i < n; i++)
			s->ports[s->nports++] = (struct dport){ .port = list[i] };
}

static int find_port_locked(struct dsb *s, unsigned port)
{
	for (unsigned i = 0; i < s->nports; i++)
		if (s->ports[i].port == port)
			return (int)i;
	return -1;
}

static json_t *port_json(const struct dport *p)
{
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)p->host_port);
	return json_pack("{s:i, s:o}", "port", (int)p->port, "url",
			 p->host_port ? json_string(url) : json_null());
}

json_t *ports_json_locked(struct dsb *s)
{
	json_t *arr = json_array();
	for (unsigned i = 0; i < s->nports; i++)
		json_array_append_new(arr, port_json(&s->ports[i]));
	return arr;
}

/* ---- listeners (called with s->lock held) -------------------------------------- */

/* A listening socket on 127.0.0.1:hint (if free) or an ephemeral port. */
static int bind_listener(uint16_t hint, uint16_t *host_port, sandlot_error_t **err)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create a listening socket");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int bound = 0;
	if (hint) {
		a.sin_port = htons(hint);
		bound = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	}
	if (!bound) {
		a.sin_port = 0;
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			int e = errno;
			close(fd);
			return sandlot__error_errno(err, e, "bind a port on 127.0.0.1");
		}
	}
	socklen_t len = sizeof(a);
	if (listen(fd, 128) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		int e = errno;
		close(fd);
		return sandlot__error_errno(err, e, "listen on 127.0.0.1");
	}
	*host_port = ntohs(a.sin_port);
	return fd;
}

static struct psb *psb_get_locked(struct dsb *s)
{
	if (s->psb)
		return s->psb;
	struct psb *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return NULL;
	dsb_hold(s);
	ps->s = s;
	ps->refs = 1;
	s->psb = ps;
	return ps;
}

static void psb_unref_locked(struct psb *ps)
{
	if (--ps->refs > 0)
		return;
	dsb_release(P.d, ps->s);
	free(ps);
}

/* Listen for s->ports[i] (P.lock not held; s->lock held). */
static int open_one_locked(struct dsb *s, unsigned i, sandlot_error_t **err)
{
	struct dport *dp = &s->ports[i];
	uint16_t hp = 0;
	int fd = bind_listener(dp->hint, &hp, err);
	if (fd < 0)
		return sandlot__error_wrap(err, "port %u", (unsigned)dp->port);
	struct plisten *l = calloc(1, sizeof(*l));
	pthread_mutex_lock(&P.lock);
	struct psb *ps = l ? psb_get_locked(s) : NULL;
	if (!ps) {
		pthread_mutex_unlock(&P.lock);
		free(l);
		close(fd);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	l->it.kind = PK_LISTEN;
	l->owner = ps;
	l->port = dp->port;
	l->host_port = hp;
	l->fd = fd;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->it };
	if (epoll_ctl(P.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		pthread_mutex_unlock(&P.lock);
		free(l);
		close(fd);
		return sandlot__error_errno(err, e, "watch the listener of port %u", (unsigned)dp->port);
	}
	ps->ls[ps->nls++] = l;
	pthread_mutex_unlock(&P.lock);
	dp->host_port = dp->hint = hp;
	return 0;
}

/* Close a connection (P.lock held): both sockets, then the grave. */
static void conn_close_locked(struct pconn *c)
{
	if (c->dead)
		return;
	c->dead = 1;
	for (int i = 0; i < 2; i++) {
		struct pside *sd = &c->side[i];
		if (sd->fd >= 0) {
			if (sd->in_epoll)
				epoll_ctl(P.epfd, EPOLL_CTL_DEL, sd->fd, NULL);
			if (i == 0 && c->close0)
				c->close0(c->close0_ud);
			else
				close(sd->fd);
			sd->fd = -1;
		}
		free(sd->pend);
		sd->pend = NULL;
	}
	struct psb *ps = c->owner;
	if (c->prev)
		c->prev->next = c->next;
	else
		ps->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ps->nconns--;
	P.total--;
	c->grave_next = P.grave_conns;
	P.grave_conns = c;
	psb_unref_locked(ps);
}

/* Close what relays `port` of ps (every port when port is 0): listeners,
 * connections, and the upstream sockets of proxied requests (shut down:
 * their owners close them).  P.lock held. */
static void cut_locked(struct psb *ps, unsigned port)
{
	for (unsigned i = 0; i < ps->nls;) {
		struct plisten *l = ps->ls[i];
		if (port && l->port != port) {
			i++;
			continue;
		}
		epoll_ctl(P.epfd, EPOLL_CTL_DEL, l->fd, NULL);
		close(l->fd);
		l->fd = -1;
		l->dead = 1;
		l->grave_next = P.grave_ls;
		P.grave_ls = l;
		ps->ls[i] = ps->ls[--ps->nls];
	}
	for (struct pconn *c = ps->conns, *next; c; c = next) {
		next = c->next;
		if (!port || (c->port == port && !c->any))
			conn_close_locked(c);
	}
	for (struct ptrack *t = ps->tracks; t; t = t->next)
		if (!port || (t->port == port && !t->any))
			shutdown(t->fd, SHUT_RDWR);
	wake_loop();
}

int ports_open(struct dsb *s, sandlot_error_t **err)
{
	pthread_mutex_lock(&s->lock);
	int rc = 0;
	for (unsigned i = 0; i < s->nports; i++) {
		if (s->ports[i].host_port)
			continue;
		if (open_one_locked(s, i, err) < 0) {
			rc = -1;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void ports_close(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nports; i++)
		s->ports[i].host_port = 0;
	pthread_mutex_lock(&P.lock);
	struct psb *ps = s->psb;
	if (ps) {
		s->psb = NULL;
		ps->closed = 1;
		cut_locked(ps, 0);
		psb_unref_locked(ps);
	}
	pthread_mutex_unlock(&P.lock);
	pthread_mutex_unlock(&s->lock);
}

/* ---- proxied requests' upstream sockets --------------------------------------- */

/* The runtime through which `port` of s is reached (s->lock and P.lock
 * held), or NULL: when the port is exposed, the sandbox's (it has one
 * while it runs); with `any`, also made for a running sandbox without
 * exposed ports (ports_close() ends it with the sandbox, as any other). */
static struct psb *reach_locked(struct dsb *s, unsigned port, int any)
{
	if (s->psb && s->psb->closed)
		return NULL;
	if (find_port_locked(s, port) >= 0)
		return s->psb;
	if (!any || s->state != DSB_RUNNING || !s->sb || s->destroy_pending)
		return NULL;
	return psb_get_locked(s);
}

struct ptrack *ports_track(struct dsb *s, unsigned port, int any, int fd)
{
	struct ptrack *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->fd = fd;
	t->port = (uint16_t)port;
	pthread_mutex_lock(&s->lock);
	t->any = any && find_port_locked(s, port) < 0;
	pthread_mutex_lock(&P.lock);
	struct psb *ps = reach_locked(s, port, any);
	if (ps) {
		t->owner = ps;
		ps->refs++;
		t->next = ps->tracks;
		if (ps->tracks)
			ps->tracks->prev = t;
		ps->tracks = t;
	}
	pthread_mutex_unlock(&P.lock);
	pthread_mutex_unlock(&s->lock);
	if (!ps) {
		free(t);
		return NULL;
	}
	return t;
}

void ports_untrack(struct ptrack *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&P.lock);
	struct psb *ps = t->owner;
	if (t->prev)
		t->prev->next = t->next;
	else
		ps->tracks = t->next;
	if (t->next)
		t->next->prev = t->prev;
	psb_unref_locked(ps);
	pthread_mutex_unlock(&P.lock);
	free(t);
}

int ports_exposed(struct dsb *s, unsigned port)
{
	pthread_mutex_lock(&s->lock);
	int i = find_port_locked(s, port);
	pthread_mutex_unlock(&s->lock);
	return i >= 0;
}

/* ---- relaying ------------------------------------------------------------------- */

static void side_init(struct pside *sd, struct pconn *c, int fd)
{
	sd->it.kind = PK_SIDE;
	sd->c = c;
	sd->fd = fd;
	sd->readable = sd->writable = 1;
}

static int side_watch(struct pside *sd)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				  .data.ptr = &sd->it };
	if (epoll_ctl(P.epfd, EPOLL_CTL_ADD, sd->fd, &ev) < 0)
		return -1;
	sd->in_epoll = 1;
	return 0;
}

static int keep_pending(struct pside *src, const char *data, size_t len)
{
	src->pend = malloc(len);
	if (!src->pend)
		return -1;
	memcpy(src->pend, data, len);
	src->pend_off = 0;
	src->pend_len = len;
	return 0;
}

/* Move bytes from src to dst.  Returns 1 if it stopped with more to do (the
 * connection goes on the ready list), 0 when it waits for an event, -1 on
 * an error that ends the connection. */
static int move(struct pside *src, struct pside *dst)
{
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		if (src->pend) {
			ssize_t w = send(dst->fd, src->pend + src->pend_off, src->pend_len,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN) {
					dst->writable = 0;
					return 0;
				}
				return -1;
			}
			P.relayed_bytes += (uint64_t)w;
			src->pend_off += (size_t)w;
			src->pend_len -= (size_t)w;
			if (src->pend_len) {
				dst->writable = 0;
				return 0;
			}
			free(src->pend);
			src->pend = NULL;
			continue;
		}
		if (src->rd_eof) {
			if (!dst->wr_shut) {
				shutdown(dst->fd, SHUT_WR);
				dst->wr_shut = 1;
			}
			return 0;
		}
		if (!src->readable)
			return 0;
		ssize_t r = recv(src->fd, P.scratch, SCRATCH_SIZE, MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				src->readable = 0;
				return 0;
			}
			return -1;
		}
		if (r == 0) {
			src->rd_eof = 1;
			continue;
		}
		src->c->owner->touch_wanted = 1;
		ssize_t w = 0;
		if (dst->writable) {
			w = send(dst->fd, P.scratch, (size_t)r, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			if (w < 0)
				w = 0;
			P.relayed_bytes += (uint64_t)w;
		}
		if (w < r) {
			dst->writable = 0;
			if (keep_pending(src, P.scratch + w, (size_t)(r - w)) < 0)
				return -1;
			return 0;
		}
	}
	return 1;
}

static int conn_done(const struct pconn *c)
{
	for (int i = 0; i < 2; i++) {
		const struct pside *src = &c->side[i], *dst = &c->side[!i];
		if (!src->rd_eof || src->pend || !dst->wr_shut)
			return 0;
	}
	return 1;
}

static void pump(struct pconn *c)
{
	int more = 0;
	for (int i = 0; i < 2 && !c->dead; i++) {
		int r = move(&c->side[i], &c->side[!i]);
		if (r < 0) {
			conn_close_locked(c);
			return;
		}
		more |= r;
	}
	if (conn_done(c)) {
		conn_close_locked(c);
		return;
	}
	if (more && !c->queued) {
		c->queued = 1;
		c->ready_next = P.ready;
		P.ready = c;
	}
}

/* A connection whose sandbox side could not be had: reset the client's. */
static void reset_close(int fd)
{
	struct linger lg = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* A relayed pair (P.lock held).  On failure closes both (the client's
 * through close0 if given) and returns -1. */
static struct pconn *conn_start_locked(struct psb *ps, uint16_t port, int host_fd, int sb_fd,
				       void (*close0)(void *), void *close0_ud)
{
	struct pconn *c = calloc(1, sizeof(*c));
	if (!c) {
		close0 ? close0(close0_ud) : reset_close(host_fd);
		close(sb_fd);
		return NULL;
	}
	side_init(&c->side[0], c, host_fd);
	side_init(&c->side[1], c, sb_fd);
	c->owner = ps;
	c->port = port;
	c->close0 = close0;
	c->close0_ud = close0_ud;
	c->next = ps->conns;
	if (ps->conns)
		ps->conns->prev = c;
	ps->conns = c;
	ps->nconns++;
	ps->refs++;
	P.total++;
	for (int i = 0; i < 2; i++) {
		/* Bytes go on as they come: no Nagle delay on top of the
		 * endpoints' own (a no-op on the unix socket of an upgrade). */
		int one = 1;
		setsockopt(c->side[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int fl = fcntl(c->side[i].fd, F_GETFL);
		if (fl < 0 || fcntl(c->side[i].fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
		    side_watch(&c->side[i]) < 0) {
			conn_close_locked(c);
			return NULL;
		}
	}
	return c;
}

struct connector {
	struct psb *ps;
	uint16_t port;
	int client_fd;
};

/* Open the sandbox side of an accepted connection (its own thread: it may
 * block), then hand the pair to the relay thread. */
static void *connector_main(void *arg)
{
	struct connector *cn = arg;
	struct psb *ps = cn->ps;
	struct dsb *s = ps->s;
	sandlot_error_t *err = NULL;
	int up = -1;
	pthread_mutex_lock(&s->lock);
	sandlot_t *sb = s->state == DSB_RUNNING && !s->destroy_pending ? s->sb : NULL;
	if (sb) {
		s->busy++; /* the handle stays while we use it (dsb_stop waits) */
		s->last_active_ms = daemon_now_ms();
	}
	pthread_mutex_unlock(&s->lock);
	if (sb) {
		up = sandlot_port_connect(sb, cn->port, 0, &err);
		dsb_busy(s, -1);
	} else {
		sandlot__error(&err, EPIPE, "the sandbox is not running");
	}
	if (up < 0) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", sandlot_error_message(err));
		for (char *p = msg; *p; p++)
			if (*p == '"')
				*p = '\'';
		daemon_log("port_refused", "level=warn sandbox=%s port=%u error=\"%s\"", s->id,
			   (unsigned)cn->port, msg);
	}
	sandlot_error_free(err);

	pthread_mutex_lock(&P.lock);
	ps->nconns--; /* counted as connecting until here */
	P.total--;
	int listening = 0;
	for (unsigned i = 0; i < ps->nls; i++)
		listening |= ps->ls[i]->port == cn->port;
	if (up >= 0 && !ps->closed && listening) {
		if (conn_start_locked(ps, cn->port, cn->client_fd, up, NULL, NULL))
			P.accepted++;
	} else {
		reset_close(cn->client_fd);
		if (up >= 0)
			close(up);
		P.refused++;
	}
	psb_unref_locked(ps);
	pthread_mutex_unlock(&P.lock);
	wake_loop();
	free(cn);
	return NULL;
}

static void accept_on(struct plisten *l)
{
	struct psb *ps = l->owner;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		if (ps->nconns >= CONNS_PER_SANDBOX || P.total >= CONNS_TOTAL) {
			daemon_log("port_refused", "level=warn sandbox=%s port=%u reason=\"%u connections "
				   "at once (limit %u per sandbox, %u in all)\"", ps->s->id,
				   (unsigned)l->port, ps->nconns, CONNS_PER_SANDBOX, CONNS_TOTAL);
			reset_close(fd);
			P.refused++;
			continue;
		}
		struct connector *cn = calloc(1, sizeof(*cn));
		pthread_attr_t attr;
		pthread_t th;
		int rc = cn ? pthread_attr_init(&attr) : ENOMEM;
		if (rc == 0) {
			cn->ps = ps;
			cn->port = l->port;
			cn->client_fd = fd;
			pthread_attr_setstacksize(&attr, CONNECTOR_STACK);
			pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			ps->refs++;
			ps->nconns++;
			P.total++;
			rc = pthread_create(&th, &attr, connector_main, cn);
			pthread_attr_destroy(&attr);
			if (rc != 0) {
				ps->refs--;
				ps->nconns--;
				P.total--;
			}
		}
		if (rc != 0) {
			free(cn);
			reset_close(fd);
			P.refused++;
		}
	}
}

/* ---- the relay thread ------------------------------------------------------------- */

#define MAX_TOUCH 64

static void *loop_main(void *arg)
{
	struct epoll_event ev[64];
	struct dsb *touch[MAX_TOUCH];
	for (;;) {
		int n = epoll_wait(P.epfd, ev, 64, P.ready ? 0 : -1);
		if (n < 0 && errno != EINTR)
			n = 0;
		pthread_mutex_lock(&P.lock);
		if (P.quit) {
			pthread_mutex_unlock(&P.lock);
			break;
		}
		for (int i = 0; i < n; i++) {
			struct pitem *it = ev[i].data.ptr;
			if (it->kind == PK_WAKE) {
				uint64_t v;
				if (read(P.wake_fd, &v, sizeof(v)) < 0) {
					/* spurious */
				}
			} else if (it->kind == PK_LISTEN) {
				struct plisten *l = (struct plisten *)it;
				if (!l->dead)
					accept_on(l);
			} else {
				struct pside *sd = (struct pside *)it;
				struct pconn *c = sd->c;
				if (c->dead)
					continue;
				uint32_t e = ev[i].events;
				if (e & EPOLLERR) {
					conn_close_locked(c);
					continue;
				}
				if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
					sd->readable = 1;
				if (e & (EPOLLOUT | EPOLLHUP))
					sd->writable = 1;
				pump(c);
			}
		}
		/* Connections that had more to move than one turn allows. */
		struct pconn *r = P.ready;
		P.ready = NULL;
		while (r) {
			struct pconn *c = r;
			r = r->ready_next;
			c->queued = 0;
			if (!c->dead)
				pump(c);
		}
		/* Relayed traffic is activity (the idle timeout), at most once a
		 * second per sandbox. */
		int nt = 0;
		int64_t now = daemon_now_ms();
		for (int i = 0; i < n && nt < MAX_TOUCH; i++) {
			struct pitem *it = ev[i].data.ptr;
			if (it->kind != PK_SIDE)
				continue;
			struct pconn *c = ((struct pside *)it)->c;
			if (c->dead)
				continue;
			struct psb *ps = c->owner;
			if (ps->touch_wanted && now - ps->touched_ms >= TOUCH_EVERY_MS && !ps->closed) {
				ps->touch_wanted = 0;
				ps->touched_ms = now;
				dsb_hold(ps->s);
				touch[nt++] = ps->s;
			}
		}
		/* Nothing of this batch points at the grave any more. */
		while (P.grave_ls) {
			struct plisten *l = P.grave_ls;
			P.grave_ls = l->grave_next;
			free(l);
		}
		while (P.grave_conns) {
			struct pconn *c = P.grave_conns;
			if (c->queued)
				break; /* still on P.ready: next turn */
			P.grave_conns = c->grave_next;
			free(c);
		}
		pthread_mutex_unlock(&P.lock);
		for (int i = 0; i < nt; i++) {
			dsb_touch(touch[i]);
			dsb_release(P.d, touch[i]);
		}
	}
	return NULL;
}

/* ---- upgraded HTTP connections (proxy.c) ------------------------------------------ */

int ports_adopt(struct dsb *s, unsigned port, int any, int client_fd,
		void (*close_client)(void *), void *close_ud, const void *to_sandbox,
		size_t to_sandbox_len, int sb_fd, const void *to_client, size_t to_client_len)
{
	pthread_mutex_lock(&s->lock);
	pthread_mutex_lock(&P.lock);
	struct psb *ps = reach_locked(s, port, any);
	struct pconn *c = NULL;
	if (ps && !ps->closed) {
		c = conn_start_locked(ps, (uint16_t)port, client_fd, sb_fd, close_client, close_ud);
		if (c)
			c->any = any && find_port_locked(s, port) < 0;
	} else {
		close_client(close_ud);
		close(sb_fd);
	}
	int rc = c ? 0 : -1;
	if (c && ((to_sandbox_len && keep_pending(&c->side[0], to_sandbox, to_sandbox_len) < 0) ||
		  (to_client_len && keep_pending(&c->side[1], to_client, to_client_len) < 0))) {
		conn_close_locked(c);
		rc = -1;
	} else if (c) {
		pump(c);
	}
	pthread_mutex_unlock(&P.lock);
	pthread_mutex_unlock(&s->lock);
	wake_loop();
	return rc;
}

/* ---- start and stop ---------------------------------------------------------------- */

int ports_start(struct daemon *d, sandlot_error_t **err)
{
	P.d = d;
	P.scratch = malloc(SCRATCH_SIZE);
	P.epfd = epoll_create1(EPOLL_CLOEXEC);
	P.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!P.scratch || P.epfd < 0 || P.wake_fd < 0) {
		sandlot__error_errno(err, P.scratch ? errno : ENOMEM, "set up the port relay");
		goto fail;
	}
	P.wake_item.kind = PK_WAKE;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &P.wake_item };
	if (epoll_ctl(P.epfd, EPOLL_CTL_ADD, P.wake_fd, &ev) < 0) {
		sandlot__error_errno(err, errno, "set up the port relay");
		goto fail;
	}
	int rc = pthread_create(&P.thread, NULL, loop_main, NULL);
	if (rc != 0) {
		sandlot__error_errno(err, rc, "start the port relay thread");
		goto fail;
	}
	P.started = 1;
	return 0;
fail:
	free(P.scratch);
	P.scratch = NULL;
	if (P.epfd >= 0)
		close(P.epfd);
	if (P.wake_fd >= 0)
		close(P.wake_fd);
	P.epfd = P.wake_fd = -1;
	return -1;
}

void ports_stop(void)
{
	if (!P.started)
		return;
	pthread_mutex_lock(&P.lock);
	P.quit = 1;
	pthread_mutex_unlock(&P.lock);
	wake_loop();
	pthread_join(P.thread, NULL);
	P.started = 0;
	/* Every sandbox was ended (ports_close) before; connector threads may
	 * still be finishing a connect: wait for them (bounded). */
	uint64_t deadline = sandlot__now_ms() + 6000;
	for (;;) {
		pthread_mutex_lock(&P.lock);
		unsigned left = P.total;
		pthread_mutex_unlock(&P.lock);
		if (!left || sandlot__now_ms() > deadline)
			break;
		usleep(10000);
	}
	pthread_mutex_lock(&P.lock);
	while (P.grave_ls) {
		struct plisten *l = P.grave_ls;
		P.grave_ls = l->grave_next;
		free(l);
	}
	while (P.grave_conns) {
		struct pconn *c = P.grave_conns;
		P.grave_conns = c->grave_next;
		free(c);
	}
	pthread_mutex_unlock(&P.lock);
	close(P.epfd);
	close(P.wake_fd);
	P.epfd = P.wake_fd = -1;
	free(P.scratch);
	P.scratch = NULL;
}

char *ports_metrics(void)
{
	pthread_mutex_lock(&P.lock);
	unsigned long long open = P.total, acc = P.accepted, ref = P.refused, bytes = P.relayed_bytes;
	pthread_mutex_unlock(&P.lock);
	char *out = NULL;
	if (asprintf(&out,
		     "# HELP sandlot_port_connections Connections relayed into sandboxes' ports now.\n"
		     "# TYPE sandlot_port_connections gauge\nsandlot_port_connections %llu\n"
		     "# HELP sandlot_port_connections_total Connections relayed into sandboxes' ports.\n"
		     "# TYPE sandlot_port_connections_total counter\n"
		     "sandlot_port_connections_total %llu\n"
		     "# HELP sandlot_port_refused_total Connections to exposed ports that could not be "
		     "relayed (nothing listening inside, limits).\n"
		     "# TYPE sandlot_port_refused_total counter\nsandlot_port_refused_total %llu\n"
		     "# HELP sandlot_port_relayed_bytes_total Bytes relayed both ways.\n"
		     "# TYPE sandlot_port_relayed_bytes_total counter\n"
		     "sandlot_port_relayed_bytes_total %llu\n",
		     open, acc, ref, bytes) < 0)
		return NULL;
	return out;
}

/* ---- routes ------------------------------------------------------------------------- */

/* The {port} of a path: digits, 1 to 65535.  0 having answered 400. */
static unsigned path_port(struct http_req *req, const char *s)
{
	unsigned long v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9' && v <= 65535; p++)
		v = v * 10 + (unsigned long)(*p - '0');
	if (p == s || *p || v < 1 || v > 65535) {
		http_error(req, 400, "bad_request", "invalid port \"%.16s\": expected 1 to 65535", s);
		return 0;
	}
	return (unsigned)v;
}

static void exposed_list_locked(struct dsb *s, char *out, size_t n)
{
	size_t o = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < s->nports && o + 8 < n; i++)
		o += (size_t)snprintf(out + o, n - o, "%s%u", i ? ", " : "", (unsigned)s->ports[i].port);
	if (!s->nports)
		snprintf(out, n, "none");
}

static int answer_not_exposed_locked(struct http_req *req, struct dsb *s, unsigned port)
{
	char list[PORTS_MAX * 8];
	exposed_list_locked(s, list, sizeof(list));
	return http_error(req, 404, "port_not_exposed",
			  "port %u is not exposed in sandbox %s (exposed: %s); add it with POST "
			  "/v1/sandboxes/%s/ports", port, s->id, list, s->id);
}

static int list_ports(struct http_req *req)
{
	struct dsb *s = dsb_find(req->d, req->params[0]);
	if (!s) {
		dsb_answer_missing(req, req->params[0]);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	json_t *o = json_pack("{s:o}", "ports", ports_json_locked(s));
	pthread_mutex_unlock(&s->lock);
	dsb_release(req->d, s);
	return http_json(req, 200, o);
}

static int get_port(struct http_req *req)
{
	unsigned port = path_port(req, req->params[1]);
	if (!port)
		return 0;
	struct dsb *s = dsb_find(req->d, req->params[0]);
	if (!s) {
		dsb_answer_missing(req, req->params[0]);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	int i = find_port_locked(s, port);
	if (i < 0)
		answer_not_exposed_locked(req, s, port);
	else
		http_json(req, 200, port_json(&s->ports[i]));
	pthread_mutex_unlock(&s->lock);
	dsb_release(req->d, s);
	return 0;
}

static int add_port(struct http_req *req)
{
	struct daemon *d = req->d;
	json_t *body = req->json;
	if (!json_is_object(body))
		return http_error(req, 400, "bad_request", "the request body must be a JSON object "
				  "such as {\"port\": 8000}");
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v)
		if (strcmp(key, "port") != 0)
			return http_error(req, 400, "bad_request", "unknown field \"%.64s\" (known: port)",
					  key);
	json_t *pv = json_object_get(body, "port");
	char msg[256];
	uint16_t port;
	if (!pv)
		return http_error(req, 400, "bad_request", "field \"port\" is required");
	if (ports_parse_one(pv, &port, msg, sizeof(msg)) < 0)
		return http_error(req, 400, "bad_request", "field \"port\": %s", msg);
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	int i = find_port_locked(s, port);
	if (i >= 0) {
		http_error(req, 409, "conflict", "port %u is already exposed in sandbox %s",
			   (unsigned)port, s->id);
	} else if (s->nports >= PORTS_MAX) {
		http_error(req, 400, "bad_request",
			   "sandbox %s already exposes %u ports, the most a sandbox can; remove one "
			   "first", s->id, PORTS_MAX);
	} else {
		sandlot_error_t *err = NULL;
		s->ports[s->nports++] = (struct dport){ .port = port };
		if (open_one_locked(s, s->nports - 1, &err) < 0) {
			s->nports--;
			http_error_from(req, err);
			sandlot_error_free(err);
		} else {
			sync_options_locked(s);
			registry_save(d, s);
			daemon_log("port_added", "sandbox=%s port=%u host_port=%u", s->id, (unsigned)port,
				   (unsigned)s->ports[s->nports - 1].host_port);
			http_json(req, 201, port_json(&s->ports[s->nports - 1]));
		}
	}
	pthread_mutex_unlock(&s->lock);
	dsb_put(d, s);
	return 0;
}

/* Stop exposing s->ports[i] (s->lock held). */
static void remove_locked(struct dsb *s, unsigned i)
{
	unsigned port = s->ports[i].port;
	pthread_mutex_lock(&P.lock);
	if (s->psb)
		cut_locked(s->psb, port);
	pthread_mutex_unlock(&P.lock);
	memmove(&s->ports[i], &s->ports[i + 1], (s->nports - i - 1) * sizeof(s->ports[0]));
	s->nports--;
}

static int set_ports(struct http_req *req)
{
	struct daemon *d = req->d;
	json_t *body = req->json;
	if (!json_is_object(body) || !json_object_get(body, "ports"))
		return http_error(req, 400, "bad_request", "the request body must be a JSON object "
				  "such as {\"ports\": [8000, 8888]}");
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v)
		if (strcmp(key, "ports") != 0)
			return http_error(req, 400, "bad_request", "unknown field \"%.64s\" (known: ports)",
					  key);
	uint16_t want[PORTS_MAX];
	unsigned n;
	char msg[256];
	if (ports_parse(json_object_get(body, "ports"), want, &n, msg, sizeof(msg)) < 0)
		return http_error(req, 400, "bad_request", "field \"ports\": %s", msg);
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	/* Ports that go: closed.  Ports that stay keep their listener (and URL). */
	for (unsigned i = 0; i < s->nports;) {
		int keep = 0;
		for (unsigned k = 0; k < n; k++)
			keep |= want[k] == s->ports[i].port;
		if (keep)
			i++;
		else
			remove_locked(s, i);
	}
	struct dport next[PORTS_MAX];
	for (unsigned k = 0; k < n; k++) {
		int i = find_port_locked(s, want[k]);
		next[k] = i >= 0 ? s->ports[i] : (struct dport){ .port = want[k] };
	}
	memcpy(s->ports, next, n * sizeof(next[0]));
	s->nports = n;
	sandlot_error_t *err = NULL;
	int failed = 0;
	for (unsigned i = 0; i < s->nports;) {
		if (s->ports[i].host_port || open_one_locked(s, i, err ? NULL : &err) == 0) {
			i++;
			continue;
		}
		failed = 1;
		memmove(&s->ports[i], &s->ports[i + 1], (s->nports - i - 1) * sizeof(s->ports[0]));
		s->nports--;
	}
	sync_options_locked(s);
	registry_save(d, s);
	if (failed)
		http_error_from(req, err);
	else
		http_json(req, 200, json_pack("{s:o}", "ports", ports_json_locked(s)));
	sandlot_error_free(err);
	pthread_mutex_unlock(&s->lock);
	dsb_put(d, s);
	return 0;
}

static int delete_port(struct http_req *req)
{
	struct daemon *d = req->d;
	unsigned port = path_port(req, req->params[1]);
	if (!port)
		return 0;
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	int i = find_port_locked(s, port);
	if (i < 0) {
		answer_not_exposed_locked(req, s, port);
	} else {
		remove_locked(s, (unsigned)i);
		sync_options_locked(s);
		registry_save(d, s);
		daemon_log("port_removed", "sandbox=%s port=%u", s->id, port);
		http_empty(req, 204);
	}
	pthread_mutex_unlock(&s->lock);
	dsb_put(d, s);
	return 0;
}

const struct http_route port_routes[] = {
	{ "GET", "/v1/sandboxes/{}/ports", HTTP_NOBODY, list_ports, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/ports", HTTP_JSON, add_port, NULL, NULL, NULL },
	{ "PUT", "/v1/sandboxes/{}/ports", HTTP_JSON, set_ports, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/ports/{}", HTTP_NOBODY, get_port, NULL, NULL, NULL },
	{ "DELETE", "/v1/sandboxes/{}/ports/{}", HTTP_NOBODY, delete_port, NULL, NULL, NULL },
	{ 0 },
};
