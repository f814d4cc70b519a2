/* sandlot mcp: the MCP server (src/mcp) over stdio.
 *
 * The process reads JSON-RPC 2.0 messages, one per line, from stdin and
 * writes one answer per line to stdout; stderr carries only its own log
 * lines.  The session's sandbox is one of the sandlotd at --host, deleted
 * when the session ends (stdin closed, SIGTERM, SIGINT or SIGHUP).
 *
 * One thread.  Messages are handled one at a time, in order; while a tool
 * call waits for sandlotd, stdin and a signalfd are still watched (with the
 * HTTP transfers, through client_poll), so that a ping is answered at once,
 * notifications/cancelled for the running call stops it (sandlotd kills a
 * command whose client went away), and a signal ends the session without
 * waiting for the call.  Other messages that arrive meanwhile are queued.
 *
 * The sandbox is created with an idle timeout (--idle-timeout, default
 * 5 minutes) and this server sends a keepalive every third of it, so the
 * sandbox lives as long as the server does, and goes away by itself soon
 * after a server that was killed without a chance to delete it.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"
#include "common/parse.h"
#include "mcp/mcp.h"

#define MESSAGE_MAX (64u << 20)        /* longest JSON-RPC line we take */
#define DEFAULT_TIMEOUT_MS (5 * 60 * 1000)
#define DEFAULT_IDLE_S 300
#define TIMEOUT_MAX_S 86400

static const char mcp_help[] =
	"NAME\n"
	"    sandlot mcp - serve a sandbox to AI agents over the Model Context Protocol\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot mcp [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Speaks MCP (JSON-RPC 2.0, one message per line) on standard input and\n"
	"    output, for MCP hosts that start it as a subprocess:\n"
	"        {\"command\": \"sandlot\", \"args\": [\"mcp\"]}\n"
	"    Its tools run commands and code and move files in one sandbox of\n"
	"    sandlotd, created on the first tool call and deleted when standard\n"
	"    input is closed or on SIGTERM, SIGINT or SIGHUP:\n"
	"        run_command      a shell command: exit code, stdout, stderr\n"
	"        run_code         Python, JavaScript or bash in a long-lived\n"
	"                         interpreter (state kept between calls; matplotlib\n"
	"                         figures come back as PNG images)\n"
	"        read_file        a file's content (text, image or binary)\n"
	"        write_file       write a file (text or base64; parents created)\n"
	"        list_files       the entries of a directory\n"
	"        generated_files  files created, modified or deleted in /home/user\n"
	"                         since the session began, optionally with contents\n"
	"        expose_port      make a server listening on a port inside reachable\n"
	"                         at a URL on this machine\n"
	"    Log lines go to standard error.  sandlotd must be running: if it\n"
	"    cannot be reached at start, sandlot mcp says so and exits 125.\n"
	"    docs/mcp.md describes the tools, their arguments and results.\n"
	"\n"
	"OPTIONS\n"
	"    -m, --memory SIZE       memory limit of the sandbox, e.g. 1G (default:\n"
	"                            the daemon's, 512M)\n"
	"        --cpus N            CPU quota, e.g. 0.5 or 2 (default: no quota)\n"
	"        --pids N            maximum number of processes (default 256)\n"
	"        --disk SIZE         size of /home/user + /tmp (default 1G)\n"
	"    -e, --env KEY=VALUE     environment variable of every command (repeatable)\n"
	"        --image NAME        root filesystem image (default host)\n"
	"        --isolation ns|vm   ns: namespaces around the sandbox; vm: a microVM\n"
	"                            of its own (docs/vm.md; default: sandlotd's)\n"
	"    -p, --port PORT         expose PORT of the sandbox (repeatable): a server\n"
	"                            listening on it inside is reachable at a URL on\n"
	"                            the host's 127.0.0.1 (also: the expose_port tool)\n"
	CLI_NET_OPTIONS_HELP
	CLI_PACKAGE_OPTIONS_HELP
	"        --ttl DURATION      delete the sandbox DURATION after its creation\n"
	"                            (the next tool call then starts a new one;\n"
	"                            default: the daemon's)\n"
	"        --idle-timeout DURATION\n"
	"                            sandlotd deletes the sandbox after this long\n"
	"                            without a keepalive from this server, which\n"
	"                            sends one every third of it: a server that is\n"
	"                            killed leaves nothing behind for longer\n"
	"                            (default 5m; 0 = never)\n"
	"    -t, --timeout DURATION  time limit of run_command and run_code when the\n"
	"                            call gives no timeout_seconds (default 5m)\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help              show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 after the session ended, 125 if sandlotd could not be reached or\n"
	"    refused the token at start, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot mcp --memory 1G --timeout 2m\n"
	"    sandlot mcp -H tcp:127.0.0.1:7070 --token-file ~/.config/sandlot/token\n";

/* ---- the transport's state ------------------------------------------------ */

struct line {
	struct line *next;
	size_t len;
	char data[];
};

struct stdio {
	struct client c;
	struct mcp *m;
	json_t *create_body;           /* from the options */
	uint64_t timeout_ms, keepalive_ms;
	int sigfd;
	int in_eof;
	char *in;                      /* a partial line */
	size_t in_len, in_cap;
	int discarding;                /* skipping the rest of a too long line */
	struct line *queue, **queue_tail;
};

static void mlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mlog(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandlot mcp: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- output ----------------------------------------------------------------- */

/* Write one message as one line.  A stdout that is gone ends the session. */
static void send_msg(struct stdio *s, json_t *msg)
{
	if (!msg)
		return;
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text) {
		mlog("cannot encode an answer (out of memory)");
		return;
	}
	size_t n = strlen(text);
	text[n] = '\n';   /* json_dumps leaves room: we write n + 1 bytes of a n + 1 buffer */
	int rc = client_write_all(STDOUT_FILENO, text, n + 1);
	free(text);
	if (rc < 0) {
		mlog("standard output is gone (%s): ending the session", strerror(errno));
		mcp_stop(s->m);
	}
}

/* ---- input ------------------------------------------------------------------ */

static void handle_in_call(struct stdio *m, const char *data, size_t len);

static void enqueue(struct stdio *m, const char *data, size_t len)
{
	struct line *l = malloc(sizeof(*l) + len + 1);
	if (!l) {
		mlog("out of memory: a message of %zu bytes was dropped", len);
		return;
	}
	l->next = NULL;
	l->len = len;
	memcpy(l->data, data, len);
	l->data[len] = '\0';
	*m->queue_tail = l;
	m->queue_tail = &l->next;
}

static struct line *dequeue(struct stdio *m)
{
	struct line *l = m->queue;
	if (l) {
		m->queue = l->next;
		if (!m->queue)
			m->queue_tail = &m->queue;
	}
	return l;
}

static void got_line(struct stdio *m, int in_call)
{
	size_t len = m->in_len;
	while (len > 0 && (m->in[len - 1] == '\r' || m->in[len - 1] == ' ' || m->in[len - 1] == '\t'))
		len--;
	if (len == 0)
		return;
	if (in_call)
		handle_in_call(m, m->in, len);
	else
		enqueue(m, m->in, len);
}

/* Read what stdin has (it said it is readable) and split it into lines. */
static void pump_input(struct stdio *m, int in_call)
{
	char buf[65536];
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n < 0) {
		if (errno == EINTR || errno == EAGAIN)
			return;
		mlog("reading standard input: %s", strerror(errno));
		n = 0;
	}
	if (n == 0) {
		/* The last message may lack its newline. */
		if (m->in_len && !m->discarding)
			got_line(m, in_call);
		m->in_len = 0;
		m->in_eof = 1;
		return;
	}
	const char *p = buf, *end = buf + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t take = (size_t)((nl ? nl : end) - p);
		if (!m->discarding) {
			if (m->in_len + take > MESSAGE_MAX) {
				m->discarding = 1;
				m->in_len = 0;
				send_msg(m, mcp_rpc_error(NULL, -32600, "message longer than %u MiB: not read",
						      MESSAGE_MAX >> 20));
			} else {
				if (m->in_len + take + 1 > m->in_cap) {
					size_t cap = m->in_cap ? m->in_cap : 65536;
					while (cap < m->in_len + take + 1)
						cap *= 2;
					char *nb = realloc(m->in, cap);
					if (!nb) {
						mlog("out of memory reading a message");
						m->discarding = 1;
						m->in_len = 0;
						continue;
					}
					m->in = nb;
					m->in_cap = cap;
				}
				memcpy(m->in + m->in_len, p, take);
				m->in_len += take;
			}
		}
		p += take;
		if (nl) {
			if (!m->discarding)
				got_line(m, in_call);
			m->in_len = 0;
			m->discarding = 0;
			p++;
		}
	}
}

/* Wait up to timeout_ms for stdin, a signal or the HTTP transfers. */
static void wait_io(struct stdio *m, int timeout_ms, int in_call)
{
	struct pollfd fds[2] = {
		{ .fd = m->in_eof ? -1 : STDIN_FILENO, .events = POLLIN },
		{ .fd = m->sigfd, .events = POLLIN },
	};
	client_poll(&m->c, fds, 2, timeout_ms);
	/* client_poll reports POLLIN only; look again for hang-ups. */
	if (poll(fds, 2, 0) < 0)
		return;
	if (fds[1].revents & POLLIN) {
		int sig = client_take_signal(m->sigfd);
		if (sig)
			mlog("%s: ending the session", strsignal(sig));
		mcp_stop(m->m);
		return;
	}
	if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
		pump_input(m, in_call);
}

/* A line that came while a tool call runs: pings are answered and
 * cancellations applied now, the rest waits its turn. */
static void handle_in_call(struct stdio *m, const char *data, size_t len)
{
	json_t *msg = json_loadb(data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	json_t *answer = NULL;
	if (mcp_handle_now(m->m, msg, &answer))
		send_msg(m, answer);
	else
		enqueue(m, data, len);
	json_decref(msg);
}

/* mcp_io for the session. */
static void io_wait(void *ud, struct client *c, int timeout_ms)
{
	(void)c;
	wait_io(ud, timeout_ms, 1);
}

static void io_notify(void *ud, json_t *msg)
{
	send_msg(ud, msg);
}

static void io_log(void *ud, const char *line)
{
	(void)ud;
	mlog("%s", line);
}

/* ---- main ------------------------------------------------------------------- */

static const struct option mcp_opts[] = {
	CLI_SANDBOX_OPTIONS,
	{ "timeout", required_argument, NULL, 't' },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Options into m->create_body and m->timeout_ms.  0, 1 for --help, or
 * EXIT_USAGE after saying why. */
static int parse_options(struct stdio *m, int argc, char **argv, const char **host, const char **token_file)
{
	json_t *body = m->create_body, *env = json_object();
	sandlot_error_t *err = NULL;
	uint64_t v, idle_s = DEFAULT_IDLE_S;
	int rc = 0, c;
	optind = 1;
	opterr = 0;
	while (rc == 0 && (c = getopt_long(argc, argv, "+:m:e:t:p:H:h", mcp_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 't':
			if (sandlot__parse_duration(optarg, &v, &err) < 0) {
				rc = cli_usage_error("mcp", "--timeout: %s", sandlot_error_message(err));
				sandlot_error_free(err);
				err = NULL;
			} else if (v == 0 || v > TIMEOUT_MAX_S * 1000ull) {
				rc = cli_usage_error("mcp", "invalid --timeout \"%s\": expected 1s to 24h",
						     optarg);
			}
			m->timeout_ms = v;
			break;
		CLI_CLIENT_OPTION_CASES(*host, *token_file);
		case 'h':
			fputs(mcp_help, stdout);
			rc = 1;
			break;
		default:
			rc = cli_sandbox_option("mcp", c, optarg, body, env);
			if (rc == 1)
				rc = cli_option_error("mcp", c, argv);
			break;
		}
	}
	if (rc == 0 && optind < argc)
		rc = cli_usage_error("mcp", "unexpected argument \"%s\"", argv[optind]);
	if (rc == 0)
		rc = cli_net_finish("mcp", body);
	if (json_object_size(env))
		json_object_set(body, "env", env);
	json_decref(env);
	json_t *idle = json_object_get(body, "idle_timeout_seconds");
	if (idle)
		idle_s = (uint64_t)json_integer_value(idle);
	else
		json_object_set_new(body, "idle_timeout_seconds", json_integer((json_int_t)idle_s));
	json_object_set_new(body, "auto_resume", json_true());
	json_object_set_new(body, "metadata", json_pack("{s:s}", "client", "sandlot-mcp"));
	/* A keepalive every third of the idle timeout (at least every second). */
	m->keepalive_ms = idle_s ? (idle_s * 1000 / 3 > 1000 ? idle_s * 1000 / 3 : 1000) : 0;
	return rc;
}

int cmd_mcp(int argc, char **argv)
{
	struct stdio m = { .timeout_ms = DEFAULT_TIMEOUT_MS, .sigfd = -1 };
	m.queue_tail = &m.queue;
	m.create_body = json_object();
	const char *host = NULL, *token_file = NULL;
	int rc = parse_options(&m, argc, argv, &host, &token_file);
	if (rc) {
		json_decref(m.create_body);
		return rc == 1 ? 0 : rc;
	}

	/* Signals end the session through the poll loop, never mid-write. */
	m.sigfd = client_signalfd();
	if (m.sigfd < 0) {
		cli_err("mcp: signalfd: %s", strerror(errno));
		rc = EXIT_SANDLOT;
		goto out;
	}

	rc = client_init(&m.c, "mcp", host, token_file);
	if (rc)
		goto out;
	/* Find out now, not at the first tool call, that the daemon is not
	 * there: an MCP host shows this in its server log. */
	struct client_req health = { .method = "GET", .path = "/v1/health" };
	client_perform(&m.c, &health);
	if (health.status != 200) {
		rc = client_report(&m.c, &health, NULL);
		if (rc == 1)
			rc = EXIT_SANDLOT;
		client_req_free(&health);
		client_free(&m.c);
		goto out;
	}
	client_req_free(&health);

	struct mcp_options o = { .create_body = m.create_body, .timeout_ms = m.timeout_ms,
				 .keepalive_ms = m.keepalive_ms };
	struct mcp_io io = { .wait = io_wait, .notify = io_notify, .log = io_log, .ud = &m };
	m.m = mcp_new(&m.c, &o, &io);
	if (!m.m) {
		cli_err("mcp: out of memory");
		client_free(&m.c);
		rc = EXIT_SANDLOT;
		goto out;
	}
	mlog("serving MCP on stdio with sandlotd at %s", m.c.host);

	while (!mcp_stopped(m.m)) {
		struct line *l = dequeue(&m);
		if (l) {
			send_msg(&m, mcp_handle_text(m.m, l->data, l->len));
			free(l);
			continue;
		}
		if (m.in_eof)
			break;
		int timeout = mcp_keepalive_due(m.m);
		if (timeout < 0 || timeout > 60000)
			timeout = 60000;
		wait_io(&m, timeout, 0);
		if (!mcp_stopped(m.m))
			mcp_keepalive(m.m);
	}
	mcp_end(m.m);
	mcp_free(m.m);
	client_free(&m.c);
	rc = 0;
out:
	while (m.queue)
		free(dequeue(&m));
	free(m.in);
	if (m.sigfd >= 0)
		close(m.sigfd);
	json_decref(m.create_body);
	return rc;
}
