/* sandlot install: install packages into a sandbox, and sandlot network:
 * show or change its network policy (docs/network.md). */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char install_help[] =
	"NAME\n"
	"    sandlot install - install pip or npm packages into a sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot install [OPTIONS] ID (--pip SPEC | --npm SPEC)...\n"
	"\n"
	"DESCRIPTION\n"
	"    Installs packages into the sandbox's workspace: pip packages for its\n"
	"    user (pip --user, under /home/user/.local), npm packages into\n"
	"    /home/user/node_modules.  The registries are reachable only for the\n"
	"    download, which sandlotd makes in a separate sandbox that runs no\n"
	"    package code; a second install of the same pinned packages comes from\n"
	"    sandlotd's cache and downloads nothing.  The installers' output goes\n"
	"    to standard error.  See docs/network.md.\n"
	"\n"
	"OPTIONS\n"
	"        --pip SPEC         a requirement such as pandas==2.2.0 (repeatable)\n"
	"        --npm SPEC         a registry package such as lodash@4 (repeatable)\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 when installed, 1 if the install failed or sandlotd refused (the\n"
	"    reason on standard error), 125 if it could not be reached, 2 for bad\n"
	"    arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot install \"$id\" --pip pandas==2.2.0 --pip pyarrow\n"
	"    sandlot install \"$id\" --npm lodash@4\n";

static const char network_help[] =
	"NAME\n"
	"    sandlot network - show or change a sandbox's network policy\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot network [OPTIONS] ID [--net MODE] [--allow-host RULE]... [--deny-host RULE]...\n"
	"    sandlot network --log [--after N] ID\n"
	"\n"
	"DESCRIPTION\n"
	"    Without policy options, prints the sandbox's policy as JSON.  With\n"
	"    them, replaces it: DNS answers and new connections follow the new\n"
	"    policy at once, and connections it no longer allows are closed.\n"
	"    --log prints the network log (one JSON object per DNS query or\n"
	"    connection, allowed or refused, with the reason).\n"
	"\n"
	"OPTIONS\n"
	CLI_NET_OPTIONS_HELP
	"        --log               print the network log instead\n"
	"        --after N           only log entries after sequence number N\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help              show this help\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot network \"$id\" --allow-host api.github.com --allow-host '*.githubusercontent.com'\n"
	"    sandlot network \"$id\" --net none\n"
	"    sandlot network --log \"$id\"\n";

enum { OPT_LOG = 300, OPT_AFTER };

static const struct option install_opts[] = {
	CLI_PACKAGE_OPTIONS,
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static const struct option network_opts[] = {
	CLI_NET_OPTIONS,
	{ "log", no_argument, NULL, OPT_LOG },
	{ "after", required_argument, NULL, OPT_AFTER },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* One request; prints the reply (JSON, one line) when print_reply, and the
 * installers' output (on standard error) when there is one. */
static int call(const char *verb, const char *method, const char *id, const char *suffix,
		json_t *body, int print_reply, const char *host, const char *token_file)
{
	struct client c;
	int rc = client_init(&c, verb, host, token_file);
	if (rc)
		return rc;
	cleanup_free char *eid = client_escape(id);
	cleanup_free char *path = NULL;
	if (!eid || asprintf(&path, "/v1/sandboxes/%s%s", eid, suffix) < 0) {
		client_free(&c);
		return EXIT_SANDLOT;
	}
	struct client_req req = { .method = method, .path = path, .json = body };
	client_perform(&c, &req);
	json_t *out = req.reply ? json_object_get(req.reply, "output") : NULL;
	json_t *eout = req.reply ? json_object_get(json_object_get(req.reply, "error"), "output")
				 : NULL;
	if (json_is_string(out ? out : eout))
		fputs(json_string_value(out ? out : eout), stderr);
	if (req.status != 200) {
		rc = client_report(&c, &req, id);
	} else if (print_reply) {
		char *text = json_dumps(req.reply, JSON_COMPACT);
		if (text)
			puts(text);
		free(text);
	}
	client_req_free(&req);
	client_free(&c);
	return rc;
}

int cmd_install(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	json_t *body = json_object();
	int rc = 0, c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:H:h", install_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(install_help, stdout);
			json_decref(body);
			return 0;
		default:
			rc = cli_net_option("install", c, optarg, body);
			if (rc == 1)
				rc = cli_option_error("install", c, argv);
			if (rc) {
				json_decref(body);
				return rc;
			}
		}
	}
	json_t *pk = json_object_get(body, "packages");
	if (optind != argc - 1 || !pk)
		rc = cli_usage_error("install", "%s", optind != argc - 1
					 ? "expected exactly one sandbox ID"
					 : "nothing to install: give --pip SPEC or --npm SPEC");
	else
		rc = call("install", "POST", argv[optind], "/packages", pk, 0, host, token_file);
	json_decref(body);
	return rc;
}

int cmd_network(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	json_t *body = json_object();
	int rc = 0, c, log = 0;
	const char *after = NULL;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:H:h", network_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case OPT_LOG:
			log = 1;
			break;
		case OPT_AFTER:
			if (strspn(optarg, "0123456789") != strlen(optarg) || !*optarg) {
				json_decref(body);
				return cli_usage_error("network", "invalid --after \"%s\": expected a "
						       "sequence number", optarg);
			}
			after = optarg;
			break;
		case 'h':
			fputs(network_help, stdout);
			json_decref(body);
			return 0;
		default:
			rc = cli_net_option("network", c, optarg, body);
			if (rc == 1 || c == OPT_PIP || c == OPT_NPM)
				rc = cli_option_error("network", c, argv);
			if (rc) {
				json_decref(body);
				return rc;
			}
		}
	}
	json_t *net = json_object_get(body, "network");
	if (optind != argc - 1) {
		rc = cli_usage_error("network", "expected exactly one sandbox ID");
	} else if (log && net) {
		rc = cli_usage_error("network", "--log cannot be combined with a policy change");
	} else if (log) {
		char suffix[64];
		snprintf(suffix, sizeof(suffix), "/network/log%s%s", after ? "?after=" : "",
			 after ? after : "");
		rc = call("network", "GET", argv[optind], suffix, NULL, 1, host, token_file);
	} else if (!net) {
		rc = call("network", "GET", argv[optind], "/network", NULL, 1, host, token_file);
	} else if ((rc = cli_net_finish("network", body)) == 0) {
		rc = call("network", "PUT", argv[optind], "/network", net, 0, host, token_file);
	}
	json_decref(body);
	return rc;
}
