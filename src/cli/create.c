/* sandlot create: ask sandlotd for a new sandbox. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"
#include "common/parse.h"

static const char create_help[] =
	"NAME\n"
	"    sandlot create - create a sandbox that outlives one command\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot create [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Asks sandlotd for a new sandbox and prints its id (sb-...) on\n"
	"    standard output.  The sandbox keeps its files and processes between\n"
	"    `sandlot exec` calls until it is removed with `sandlot rm`, reaches\n"
	"    its lifetime (--ttl) or stays idle too long (--idle-timeout: no\n"
	"    running process and no API call).\n"
	"\n"
	"OPTIONS\n"
	"    -m, --memory SIZE       memory limit including swap, e.g. 512M, 2G\n"
	"                            (default: the daemon's, 512M)\n"
	"        --cpus N            CPU quota, e.g. 0.5 or 2 (default: no quota)\n"
	"        --pids N            maximum number of processes (default 256)\n"
	"        --disk SIZE         size of /home/user + /tmp together (default 1G)\n"
	"    -e, --env KEY=VALUE     environment variable of every exec (repeatable)\n"
	"        --ttl DURATION      destroy the sandbox DURATION after its creation,\n"
	"                            e.g. 30m, 2h (0 = never; default: the daemon's)\n"
	"        --idle-timeout DURATION\n"
	"                            destroy it after DURATION without a running\n"
	"                            process or an API call (0 = never)\n"
	"    -l, --label KEY=VALUE   free-form metadata, filterable with\n"
	"                            `sandlot ls --label` (repeatable)\n"
	"        --image NAME        root filesystem image: host, or one built with\n"
	"                            sandlot image build in sandlotd's data directory\n"
	"                            (default: sandlotd's --default-image, else host)\n"
	"        --isolation ns|vm   ns: namespaces around the sandbox (the default);\n"
	"                            vm: a microVM of its own (docs/vm.md; default:\n"
	"                            sandlotd's --default-isolation)\n"
	"    -p, --port PORT         expose PORT: a server listening on it inside is\n"
	"                            reachable at a URL on the host's 127.0.0.1 and\n"
	"                            through sandlotd's API (repeatable; at most 32;\n"
	"                            see sandlot port)\n"
	CLI_NET_OPTIONS_HELP
	CLI_PACKAGE_OPTIONS_HELP
	"        --json              print the whole sandbox object as JSON (one line)\n"
	"                            instead of its id\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help              show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if sandlotd refused (bad option, too many\n"
	"    sandboxes), 125 if it could not be reached, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    id=$(sandlot create --memory 1G --ttl 1h --label owner=alice)\n"
	"    sandlot exec \"$id\" -- python3 -c 'print(1)'\n"
	"    id=$(sandlot create --port 8000)\n"
	"    sandlot exec \"$id\" -- sh -c 'python3 -m http.server 8000 >log 2>&1 &'\n"
	"    sandlot port \"$id\"            # 8000  http://127.0.0.1:40123\n"
	"    id=$(sandlot create --allow-host pypi.org --allow-host files.pythonhosted.org)\n";

enum { OPT_JSON = 256 };

static const struct option create_opts[] = {
	CLI_SANDBOX_OPTIONS,
	{ "label", required_argument, NULL, 'l' },
	{ "json", no_argument, NULL, OPT_JSON },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* "KEY=VALUE" into obj.  Returns 0, or EXIT_USAGE after saying why. */
static int add_pair(const char *verb, json_t *obj, const char *opt, const char *s)
{
	const char *eq = strchr(s, '=');
	if (!eq || eq == s)
		return cli_usage_error(verb, "invalid %s \"%s\": expected KEY=VALUE", opt, s);
	cleanup_free char *key = strndup(s, (size_t)(eq - s));
	if (!key || json_object_set_new(obj, key, json_string(eq + 1)) < 0)
		return cli_usage_error(verb, "invalid %s \"%s\": not UTF-8", opt, s);
	return 0;
}

int cli_sandbox_option(const char *verb, int c, const char *arg, json_t *body, json_t *env)
{
	sandlot_error_t *err = NULL;
	const char *opt = NULL;
	uint64_t v;
	uint32_t milli;
	switch (c) {
	case 'm':
	case OPT_DISK:
		opt = c == 'm' ? "--memory" : "--disk";
		if (sandlot__parse_size(arg, 0, &v, &err) == 0)
			json_object_set_new(body, c == 'm' ? "memory" : "disk", json_integer((json_int_t)v));
		break;
	case OPT_CPUS:
		opt = "--cpus";
		if (sandlot__parse_cpus(arg, &milli, &err) == 0)
			json_object_set_new(body, "cpus", json_real(milli / 1000.0));
		break;
	case OPT_PIDS: {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(arg, &end, 10);
		if (!*arg || *end || errno || arg[0] == '-' || n < 2 || n > (1u << 22))
			return cli_usage_error(verb, "invalid --pids \"%s\": expected a whole "
					       "number from 2 to %u", arg, 1u << 22);
		json_object_set_new(body, "pids", json_integer((json_int_t)n));
		break;
	}
	case OPT_TTL:
	case OPT_IDLE:
		opt = c == OPT_TTL ? "--ttl" : "--idle-timeout";
		/* The API counts whole seconds; round up so that 500ms is not "never". */
		if (sandlot__parse_duration(arg, &v, &err) == 0)
			json_object_set_new(body, c == OPT_TTL ? "ttl_seconds" : "idle_timeout_seconds",
					    json_integer((json_int_t)((v + 999) / 1000)));
		break;
	case 'e':
		return add_pair(verb, env, "--env", arg);
	case OPT_IMAGE:
		json_object_set_new(body, "image", json_string(arg));
		break;
	case OPT_ISOLATION:
		if (strcmp(arg, "ns") != 0 && strcmp(arg, "vm") != 0)
			return cli_usage_error(verb, "invalid --isolation \"%s\": expected ns or vm",
					       arg);
		json_object_set_new(body, "isolation", json_string(arg));
		break;
	case 'p': {
		unsigned port = cli_parse_port(arg);
		if (!port)
			return cli_usage_error(verb, "invalid --port \"%s\": expected a port number "
					       "from 1 to 65535", arg);
		json_t *ports = json_object_get(body, "ports");
		if (!ports) {
			ports = json_array();
			json_object_set_new(body, "ports", ports);
		}
		size_t i;
		json_t *e;
		json_array_foreach(ports, i, e)
			if (json_integer_value(e) == (json_int_t)port)
				return cli_usage_error(verb, "--port %u is given twice", port);
		json_array_append_new(ports, json_integer(port));
		break;
	}
	default:
		return cli_net_option(verb, c, arg, body);
	}
	if (err) {
		int rc = cli_usage_error(verb, "%s: %s", opt, sandlot_error_message(err));
		sandlot_error_free(err);
		return rc;
	}
	return 0;
}

static int create_run(json_t *body, int json, const char *host, const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "create", host, token_file);
	if (rc)
		return rc;
	struct client_req req = { .method = "POST", .path = "/v1/sandboxes", .json = body };
	client_perform(&c, &req);
	if (req.status != 201 && req.status != 200) {
		rc = client_report(&c, &req, NULL);
	} else if (json) {
		char *text = json_dumps(req.reply, JSON_COMPACT);
		if (text)
			puts(text);
		free(text);
	} else {
		const char *id = client_str(req.reply, "id");
		if (!*id) {
			fprintf(stderr, "sandlot create: sandlotd did not say the sandbox's id\n");
			rc = EXIT_SANDLOT;
		} else {
			puts(id);
		}
	}
	if (fflush(stdout) != 0 && rc == 0)
		rc = EXIT_SANDLOT;
	client_req_free(&req);
	client_free(&c);
	return rc;
}

int cmd_create(int argc, char **argv)
{
	json_t *body = json_object(), *env = json_object(), *labels = json_object();
	const char *host = NULL, *token_file = NULL;
	int json = 0, rc = EXIT_USAGE;

	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:m:e:l:p:H:h", create_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 'l':
			if ((rc = add_pair("create", labels, "--label", optarg)) != 0)
				goto out;
			break;
		case OPT_JSON:
			json = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(create_help, stdout);
			rc = 0;
			goto out;
		default:
			rc = cli_sandbox_option("create", c, optarg, body, env);
			if (rc == 1)
				rc = cli_option_error("create", c, argv);
			if (rc != 0)
				goto out;
			break;
		}
	}
	if (optind < argc) {
		rc = cli_usage_error("create", "unexpected argument \"%s\"", argv[optind]);
		goto out;
	}
	if ((rc = cli_net_finish("create", body)) != 0)
		goto out;
	if (json_object_size(env))
		json_object_set(body, "env", env);
	if (json_object_size(labels))
		json_object_set(body, "metadata", labels);
	rc = create_run(body, json, host, token_file);
out:
	json_decref(body);
	json_decref(env);
	json_decref(labels);
	return rc;
}

unsigned cli_parse_port(const char *s)
{
	unsigned long v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9' && v <= 65535; p++)
		v = v * 10 + (unsigned long)(*p - '0');
	return p == s || *p || v < 1 || v > 65535 ? 0 : (unsigned)v;
}
