/* sandlotd as one node of a fleet: see node.h and docs/fleet.md. */
#include "daemon/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/sbid.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "linux/cgroup.h"

/* What the node has, decided once at start-up (node_configure). */
static struct {
	struct node_config cfg;
	char id[SANDLOT_NODE_ID_MAX + 1];
	uint64_t memory_total;       /* --node-memory, else our cgroup's limit, else MemTotal */
	const char *memory_source;   /* "flag", "cgroup", "host" */
	uint32_t cpus_total_milli;   /* --node-cpus, else our cgroup's quota, else online CPUs */
	char cgroup[PATH_MAX];       /* v2: the cgroup the sandboxes are nested below, or "" */
	int draining;                /* POST /v1/node/drain (atomic) */
	/* Admitted creations not in the table yet (under d->lock). */
	uint64_t pending_memory;
	uint64_t pending_cpus_milli;
	/* The agent port. */
	int agent_fd, stop_pipe[2];
	uint16_t agent_port;
	pthread_t agent;
	int agent_started;
} node = { .agent_fd = -1, .stop_pipe = { -1, -1 } };

/* ---- the node id --------------------------------------------------------- */

int node_id_from_file(const char *path, char buf[16], char *msg, size_t n)
{
	char *text = sandlot__read_file(path, 4096);
	if (text) {
		size_t len = strcspn(text, "\r\n");
		text[len] = '\0';
		int ok = sandlot__node_id_ok(text, len);
		if (ok)
			memcpy(buf, text, len + 1);
		else
			snprintf(msg, n, "--node-id-file %s: \"%.32s\" is not a node id: expected 1 to %d "
				 "of [a-z0-9]", path, text, SANDLOT_NODE_ID_MAX);
		free(text);
		return ok ? 0 : -1;
	}
	if (errno != ENOENT) {
		snprintf(msg, n, "--node-id-file %s: %s", path, strerror(errno));
		return -1;
	}
	/* A new node: a random id, kept for good (the ids on its disk carry
	 * it).  Five base32 characters: 2^25 names, the fleet's nodes are few. */
	char id[32];
	sandlot__new_id("", id);
	id[5] = '\0';
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		snprintf(msg, n, "--node-id-file %s: path too long", path);
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	char line[8];
	int len = snprintf(line, sizeof(line), "%s\n", id);
	int ok = fd >= 0 && sandlot__write_all(fd, line, (size_t)len) == 0 && fsync(fd) == 0;
	int saved = errno;
	if (fd >= 0)
		close(fd);
	/* link, not rename: of two daemons racing, one id wins and both use it. */
	if (ok && link(tmp, path) < 0 && errno != EEXIST) {
		saved = errno;
		ok = 0;
	}
	unlink(tmp);
	if (!ok) {
		snprintf(msg, n, "--node-id-file %s: cannot write a new node id: %s", path,
			 strerror(saved));
		return -1;
	}
	return node_id_from_file(path, buf, msg, n);
}

/* ---- our own cgroup ------------------------------------------------------ */

/* The path of this process in the v2 hierarchy ("0::PATH") and in v1's
 * `controller` one, from /proc/self/cgroup; "" when absent. */
static void own_cgroups(char v2[PATH_MAX], const char *controller, char v1[PATH_MAX])
{
	v2[0] = v1[0] = '\0';
	char *text = sandlot__read_file("/proc/self/cgroup", 65536);
	if (!text)
		return;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrls = c1 + 1, *path = c2 + 1;
		if (!*ctrls) {
			snprintf(v2, PATH_MAX, "%s", path);
			continue;
		}
		char list[256], want[64];
		snprintf(list, sizeof(list), ",%s,", ctrls);
		snprintf(want, sizeof(want), ",%s,", controller);
		if (strstr(list, want))
			snprintf(v1, PATH_MAX, "%s", path);
	}
	free(text);
}

static uint64_t read_u64(const char *path)
{
	char *t = sandlot__read_file(path, 64);
	if (!t)
		return 0;
	char *end;
	unsigned long long v = strtoull(t, &end, 10);
	/* "max", or v1's "no limit" (the largest page multiple of a long) */
	if (end == t || (*end && *end != '\n') || v >= (1ull << 62))
		v = 0;
	free(t);
	return v;
}

/* On cgroup v2 (containerd and CRI-O give a privileged container the
 * host's hierarchy, read-write, and no cgroup namespace of its own), make
 * the sandboxes' cgroups children of ours, so that the pod's limits bound
 * them and kubelet sees what they use: the cgroup v2 "no internal
 * processes" rule wants us out of it first, in a leaf "sandlotd" beside
 * the sandboxes' parent "sandlot" (what moby's hack/dind does with "init").
 * Before any other thread or child exists: the move is the whole process. */
static int nest_cgroup(char *msg, size_t n)
{
	if (strcmp(sandlot__cgroup_mode(), "v2") != 0) {
		daemon_log("cgroup_nest", "nested=no reason=\"not cgroup v2 (%s): sandbox cgroups "
			   "stay at the top of each hierarchy\"", sandlot__cgroup_mode());
		return 0;
	}
	char own[PATH_MAX], unused[PATH_MAX];
	own_cgroups(own, "memory", unused);
	const char *root = sandlot__cgroup_v2_root();
	if (!own[0] || strcmp(own, "/") == 0) {
		daemon_log("cgroup_nest", "nested=no reason=\"sandlotd runs in the root cgroup\"");
		return 0;
	}
	/* Already in our leaf (a restart in the same cgroup, a re-exec). */
	size_t ol = strlen(own);
	if (ol > 9 && strcmp(own + ol - 9, "/sandlotd") == 0)
		own[ol - 9] = '\0';
	char dir[PATH_MAX], leaf[PATH_MAX], procs[PATH_MAX];
	if (sandlot__cg_pathf(dir, "%s%s", root, own) < 0 ||
	    sandlot__cg_pathf(leaf, "%s/sandlotd", dir) < 0 ||
	    sandlot__cg_pathf(procs, "%s/cgroup.procs", leaf) < 0) {
		snprintf(msg, n, "sandlotd's cgroup path %.200s is too long", own);
		return -1;
	}
	if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
		snprintf(msg, n, "cannot nest sandbox cgroups below sandlotd's cgroup: mkdir %s: %s "
			 "(without --cgroup-nest they go under %s/sandlot)", leaf, strerror(errno), root);
		return -1;
	}
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if (sandlot__write_file(procs, pid, 0) < 0) {
		snprintf(msg, n, "cannot nest sandbox cgroups below sandlotd's cgroup: move into %s: "
			 "%s (without --cgroup-nest they go under %s/sandlot)", leaf, strerror(errno),
			 root);
		return -1;
	}
	/* Anyone else left in our cgroup keeps its subtree_control closed:
	 * the sandboxes' limits could not be applied there. */
	char others[PATH_MAX];
	char *left = NULL;
	if (sandlot__cg_pathf(others, "%s/cgroup.procs", dir) == 0)
		left = sandlot__read_file(others, 4096);
	if (left && left[0]) {
		left[strcspn(left, "\n")] = '\0';
		snprintf(msg, n, "cannot nest sandbox cgroups below sandlotd's cgroup %s: other "
			 "processes are in it (pid %s...); run sandlotd in a cgroup of its own (a "
			 "container, a systemd unit with Delegate=yes) or leave out --cgroup-nest", dir,
			 left);
		free(left);
		return -1;
	}
	free(left);
	if (sandlot__cgroup_v2_nest(dir) < 0) {
		snprintf(msg, n, "cannot nest sandbox cgroups below %s: %s", dir, strerror(errno));
		return -1;
	}
	snprintf(node.cgroup, sizeof(node.cgroup), "%s", dir);
	daemon_log("cgroup_nest", "nested=yes cgroup=\"%s\" sandboxes=\"%s/sandlot\" daemon=\"%s\"",
		   dir, dir, leaf);
	return 0;
}

/* The memory and CPUs the node may give its sandboxes, unless flags say. */
static void find_totals(void)
{
	char v2[PATH_MAX], v1mem[PATH_MAX], v1cpu[PATH_MAX], unused[PATH_MAX], f[PATH_MAX];
	own_cgroups(v2, "memory", v1mem);
	own_cgroups(unused, "cpu", v1cpu);
	const char *v2dir = node.cgroup[0] ? node.cgroup : NULL;
	char v2own[PATH_MAX] = "";
	if (!v2dir && v2[0] && strcmp(sandlot__cgroup_mode(), "v2") == 0 &&
	    sandlot__cg_pathf(v2own, "%s%s", sandlot__cgroup_v2_root(), v2) == 0)
		v2dir = v2own;

	node.memory_source = "flag";
	node.memory_total = node.cfg.memory_limit;
	if (!node.memory_total) {
		node.memory_source = "cgroup";
		if (v2dir && sandlot__cg_pathf(f, "%s/memory.max", v2dir) == 0)
			node.memory_total = read_u64(f);
		if (!node.memory_total && v1mem[0] &&
		    sandlot__cg_pathf(f, "%s/memory%s/memory.limit_in_bytes",
				      sandlot__cgroup_v1_root(),
				      strcmp(v1mem, "/") == 0 ? "" : v1mem) == 0)
			node.memory_total = read_u64(f);
	}
	if (!node.memory_total) {
		node.memory_source = "host";
		long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
		node.memory_total = pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
	}

	node.cpus_total_milli = node.cfg.cpus_limit_milli;
	if (!node.cpus_total_milli && v2dir && sandlot__cg_pathf(f, "%s/cpu.max", v2dir) == 0) {
		char *t = sandlot__read_file(f, 64);
		unsigned long long quota, period;
		if (t && sscanf(t, "%llu %llu", &quota, &period) == 2 && period)
			node.cpus_total_milli = (uint32_t)(quota * 1000 / period);
		free(t);
	}
	if (!node.cpus_total_milli && v1cpu[0]) {
		const char *p = strcmp(v1cpu, "/") == 0 ? "" : v1cpu;
		char q[PATH_MAX];
		if (sandlot__cg_pathf(f, "%s/cpu%s/cpu.cfs_quota_us", sandlot__cgroup_v1_root(), p) ==
			    0 &&
		    sandlot__cg_pathf(q, "%s/cpu%s/cpu.cfs_period_us", sandlot__cgroup_v1_root(), p) ==
			    0) {
			uint64_t quota = read_u64(f), period = read_u64(q);
			if (quota && period)
				node.cpus_total_milli = (uint32_t)(quota * 1000 / period);
		}
	}
	if (!node.cpus_total_milli) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		node.cpus_total_milli = cpus > 0 ? (uint32_t)cpus * 1000 : 1000;
	}
}

int node_configure(struct daemon *d, const struct node_config *cfg, char *msg, size_t n)
{
	node.cfg = *cfg;
	if (cfg->node_id) {
		if (sandlot__node_id_set(cfg->node_id) < 0) {
			snprintf(msg, n, "invalid --node-id \"%.32s\": expected 1 to %d of [a-z0-9]",
				 cfg->node_id, SANDLOT_NODE_ID_MAX);
			return -1;
		}
		snprintf(node.id, sizeof(node.id), "%s", cfg->node_id);
		d->cfg.node_id = node.id;
	}
	if (cfg->cgroup_nest && nest_cgroup(msg, n) < 0)
		return -1;
	find_totals();
	return 0;
}

/* ---- capacity ------------------------------------------------------------ */

struct capacity {
	unsigned sandboxes, max_sandboxes;
	uint64_t memory_allocated;
	uint64_t cpus_allocated_milli;
	const char *state;  /* ready, full, stopping */
	int score;          /* 0..100 */
};

/* Memory and CPU quotas of the live sandboxes in the table plus the
 * admitted creations (d->lock held).  A paused sandbox in transition is
 * being resumed (admitted) or finishing its pause: it counts, a moment
 * too long at worst. */
static void allocated_locked(struct daemon *d, uint64_t *mem, uint64_t *cpus)
{
	*mem = node.pending_memory;
	*cpus = node.pending_cpus_milli;
	for (size_t i = 0; i < d->nsbs; i++) {
		struct dsb *s = d->sbs[i];
		pthread_mutex_lock(&s->lock);
		int counts = dsb_state_live(s->state) || (s->state == DSB_PAUSED && s->transition);
		if (counts && s->options) {
			json_t *m = json_object_get(s->options, "memory");
			json_t *c = json_object_get(s->options, "cpus");
			if (json_is_integer(m) && json_integer_value(m) > 0)
				*mem += (uint64_t)json_integer_value(m);
			if (json_is_number(c) && json_number_value(c) > 0)
				*cpus += (uint64_t)(json_number_value(c) * 1000.0 + 0.5);
		}
		pthread_mutex_unlock(&s->lock);
	}
}

/* Free share of one enforced limit, in percent. */
static int free_pct(uint64_t used, uint64_t limit)
{
	if (!limit)
		return 100;
	return used >= limit ? 0 : (int)((limit - used) * 100 / limit);
}

static void capacity_locked(struct daemon *d, unsigned live, struct capacity *c)
{
	memset(c, 0, sizeof(*c));
	c->sandboxes = live;
	c->max_sandboxes = d->cfg.max_sandboxes;
	allocated_locked(d, &c->memory_allocated, &c->cpus_allocated_milli);
	int score = free_pct(live, c->max_sandboxes);
	int full = live >= c->max_sandboxes;
	if (node.cfg.memory_limit) {
		int p = free_pct(c->memory_allocated, node.cfg.memory_limit);
		score = p < score ? p : score;
		/* No room for a sandbox of the default size: full. */
		full |= c->memory_allocated + (512ull << 20) > node.cfg.memory_limit;
	}
	if (node.cfg.cpus_limit_milli) {
		int p = free_pct(c->cpus_allocated_milli, node.cfg.cpus_limit_milli);
		score = p < score ? p : score;
		full |= c->cpus_allocated_milli >= node.cfg.cpus_limit_milli;
	}
	if (d->stopping) {
		c->state = "stopping";
		c->score = 0;
	} else if (__atomic_load_n(&node.draining, __ATOMIC_RELAXED)) {
		c->state = "draining";
		c->score = 0;
	} else if (full) {
		c->state = "full";
		c->score = 0;
	} else {
		c->state = "ready";
		c->score = score < 1 ? 1 : score; /* ready takes creations: never weight 0 */
	}
}

static void capacity_now(struct daemon *d, struct capacity *c)
{
	pthread_mutex_lock(&d->lock);
	unsigned live = __atomic_load_n(&d->nrunning, __ATOMIC_SEQ_CST) + d->ncreating;
	capacity_locked(d, live, c);
	pthread_mutex_unlock(&d->lock);
}

static int check_locked(struct daemon *d, uint64_t memory, uint32_t cpus_milli, unsigned live,
			sandlot_error_t **err);

int node_admit_locked(struct daemon *d, const sandlot_options_t *opts, unsigned live,
		      sandlot_error_t **err)
{
	if (check_locked(d, opts->memory_bytes, opts->cpus_milli, live, err) < 0)
		return -1;
	node.pending_memory += opts->memory_bytes;
	node.pending_cpus_milli += opts->cpus_milli;
	return 0;
}

int node_resume_admit_locked(struct daemon *d, struct dsb *s, unsigned live, sandlot_error_t **err)
{
	uint64_t mem = 0;
	uint32_t cpus = 0;
	pthread_mutex_lock(&s->lock);
	json_t *m = json_object_get(s->options, "memory");
	json_t *c = json_object_get(s->options, "cpus");
	if (json_is_integer(m) && json_integer_value(m) > 0)
		mem = (uint64_t)json_integer_value(m);
	if (json_is_number(c) && json_number_value(c) > 0)
		cpus = (uint32_t)(json_number_value(c) * 1000.0 + 0.5);
	pthread_mutex_unlock(&s->lock);
	if (check_locked(d, mem, cpus, live, err) < 0) {
		sandlot__error_wrap(err, "sandbox %s stays paused", s->id);
		return -1;
	}
	return 0;
}

static int check_locked(struct daemon *d, uint64_t memory, uint32_t cpus_milli, unsigned live,
			sandlot_error_t **err)
{
	if (__atomic_load_n(&node.draining, __ATOMIC_RELAXED))
		return sandlot__error(err, DOMAIN_ENODEFULL,
				      "node %s is draining: it takes no new or resumed sandboxes "
				      "(POST /v1/node/drain {\"draining\": false} ends that); try "
				      "another node", node.id[0] ? node.id : "(this daemon)");
	if (live >= d->cfg.max_sandboxes) {
		if (!node.id[0])
			return sandlot__error(err, EAGAIN,
					      "%u sandboxes are running or starting, the limit of this "
					      "daemon (--max-sandboxes)", live);
		return sandlot__error(err, DOMAIN_ENODEFULL,
				      "node %s is full: %u sandboxes are running or starting, its "
				      "--max-sandboxes; try another node", node.id, live);
	}
	uint64_t mem = 0, cpus = 0;
	if (node.cfg.memory_limit || node.cfg.cpus_limit_milli)
		allocated_locked(d, &mem, &cpus);
	const char *who = node.id[0] ? node.id : "this daemon";
	if (node.cfg.memory_limit && mem + memory > node.cfg.memory_limit)
		return sandlot__error(err, DOMAIN_ENODEFULL,
				      "node %s is full: its sandboxes' memory limits add up to %llu "
				      "bytes, and %llu more would pass its --node-memory of %llu",
				      who, (unsigned long long)mem,
				      (unsigned long long)memory,
				      (unsigned long long)node.cfg.memory_limit);
	if (node.cfg.cpus_limit_milli && cpus_milli && cpus + cpus_milli > node.cfg.cpus_limit_milli)
		return sandlot__error(err, DOMAIN_ENODEFULL,
				      "node %s is full: its sandboxes' CPU quotas add up to %.3f CPUs, "
				      "and %.3f more would pass its --node-cpus of %.3f", who,
				      (double)cpus / 1000, (double)cpus_milli / 1000,
				      (double)node.cfg.cpus_limit_milli / 1000);
	return 0;
}

void node_settle_locked(struct daemon *d, const sandlot_options_t *opts)
{
	(void)d;
	node.pending_memory -= opts->memory_bytes;
	node.pending_cpus_milli -= opts->cpus_milli;
}

void node_settle(struct daemon *d, const sandlot_options_t *opts)
{
	pthread_mutex_lock(&d->lock);
	node_settle_locked(d, opts);
	pthread_mutex_unlock(&d->lock);
}

void node_health(struct daemon *d, json_t *o)
{
	struct capacity c;
	capacity_now(d, &c);
	json_object_set_new(o, "node_id", node.id[0] ? json_string(node.id) : json_null());
	json_object_set_new(o, "state", json_string(c.state));
	json_t *cap = json_object();
	json_object_set_new(cap, "score", json_integer(c.score));
	json_object_set_new(cap, "sandboxes", json_integer(c.sandboxes));
	json_object_set_new(cap, "max_sandboxes", json_integer(c.max_sandboxes));
	json_object_set_new(cap, "memory_total", json_integer((json_int_t)node.memory_total));
	json_object_set_new(cap, "memory_allocated", json_integer((json_int_t)c.memory_allocated));
	json_object_set_new(cap, "memory_enforced", json_boolean(node.cfg.memory_limit != 0));
	json_object_set_new(cap, "cpus_milli", json_integer(node.cpus_total_milli));
	json_object_set_new(cap, "cpus_allocated_milli",
			    json_integer((json_int_t)c.cpus_allocated_milli));
	json_object_set_new(cap, "cpus_enforced", json_boolean(node.cfg.cpus_limit_milli != 0));
	struct statvfs sv;
	if (d->cfg.data_dir && statvfs(d->cfg.data_dir, &sv) == 0) {
		json_object_set_new(cap, "disk_total",
				    json_integer((json_int_t)((uint64_t)sv.f_blocks * sv.f_frsize)));
		json_object_set_new(cap, "disk_free",
				    json_integer((json_int_t)((uint64_t)sv.f_bavail * sv.f_frsize)));
	}
	double load[1];
	if (getloadavg(load, 1) == 1)
		json_object_set_new(cap, "load1", json_real(load[0]));
	json_object_set_new(o, "capacity", cap);
	if (node.agent_port)
		json_object_set_new(o, "agent_port", json_integer(node.agent_port));
	if (node.cgroup[0])
		json_object_set_new(o, "cgroup", json_string(node.cgroup));
}

/* ---- routes ---------------------------------------------------------------- */

/* POST /v1/node/drain {"draining": true|false}: a draining node takes no
 * new or resumed sandboxes (503 node_full), says "draining" in /v1/health
 * and "drain" on the agent port; its running sandboxes go on.  What an
 * operator does before it upgrades or removes a node.  Answers as GET
 * /v1/health does. */
static int drain(struct http_req *req)
{
	json_t *v = json_is_object(req->json) ? json_object_get(req->json, "draining") : NULL;
	if (!json_is_boolean(v) || json_object_size(req->json) != 1)
		return http_error(req, 400, "bad_request",
				  "expected {\"draining\": true} or {\"draining\": false}");
	int on = json_is_true(v);
	int was = __atomic_exchange_n(&node.draining, on, __ATOMIC_SEQ_CST);
	if (was != on)
		daemon_log("node_drain", "draining=%s", on ? "yes" : "no");
	json_t *o = json_object();
	node_health(req->d, o);
	return http_json(req, 200, o);
}

const struct http_route node_routes[] = {
	{ "POST", "/v1/node/drain", HTTP_JSON, drain, NULL, NULL, NULL },
	{ 0 },
};

/* ---- the agent-check port ------------------------------------------------ */

/* HAProxy's agent protocol (haproxy-doc, "agent-check"): one line, then
 * the connection closes.  "N% ready" sets the server's weight to N% of its
 * configured one; "drain" sets it to 0 and keeps it up (a full node takes
 * no creations, its sandboxes' calls still reach it); "down#reason" while
 * stopping. */
static int agent_line(struct daemon *d, char *buf, size_t n)
{
	struct capacity c;
	capacity_now(d, &c);
	if (strcmp(c.state, "stopping") == 0)
		return snprintf(buf, n, "down#stopping\n");
	if (strcmp(c.state, "ready") != 0)
		return snprintf(buf, n, "drain\n");
	return snprintf(buf, n, "%d%% ready\n", c.score);
}

static void *agent_main(void *arg)
{
	struct daemon *d = arg;
	for (;;) {
		struct pollfd p[2] = { { node.agent_fd, POLLIN, 0 }, { node.stop_pipe[0], POLLIN, 0 } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		int c = accept4(node.agent_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0)
			continue;
		char line[64];
		int len = agent_line(d, line, sizeof(line));
		/* A few bytes into a fresh socket's empty buffer: never blocks. */
		if (send(c, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			daemon_log("agent", "level=warn msg=\"send: %s\"", strerror(errno));
		close(c);
	}
	return NULL;
}

/* [HOST:]PORT into an IPv4 address; HOST defaults to 0.0.0.0. */
static int agent_addr(const char *arg, struct sockaddr_in *sa, sandlot_error_t **err)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	const char *colon = strrchr(arg, ':');
	const char *port = colon ? colon + 1 : arg;
	char host[64] = "0.0.0.0";
	if (colon) {
		size_t hl = (size_t)(colon - arg);
		if (hl == 0 || hl >= sizeof(host))
			goto bad;
		memcpy(host, arg, hl);
		host[hl] = '\0';
	}
	char *end;
	errno = 0;
	unsigned long p = strtoul(port, &end, 10);
	if (!*port || *end || errno || p > 65535 || port[0] < '0' || port[0] > '9' ||
	    inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		goto bad;
	sa->sin_port = htons((uint16_t)p);
	return 0;
bad:
	return sandlot__error(err, EINVAL, "invalid --agent-port \"%.100s\": expected [IPV4:]PORT, "
			      "e.g. 7071 or 127.0.0.1:7071", arg);
}

int node_start(struct daemon *d, sandlot_error_t **err)
{
	if (!node.cfg.agent_listen)
		return 0;
	struct sockaddr_in sa;
	if (agent_addr(node.cfg.agent_listen, &sa, err) < 0)
		return -1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sandlot__error_errno(err, e, "--agent-port %s", node.cfg.agent_listen);
	}
	socklen_t sl = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	if (pipe2(node.stop_pipe, O_CLOEXEC) < 0) {
		int e = errno;
		close(fd);
		return sandlot__error_errno(err, e, "pipe");
	}
	node.agent_fd = fd;
	node.agent_port = ntohs(sa.sin_port);
	if (pthread_create(&node.agent, NULL, agent_main, d) != 0) {
		node_stop(d);
		return sandlot__error(err, EAGAIN, "cannot start the agent port's thread");
	}
	node.agent_started = 1;
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
	daemon_log("agent_listening", "address=\"%s:%u\"", ip, (unsigned)node.agent_port);
	return 0;
}

void node_stop(struct daemon *d)
{
	(void)d;
	if (node.agent_started) {
		ssize_t w = write(node.stop_pipe[1], "x", 1);
		(void)w;
		pthread_join(node.agent, NULL);
		node.agent_started = 0;
	}
	for (int i = 0; i < 2; i++)
		if (node.stop_pipe[i] >= 0) {
			close(node.stop_pipe[i]);
			node.stop_pipe[i] = -1;
		}
	if (node.agent_fd >= 0) {
		close(node.agent_fd);
		node.agent_fd = -1;
	}
}
