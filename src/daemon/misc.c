/* Health, Prometheus metrics and the structured log. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/node.h"

#ifndef SANDLOT_VERSION
#define SANDLOT_VERSION "0.1.0"
#endif

int64_t daemon_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One line per call, written with a single write so lines of concurrent
 * threads never interleave.  A message that starts with "level=X " sets
 * the level (default info). */
void daemon_log_quote(char *s)
{
	for (char *p = s; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
			*p = '\'';
}

void daemon_log(const char *event, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *level = "info";
	char lv[16];
	const char *rest = msg;
	if (strncmp(msg, "level=", 6) == 0) {
		size_t n = strcspn(msg + 6, " ");
		if (n > 0 && n < sizeof(lv)) {
			memcpy(lv, msg + 6, n);
			lv[n] = '\0';
			level = lv;
			rest = msg + 6 + n;
			while (*rest == ' ')
				rest++;
		}
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char line[2300];
	int n = snprintf(line, sizeof(line),
			 "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s%s%s\n",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, ts.tv_nsec / 1000000, level, event, *rest ? " " : "", rest);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	fwrite(line, 1, (size_t)n, stderr);
}

#ifdef SANDLOT_FAULT_INJECTION
void daemon_fault(const char *name)
{
	const char *armed = getenv("SANDLOT_FAULT");
	if (!armed || strcmp(armed, name) != 0)
		return;
	daemon_log("fault_point", "point=%s", name);
	raise(SIGSTOP);
}

__attribute__((constructor)) static void fault_announce(void)
{
	const char *armed = getenv("SANDLOT_FAULT");
	if (armed && *armed)
		daemon_log("fault_injection", "point=%s", armed);
}
#endif

static int health(struct http_req *req)
{
	struct daemon *d = req->d;
	json_t *o = json_object();
	int stopping = __atomic_load_n(&d->stopping, __ATOMIC_RELAXED);
	json_object_set_new(o, "status", json_string(stopping ? "stopping" : "ok"));
	json_object_set_new(o, "version", json_string(SANDLOT_VERSION));
	json_object_set_new(o, "sandboxes",
			    json_integer(__atomic_load_n(&d->nrunning, __ATOMIC_RELAXED)));
	json_object_set_new(o, "uptime_seconds",
			    json_integer((daemon_now_ms() - d->started_ms) / 1000));
	json_t *pool = pool_health(d);
	if (pool)
		json_object_set_new(o, "pool", pool);
	node_health(d, o);
	return http_json(req, 200, o);
}

struct buf {
	char *p;
	size_t len, cap;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bprintf(struct buf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 8192;
		while (cap < b->len + (size_t)n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return;
		b->p = np;
		b->cap = cap;
	}
}

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static void counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
		(unsigned long long)v);
}

static int metrics(struct http_req *req)
{
	struct daemon *d = req->d;
	struct daemon_metrics *m = &d->m;
	struct buf b = { 0 };
	unsigned counts[DSB_NSTATES];
	dsb_count_states(d, counts);
	bprintf(&b, "# HELP sandlot_sandboxes Sandboxes known to sandlotd, by state.\n"
		    "# TYPE sandlot_sandboxes gauge\n");
	for (int s = 0; s < DSB_NSTATES; s++)
		bprintf(&b, "sandlot_sandboxes{state=\"%s\"} %u\n",
			dsb_state_name((enum dsb_state)s), counts[s]);
	bprintf(&b, "# HELP sandlot_teardowns_pending Ended sandboxes whose processes, cgroup and "
		    "workspace are still being freed in the background.\n"
		    "# TYPE sandlot_teardowns_pending gauge\nsandlot_teardowns_pending %u\n",
		dsb_teardowns_pending());
	counter(&b, "sandlot_sandboxes_created_total", "Sandboxes created.",
		LOAD(m->sandboxes_created));
	counter(&b, "sandlot_sandboxes_ended_total",
		"Sandboxes ended (expired, deleted, failed, lost).", LOAD(m->sandboxes_ended));
	counter(&b, "sandlot_sandbox_create_failures_total", "Sandbox creations that failed.",
		LOAD(m->create_failures));
	counter(&b, "sandlot_execs_started_total", "Commands started.", LOAD(m->execs_started));
	counter(&b, "sandlot_execs_finished_total", "Commands that ended.",
		LOAD(m->execs_finished));
	counter(&b, "sandlot_exec_failures_total", "Commands that could not start.",
		LOAD(m->exec_failures));
	counter(&b, "sandlot_exec_timeouts_total", "Commands killed by their timeout.",
		LOAD(m->exec_timeouts));
	static const char *const le[8] = { "0.01", "0.05", "0.1", "0.5", "1", "5", "30", "+Inf" };
	bprintf(&b, "# HELP sandlot_exec_duration_seconds Wall time of finished commands.\n"
		    "# TYPE sandlot_exec_duration_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i < 8; i++) {
		cum += LOAD(m->exec_ms_bucket[i]);
		bprintf(&b, "sandlot_exec_duration_seconds_bucket{le=\"%s\"} %llu\n", le[i],
			(unsigned long long)cum);
	}
	bprintf(&b, "sandlot_exec_duration_seconds_sum %.3f\n",
		(double)LOAD(m->exec_ms_sum) / 1000.0);
	bprintf(&b, "sandlot_exec_duration_seconds_count %llu\n", (unsigned long long)cum);
	counter(&b, "sandlot_http_requests_total", "HTTP requests answered.", LOAD(m->requests));
	counter(&b, "sandlot_http_errors_total", "HTTP requests answered with a 5xx status.",
		LOAD(m->request_errors));
	counter(&b, "sandlot_bytes_uploaded_total", "File bytes written into sandboxes.",
		LOAD(m->bytes_uploaded));
	counter(&b, "sandlot_bytes_downloaded_total", "File bytes read from sandboxes.",
		LOAD(m->bytes_downloaded));
	bprintf(&b, "# HELP sandlot_changes_bytes Changes logs of every sandbox plus the scans in "
		    "progress, as --changes-total-bytes counts them.\n"
		    "# TYPE sandlot_changes_bytes gauge\nsandlot_changes_bytes %llu\n",
		(unsigned long long)changes_budget_in_use(d));
	char *net = network_metrics();
	if (net) {
		bprintf(&b, "%s", net);
		free(net);
	}
	char *pool = pool_metrics(d);
	if (pool) {
		bprintf(&b, "%s", pool);
		free(pool);
	}
	char *ports = ports_metrics();
	if (ports) {
		bprintf(&b, "%s", ports);
		free(ports);
	}
	char *http = d->http ? http_metrics(d->http) : NULL;
	if (http) {
		bprintf(&b, "%s", http);
		free(http);
	}
	bprintf(&b, "# HELP sandlot_uptime_seconds Seconds since sandlotd started.\n"
		    "# TYPE sandlot_uptime_seconds gauge\nsandlot_uptime_seconds %lld\n",
		(long long)((daemon_now_ms() - d->started_ms) / 1000));
	if (!b.p)
		return http_error(req, 500, "internal", "out of memory");
	http_text(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.p);
	free(b.p);
	return 0;
}

const struct http_route misc_routes[] = {
	{ "GET", "/v1/health", HTTP_NOBODY, health, NULL, NULL, NULL },
	{ "GET", "/metrics", HTTP_NOBODY, metrics, NULL, NULL, NULL },
	{ 0 },
};
