/* Upstream resolution with c-ares, and the answer cache shared by every
 * sandbox of the process (engine thread only; see engine.h).
 *
 * Only names a sandbox's policy allows ever get here: dns.c and proxy.c
 * check the policy first, so a name that is not allowed is never sent
 * upstream.  Lookups are IPv4 only (sandboxes have no IPv6), DNS only (not
 * the host's /etc/hosts), and without search domains (the name asked for is
 * the name looked up).  Concurrent lookups of one name share one query.
 */
#include "net/engine.h"

#include <ares.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "common/lazylib.h"

/* c-ares, loaded when the engine starts (lazylib.h): a program whose
 * sandboxes never have egress never maps it.  Every call below happens
 * after resolve_init() loaded it. */
static struct {
	__typeof__(ares_library_init) *library_init;
	__typeof__(ares_strerror) *strerror;
	__typeof__(ares_init_options) *init_options;
	__typeof__(ares_set_servers_ports) *set_servers_ports;
	__typeof__(ares_destroy) *destroy;
	__typeof__(ares_freeaddrinfo) *freeaddrinfo;
	__typeof__(ares_getaddrinfo) *getaddrinfo;
	__typeof__(ares_process_fd) *process_fd;
	__typeof__(ares_timeout) *timeout;
} ares;
static const struct sandlot_lazysym ares_syms[] = {
	{ "ares_library_init", (void **)&ares.library_init },
	{ "ares_strerror", (void **)&ares.strerror },
	{ "ares_init_options", (void **)&ares.init_options },
	{ "ares_set_servers_ports", (void **)&ares.set_servers_ports },
	{ "ares_destroy", (void **)&ares.destroy },
	{ "ares_freeaddrinfo", (void **)&ares.freeaddrinfo },
	{ "ares_getaddrinfo", (void **)&ares.getaddrinfo },
	{ "ares_process_fd", (void **)&ares.process_fd },
	{ "ares_timeout", (void **)&ares.timeout },
};
static struct sandlot_lazylib ares_lib =
	SANDLOT_LAZYLIB("libcares.so.2", "start the egress resolver", ares_syms);

#define CACHE_BUCKETS 1024
#define CACHE_MAX 4096
#define NEGATIVE_TTL_MS 5000
#define FAILURE_TTL_MS 2000

static ares_channel channel;
static struct sl_cname *buckets[CACHE_BUCKETS];
static size_t ncached;

/* c-ares's sockets, each with the event tag epoll hands back. */
static struct ares_sock {
	int fd;
	struct sl_ev ev;
	struct ares_sock *next;
} *socks;
static int ares_owner; /* any non-NULL owner for the tags */

static unsigned hash(const char *s)
{
	unsigned h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % CACHE_BUCKETS;
}

static void sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
	(void)data;
	struct ares_sock **pp = &socks, *s;
	for (s = socks; s; pp = &s->next, s = s->next)
		if (s->fd == fd)
			break;
	uint32_t ev = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
	if (!ev) {
		if (s) {
			engine_unwatch(fd);
			*pp = s->next;
			s->ev.owner = NULL;
			engine_defer_free(s, free);
		}
		return;
	}
	if (s) {
		engine_rewatch(fd, &s->ev, ev);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return; /* c-ares times the query out */
	s->fd = fd;
	s->ev.kind = SL_EV_ARES;
	s->ev.owner = &ares_owner;
	s->ev.fd = fd;
	s->next = socks;
	socks = s;
	engine_watch(fd, &s->ev, ev);
}

int resolve_init(sandlot_error_t **err)
{
	if (sandlot__lazylib_load(&ares_lib, err) < 0)
		return -1;
	int r = ares.library_init(ARES_LIB_INIT_ALL);
	if (r != ARES_SUCCESS)
		return sandlot__error(err, EIO, "initialise c-ares: %s", ares.strerror(r));
	struct ares_options o;
	memset(&o, 0, sizeof(o));
	o.flags = ARES_FLAG_NOSEARCH;
	o.timeout = 2000;
	o.tries = 2;
	o.ndomains = 0;
	o.domains = NULL;
	o.lookups = (char *)"b";
	o.sock_state_cb = sock_state;
	int mask = ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_DOMAINS |
		   ARES_OPT_LOOKUPS | ARES_OPT_SOCK_STATE_CB;
	r = ares.init_options(&channel, &o, mask);
	if (r != ARES_SUCCESS)
		return sandlot__error(err, EIO, "initialise the resolver: %s", ares.strerror(r));
	if (sl_cfg.nservers) {
		struct ares_addr_port_node nodes[8];
		for (int i = 0; i < sl_cfg.nservers; i++) {
			memset(&nodes[i], 0, sizeof(nodes[i]));
			nodes[i].next = i + 1 < sl_cfg.nservers ? &nodes[i + 1] : NULL;
			nodes[i].family = AF_INET;
			nodes[i].addr.addr4.s_addr = sl_cfg.servers[i];
			nodes[i].udp_port = nodes[i].tcp_port = sl_cfg.ports[i];
		}
		r = ares.set_servers_ports(channel, nodes);
		if (r != ARES_SUCCESS) {
			ares.destroy(channel);
			return sandlot__error(err, EIO, "set the resolvers: %s", ares.strerror(r));
		}
	}
	return 0;
}

static struct sl_cname *lookup_entry(const char *name)
{
	for (struct sl_cname *c = buckets[hash(name)]; c; c = c->next)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

/* Room for one more entry: forget expired ones, then any settled ones. */
static void evict(void)
{
	if (ncached < CACHE_MAX)
		return;
	uint64_t now = sl_now_ms();
	for (int pass = 0; pass < 2 && ncached >= CACHE_MAX * 3 / 4; pass++)
		for (unsigned b = 0; b < CACHE_BUCKETS; b++) {
			struct sl_cname **pp = &buckets[b];
			while (*pp) {
				struct sl_cname *c = *pp;
				if (!c->pending && (pass == 1 || c->expires_ms <= now)) {
					*pp = c->next;
					free(c);
					ncached--;
				} else {
					pp = &c->next;
				}
			}
		}
}

static void notify(struct sl_cname *c)
{
	/* Each waiter is unlinked before its callback runs, which may free the
	 * waiter's owner or start another lookup of the same name. */
	while (c->waiters) {
		struct sl_waiter *w = c->waiters;
		c->waiters = w->next;
		if (c->waiters)
			c->waiters->prev = NULL;
		w->on = NULL;
		w->prev = w->next = NULL;
		w->fn(w, c);
	}
}

static void on_answer(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	(void)timeouts;
	struct sl_cname *c = arg;
	uint64_t now = sl_now_ms();
	c->pending = 0;
	c->naddrs = 0;
	c->nxdomain = 0;
	c->ttl = SL_NET_DNS_TTL_MAX;
	if (status == ARES_SUCCESS && res) {
		for (struct ares_addrinfo_node *n = res->nodes; n; n = n->ai_next) {
			if (n->ai_family != AF_INET || c->naddrs == SL_DNS_MAX_ADDRS)
				continue;
			uint32_t a = ((struct sockaddr_in *)n->ai_addr)->sin_addr.s_addr;
			int dup = 0;
			for (int i = 0; i < c->naddrs; i++)
				dup |= c->addrs[i] == a;
			if (dup)
				continue;
			c->addrs[c->naddrs++] = a;
			if (n->ai_ttl >= 0 && (uint32_t)n->ai_ttl < c->ttl)
				c->ttl = (uint32_t)n->ai_ttl;
		}
		c->status = c->naddrs ? 0 : SL_R_NO_ADDRESS;
		c->expires_ms = now + (c->naddrs ? (uint64_t)c->ttl * 1000 : NEGATIVE_TTL_MS);
	} else if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
		/* ENOTFOUND: NXDOMAIN; ENODATA: the name exists, no A record. */
		c->status = SL_R_NO_ADDRESS;
		c->nxdomain = status == ARES_ENOTFOUND;
		c->expires_ms = now + NEGATIVE_TTL_MS;
	} else {
		/* Timeouts, SERVFAIL, refused, cancelled at shutdown. */
		c->status = SL_R_RESOLVE_FAILED;
		c->expires_ms = now + FAILURE_TTL_MS;
	}
	if (res)
		ares.freeaddrinfo(res);
	notify(c);
}

void resolve(const char *name, struct sl_waiter *w)
{
	struct sl_cname *c = lookup_entry(name);
	uint64_t now = sl_now_ms();
	if (c && !c->pending && c->expires_ms > now) {
		w->on = NULL;
		w->fn(w, c);
		return;
	}
	if (!c) {
		evict();
		c = calloc(1, sizeof(*c));
		if (!c) {
			static struct sl_cname oom = { .status = SL_R_RESOLVE_FAILED };
			w->on = NULL;
			w->fn(w, &oom);
			return;
		}
		snprintf(c->name, sizeof(c->name), "%s", name);
		unsigned b = hash(name);
		c->next = buckets[b];
		buckets[b] = c;
		ncached++;
	}
	w->on = c;
	w->prev = NULL;
	w->next = c->waiters;
	if (c->waiters)
		c->waiters->prev = w;
	c->waiters = w;
	if (c->pending)
		return;
	c->pending = 1;
	struct ares_addrinfo_hints hints = { .ai_family = AF_INET };
	/* May answer at once (on_answer runs before this returns). */
	ares.getaddrinfo(channel, c->name, NULL, &hints, on_answer, c);
}

void resolve_cancel(struct sl_waiter *w)
{
	struct sl_cname *c = w->on;
	if (!c)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		c->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->on = NULL;
	w->prev = w->next = NULL;
}

void resolve_process(int fd, uint32_t events)
{
	ares.process_fd(channel, (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? fd : ARES_SOCKET_BAD,
			(events & EPOLLOUT) ? fd : ARES_SOCKET_BAD);
}

int resolve_timeout_ms(void)
{
	struct timeval max = { 60, 0 }, tv;
	struct timeval *t = ares.timeout(channel, &max, &tv);
	if (!t || (t->tv_sec == 60 && t->tv_usec == 0))
		return -1;
	return (int)(t->tv_sec * 1000 + (t->tv_usec + 999) / 1000);
}

void resolve_tick(void)
{
	/* Lets c-ares act on expired timeouts (no socket is ready). */
	ares.process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}
