/* sandlot port: list, add and remove a sandbox's exposed ports. */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char port_help[] =
	"NAME\n"
	"    sandlot port - the exposed ports of a sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot port [OPTIONS] ID\n"
	"    sandlot port [OPTIONS] ID add PORT...\n"
	"    sandlot port [OPTIONS] ID rm PORT...\n"
	"\n"
	"DESCRIPTION\n"
	"    A server listening inside a sandbox on an exposed port (on 0.0.0.0 or\n"
	"    127.0.0.1) is reachable from the host at the port's URL, a port of the\n"
	"    host's 127.0.0.1 that sandlotd relays into the sandbox, and through\n"
	"    sandlotd's API at /v1/sandboxes/ID/ports/PORT/ (HTTP and WebSocket;\n"
	"    the way in for remote users of a TCP sandlotd).  Nothing else can reach\n"
	"    into a sandbox.  Ports are exposed at creation (sandlot create --port)\n"
	"    or added and removed here; a paused sandbox's ports listen again when\n"
	"    it resumes (the same URL when that host port is still free).\n"
	"\n"
	"    Without a subcommand: one line per exposed port, \"PORT URL\" (the URL\n"
	"    is \"-\" while the sandbox is paused or ended).  add prints the same\n"
	"    line for each port it exposes; rm removes ports, closing their\n"
	"    listeners and every connection through them.\n"
	"\n"
	"OPTIONS\n"
	"        --json             print the answer as JSON (one line)\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if sandlotd refused (no such sandbox, port already\n"
	"    exposed or not exposed, too many ports), 125 if sandlotd could not be\n"
	"    reached, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot port sb-7x2k... add 8000\n"
	"    curl \"$(sandlot port sb-7x2k... | awk '$1 == 8000 {print $2}')\"\n"
	"    sandlot port sb-7x2k... rm 8000\n";

enum { OPT_JSON = 256 };

static const struct option port_opts[] = {
	{ "json", no_argument, NULL, OPT_JSON },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void print_port(json_t *p)
{
	json_t *url = json_object_get(p, "url");
	printf("%lld %s\n", (long long)json_integer_value(json_object_get(p, "port")),
	       json_is_string(url) ? json_string_value(url) : "-");
}

static void print_json(json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT);
	if (text)
		puts(text);
	free(text);
}

static int port_run(const char *id, const char *sub, unsigned *ports, int n, int json,
		    const char *host, const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "port", host, token_file);
	if (rc)
		return rc;
	cleanup_free char *eid = client_escape(id);
	if (!eid) {
		client_free(&c);
		return EXIT_SANDLOT;
	}
	if (!sub) {
		cleanup_free char *path = NULL;
		if (asprintf(&path, "/v1/sandboxes/%s/ports", eid) < 0)
			path = NULL;
		struct client_req req = { .method = "GET", .path = path };
		client_perform(&c, &req);
		if (req.status != 200) {
			rc = client_report(&c, &req, id);
		} else if (json) {
			print_json(req.reply);
		} else {
			size_t i;
			json_t *p;
			json_array_foreach(json_object_get(req.reply, "ports"), i, p)
				print_port(p);
		}
		client_req_free(&req);
	}
	json_t *added = json_array();
	for (int i = 0; sub && i < n; i++) {
		cleanup_free char *path = NULL;
		int add = strcmp(sub, "add") == 0;
		if (asprintf(&path, add ? "/v1/sandboxes/%s/ports" : "/v1/sandboxes/%s/ports/%u", eid,
			     ports[i]) < 0) {
			rc = EXIT_SANDLOT;
			break;
		}
		json_t *body = add ? json_pack("{s:i}", "port", (int)ports[i]) : NULL;
		struct client_req req = { .method = add ? "POST" : "DELETE", .path = path,
					  .json = body };
		client_perform(&c, &req);
		json_decref(body);
		if (req.status >= 200 && req.status < 300) {
			if (add && json)
				json_array_append(added, req.reply);
			else if (add)
				print_port(req.reply);
		} else {
			char what[64];
			snprintf(what, sizeof(what), "port %u", ports[i]);
			int r = client_report(&c, &req, what);
			if (r > rc)
				rc = r;
			if (req.transport) {
				client_req_free(&req);
				break;
			}
		}
		client_req_free(&req);
	}
	if (sub && json && strcmp(sub, "add") == 0)
		print_json(json_pack("{s:O}", "ports", added));
	json_decref(added);
	if (fflush(stdout) != 0 && rc == 0)
		rc = EXIT_SANDLOT;
	client_free(&c);
	return rc;
}

int cmd_port(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	int json = 0;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:H:h", port_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case OPT_JSON:
			json = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(port_help, stdout);
			return 0;
		default:
			return cli_option_error("port", c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("port", "missing the sandbox ID");
	const char *id = argv[optind++];
	const char *sub = NULL;
	if (optind < argc) {
		sub = argv[optind++];
		if (strcmp(sub, "add") != 0 && strcmp(sub, "rm") != 0)
			return cli_usage_error("port", "unknown subcommand \"%s\" (expected add or rm)",
					       sub);
		if (optind >= argc)
			return cli_usage_error("port", "%s needs at least one PORT", sub);
	}
	int n = argc - optind;
	cleanup_free unsigned *ports = calloc((size_t)(n ? n : 1), sizeof(unsigned));
	if (!ports)
		return EXIT_SANDLOT;
	for (int i = 0; i < n; i++) {
		ports[i] = cli_parse_port(argv[optind + i]);
		if (!ports[i])
			return cli_usage_error("port", "invalid port \"%s\": expected a number from 1 to "
					       "65535", argv[optind + i]);
	}
	return port_run(id, sub, ports, n, json, host, token_file);
}
