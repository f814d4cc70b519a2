/* sandlot-gateway: options, start-up, signals (gateway.h, docs/fleet.md). */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "gateway/gateway.h"
#include "gateway/routes.h"

struct gw g = { .lock = PTHREAD_MUTEX_INITIALIZER, .polled = PTHREAD_COND_INITIALIZER };

static const char help[] =
	"NAME\n"
	"    sandlot-gateway - the front door of a fleet of sandlotd nodes\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot-gateway --listen HOST:PORT --token-file FILE NODES... [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Places new sandboxes on the node with the most free capacity among K\n"
	"    sampled (best-of-K), serves the fleet-wide lists and /v1/nodes, and\n"
	"    keeps HAProxy's routing maps current.  Holds no state of its own: a\n"
	"    restarted gateway rebuilds everything by asking the nodes.  Every call\n"
	"    for an existing sandbox goes from HAProxy to the node in its id, not\n"
	"    through the gateway (deploy/haproxy).  See docs/fleet.md.\n"
	"\n"
	"OPTIONS\n"
	"        --listen HOST:PORT     where to serve HTTP (IPv4; required)\n"
	"        --token-file FILE      the fleet's bearer token (first line): clients\n"
	"                               must send it, and the gateway sends it to the\n"
	"                               nodes (required)\n"
	"    Nodes (at least one of):\n"
	"        --node URL             a node, http://IPV4:PORT (repeatable)\n"
	"        --nodes-file FILE      one node URL a line, read again at every poll\n"
	"                               (# comments)\n"
	"        --nodes-dns HOST:PORT  every IPv4 address HOST resolves to, at every\n"
	"                               poll (a Kubernetes headless Service)\n"
	"        --poll-interval MS     how often every node's /v1/health is asked\n"
	"                               (default 1000)\n"
	"        --node-timeout MS      a poll or list call to one node (default 2000)\n"
	"        --down-after N         failed polls in a row before a node is\n"
	"                               unreachable (default 2)\n"
	"        --forget-after SECONDS a node no longer discovered stays known, as\n"
	"                               unreachable (its sandboxes get 503, never\n"
	"                               404), this long (default 86400; 0: for good)\n"
	"    Placement:\n"
	"        --choices K            nodes sampled per create (default 3)\n"
	"        --create-attempts N    nodes tried per create, when one answers 503\n"
	"                               or cannot be reached (default 3)\n"
	"        --create-timeout MS    one create on one node (default 120000)\n"
	"    HAProxy:\n"
	"        --map-dir DIR          write nodes.map, down.map and moved.map there,\n"
	"                               spelt as the configuration's SANDLOT_MAP_DIR\n"
	"        --haproxy-socket PATH  HAProxy's admin socket: maps are also changed\n"
	"                               live (needs --map-dir)\n"
	"        --moved-every N        rebuild moved.map from the nodes' lists every\n"
	"                               N polls (default 10)\n"
	"    -h, --help                 show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 after SIGTERM or SIGINT, 1 if it could not start, 2 for bad arguments.\n";

enum { OPT_LISTEN = 256, OPT_TOKEN_FILE, OPT_NODE, OPT_NODES_FILE, OPT_NODES_DNS, OPT_POLL,
       OPT_NODE_TIMEOUT, OPT_DOWN_AFTER, OPT_CHOICES, OPT_ATTEMPTS, OPT_CREATE_TIMEOUT, OPT_MAP_DIR,
       OPT_HAPROXY_SOCKET, OPT_MOVED_EVERY, OPT_FORGET_AFTER };

static const struct option opts[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "node", required_argument, NULL, OPT_NODE },
	{ "nodes-file", required_argument, NULL, OPT_NODES_FILE },
	{ "nodes-dns", required_argument, NULL, OPT_NODES_DNS },
	{ "poll-interval", required_argument, NULL, OPT_POLL },
	{ "node-timeout", required_argument, NULL, OPT_NODE_TIMEOUT },
	{ "down-after", required_argument, NULL, OPT_DOWN_AFTER },
	{ "choices", required_argument, NULL, OPT_CHOICES },
	{ "create-attempts", required_argument, NULL, OPT_ATTEMPTS },
	{ "create-timeout", required_argument, NULL, OPT_CREATE_TIMEOUT },
	{ "map-dir", required_argument, NULL, OPT_MAP_DIR },
	{ "haproxy-socket", required_argument, NULL, OPT_HAPROXY_SOCKET },
	{ "moved-every", required_argument, NULL, OPT_MOVED_EVERY },
	{ "forget-after", required_argument, NULL, OPT_FORGET_AFTER },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

uint64_t gw_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void gw_log(const char *event, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	fprintf(stderr, "time=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ event=%s %s\n", tm.tm_year + 1900,
		tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, event, msg);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandlot-gateway: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs(" (see --help)\n", stderr);
	va_end(ap);
	return 2;
}

static int number(const char *name, const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max) {
		fprintf(stderr, "sandlot-gateway: --%s: %s is not a number from %u to %u (see --help)\n", name, s,
			min, max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	struct gw_config *c = &g.cfg;
	c->poll_ms = 1000;
	c->node_timeout_ms = 2000;
	c->create_timeout_ms = 120000;
	c->down_after = 2;
	c->k = 3;
	c->attempts = 3;
	c->moved_every = 10;
	c->forget_after_s = 86400;
	const char *listen = NULL, *token_file = NULL;
	int o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int r = 0;
		switch (o) {
		case 'h': fputs(help, stdout); exit(0);
		case OPT_LISTEN: listen = optarg; break;
		case OPT_TOKEN_FILE: token_file = optarg; break;
		case OPT_NODE: {
			const char **nu = realloc(c->node_urls, (c->nnode_urls + 1) * sizeof *nu);
			if (!nu)
				return 1;
			nu[c->nnode_urls++] = optarg;
			c->node_urls = nu;
			break;
		}
		case OPT_NODES_FILE: c->nodes_file = optarg; break;
		case OPT_NODES_DNS: c->nodes_dns = optarg; break;
		case OPT_POLL: r = number("poll-interval", optarg, 50, 600000, &c->poll_ms); break;
		case OPT_NODE_TIMEOUT: r = number("node-timeout", optarg, 50, 600000, &c->node_timeout_ms); break;
		case OPT_DOWN_AFTER: r = number("down-after", optarg, 1, 1000, &c->down_after); break;
		case OPT_CHOICES: r = number("choices", optarg, 1, GW_MAX_NODES, &c->k); break;
		case OPT_ATTEMPTS: r = number("create-attempts", optarg, 1, GW_MAX_NODES, &c->attempts); break;
		case OPT_CREATE_TIMEOUT:
			r = number("create-timeout", optarg, 100, 3600000, &c->create_timeout_ms);
			break;
		case OPT_MAP_DIR: c->map_dir = optarg; break;
		case OPT_HAPROXY_SOCKET: c->haproxy_socket = optarg; break;
		case OPT_MOVED_EVERY: r = number("moved-every", optarg, 1, 100000, &c->moved_every); break;
		case OPT_FORGET_AFTER:
			r = number("forget-after", optarg, 0, 100u * 365 * 86400, &c->forget_after_s);
			break;
		default: return bad("unknown option");
		}
		if (r < 0)
			return 2;
	}
	if (optind < argc)
		return bad("unexpected argument %s", argv[optind]);
	if (!listen)
		return bad("--listen HOST:PORT is required");
	const char *colon = strrchr(listen, ':');
	unsigned port;
	if (!colon || colon == listen || number("listen", colon + 1, 1, 65535, &port) < 0)
		return bad("--listen %s: expected HOST:PORT", listen);
	c->listen_host = strndup(listen, (size_t)(colon - listen));
	c->listen_port = port;
	if (!token_file)
		return bad("--token-file is required (the fleet's token: the nodes' --token-file)");
	char *t = sandlot__read_file(token_file, 4096);
	if (!t) {
		fprintf(stderr, "sandlot-gateway: --token-file %s: %s\n", token_file, strerror(errno));
		return 2;
	}
	t[strcspn(t, "\r\n")] = '\0';
	if (!*t)
		return bad("--token-file %s: the first line is empty", token_file);
	c->token = t;
	if (asprintf(&g.auth_header, "Authorization: Bearer %s", t) < 0)
		return 1;
	if (!c->nnode_urls && !c->nodes_file && !c->nodes_dns)
		return bad("no nodes: give --node, --nodes-file or --nodes-dns");
	for (size_t i = 0; i < c->nnode_urls; i++)
		if (strncmp(c->node_urls[i], "http://", 7))
			return bad("--node %s: expected http://IPV4:PORT", c->node_urls[i]);
	if (c->haproxy_socket && !c->map_dir)
		return bad("--haproxy-socket needs --map-dir (the maps' names in HAProxy's configuration)");
	if (c->map_dir && access(c->map_dir, W_OK) < 0) {
		fprintf(stderr, "sandlot-gateway: --map-dir %s: %s\n", c->map_dir, strerror(errno));
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rc = parse_args(argc, argv);
	if (rc)
		return rc;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		fprintf(stderr, "sandlot-gateway: libcurl could not start\n");
		return 1;
	}
	g.moved = json_object();
	g.started_ms = gw_now_ms();
	/* The nodes of the last run, then one poll before serving: the first
	 * create already has nodes. */
	gw_nodes_seed();
	gw_poll_once();
	if (gw_routes_start() < 0)
		return 1;
	pthread_t poller;
	if (pthread_create(&poller, NULL, gw_poller, NULL)) {
		fprintf(stderr, "sandlot-gateway: could not start the poller\n");
		return 1;
	}
	gw_log("started", "listen=%s:%u nodes=%zu", g.cfg.listen_host, g.cfg.listen_port, g.n);
	sigdelset(&set, SIGPIPE);
	int sig;
	while (sigwait(&set, &sig) != 0)
		;
	gw_log("stopping", "signal=%d", sig);
	pthread_mutex_lock(&g.lock);
	g.stopping = 1;
	pthread_cond_broadcast(&g.polled);
	pthread_mutex_unlock(&g.lock);
	pthread_join(poller, NULL);
	gw_routes_stop();
	for (size_t i = 0; i < g.n; i++) {
		json_decref(g.nodes[i]->health);
		free(g.nodes[i]->url);
		free(g.nodes[i]);
	}
	json_decref(g.moved);
	free(g.cfg.node_urls);
	free((char *)g.cfg.listen_host);
	free(g.cfg.token);
	free(g.auth_header);
	gw_call_cleanup();
	curl_global_cleanup();
	return 0;
}
