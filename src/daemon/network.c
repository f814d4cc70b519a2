/* A sandbox's network over the API: the "network" object of create and of
 * PUT /v1/sandboxes/{id}/network, the network log, the egress counters of
 * /metrics (docs/network.md).  The enforcement itself is libsandlot's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"

static const char *mode_name(sandlot_network_t m)
{
	return m == SANDLOT_NET_OPEN ? "open" : m == SANDLOT_NET_ALLOWLIST ? "allowlist" : "none";
}

void network_req_free(struct network_req *n)
{
	free(n->allow);
	free(n->deny);
	n->allow = n->deny = NULL;
}

/* A list of rule strings: NULL-terminated pointers into v (owned by it). */
static int rule_list(const char *what, json_t *v, const char ***out, sandlot_error_t **err)
{
	if (!json_is_array(v))
		return sandlot__error(err, EINVAL, "field \"network.%s\" must be an array of "
				  "strings", what);
	size_t n = json_array_size(v);
	const char **list = calloc(n + 1, sizeof(*list));
	if (!list)
		return sandlot__error(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i);
		if (!json_is_string(e) || strlen(json_string_value(e)) != json_string_length(e)) {
			free(list);
			return sandlot__error(err, EINVAL, "field \"network.%s\": entry %zu is "
					  "not a string", what, i);
		}
		list[i] = json_string_value(e);
	}
	*out = list;
	return 0;
}

int network_parse(json_t *v, struct network_req *out, sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	out->policy.size = sizeof(out->policy);
	out->policy.mode = SANDLOT_NET_NONE;
	const char *mode = NULL;
	if (json_is_string(v)) {
		mode = json_string_value(v);
	} else if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach(v, k, x) {
			if (!strcmp(k, "mode")) {
				if (!json_is_string(x))
					goto bad_mode;
				mode = json_string_value(x);
			} else if (!strcmp(k, "allow")) {
				if (rule_list("allow", x, &out->allow, err) < 0)
					goto fail;
			} else if (!strcmp(k, "deny")) {
				if (rule_list("deny", x, &out->deny, err) < 0)
					goto fail;
			} else {
				sandlot__error(err, EINVAL, "unknown field \"network.%.64s\" (known: "
					   "mode, allow, deny)", k);
				goto fail;
			}
		}
		/* {"allow": [...]} alone means an allowlist. */
		if (!mode)
			mode = out->allow ? "allowlist" : "none";
	} else {
		sandlot__error(err, EINVAL, "field \"network\" must be an object such as "
			   "{\"mode\": \"allowlist\", \"allow\": [\"pypi.org\"]} or a mode string");
		goto fail;
	}
	if (!strcmp(mode, "none"))
		out->policy.mode = SANDLOT_NET_NONE;
	else if (!strcmp(mode, "allowlist"))
		out->policy.mode = SANDLOT_NET_ALLOWLIST;
	else if (!strcmp(mode, "open"))
		out->policy.mode = SANDLOT_NET_OPEN;
	else
		goto bad_mode;
	out->policy.allow = out->allow;
	out->policy.deny = out->deny;
	sandlot_error_t *e = NULL;
	if (sandlot_net_policy_validate(&out->policy, &e) < 0) {
		sandlot__error(err, EINVAL, "%s", sandlot_error_message(e));
		sandlot_error_free(e);
		goto fail;
	}
	return 0;
bad_mode:
	sandlot__error(err, EINVAL, "field \"network.mode\" must be \"none\", \"allowlist\" "
		   "or \"open\"");
fail:
	network_req_free(out);
	return -1;
}

json_t *network_json(sandlot_t *sb)
{
	const char *const *allow, *const *deny;
	sandlot_network_t m = sandlot_network(sb, &allow, &deny);
	json_t *o = json_object();
	json_object_set_new(o, "mode", json_string(mode_name(m)));
	json_t *a = json_array(), *d = json_array();
	for (size_t i = 0; allow[i]; i++)
		json_array_append_new(a, json_string(allow[i]));
	for (size_t i = 0; deny[i]; i++)
		json_array_append_new(d, json_string(deny[i]));
	json_object_set_new(o, "allow", a);
	json_object_set_new(o, "deny", d);
	return o;
}

int network_from_json(json_t *opts, sandlot_options_t *o, struct network_req *out)
{
	memset(out, 0, sizeof(*out));
	json_t *v = json_object_get(opts, "network");
	if (!json_is_object(v))
		return 0; /* records from before networks: none */
	const char *mode = json_string_value(json_object_get(v, "mode"));
	o->network = mode && !strcmp(mode, "open")        ? SANDLOT_NET_OPEN
		     : mode && !strcmp(mode, "allowlist") ? SANDLOT_NET_ALLOWLIST
							  : SANDLOT_NET_NONE;
	for (int k = 0; k < 2; k++) {
		json_t *a = json_object_get(v, k ? "deny" : "allow");
		size_t n = json_array_size(a);
		const char **list = calloc(n + 1, sizeof(*list));
		if (!list) {
			network_req_free(out);
			return -1;
		}
		for (size_t i = 0; i < n; i++)
			list[i] = json_string_value(json_array_get(a, i));
		if (k)
			out->deny = list;
		else
			out->allow = list;
	}
	o->net_allow = out->allow;
	o->net_deny = out->deny;
	return 0;
}

/* ---- routes ------------------------------------------------------------------------ */

static int put_network(struct http_req *req)
{
	struct daemon *d = req->d;
	if (!req->json)
		return http_error(req, 400, "bad_request", "the body must be the network policy, e.g. "
				  "{\"mode\": \"allowlist\", \"allow\": [\"pypi.org\"]}");
	struct network_req n;
	sandlot_error_t *perr = NULL;
	if (network_parse(req->json, &n, &perr) < 0) {
		http_error_from(req, perr);
		sandlot_error_free(perr);
		return 0;
	}
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s) {
		network_req_free(&n);
		return 0;
	}
	sandlot_error_t *err = NULL;
	int r = sandlot_set_network(s->sb, &n.policy, &err);
	network_req_free(&n);
	json_t *now = network_json(s->sb);
	pthread_mutex_lock(&s->lock);
	json_object_set(s->options, "network", now);
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	if (r < 0) {
		dsb_put(d, s);
		json_decref(now);
		http_error_from(req, err);
		sandlot_error_free(err);
		return 0;
	}
	daemon_log("network", "sandbox=%s mode=%s", s->id,
		   json_string_value(json_object_get(now, "mode")));
	json_decref(now);
	json_t *body = dsb_to_json(s);
	dsb_put(d, s);
	return http_json(req, 200, body);
}

static int get_network(struct http_req *req)
{
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return 0;
	json_t *o = network_json(s->sb);
	dsb_put(req->d, s);
	return http_json(req, 200, o);
}

static int get_network_log(struct http_req *req)
{
	const char *after_s = http_query(req, "after");
	uint64_t after = 0;
	if (after_s) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(after_s, &end, 10);
		if (!*after_s || *end || errno || after_s[0] == '-')
			return http_error(req, 400, "bad_request",
					  "invalid \"after\" \"%.64s\": expected a whole number", after_s);
		after = v;
	}
	struct dsb *s = dsb_get(req->d, req, req->params[0]);
	if (!s)
		return 0;
	sandlot_net_event_t *ev = NULL;
	size_t n = 0;
	uint64_t dropped = 0;
	sandlot_error_t *err = NULL;
	int r = sandlot_net_log(s->sb, after, &ev, &n, &dropped, &err);
	dsb_put(req->d, s);
	if (r < 0) {
		http_error_from(req, err);
		sandlot_error_free(err);
		return 0;
	}
	json_t *arr = json_array();
	uint64_t last = after;
	for (size_t i = 0; i < n; i++) {
		const sandlot_net_event_t *e = &ev[i];
		json_t *o = json_object();
		json_object_set_new(o, "seq", json_integer((json_int_t)e->seq));
		json_object_set_new(o, "time", json_time(e->time_ms));
		json_object_set_new(o, "layer", json_string(e->layer));
		json_object_set_new(o, "verdict", json_string(e->verdict));
		json_object_set_new(o, "reason", json_string(e->reason));
		json_object_set_new(o, "name", e->name[0] ? json_string(e->name) : json_null());
		json_object_set_new(o, "addr", e->addr[0] ? json_string(e->addr) : json_null());
		if (e->port)
			json_object_set_new(o, "port", json_integer(e->port));
		if (!strcmp(e->layer, "dns")) {
			json_object_set_new(o, "qtype", json_integer(e->qtype));
			json_object_set_new(o, "answers", json_integer(e->answers));
		} else {
			json_object_set_new(o, "bytes_out", json_integer((json_int_t)e->bytes_out));
			json_object_set_new(o, "bytes_in", json_integer((json_int_t)e->bytes_in));
		}
		json_array_append_new(arr, o);
		last = e->seq;
	}
	free(ev);
	json_t *o = json_object();
	json_object_set_new(o, "events", arr);
	json_object_set_new(o, "next", json_integer((json_int_t)last));
	json_object_set_new(o, "dropped", json_integer((json_int_t)dropped));
	return http_json(req, 200, o);
}

const struct http_route network_routes[] = {
	{ "PUT", "/v1/sandboxes/{}/network", HTTP_JSON, put_network, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/network", HTTP_NOBODY, get_network, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/network/log", HTTP_NOBODY, get_network_log, NULL, NULL, NULL },
	{ 0 },
};

/* ---- metrics ----------------------------------------------------------------------- */

char *network_metrics(void)
{
	sandlot_net_stats_t st = { .size = sizeof(st) };
	sandlot_net_stats(&st);
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	fprintf(f, "# HELP sandlot_egress_dns_queries_total DNS queries of sandboxes, by verdict.\n"
		   "# TYPE sandlot_egress_dns_queries_total counter\n"
		   "sandlot_egress_dns_queries_total{verdict=\"allowed\"} %llu\n"
		   "sandlot_egress_dns_queries_total{verdict=\"refused\"} %llu\n",
		(unsigned long long)st.dns_allowed, (unsigned long long)st.dns_refused);
	fprintf(f, "# HELP sandlot_egress_connections_total TCP connections of sandboxes, by "
		   "verdict.\n"
		   "# TYPE sandlot_egress_connections_total counter\n"
		   "sandlot_egress_connections_total{verdict=\"allowed\"} %llu\n"
		   "sandlot_egress_connections_total{verdict=\"refused\"} %llu\n",
		(unsigned long long)st.tcp_allowed, (unsigned long long)st.tcp_refused);
	fprintf(f, "# HELP sandlot_egress_refused_total Refused DNS queries and connections, by "
		   "reason.\n# TYPE sandlot_egress_refused_total counter\n");
	for (unsigned i = 0; sandlot_net_reason_name(i); i++)
		if (i > 0) /* 0 is "allowed" */
			fprintf(f, "sandlot_egress_refused_total{reason=\"%s\"} %llu\n",
				sandlot_net_reason_name(i), (unsigned long long)st.refused_by_reason[i]);
	fprintf(f, "# HELP sandlot_egress_bytes_total Bytes proxied for sandboxes, by direction.\n"
		   "# TYPE sandlot_egress_bytes_total counter\n"
		   "sandlot_egress_bytes_total{direction=\"out\"} %llu\n"
		   "sandlot_egress_bytes_total{direction=\"in\"} %llu\n",
		(unsigned long long)st.bytes_out, (unsigned long long)st.bytes_in);
	fprintf(f, "# HELP sandlot_egress_connections_open Proxied connections open now.\n"
		   "# TYPE sandlot_egress_connections_open gauge\n"
		   "sandlot_egress_connections_open %llu\n", (unsigned long long)st.connections_open);
	fclose(f);
	return out;
}
