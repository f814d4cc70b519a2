/* The TCP listener inside a sandbox: every TCP connection the sandbox
 * opens to anything but itself arrives here (engine thread only; see
 * engine.h and docs/network.md).
 *
 * For each connection, in order:
 *   1. the original destination (SO_ORIGINAL_DST) must be an address the
 *      sandbox may reach: not a closed range (private, loopback,
 *      link-local, CGNAT, ...), not this host, not a deny range;
 *   2. allowlist: an address in an allow range goes straight on; anything
 *      else must name its host: the TLS ClientHello's SNI (reassembled
 *      across records and segments, 64 KiB at most, within 5 s) or the
 *      HTTP/1.x request's Host.  The name must be allowed, and the
 *      destination must be one of its addresses: one this sandbox's own
 *      DNS answers gave (a pin), or, failing that, one sandlot resolves
 *      for it now.  So an allowed SNI sent to any other address is
 *      refused, whatever the client put in /etc/hosts or --resolve.
 *      open: every destination allowed by step 1 goes on, after a name
 *      check only when the policy has deny names;
 *   3. sandlot connects from the host's namespace to that address and
 *      port, replays the bytes it read, and splices both directions
 *      (with half-close) until both ends are done.
 * A refused connection is reset (the client sees ECONNRESET at once) and
 * logged with its reason.
 */
#include "net/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "linux/netns.h"

/* Bytes in flight per direction.  Every pipe starts at the kernel's default
 * (64 KiB), which caps a bulk download through the proxy at about 60 % of
 * the same download done directly on the 2-CPU test host (bench/egress.py);
 * with 1 MiB it is 90-100 %.  A direction that has moved PIPE_GROW_AFTER
 * bytes is bulk and gets PIPE_BIG, as long as the sandbox's connections
 * hold at most PIPE_BUDGET of them: pipe pages are the daemon's memory,
 * not the sandbox's, so a sandbox that opens many connections and reads
 * none must not be able to pin much of it. */
#define PIPE_SMALL (64 * 1024)
#define PIPE_BIG (1024 * 1024)
#define PIPE_GROW_AFTER (1024 * 1024)
#define PIPE_BUDGET (16 * 1024 * 1024)
#define PEEK_INITIAL 4096

enum conn_state { C_PEEK, C_RESOLVE, C_CONNECT, C_OPEN };

struct sl_conn {
	struct sl_waiter w;             /* first: resolve() hands it back */
	struct sl_ev ev_c, ev_u;
	struct sl_net *net;
	int cfd, ufd;
	int pc[2], pu[2];               /* pipes client->upstream, upstream->client */
	size_t in_pc, in_pu;
	size_t cap_pc, cap_pu;          /* their sizes (PIPE_SMALL or PIPE_BIG) */
	enum conn_state state;
	struct sockaddr_in dst;
	char name[SL_NAME_MAX + 1];
	enum sl_layer layer;
	uint8_t *buf;                   /* bytes read while naming the connection */
	size_t len, cap, sent;
	struct sl_timer_node timer;
	uint64_t seq;                   /* its "allowed" log entry */
	uint64_t out, in;
	uint32_t ev_cmask, ev_umask;
	unsigned c_eof, u_eof;          /* read EOF from the client, the upstream */
	int up_wshut, cl_wshut;         /* we shut the upstream's, the client's writing */
	int closed;
	struct sl_conn *prev, *next;
};

/* The reassembled handshake of the ClientHello being parsed. */
static uint8_t hello_scratch[SL_TLS_MAX_HANDSHAKE];

static struct sl_conn *of_timer(struct sl_timer_node *t)
{
	return (struct sl_conn *)((char *)t - offsetof(struct sl_conn, timer));
}

static void conn_free(void *p)
{
	struct sl_conn *c = p;
	free(c->buf);
	free(c);
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		engine_unwatch(*fd);
		close(*fd);
		*fd = -1;
	}
}

/* reset: make the close an RST, so the other side sees ECONNRESET now
 * rather than an orderly end it might mistake for success. */
static void conn_close(struct sl_conn *c, int reset)
{
	if (c->closed)
		return;
	c->closed = 1;
	engine_timer_clear(&c->timer);
	resolve_cancel(&c->w);
	if (reset) {
		struct linger lg = { 1, 0 };
		if (c->cfd >= 0)
			setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		if (c->ufd >= 0)
			setsockopt(c->ufd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	close_fd(&c->cfd);
	close_fd(&c->ufd);
	for (int i = 0; i < 2; i++) {
		if (c->pc[i] >= 0)
			close(c->pc[i]);
		if (c->pu[i] >= 0)
			close(c->pu[i]);
		c->pc[i] = c->pu[i] = -1;
	}
	c->ev_c.owner = c->ev_u.owner = NULL;
	struct sl_net *n = c->net;
	n->pipe_bytes -= (c->cap_pc == PIPE_BIG ? PIPE_BIG : 0) + (c->cap_pu == PIPE_BIG ? PIPE_BIG : 0);
	if (c->seq)
		net_log_bytes(n, c->seq, c->out, c->in);
	if (c->prev)
		c->prev->next = c->next;
	else
		n->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	n->nconns--;
	__atomic_sub_fetch(&sl_stats.open, 1, __ATOMIC_RELAXED);
	engine_defer_free(c, conn_free);
}

static uint32_t dst_addr(const struct sl_conn *c)
{
	return c->dst.sin_addr.s_addr;
}

static void refuse(struct sl_conn *c, enum sl_reason r)
{
	net_log(c->net, c->layer, 0, r, c->name, dst_addr(c), ntohs(c->dst.sin_port), 0, 0);
	stat_refused(0, r);
	conn_close(c, 1);
}

/* ---- splicing ------------------------------------------------------------------ */

static void set_masks(struct sl_conn *c)
{
	uint32_t cm = 0, um = 0;
	if (!c->c_eof && c->in_pc < c->cap_pc && c->sent == c->len)
		cm |= EPOLLIN;
	if (c->in_pu)
		cm |= EPOLLOUT;
	if (!c->u_eof && c->in_pu < c->cap_pu)
		um |= EPOLLIN;
	if (c->in_pc || c->sent < c->len)
		um |= EPOLLOUT;
	if (cm != c->ev_cmask) {
		engine_rewatch(c->cfd, &c->ev_c, cm);
		c->ev_cmask = cm;
	}
	if (um != c->ev_umask) {
		engine_rewatch(c->ufd, &c->ev_u, um);
		c->ev_umask = um;
	}
}

/* One direction, src -> pipe -> dst, until neither side can move.
 * Returns 1 on progress, 0 on none, -1 on an error (close the connection). */
static int pump_dir(int src, int dst, int p[2], size_t cap, size_t *inpipe, unsigned *eof,
		    int *shut, uint64_t *count, uint64_t *stat)
{
	int progress = 0;
	for (;;) {
		int moved = 0;
		if (!*eof && *inpipe < cap) {
			ssize_t n = splice(src, NULL, p[1], NULL, cap - *inpipe,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				*inpipe += (size_t)n;
				moved = 1;
			} else if (n == 0) {
				*eof = 1;
				moved = 1;
			} else if (errno != EAGAIN && errno != EINTR) {
				return -1;
			}
		}
		if (*inpipe) {
			ssize_t n = splice(p[0], NULL, dst, NULL, *inpipe,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				*inpipe -= (size_t)n;
				*count += (uint64_t)n;
				__atomic_add_fetch(stat, (uint64_t)n, __ATOMIC_RELAXED);
				moved = 1;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				return -1;
			}
		}
		if (*eof && !*inpipe && !*shut) {
			shutdown(dst, SHUT_WR);
			*shut = 1;
			moved = 1;
		}
		if (!moved)
			return progress;
		progress = 1;
	}
}

/* A bulk direction gets a big pipe, within the sandbox's budget. */
static void grow(struct sl_conn *c, int p[2], size_t *cap, uint64_t moved)
{
	struct sl_net *n = c->net;
	if (*cap >= PIPE_BIG || moved < PIPE_GROW_AFTER || n->pipe_bytes + PIPE_BIG > PIPE_BUDGET)
		return;
	if (fcntl(p[1], F_SETPIPE_SZ, PIPE_BIG) < PIPE_BIG)
		return;
	n->pipe_bytes += PIPE_BIG;
	*cap = PIPE_BIG;
}

static void pump(struct sl_conn *c, uint32_t events)
{
	/* The bytes read to name the connection go first. */
	while (c->sent < c->len) {
		ssize_t n = send(c->ufd, c->buf + c->sent, c->len - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			conn_close(c, 1);
			return;
		}
		c->sent += (size_t)n;
		c->out += (uint64_t)n;
		__atomic_add_fetch(&sl_stats.bytes_out, (uint64_t)n, __ATOMIC_RELAXED);
	}
	int p1 = 0, p2;
	if (c->sent == c->len)
		p1 = pump_dir(c->cfd, c->ufd, c->pc, c->cap_pc, &c->in_pc, &c->c_eof, &c->up_wshut,
			      &c->out, &sl_stats.bytes_out);
	p2 = p1 < 0 ? -1 : pump_dir(c->ufd, c->cfd, c->pu, c->cap_pu, &c->in_pu, &c->u_eof,
				    &c->cl_wshut, &c->in, &sl_stats.bytes_in);
	grow(c, c->pc, &c->cap_pc, c->out);
	grow(c, c->pu, &c->cap_pu, c->in);
	if (p1 < 0 || p2 < 0) {
		conn_close(c, 1);
		return;
	}
	if (c->c_eof && c->u_eof && !c->in_pc && !c->in_pu) {
		conn_close(c, 0);
		return;
	}
	/* An error or hang-up with nothing to move: do not spin on it. */
	if ((events & (EPOLLERR | EPOLLHUP)) && !p1 && !p2) {
		conn_close(c, 1);
		return;
	}
	set_masks(c);
}

/* ---- connecting ------------------------------------------------------------------- */

static void start_connect(struct sl_conn *c);

static sandlot_network_t current_mode(struct sl_conn *c)
{
	struct sl_policy *p = net_policy(c->net);
	sandlot_network_t m = p->mode;
	sl_policy_unref(p);
	return m;
}

/* The connection names no host: fine in open mode (whose name checks are
 * only for deny rules), refused otherwise. */
static void nameless(struct sl_conn *c, enum sl_reason r)
{
	if (current_mode(c) == SANDLOT_NET_OPEN) {
		engine_timer_clear(&c->timer);
		c->name[0] = '\0';
		start_connect(c);
	} else {
		refuse(c, r);
	}
}

static void on_timeout(struct sl_timer_node *t)
{
	struct sl_conn *c = of_timer(t);
	if (c->state == C_CONNECT)
		refuse(c, SL_R_CONNECT_FAILED);
	else if (c->state == C_PEEK)
		nameless(c, SL_R_TIMEOUT); /* a server-speaks-first protocol, or a silent client */
	else
		refuse(c, SL_R_TIMEOUT);
}

static void start_connect(struct sl_conn *c)
{
	c->state = C_CONNECT;
	c->ufd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->ufd < 0 || pipe2(c->pc, O_NONBLOCK | O_CLOEXEC) < 0 ||
	    pipe2(c->pu, O_NONBLOCK | O_CLOEXEC) < 0) {
		refuse(c, SL_R_CONNECT_FAILED);
		return;
	}
	c->cap_pc = c->cap_pu = PIPE_SMALL;
	int one = 1;
	setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->ufd, (struct sockaddr *)&c->dst, sizeof(c->dst)) < 0 &&
	    errno != EINPROGRESS) {
		refuse(c, SL_R_CONNECT_FAILED);
		return;
	}
	c->ev_u.kind = SL_EV_CONN_UP;
	c->ev_u.owner = c;
	c->ev_umask = EPOLLOUT;
	engine_watch(c->ufd, &c->ev_u, EPOLLOUT);
	/* Nothing more from the client until the upstream is there. */
	engine_rewatch(c->cfd, &c->ev_c, 0);
	c->ev_cmask = 0;
	engine_timer_set(&c->timer, sl_now_ms() + SL_NET_CONNECT_DEADLINE_MS);
}

static void on_connected(struct sl_conn *c)
{
	int e = 0;
	socklen_t el = sizeof(e);
	if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
		refuse(c, SL_R_CONNECT_FAILED);
		return;
	}
	engine_timer_clear(&c->timer);
	c->state = C_OPEN;
	c->seq = net_log(c->net, c->layer, 1, SL_R_ALLOWED, c->name, dst_addr(c),
			 ntohs(c->dst.sin_port), 0, 0);
	__atomic_add_fetch(&sl_stats.tcp_allowed, 1, __ATOMIC_RELAXED);
	c->ev_umask = ~0u; /* force set_masks() to write both */
	c->ev_cmask = ~0u;
	pump(c, 0);
}

/* The name is allowed; is the destination one of its addresses? */
static void on_resolved(struct sl_waiter *w, const struct sl_cname *a)
{
	struct sl_conn *c = (struct sl_conn *)w;
	for (int i = 0; i < a->naddrs; i++)
		if (a->addrs[i] == dst_addr(c)) {
			start_connect(c);
			return;
		}
	refuse(c, a->status == SL_R_RESOLVE_FAILED ? SL_R_RESOLVE_FAILED : SL_R_ADDRESS_MISMATCH);
}

/* Decide on a named connection. */
static void decide(struct sl_conn *c)
{
	struct sl_policy *p = net_policy(c->net);
	enum sl_verdict v = sl_policy_name(p, c->name);
	sandlot_network_t mode = p->mode;
	sl_policy_unref(p);
	if (v != SL_ALLOW) {
		refuse(c, v == SL_DENIED ? SL_R_DENIED : SL_R_NOT_ALLOWED);
		return;
	}
	if (mode == SANDLOT_NET_OPEN || net_pinned(c->net, c->name, dst_addr(c))) {
		start_connect(c);
		return;
	}
	c->state = C_RESOLVE;
	engine_rewatch(c->cfd, &c->ev_c, 0);
	c->ev_cmask = 0;
	resolve(c->name, &c->w); /* may call on_resolved() before returning */
}

/* Read what the client sends until it names its host. */
static void peek(struct sl_conn *c, uint32_t events)
{
	if (c->len == c->cap) {
		size_t cap = c->cap ? c->cap * 4 : PEEK_INITIAL;
		if (cap > SL_TLS_MAX_BUFFER)
			cap = SL_TLS_MAX_BUFFER;
		if (cap == c->cap) {
			refuse(c, SL_R_TOO_BIG);
			return;
		}
		uint8_t *b = realloc(c->buf, cap);
		if (!b) {
			refuse(c, SL_R_TOO_BIG);
			return;
		}
		c->buf = b;
		c->cap = cap;
	}
	ssize_t n = recv(c->cfd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* Gone before naming anything. */
		refuse(c, SL_R_MALFORMED);
		return;
	}
	c->len += (size_t)n;
	int st;
	if (c->buf[0] == 22) {
		c->layer = SL_LAYER_TLS;
		st = sl_tls_sni(c->buf, c->len, hello_scratch, c->name);
		switch (st) {
		case SL_SNI_FOUND: break;
		case SL_SNI_NEED_MORE: return;
		case SL_SNI_NONE: nameless(c, SL_R_NO_NAME); return;
		case SL_SNI_TOO_BIG: refuse(c, SL_R_TOO_BIG); return;
		case SL_SNI_BAD_NAME: refuse(c, SL_R_BAD_NAME); return;
		case SL_SNI_IP_LITERAL: refuse(c, SL_R_IP_LITERAL); return;
		default: refuse(c, SL_R_MALFORMED); return;
		}
	} else if (c->buf[0] >= 'A' && c->buf[0] <= 'Z') {
		c->layer = SL_LAYER_HTTP;
		size_t head;
		st = sl_http_host(c->buf, c->len, c->name, &head);
		switch (st) {
		case SL_HTTP_FOUND: break;
		case SL_HTTP_NEED_MORE:
			if (c->len >= SL_HTTP_MAX_HEAD)
				refuse(c, SL_R_TOO_BIG);
			return;
		case SL_HTTP_NO_HOST: nameless(c, SL_R_NO_NAME); return;
		case SL_HTTP_TOO_BIG: refuse(c, SL_R_TOO_BIG); return;
		case SL_HTTP_BAD_NAME: refuse(c, SL_R_BAD_NAME); return;
		case SL_HTTP_IP_LITERAL: refuse(c, SL_R_IP_LITERAL); return;
		default: refuse(c, SL_R_MALFORMED); return;
		}
	} else {
		nameless(c, SL_R_NO_NAME);
		return;
	}
	(void)events;
	engine_timer_clear(&c->timer);
	decide(c);
}

void proxy_on_event(struct sl_conn *c, int up, uint32_t events)
{
	switch (c->state) {
	case C_PEEK:
		if (!up)
			peek(c, events);
		break;
	case C_RESOLVE:
		if (events & (EPOLLERR | EPOLLHUP))
			conn_close(c, 1);
		break;
	case C_CONNECT:
		if (up)
			on_connected(c);
		else if (events & (EPOLLERR | EPOLLHUP))
			conn_close(c, 1);
		break;
	case C_OPEN:
		pump(c, events);
		break;
	}
}

/* Whether the policy has any name rule to deny (open mode then has to
 * read names too). */
static int has_deny_names(const struct sl_policy *p)
{
	for (size_t i = 0; i < p->ndeny; i++)
		if (p->deny[i].kind != SL_RULE_CIDR)
			return 1;
	return 0;
}

static void accept_one(struct sl_net *n, int fd)
{
	struct sl_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->net = n;
	c->cfd = fd;
	c->ufd = -1;
	c->pc[0] = c->pc[1] = c->pu[0] = c->pu[1] = -1;
	c->w.fn = on_resolved;
	c->timer.fire = on_timeout;
	c->layer = SL_LAYER_TCP;
	c->ev_c.kind = SL_EV_CONN_CLIENT;
	c->ev_c.owner = c;
	c->next = n->conns;
	if (n->conns)
		n->conns->prev = c;
	n->conns = c;
	n->nconns++;
	__atomic_add_fetch(&sl_stats.open, 1, __ATOMIC_RELAXED);

	socklen_t dl = sizeof(c->dst);
	if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &c->dst, &dl) < 0) {
		/* Not redirected: a connection to the listener itself. */
		dl = sizeof(c->dst);
		getsockname(fd, (struct sockaddr *)&c->dst, &dl);
	}
	c->ev_cmask = EPOLLIN;
	engine_watch(fd, &c->ev_c, EPOLLIN);
	if (n->nconns > sl_cfg.max_connections) {
		refuse(c, SL_R_CONNECTION_LIMIT);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	struct sl_policy *p = net_policy(n);
	int usable = engine_addr_usable(p, dst_addr(c));
	enum sl_verdict byaddr = sl_policy_addr(p, ntohl(dst_addr(c)));
	int must_name = p->mode == SANDLOT_NET_OPEN && has_deny_names(p);
	sl_policy_unref(p);
	if (!usable) {
		refuse(c, byaddr == SL_DENIED ? SL_R_DENIED : SL_R_CLOSED_ADDRESS);
		return;
	}
	/* An allow range (allowlist) or any public address (open) needs no
	 * name, unless open mode has names to deny. */
	if (byaddr == SL_ALLOW && !must_name) {
		start_connect(c);
		return;
	}
	c->state = C_PEEK;
	engine_timer_set(&c->timer, sl_now_ms() + SL_NET_HELLO_DEADLINE_MS);
}

void proxy_on_listen(struct sl_net *n)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(n->fds[SANDLOT_NETNS_FD_PROXY], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		accept_one(n, fd);
	}
}

void proxy_recheck(struct sl_net *n, const struct sl_policy *p)
{
	struct sl_conn *c = n->conns;
	while (c) {
		struct sl_conn *next = c->next;
		int ok;
		if (c->name[0])
			ok = sl_policy_name(p, c->name) == SL_ALLOW &&
			     !sl_policy_addr_denied(p, ntohl(dst_addr(c)));
		else if (c->state == C_PEEK)
			ok = p->mode != SANDLOT_NET_NONE; /* decided when it names itself */
		else
			ok = sl_policy_addr(p, ntohl(dst_addr(c))) == SL_ALLOW;
		if (!ok)
			refuse(c, SL_R_POLICY_CHANGED);
		c = next;
	}
}

void proxy_release(struct sl_net *n)
{
	while (n->conns)
		conn_close(n->conns, 1);
}
