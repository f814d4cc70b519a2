/* sandlot-gateway: the stateless front door of a fleet (docs/fleet.md).
 *
 * It knows the nodes (sandlotd daemons) from its options, a file or DNS,
 * polls each one's GET /v1/health, and does four things no proxy can:
 * best-of-K placement of creates (place.c), the fleet-wide lists and
 * /v1/nodes (routes.c), and keeping HAProxy's routing maps current
 * (haproxy.c).  Every later call for a sandbox goes from HAProxy straight to
 * the node named in its id, never through the gateway.
 *
 * State: only what the polls rebuild (the node table, the moved map) and
 * the creates in flight.  A restarted gateway rebuilds everything from the
 * nodes within one poll.
 *
 * Threads: libmicrohttpd's, one per client connection (each handler may
 * wait on a node for as long as a create takes); one poller thread.
 * g.lock guards the node table and the moved map; no call to a node is
 * made with it held.
 */
#ifndef SANDLOT_GATEWAY_H
#define SANDLOT_GATEWAY_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sbid.h"

#define GW_MAX_NODES 256

enum node_state { NODE_NEW, NODE_READY, NODE_FULL, NODE_DRAINING, NODE_UNREACHABLE };

struct node {
	char *url;                  /* "http://198.18.0.11:7070", from the configuration */
	char addr[64];              /* "198.18.0.11:7070": its nodes.map value */
	char id[SANDLOT_NODE_ID_MAX + 1]; /* its node_id ("" until it answered once) */
	enum node_state state;
	double free;                /* 0..1: its own report of free capacity */
	long sandboxes, max_sandboxes;
	int inflight;               /* creates this gateway has sent it, unanswered */
	int fails;                  /* failed polls in a row */
	uint64_t last_seen_ms;      /* last good poll (0: never) */
	uint64_t down_since_ms;     /* when it became unreachable (0: it is not) */
	json_t *health;             /* its last /v1/health answer */
	int seen;                   /* still in the configuration (poll bookkeeping) */
};

struct gw_config {
	const char *listen_host;
	unsigned listen_port;
	char *token;                /* the fleet's bearer token (nodes and gateway) */
	const char **node_urls;     /* --node, repeatable */
	size_t nnode_urls;
	const char *nodes_file;     /* --nodes-file: one URL a line, re-read at each poll */
	const char *nodes_dns;      /* --nodes-dns HOST:PORT: every A record is a node */
	unsigned poll_ms;           /* --poll-interval */
	unsigned node_timeout_ms;   /* --node-timeout: a poll or a fan-out call */
	unsigned create_timeout_ms; /* --create-timeout: a create on one node */
	unsigned down_after;        /* --down-after: failed polls before "unreachable" */
	unsigned k;                 /* --choices: nodes sampled per create */
	unsigned attempts;          /* --create-attempts: nodes tried per create */
	unsigned moved_every;       /* rebuild moved.map every N polls */
	unsigned forget_after_s;    /* --forget-after: an unlisted node is dropped (0: never) */
	const char *haproxy_socket; /* --haproxy-socket */
	const char *map_dir;        /* --map-dir: nodes.map, down.map, moved.map */
};

struct gw {
	struct gw_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t polled;      /* broadcast after each poll */
	uint64_t polls;             /* completed polls */
	struct node *nodes[GW_MAX_NODES];
	size_t n;
	json_t *moved;              /* {sandbox id: node id} */
	int stopping;
	uint64_t started_ms;
	char *auth_header;          /* "Authorization: Bearer TOKEN" */
};

extern struct gw g;

/* ---- nodes.c ---- */
/* The poller thread: polls forever until g.stopping. */
void *gw_poller(void *arg);
/* The nodes named in the map dir's nodes.map, as unreachable (start-up). */
void gw_nodes_seed(void);
/* Poll every node once now (the first poll at start-up). */
void gw_poll_once(void);
const char *gw_state_name(enum node_state s);
/* A node's JSON for /v1/nodes.  Caller holds g.lock. */
json_t *gw_node_json(const struct node *nd);
/* The node whose node_id is id, or NULL.  Caller holds g.lock. */
struct node *gw_node_by_id(const char *id);

/* ---- call.c: one HTTP call to a node (libcurl) ---- */
struct gw_answer {
	long status;               /* 0: no answer (conn failed, timed out) */
	char *body;
	size_t len;
	char content_type[128];
	char retry_after[32];
	char curl_error[256];
	char *headers[16];         /* the end-to-end headers of the answer, "Name: value" */
	size_t nheaders;
};
/* Call url with method, the headers (NULL-ended "Name: value" strings) and
 * body.  Returns 0 with a->status set, or -1 with a->status 0 and
 * a->curl_error saying why.  Free with gw_answer_free(). */
int gw_call(const char *method, const char *url, const char *const *headers, const char *body,
	    size_t body_len, unsigned timeout_ms, struct gw_answer *a);
void gw_answer_free(struct gw_answer *a);
/* At exit, after the last call: the shared connection cache. */
void gw_call_cleanup(void);
/* "Authorization: Bearer TOKEN" for the gateway's own calls (static). */
const char *gw_auth_header(void);

/* ---- haproxy.c ---- */
/* Bring the three maps (files and, with --haproxy-socket, HAProxy's
 * memory) to the node table and the moved map.  Returns 0, or -1 after
 * logging what failed (the next poll tries again). */
int gw_maps_sync(void);

/* ---- place.c ---- */
/* Choose a node for a create, skipping those in `tried` (ntried).  Takes
 * g.lock.  Returns the node with its inflight count raised (the caller
 * lowers it with gw_place_done), or NULL when no node can take one. */
struct node *gw_place(struct node *const *tried, size_t ntried);
void gw_place_done(struct node *nd);

/* ---- ids (nodes.c) ---- */
/* The node in a sandbox id ("sb-NODE-…", common/sbid.h) or an MCP
 * session id ("mcp-NODE-" and 26 random characters).  Returns 1 and the node, 0 for
 * a valid id without a node (node ""), -1 for anything else. */
int gw_id_node(const char *id, char node[SANDLOT_NODE_ID_MAX + 1]);

/* ---- log ---- */
void gw_log(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t gw_now_ms(void);

#endif
