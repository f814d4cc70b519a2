/* The egress engine: one event-loop thread per process that serves the
 * DNS and TCP listeners sandlot holds inside every sandbox's network
 * namespace (src/linux/netns.c puts them there), and connects out from the
 * host's namespace on the sandbox's behalf (docs/network.md).
 *
 *   engine.c   the thread, its epoll loop and command queue, timers,
 *              configuration, the per-sandbox attachment, log and counters
 *   resolve.c  upstream resolution (c-ares) and the shared answer cache
 *   dns.c      the DNS listeners: answer queries by policy
 *   proxy.c    the TCP listener: name the connection (SNI, Host), choose
 *              the address, connect, splice
 *
 * Threading.  Everything below the "engine thread" line is touched only by
 * the engine thread.  Other threads talk to it through commands
 * (engine_call: queued, then waited for), and read a sandbox's log and
 * policy under net->lock.  The engine thread never leaves the host's network
 * namespace, so every socket it creates (upstream connections, c-ares's)
 * is a host socket.
 *
 * Object lifetime inside the loop.  A connection closed while its events
 * are still in the current epoll batch is not freed at once: it is marked
 * dead and freed after the batch (engine_defer_free).
 */
#ifndef SANDLOT_NET_ENGINE_H
#define SANDLOT_NET_ENGINE_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>

#include "sandlot.h"
#include "common/error.h"
#include "net/policy.h"
#include "net/wire.h"

#define SL_NET_LOG_SIZE 1024
#define SL_NET_PINS_MAX 512
#define SL_NET_DNS_PENDING_MAX 256
#define SL_NET_DNS_TCP_MAX 16
#define SL_NET_HELLO_DEADLINE_MS 5000
#define SL_NET_CONNECT_DEADLINE_MS 10000
#define SL_NET_DNS_TCP_IDLE_MS 10000
#define SL_NET_PIN_GRACE_MS (15 * 60 * 1000)
#define SL_NET_DNS_TTL_MAX 60

enum sl_layer { SL_LAYER_DNS, SL_LAYER_TLS, SL_LAYER_HTTP, SL_LAYER_TCP };

enum sl_reason {
	SL_R_ALLOWED,
	SL_R_NOT_ALLOWED,
	SL_R_DENIED,
	SL_R_NO_NAME,
	SL_R_BAD_NAME,
	SL_R_IP_LITERAL,
	SL_R_CLOSED_ADDRESS,
	SL_R_ADDRESS_MISMATCH,
	SL_R_MALFORMED,
	SL_R_TOO_BIG,
	SL_R_TIMEOUT,
	SL_R_CONNECTION_LIMIT,
	SL_R_RATE_LIMIT,
	SL_R_RESOLVE_FAILED,
	SL_R_CONNECT_FAILED,
	SL_R_POLICY_CHANGED,
	SL_R_UNSUPPORTED_TYPE,
	SL_R_NO_ADDRESS,
	SL_R_COUNT
};

/* What an epoll event points at. */
enum sl_ev_kind {
	SL_EV_WAKE,
	SL_EV_ARES,
	SL_EV_PROXY_LISTEN,
	SL_EV_DNS_UDP,
	SL_EV_DNS_TCP_LISTEN,
	SL_EV_DNS_TCP,
	SL_EV_CONN_CLIENT,
	SL_EV_CONN_UP,
};
struct sl_ev {
	enum sl_ev_kind kind;
	void *owner;                    /* NULL once closed: later events are skipped */
	int fd;                         /* SL_EV_ARES: c-ares's socket */
};

/* A deadline on the engine's timer list. */
struct sl_timer_node {
	uint64_t deadline_ms;    /* monotonic; 0 = not on the list */
	void (*fire)(struct sl_timer_node *t);
	struct sl_timer_node *prev, *next;
};

/* A wait for a name's addresses (resolve.c).  fn runs on the engine thread
 * once the answer is in the cache (or failed). */
struct sl_cname;
struct sl_waiter {
	void (*fn)(struct sl_waiter *w, const struct sl_cname *answer);
	struct sl_cname *on;            /* the entry waited for, while pending */
	struct sl_waiter *prev, *next;
};

/* A cached answer. */
struct sl_cname {
	char name[SL_NAME_MAX + 1];
	int status;                     /* 0, or SL_R_RESOLVE_FAILED / SL_R_NO_ADDRESS */
	int nxdomain;
	uint32_t addrs[SL_DNS_MAX_ADDRS]; /* network byte order */
	int naddrs;
	uint32_t ttl;
	uint64_t expires_ms;
	int pending;
	struct sl_waiter *waiters;
	struct sl_cname *next;          /* hash chain */
};

/* One logged event, compact (the API's sandlot_net_event_t is built on
 * read). */
struct sl_logent {
	uint64_t seq;
	int64_t time_ms;
	uint8_t layer, allowed, reason;
	uint16_t port, qtype;
	uint32_t addr;                  /* network byte order */
	uint32_t answers;
	uint64_t bytes_out, bytes_in;
	char *name;
};

struct sl_pin {
	char name[SL_NAME_MAX + 1];
	uint32_t addr;                  /* network byte order */
	uint64_t expires_ms;
};

struct sl_conn;
struct sl_dnsq;
struct sl_dns_tcp;

/* One sandbox's attachment. */
struct sl_net {
	char id[32];
	pthread_mutex_t lock;           /* policy, log */
	struct sl_policy *policy;
	struct sl_logent *log;          /* ring of SL_NET_LOG_SIZE, allocated on first use */
	uint64_t next_seq;              /* seq of the next entry, from 1 */
	/* ---- engine thread ---- */
	int fds[3];                     /* SANDLOT_NETNS_FD_* listeners */
	struct sl_ev ev[3];
	struct sl_conn *conns;
	unsigned nconns;
	size_t pipe_bytes;              /* big pipes of its connections (proxy.c) */
	struct sl_dnsq *dnsqs;
	unsigned ndnsqs;
	struct sl_dns_tcp *dns_tcps;
	unsigned ndns_tcps;
	struct sl_pin *pins;
	size_t npins;
	double tokens;                  /* DNS rate limit */
	uint64_t tokens_ms;
	uint64_t rate_logged_ms;
	struct sl_net *prev, *next;
};

/* ---- engine.c ------------------------------------------------------------- */

struct sl_engine_config {
	uint32_t servers[8];            /* upstream resolvers, network order */
	uint16_t ports[8];              /* host order */
	int nservers;                   /* 0: /etc/resolv.conf */
	struct { uint32_t net, mask; } open_ranges[64];
	int nopen;
	uint32_t max_connections, dns_qps;
};
extern struct sl_engine_config sl_cfg;

/* Monotonic and wall-clock milliseconds. */
uint64_t sl_now_ms(void);
int64_t sl_wall_ms(void);

/* Register fd for events (EPOLLIN etc.), change, remove. */
int engine_watch(int fd, struct sl_ev *ev, uint32_t events);
void engine_rewatch(int fd, struct sl_ev *ev, uint32_t events);
void engine_unwatch(int fd);

void engine_timer_set(struct sl_timer_node *t, uint64_t deadline_ms);
void engine_timer_clear(struct sl_timer_node *t);

/* Free p with fn after the current batch of events. */
void engine_defer_free(void *p, void (*fn)(void *));

/* Whether the engine may connect to addr (network order): not in a closed
 * range unless the operator opened it, not one of this host's addresses,
 * not denied by the policy. */
int engine_addr_usable(const struct sl_policy *p, uint32_t addr);

/* The sandbox's current policy (a new reference). */
struct sl_policy *net_policy(struct sl_net *n);

/* Append to the sandbox's log; returns the entry's seq. */
uint64_t net_log(struct sl_net *n, enum sl_layer layer, int allowed, enum sl_reason reason,
		 const char *name, uint32_t addr, uint16_t port, uint16_t qtype, uint32_t answers);
/* Add byte counts to entry seq if the ring still holds it. */
void net_log_bytes(struct sl_net *n, uint64_t seq, uint64_t out, uint64_t in);

/* Counters (atomic). */
struct sl_stats {
	uint64_t dns_allowed, dns_refused, tcp_allowed, tcp_refused;
	uint64_t bytes_out, bytes_in, open;
	uint64_t refused[SL_R_COUNT];
};
extern struct sl_stats sl_stats;
void stat_refused(int dns, enum sl_reason r);

/* Pins: addresses this sandbox's own DNS answers gave for a name. */
void net_pin(struct sl_net *n, const char *name, const uint32_t *addrs, int naddrs);
int net_pinned(struct sl_net *n, const char *name, uint32_t addr);

/* ---- resolve.c -------------------------------------------------------------- */

int resolve_init(sandlot_error_t **err);
/* Ask for name's IPv4 addresses: w->fn runs now (cached) or later.  Never
 * fails: a failure is an answer with status set. */
void resolve(const char *name, struct sl_waiter *w);
/* Stop waiting (the waiter's owner is going away). */
void resolve_cancel(struct sl_waiter *w);
/* Let c-ares handle its sockets and timeouts. */
void resolve_process(int fd, uint32_t events);
/* Milliseconds until c-ares wants to be called, or -1. */
int resolve_timeout_ms(void);
void resolve_tick(void);

/* ---- dns.c ---------------------------------------------------------------------- */

void dns_on_udp(struct sl_net *n);
void dns_on_tcp_listen(struct sl_net *n);
void dns_on_tcp(struct sl_dns_tcp *c, uint32_t events);
/* Drop everything pending for n (it is being detached). */
void dns_release(struct sl_net *n);

/* ---- proxy.c -------------------------------------------------------------------- */

void proxy_on_listen(struct sl_net *n);
void proxy_on_event(struct sl_conn *c, int up, uint32_t events);
/* Close the connections p no longer allows (policy changed). */
void proxy_recheck(struct sl_net *n, const struct sl_policy *p);
void proxy_release(struct sl_net *n);

/* ---- for libsandlot (src/core/network.c) ------------------------------------------- */

/* Apply process-wide settings; EBUSY once the engine runs. */
int sandlot__net_configure(const sandlot_net_config_t *cfg, sandlot_error_t **err);
/* Start serving a sandbox: takes the listeners (SANDLOT_NETNS_FD_*, closed
 * on failure too) and a reference to p. */
struct sl_net *sandlot__net_attach(const char *id, int fds[3], struct sl_policy *p,
				   sandlot_error_t **err);
/* Swap in p (takes the reference) and close what it no longer allows;
 * returns once that is done. */
void sandlot__net_set_policy(struct sl_net *n, struct sl_policy *p);
/* Close everything of n and free it. */
void sandlot__net_detach(struct sl_net *n);
int sandlot__net_log_read(struct sl_net *n, uint64_t after, sandlot_net_event_t **out,
			  size_t *count, uint64_t *dropped, sandlot_error_t **err);
const char *sl_reason_name(enum sl_reason r);

#endif
