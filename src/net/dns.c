/* The DNS listeners inside a sandbox: every query the sandbox sends, to any
 * address on port 53 (the ruleset redirects them here), is answered by
 * sandlot from the sandbox's policy (engine thread only; see engine.h).
 *
 *   - a name the policy does not allow: NXDOMAIN, and nothing is sent
 *     upstream (no exfiltration through the query name);
 *   - A of an allowed name: resolved upstream (resolve.c), the addresses
 *     the sandbox may not reach (closed ranges, this host, deny rules)
 *     removed (no rebinding), the rest answered with a TTL of at most 60 s
 *     and remembered as the name's pins (proxy.c connects only to those, or
 *     to what sandlot resolves itself);
 *   - AAAA: no data (sandboxes have no IPv6);
 *   - HTTPS and SVCB: REFUSED (they carry ECH keys and HTTP/3 hints);
 *   - any other type: no data, never forwarded.
 * Queries over the per-sandbox budget (sl_cfg.dns_qps) get REFUSED.
 */
#include "net/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "linux/netns.h"

struct sl_dns_tcp {
	struct sl_ev ev;
	struct sl_net *net;
	int fd;
	uint8_t buf[2 + 4096];
	size_t len;
	struct sl_dnsq *pending;       /* at most one query at a time */
	int resuming;                  /* inside tcp_resume() */
	struct sl_timer_node timer;    /* idle */
	struct sl_dns_tcp *prev, *next;
};

/* A query waiting for its upstream answer. */
struct sl_dnsq {
	struct sl_waiter w;            /* first: the waiter is the query */
	struct sl_net *net;
	struct sl_dns_tcp *tcp;        /* NULL: UDP, answer to `from` */
	struct sockaddr_in from;
	uint8_t head[SL_DNS_HEADER + 260]; /* header and question, for the reply */
	struct sl_dns_query q;
	struct sl_dnsq *prev, *next;
};

static void tcp_close(struct sl_dns_tcp *t);
static void tcp_resume(struct sl_dns_tcp *t);

static void send_reply(struct sl_net *n, struct sl_dns_tcp *t, const struct sockaddr_in *from,
		       const struct sl_dns_query *q, int rcode, const uint32_t *addrs, size_t na,
		       uint32_t ttl)
{
	uint8_t out[2 + SL_DNS_UDP_MAX];
	size_t len = sl_dns_build_reply(out + 2, SL_DNS_UDP_MAX, q, rcode, addrs, na, ttl);
	if (!len)
		return;
	if (!t) {
		sendto(n->fds[SANDLOT_NETNS_FD_DNS_UDP], out + 2, len, MSG_DONTWAIT,
		       (const struct sockaddr *)from, sizeof(*from));
		return;
	}
	out[0] = (uint8_t)(len >> 8);
	out[1] = (uint8_t)len;
	/* A few hundred bytes into an idle socket's buffer: a short write
	 * means the client is not reading, and it loses the connection. */
	if (send(t->fd, out, len + 2, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)(len + 2))
		tcp_close(t);
}

static void logq(struct sl_net *n, const struct sl_dns_query *q, int allowed, enum sl_reason r,
		 uint32_t answers)
{
	net_log(n, SL_LAYER_DNS, allowed, r, q->name, 0, 0, q->qtype, answers);
	if (allowed)
		__atomic_add_fetch(&sl_stats.dns_allowed, 1, __ATOMIC_RELAXED);
	else
		stat_refused(1, r);
}

static int take_token(struct sl_net *n)
{
	uint64_t now = sl_now_ms();
	double rate = sl_cfg.dns_qps, burst = 2.0 * sl_cfg.dns_qps;
	n->tokens += (double)(now - n->tokens_ms) * rate / 1000.0;
	if (n->tokens > burst)
		n->tokens = burst;
	n->tokens_ms = now;
	if (n->tokens < 1.0)
		return 0;
	n->tokens -= 1.0;
	return 1;
}

static void dnsq_free(struct sl_dnsq *d)
{
	resolve_cancel(&d->w);
	struct sl_net *n = d->net;
	if (d->prev)
		d->prev->next = d->next;
	else
		n->dnsqs = d->next;
	if (d->next)
		d->next->prev = d->prev;
	n->ndnsqs--;
	if (d->tcp)
		d->tcp->pending = NULL;
	free(d);
}

static void on_resolved(struct sl_waiter *w, const struct sl_cname *c)
{
	struct sl_dnsq *d = (struct sl_dnsq *)w;
	struct sl_net *n = d->net;
	struct sl_dns_tcp *t = d->tcp;
	const struct sl_dns_query *q = &d->q;
	/* Detached from its connection first: a failed reply closes that. */
	if (t) {
		t->pending = NULL;
		d->tcp = NULL;
	}
	struct sl_policy *p = net_policy(n);
	enum sl_verdict v = sl_policy_name(p, q->name);
	if (v != SL_ALLOW) {
		/* The policy changed while we waited. */
		send_reply(n, t, &d->from, q, SL_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
		logq(n, q, 0, v == SL_DENIED ? SL_R_DENIED : SL_R_NOT_ALLOWED, 0);
	} else if (c->status == SL_R_RESOLVE_FAILED) {
		send_reply(n, t, &d->from, q, SL_DNS_RCODE_SERVFAIL, NULL, 0, 0);
		logq(n, q, 0, SL_R_RESOLVE_FAILED, 0);
	} else if (c->naddrs == 0) {
		send_reply(n, t, &d->from, q,
			   c->nxdomain ? SL_DNS_RCODE_NXDOMAIN : SL_DNS_RCODE_NOERROR, NULL, 0, 0);
		logq(n, q, 1, SL_R_ALLOWED, 0);
	} else {
		uint32_t ok[SL_DNS_MAX_ADDRS];
		size_t k = 0;
		for (int i = 0; i < c->naddrs; i++)
			if (engine_addr_usable(p, c->addrs[i]))
				ok[k++] = c->addrs[i];
		if (k == 0) {
			/* Every address is one the sandbox may not reach: an
			 * allowed name pointing inside (rebinding, metadata). */
			send_reply(n, t, &d->from, q, SL_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
			logq(n, q, 0, SL_R_CLOSED_ADDRESS, 0);
		} else {
			uint64_t now = sl_now_ms();
			uint64_t left = c->expires_ms > now ? (c->expires_ms - now) / 1000 : 0;
			uint32_t ttl = left < SL_NET_DNS_TTL_MAX ? (uint32_t)left : SL_NET_DNS_TTL_MAX;
			net_pin(n, q->name, ok, (int)k);
			send_reply(n, t, &d->from, q, SL_DNS_RCODE_NOERROR, ok, k, ttl);
			logq(n, q, 1, SL_R_ALLOWED, (uint32_t)k);
		}
	}
	sl_policy_unref(p);
	dnsq_free(d);
	if (t && t->fd >= 0 && !t->resuming)
		tcp_resume(t);
}

/* Answer one query (msg, len) from `from` (UDP) or on t (TCP). */
static void handle_query(struct sl_net *n, struct sl_dns_tcp *t, const struct sockaddr_in *from,
			 const uint8_t *msg, size_t len)
{
	struct sl_dns_query q;
	int st = sl_dns_parse_query(msg, len, &q);
	if (st == SL_DNS_DROP)
		return;
	if (!take_token(n)) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_REFUSED, NULL, 0, 0);
		uint64_t now = sl_now_ms();
		stat_refused(1, SL_R_RATE_LIMIT);
		if (now - n->rate_logged_ms >= 1000) { /* one log entry a second */
			n->rate_logged_ms = now;
			net_log(n, SL_LAYER_DNS, 0, SL_R_RATE_LIMIT, q.name, 0, 0, q.qtype, 0);
		}
		return;
	}
	if (st == SL_DNS_ERROR) {
		send_reply(n, t, from, &q, q.rcode, NULL, 0, 0);
		logq(n, &q, 0, SL_R_MALFORMED, 0);
		return;
	}
	if (q.name_status != SL_NAME_OK) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
		logq(n, &q, 0, q.name_status == SL_NAME_IP_LITERAL ? SL_R_IP_LITERAL : SL_R_BAD_NAME, 0);
		return;
	}
	struct sl_policy *p = net_policy(n);
	enum sl_verdict v = sl_policy_name(p, q.name);
	sl_policy_unref(p);
	if (v != SL_ALLOW) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
		logq(n, &q, 0, v == SL_DENIED ? SL_R_DENIED : SL_R_NOT_ALLOWED, 0);
		return;
	}
	if (q.qclass != 1 || q.qtype == SL_DNS_TYPE_HTTPS || q.qtype == SL_DNS_TYPE_SVCB) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_REFUSED, NULL, 0, 0);
		logq(n, &q, 0, SL_R_UNSUPPORTED_TYPE, 0);
		return;
	}
	if (q.qtype == SL_DNS_TYPE_AAAA) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_NOERROR, NULL, 0, 0);
		logq(n, &q, 1, SL_R_ALLOWED, 0);
		return;
	}
	if (q.qtype != SL_DNS_TYPE_A) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_NOERROR, NULL, 0, 0);
		logq(n, &q, 0, SL_R_UNSUPPORTED_TYPE, 0);
		return;
	}
	if (n->ndnsqs >= SL_NET_DNS_PENDING_MAX) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_SERVFAIL, NULL, 0, 0);
		logq(n, &q, 0, SL_R_RATE_LIMIT, 0);
		return;
	}
	struct sl_dnsq *d = calloc(1, sizeof(*d));
	if (!d) {
		send_reply(n, t, from, &q, SL_DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return;
	}
	d->w.fn = on_resolved;
	d->net = n;
	d->tcp = t;
	if (from)
		d->from = *from;
	/* Keep the header and question: the reply echoes them. */
	memcpy(d->head, msg, SL_DNS_HEADER + q.question_len);
	d->q = q;
	d->q.question = d->head + SL_DNS_HEADER;
	d->next = n->dnsqs;
	if (n->dnsqs)
		n->dnsqs->prev = d;
	n->dnsqs = d;
	n->ndnsqs++;
	if (t)
		t->pending = d;
	resolve(d->q.name, &d->w); /* may answer, and free d, before it returns */
}

void dns_on_udp(struct sl_net *n)
{
	uint8_t buf[4096];
	for (int i = 0; i < 64; i++) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t len = recvfrom(n->fds[SANDLOT_NETNS_FD_DNS_UDP], buf, sizeof(buf), MSG_DONTWAIT,
				       (struct sockaddr *)&from, &fl);
		if (len < 0)
			return;
		if (fl != sizeof(from) || from.sin_family != AF_INET)
			continue;
		handle_query(n, NULL, &from, buf, (size_t)len);
	}
}

/* ---- DNS over TCP ------------------------------------------------------------- */

static void tcp_free(void *p)
{
	free(p);
}

static void tcp_close(struct sl_dns_tcp *t)
{
	if (t->fd < 0)
		return;
	if (t->pending)
		dnsq_free(t->pending);
	engine_timer_clear(&t->timer);
	engine_unwatch(t->fd);
	close(t->fd);
	t->fd = -1;
	t->ev.owner = NULL;
	struct sl_net *n = t->net;
	if (t->prev)
		t->prev->next = t->next;
	else
		n->dns_tcps = t->next;
	if (t->next)
		t->next->prev = t->prev;
	n->ndns_tcps--;
	engine_defer_free(t, tcp_free);
}

static void tcp_idle(struct sl_timer_node *tm)
{
	struct sl_dns_tcp *t = (struct sl_dns_tcp *)((char *)tm - offsetof(struct sl_dns_tcp, timer));
	tcp_close(t);
}

/* Answer the queries already buffered, one at a time; read when none is
 * pending. */
static void tcp_resume(struct sl_dns_tcp *t)
{
	t->resuming = 1;
	while (t->fd >= 0 && !t->pending && t->len >= 2) {
		size_t ml = ((size_t)t->buf[0] << 8) | t->buf[1];
		if (t->len < 2 + ml)
			break;
		uint8_t msg[4096];
		memcpy(msg, t->buf + 2, ml);
		memmove(t->buf, t->buf + 2 + ml, t->len - 2 - ml);
		t->len -= 2 + ml;
		handle_query(t->net, t, NULL, msg, ml);
	}
	t->resuming = 0;
	if (t->fd >= 0) {
		engine_rewatch(t->fd, &t->ev, t->pending ? 0 : EPOLLIN);
		engine_timer_set(&t->timer, sl_now_ms() + SL_NET_DNS_TCP_IDLE_MS);
	}
}

void dns_on_tcp(struct sl_dns_tcp *t, uint32_t events)
{
	if (t->pending)
		return;
	ssize_t r = recv(t->fd, t->buf + t->len, sizeof(t->buf) - t->len, MSG_DONTWAIT);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		tcp_close(t);
		return;
	}
	if (r > 0)
		t->len += (size_t)r;
	if (t->len >= 2) {
		size_t ml = ((size_t)t->buf[0] << 8) | t->buf[1];
		if (ml > sizeof(t->buf) - 2 || ml < SL_DNS_HEADER) {
			tcp_close(t);
			return;
		}
	}
	if ((events & (EPOLLHUP | EPOLLERR)) && r <= 0) {
		tcp_close(t);
		return;
	}
	tcp_resume(t);
}

void dns_on_tcp_listen(struct sl_net *n)
{
	for (;;) {
		int fd = accept4(n->fds[SANDLOT_NETNS_FD_DNS_TCP], NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (n->ndns_tcps >= SL_NET_DNS_TCP_MAX) {
			close(fd);
			stat_refused(1, SL_R_CONNECTION_LIMIT);
			continue;
		}
		struct sl_dns_tcp *t = calloc(1, sizeof(*t));
		if (!t) {
			close(fd);
			continue;
		}
		t->fd = fd;
		t->net = n;
		t->ev.kind = SL_EV_DNS_TCP;
		t->ev.owner = t;
		t->timer.fire = tcp_idle;
		t->next = n->dns_tcps;
		if (n->dns_tcps)
			n->dns_tcps->prev = t;
		n->dns_tcps = t;
		n->ndns_tcps++;
		engine_watch(fd, &t->ev, EPOLLIN);
		engine_timer_set(&t->timer, sl_now_ms() + SL_NET_DNS_TCP_IDLE_MS);
	}
}

void dns_release(struct sl_net *n)
{
	while (n->dns_tcps)
		tcp_close(n->dns_tcps);
	while (n->dnsqs)
		dnsq_free(n->dnsqs);
}
