/* sandlotd: options, start-up (registry, recovery), signals, shutdown.
 *
 * Threads: the main thread only waits for SIGTERM/SIGINT (blocked in every
 * thread, taken with sigwaitinfo) and then shuts down; the HTTP layer has
 * its front door, libmicrohttpd's few threads, a parking thread and
 * bounded pools of request workers (http.h) — no thread per connection;
 * the reaper runs once a second; with --pool, one refill thread (pool.c);
 * libsandlot has its own I/O thread.  No thread per sandbox.
 *
 * Shutdown order: stop accepting (sockets closed and unlinked), stop the
 * pool's refill and destroy its ready sandboxes, stop the reaper, end
 * every running sandbox (their commands are killed, so the
 * requests waiting on them answer), wait (bounded) for the requests still
 * in progress, close the registry, exit 0.  Running sandboxes cannot
 * outlive the daemon (their init dies when its connection to us closes),
 * so a clean stop records them as "deleted" with reason "sandlotd
 * stopped"; paused ones have no process to lose and stay paused, their
 * workspaces on disk (workspaces.c).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/parse.h"
#include "core/private.h"
#include "common/sbid.h"
#include "common/util.h"
#include "daemon/archives.h"
#include "daemon/daemon.h"
#include "daemon/e2b_envd.h"
#include "daemon/e2b.h"
#include "daemon/mcp_http.h"
#include "daemon/node.h"

#define MAX_LISTEN 4

static const char help[] =
	"NAME\n"
	"    sandlotd - the sandlot daemon: sandboxes over an HTTP/JSON API\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlotd [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Owns the sandboxes of this host and serves the API of spec/openapi.yaml\n"
	"    on a unix socket (and optionally TCP with a bearer token).  Logs one\n"
	"    logfmt line per request and per sandbox lifecycle event to stderr.\n"
	"    Must run as root.  See docs/daemon.md.\n"
	"\n"
	"OPTIONS\n"
	"        --listen unix:PATH     unix socket to serve on (default\n"
	"                               unix:/run/sandlot/sandlot.sock; mode 0660)\n"
	"        --listen tcp:HOST:PORT also serve on TCP (repeatable); every request\n"
	"                               then needs \"Authorization: Bearer TOKEN\"\n"
	"        --token-file FILE      the token for TCP (first line of FILE);\n"
	"                               required with a tcp: listener\n"
	"        --data-dir DIR         registry (sandlot.db), sandbox storage and\n"
	"                               caches (default /var/lib/sandlot)\n"
	"        --default-ttl SECONDS  lifetime of sandboxes created without\n"
	"                               ttl_seconds (default 0: none)\n"
	"        --default-idle-timeout SECONDS\n"
	"                               idle timeout of sandboxes created without\n"
	"                               idle_timeout_seconds (default 0: none)\n"
	"        --max-sandboxes N      running sandboxes at most (default 2000);\n"
	"                               more creations get 429 (with --node-id:\n"
	"                               503 node_full)\n"
	"        --node-id NODE         this node's id in a fleet, put in every new\n"
	"                               sandbox id (sb-NODE-...; 1 to 8 of [a-z0-9];\n"
	"                               docs/fleet.md); ids without one still work\n"
	"        --node-id-file FILE    the node id from FILE, or a new random one\n"
	"                               written to FILE when it does not exist\n"
	"        --node-memory SIZE     the sandboxes' memory limits may add up to\n"
	"                               SIZE; a create past it gets 503 node_full\n"
	"                               (default: not enforced)\n"
	"        --node-cpus N          their CPU quotas likewise (default: not\n"
	"                               enforced)\n"
	"        --agent-port [IPV4:]PORT\n"
	"                               answer HAProxy's agent-check on this TCP\n"
	"                               port: \"N% ready\", \"drain\" when full\n"
	"        --cgroup-nest          on cgroup v2, make sandbox cgroups below\n"
	"                               sandlotd's own cgroup, so that its limits (a\n"
	"                               pod's) bound them (docs/fleet.md); sandlotd\n"
	"                               moves itself into a leaf \"sandlotd\" there\n"
	"        --default-image NAME   image of sandboxes created without \"image\"\n"
	"                               (default host; a built image: see\n"
	"                               sandlot image, docs/images.md)\n"
	"        --default-isolation ns|vm\n"
	"                               isolation of sandboxes created without\n"
	"                               \"isolation\" (default ns; vm: a microVM each,\n"
	"                               docs/vm.md)\n"
	"        --pool [ns:|vm:][IMAGE=]N\n"
	"                               keep N sandboxes of IMAGE (default: the\n"
	"                               default image) and isolation (default: the\n"
	"                               default isolation) ready, so that creations\n"
	"                               with the default limits return at once\n"
	"                               (repeatable, one per image and isolation;\n"
	"                               default 0: no pool)\n"
	"        --resolver ADDR[:PORT]\n"
	"                               upstream DNS server for sandboxes with a\n"
	"                               network (IPv4; repeatable; default: the\n"
	"                               nameservers of /etc/resolv.conf)\n"
	"        --egress-allow-range CIDR\n"
	"                               let sandboxes reach this range although it is\n"
	"                               closed by default (private, loopback,\n"
	"                               link-local, CGNAT, this host's addresses),\n"
	"                               when their policy allows it (repeatable;\n"
	"                               docs/network.md)\n"
	"        --egress-max-connections N\n"
	"                               TCP connections a sandbox may have open at\n"
	"                               once through the egress proxy (default 256)\n"
	"        --pip-index URL        package index for pip installs (default\n"
	"                               https://pypi.org/simple)\n"
	"        --pip-host HOST        another host pip installs may reach (repeatable;\n"
	"                               default files.pythonhosted.org with the\n"
	"                               default index)\n"
	"        --npm-registry URL     registry for npm installs (default\n"
	"                               https://registry.npmjs.org/)\n"
	"        --npm-host HOST        another host npm installs may reach (repeatable)\n"
	"        --package-ca FILE      PEM certificates pip and npm also trust (a\n"
	"                               private registry's CA)\n"
	"        --package-cache DIR    the host-side package cache (default\n"
	"                               DATA_DIR/cache/packages)\n"
	"        --paused-retention SECONDS\n"
	"                               how long a paused sandbox, and the workspace\n"
	"                               of an expired one, is kept for sandboxes\n"
	"                               created without paused_retention_seconds\n"
	"                               (default 604800: 7 days; 0: for good)\n"
	"        --max-download SIZE    the most file data one download (a file or an\n"
	"                               archive) may send, e.g. 8G (default 8G; 0: no\n"
	"                               limit); larger ones get 413 before any data;\n"
	"                               a request may ask for less with ?max_bytes=\n"
	"        --changes-scan-bytes SIZE\n"
	"                               what one workspace scan may report (default 8M;\n"
	"                               each change counts its path plus 34 bytes)\n"
	"        --changes-answer-bytes SIZE\n"
	"                               changes in one answer: an exec or code result,\n"
	"                               a page of GET .../changes (JSON; default 8M)\n"
	"        --changes-log-bytes SIZE\n"
	"                               one sandbox's changes log, a window of its\n"
	"                               newest entries (default 16M)\n"
	"        --changes-total-bytes SIZE\n"
	"                               every sandbox's log and the scans in progress\n"
	"                               together (default 256M); when full, the largest\n"
	"                               logs lose their oldest entries first\n"
	"        --disk-overcommit RATIO\n"
	"                               let the sandboxes' disk quotas add up to\n"
	"                               RATIO times the storage pool's space (default\n"
	"                               1: every quota is reserved for real; a create\n"
	"                               that cannot be reserved gets 507)\n"
	"        --storage-size SIZE    grow the data dir's storage pool to at least\n"
	"                               SIZE at start-up (it also grows by itself, as\n"
	"                               far as the data filesystem has room)\n"
	"        --max-connections N    client connections at most, on every\n"
	"                               listener together (default 8192)\n"
	"        --max-connections-per-peer N\n"
	"                               TCP connections at most from one client\n"
	"                               address (IPv6: one /64) (default 1024)\n"
	"        --header-timeout SECONDS\n"
	"                               a new connection must have sent its whole\n"
	"                               request line and headers this long after it\n"
	"                               was accepted, whatever it trickles (default 10)\n"
	"        --mcp-max-sessions N   MCP sessions at /mcp at once (default 100);\n"
	"                               each owns one sandbox\n"
	"        --mcp-idle-timeout SECONDS\n"
	"                               an MCP session without requests for this long\n"
	"                               ends and its sandbox is deleted (default 1800)\n"
	"        --mcp-allow-origin ORIGIN\n"
	"                               an Origin (e.g. https://app.example) that may\n"
	"                               use /mcp besides loopback ones (repeatable)\n"
	"        --e2b-domain NAME[:PORT]\n"
	"                               the domain of sandboxes' hosts for E2B's\n"
	"                               getHost(port): a request whose Host is\n"
	"                               PORT-SANDBOXID.NAME goes to that port of that\n"
	"                               sandbox (default localhost:PORT of the first\n"
	"                               tcp: listener; see docs/e2b.md)\n"
	"        --archive URL          where paused sandboxes are archived to move\n"
	"                               between nodes: file:///DIR or\n"
	"                               s3://BUCKET[/PREFIX][?endpoint=URL&region=R]\n"
	"                               (keys from AWS_ACCESS_KEY_ID and\n"
	"                               AWS_SECRET_ACCESS_KEY; see docs/fleet-move.md)\n"
	"    -h, --help                 show this help\n"
	"\n"
	"SIGNALS\n"
	"    SIGTERM, SIGINT  stop: no new connections, every running sandbox is\n"
	"                     destroyed and recorded as deleted (\"sandlotd stopped\"),\n"
	"                     exit 0.  Paused sandboxes stay paused, on disk.\n"
	"\n"
	"EXIT STATUS\n"
	"    0 after a clean stop, 1 if it could not start, 2 for bad arguments.\n";

enum { OPT_LISTEN = 256, OPT_TOKEN_FILE, OPT_DATA_DIR, OPT_TTL, OPT_IDLE, OPT_MAX, OPT_POOL,
       OPT_PAUSED_RETENTION, OPT_DEFAULT_IMAGE, OPT_DEFAULT_ISOLATION, OPT_MAX_DOWNLOAD, OPT_CHANGES_SCAN,
       OPT_CHANGES_ANSWER, OPT_CHANGES_LOG, OPT_CHANGES_TOTAL, OPT_OVERCOMMIT,
       OPT_STORAGE_SIZE, OPT_MAX_CONN,
       OPT_MAX_PEER, OPT_HEADER_TIMEOUT, OPT_RESOLVER,
       OPT_EGRESS_RANGE, OPT_EGRESS_MAX_CONN, OPT_PIP_INDEX, OPT_PIP_HOST, OPT_NPM_REGISTRY,
       OPT_NPM_HOST, OPT_PACKAGE_CA, OPT_PACKAGE_CACHE, OPT_MCP_SESSIONS, OPT_MCP_IDLE,
       OPT_MCP_ORIGIN, OPT_E2B_DOMAIN, OPT_ARCHIVE, OPT_NODE_ID, OPT_NODE_ID_FILE, OPT_NODE_MEMORY,
       OPT_NODE_CPUS, OPT_AGENT_PORT, OPT_CGROUP_NEST };

static const struct option opts[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "data-dir", required_argument, NULL, OPT_DATA_DIR },
	{ "default-ttl", required_argument, NULL, OPT_TTL },
	{ "default-idle-timeout", required_argument, NULL, OPT_IDLE },
	{ "max-sandboxes", required_argument, NULL, OPT_MAX },
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "default-image", required_argument, NULL, OPT_DEFAULT_IMAGE },
	{ "default-isolation", required_argument, NULL, OPT_DEFAULT_ISOLATION },
	{ "paused-retention", required_argument, NULL, OPT_PAUSED_RETENTION },
	{ "max-download", required_argument, NULL, OPT_MAX_DOWNLOAD },
	{ "changes-scan-bytes", required_argument, NULL, OPT_CHANGES_SCAN },
	{ "changes-answer-bytes", required_argument, NULL, OPT_CHANGES_ANSWER },
	{ "changes-log-bytes", required_argument, NULL, OPT_CHANGES_LOG },
	{ "changes-total-bytes", required_argument, NULL, OPT_CHANGES_TOTAL },
	{ "disk-overcommit", required_argument, NULL, OPT_OVERCOMMIT },
	{ "storage-size", required_argument, NULL, OPT_STORAGE_SIZE },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
	{ "max-connections-per-peer", required_argument, NULL, OPT_MAX_PEER },
	{ "header-timeout", required_argument, NULL, OPT_HEADER_TIMEOUT },
	{ "resolver", required_argument, NULL, OPT_RESOLVER },
	{ "egress-allow-range", required_argument, NULL, OPT_EGRESS_RANGE },
	{ "egress-max-connections", required_argument, NULL, OPT_EGRESS_MAX_CONN },
	{ "pip-index", required_argument, NULL, OPT_PIP_INDEX },
	{ "pip-host", required_argument, NULL, OPT_PIP_HOST },
	{ "npm-registry", required_argument, NULL, OPT_NPM_REGISTRY },
	{ "npm-host", required_argument, NULL, OPT_NPM_HOST },
	{ "package-ca", required_argument, NULL, OPT_PACKAGE_CA },
	{ "package-cache", required_argument, NULL, OPT_PACKAGE_CACHE },
	{ "mcp-max-sessions", required_argument, NULL, OPT_MCP_SESSIONS },
	{ "mcp-idle-timeout", required_argument, NULL, OPT_MCP_IDLE },
	{ "mcp-allow-origin", required_argument, NULL, OPT_MCP_ORIGIN },
	{ "e2b-domain", required_argument, NULL, OPT_E2B_DOMAIN },
	{ "archive", required_argument, NULL, OPT_ARCHIVE },
	{ "node-id", required_argument, NULL, OPT_NODE_ID },
	{ "node-id-file", required_argument, NULL, OPT_NODE_ID_FILE },
	{ "node-memory", required_argument, NULL, OPT_NODE_MEMORY },
	{ "node-cpus", required_argument, NULL, OPT_NODE_CPUS },
	{ "agent-port", required_argument, NULL, OPT_AGENT_PORT },
	{ "cgroup-nest", no_argument, NULL, OPT_CGROUP_NEST },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --e2b-domain NAME[:PORT], or the default from the first tcp: listener
 * (localhost:PORT: RFC 6761 names under localhost are the loopback's, and
 * browsers and curl resolve them so).  *domain: what create answers (NULL:
 * no TCP listener, nothing to answer); *host_domain: NAME lower-cased, which
 * Host headers are matched against.  Both new strings.  0, or -1 with a
 * message in msg. */
static int e2b_domain_of(const char *arg, const char *const *listens, int nlisten, char **domain,
			 char **host_domain, char *msg, size_t n)
{
	*domain = *host_domain = NULL;
	if (!arg) {
		const char *port = NULL;
		for (int i = 0; i < nlisten && !port; i++)
			if (strncmp(listens[i], "tcp:", 4) == 0)
				port = strrchr(listens[i], ':') + 1;
		*host_domain = strdup("localhost");
		if (port && strcmp(port, "0") != 0 && asprintf(domain, "localhost:%s", port) < 0)
			*domain = NULL;
		if (!*host_domain || (port && strcmp(port, "0") != 0 && !*domain)) {
			snprintf(msg, n, "out of memory");
			return -1;
		}
		return 0;
	}
	size_t len = strlen(arg);
	const char *colon = strchr(arg, ':');
	size_t nl = colon ? (size_t)(colon - arg) : len;
	int ok = nl > 0 && nl <= 200 && arg[0] != '.' && arg[0] != '-' && arg[nl - 1] != '.';
	for (size_t i = 0; i < nl && ok; i++)
		ok = (arg[i] >= 'a' && arg[i] <= 'z') || (arg[i] >= 'A' && arg[i] <= 'Z') ||
		     (arg[i] >= '0' && arg[i] <= '9') || arg[i] == '-' ||
		     (arg[i] == '.' && arg[i + 1] != '.');
	if (ok && colon) {
		char *end;
		errno = 0;
		unsigned long p = strtoul(colon + 1, &end, 10);
		ok = colon[1] >= '0' && colon[1] <= '9' && !*end && !errno && p >= 1 && p <= 65535;
	}
	if (!ok) {
		snprintf(msg, n, "invalid --e2b-domain \"%.100s\": expected a host name with an "
			 "optional :PORT, e.g. sandboxes.example.com or localhost:8765", arg);
		return -1;
	}
	*domain = strdup(arg);
	*host_domain = strndup(arg, nl);
	if (!*domain || !*host_domain) {
		snprintf(msg, n, "out of memory");
		return -1;
	}
	for (char *c = *domain; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	for (char *c = *host_domain; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	return 0;
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandlotd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs("\nTry 'sandlotd --help'.\n", stderr);
	va_end(ap);
	return 2;
}

static int parse_uint(const char *opt, const char *s, unsigned long max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v > max || s[0] == '-') {
		usage_error("invalid %s \"%s\": expected a whole number from 0 to %lu", opt, s, max);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

/* A size option ("8G", "512M", bytes); 0 only if allow_zero. */
static int parse_size_opt(const char *opt, const char *s, int allow_zero, uint64_t *out)
{
	sandlot_error_t *e = NULL;
	if (sandlot__parse_size(s, allow_zero, out, &e) == 0)
		return 0;
	usage_error("invalid %s: %s", opt, sandlot_error_message(e));
	sandlot_error_free(e);
	return -1;
}

/* The changes limits must fit in each other: a scan's report in a log, a
 * log and two scans in the budget; and none so small that an ordinary
 * answer cannot hold a change (a path is up to 4 KiB). */
static int check_changes_limits(const struct daemon_config *c)
{
	const uint64_t min = 64 << 10;
	if (c->changes_scan_bytes < min || c->changes_answer_bytes < min ||
	    c->changes_log_bytes < min || c->changes_total_bytes < min)
		return usage_error("--changes-*-bytes must each be at least 64K");
	if (c->changes_log_bytes < c->changes_scan_bytes)
		return usage_error("--changes-log-bytes (%llu) must be at least --changes-scan-bytes "
				   "(%llu): a log holds a whole scan",
				   (unsigned long long)c->changes_log_bytes,
				   (unsigned long long)c->changes_scan_bytes);
	if (c->changes_total_bytes < c->changes_log_bytes ||
	    c->changes_total_bytes < 2 * c->changes_scan_bytes)
		return usage_error("--changes-total-bytes (%llu) must be at least --changes-log-bytes "
				   "and twice --changes-scan-bytes",
				   (unsigned long long)c->changes_total_bytes);
	return 0;
}

/* First line of the token file, without surrounding whitespace. */
static char *read_token(const char *path)
{
	char *text = sandlot__read_file(path, 4096);
	if (!text) {
		fprintf(stderr, "sandlotd: cannot read token file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	char *p = text;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	size_t n = strcspn(p, "\r\n");
	while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	char *tok = strndup(p, n);
	free(text);
	if (!tok || n < 16) {
		fprintf(stderr, "sandlotd: token file %s: the token must be at least 16 characters\n",
			path);
		free(tok);
		return NULL;
	}
	for (char *c = tok; *c; c++)
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f) {
			fprintf(stderr, "sandlotd: token file %s: the token must be printable ASCII "
					"without spaces\n", path);
			free(tok);
			return NULL;
		}
	return tok;
}

/* Every sandbox holds 5 descriptors in the daemon (its protocol socket,
 * its init's pidfd, its network namespace, its uid-range and workspace
 * locks; numbered 1024 and up where the limit has room, see
 * sandlot__fd_park()) and every connection one more: take the soft limit
 * up to the hard one, and both up to what the limits need (root may raise
 * the hard limit, up to fs.nr_open).  If that fails the connection limit shrinks to fit, with a
 * warning.  Returns the soft limit in force. */
#define FDS_PER_SANDBOX 5ull
static unsigned long long raise_nofile(struct http_config *hc, unsigned max_sandboxes)
{
	unsigned long long need = (unsigned long long)hc->max_connections +
				  FDS_PER_SANDBOX * max_sandboxes + 1024;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
		struct rlimit up = { need, need };
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		unsigned long long room = rl.rlim_cur > FDS_PER_SANDBOX * max_sandboxes + 1024 + 16
			? rl.rlim_cur - FDS_PER_SANDBOX * max_sandboxes - 1024 : 16;
		fprintf(stderr, "sandlotd: warning: RLIMIT_NOFILE is %llu, too low for %u connections "
			"and %u sandboxes: at most %llu connections\n",
			(unsigned long long)rl.rlim_cur, hc->max_connections, max_sandboxes, room);
		hc->max_connections = (unsigned)room;
		if (hc->max_per_peer > hc->max_connections)
			hc->max_per_peer = hc->max_connections;
	}
	return rl.rlim_cur;
}

/* Log the memory cgroup sandlotd runs in and its limit (docs/daemon.md,
 * "A cgroup of its own"): a daemon without a limit is a warning.  cgroup
 * v1's memory hierarchy when mounted (hybrid hosts), else v2. */
static void report_cgroup(void)
{
	char *text = sandlot__read_file("/proc/self/cgroup", 65536);
	if (!text)
		return;
	char v1[1024] = "", v2[1024] = "";
	int have_v1 = 0, have_v2 = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrls = c1 + 1, *path = c2 + 1;
		if (!*ctrls) {
			have_v2 = snprintf(v2, sizeof(v2), "%s", path) < (int)sizeof(v2);
			continue;
		}
		char list[256];
		snprintf(list, sizeof(list), ",%s,", ctrls);
		if (strstr(list, ",memory,"))
			have_v1 = snprintf(v1, sizeof(v1), "%s", path) < (int)sizeof(v1);
	}
	free(text);
	char file[1200];
	char *limit = NULL;
	const char *where = NULL;
	if (have_v1) {
		snprintf(file, sizeof(file), "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
			 strcmp(v1, "/") == 0 ? "" : v1);
		limit = sandlot__read_file(file, 64);
		where = v1;
	}
	if (!limit && have_v2) {
		snprintf(file, sizeof(file), "/sys/fs/cgroup%s/memory.max", strcmp(v2, "/") == 0 ? "" : v2);
		limit = sandlot__read_file(file, 64);
		where = v2;
	}
	unsigned long long bytes = 0;
	if (limit) {
		limit[strcspn(limit, "\n")] = '\0';
		char *end;
		bytes = strtoull(limit, &end, 10);
		/* v1 says "no limit" with the largest page multiple of a long */
		if (*end || end == limit || bytes >= (1ull << 62))
			bytes = 0;
	}
	if (bytes)
		daemon_log("cgroup", "memory_cgroup=\"%s\" memory_limit=%llu", where, bytes);
	else
		daemon_log("cgroup", "level=warn memory_cgroup=\"%s\" memory_limit=none msg=\"sandlotd "
			   "runs without a memory limit of its own (see docs/daemon.md, A cgroup of its "
			   "own)\"", where ? where : "?");
	free(limit);
}

/* The route tables of every module, one after the other. */
extern const struct http_route code_routes[]; /* code.c */
static struct http_route *all_routes(void)
{
	const struct http_route *tables[] = { misc_routes, node_routes, sandbox_routes, exec_routes,
					      file_routes, workspace_routes, code_routes, port_routes,
					      proxy_routes, changes_routes, network_routes,
					      package_routes, mcp_routes, e2b_envd_routes, e2b_interp_routes,
					      archive_routes,
					      /* last: its final entries take every other /e2b path */
					      e2b_routes };
	size_t n = 0;
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (const struct http_route *r = tables[t]; r->method; r++)
			n++;
	struct http_route *all = calloc(n + 1, sizeof(*all));
	if (!all)
		return NULL;
	n = 0;
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (const struct http_route *r = tables[t]; r->method; r++)
			all[n++] = *r;
	return all;
}

/* The options sandboxes are likely created with, for sandlot_prepare(). */
static void prepare_options(struct daemon *d, sandlot_options_t *o)
{
	sandlot_options_init(o);
	o->data_dir = d->cfg.data_dir;
	o->image = d->cfg.default_image;
}

/* Whether vm sandboxes are likely: the default isolation, or pooled.
 * Then libsandlot also makes the vm template of the likely options in the
 * background (docs/vm.md, "Fast creates"). */
static int vm_likely(struct daemon *d)
{
	return d->cfg.default_isolation == SANDLOT_ISOLATION_VM || pool_wants_vm(d);
}

/* Stop preparing: the free prepared cgroups are removed, nothing of them
 * outlives the daemon (docs/daemon.md, "Prepared resources"). */
static void prepare_stop(struct daemon *d)
{
	sandlot_options_t o;
	prepare_options(d, &o);
	sandlot_error_t *err = NULL;
	if (sandlot_prepare(&o, 0, &err) < 0) {
		daemon_log("prepare_stop_failed", "level=warn error=\"%s\"", sandlot_error_message(err));
		sandlot_error_free(err);
		err = NULL;
	}
	if (vm_likely(d)) {
		o.isolation = SANDLOT_ISOLATION_VM;
		if (sandlot_prepare(&o, 0, &err) < 0) {
			daemon_log("prepare_stop_failed", "level=warn error=\"%s\"",
				   sandlot_error_message(err));
			sandlot_error_free(err);
		}
	}
}

int main(int argc, char **argv)
{
	static struct daemon d;
	const char *listens[MAX_LISTEN];
	int nlisten = 0;
	const char *token_file = NULL;
	const char *e2b_domain_arg = NULL;
	const char *archive_arg = NULL; /* --archive URL (archives.h) */
	/* Static: reachable to the end, as d's strings are. */
	static char *e2b_domain, *e2b_host_domain;
	/* --pool is applied after every option is known: its image is looked
	 * up in --data-dir, and "N" means --default-image. */
	const char *pool_args[64];
	int npool = 0;
	/* The egress engine's settings (sandlot_net_configure). */
	char resolvers[8 * 24] = "";
	int nresolvers = 0;
	const char *ranges[65];
	int nranges = 0;
	unsigned max_conn = 0;
	sandlot_packages_config_t pkgcfg = { .size = sizeof(pkgcfg) };
	const char *pip_hosts[33], *npm_hosts[33];
	int npip_hosts = 0, nnpm_hosts = 0;
	d.cfg.data_dir = "/var/lib/sandlot";
	d.cfg.default_image = "host";
	d.cfg.max_sandboxes = 2000;
	d.cfg.paused_retention_s = 7 * 24 * 3600;
	d.cfg.max_download = (uint64_t)8 << 30;
	d.cfg.changes_scan_bytes = (uint64_t)8 << 20;
	d.cfg.changes_answer_bytes = (uint64_t)8 << 20;
	d.cfg.changes_log_bytes = (uint64_t)16 << 20;
	d.cfg.changes_total_bytes = (uint64_t)256 << 20;
	d.cfg.disk_overcommit = 1;
	struct http_config hc = { .max_connections = 8192, .max_per_peer = 1024,
				  .header_timeout_s = 10 };
	struct mcp_http_config mcfg = { .max_sessions = 100, .idle_s = 1800 };
	struct node_config ncfg = { 0 };
	const char *node_id_file = NULL;
	static char node_id_buf[16];

	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN:
			if (nlisten == MAX_LISTEN)
				return usage_error("at most %d --listen addresses", MAX_LISTEN);
			if (strncmp(optarg, "unix:", 5) != 0 && strncmp(optarg, "tcp:", 4) != 0)
				return usage_error("invalid --listen \"%s\": expected unix:PATH or "
						   "tcp:HOST:PORT", optarg);
			if (strncmp(optarg, "unix:", 5) == 0 && optarg[5] != '/')
				return usage_error("invalid --listen \"%s\": the socket path must be "
						   "absolute", optarg);
			listens[nlisten++] = optarg;
			break;
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_DATA_DIR:
			if (optarg[0] != '/')
				return usage_error("invalid --data-dir \"%s\": must be an absolute path",
						   optarg);
			d.cfg.data_dir = optarg;
			break;
		case OPT_TTL:
			if (parse_uint("--default-ttl", optarg, 315360000, &d.cfg.default_ttl_s) < 0)
				return 2;
			break;
		case OPT_IDLE:
			if (parse_uint("--default-idle-timeout", optarg, 315360000,
				       &d.cfg.default_idle_s) < 0)
				return 2;
			break;
		case OPT_MAX:
			if (parse_uint("--max-sandboxes", optarg, 100000, &d.cfg.max_sandboxes) < 0)
				return 2;
			if (d.cfg.max_sandboxes == 0)
				return usage_error("--max-sandboxes must be at least 1");
			break;
		case OPT_POOL:
			if (npool == (int)(sizeof(pool_args) / sizeof(pool_args[0])))
				return usage_error("too many --pool options");
			pool_args[npool++] = optarg;
			break;
		case OPT_DEFAULT_IMAGE:
			d.cfg.default_image = optarg;
			break;
		case OPT_DEFAULT_ISOLATION:
			if (strcmp(optarg, "ns") == 0)
				d.cfg.default_isolation = SANDLOT_ISOLATION_NS;
			else if (strcmp(optarg, "vm") == 0)
				d.cfg.default_isolation = SANDLOT_ISOLATION_VM;
			else
				return usage_error("invalid --default-isolation \"%s\": expected ns or vm",
						   optarg);
			break;
		case OPT_E2B_DOMAIN:
			e2b_domain_arg = optarg;
			break;
		case OPT_ARCHIVE:
			archive_arg = optarg;
			break;
		case OPT_NODE_ID:
			if (!sandlot__node_id_ok(optarg, strlen(optarg)))
				return usage_error("invalid --node-id \"%s\": expected 1 to %d of "
						   "[a-z0-9] (it goes into every sandbox id)", optarg,
						   SANDLOT_NODE_ID_MAX);
			ncfg.node_id = optarg;
			break;
		case OPT_NODE_ID_FILE:
			if (optarg[0] != '/')
				return usage_error("invalid --node-id-file \"%s\": must be an absolute "
						   "path", optarg);
			node_id_file = optarg;
			break;
		case OPT_NODE_MEMORY:
			if (parse_size_opt("--node-memory", optarg, 0, &ncfg.memory_limit) < 0)
				return 2;
			break;
		case OPT_NODE_CPUS: {
			sandlot_error_t *e = NULL;
			if (sandlot__parse_cpus(optarg, &ncfg.cpus_limit_milli, &e) < 0) {
				usage_error("invalid --node-cpus: %s", sandlot_error_message(e));
				sandlot_error_free(e);
				return 2;
			}
			break;
		}
		case OPT_AGENT_PORT:
			ncfg.agent_listen = optarg;
			break;
		case OPT_CGROUP_NEST:
			ncfg.cgroup_nest = 1;
			break;
		case OPT_OVERCOMMIT: {
			char *end;
			errno = 0;
			double r = strtod(optarg, &end);
			if (!*optarg || *end || errno || !(r >= 1 && r <= 1000))
				return usage_error("invalid --disk-overcommit \"%s\": expected a ratio "
						   "from 1 to 1000, e.g. 1.5", optarg);
			d.cfg.disk_overcommit = r;
			break;
		}
		case OPT_STORAGE_SIZE: {
			sandlot_error_t *e = NULL;
			if (sandlot__parse_size(optarg, 0, &d.cfg.storage_size, &e) < 0) {
				usage_error("invalid --storage-size: %s", sandlot_error_message(e));
				sandlot_error_free(e);
				return 2;
			}
			break;
		}
		case OPT_PAUSED_RETENTION:
			if (parse_uint("--paused-retention", optarg, 315360000,
				       &d.cfg.paused_retention_s) < 0)
				return 2;
			break;
		case OPT_MAX_DOWNLOAD:
			if (parse_size_opt("--max-download", optarg, 1, &d.cfg.max_download) < 0)
				return 2;
			break;
		case OPT_CHANGES_SCAN:
			if (parse_size_opt("--changes-scan-bytes", optarg, 0, &d.cfg.changes_scan_bytes) < 0)
				return 2;
			break;
		case OPT_CHANGES_ANSWER:
			if (parse_size_opt("--changes-answer-bytes", optarg, 0,
					   &d.cfg.changes_answer_bytes) < 0)
				return 2;
			break;
		case OPT_CHANGES_LOG:
			if (parse_size_opt("--changes-log-bytes", optarg, 0, &d.cfg.changes_log_bytes) < 0)
				return 2;
			break;
		case OPT_CHANGES_TOTAL:
			if (parse_size_opt("--changes-total-bytes", optarg, 0,
					   &d.cfg.changes_total_bytes) < 0)
				return 2;
			break;
		case OPT_MAX_CONN:
			if (parse_uint("--max-connections", optarg, 1000000, &hc.max_connections) < 0)
				return 2;
			if (hc.max_connections < 16)
				return usage_error("--max-connections must be at least 16");
			break;
		case OPT_MAX_PEER:
			if (parse_uint("--max-connections-per-peer", optarg, 1000000, &hc.max_per_peer) < 0)
				return 2;
			if (hc.max_per_peer == 0)
				return usage_error("--max-connections-per-peer must be at least 1");
			break;
		case OPT_HEADER_TIMEOUT:
			if (parse_uint("--header-timeout", optarg, 3600, &hc.header_timeout_s) < 0)
				return 2;
			if (hc.header_timeout_s == 0)
				return usage_error("--header-timeout must be at least 1 second");
			break;
		case OPT_RESOLVER:
			if (nresolvers == 8 || strlen(optarg) > 22 || strchr(optarg, ','))
				return usage_error("invalid --resolver \"%s\": one IPv4 ADDR[:PORT] per "
						   "option, at most 8", optarg);
			snprintf(resolvers + strlen(resolvers), sizeof(resolvers) - strlen(resolvers),
				 "%s%s", nresolvers++ ? "," : "", optarg);
			break;
		case OPT_EGRESS_RANGE:
			if (nranges == 64)
				return usage_error("at most 64 --egress-allow-range options");
			ranges[nranges++] = optarg;
			break;
		case OPT_EGRESS_MAX_CONN:
			if (parse_uint("--egress-max-connections", optarg, 65536, &max_conn) < 0)
				return 2;
			if (max_conn == 0)
				return usage_error("--egress-max-connections must be at least 1");
			break;
		case OPT_PIP_INDEX:
			pkgcfg.pip_index = optarg;
			break;
		case OPT_NPM_REGISTRY:
			pkgcfg.npm_registry = optarg;
			break;
		case OPT_PIP_HOST:
		case OPT_NPM_HOST:
			if ((c == OPT_PIP_HOST ? npip_hosts : nnpm_hosts) == 32)
				return usage_error("at most 32 --pip-host and 32 --npm-host options");
			if (c == OPT_PIP_HOST)
				pip_hosts[npip_hosts++] = optarg;
			else
				npm_hosts[nnpm_hosts++] = optarg;
			break;
		case OPT_PACKAGE_CA:
			pkgcfg.ca_file = optarg;
			break;
		case OPT_PACKAGE_CACHE:
			if (optarg[0] != '/')
				return usage_error("invalid --package-cache \"%s\": must be an absolute "
						   "path", optarg);
			pkgcfg.cache_dir = optarg;
			break;
		case OPT_MCP_SESSIONS:
			if (parse_uint("--mcp-max-sessions", optarg, 100000, &mcfg.max_sessions) < 0)
				return 2;
			if (mcfg.max_sessions == 0)
				return usage_error("--mcp-max-sessions must be at least 1");
			break;
		case OPT_MCP_IDLE:
			if (parse_uint("--mcp-idle-timeout", optarg, 315360000, &mcfg.idle_s) < 0)
				return 2;
			if (mcfg.idle_s == 0)
				return usage_error("--mcp-idle-timeout must be at least 1 second");
			break;
		case OPT_MCP_ORIGIN:
			if (mcfg.norigins == MCP_ORIGINS_MAX)
				return usage_error("at most %d --mcp-allow-origin options", MCP_ORIGINS_MAX);
			mcfg.origins[mcfg.norigins++] = optarg;
			break;
		case 'h':
			fputs(help, stdout);
			return 0;
		case ':':
			return usage_error("option %s needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument \"%s\"", argv[optind]);
	if (ncfg.node_id && node_id_file)
		return usage_error("--node-id and --node-id-file are one or the other");
	if (check_changes_limits(&d.cfg) != 0)
		return 2;
	if (strcmp(d.cfg.default_image, "host") != 0) {
		sandlot_options_t o;
		sandlot_options_init(&o);
		o.image = d.cfg.default_image;
		o.data_dir = d.cfg.data_dir;
		sandlot_error_t *e = NULL;
		if (sandlot_options_validate(&o, &e) < 0) {
			fprintf(stderr, "sandlotd: --default-image %s: %s\n", d.cfg.default_image,
				sandlot_error_message(e));
			sandlot_error_free(e);
			return 1;
		}
	}
	ranges[nranges] = NULL;
	sandlot_net_config_t netcfg = {
		.size = sizeof(netcfg), .resolver = nresolvers ? resolvers : NULL,
		.allow_ranges = ranges,
		.max_connections = max_conn,
	};
	sandlot_error_t *nerr = NULL;
	if (sandlot_net_configure(&netcfg, &nerr) < 0) {
		int rc = usage_error("%s", sandlot_error_message(nerr));
		sandlot_error_free(nerr);
		return rc;
	}
	pip_hosts[npip_hosts] = npm_hosts[nnpm_hosts] = NULL;
	if (npip_hosts)
		pkgcfg.pip_hosts = pip_hosts;
	if (nnpm_hosts)
		pkgcfg.npm_hosts = npm_hosts;
	if (sandlot_packages_configure(&pkgcfg, &nerr) < 0) {
		int rc = usage_error("%s", sandlot_error_message(nerr));
		sandlot_error_free(nerr);
		return rc;
	}
	for (int i = 0; i < npool; i++) {
		char msg[512];
		if (pool_configure(&d, pool_args[i], msg, sizeof(msg)) < 0)
			return usage_error("%s", msg);
	}
	int have_unix = 0, have_tcp = 0;
	for (int i = 0; i < nlisten; i++) {
		if (strncmp(listens[i], "unix:", 5) == 0)
			have_unix = 1;
		else
			have_tcp = 1;
	}
	if (!have_unix && nlisten < MAX_LISTEN)
		listens[nlisten++] = "unix:/run/sandlot/sandlot.sock";
	char *token = NULL;
	if (have_tcp) {
		if (!token_file)
			return usage_error("a tcp: listener requires --token-file (every TCP request "
					   "must carry the bearer token)");
		token = read_token(token_file);
		if (!token)
			return 1;
	}
	d.cfg.token = token;
	{
		char msg[256];
		if (e2b_domain_of(e2b_domain_arg, listens, nlisten, &e2b_domain, &e2b_host_domain, msg,
				  sizeof(msg)) < 0) {
			free(token);
			return usage_error("%s", msg);
		}
		d.cfg.e2b_domain = e2b_domain;
		hc.sandbox_domain = e2b_host_domain;
	}
	/* /mcp reaches the sandboxes through this daemon's API, on its
	 * (first) unix socket. */
	for (int i = 0; i < nlisten && !mcfg.api_host; i++)
		if (strncmp(listens[i], "unix:", 5) == 0)
			mcfg.api_host = listens[i];
	if (geteuid() != 0) {
		fputs("sandlotd: must run as root (sandboxes need uid maps, cgroups and loop "
		      "devices)\n", stderr);
		return 1;
	}

	/* The node id and (cgroup v2) the move below our own cgroup: before
	 * any child or thread exists, so that all of us move. */
	{
		char msg[768];
		if (node_id_file) {
			if (node_id_from_file(node_id_file, node_id_buf, msg, sizeof(msg)) < 0) {
				fprintf(stderr, "sandlotd: %s\n", msg);
				return 1;
			}
			ncfg.node_id = node_id_buf;
		}
		if (node_configure(&d, &ncfg, msg, sizeof(msg)) < 0) {
			fprintf(stderr, "sandlotd: %s\n", msg);
			return 1;
		}
	}

	/* Before any thread: it forks.  (A daemon holds thousands of
	 * connections; libnftables cannot use a descriptor above 1023.) */
	sandlot_error_t *herr = NULL;
	if (sandlot__nft_helper_start(&herr) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(herr));
		sandlot_error_free(herr);
		return 1;
	}

	/* Signals: SIGPIPE would kill us when a client goes away mid-answer;
	 * SIGTERM/SIGINT/SIGHUP are taken by the main thread only. */
	signal(SIGPIPE, SIG_IGN);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	setvbuf(stderr, NULL, _IOLBF, 0);
	unsigned long long nofile = raise_nofile(&hc, d.cfg.max_sandboxes);

	pthread_mutex_init(&d.lock, NULL);
	pthread_mutex_init(&d.db_lock, NULL);
	pthread_mutex_init(&d.changes_lock, NULL);
	pthread_cond_init(&d.reaper_cond, NULL);
	d.started_ms = daemon_now_ms();

	sandlot_error_t *err = NULL;
	if (archive_arg && archive_configure(&d, archive_arg, &err) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		free(token);
		return 2;
	}
	if (sandlot__mkdir_p(d.cfg.data_dir, 0700) < 0) {
		fprintf(stderr, "sandlotd: create data directory %s: %s\n", d.cfg.data_dir,
			strerror(errno));
		return 1;
	}
	if (registry_open(&d, &err) < 0 || registry_load(&d, &err) < 0 ||
	    registry_load_changes(&d, &err) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		sandboxes_free(&d);
		registry_close(&d);
		free(token);
		return 1;
	}
	if (d.cfg.storage_size) {
		sandlot_options_t so;
		sandlot_options_init(&so);
		so.data_dir = d.cfg.data_dir;
		if (sandlot_storage_grow(&so, d.cfg.storage_size, &err) < 0) {
			fprintf(stderr, "sandlotd: --storage-size: %s\n", sandlot_error_message(err));
			registry_close(&d);
			return 1;
		}
	}
	changes_budget_enforce(&d);
	registry_reclaim(&d);
	/* Before recovery: a sandbox that moved to another node is not
	 * paused here any more, so recovery leaves its id alone. */
	archive_start(&d);
	sandboxes_recover(&d);
	/* Cgroups and the root tree for the next sandboxes, prepared by
	 * libsandlot in the background (a sandbox with other options still
	 * takes a prepared cgroup and changes its limits). */
	{
		sandlot_options_t o;
		prepare_options(&d, &o);
		if (sandlot_prepare(&o, PREPARED_SANDBOXES, &err) < 0) {
			daemon_log("prepare_failed", "level=warn error=\"%s\"",
				   sandlot_error_message(err));
			sandlot_error_free(err);
			err = NULL;
		}
		o.isolation = SANDLOT_ISOLATION_VM;
		if (vm_likely(&d) && sandlot_prepare(&o, 1, &err) < 0) {
			daemon_log("prepare_failed", "level=warn isolation=vm error=\"%s\"",
				   sandlot_error_message(err));
			sandlot_error_free(err);
			err = NULL;
		}
	}
	/* Only after recovery, which removes every workspace that the
	 * registry does not own — as those of pooled sandboxes are not. */
	if (pool_start(&d, &err) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		goto fail;
	}

	if (ports_start(&d, &err) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		pool_stop(&d);
		prepare_stop(&d);
		registry_close(&d);
		return 1;
	}
	/* The agent port, what HAProxy weighs this node by: a node that
	 * cannot serve it does not start. */
	if (node_start(&d, &err) < 0) {
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		ports_stop();
		pool_stop(&d);
		goto fail;
	}
	struct http_route *routes = all_routes();
	if (!routes) {
		fputs("sandlotd: out of memory\n", stderr);
		pool_stop(&d);
		goto fail;
	}
	hc.listens = listens;
	hc.nlisten = nlisten;
	hc.token = token;
	/* Before the first request: /mcp serves as soon as the rest does. */
	if (mcp_http_start(&d, &mcfg, &err) < 0) {
		daemon_log("mcp", "level=error msg=\"%s: /mcp answers 503\"", sandlot_error_message(err));
		sandlot_error_free(err);
		err = NULL;
	}
	struct http_server *server = http_start(&d, &hc, routes, &err);
	if (!server) {
		mcp_http_stop();
		fprintf(stderr, "sandlotd: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		pool_stop(&d);
		free(routes);
		goto fail;
	}
	reaper_start(&d);
	report_cgroup();
	for (int i = 0; i < nlisten; i++)
		daemon_log("listening", "address=\"%s\"%s", listens[i],
			   strncmp(listens[i], "tcp:", 4) == 0 ? " auth=bearer" : "");
	daemon_log("started", "pid=%d node_id=%s data_dir=\"%s\" max_sandboxes=%u default_ttl=%u "
		   "default_idle_timeout=%u nofile=%llu max_connections=%u "
		   "max_connections_per_peer=%u header_timeout=%u", (int)getpid(),
		   ncfg.node_id ? ncfg.node_id : "-", d.cfg.data_dir,
		   d.cfg.max_sandboxes, d.cfg.default_ttl_s, d.cfg.default_idle_s, nofile,
		   hc.max_connections, hc.max_per_peer, hc.header_timeout_s);

	int sig;
	for (;;) {
		siginfo_t si;
		sig = sigwaitinfo(&sigs, &si);
		if (sig < 0 && errno == EINTR)
			continue;
		if (sig == SIGHUP)
			continue; /* nothing to reload yet */
		break;
	}
	daemon_log("stopping", "signal=%s running=%u", sig == SIGINT ? "INT" : "TERM",
		   __atomic_load_n(&d.nrunning, __ATOMIC_SEQ_CST));
	uint64_t t0 = sandlot__now_ms();
	/* MCP sessions delete their sandboxes through the API: while it serves. */
	mcp_http_stop();
	http_quiesce(server);
	node_stop(&d);
	pool_stop(&d);
	sandboxes_shutdown(&d);
	http_stop(server, 5000);
	/* No request runs any more: nothing takes a prepared cgroup. */
	prepare_stop(&d);
	sandboxes_free(&d);
	ports_stop();
	pool_free(&d);
	registry_close(&d);
	/* Paused workspaces stay in the pool file; nothing stays mounted
	 * (unless a `sandlot run` on the same data dir is using the pool). */
	sandlot_options_t so;
	sandlot_options_init(&so);
	so.data_dir = d.cfg.data_dir;
	if (sandlot_storage_unmount(&so, &err) < 0) {
		daemon_log("storage_unmount", "level=warn error=\"%s\"", sandlot_error_message(err));
		sandlot_error_free(err);
	}
	free(routes);
	free(token);
	archive_free(&d);
	daemon_log("stopped", "ms=%llu", (unsigned long long)(sandlot__now_ms() - t0));
	return 0;

fail:
	/* Start-up failed after recovery: nothing runs yet; free what recovery
	 * and the pool loaded. */
	prepare_stop(&d);
	sandboxes_free(&d);
	pool_free(&d);
	registry_close(&d);
	free(token);
	return 1;
}
