/* The vm backend's QMP client (src/backend/vm-qmp.c): its parser, against
 * a scripted monitor of the test's on a socketpair (replies, events,
 * refusals, garbage, hang-ups, a descriptor passed with getfd), and
 * against a real QEMU (qemu-system-x86_64 -M none): a save to a file and a
 * restore of that file into a second QEMU started with -incoming defer.
 * Needs neither root nor KVM. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tap.h"
#include "backend/vm-qmp.h"

#define QEMU "/usr/bin/qemu-system-x86_64"

extern char **environ;

static int parse(const char *line, struct qmp_msg *m)
{
	sandlot_error_t *e = NULL;
	int rc = sandlot__qmp_parse(line, strlen(line), m, &e);
	if (rc < 0) {
		CHECK_EQ_INT(sandlot_error_status(e), EPROTO);
		sandlot_error_free(e);
	}
	return rc;
}

static void test_parse(void)
{
	struct qmp_msg m;
	CHECK(parse("{\"QMP\": {\"version\": {}, \"capabilities\": [\"oob\"]}}", &m) == 0);
	CHECK_EQ_INT(m.kind, QMP_GREETING);
	json_decref(m.root);
	CHECK(parse("{\"return\": {\"status\": \"running\"}, \"id\": 1}", &m) == 0);
	CHECK_EQ_INT(m.kind, QMP_RETURN);
	CHECK_STR(json_string_value(json_object_get(m.value, "status")), "running");
	json_decref(m.root);
	CHECK(parse("{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}}", &m) == 0);
	CHECK_EQ_INT(m.kind, QMP_ERROR);
	CHECK_STR(m.name, "GenericError");
	CHECK_STR(m.desc, "no");
	json_decref(m.root);
	CHECK(parse("{\"event\": \"STOP\", \"timestamp\": {}}", &m) == 0);
	CHECK_EQ_INT(m.kind, QMP_EVENT);
	CHECK_STR(m.name, "STOP");
	CHECK(m.value == NULL);
	json_decref(m.root);
	/* Refused: not JSON, not an object, unknown shape, wrong types,
	 * duplicate keys. */
	CHECK(parse("", &m) < 0);
	CHECK(parse("{\"return\": ", &m) < 0);
	CHECK(parse("[1, 2]", &m) < 0);
	CHECK(parse("{\"hello\": 1}", &m) < 0);
	CHECK(parse("{\"error\": \"bad\"}", &m) < 0);
	CHECK(parse("{\"error\": {\"class\": 1, \"desc\": \"x\"}}", &m) < 0);
	CHECK(parse("{\"event\": 7}", &m) < 0);
	CHECK(parse("{\"event\": \"X\", \"data\": 3}", &m) < 0);
	CHECK(parse("{\"QMP\": 1}", &m) < 0);
	CHECK(parse("{\"return\": {}, \"return\": 1}", &m) < 0);
}

/* ---- a scripted monitor ---- */

struct peer {
	int fd;
	const char *const *script; /* lines to send; "<" reads a line first; "<fd" reads one
				    * with a descriptor, whose inode goes to got_ino */
	ino_t got_ino;
	char got[8][256];           /* the lines read */
	int ngot;
};

static ssize_t read_line(int fd, char *out, size_t n, int *passed)
{
	size_t len = 0;
	*passed = -1;
	while (len + 1 < n) {
		char c;
		struct iovec iov = { &c, 1 };
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };
		ssize_t k = recvmsg(fd, &mh, 0);
		if (k <= 0)
			return -1;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_type == SCM_RIGHTS)
			memcpy(passed, CMSG_DATA(cm), sizeof(int));
		if (c == '\n')
			break;
		out[len++] = c;
	}
	out[len] = '\0';
	return (ssize_t)len;
}

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	for (const char *const *s = p->script; *s; s++) {
		if ((*s)[0] == '<') {
			int passed;
			char *slot = p->got[p->ngot < 8 ? p->ngot++ : 7];
			if (read_line(p->fd, slot, 256, &passed) < 0)
				break;
			if (passed >= 0) {
				struct stat st;
				if (fstat(passed, &st) == 0)
					p->got_ino = st.st_ino;
				close(passed);
			}
			continue;
		}
		if (strcmp(*s, "EOF") == 0) {
			shutdown(p->fd, SHUT_WR);
			continue;
		}
		if (write(p->fd, *s, strlen(*s)) < 0 || write(p->fd, "\n", 1) < 0)
			break;
	}
	return NULL;
}

#define GREETING "{\"QMP\": {\"version\": {}, \"capabilities\": []}}"

/* Open a client on a socketpair whose other end plays script. */
static struct sandlot_qmp *scripted(struct peer *p, pthread_t *t, const char *const *script,
				    unsigned timeout_ms, sandlot_error_t **err)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	memset(p, 0, sizeof(*p));
	p->fd = sv[1];
	p->script = script;
	CHECK(pthread_create(t, NULL, peer_main, p) == 0);
	return sandlot__qmp_open(sv[0], timeout_ms, err);
}

static void test_calls_events_and_refusals(void)
{
	static const char *const script[] = {
		GREETING, "<", "{\"return\": {}}",
		"<", "{\"event\": \"STOP\"}", "{\"event\": \"MIGRATION\", \"data\": {\"status\": \"setup\"}}",
		"{\"return\": {\"status\": \"paused\"}}",
		"<", "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command bogus has not been found\"}}",
		"<fd", "{\"return\": {}}",
		NULL,
	};
	struct peer p;
	pthread_t t;
	sandlot_error_t *e = NULL;
	struct sandlot_qmp *q = scripted(&p, &t, script, 5000, &e);
	CHECK(q != NULL);
	if (!q)
		return;
	json_t *r = sandlot__qmp_call(q, "query-status", NULL, -1, 5000, &e);
	CHECK(r && strcmp(json_string_value(json_object_get(r, "status")), "paused") == 0);
	json_decref(r);
	r = sandlot__qmp_call(q, "bogus", NULL, -1, 5000, &e);
	CHECK(r == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EIO);
	CHECK(strstr(sandlot_error_message(e), "bogus has not been found") != NULL);
	CHECK(strstr(sandlot_error_message(e), "CommandNotFound") != NULL);
	sandlot_error_free(e);
	e = NULL;
	/* getfd: the descriptor arrives with the command. */
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	json_t *args = json_pack("{s:s}", "fdname", "x");
	r = sandlot__qmp_call(q, "getfd", args, fd, 5000, &e);
	json_decref(args);
	CHECK(r != NULL);
	json_decref(r);
	close(fd);
	/* The events that came before the replies were kept. */
	json_t *d = sandlot__qmp_wait_event(q, "MIGRATION", 1000, &e);
	CHECK(d && strcmp(json_string_value(json_object_get(d, "status")), "setup") == 0);
	json_decref(d);
	d = sandlot__qmp_wait_event(q, "STOP", 1000, &e);
	CHECK(d && json_object_size(d) == 0);
	json_decref(d);
	pthread_join(t, NULL);
	CHECK(strstr(p.got[0], "\"qmp_capabilities\"") != NULL);
	CHECK(strstr(p.got[1], "\"query-status\"") != NULL);
	CHECK(strstr(p.got[3], "\"getfd\"") != NULL && strstr(p.got[3], "\"fdname\":\"x\""));
	CHECK(p.got_ino == st.st_ino);
	/* Nothing more comes: a wait times out, naming it. */
	d = sandlot__qmp_wait_event(q, "RESUME", 50, &e);
	CHECK(d == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), ETIMEDOUT);
	sandlot_error_free(e);
	close(p.fd);
	sandlot__qmp_close(q);
}

/* What goes wrong is named: garbage (EPROTO), a hang-up (EPIPE), no
 * greeting, silence (ETIMEDOUT), a line without end. */
static int open_fails(const char *const *script, unsigned timeout_ms, const char *words)
{
	struct peer p;
	pthread_t t;
	sandlot_error_t *e = NULL;
	struct sandlot_qmp *q = scripted(&p, &t, script, timeout_ms, &e);
	CHECK(q == NULL);
	int status = sandlot_error_status(e);
	if (words && !strstr(sandlot_error_message(e), words)) {
		printf("#   message: %s\n", sandlot_error_message(e));
		CHECK(!"the error names the cause");
	}
	sandlot_error_free(e);
	sandlot__qmp_close(q);
	shutdown(p.fd, SHUT_RDWR);
	pthread_join(t, NULL);
	close(p.fd);
	return status;
}

static void test_failures_are_named(void)
{
	static const char *const garbage[] = { "not json at all", NULL };
	CHECK_EQ_INT(open_fails(garbage, 5000, "not JSON"), EPROTO);
	static const char *const no_greeting[] = { "{\"return\": {}}", NULL };
	CHECK_EQ_INT(open_fails(no_greeting, 5000, "no greeting"), EPROTO);
	static const char *const hangup[] = { GREETING, "<", "EOF", NULL };
	CHECK_EQ_INT(open_fails(hangup, 5000, "exited"), EPIPE);
	static const char *const silent[] = { GREETING, "<", NULL };
	CHECK_EQ_INT(open_fails(silent, 100, "did not answer"), ETIMEDOUT);
	static const char *const refused[] = {
		GREETING, "<", "{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}}", NULL,
	};
	CHECK_EQ_INT(open_fails(refused, 5000, "nope"), EIO);
}

static void test_a_line_without_end_is_refused(void)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	/* More than QMP_LINE_MAX bytes without a newline, written by a child
	 * (the socket's buffer is smaller than that). */
	pid_t pid = fork();
	if (pid == 0) {
		static char chunk[65536];
		memset(chunk, ' ', sizeof(chunk));
		for (size_t sent = 0; sent <= QMP_LINE_MAX + sizeof(chunk);)
			if (write(sv[1], chunk, sizeof(chunk)) <= 0)
				_exit(0);
			else
				sent += sizeof(chunk);
		_exit(0);
	}
	close(sv[1]);
	sandlot_error_t *e = NULL;
	struct sandlot_qmp *q = sandlot__qmp_open(sv[0], 10000, &e);
	CHECK(q == NULL);
	CHECK_EQ_INT(sandlot_error_status(e), EPROTO);
	CHECK(strstr(sandlot_error_message(e), "longer than 1 MiB") != NULL);
	sandlot_error_free(e);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* ---- a real QEMU ---- */

static pid_t start_qemu(int incoming, struct sandlot_qmp **q)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	char *argv[] = {
		(char *)"qemu-system-x86_64", (char *)"-M", (char *)"none", (char *)"-nodefaults",
		(char *)"-display", (char *)"none", (char *)"-chardev",
		(char *)"socket,id=qmp,fd=3", (char *)"-mon", (char *)"chardev=qmp,mode=control",
		(char *)"-sandbox", (char *)"on,obsolete=deny,elevateprivileges=deny,spawn=deny",
		incoming ? (char *)"-incoming" : NULL, (char *)"defer", NULL,
	};
	pid_t pid = -1;
	CHECK(posix_spawn(&pid, QEMU, &fa, NULL, argv, environ) == 0);
	posix_spawn_file_actions_destroy(&fa);
	close(sv[1]);
	sandlot_error_t *e = NULL;
	*q = sandlot__qmp_open(sv[0], 20000, &e);
	if (!*q)
		printf("#   %s\n", sandlot_error_message(e));
	CHECK(*q != NULL);
	sandlot_error_free(e);
	return pid;
}

static const char *status_of(struct sandlot_qmp *q, char *buf, size_t n)
{
	json_t *r = sandlot__qmp_call(q, "query-status", NULL, -1, 10000, NULL);
	snprintf(buf, n, "%s", r ? json_string_value(json_object_get(r, "status")) : "(none)");
	json_decref(r);
	return buf;
}

static void quit(pid_t pid, struct sandlot_qmp *q)
{
	json_t *r = sandlot__qmp_call(q, "quit", NULL, -1, 10000, NULL);
	CHECK(r != NULL);
	json_decref(r);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	sandlot__qmp_close(q);
}

static void test_save_and_restore_with_qemu(void)
{
	if (access(QEMU, X_OK) < 0)
		tap_skip("needs " QEMU " (Debian's qemu-system-x86, in the Makefile's TEST_DEPS)");
	char dir[] = "/tmp/sandlot-test-qmp-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char state[sizeof(dir) + 16];
	snprintf(state, sizeof(state), "%s/state", dir);

	struct sandlot_qmp *q;
	char buf[64];
	pid_t pid = start_qemu(0, &q);
	if (!q)
		return;
	CHECK_STR(status_of(q, buf, sizeof(buf)), "running");
	int out = open(state, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	sandlot_error_t *e = NULL;
	CHECK(sandlot__qmp_save(q, out, 30000, &e) == 0);
	if (e)
		printf("#   %s\n", sandlot_error_message(e));
	close(out);
	/* Stopped for good (finish-migrate, then postmigrate). */
	json_t *st0 = sandlot__qmp_call(q, "query-status", NULL, -1, 10000, NULL);
	CHECK(st0 && json_is_false(json_object_get(st0, "running")));
	json_decref(st0);
	/* A refusal quotes QEMU. */
	json_t *r = sandlot__qmp_call(q, "no-such-command", NULL, -1, 10000, &e);
	CHECK(r == NULL && strstr(sandlot_error_message(e), "no-such-command has not been found"));
	sandlot_error_free(e);
	e = NULL;
	quit(pid, q);
	struct stat st;
	CHECK(stat(state, &st) == 0 && st.st_size > 0);

	/* The state in a new QEMU: paused until restored, running after. */
	pid = start_qemu(1, &q);
	if (!q)
		return;
	CHECK_STR(status_of(q, buf, sizeof(buf)), "inmigrate");
	int in = open(state, O_RDONLY | O_CLOEXEC);
	CHECK(sandlot__qmp_restore(q, in, 30000, &e) == 0);
	if (e)
		printf("#   %s\n", sandlot_error_message(e));
	close(in);
	CHECK_STR(status_of(q, buf, sizeof(buf)), "running");
	quit(pid, q);

	/* A state that is not one: the restore fails, saying QEMU's reason. */
	pid = start_qemu(1, &q);
	if (!q)
		return;
	in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	e = NULL;
	CHECK(sandlot__qmp_restore(q, in, 30000, &e) < 0);
	CHECK_EQ_INT(sandlot_error_status(e), EIO);
	if (e)
		printf("#   bad state: %s\n", sandlot_error_message(e));
	CHECK(e && strstr(sandlot_error_message(e), "migration failed") != NULL);
	sandlot_error_free(e);
	close(in);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	sandlot__qmp_close(q);
	unlink(state);
	rmdir(dir);
}

int main(void)
{
	TAP_RUN(test_parse);
	TAP_RUN(test_calls_events_and_refusals);
	TAP_RUN(test_failures_are_named);
	TAP_RUN(test_a_line_without_end_is_refused);
	TAP_RUN(test_save_and_restore_with_qemu);
	return tap_done();
}
