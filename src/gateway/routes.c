/* The gateway's HTTP routes (routes.h, docs/fleet.md, spec/openapi.yaml).
 *
 *   GET  /v1/health                   the gateway itself
 *   GET  /v1/nodes                    every node: state, capacity, last seen
 *   POST /v1/sandboxes                placed (best-of-K), sent to one node
 *   POST /e2b/sandboxes, /e2b/v2/sandboxes     the same, E2B's API
 *   POST /mcp without Mcp-Session-Id  an MCP session's initialize: placed
 *   GET  /v1/sandboxes                every node's list, merged, with
 *                                     "unreachable_nodes"
 *   GET  /e2b/sandboxes, /e2b/v2/sandboxes     the same (E2B's arrays; the
 *                                     unreachable nodes in the header
 *                                     Sandlot-Unreachable-Nodes)
 *   anything for one sandbox          503 node_unavailable when its node is
 *                                     unreachable, 404 unknown_node when no
 *                                     node has that id, else 421: such calls
 *                                     go through HAProxy to the node
 *
 * Every request needs the fleet's token ("Authorization: Bearer" or, as
 * E2B's SDKs send it, X-API-KEY).  A forwarded request keeps the client's
 * headers (its token included) and the node's answer comes back as it was,
 * with Sandlot-Node naming the node.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/cleanup.h"
#include "gateway/gateway.h"
#include "gateway/routes.h"

#define BODY_MAX (1u << 20)

static struct MHD_Daemon *mhd;

struct req {
	char *body;
	size_t len;
	int too_big;
};

/* ---- answers ------------------------------------------------------------------ */

static enum MHD_Result send_bytes(struct MHD_Connection *c, unsigned status, const char *ctype,
				  const char *body, size_t len, const char *const *headers, size_t nheaders)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (ctype && *ctype)
		MHD_add_response_header(r, "Content-Type", ctype);
	for (size_t i = 0; i < nheaders; i++) {
		const char *colon = strchr(headers[i], ':');
		if (!colon)
			continue;
		char name[128];
		size_t nl = (size_t)(colon - headers[i]);
		if (nl >= sizeof name)
			continue;
		memcpy(name, headers[i], nl);
		name[nl] = '\0';
		const char *v = colon + 1;
		while (*v == ' ')
			v++;
		MHD_add_response_header(r, name, v);
	}
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *o,
				 const char *const *headers, size_t nheaders)
{
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return MHD_NO;
	enum MHD_Result r = send_bytes(c, status, "application/json", s, strlen(s), headers, nheaders);
	free(s);
	return r;
}

/* sandlotd's error shape: {"error":{"code","message"}} (docs/errors.md). */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code, json_t *extra,
				  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code, json_t *extra,
				  const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_t *e = json_pack("{s:s,s:s}", "code", code, "message", msg);
	if (extra) {
		json_object_update(e, extra);
		json_decref(extra);
	}
	const char *hdr[] = { "Retry-After: 1", "WWW-Authenticate: Bearer" };
	size_t nh = status == 503 ? 1 : 0;
	if (status == 401) {
		hdr[0] = hdr[1];
		nh = 1;
	}
	return send_json(c, status, json_pack("{s:o}", "error", e), hdr, nh);
}

/* ---- requests ----------------------------------------------------------------- */

static int token_ok(struct MHD_Connection *c)
{
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
	const char *want = g.cfg.token;
	size_t wl = strlen(want);
	int ok = 0;
	if (auth && !strncasecmp(auth, "Bearer ", 7)) {
		const char *t = auth + 7;
		size_t tl = strlen(t);
		unsigned diff = tl != wl;
		for (size_t i = 0; i < wl; i++)
			diff |= (unsigned char)want[i] ^ (unsigned char)(i < tl ? t[i] : 0);
		ok |= !diff;
	}
	if (key) {
		size_t tl = strlen(key);
		unsigned diff = tl != wl;
		for (size_t i = 0; i < wl; i++)
			diff |= (unsigned char)want[i] ^ (unsigned char)(i < tl ? key[i] : 0);
		ok |= !diff;
	}
	return ok;
}

struct hdrs {
	char *v[64];
	size_t n;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	(void)kind;
	struct hdrs *h = cls;
	static const char *const skip[] = { "host", "content-length", "connection", "transfer-encoding",
					    "expect", "keep-alive", "upgrade", "te", "trailer" };
	for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
		if (!strcasecmp(k, skip[i]))
			return MHD_YES;
	if (h->n + 2 < sizeof h->v / sizeof h->v[0] && v && !strpbrk(v, "\r\n") &&
	    asprintf(&h->v[h->n], "%s: %s", k, v) >= 0)
		h->n++;
	return MHD_YES;
}

struct query {
	char *s;
	size_t len;
};

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
	(void)kind;
	struct query *q = cls;
	char *ek = curl_easy_escape(NULL, k, 0), *ev = v ? curl_easy_escape(NULL, v, 0) : NULL;
	if (ek) {
		char *ns;
		if (asprintf(&ns, "%s%c%s%s%s", q->s ? q->s : "", q->s ? '&' : '?', ek, ev ? "=" : "",
			     ev ? ev : "") >= 0) {
			free(q->s);
			q->s = ns;
		}
	}
	curl_free(ek);
	curl_free(ev);
	return MHD_YES;
}

/* The node's URL for this request: URL PATH?QUERY. */
static char *node_url(const char *base, struct MHD_Connection *c, const char *path)
{
	struct query q = { 0 };
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, &q);
	char *u;
	if (asprintf(&u, "%s%s%s", base, path, q.s ? q.s : "") < 0)
		u = NULL;
	free(q.s);
	return u;
}

static void free_hdrs(struct hdrs *h)
{
	for (size_t i = 0; i < h->n; i++)
		free(h->v[i]);
}

/* ---- routes ------------------------------------------------------------------- */

static enum MHD_Result health(struct MHD_Connection *c)
{
	pthread_mutex_lock(&g.lock);
	size_t ready = 0;
	for (size_t i = 0; i < g.n; i++)
		ready += g.nodes[i]->state == NODE_READY;
	json_t *o = json_pack("{s:s,s:b,s:I,s:I,s:I}", "status", "ok", "gateway", 1, "nodes", (json_int_t)g.n,
			      "nodes_ready", (json_int_t)ready, "uptime_seconds",
			      (json_int_t)((gw_now_ms() - g.started_ms) / 1000));
	pthread_mutex_unlock(&g.lock);
	return send_json(c, 200, o, NULL, 0);
}

static enum MHD_Result nodes(struct MHD_Connection *c)
{
	json_t *arr = json_array();
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < g.n; i++)
		json_array_append_new(arr, gw_node_json(g.nodes[i]));
	json_t *moved = json_deep_copy(g.moved);
	pthread_mutex_unlock(&g.lock);
	return send_json(c, 200, json_pack("{s:o,s:o}", "nodes", arr, "moved", moved), NULL, 0);
}

/* The id of the sandbox a create answered, to notice one that lives away
 * from the node in its id (a resumed archive: docs/fleet.md). */
static const char *created_id(json_t *j)
{
	const char *id = json_string_value(json_object_get(j, "id"));
	return id ? id : json_string_value(json_object_get(j, "sandboxID"));
}

static enum MHD_Result create(struct MHD_Connection *c, const char *path, struct req *rq)
{
	struct node *tried[GW_MAX_NODES];
	size_t ntried = 0;
	char why[1024] = "";
	size_t wl = 0;
	struct hdrs h = { 0 };
	MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, &h);
	h.v[h.n] = NULL;
	enum MHD_Result ret;
	for (unsigned attempt = 0; attempt < g.cfg.attempts; attempt++) {
		struct node *nd = gw_place(tried, ntried);
		if (!nd)
			break;
		tried[ntried++] = nd;
		char node_id[SANDLOT_NODE_ID_MAX + 1];
		char base[600];
		pthread_mutex_lock(&g.lock);
		snprintf(node_id, sizeof node_id, "%s", nd->id);
		snprintf(base, sizeof base, "%s", nd->url);
		pthread_mutex_unlock(&g.lock);
		cleanup_free char *url = node_url(base, c, path);
		struct gw_answer a;
		int rc = url ? gw_call("POST", url, (const char *const *)h.v, rq->body ? rq->body : "", rq->len,
				       g.cfg.create_timeout_ms, &a)
			     : -1;
		if (rc < 0 || a.status == 503) {
			/* Nothing was allocated there (a full node answers 503
			 * before it allocates; a node that cannot be reached did
			 * nothing): try another. */
			const char *what = rc < 0 ? (url ? a.curl_error : "out of memory") : "503";
			gw_log("create_retry", "node=%s reason=\"%s\"", node_id, what);
			wl += (size_t)snprintf(why + wl, wl < sizeof why ? sizeof why - wl : 0, "%s%s: %s",
					       wl ? "; " : "", node_id, rc < 0 ? what : "full (503)");
			if (wl >= sizeof why)
				wl = sizeof why - 1;
			pthread_mutex_lock(&g.lock);
			if (rc == 0 && nd->state == NODE_READY)
				nd->state = NODE_FULL; /* until its next poll says otherwise */
			pthread_mutex_unlock(&g.lock);
			/* Only now: a node with creates in flight stays in the table. */
			gw_place_done(nd);
			if (rc == 0)
				gw_answer_free(&a);
			continue;
		}
		if (a.status >= 200 && a.status < 300) {
			/* Count it until the node's next report does (as E2B's
			 * placement does): the next create sees it at once. */
			pthread_mutex_lock(&g.lock);
			nd->sandboxes++;
			if (nd->max_sandboxes > 0) {
				nd->free -= 1.0 / (double)nd->max_sandboxes;
				if (nd->free < 0)
					nd->free = 0;
			}
			pthread_mutex_unlock(&g.lock);
		}
		gw_place_done(nd);
		if (a.status >= 200 && a.status < 300) {
			json_t *j = json_loadb(a.body, a.len, 0, NULL);
			const char *sid = created_id(j);
			char born[SANDLOT_NODE_ID_MAX + 1];
			if (sid && gw_id_node(sid, born) == 1 && strcmp(born, node_id)) {
				pthread_mutex_lock(&g.lock);
				json_object_set_new(g.moved, sid, json_string(node_id));
				pthread_mutex_unlock(&g.lock);
				gw_maps_sync();
			}
			json_decref(j);
		}
		char *extra[18];
		size_t ne = 0;
		for (size_t i = 0; i < a.nheaders; i++)
			extra[ne++] = a.headers[i];
		char node_hdr[64];
		snprintf(node_hdr, sizeof node_hdr, "Sandlot-Node: %s", node_id);
		extra[ne++] = node_hdr;
		ret = send_bytes(c, (unsigned)a.status, a.content_type, a.body ? a.body : "", a.len,
				 (const char *const *)extra, ne);
		gw_answer_free(&a);
		free_hdrs(&h);
		return ret;
	}
	free_hdrs(&h);
	/* Say why each node was passed over. */
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < g.n; i++) {
		struct node *nd = g.nodes[i];
		int was_tried = 0;
		for (size_t t = 0; t < ntried; t++)
			was_tried |= tried[t] == nd;
		if (was_tried || nd->state == NODE_READY)
			continue;
		wl += (size_t)snprintf(why + wl, wl < sizeof why ? sizeof why - wl : 0, "%s%s: %s", wl ? "; " : "",
				       nd->id[0] ? nd->id : nd->url, gw_state_name(nd->state));
		if (wl >= sizeof why)
			wl = sizeof why - 1;
	}
	size_t n = g.n;
	pthread_mutex_unlock(&g.lock);
	return send_error(c, 503, "no_capacity", NULL, "no node could take the sandbox (%zu node%s: %s)", n,
			  n == 1 ? "" : "s", wl ? why : "none is known");
}

struct fan {
	char url[700];
	char node[SANDLOT_NODE_ID_MAX + 1];
	const char *const *hdrs;
	struct gw_answer a;
	int rc;
	int skip;                  /* known unreachable: not asked */
	pthread_t t;
	int started;
};

static void *fan_run(void *arg)
{
	struct fan *f = arg;
	f->rc = gw_call("GET", f->url, f->hdrs, NULL, 0, g.cfg.node_timeout_ms, &f->a);
	return NULL;
}

static enum MHD_Result list(struct MHD_Connection *c, const char *path, int e2b)
{
	struct hdrs h = { 0 };
	MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, &h);
	h.v[h.n] = NULL;
	pthread_mutex_lock(&g.lock);
	size_t n = g.n;
	struct fan *f = calloc(n ? n : 1, sizeof *f);
	for (size_t i = 0; f && i < n; i++) {
		struct node *nd = g.nodes[i];
		snprintf(f[i].node, sizeof f[i].node, "%s", nd->id);
		f[i].skip = nd->state == NODE_UNREACHABLE || !nd->id[0];
		snprintf(f[i].url, sizeof f[i].url, "%s", nd->url);
		f[i].hdrs = (const char *const *)h.v;
	}
	pthread_mutex_unlock(&g.lock);
	if (!f) {
		free_hdrs(&h);
		return MHD_NO;
	}
	for (size_t i = 0; i < n; i++) {
		if (f[i].skip)
			continue;
		char *u = node_url(f[i].url, c, path);
		snprintf(f[i].url, sizeof f[i].url, "%s", u ? u : "");
		free(u);
		f[i].started = pthread_create(&f[i].t, NULL, fan_run, &f[i]) == 0;
		if (!f[i].started)
			f[i].rc = -1;
	}
	json_t *all = json_array(), *unreachable = json_array();
	enum MHD_Result ret = MHD_YES;
	int answered = 0;
	for (size_t i = 0; i < n; i++) {
		if (f[i].started)
			pthread_join(f[i].t, NULL);
		json_t *j = NULL;
		if (!f[i].skip && f[i].rc == 0 && f[i].a.status == 200)
			j = json_loadb(f[i].a.body, f[i].a.len, 0, NULL);
		json_t *arr = e2b ? j : json_object_get(j, "sandboxes");
		if (json_is_array(arr)) {
			json_array_extend(all, arr);
		} else if (!f[i].skip && f[i].rc == 0 && f[i].a.status >= 400 && f[i].a.status < 500 && !answered) {
			/* The client's mistake (its token, its query): the node's
			 * answer, as the node gave it. */
			ret = send_bytes(c, (unsigned)f[i].a.status, f[i].a.content_type, f[i].a.body, f[i].a.len,
					 NULL, 0);
			answered = 1;
		} else {
			json_array_append_new(unreachable, json_string(f[i].node[0] ? f[i].node : "(unidentified)"));
		}
		json_decref(j);
		gw_answer_free(&f[i].a);
	}
	free(f);
	free_hdrs(&h);
	if (answered) {
		json_decref(all);
		json_decref(unreachable);
		return ret;
	}
	if (!e2b)
		return send_json(c, 200, json_pack("{s:o,s:o}", "sandboxes", all, "unreachable_nodes", unreachable),
				 NULL, 0);
	char hdr[1024] = "Sandlot-Unreachable-Nodes: ";
	size_t k;
	json_t *v;
	json_array_foreach(unreachable, k, v) {
		size_t l = strlen(hdr);
		snprintf(hdr + l, sizeof hdr - l, "%s%s", k ? "," : "", json_string_value(v));
	}
	size_t nun = json_array_size(unreachable);
	json_decref(unreachable);
	const char *hv[] = { hdr };
	return send_json(c, 200, all, hv, nun ? 1 : 0);
}

/* The sandbox a request is for, if any: the path's id, else E2B's or MCP's
 * header. */
static const char *sandbox_of(struct MHD_Connection *c, const char *url, char *buf, size_t cap)
{
	static const char *const prefixes[] = { "/v1/sandboxes/", "/e2b/sandboxes/", "/e2b/v2/sandboxes/" };
	for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
		size_t pl = strlen(prefixes[i]);
		if (!strncmp(url, prefixes[i], pl)) {
			size_t l = strcspn(url + pl, "/");
			if (l && l < cap) {
				memcpy(buf, url + pl, l);
				buf[l] = '\0';
				return buf;
			}
		}
	}
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	if (!v)
		v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	return v;
}

static enum MHD_Result for_sandbox(struct MHD_Connection *c, const char *sid)
{
	char node[SANDLOT_NODE_ID_MAX + 1];
	int shape = gw_id_node(sid, node);
	pthread_mutex_lock(&g.lock);
	const char *moved = json_string_value(json_object_get(g.moved, sid));
	if (moved)
		snprintf(node, sizeof node, "%s", moved);
	struct node *nd = shape == 1 || moved ? gw_node_by_id(node) : NULL;
	int down = nd && nd->state == NODE_UNREACHABLE;
	uint64_t since = nd ? nd->down_since_ms / 1000 : 0;
	pthread_mutex_unlock(&g.lock);
	if (!nd)
		return send_error(c, 404, "unknown_node", json_pack("{s:s}", "sandbox", sid),
				  "no node of this fleet holds sandbox %s (%s)", sid,
				  shape == 1 ? "its node is not one of the fleet's" : "its id names no node");
	if (down)
		return send_error(c, 503, "node_unavailable",
				  json_pack("{s:s,s:I}", "node", node, "since", (json_int_t)since),
				  "node %s, which holds sandbox %s, is unreachable", node, sid);
	return send_error(c, 421, "misdirected", json_pack("{s:s}", "node", node),
			  "calls for sandbox %s go to node %s through the fleet's proxy (deploy/haproxy), not to "
			  "the gateway",
			  sid, node);
}

static enum MHD_Result dispatch(struct MHD_Connection *c, const char *method, const char *url, struct req *rq)
{
	if (!token_ok(c))
		return send_error(c, 401, "unauthorized", NULL,
				  "missing or wrong bearer token (send \"Authorization: Bearer TOKEN\", the fleet's token)");
	int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	if (get && !strcmp(url, "/v1/health"))
		return health(c);
	if (get && !strcmp(url, "/v1/nodes"))
		return nodes(c);
	int e2b_list = !strcmp(url, "/e2b/sandboxes") || !strcmp(url, "/e2b/v2/sandboxes");
	if (post && (!strcmp(url, "/v1/sandboxes") || e2b_list ||
		     (!strcmp(url, "/mcp") && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id")))) {
		if (rq->too_big)
			return send_error(c, 413, "too_large", NULL, "a create's body is at most %u bytes", BODY_MAX);
		return create(c, url, rq);
	}
	if (get && (!strcmp(url, "/v1/sandboxes") || e2b_list))
		return list(c, url, e2b_list);
	char buf[256];
	const char *sid = sandbox_of(c, url, buf, sizeof buf);
	if (sid)
		return for_sandbox(c, sid);
	return send_error(c, 404, "not_found", NULL, "the gateway serves no %s %s (docs/fleet.md)", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *data, size_t *size, void **con_cls)
{
	(void)cls;
	(void)version;
	struct req *rq = *con_cls;
	if (!rq) {
		rq = calloc(1, sizeof *rq);
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		return MHD_YES;
	}
	if (*size) {
		if (rq->len + *size > BODY_MAX) {
			rq->too_big = 1;
		} else {
			char *nb = realloc(rq->body, rq->len + *size + 1);
			if (!nb)
				return MHD_NO;
			memcpy(nb + rq->len, data, *size);
			rq->body = nb;
			rq->len += *size;
			rq->body[rq->len] = '\0';
		}
		*size = 0;
		return MHD_YES;
	}
	return dispatch(c, method, url, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	(void)cls;
	(void)c;
	(void)t;
	struct req *rq = *con_cls;
	if (rq) {
		free(rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

int gw_routes_start(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.cfg.listen_port) };
	if (inet_pton(AF_INET, g.cfg.listen_host, &sa.sin_addr) != 1) {
		fprintf(stderr, "sandlot-gateway: --listen %s: not an IPv4 address\n", g.cfg.listen_host);
		return -1;
	}
	/* A thread per connection: a handler waits on nodes (a create takes as
	 * long as the node's create), and a burst of creates must not queue
	 * behind a small pool. */
	mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				       MHD_USE_ERROR_LOG,
			       0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
			       MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
			       (unsigned)2048, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_LISTENING_ADDRESS_REUSE,
			       (unsigned)1, MHD_OPTION_END);
	if (!mhd) {
		fprintf(stderr, "sandlot-gateway: cannot listen on %s:%u\n", g.cfg.listen_host, g.cfg.listen_port);
		return -1;
	}
	return 0;
}

void gw_routes_stop(void)
{
	if (mhd)
		MHD_stop_daemon(mhd);
	mhd = NULL;
}
