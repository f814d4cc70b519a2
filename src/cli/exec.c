/* sandlot exec: run a command in a sandbox of sandlotd, output streamed. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/parse.h"

static const char exec_help[] =
	"NAME\n"
	"    sandlot exec - run a command in a running sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot exec [OPTIONS] ID [--] COMMAND [ARG...]\n"
	"\n"
	"DESCRIPTION\n"
	"    Runs COMMAND (an argv, not a shell string: use `sh -c '...'` for shell\n"
	"    syntax) in the sandbox ID of sandlotd, as the sandbox user in\n"
	"    /home/user.  Its standard output and standard error arrive live on\n"
	"    this program's standard output and standard error, byte for byte,\n"
	"    and sandlot exec exits with the command's status.  Files, processes\n"
	"    left running in the background and the working tree persist in the\n"
	"    sandbox between execs.\n"
	"\n"
	"    Interrupting sandlot exec (Ctrl-C, SIGTERM, SIGHUP) closes the stream,\n"
	"    and sandlotd then kills the command and everything it started.\n"
	"\n"
	"OPTIONS\n"
	"    -e, --env KEY=VALUE    set an environment variable (repeatable)\n"
	"    -w, --workdir DIR      working directory (default /home/user; relative\n"
	"                           paths are under /home/user)\n"
	"    -t, --timeout DURATION kill the command and exit 124 after DURATION,\n"
	"                           e.g. 500ms, 30s, 2m, 1h (default: the daemon's,\n"
	"                           5m; 0 = none)\n"
	"    -i, --interactive      pass this program's standard input to the\n"
	"                           command (default: its stdin is empty).  The\n"
	"                           command then runs as a background exec of the\n"
	"                           daemon, fed and followed by sandlot exec; if\n"
	"                           sandlot exec is killed with SIGKILL, the command\n"
	"                           runs on until it ends or times out.  Its output\n"
	"                           is then capped at 64 MiB per stream: beyond it,\n"
	"                           sandlot exec reports the loss and exits 125\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    The command's exit status; 124 if it timed out; 128+N if signal N\n"
	"    killed it (an out-of-memory kill is 137 and reported on stderr), or if\n"
	"    sandlot exec was interrupted by signal N; 127 if the command was not\n"
	"    found, 126 if it could not be executed (the reason on stderr); 125 if\n"
	"    sandlotd could not be reached or refused the request (no such\n"
	"    sandbox, sandbox ended); 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot exec sb-7x2k... -- python3 -c 'print(6 * 7)'\n"
	"    sandlot exec -w project -e DEBUG=1 sb-7x2k... -- make test\n"
	"    echo 'print(1 + 1)' | sandlot exec -i sb-7x2k... -- python3\n";

static const struct option exec_opts[] = {
	{ "env", required_argument, NULL, 'e' },
	{ "workdir", required_argument, NULL, 'w' },
	{ "timeout", required_argument, NULL, 't' },
	{ "interactive", no_argument, NULL, 'i' },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

#define STREAM_LINE_MAX (64u << 20)
#define STDIN_CHUNK (1u << 20)                /* most stdin bytes per request */
#define INTERACTIVE_OUTPUT_LIMIT (64 << 20)   /* the API's maximum */

/* ---- the NDJSON event stream (also used by sandlot logs) ----------------- */

static int emit(struct exec_stream *s, int fd, json_t *data)
{
	const char *text = json_string_value(data);
	size_t len = json_string_length(data);
	if (!text || s->broken_pipe)
		return 0;
	int rc;
	if (s->base64) {
		unsigned char *raw = malloc(sandlot__base64_decoded_max(len));
		if (!raw)
			return -1;
		ssize_t n = sandlot__base64_decode(text, len, raw);
		if (n < 0) {
			free(raw);
			fprintf(stderr, "sandlot %s: sandlotd sent output that is not base64\n", s->verb);
			s->bad = 1;
			return -1;
		}
		rc = client_write_all(fd, raw, (size_t)n);
		free(raw);
	} else {
		rc = client_write_all(fd, text, len);
	}
	if (rc < 0) {
		/* Whoever reads our output has gone (`| head`): stop the command
		 * as a pipeline would. */
		s->broken_pipe = 1;
		return -1;
	}
	return 0;
}

static int handle_line(struct exec_stream *s, const char *line, size_t len)
{
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0)
		return 0;
	json_error_t je;
	json_t *ev = json_loadb(line, len, 0, &je);
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!ev || !type) {
		json_decref(ev);
		fprintf(stderr, "sandlot %s: sandlotd sent a malformed event\n", s->verb);
		s->bad = 1;
		return -1;
	}
	int rc = 0;
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		rc = emit(s, !strcmp(type, "stdout") ? 1 : 2, json_object_get(ev, "data"));
	} else if (!strcmp(type, "start")) {
		const char *id = json_string_value(json_object_get(ev, "exec_id"));
		const char *output = json_string_value(json_object_get(ev, "output"));
		if (id)
			snprintf(s->exec_id, sizeof(s->exec_id), "%s", id);
		/* How data fields are encoded, when the daemon says so (a
		 * follower cannot know how someone else started the exec). */
		if (output)
			s->base64 = !strcmp(output, "base64");
	} else if (!strcmp(type, "exit")) {
		json_t *res = json_object_get(ev, "result");
		json_decref(s->result);
		s->result = json_incref(json_is_object(res) ? res : ev);
	} else if (!strcmp(type, "error")) {
		/* The daemon could not go on (the sandbox died under us). */
		const char *msg = json_string_value(json_object_get(ev, "message"));
		json_t *e = json_object_get(ev, "error");
		if (!msg && json_is_object(e))
			msg = json_string_value(json_object_get(e, "message"));
		if (!msg)
			msg = json_string_value(e);
		fprintf(stderr, "sandlot %s: %s\n", s->verb, msg ? msg : "sandlotd reported an error");
		s->bad = 1;
	}
	/* Other event types are for newer clients: skipped. */
	json_decref(ev);
	return rc;
}

static int on_line(void *ud, const char *line, size_t len)
{
	return handle_line(ud, line, len);
}

int exec_stream_sink(void *ud, const char *data, size_t len)
{
	struct exec_stream *s = ud;
	int rc = sl_lines_feed(&s->lines, data, len, STREAM_LINE_MAX, on_line, s);
	if (rc == -2) {
		fprintf(stderr, "sandlot %s: an event from sandlotd is too large\n", s->verb);
		s->bad = 1;
	}
	return rc < 0 ? -1 : 0;
}

void exec_stream_free(struct exec_stream *s)
{
	sl_lines_free(&s->lines);
	json_decref(s->result);
	s->result = NULL;
}

int exec_result_status(const char *verb, json_t *result)
{
	json_t *code = json_object_get(result, "exit_code");
	json_t *sig = json_object_get(result, "signal");
	const char *error = json_string_value(json_object_get(result, "error"));
	if (error && *error) {
		fprintf(stderr, "sandlot %s: %s\n", verb, error);
		return json_is_integer(code) && json_integer_value(code) > 0
			? (int)json_integer_value(code) : 127;
	}
	if (json_is_true(json_object_get(result, "timed_out"))) {
		fprintf(stderr, "sandlot %s: command timed out and was killed\n", verb);
		return EXIT_TIMEOUT;
	}
	if (json_is_true(json_object_get(result, "oom_killed")))
		fprintf(stderr, "sandlot %s: command ran out of memory; the kernel killed it\n", verb);
	else if (json_is_true(json_object_get(result, "pids_limited")))
		fprintf(stderr, "sandlot %s: warning: the process limit refused a fork\n", verb);
	if (json_is_integer(sig) && json_integer_value(sig) > 0)
		return 128 + (int)(json_integer_value(sig) & 127);
	if (json_is_integer(code))
		return (int)(json_integer_value(code) & 255);
	fprintf(stderr, "sandlot %s: sandlotd reported no exit status\n", verb);
	return EXIT_SANDLOT;
}

/* ---- the verb ------------------------------------------------------------ */

struct exec_args {
	const char *id;
	char **argv;
	json_t *env;
	const char *workdir;
	int has_timeout;
	uint64_t timeout_ms;
	int interactive;
};

static json_t *exec_body(const struct exec_args *a, int background)
{
	json_t *body = json_object();
	json_t *argv = json_array();
	for (char **p = a->argv; *p; p++)
		json_array_append_new(argv, json_string(*p));
	json_object_set_new(body, "argv", argv);
	if (json_object_size(a->env))
		json_object_set(body, "env", a->env);
	if (a->workdir)
		json_object_set_new(body, "cwd", json_string(a->workdir));
	if (a->has_timeout)
		json_object_set_new(body, "timeout_ms", json_integer((json_int_t)a->timeout_ms));
	json_object_set_new(body, "output", json_string("base64"));
	if (background) {
		/* A follower gets what sandlotd retained, not a queue that
		 * throttles the command: ask for the most it keeps. */
		json_object_set_new(body, "background", json_true());
		json_object_set_new(body, "output_limit", json_integer(INTERACTIVE_OUTPUT_LIMIT));
	}
	return body;
}

/* What ends a stream: the exit event, or why there was none. */
static int stream_outcome(struct client *c, struct client_req *req, struct exec_stream *st)
{
	if (st->broken_pipe)
		return 128 + SIGPIPE;
	if (st->result)
		return exec_result_status(c->verb, st->result);
	if (st->bad)
		return EXIT_SANDLOT;
	if (req->transport || req->status >= 300 || req->status == 0) {
		client_report(c, req, NULL);
		return EXIT_SANDLOT;
	}
	fprintf(stderr, "sandlot %s: the stream from sandlotd ended before the command did\n",
		c->verb);
	return EXIT_SANDLOT;
}

static int exec_streaming(struct client *c, const struct exec_args *a, int sigfd)
{
	cleanup_free char *id = client_escape(a->id);
	cleanup_free char *path = NULL;
	if (!id || asprintf(&path, "/v1/sandboxes/%s/exec", id) < 0)
		return EXIT_SANDLOT;
	struct exec_stream st = { .verb = c->verb, .base64 = 1 };
	json_t *body = exec_body(a, 0);
	struct client_req req = {
		.method = "POST", .path = path, .json = body,
		.accept = "application/x-ndjson",
		.sink = exec_stream_sink, .sink_ud = &st,
	};
	int rc, sig = 0;
	if (client_start(c, &req) == 0) {
		while (!client_done(&req)) {
			struct pollfd pfd = { .fd = sigfd, .events = POLLIN };
			if (client_poll(c, &pfd, 1, -1) > 0 && (sig = client_take_signal(sigfd)) != 0) {
				/* Closing the stream makes sandlotd kill the command. */
				client_cancel(&req);
				break;
			}
		}
	}
	if (sig)
		rc = 128 + sig;
	else
		rc = stream_outcome(c, &req, &st);
	client_req_free(&req);
	json_decref(body);
	exec_stream_free(&st);
	return rc;
}

/* Read what stdin has now, up to max bytes: one read that may block, then
 * more while more is ready at once, so that a fast producer is sent in
 * few large requests and a slow one (a terminal) without delay. */
static ssize_t read_stdin(char *buf, size_t max)
{
	ssize_t n = read(0, buf, max);
	if (n <= 0)
		return n;
	size_t got = (size_t)n;
	while (got < max) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			break;
		n = read(0, buf + got, max - got);
		if (n <= 0)
			break;   /* EOF or an error: seen again by the next read */
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* -i: a background exec, fed from our stdin with POST .../stdin and
 * followed with GET .../execs/EXEC?follow=1.  A signal kills it. */
static int exec_interactive(struct client *c, const struct exec_args *a, int sigfd)
{
	cleanup_free char *id = client_escape(a->id);
	cleanup_free char *path = NULL;
	if (!id || asprintf(&path, "/v1/sandboxes/%s/exec", id) < 0)
		return EXIT_SANDLOT;
	json_t *body = exec_body(a, 1);
	struct client_req start = { .method = "POST", .path = path, .json = body };
	client_perform(c, &start);
	json_decref(body);
	if (start.status != 202 && start.status != 200) {
		int rc = client_report(c, &start, NULL);
		client_req_free(&start);
		return rc == 1 ? EXIT_SANDLOT : rc;
	}
	const char *ex = client_str(start.reply, "exec_id");
	cleanup_free char *exid = client_escape(ex);
	cleanup_free char *follow_path = NULL, *stdin_path = NULL, *eof_path = NULL, *kill_path = NULL;
	if (!*ex || !exid ||
	    asprintf(&follow_path, "/v1/sandboxes/%s/execs/%s?follow=1", id, exid) < 0 ||
	    asprintf(&stdin_path, "/v1/sandboxes/%s/execs/%s/stdin", id, exid) < 0 ||
	    asprintf(&eof_path, "/v1/sandboxes/%s/execs/%s/stdin?eof=1", id, exid) < 0 ||
	    asprintf(&kill_path, "/v1/sandboxes/%s/execs/%s/kill", id, exid) < 0) {
		fprintf(stderr, "sandlot %s: sandlotd did not return an exec id\n", c->verb);
		client_req_free(&start);
		return EXIT_SANDLOT;
	}
	client_req_free(&start);

	struct exec_stream st = { .verb = c->verb, .base64 = 1 };
	struct client_req follow = {
		.method = "GET", .path = follow_path, .accept = "application/x-ndjson",
		.sink = exec_stream_sink, .sink_ud = &st,
	};
	struct client_req in = { 0 }, kill_req = { 0 };
	json_t *kill_body = NULL;
	int stdin_open = 1, in_flight = 0, killing = 0, sig = 0;
	static char buf[STDIN_CHUNK];
	client_start(c, &follow);
	while (!client_done(&follow)) {
		struct pollfd fds[2] = {
			{ .fd = sigfd, .events = POLLIN },
			{ .fd = stdin_open && !in_flight ? 0 : -1, .events = POLLIN },
		};
		if (client_poll(c, fds, 2, -1) < 0)
			break;
		if (in_flight && client_done(&in)) {
			/* 409: the command has closed its stdin or ended; whatever
			 * else went wrong, stop feeding it and let the output say. */
			if (in.status != 204 && in.status != 200 && in.status != 409 && !in.aborted)
				client_report(c, &in, "stdin");
			if (in.status != 204 && in.status != 200)
				stdin_open = 0;
			client_req_free(&in);
			in_flight = 0;
		}
		if (killing && client_done(&kill_req)) {
			client_req_free(&kill_req);
			killing = 0;
		}
		if (fds[0].revents) {
			int s = client_take_signal(sigfd);
			if (s && sig) {
				client_cancel(&follow);   /* a second signal: stop waiting */
				break;
			}
			if (s && !killing) {
				sig = s;
				kill_body = json_pack("{s:s}", "signal", "KILL");
				kill_req = (struct client_req){ .method = "POST", .path = kill_path,
								.json = kill_body };
				client_start(c, &kill_req);
				killing = 1;
				stdin_open = 0;
			}
		}
		if (fds[1].revents && stdin_open && !in_flight) {
			ssize_t n = read_stdin(buf, sizeof(buf));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			in = (struct client_req){ .method = "POST" };
			if (n > 0) {
				in.path = stdin_path;
				in.body = buf;
				in.body_len = (size_t)n;
			} else {
				in.path = eof_path;
				in.body = "";
				in.body_len = 0;
				stdin_open = 0;
			}
			client_start(c, &in);
			in_flight = 1;
		}
	}
	int rc = sig ? 128 + sig : stream_outcome(c, &follow, &st);
	if (!sig && st.result && json_is_true(json_object_get(st.result, "truncated"))) {
		/* Output lost is an error, never silent. */
		fprintf(stderr, "sandlot %s: output beyond %d MiB per stream was dropped (with -i the "
			"command runs as a background exec, whose output sandlotd caps)\n", c->verb,
			INTERACTIVE_OUTPUT_LIMIT >> 20);
		rc = EXIT_SANDLOT;
	}
	if (!sig && st.broken_pipe) {
		/* Nobody reads the output any more: the command must not go on. */
		kill_body = kill_body ? kill_body : json_pack("{s:s}", "signal", "KILL");
		struct client_req k = { .method = "POST", .path = kill_path, .json = kill_body };
		client_perform(c, &k);
		client_req_free(&k);
	}
	/* A kill still in flight is worth finishing: it is what stops the command. */
	while (killing && !client_done(&kill_req))
		client_poll(c, NULL, 0, 1000);
	client_req_free(&kill_req);
	client_req_free(&in);
	client_req_free(&follow);
	json_decref(kill_body);
	exec_stream_free(&st);
	return rc;
}

static int exec_run(const struct exec_args *a, const char *host, const char *token_file)
{
	struct client cl;
	int rc = client_init(&cl, "exec", host, token_file);
	if (rc != 0)
		return rc;
	/* Signals arrive through a signalfd so that they can end the stream
	 * cleanly; a closed output pipe is an EPIPE, not our death. */
	cleanup_close int sigfd = client_signalfd();
	if (sigfd < 0) {
		fprintf(stderr, "sandlot exec: signalfd: %s\n", strerror(errno));
		rc = EXIT_SANDLOT;
	} else if (a->interactive) {
		rc = exec_interactive(&cl, a, sigfd);
	} else {
		rc = exec_streaming(&cl, a, sigfd);
	}
	client_free(&cl);
	return rc;
}

int cmd_exec(int argc, char **argv)
{
	struct exec_args a = { .env = json_object() };
	const char *host = NULL, *token_file = NULL;
	sandlot_error_t *err = NULL;
	int rc = EXIT_USAGE;

	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:e:w:t:iH:h", exec_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 'e': {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg) {
				rc = cli_usage_error("exec", "invalid --env \"%s\": expected KEY=VALUE", optarg);
				goto out;
			}
			cleanup_free char *key = strndup(optarg, (size_t)(eq - optarg));
			if (!key) {
				rc = EXIT_SANDLOT;
				goto out;
			}
			if (json_object_set_new(a.env, key, json_string(eq + 1)) < 0) {
				rc = cli_usage_error("exec", "invalid --env \"%s\": not UTF-8", optarg);
				goto out;
			}
			break;
		}
		case 'w':
			a.workdir = optarg;
			break;
		case 't':
			if (sandlot__parse_duration(optarg, &a.timeout_ms, &err) < 0) {
				rc = cli_usage_error("exec", "--timeout: %s", sandlot_error_message(err));
				sandlot_error_free(err);
				goto out;
			}
			a.has_timeout = 1;
			break;
		case 'i':
			a.interactive = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(exec_help, stdout);
			rc = 0;
			goto out;
		default:
			rc = cli_option_error("exec", c, argv);
			goto out;
		}
	}
	if (optind >= argc) {
		rc = cli_usage_error("exec", "no sandbox given: sandlot exec [OPTIONS] ID -- COMMAND [ARG...]");
		goto out;
	}
	a.id = argv[optind++];
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc) {
		rc = cli_usage_error("exec", "no command given: sandlot exec [OPTIONS] ID -- COMMAND [ARG...]");
		goto out;
	}
	a.argv = argv + optind;

	rc = exec_run(&a, host, token_file);
out:
	json_decref(a.env);
	return rc;
}
