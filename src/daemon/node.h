/* sandlotd as one node of a fleet (issue 16; docs/fleet.md): the node id
 * in sandbox ids, the node's capacity (GET /v1/health and an HAProxy
 * agent-check port), refusing a create with 503 node_full before
 * anything is allocated, and on cgroup v2 its sandboxes' cgroups nested
 * below its own cgroup.  A daemon without --node-id is a fleet of one:
 * the same capacity report, single-node ids. */
#ifndef SANDLOT_DAEMON_NODE_H
#define SANDLOT_DAEMON_NODE_H

#include <jansson.h>
#include <stdint.h>

#include "sandlot.h"
#include "common/error.h"
#include "daemon/http.h"

struct daemon;

/* The node's full: 503 node_full (errmap.c), with Retry-After. */
#define DOMAIN_ENODEFULL EUSERS

struct node_config {
	const char *node_id;        /* --node-id / --node-id-file; NULL: single node */
	uint64_t memory_limit;      /* --node-memory: the sandboxes' memory limits add up to
	                             * at most this; 0 = not enforced */
	uint32_t cpus_limit_milli;  /* --node-cpus: their CPU quotas likewise; 0 = not enforced */
	const char *agent_listen;   /* --agent-port [HOST:]PORT; NULL: none */
	int cgroup_nest;            /* --cgroup-nest: on v2, sandboxes below our own cgroup */
};

/* The node id of --node-id-file FILE into buf: FILE's first line, or a new
 * random 5-character id written to FILE when it does not exist.  0, or -1
 * with a message in msg. */
int node_id_from_file(const char *path, char buf[16], char *msg, size_t n);

/* Apply the configuration before anything else of libsandlot runs: the
 * node id of new ids, and (v2) the cgroup nesting.  0, or -1 with a
 * message in msg. */
int node_configure(struct daemon *d, const struct node_config *cfg, char *msg, size_t n);

/* Whether the node has room for a sandbox with opts (and `live` running or
 * starting ones), called under d->lock before anything is allocated for a
 * create or a resume.  0 (and the request's memory and CPUs counted as
 * pending until node_settle), or -1 with DOMAIN_ENODEFULL — or EAGAIN (429
 * too_many_sandboxes) for --max-sandboxes on a single node, as before. */
int node_admit_locked(struct daemon *d, const sandlot_options_t *opts, unsigned live,
		      sandlot_error_t **err);
/* The same check for resuming paused sandbox s (its memory and CPUs from
 * its options), nothing counted as pending: it is in the table. */
struct dsb;
int node_resume_admit_locked(struct daemon *d, struct dsb *s, unsigned live, sandlot_error_t **err);
/* The admitted creation is over (made or failed): its share is in the
 * sandbox table now, or nowhere.  Takes d->lock. */
void node_settle(struct daemon *d, const sandlot_options_t *opts);
/* The same with d->lock held: where the new sandbox enters the table, so
 * that it is never counted twice. */
void node_settle_locked(struct daemon *d, const sandlot_options_t *opts);

/* The fields GET /v1/health adds: node_id, state, capacity. */
void node_health(struct daemon *d, json_t *o);

/* POST /v1/node/drain. */
extern const struct http_route node_routes[];

/* The agent-check port (--agent-port): start serving, stop.  node_start
 * fails with a message when the port cannot be bound. */
int node_start(struct daemon *d, sandlot_error_t **err);
void node_stop(struct daemon *d);

#endif
