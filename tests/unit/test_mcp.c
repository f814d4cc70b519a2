/* The MCP server module (src/mcp, mcp.h) on its own, under a transport of
 * the test's: JSON-RPC dispatch and errors, version negotiation, argument
 * checks, and — against a stand-in for sandlotd's API on a unix socket that
 * creates a sandbox but never answers a command — progress notifications,
 * cancellation and stopping of a call that waits, and the sandbox's
 * deletion at the end. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "mcp/mcp.h"
#include "tap.h"

/* ---- a stand-in for sandlotd's API ---------------------------------------------- */

struct fake {
	char dir[64], sock[108];
	int lfd;
	pthread_mutex_t lock;
	pthread_cond_t cond;    /* execs went up */
	int creates, deletes, execs;
};

static struct fake F = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static const char *json_answer(char *out, size_t size, const char *status, const char *body)
{
	snprintf(out, size, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 status, strlen(body), body);
	return out;
}

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[65536];
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		size_t head = (size_t)(end + 4 - buf), body = 0;
		char *cl = strcasestr(buf, "Content-Length:");
		if (cl && cl < end)
			body = strtoul(cl + 15, NULL, 10);
		if (len < head + body)
			continue;
		const char *answer = NULL;
		char out[512];
		pthread_mutex_lock(&F.lock);
		if (!strncmp(buf, "POST /v1/sandboxes ", 19)) {
			F.creates++;
			answer = json_answer(out, sizeof(out), "201 Created",
					     "{\"id\":\"sb-aaaaaaaaaaaaaaaaaaaaaaaaaa\",\"cursor\":0}");
		} else if (!strncmp(buf, "DELETE /v1/sandboxes/", 21)) {
			F.deletes++;
			answer = "HTTP/1.1 204 No Content\r\n\r\n";
		} else if (strstr(buf, "/exec ")) {
			F.execs++;   /* a command that runs until the client goes away */
			pthread_cond_broadcast(&F.cond);
		} else {
			answer = json_answer(out, sizeof(out), "404 Not Found",
					     "{\"error\":{\"code\":\"x\",\"message\":\"not here\"}}");
		}
		pthread_mutex_unlock(&F.lock);
		if (answer && write(fd, answer, strlen(answer)) < 0)
			break;
		memmove(buf, buf + head + body, len - head - body);
		len -= head + body;
	}
	close(fd);
	return NULL;
}

static void *accept_loop(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(F.lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		pthread_t t;
		pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

static void fake_start(void)
{
	snprintf(F.dir, sizeof(F.dir), "/tmp/sandlot-test-mcp-XXXXXX");
	CHECK(mkdtemp(F.dir) != NULL);
	snprintf(F.sock, sizeof(F.sock), "%s/api.sock", F.dir);
	F.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", F.sock);
	CHECK(bind(F.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(F.lfd, 16) == 0);
	pthread_t t;
	pthread_create(&t, NULL, accept_loop, NULL);
	pthread_detach(t);
}

static void fake_stop(void)
{
	unlink(F.sock);
	rmdir(F.dir);
}

/* ---- the test's transport ------------------------------------------------------- */

struct io {
	struct mcp *m;
	int waits;
	json_t *notes;          /* what notify() sent */
	int cancel_after;       /* notes before cancelling request 7 (0: never) */
	int stop_after;         /* notes before mcp_stop() (0: never) */
};

static void t_wait(void *ud, struct client *c, int timeout_ms)
{
	struct io *io = ud;
	io->waits++;
	client_poll(c, NULL, 0, timeout_ms);
}

static void t_notify(void *ud, json_t *msg)
{
	struct io *io = ud;
	json_array_append_new(io->notes, msg);
	size_t n = json_array_size(io->notes);
	if (io->cancel_after && n == (size_t)io->cancel_after) {
		json_t *c = json_pack("{s:s,s:s,s:{s:i}}", "jsonrpc", "2.0", "method",
				      "notifications/cancelled", "params", "requestId", 7);
		json_t *answer = NULL;
		CHECK_EQ_INT(mcp_handle_now(io->m, c, &answer), 1);
		CHECK(answer == NULL);
		json_decref(c);
	}
	if (io->stop_after && n == (size_t)io->stop_after)
		mcp_stop(io->m);
}

static void t_log(void *ud, const char *line)
{
	(void)ud;
	fprintf(stderr, "# mcp: %s\n", line);
}

struct session {
	struct client c;
	struct io io;
	struct mcp *m;
};

static void session_open(struct session *s, const char *host)
{
	memset(s, 0, sizeof(*s));
	CHECK_EQ_INT(client_open(&s->c, "test", host, NULL), 0);
	s->io.notes = json_array();
	json_t *body = json_object();
	struct mcp_options o = { .create_body = body, .timeout_ms = 60000, .keepalive_ms = 0 };
	struct mcp_io io = { .wait = t_wait, .notify = t_notify, .log = t_log, .ud = &s->io };
	s->m = mcp_new(&s->c, &o, &io);
	json_decref(body);
	CHECK(s->m != NULL);
	s->io.m = s->m;
}

static void session_close(struct session *s)
{
	mcp_end(s->m);
	mcp_free(s->m);
	client_free(&s->c);
	json_decref(s->io.notes);
}

static json_t *send_text(struct session *s, const char *text)
{
	return mcp_handle_text(s->m, text, strlen(text));
}

static int error_code(json_t *answer)
{
	return (int)json_integer_value(json_object_get(json_object_get(answer, "error"), "code"));
}

static const char *result_text(json_t *answer)
{
	json_t *c = json_array_get(json_object_get(json_object_get(answer, "result"), "content"), 0);
	return json_string_value(json_object_get(c, "text"));
}

static void init(struct session *s, const char *version)
{
	char text[256];
	snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
		 "{\"protocolVersion\":\"%s\",\"capabilities\":{}}}", version);
	json_t *a = send_text(s, text);
	CHECK(json_object_get(a, "result") != NULL);
	json_decref(a);
}

/* ---- cases ------------------------------------------------------------------------ */

static void test_initialize_negotiates_the_version(void)
{
	struct session s;
	session_open(&s, "unix:/nonexistent/sandlot.sock");
	CHECK(mcp_protocol_version(s.m) == NULL);
	json_t *a = send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
			      "{\"protocolVersion\":\"2025-03-26\"}}");
	CHECK_STR(json_string_value(json_object_get(json_object_get(a, "result"), "protocolVersion")),
		  "2025-03-26");
	CHECK_STR(mcp_protocol_version(s.m), "2025-03-26");
	json_decref(a);
	a = send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":"
		      "{\"protocolVersion\":\"1999-01-01\"}}");
	CHECK_STR(json_string_value(json_object_get(json_object_get(a, "result"), "protocolVersion")),
		  "2025-11-25");
	json_decref(a);
	a = send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{}}");
	CHECK_EQ_INT(error_code(a), -32602);
	json_decref(a);
	session_close(&s);
}

static void test_json_rpc_errors_and_batches(void)
{
	struct session s;
	session_open(&s, "unix:/nonexistent/sandlot.sock");
	json_t *a = send_text(&s, "{not json");
	CHECK_EQ_INT(error_code(a), -32700);
	CHECK(json_is_null(json_object_get(a, "id")));
	json_decref(a);
	a = send_text(&s, "[]");
	CHECK_EQ_INT(error_code(a), -32600);
	json_decref(a);
	a = send_text(&s, "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}");
	CHECK_EQ_INT(error_code(a), -32600);
	json_decref(a);
	a = send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}");
	CHECK_EQ_INT(error_code(a), -32601);
	json_decref(a);
	CHECK(send_text(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}") == NULL);
	a = send_text(&s, "[{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"},"
		      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},"
		      "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}]");
	CHECK_EQ_INT((int)json_array_size(a), 2);
	CHECK_STR(json_string_value(json_object_get(json_array_get(a, 0), "id")), "a");
	json_t *tools = json_object_get(json_object_get(json_array_get(a, 1), "result"), "tools");
	CHECK_EQ_INT((int)json_array_size(tools), 7);
	json_decref(a);
	json_t *ping = json_pack("{s:s,s:i,s:s}", "jsonrpc", "2.0", "id", 5, "method", "ping");
	CHECK(mcp_is_request(ping));
	CHECK_EQ_INT(mcp_handle_now(s.m, ping, &a), 1);
	CHECK_EQ_INT((int)json_integer_value(json_object_get(a, "id")), 5);
	json_decref(a);
	json_decref(ping);
	session_close(&s);
}

static void test_arguments_are_checked_per_version(void)
{
	struct session s;
	session_open(&s, "unix:/nonexistent/sandlot.sock");
	const char *call = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
			   "{\"name\":\"run_command\",\"arguments\":{\"cmd\":\"ls\"}}}";
	init(&s, "2025-06-18");
	json_t *a = send_text(&s, call);
	CHECK_EQ_INT(error_code(a), -32602);
	CHECK(strstr(json_string_value(json_object_get(json_object_get(a, "error"), "message")),
		     "unknown argument \"cmd\"") != NULL);
	json_decref(a);
	init(&s, "2025-11-25");
	a = send_text(&s, call);
	CHECK(json_is_true(json_object_get(json_object_get(a, "result"), "isError")));
	CHECK(strstr(result_text(a), "invalid arguments for run_command") != NULL);
	json_decref(a);
	session_close(&s);
}

static void test_unreachable_daemon_is_a_tool_error(void)
{
	struct session s;
	session_open(&s, "unix:/nonexistent/sandlot.sock");
	json_t *a = send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
			      "{\"name\":\"run_command\",\"arguments\":{\"command\":\"ls\"}}}");
	CHECK(json_is_true(json_object_get(json_object_get(a, "result"), "isError")));
	CHECK(strstr(result_text(a), "cannot reach sandlotd at unix:/nonexistent/sandlot.sock") != NULL);
	CHECK(mcp_sandbox(s.m) == NULL);
	json_decref(a);
	session_close(&s);
}

static const char long_call[] =
	"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"run_command\","
	"\"arguments\":{\"command\":\"sleep 100\"},\"_meta\":{\"progressToken\":\"tok\"}}}";

static void test_progress_then_cancellation(void)
{
	fake_start();
	char host[128];
	snprintf(host, sizeof(host), "unix:%s", F.sock);
	struct session s;
	session_open(&s, host);
	s.io.cancel_after = 2;
	json_t *a = send_text(&s, long_call);
	CHECK(a == NULL);   /* a cancelled call gets no answer */
	CHECK_EQ_INT((int)json_array_size(s.io.notes), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *n = json_array_get(s.io.notes, i);
		CHECK_STR(json_string_value(json_object_get(n, "method")), "notifications/progress");
		json_t *p = json_object_get(n, "params");
		CHECK_STR(json_string_value(json_object_get(p, "progressToken")), "tok");
		CHECK_EQ_INT((int)json_integer_value(json_object_get(p, "progress")), (int)i + 1);
	}
	CHECK_STR(mcp_sandbox(s.m), "sb-aaaaaaaaaaaaaaaaaaaaaaaaaa");
	CHECK(!mcp_stopped(s.m));
	/* The session goes on: the next call is handled (and cancelled too). */
	json_array_clear(s.io.notes);
	s.io.cancel_after = 1;
	CHECK(send_text(&s, long_call) == NULL);
	session_close(&s);
	CHECK_EQ_INT(F.creates, 1);
	CHECK_EQ_INT(F.execs, 2);
	CHECK_EQ_INT(F.deletes, 1);   /* mcp_end() deleted the sandbox */
	fake_stop();
}

static void test_stop_abandons_the_call(void)
{
	fake_start();
	char host[128];
	snprintf(host, sizeof(host), "unix:%s", F.sock);
	struct session s;
	session_open(&s, host);
	s.io.stop_after = 1;
	CHECK(send_text(&s, long_call) == NULL);
	CHECK(mcp_stopped(s.m));
	/* A stopped session handles nothing more. */
	CHECK(send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}") == NULL);
	session_close(&s);
	CHECK_EQ_INT(F.deletes, 1);
	fake_stop();
}

/* mcp_stop() from another thread, as sandlotd's DELETE does: once the
 * command runs. */
static void *stop_when_running(void *arg)
{
	struct mcp *m = arg;
	pthread_mutex_lock(&F.lock);
	while (F.execs == 0)
		pthread_cond_wait(&F.cond, &F.lock);
	pthread_mutex_unlock(&F.lock);
	mcp_stop(m);
	return NULL;
}

static void test_no_progress_without_a_token(void)
{
	fake_start();
	char host[128];
	snprintf(host, sizeof(host), "unix:%s", F.sock);
	struct session s;
	session_open(&s, host);
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, stop_when_running, s.m), 0);
	CHECK(send_text(&s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"run_command\",\"arguments\":{\"command\":\"sleep 100\"}}}") == NULL);
	pthread_join(t, NULL);
	CHECK(s.io.waits > 0);
	CHECK_EQ_INT((int)json_array_size(s.io.notes), 0);
	session_close(&s);
	fake_stop();
}

int main(void)
{
	TAP_RUN(test_initialize_negotiates_the_version);
	TAP_RUN(test_json_rpc_errors_and_batches);
	TAP_RUN(test_arguments_are_checked_per_version);
	TAP_RUN(test_unreachable_daemon_is_a_tool_error);
	TAP_RUN(test_progress_then_cancellation);
	TAP_RUN(test_stop_abandons_the_call);
	TAP_RUN(test_no_progress_without_a_token);
	return tap_done();
}
