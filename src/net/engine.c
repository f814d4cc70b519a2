/* The egress engine's thread, loop, commands, configuration, log and
 * counters (see engine.h). */
#include "net/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "linux/netns.h"

struct sl_engine_config sl_cfg;
struct sl_stats sl_stats;

static const char *const reason_names[SL_R_COUNT] = {
	[SL_R_ALLOWED] = "allowed",
	[SL_R_NOT_ALLOWED] = "not_allowed",
	[SL_R_DENIED] = "denied",
	[SL_R_NO_NAME] = "no_name",
	[SL_R_BAD_NAME] = "bad_name",
	[SL_R_IP_LITERAL] = "ip_literal",
	[SL_R_CLOSED_ADDRESS] = "closed_address",
	[SL_R_ADDRESS_MISMATCH] = "address_mismatch",
	[SL_R_MALFORMED] = "malformed",
	[SL_R_TOO_BIG] = "too_big",
	[SL_R_TIMEOUT] = "timeout",
	[SL_R_CONNECTION_LIMIT] = "connection_limit",
	[SL_R_RATE_LIMIT] = "rate_limit",
	[SL_R_RESOLVE_FAILED] = "resolve_failed",
	[SL_R_CONNECT_FAILED] = "connect_failed",
	[SL_R_POLICY_CHANGED] = "policy_changed",
	[SL_R_UNSUPPORTED_TYPE] = "unsupported_type",
	[SL_R_NO_ADDRESS] = "no_address",
};
static const char *const layer_names[] = { "dns", "tls", "http", "tcp" };

const char *sl_reason_name(enum sl_reason r)
{
	return (unsigned)r < SL_R_COUNT ? reason_names[r] : "unknown";
}

uint64_t sl_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

int64_t sl_wall_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- the engine ------------------------------------------------------------------ */

enum cmd_kind { CMD_ATTACH, CMD_DETACH, CMD_RECHECK };
struct cmd {
	enum cmd_kind kind;
	struct sl_net *net;
	struct sl_policy *policy;       /* RECHECK: the new policy */
	int done;
	struct cmd *next;
};

static struct {
	pthread_mutex_t lock;           /* started, cmds, configured */
	pthread_cond_t cond;            /* a command is done */
	int started, configured;
	pthread_t thread;
	int epfd, wakefd;
	struct sl_ev wake_ev;
	struct cmd *cmds, **cmds_tail;
	/* ---- engine thread ---- */
	struct sl_net *nets;
	struct sl_timer_node timers;    /* list head */
	struct deferred {
		void *p;
		void (*fn)(void *);
	} *deferred;
	size_t ndeferred, capdeferred;
	uint32_t local[64];             /* this host's addresses, network order */
	int nlocal;
	uint64_t local_ms;
} E = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.epfd = -1,
	.wakefd = -1,
};

int engine_watch(int fd, struct sl_ev *ev, uint32_t events)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };
	return epoll_ctl(E.epfd, EPOLL_CTL_ADD, fd, &e);
}

void engine_rewatch(int fd, struct sl_ev *ev, uint32_t events)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };
	epoll_ctl(E.epfd, EPOLL_CTL_MOD, fd, &e);
}

void engine_unwatch(int fd)
{
	epoll_ctl(E.epfd, EPOLL_CTL_DEL, fd, NULL);
}

void engine_timer_set(struct sl_timer_node *t, uint64_t deadline_ms)
{
	if (!t->deadline_ms) {
		t->next = E.timers.next;
		t->prev = &E.timers;
		if (E.timers.next)
			E.timers.next->prev = t;
		E.timers.next = t;
	}
	t->deadline_ms = deadline_ms ? deadline_ms : 1;
}

void engine_timer_clear(struct sl_timer_node *t)
{
	if (!t->deadline_ms)
		return;
	t->prev->next = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->prev = t->next = NULL;
	t->deadline_ms = 0;
}

void engine_defer_free(void *p, void (*fn)(void *))
{
	if (E.ndeferred == E.capdeferred) {
		size_t cap = E.capdeferred ? E.capdeferred * 2 : 64;
		struct deferred *n = realloc(E.deferred, cap * sizeof(*n));
		if (!n) {
			/* Without room to defer, leaking is safer than a use
			 * after free; this needs an allocation failure of a few
			 * bytes to happen at all. */
			return;
		}
		E.deferred = n;
		E.capdeferred = cap;
	}
	E.deferred[E.ndeferred].p = p;
	E.deferred[E.ndeferred].fn = fn;
	E.ndeferred++;
}

static void run_deferred(void)
{
	for (size_t i = 0; i < E.ndeferred; i++)
		E.deferred[i].fn(E.deferred[i].p);
	E.ndeferred = 0;
}

/* This host's own addresses, refreshed at most every 2 s: an address
 * added to the host is refused within that time. */
static void refresh_local(void)
{
	uint64_t now = sl_now_ms();
	if (E.local_ms && now - E.local_ms < 2000)
		return;
	E.local_ms = now;
	struct ifaddrs *ifa;
	if (getifaddrs(&ifa) < 0)
		return; /* keep the previous list */
	E.nlocal = 0;
	for (struct ifaddrs *i = ifa; i && E.nlocal < 64; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
			E.local[E.nlocal++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
	freeifaddrs(ifa);
}

int engine_addr_usable(const struct sl_policy *p, uint32_t addr)
{
	uint32_t h = ntohl(addr);
	int opened = 0;
	for (int i = 0; i < sl_cfg.nopen; i++)
		if ((h & sl_cfg.open_ranges[i].mask) == sl_cfg.open_ranges[i].net)
			opened = 1;
	if (!opened) {
		if (sl_addr_closed(h))
			return 0;
		refresh_local();
		for (int i = 0; i < E.nlocal; i++)
			if (E.local[i] == addr)
				return 0;
	}
	return !sl_policy_addr_denied(p, h);
}

/* ---- per-sandbox log, pins, policy -------------------------------------------------- */

struct sl_policy *net_policy(struct sl_net *n)
{
	pthread_mutex_lock(&n->lock);
	struct sl_policy *p = sl_policy_ref(n->policy);
	pthread_mutex_unlock(&n->lock);
	return p;
}

uint64_t net_log(struct sl_net *n, enum sl_layer layer, int allowed, enum sl_reason reason,
		 const char *name, uint32_t addr, uint16_t port, uint16_t qtype, uint32_t answers)
{
	char *nm = strdup(name ? name : "");
	pthread_mutex_lock(&n->lock);
	if (!n->log)
		n->log = calloc(SL_NET_LOG_SIZE, sizeof(*n->log));
	uint64_t seq = n->next_seq++;
	if (n->log) {
		struct sl_logent *e = &n->log[seq % SL_NET_LOG_SIZE];
		free(e->name);
		*e = (struct sl_logent){
			.seq = seq, .time_ms = sl_wall_ms(), .layer = (uint8_t)layer,
			.allowed = (uint8_t)!!allowed, .reason = (uint8_t)reason, .port = port,
			.qtype = qtype, .addr = addr, .answers = answers, .name = nm,
		};
		nm = NULL;
	}
	pthread_mutex_unlock(&n->lock);
	free(nm);
	return seq;
}

void net_log_bytes(struct sl_net *n, uint64_t seq, uint64_t out, uint64_t in)
{
	pthread_mutex_lock(&n->lock);
	if (n->log && n->log[seq % SL_NET_LOG_SIZE].seq == seq) {
		n->log[seq % SL_NET_LOG_SIZE].bytes_out += out;
		n->log[seq % SL_NET_LOG_SIZE].bytes_in += in;
	}
	pthread_mutex_unlock(&n->lock);
}

void stat_refused(int dns, enum sl_reason r)
{
	__atomic_add_fetch(dns ? &sl_stats.dns_refused : &sl_stats.tcp_refused, 1, __ATOMIC_RELAXED);
	if ((unsigned)r < SL_R_COUNT)
		__atomic_add_fetch(&sl_stats.refused[r], 1, __ATOMIC_RELAXED);
}

void net_pin(struct sl_net *n, const char *name, const uint32_t *addrs, int naddrs)
{
	uint64_t now = sl_now_ms(), until = now + SL_NET_PIN_GRACE_MS;
	for (int a = 0; a < naddrs; a++) {
		size_t i;
		for (i = 0; i < n->npins; i++)
			if (n->pins[i].addr == addrs[a] && strcmp(n->pins[i].name, name) == 0)
				break;
		if (i < n->npins) {
			n->pins[i].expires_ms = until;
			continue;
		}
		if (!n->pins) {
			n->pins = calloc(SL_NET_PINS_MAX, sizeof(*n->pins));
			if (!n->pins)
				return;
		}
		if (n->npins == SL_NET_PINS_MAX) {
			/* Full: forget the expired, else the oldest quarter. */
			size_t k = 0;
			for (size_t j = 0; j < n->npins; j++)
				if (n->pins[j].expires_ms > now)
					n->pins[k++] = n->pins[j];
			if (k == n->npins) {
				size_t drop = n->npins / 4;
				memmove(n->pins, n->pins + drop, (n->npins - drop) * sizeof(*n->pins));
				k = n->npins - drop;
			}
			n->npins = k;
		}
		struct sl_pin *p = &n->pins[n->npins++];
		snprintf(p->name, sizeof(p->name), "%s", name);
		p->addr = addrs[a];
		p->expires_ms = until;
	}
}

int net_pinned(struct sl_net *n, const char *name, uint32_t addr)
{
	uint64_t now = sl_now_ms();
	for (size_t i = 0; i < n->npins; i++)
		if (n->pins[i].addr == addr && n->pins[i].expires_ms > now &&
		    strcmp(n->pins[i].name, name) == 0)
			return 1;
	return 0;
}

/* ---- commands ------------------------------------------------------------------------ */

static void do_attach(struct sl_net *n)
{
	static const enum sl_ev_kind kinds[3] = { SL_EV_PROXY_LISTEN, SL_EV_DNS_UDP,
						   SL_EV_DNS_TCP_LISTEN };
	for (int i = 0; i < 3; i++) {
		n->ev[i].kind = kinds[i];
		n->ev[i].owner = n;
		engine_watch(n->fds[i], &n->ev[i], EPOLLIN);
	}
	n->next = E.nets;
	n->prev = NULL;
	if (E.nets)
		E.nets->prev = n;
	E.nets = n;
}

static void net_free(void *p)
{
	struct sl_net *n = p;
	for (size_t i = 0; n->log && i < SL_NET_LOG_SIZE; i++)
		free(n->log[i].name);
	free(n->log);
	free(n->pins);
	sl_policy_unref(n->policy);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

static void do_detach(struct sl_net *n)
{
	proxy_release(n);
	dns_release(n);
	for (int i = 0; i < 3; i++) {
		engine_unwatch(n->fds[i]);
		close(n->fds[i]);
		n->fds[i] = -1;
		n->ev[i].owner = NULL;
	}
	if (n->prev)
		n->prev->next = n->next;
	else
		E.nets = n->next;
	if (n->next)
		n->next->prev = n->prev;
	engine_defer_free(n, net_free);
}

static void run_commands(void)
{
	uint64_t v;
	if (read(E.wakefd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing new */
	}
	pthread_mutex_lock(&E.lock);
	struct cmd *c = E.cmds;
	E.cmds = NULL;
	E.cmds_tail = &E.cmds;
	pthread_mutex_unlock(&E.lock);
	while (c) {
		struct cmd *next = c->next;
		switch (c->kind) {
		case CMD_ATTACH:
			do_attach(c->net);
			break;
		case CMD_DETACH:
			do_detach(c->net);
			break;
		case CMD_RECHECK:
			proxy_recheck(c->net, c->policy);
			break;
		}
		pthread_mutex_lock(&E.lock);
		c->done = 1;
		pthread_cond_broadcast(&E.cond);
		pthread_mutex_unlock(&E.lock);
		c = next;
	}
}

/* Queue a command and wait until the engine thread has run it. */
static void engine_call(struct cmd *c)
{
	pthread_mutex_lock(&E.lock);
	c->next = NULL;
	c->done = 0;
	*E.cmds_tail = c;
	E.cmds_tail = &c->next;
	uint64_t one = 1;
	if (write(E.wakefd, &one, sizeof(one)) < 0) {
		/* the counter cannot overflow in practice; the loop wakes anyway */
	}
	while (!c->done)
		pthread_cond_wait(&E.cond, &E.lock);
	pthread_mutex_unlock(&E.lock);
}

/* ---- the loop ----------------------------------------------------------------------- */

static void fire_timers(void)
{
	uint64_t now = sl_now_ms();
	/* A fired timer may close its owner, which clears other timers: walk
	 * from the head again after each one. */
	for (;;) {
		struct sl_timer_node *t;
		for (t = E.timers.next; t; t = t->next)
			if (t->deadline_ms <= now)
				break;
		if (!t)
			return;
		engine_timer_clear(t);
		t->fire(t);
	}
}

static int next_timeout(void)
{
	uint64_t now = sl_now_ms(), best = UINT64_MAX;
	for (struct sl_timer_node *t = E.timers.next; t; t = t->next)
		if (t->deadline_ms < best)
			best = t->deadline_ms;
	int ms = best == UINT64_MAX ? -1 : best <= now ? 0 : (int)(best - now > 60000 ? 60000 : best - now);
	int a = resolve_timeout_ms();
	if (a >= 0 && (ms < 0 || a < ms))
		ms = a;
	return ms;
}

static void *engine_main(void *arg)
{
	(void)arg;
	struct epoll_event evs[128];
	for (;;) {
		int n = epoll_wait(E.epfd, evs, 128, next_timeout());
		if (n < 0 && errno != EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			struct sl_ev *ev = evs[i].data.ptr;
			uint32_t e = evs[i].events;
			if (!ev->owner && ev->kind != SL_EV_WAKE)
				continue; /* closed earlier in this batch */
			switch (ev->kind) {
			case SL_EV_WAKE:
				run_commands();
				break;
			case SL_EV_ARES:
				resolve_process(ev->fd, e);
				break;
			case SL_EV_PROXY_LISTEN:
				proxy_on_listen(ev->owner);
				break;
			case SL_EV_DNS_UDP:
				dns_on_udp(ev->owner);
				break;
			case SL_EV_DNS_TCP_LISTEN:
				dns_on_tcp_listen(ev->owner);
				break;
			case SL_EV_DNS_TCP:
				dns_on_tcp(ev->owner, e);
				break;
			case SL_EV_CONN_CLIENT:
				proxy_on_event(ev->owner, 0, e);
				break;
			case SL_EV_CONN_UP:
				proxy_on_event(ev->owner, 1, e);
				break;
			}
		}
		resolve_tick();
		fire_timers();
		run_deferred();
	}
	return NULL;
}

/* Every proxied connection holds six descriptors: take the soft limit up
 * to the hard one, as a daemon serving many would. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int env_config(sandlot_error_t **err);

/* Start the thread on first use (E.lock held). */
static int engine_start_locked(sandlot_error_t **err)
{
	if (E.started)
		return 0;
	if (!E.configured && env_config(err) < 0)
		return -1;
	E.epfd = epoll_create1(EPOLL_CLOEXEC);
	E.wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (E.epfd < 0 || E.wakefd < 0) {
		sandlot__error_errno(err, errno, "start the egress engine");
		goto fail;
	}
	E.cmds_tail = &E.cmds;
	E.wake_ev.kind = SL_EV_WAKE;
	if (engine_watch(E.wakefd, &E.wake_ev, EPOLLIN) < 0) {
		sandlot__error_errno(err, errno, "start the egress engine");
		goto fail;
	}
	if (resolve_init(err) < 0)
		goto fail;
	raise_nofile();
	/* The thread must start in the host's network namespace: this one,
	 * since callers leave a sandbox's before they get here. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = pthread_create(&E.thread, NULL, engine_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		sandlot__error_errno(err, r, "start the egress engine thread");
		goto fail;
	}
	pthread_detach(E.thread);
	E.started = 1;
	return 0;
fail:
	if (E.epfd >= 0)
		close(E.epfd);
	if (E.wakefd >= 0)
		close(E.wakefd);
	E.epfd = E.wakefd = -1;
	return -1;
}

/* ---- configuration ------------------------------------------------------------------- */

static int parse_servers(const char *csv, struct sl_engine_config *c, sandlot_error_t **err)
{
	c->nservers = 0;
	const char *p = csv;
	while (*p) {
		size_t n = strcspn(p, ",");
		char item[64];
		if (n == 0 || n >= sizeof(item))
			return sandlot__error(err, EINVAL, "invalid resolver list \"%.100s\": expected "
					      "ADDR[:PORT] entries separated by commas", csv);
		memcpy(item, p, n);
		item[n] = '\0';
		char *colon = strchr(item, ':');
		unsigned port = 53;
		if (colon) {
			*colon = '\0';
			char *end;
			unsigned long v = strtoul(colon + 1, &end, 10);
			if (!colon[1] || *end || v == 0 || v > 65535)
				return sandlot__error(err, EINVAL, "invalid resolver \"%.64s\": the port must "
						      "be 1 to 65535", p);
			port = (unsigned)v;
		}
		struct in_addr a;
		if (inet_pton(AF_INET, item, &a) != 1)
			return sandlot__error(err, EINVAL, "invalid resolver \"%.64s\": expected an IPv4 "
					      "address, optionally with :PORT", item);
		if (c->nservers == 8)
			return sandlot__error(err, EINVAL, "at most 8 resolvers");
		c->servers[c->nservers] = a.s_addr;
		c->ports[c->nservers] = (uint16_t)port;
		c->nservers++;
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int add_range(const char *s, struct sl_engine_config *c, sandlot_error_t **err)
{
	char msg[160];
	uint32_t net, mask;
	if (sl_cidr_parse(s, &net, &mask, msg, sizeof(msg)) < 0)
		return sandlot__error(err, EINVAL, "invalid egress range \"%.64s\": %s", s, msg);
	if (c->nopen == 64)
		return sandlot__error(err, EINVAL, "at most 64 egress ranges");
	c->open_ranges[c->nopen].net = net;
	c->open_ranges[c->nopen].mask = mask;
	c->nopen++;
	return 0;
}

static int configure(const sandlot_net_config_t *cfg, struct sl_engine_config *c,
		     sandlot_error_t **err)
{
	memset(c, 0, sizeof(*c));
	if (cfg->resolver && *cfg->resolver && parse_servers(cfg->resolver, c, err) < 0)
		return -1;
	for (size_t i = 0; cfg->allow_ranges && cfg->allow_ranges[i]; i++)
		if (add_range(cfg->allow_ranges[i], c, err) < 0)
			return -1;
	c->max_connections = cfg->max_connections ? cfg->max_connections : 256;
	c->dns_qps = cfg->dns_qps ? cfg->dns_qps : 100;
	return 0;
}

static int env_config(sandlot_error_t **err)
{
	sandlot_net_config_t cfg = { .size = sizeof(cfg) };
	cfg.resolver = getenv("SANDLOT_RESOLVER");
	const char *ranges = getenv("SANDLOT_EGRESS_ALLOW_RANGES");
	char *copy = ranges ? strdup(ranges) : NULL;
	const char *list[65];
	size_t n = 0;
	for (char *save = NULL, *t = copy ? strtok_r(copy, ",", &save) : NULL; t && n < 64;
	     t = strtok_r(NULL, ",", &save))
		list[n++] = t;
	list[n] = NULL;
	cfg.allow_ranges = list;
	int r = configure(&cfg, &sl_cfg, err);
	free(copy);
	if (r < 0)
		return sandlot__error_wrap(err, "SANDLOT_RESOLVER / SANDLOT_EGRESS_ALLOW_RANGES");
	E.configured = 1;
	return 0;
}

int sandlot__net_configure(const sandlot_net_config_t *cfg, sandlot_error_t **err)
{
	struct sl_engine_config c;
	if (configure(cfg, &c, err) < 0)
		return -1;
	pthread_mutex_lock(&E.lock);
	if (E.started) {
		pthread_mutex_unlock(&E.lock);
		return sandlot__error(err, EBUSY, "the egress engine is already running: configure it "
				      "before the first sandbox with a network");
	}
	sl_cfg = c;
	E.configured = 1;
	pthread_mutex_unlock(&E.lock);
	return 0;
}

/* ---- attach, policy, detach -------------------------------------------------------------- */

struct sl_net *sandlot__net_attach(const char *id, int fds[3], struct sl_policy *p,
				   sandlot_error_t **err)
{
	struct sl_net *n = calloc(1, sizeof(*n));
	pthread_mutex_lock(&E.lock);
	int r = n ? engine_start_locked(err) : sandlot__error(err, ENOMEM, "out of memory");
	pthread_mutex_unlock(&E.lock);
	if (r < 0) {
		free(n);
		for (int i = 0; i < 3; i++)
			close(fds[i]);
		sl_policy_unref(p);
		return NULL;
	}
	snprintf(n->id, sizeof(n->id), "%s", id);
	pthread_mutex_init(&n->lock, NULL);
	n->policy = p;
	n->next_seq = 1;
	memcpy(n->fds, fds, sizeof(n->fds));
	n->tokens = 2.0 * sl_cfg.dns_qps; /* a full burst to start with */
	n->tokens_ms = sl_now_ms();
	struct cmd c = { .kind = CMD_ATTACH, .net = n };
	engine_call(&c);
	return n;
}

void sandlot__net_set_policy(struct sl_net *n, struct sl_policy *p)
{
	pthread_mutex_lock(&n->lock);
	struct sl_policy *old = n->policy;
	n->policy = p;
	pthread_mutex_unlock(&n->lock);
	struct cmd c = { .kind = CMD_RECHECK, .net = n, .policy = p };
	engine_call(&c);
	sl_policy_unref(old);
}

void sandlot__net_detach(struct sl_net *n)
{
	if (!n)
		return;
	struct cmd c = { .kind = CMD_DETACH, .net = n };
	engine_call(&c);
}

int sandlot__net_log_read(struct sl_net *n, uint64_t after, sandlot_net_event_t **out,
			  size_t *count, uint64_t *dropped, sandlot_error_t **err)
{
	*out = NULL;
	*count = 0;
	if (dropped)
		*dropped = 0;
	if (!n)
		return 0;
	pthread_mutex_lock(&n->lock);
	uint64_t last = n->next_seq - 1;
	uint64_t oldest = last >= SL_NET_LOG_SIZE ? last - SL_NET_LOG_SIZE + 1 : 1;
	uint64_t from = after + 1 > oldest ? after + 1 : oldest;
	if (dropped && oldest > after + 1)
		*dropped = oldest - after - 1;
	size_t k = from <= last ? (size_t)(last - from + 1) : 0;
	sandlot_net_event_t *v = k ? calloc(k, sizeof(*v)) : NULL;
	if (k && !v) {
		pthread_mutex_unlock(&n->lock);
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < k && n->log; i++) {
		const struct sl_logent *e = &n->log[(from + i) % SL_NET_LOG_SIZE];
		sandlot_net_event_t *o = &v[i];
		o->seq = e->seq;
		o->time_ms = e->time_ms;
		o->layer = layer_names[e->layer < 4 ? e->layer : 3];
		o->verdict = e->allowed ? "allowed" : "refused";
		o->reason = sl_reason_name(e->reason);
		snprintf(o->name, sizeof(o->name), "%s", e->name ? e->name : "");
		if (e->addr) {
			struct in_addr a = { e->addr };
			inet_ntop(AF_INET, &a, o->addr, sizeof(o->addr));
		}
		o->port = e->port;
		o->qtype = e->qtype;
		o->answers = e->answers;
		o->bytes_out = e->bytes_out;
		o->bytes_in = e->bytes_in;
	}
	pthread_mutex_unlock(&n->lock);
	*out = v;
	*count = k;
	return 0;
}
