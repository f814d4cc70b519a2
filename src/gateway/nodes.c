/* The node table: discovery and health polls (gateway.h).
 *
 * Each poll: (1) the configured URLs (--node, --nodes-file re-read, the A
 * records of --nodes-dns) become the table, nodes no longer listed leave
 * it; (2) every node's GET /v1/health is asked at once, one thread each,
 * bounded by --node-timeout; (3) the answers update the nodes; a node that
 * failed --down-after polls in a row is unreachable; (4) every
 * --moved-every polls the moved map is rebuilt from the nodes' lists; (5)
 * HAProxy's maps are brought up to date.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "gateway/gateway.h"

const char *gw_state_name(enum node_state s)
{
	switch (s) {
	case NODE_NEW: return "unknown";
	case NODE_READY: return "ready";
	case NODE_FULL: return "full";
	case NODE_DRAINING: return "draining";
	case NODE_UNREACHABLE: return "unreachable";
	}
	return "unknown";
}

static int b32_run(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '2' && s[i] <= '7')))
			return 0;
	return 1;
}

int gw_id_node(const char *id, char node[SANDLOT_NODE_ID_MAX + 1])
{
	node[0] = '\0';
	size_t len = strlen(id);
	if (!strncmp(id, "mcp-", 4)) {
		/* "mcp-" [NODE "-"] and 26 random characters (mcp_http.c). */
		const char *rest = id + 4, *dash = strchr(rest, '-');
		size_t nl = dash ? (size_t)(dash - rest) : 0;
		const char *rnd = dash ? dash + 1 : rest;
		if ((dash && !sandlot__node_id_ok(rest, nl)) || strlen(rnd) != 26 || !b32_run(rnd, 26))
			return -1;
		memcpy(node, rest, nl);
		node[nl] = '\0';
		return nl ? 1 : 0;
	}
	if (!sandlot__sbid_parse(id, len, node))
		return -1;
	return node[0] ? 1 : 0;
}

struct node *gw_node_by_id(const char *id)
{
	for (size_t i = 0; i < g.n; i++)
		if (g.nodes[i]->id[0] && !strcmp(g.nodes[i]->id, id))
			return g.nodes[i];
	return NULL;
}

json_t *gw_node_json(const struct node *nd)
{
	json_t *o = json_object();
	json_object_set_new(o, "node_id", nd->id[0] ? json_string(nd->id) : json_null());
	json_object_set_new(o, "url", json_string(nd->url));
	json_object_set_new(o, "state", json_string(gw_state_name(nd->state)));
	json_object_set_new(o, "free", json_real(nd->free));
	json_object_set_new(o, "inflight_creates", json_integer(nd->inflight));
	json_object_set_new(o, "last_seen", nd->last_seen_ms ? json_integer((json_int_t)(nd->last_seen_ms / 1000))
							  : json_null());
	json_object_set_new(o, "unreachable_since",
			    nd->down_since_ms ? json_integer((json_int_t)(nd->down_since_ms / 1000)) : json_null());
	json_object_set_new(o, "health", nd->health ? json_incref(nd->health) : json_null());
	return o;
}

/* ---- discovery ---------------------------------------------------------------- */

/* "http://HOST:PORT[/]" -> addr "HOST:PORT".  Only numeric IPv4 hosts can
 * be HAProxy's set-dst targets; others are refused with a log line. */
static int url_addr(const char *url, char *addr, size_t cap)
{
	const char *p = strncmp(url, "http://", 7) ? NULL : url + 7;
	if (!p)
		return -1;
	size_t len = strcspn(p, "/");
	if (len == 0 || len >= cap)
		return -1;
	memcpy(addr, p, len);
	addr[len] = '\0';
	char *colon = strrchr(addr, ':');
	if (!colon)
		return -1;
	const char *port = colon + 1;
	if (!*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port))
		return -1;
	*colon = '\0';
	struct in_addr ia;
	int ok = inet_pton(AF_INET, addr, &ia) == 1;
	*colon = ':';
	return ok ? 0 : -1;
}

static void want(char ***urls, size_t *n, const char *url)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*urls)[i], url))
			return;
	char **nu = realloc(*urls, (*n + 1) * sizeof **urls);
	if (!nu)
		return;
	*urls = nu;
	(*urls)[(*n)++] = strdup(url);
}

static void discover(char ***urls, size_t *n)
{
	for (size_t i = 0; i < g.cfg.nnode_urls; i++)
		want(urls, n, g.cfg.node_urls[i]);
	if (g.cfg.nodes_file) {
		FILE *f = fopen(g.cfg.nodes_file, "re");
		if (!f) {
			gw_log("discovery_failed", "file=%s error=\"%s\"", g.cfg.nodes_file, strerror(errno));
		} else {
			char line[512];
			while (fgets(line, sizeof line, f)) {
				line[strcspn(line, "\r\n#")] = '\0';
				char *s = line;
				while (*s == ' ' || *s == '\t')
					s++;
				size_t l = strlen(s);
				while (l && (s[l - 1] == ' ' || s[l - 1] == '\t'))
					s[--l] = '\0';
				if (*s)
					want(urls, n, s);
			}
			fclose(f);
		}
	}
	if (g.cfg.nodes_dns) {
		char host[256];
		snprintf(host, sizeof host, "%s", g.cfg.nodes_dns);
		char *colon = strrchr(host, ':');
		const char *port = colon ? colon + 1 : "7070";
		if (colon)
			*colon = '\0';
		struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
		int rc = getaddrinfo(host, port, &hints, &res);
		if (rc) {
			gw_log("discovery_failed", "dns=%s error=\"%s\"", g.cfg.nodes_dns, gai_strerror(rc));
		} else {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				char ip[INET_ADDRSTRLEN], url[320];
				struct sockaddr_in *sin = (struct sockaddr_in *)ai->ai_addr;
				inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
				snprintf(url, sizeof url, "http://%s:%s", ip, port);
				want(urls, n, url);
			}
			freeaddrinfo(res);
		}
	}
}

static void node_free(struct node *nd)
{
	json_decref(nd->health);
	free(nd->url);
	free(nd);
}

/* Make the table match urls.  Caller holds g.lock.
 *
 * A node that leaves the configuration after it was identified is not
 * forgotten: discovery also drops nodes that are only unwell (a headless
 * Service lists Ready pods only), and its sandboxes must get 503
 * node_unavailable, never 404.  It stays, unreachable and no longer
 * polled, until it is listed again (its new address, if any, takes over
 * the node id: apply_health) or --forget-after has passed. */
static void sync_table(char **urls, size_t n)
{
	uint64_t now = gw_now_ms();
	for (size_t i = 0; i < g.n; i++)
		g.nodes[i]->seen = 0;
	for (size_t u = 0; u < n; u++) {
		struct node *nd = NULL;
		for (size_t i = 0; i < g.n; i++)
			if (!strcmp(g.nodes[i]->url, urls[u]))
				nd = g.nodes[i];
		if (!nd) {
			char addr[64];
			if (url_addr(urls[u], addr, sizeof addr) < 0) {
				gw_log("node_refused", "url=%s reason=\"not http://IPV4:PORT\"", urls[u]);
				continue;
			}
			if (g.n == GW_MAX_NODES) {
				gw_log("node_refused", "url=%s reason=\"more than %d nodes\"", urls[u], GW_MAX_NODES);
				continue;
			}
			nd = calloc(1, sizeof *nd);
			if (!nd)
				continue;
			nd->url = strdup(urls[u]);
			snprintf(nd->addr, sizeof nd->addr, "%s", addr);
			g.nodes[g.n++] = nd;
			gw_log("node_added", "url=%s", nd->url);
		}
		nd->seen = 1;
	}
	for (size_t i = 0; i < g.n;) {
		struct node *nd = g.nodes[i];
		if (nd->seen || nd->inflight) {
			i++;
			continue;
		}
		if (nd->id[0]) {
			if (nd->state != NODE_UNREACHABLE) {
				nd->state = NODE_UNREACHABLE;
				nd->down_since_ms = now;
				gw_log("node_unlisted", "node=%s url=%s reason=\"no longer discovered: unreachable "
				       "until it is listed again\"", nd->id, nd->url);
			}
			if (!g.cfg.forget_after_s || now - nd->down_since_ms < (uint64_t)g.cfg.forget_after_s * 1000) {
				i++;
				continue;
			}
		}
		gw_log("node_removed", "url=%s node=%s", nd->url, nd->id);
		node_free(nd);
		g.nodes[i] = g.nodes[--g.n];
	}
}

/* The nodes of a previous run, from the nodes.map it left (docs/fleet.md):
 * known, unreachable until discovery lists them again, so that a gateway
 * restarted while a node is away still answers 503 for its sandboxes. */
void gw_nodes_seed(void)
{
	if (!g.cfg.map_dir)
		return;
	char path[4200];
	if (snprintf(path, sizeof path, "%s/nodes.map", g.cfg.map_dir) >= (int)sizeof path)
		return;
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[256];
	uint64_t now = gw_now_ms();
	pthread_mutex_lock(&g.lock);
	while (fgets(line, sizeof line, f) && g.n < GW_MAX_NODES) {
		char id[64], addr[64], url[80];
		if (line[0] == '#' || sscanf(line, "%63s %63s", id, addr) != 2)
			continue;
		snprintf(url, sizeof url, "http://%s", addr);
		char check[64];
		if (!sandlot__node_id_ok(id, strlen(id)) || gw_node_by_id(id) || url_addr(url, check, sizeof check) < 0)
			continue;
		struct node *nd = calloc(1, sizeof *nd);
		if (!nd)
			break;
		nd->url = strdup(url);
		snprintf(nd->addr, sizeof nd->addr, "%s", addr);
		snprintf(nd->id, sizeof nd->id, "%s", id);
		nd->state = NODE_UNREACHABLE;
		nd->down_since_ms = now;
		g.nodes[g.n++] = nd;
	}
	pthread_mutex_unlock(&g.lock);
	fclose(f);
}

/* ---- polls -------------------------------------------------------------------- */

struct probe {
	char *url;                 /* copied: the node may leave the table meanwhile */
	struct gw_answer a;
	json_t *health;
	pthread_t t;
	int started;
};

static void *probe_run(void *arg)
{
	struct probe *p = arg;
	char url[600];
	snprintf(url, sizeof url, "%s/v1/health", p->url);
	const char *hdrs[] = { gw_auth_header(), NULL };
	if (gw_call("GET", url, hdrs, NULL, 0, g.cfg.node_timeout_ms, &p->a) == 0 && p->a.status == 200)
		p->health = json_loadb(p->a.body, p->a.len, 0, NULL);
	return NULL;
}

static double number(json_t *o, const char *key, double dflt)
{
	json_t *v = o ? json_object_get(o, key) : NULL;
	return json_is_number(v) ? json_number_value(v) : dflt;
}

/* Apply a health answer.  Caller holds g.lock. */
static void apply_health(struct node *nd, json_t *h, uint64_t now)
{
	const char *id = json_string_value(json_object_get(h, "node_id"));
	if (!id || !sandlot__node_id_ok(id, strlen(id))) {
		gw_log("node_unusable", "url=%s reason=\"its /v1/health names no valid node_id (start it with --node-id)\"",
		       nd->url);
		nd->fails++;
		return;
	}
	struct node *other = gw_node_by_id(id);
	if (other && other != nd && !other->seen && !other->inflight) {
		/* The node at a new address (a new pod): the old entry goes. */
		gw_log("node_moved", "node=%s from=%s to=%s", id, other->url, nd->url);
		for (size_t i = 0; i < g.n; i++)
			if (g.nodes[i] == other)
				g.nodes[i] = g.nodes[--g.n];
		node_free(other);
		other = NULL;
	}
	if (other && other != nd && other->state != NODE_UNREACHABLE) {
		gw_log("node_conflict", "url=%s other=%s node=%s reason=\"two nodes with one node_id\"", nd->url,
		       other->url, id);
		nd->fails++;
		return;
	}
	if (strcmp(nd->id, id)) {
		snprintf(nd->id, sizeof nd->id, "%s", id);
		gw_log("node_identified", "url=%s node=%s", nd->url, id);
	}
	json_t *cap = json_object_get(h, "capacity");
	const char *state = json_string_value(json_object_get(h, "state"));
	if (!state && cap)
		state = json_string_value(json_object_get(cap, "state"));
	const char *status = json_string_value(json_object_get(h, "status"));
	nd->sandboxes = (long)number(cap, "sandboxes", number(h, "sandboxes", 0));
	nd->max_sandboxes = (long)number(cap, "max_sandboxes", number(h, "max_sandboxes", 0));
	double score = number(cap, "score", number(h, "score", -1));
	if (score >= 0)
		nd->free = score / 100.0;
	else if (nd->max_sandboxes > 0)
		nd->free = 1.0 - (double)nd->sandboxes / (double)nd->max_sandboxes;
	else
		nd->free = 1.0;
	if (nd->free < 0)
		nd->free = 0;
	if (nd->free > 1)
		nd->free = 1;
	/* "ready" and "full" as such; any other state ("draining",
	 * "stopping", one of a later version) takes no creates. */
	enum node_state ns = NODE_READY;
	if (state && !strcmp(state, "full"))
		ns = NODE_FULL;
	else if ((state && strcmp(state, "ready")) || (status && strcmp(status, "ok")))
		ns = NODE_DRAINING;
	if (nd->state == NODE_UNREACHABLE)
		gw_log("node_reachable", "node=%s url=%s down_for_ms=%llu", nd->id, nd->url,
		       (unsigned long long)(now - nd->down_since_ms));
	nd->state = ns;
	nd->fails = 0;
	nd->down_since_ms = 0;
	nd->last_seen_ms = now;
	json_decref(nd->health);
	nd->health = json_incref(h);
}

static void apply_failure(struct node *nd, const struct gw_answer *a, uint64_t now)
{
	nd->fails++;
	if (nd->state != NODE_UNREACHABLE && nd->fails >= (int)g.cfg.down_after) {
		nd->state = NODE_UNREACHABLE;
		nd->down_since_ms = now;
		gw_log("node_unreachable", "node=%s url=%s status=%ld error=\"%s\"", nd->id, nd->url, a->status,
		       a->curl_error);
	}
}

/* The moved map from every reachable node's list: an id whose node is not
 * the node that lists it has moved there (docs/fleet.md).  Called without
 * g.lock. */
static void rebuild_moved(void)
{
	struct target { char url[512]; char id[SANDLOT_NODE_ID_MAX + 1]; };
	struct target *list = calloc(GW_MAX_NODES, sizeof *list);
	size_t n = 0;
	if (!list)
		return;
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < g.n; i++)
		if (g.nodes[i]->id[0] && g.nodes[i]->state != NODE_UNREACHABLE) {
			snprintf(list[n].url, sizeof list[n].url, "%s", g.nodes[i]->url);
			snprintf(list[n].id, sizeof list[n].id, "%s", g.nodes[i]->id);
			n++;
		}
	pthread_mutex_unlock(&g.lock);
	json_t *moved = json_object();
	int complete = 1;
	for (size_t i = 0; i < n; i++) {
		char url[600];
		snprintf(url, sizeof url, "%.512s/v1/sandboxes?state=all", list[i].url);
		const char *hdrs[] = { gw_auth_header(), NULL };
		struct gw_answer a;
		json_t *j = NULL;
		if (gw_call("GET", url, hdrs, NULL, 0, g.cfg.node_timeout_ms, &a) == 0 && a.status == 200)
			j = json_loadb(a.body, a.len, 0, NULL);
		gw_answer_free(&a);
		json_t *arr = json_object_get(j, "sandboxes");
		if (!json_is_array(arr)) {
			complete = 0;
			json_decref(j);
			continue;
		}
		size_t k;
		json_t *sb;
		json_array_foreach(arr, k, sb) {
			const char *sid = json_string_value(json_object_get(sb, "id"));
			char born[SANDLOT_NODE_ID_MAX + 1];
			if (sid && gw_id_node(sid, born) == 1 && strcmp(born, list[i].id))
				json_object_set_new(moved, sid, json_string(list[i].id));
		}
		json_decref(j);
	}
	pthread_mutex_lock(&g.lock);
	if (!complete) {
		/* A node that did not answer keeps what we knew of its moved ones. */
		const char *sid;
		json_t *v;
		json_object_foreach(g.moved, sid, v) {
			struct node *holder = gw_node_by_id(json_string_value(v));
			if (!json_object_get(moved, sid) && (!holder || holder->state == NODE_UNREACHABLE))
				json_object_set(moved, sid, v);
		}
	}
	json_decref(g.moved);
	g.moved = moved;
	pthread_mutex_unlock(&g.lock);
	free(list);
}

void gw_poll_once(void)
{
	char **urls = NULL;
	size_t nurls = 0;
	discover(&urls, &nurls);
	pthread_mutex_lock(&g.lock);
	sync_table(urls, nurls);
	size_t n = g.n;
	struct probe *pr = calloc(n ? n : 1, sizeof *pr);
	size_t np = 0;
	for (size_t i = 0; pr && i < n; i++)
		if (g.nodes[i]->seen)
			pr[np++].url = strdup(g.nodes[i]->url);
	n = np;
	pthread_mutex_unlock(&g.lock);
	for (size_t i = 0; i < nurls; i++)
		free(urls[i]);
	free(urls);
	if (!pr)
		return;
	for (size_t i = 0; i < n; i++)
		pr[i].started = pthread_create(&pr[i].t, NULL, probe_run, &pr[i]) == 0;
	for (size_t i = 0; i < n; i++) {
		if (pr[i].started)
			pthread_join(pr[i].t, NULL);
		else
			snprintf(pr[i].a.curl_error, sizeof pr[i].a.curl_error, "could not start a thread");
	}
	uint64_t now = gw_now_ms();
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < g.n; j++) {
			struct node *nd = g.nodes[j];
			if (strcmp(nd->url, pr[i].url))
				continue;
			if (pr[i].health)
				apply_health(nd, pr[i].health, now);
			else
				apply_failure(nd, &pr[i].a, now);
			break; /* one entry per URL; apply_health may reorder the table */
		}
		json_decref(pr[i].health);
		gw_answer_free(&pr[i].a);
		free(pr[i].url);
	}
	uint64_t polls = g.polls;
	pthread_mutex_unlock(&g.lock);
	free(pr);
	if (polls % g.cfg.moved_every == 0)
		rebuild_moved();
	gw_maps_sync();
	pthread_mutex_lock(&g.lock);
	g.polls++;
	pthread_cond_broadcast(&g.polled);
	pthread_mutex_unlock(&g.lock);
}

void *gw_poller(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&g.lock);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)g.cfg.poll_ms * 1000000u;
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		while (!g.stopping && pthread_cond_timedwait(&g.polled, &g.lock, &ts) != ETIMEDOUT)
			;
		int stop = g.stopping;
		pthread_mutex_unlock(&g.lock);
		if (stop)
			return NULL;
		gw_poll_once();
	}
}
