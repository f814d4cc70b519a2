/* sandlot logs: the output of an exec (a background one, typically). */
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/base64.h"
#include "common/cleanup.h"

static const char logs_help[] =
	"NAME\n"
	"    sandlot logs - show the output of an exec\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot logs [OPTIONS] ID EXEC\n"
	"\n"
	"DESCRIPTION\n"
	"    Writes what the exec EXEC (ex-...) of sandbox ID has printed so far:\n"
	"    its standard output to standard output, its standard error to\n"
	"    standard error.  Execs started with \"background\": true through the\n"
	"    API return their exec id at once; `sandlot exec` streams its own\n"
	"    output and needs no logs.  sandlotd keeps the output of recent execs\n"
	"    only, and at most its output limit of each stream (1 MiB unless the\n"
	"    exec asked for more).\n"
	"\n"
	"OPTIONS\n"
	"    -f, --follow           stream the output from the start and keep\n"
	"                           streaming until the command ends (interrupting\n"
	"                           sandlot logs does not stop the command)\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if sandlotd refused (no such sandbox or exec), 125 if\n"
	"    it could not be reached, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot logs sb-7x2k... ex-q3v9...\n"
	"    sandlot logs --follow sb-7x2k... ex-q3v9...\n";

static const struct option logs_opts[] = {
	{ "follow", no_argument, NULL, 'f' },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Write status[key] (text, or base64 when the status says "output":
 * "base64") to fd.  0, -1 with errno (EPIPE), or -2 for bad base64. */
static int write_field(int fd, json_t *status, const char *key)
{
	json_t *v = json_object_get(status, key);
	if (!json_is_string(v))
		v = json_object_get(json_object_get(status, "result"), key);
	if (!json_is_string(v))
		return 0;
	const char *text = json_string_value(v);
	size_t len = json_string_length(v);
	if (strcmp(client_str(status, "output"), "base64") != 0)
		return client_write_all(fd, text, len);
	unsigned char *raw = malloc(sandlot__base64_decoded_max(len));
	ssize_t n = raw ? sandlot__base64_decode(text, len, raw) : -1;
	int rc = n < 0 ? -2 : client_write_all(fd, raw, (size_t)n);
	free(raw);
	return rc;
}

static void warn_truncated(json_t *status)
{
	if (json_is_true(json_object_get(status, "truncated")) ||
	    json_is_true(json_object_get(json_object_get(status, "result"), "truncated")))
		fprintf(stderr, "sandlot logs: warning: sandlotd kept only part of this exec's output "
			"(its output limit)\n");
}

static int logs_run(const char *sid, const char *exid, int follow, const char *host,
		    const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "logs", host, token_file);
	if (rc)
		return rc;
	cleanup_free char *id = client_escape(sid);
	cleanup_free char *ex = client_escape(exid);
	cleanup_free char *path = NULL;
	if (!id || !ex ||
	    asprintf(&path, "/v1/sandboxes/%s/execs/%s%s", id, ex, follow ? "?follow=1" : "") < 0) {
		client_free(&c);
		return EXIT_SANDLOT;
	}
	signal(SIGPIPE, SIG_IGN);
	struct exec_stream st = { .verb = "logs" };
	struct client_req req = { .method = "GET", .path = path };
	if (follow) {
		req.accept = "application/x-ndjson";
		req.sink = exec_stream_sink;
		req.sink_ud = &st;
	}
	client_perform(&c, &req);
	if (req.status != 200 || req.transport) {
		rc = client_report(&c, &req, NULL);
	} else if (follow) {
		if (st.broken_pipe)
			rc = 128 + SIGPIPE;
		else if (st.bad || req.aborted)
			rc = EXIT_SANDLOT;
		else if (!st.result) {
			fprintf(stderr, "sandlot logs: the stream from sandlotd ended before the command did\n");
			rc = EXIT_SANDLOT;
		} else {
			warn_truncated(st.result);
		}
	} else {
		int w = write_field(1, req.reply, "stdout");
		if (w == 0)
			w = write_field(2, req.reply, "stderr");
		if (w == -2) {
			fprintf(stderr, "sandlot logs: sandlotd sent output that is not base64\n");
			rc = EXIT_SANDLOT;
		} else if (w < 0) {
			rc = 128 + SIGPIPE;
		} else {
			warn_truncated(req.reply);
		}
	}
	exec_stream_free(&st);
	client_req_free(&req);
	client_free(&c);
	return rc;
}

int cmd_logs(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	int follow = 0;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:fH:h", logs_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 'f':
			follow = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(logs_help, stdout);
			return 0;
		default:
			return cli_option_error("logs", c, argv);
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("logs", "%s: sandlot logs [--follow] ID EXEC",
				       argc - optind < 2 ? "missing arguments" : "too many arguments");
	return logs_run(argv[optind], argv[optind + 1], follow, host, token_file);
}
