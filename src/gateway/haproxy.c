/* HAProxy's routing maps, kept current (gateway.h, deploy/haproxy/).
 *
 *   nodes.map  NODE ADDR:PORT     every node the gateway has identified
 *   down.map   NODE SINCE         the unreachable ones (HAProxy answers 503
 *                                 node_unavailable for their ids at once)
 *   moved.map  SANDBOX NODE       sandboxes living away from the node in their id
 *
 * Two copies of each: the files in --map-dir, rewritten whole (a temporary
 * file renamed over the old one) so that a restarted HAProxy loads the
 * current maps; and HAProxy's memory, edited over its runtime API
 * (--haproxy-socket: "show map", then "add map" / "set map" / "del map"
 * for the differences only).  HAProxy names a map by the path its
 * configuration gave, so --map-dir must be spelt as the configuration's
 * SANDLOT_MAP_DIR.  Keys and values are node ids, sandbox ids and
 * addresses the gateway checked: no spaces or control characters reach a
 * command line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "gateway/gateway.h"

#define ANSWER_MAX (16u << 20)

/* One runtime API command; returns HAProxy's answer (malloc'd) or NULL. */
static char *runtime(const char *cmd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(g.cfg.haproxy_socket) >= sizeof sa.sun_path)
		return NULL;
	strcpy(sa.sun_path, g.cfg.haproxy_socket);
	cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		return NULL;
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (sandlot__write_all(fd, cmd, strlen(cmd)) < 0)
		return NULL;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			return NULL;
		if (len + 1 == cap) {
			if (cap >= ANSWER_MAX) {
				free(buf);
				return NULL;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return buf;
}

static int write_map_file(const char *name, json_t *want)
{
	cleanup_free char *path = NULL, *tmp = NULL;
	if (asprintf(&path, "%s/%s", g.cfg.map_dir, name) < 0 ||
	    asprintf(&tmp, "%s/.%s.tmp", g.cfg.map_dir, name) < 0)
		return -1;
	FILE *f = fopen(tmp, "we");
	if (!f) {
		gw_log("map_write_failed", "path=%s error=\"%s\"", tmp, strerror(errno));
		return -1;
	}
	fprintf(f, "# written by sandlot-gateway; edits are overwritten\n");
	const char *k;
	json_t *v;
	json_object_foreach(want, k, v)
		fprintf(f, "%s %s\n", k, json_string_value(v));
	if (fflush(f) || fsync(fileno(f)) || ferror(f)) {
		gw_log("map_write_failed", "path=%s error=\"%s\"", tmp, strerror(errno));
		fclose(f);
		unlink(tmp);
		return -1;
	}
	fclose(f);
	if (rename(tmp, path) < 0) {
		gw_log("map_write_failed", "path=%s error=\"%s\"", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* HAProxy's copy of one map to `want`: returns the number of failed
 * commands, or -1 if HAProxy could not be asked at all. */
static int runtime_sync(const char *name, json_t *want)
{
	cleanup_free char *path = NULL, *cmd = NULL;
	if (asprintf(&path, "%s/%s", g.cfg.map_dir, name) < 0 || asprintf(&cmd, "show map %s\n", path) < 0)
		return -1;
	cleanup_free char *shown = runtime(cmd);
	if (!shown) {
		gw_log("haproxy_unreachable", "socket=%s error=\"%s\"", g.cfg.haproxy_socket, strerror(errno));
		return -1;
	}
	/* "0x55c3a1b0 KEY VALUE" per entry; anything else is an error text. */
	json_t *have = json_object();
	for (char *line = shown, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (!*line)
			continue;
		char ptr[64], key[256], val[256];
		if (sscanf(line, "%63s %255s %255s", ptr, key, val) != 3 || strncmp(ptr, "0x", 2)) {
			gw_log("haproxy_error", "command=\"show map %s\" answer=\"%.200s\"", path, line);
			json_decref(have);
			return -1;
		}
		json_object_set_new(have, key, json_string(val));
	}
	int failed = 0;
	const char *k;
	json_t *v;
	json_object_foreach(want, k, v) {
		const char *old = json_string_value(json_object_get(have, k));
		if (old && !strcmp(old, json_string_value(v)))
			continue;
		cleanup_free char *c = NULL;
		if (asprintf(&c, "%s map %s %s %s\n", old ? "set" : "add", path, k, json_string_value(v)) < 0)
			continue;
		cleanup_free char *ans = runtime(c);
		if (!ans || (ans[0] && ans[0] != '\n')) {
			gw_log("haproxy_error", "command=\"%.*s\" answer=\"%.200s\"", (int)strlen(c) - 1, c,
			       ans ? ans : "(none)");
			failed++;
		}
	}
	json_object_foreach(have, k, v) {
		if (json_object_get(want, k))
			continue;
		cleanup_free char *c = NULL;
		if (asprintf(&c, "del map %s %s\n", path, k) < 0)
			continue;
		cleanup_free char *ans = runtime(c);
		if (!ans || (ans[0] && ans[0] != '\n')) {
			gw_log("haproxy_error", "command=\"%.*s\" answer=\"%.200s\"", (int)strlen(c) - 1, c,
			       ans ? ans : "(none)");
			failed++;
		}
	}
	json_decref(have);
	return failed;
}

static int maps_sync(void);

/* One sync at a time: the poller's and a create's (a moved sandbox). */
int gw_maps_sync(void)
{
	static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;
	if (!g.cfg.map_dir)
		return 0;
	pthread_mutex_lock(&sync_lock);
	int rc = maps_sync();
	pthread_mutex_unlock(&sync_lock);
	return rc;
}

static int maps_sync(void)
{
	json_t *nodes = json_object(), *down = json_object(), *moved;
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < g.n; i++) {
		struct node *nd = g.nodes[i];
		if (!nd->id[0])
			continue;
		json_object_set_new(nodes, nd->id, json_string(nd->addr));
		if (nd->state == NODE_UNREACHABLE) {
			char since[32];
			snprintf(since, sizeof since, "%llu", (unsigned long long)(nd->down_since_ms / 1000));
			json_object_set_new(down, nd->id, json_string(since));
		}
	}
	moved = json_deep_copy(g.moved);
	pthread_mutex_unlock(&g.lock);
	static const char *const names[] = { "nodes.map", "down.map", "moved.map" };
	json_t *maps[] = { nodes, down, moved };
	/* The files change only with the maps (no write, no fsync each poll). */
	static json_t *written[3];
	int rc = 0;
	for (int i = 0; i < 3; i++) {
		if (!written[i] || !json_equal(written[i], maps[i])) {
			if (write_map_file(names[i], maps[i]) < 0) {
				rc = -1;
			} else {
				json_decref(written[i]);
				written[i] = json_incref(maps[i]);
			}
		}
		if (g.cfg.haproxy_socket && runtime_sync(names[i], maps[i]) != 0)
			rc = -1;
		json_decref(maps[i]);
	}
	return rc;
}
