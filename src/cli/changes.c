/* sandlot changes: files created, modified and deleted in a sandbox. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char changes_help[] =
	"NAME\n"
	"    sandlot changes - files changed in a sandbox's workspace\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot changes [OPTIONS] ID\n"
	"\n"
	"DESCRIPTION\n"
	"    Lists the files and directories under /home/user that execs and file\n"
	"    uploads created, modified or deleted, oldest first, as a table:\n"
	"    CURSOR, KIND (created, modified, deleted), TYPE (file, directory,\n"
	"    symlink, other), SIZE in bytes, PATH, and SOURCE (the exec id that made\n"
	"    the change, or \"api\" for uploads).  Pass the last CURSOR seen to\n"
	"    --since to get only what changed after it.\n"
	"\n"
	"    sandlotd keeps a window of each sandbox's newest changes (16M by\n"
	"    default): when entries after --since were forgotten, a warning on\n"
	"    stderr says so.  Long logs come in pages, which are all fetched.\n"
	"\n"
	"OPTIONS\n"
	"    -s, --since N          only changes after cursor N (default 0: all)\n"
	"        --json             print sandlotd's answer as JSON (one line):\n"
	"                           {\"cursor\": N, \"changes\": [...]}, every page\n"
	"                           merged, with \"truncated\": true if entries were\n"
	"                           forgotten\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if sandlotd refused (no such sandbox), 125 if it could\n"
	"    not be reached, 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot changes sb-7x2k...\n"
	"    sandlot changes --since 12 --json sb-7x2k...\n";

enum { OPT_JSON = 256 };

static const struct option changes_opts[] = {
	{ "since", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, OPT_JSON },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void print_table(json_t *list)
{
	size_t wc = strlen("CURSOR"), wk = strlen("KIND"), wt = strlen("TYPE"), ws = strlen("SIZE"),
	       wp = strlen("PATH");
	size_t i;
	json_t *ch;
	char num[32];
	json_array_foreach(list, i, ch) {
		size_t l;
		l = (size_t)snprintf(num, sizeof(num), "%lld",
				     (long long)json_integer_value(json_object_get(ch, "cursor")));
		wc = l > wc ? l : wc;
		l = (size_t)snprintf(num, sizeof(num), "%lld",
				     (long long)json_integer_value(json_object_get(ch, "size")));
		ws = l > ws ? l : ws;
		l = strlen(client_str(ch, "kind"));
		wk = l > wk ? l : wk;
		l = strlen(client_str(ch, "type"));
		wt = l > wt ? l : wt;
		l = strlen(client_str(ch, "path"));
		wp = l > wp ? l : wp;
	}
	printf("%*s  %-*s  %-*s  %*s  %-*s  %s\n", (int)wc, "CURSOR", (int)wk, "KIND", (int)wt, "TYPE",
	       (int)ws, "SIZE", (int)wp, "PATH", "SOURCE");
	json_array_foreach(list, i, ch) {
		json_t *size = json_object_get(ch, "size");
		char sz[32] = "-";
		if (json_is_integer(size) && strcmp(client_str(ch, "kind"), "deleted") != 0)
			snprintf(sz, sizeof(sz), "%lld", (long long)json_integer_value(size));
		printf("%*lld  %-*s  %-*s  %*s  %-*s  %s\n", (int)wc,
		       (long long)json_integer_value(json_object_get(ch, "cursor")), (int)wk,
		       client_str(ch, "kind"), (int)wt, client_str(ch, "type"), (int)ws, sz, (int)wp,
		       client_str(ch, "path"), client_str(ch, "source"));
	}
}

static int changes_run(const char *sid, unsigned long long since, int json, const char *host,
		       const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "changes", host, token_file);
	if (rc)
		return rc;
	cleanup_free char *id = client_escape(sid);
	if (!id) {
		client_free(&c);
		return EXIT_SANDLOT;
	}
	/* Every page: each answer is bounded (sandlotd --changes-answer-bytes);
	 * "more" says another follows, from the page's cursor. */
	json_t *all = json_array(), *last = NULL;
	int truncated = 0;
	unsigned long long from = since;
	for (int page = 0; all && rc == 0; page++) {
		cleanup_free char *path = NULL;
		if (asprintf(&path, "/v1/sandboxes/%s/changes?since=%llu", id, from) < 0) {
			rc = EXIT_SANDLOT;
			break;
		}
		struct client_req req = { .method = "GET", .path = path };
		client_perform(&c, &req);
		if (req.status != 200) {
			rc = client_report(&c, &req, NULL);
			client_req_free(&req);
			break;
		}
		if (page == 0)
			truncated = json_is_true(json_object_get(req.reply, "truncated"));
		json_array_extend(all, json_object_get(req.reply, "changes"));
		json_decref(last);
		last = json_incref(req.reply);
		int more = json_is_true(json_object_get(req.reply, "more"));
		unsigned long long next =
			(unsigned long long)json_integer_value(json_object_get(req.reply, "cursor"));
		client_req_free(&req);
		if (!more)
			break;
		if (next <= from) { /* a daemon that does not move on: stop */
			rc = EXIT_SANDLOT;
			fprintf(stderr, "sandlot changes: sandlotd's cursor did not advance\n");
			break;
		}
		from = next;
	}
	if (rc == 0 && all && last) {
		if (truncated)
			fprintf(stderr, "sandlot changes: changes after cursor %llu were forgotten: "
					"sandlotd keeps only the newest of a sandbox's log\n", since);
		if (json) {
			json_t *o = json_pack("{s:O, s:O}", "cursor", json_object_get(last, "cursor"),
					      "changes", all);
			if (o && truncated)
				json_object_set_new(o, "truncated", json_true());
			char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
			if (text)
				puts(text);
			else
				rc = EXIT_SANDLOT;
			free(text);
			json_decref(o);
		} else {
			print_table(all);
		}
	} else if (rc == 0) {
		rc = EXIT_SANDLOT;
	}
	json_decref(all);
	json_decref(last);
	if (fflush(stdout) != 0 && rc == 0)
		rc = EXIT_SANDLOT;
	client_free(&c);
	return rc;
}

int cmd_changes(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	unsigned long long since = 0;
	int json = 0;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:s:H:h", changes_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 's': {
			char *end;
			errno = 0;
			since = strtoull(optarg, &end, 10);
			if (!*optarg || *end || errno || optarg[0] == '-' || since > (1ull << 53))
				return cli_usage_error("changes", "invalid --since \"%s\": expected a "
						       "cursor (a whole number, 0 or more)", optarg);
			break;
		}
		case OPT_JSON:
			json = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(changes_help, stdout);
			return 0;
		default:
			return cli_option_error("changes", c, argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error("changes", "%s: sandlot changes [OPTIONS] ID",
				       argc - optind < 1 ? "no sandbox given" : "too many arguments");
	return changes_run(argv[optind], since, json, host, token_file);
}
