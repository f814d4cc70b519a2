/* sandlot rm: destroy sandboxes. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char rm_help[] =
	"NAME\n"
	"    sandlot rm - destroy sandboxes\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot rm [OPTIONS] ID...\n"
	"\n"
	"DESCRIPTION\n"
	"    Destroys each sandbox: kills every process in it and frees its\n"
	"    memory, storage and files.  Prints the id of each sandbox destroyed.\n"
	"    A sandbox that does not exist or has already ended is reported on\n"
	"    standard error and the others are still removed.\n"
	"\n"
	"OPTIONS\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 if every sandbox was destroyed, 1 if any was missing or already\n"
	"    ended, 125 if sandlotd could not be reached, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot rm sb-7x2k...\n"
	"    sandlot ls -q --label job=42 | xargs -r sandlot rm\n";

static const struct option rm_opts[] = {
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int rm_run(char **ids, int n, const char *host, const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "rm", host, token_file);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		cleanup_free char *id = client_escape(ids[i]);
		cleanup_free char *path = NULL;
		if (!id || asprintf(&path, "/v1/sandboxes/%s", id) < 0) {
			rc = EXIT_SANDLOT;
			break;
		}
		struct client_req req = { .method = "DELETE", .path = path };
		client_perform(&c, &req);
		if (req.status >= 200 && req.status < 300) {
			puts(ids[i]);
			fflush(stdout);
		} else {
			int r = client_report(&c, &req, ids[i]);
			if (r > rc)
				rc = r;
			if (req.transport) {
				client_req_free(&req);
				break;   /* the next ones would fail the same way */
			}
		}
		client_req_free(&req);
	}
	client_free(&c);
	return rc;
}

int cmd_rm(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:H:h", rm_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(rm_help, stdout);
			return 0;
		default:
			return cli_option_error("rm", c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("rm", "no sandbox given: sandlot rm ID...");
	return rm_run(argv + optind, argc - optind, host, token_file);
}
