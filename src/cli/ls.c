/* sandlot ls: the sandboxes of sandlotd as a table, or (with SANDBOX:PATH)
 * the entries of a directory in a sandbox. */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "common/cleanup.h"

static const char ls_help[] =
	"NAME\n"
	"    sandlot ls - list sandboxes\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot ls [OPTIONS]\n"
	"    sandlot ls [OPTIONS] SANDBOX:PATH\n"
	"\n"
	"DESCRIPTION\n"
	"    Prints the running sandboxes of sandlotd as a table: ID, STATE,\n"
	"    CREATED (how long ago), EXPIRES (when its lifetime ends; \"-\" for\n"
	"    never) and LABELS.  With --all, sandboxes that have ended (expired,\n"
	"    deleted, lost in a daemon restart, failed) are listed too, with the\n"
	"    reason they ended.\n"
	"\n"
	"    With SANDBOX:PATH, prints the entries of that directory in the sandbox\n"
	"    (relative paths are under /home/user; SANDBOX: alone is /home/user):\n"
	"    TYPE (file, dir, link, other), MODE, SIZE (bytes a download sends),\n"
	"    ON-DISK (bytes it takes: a sparse file's is far smaller than its size),\n"
	"    MODIFIED and NAME, sorted by name.\n"
	"\n"
	"OPTIONS\n"
	"    -a, --all               include ended sandboxes\n"
	"    -l, --label KEY=VALUE   only sandboxes with this label (repeatable: all\n"
	"                            must match)\n"
	"    -q, --quiet             print only the ids (the names), one per line\n"
	"        --json              print sandlotd's answer as JSON (one line):\n"
	"                            {\"sandboxes\": [...]} ({\"path\", \"entries\"})\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help              show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 on success, 1 if sandlotd refused, 125 if it could not be reached,\n"
	"    2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot ls\n"
	"    sandlot ls --label owner=alice -q | xargs -r sandlot rm\n"
	"    sandlot ls sb-7x2k...:out\n";

enum { OPT_JSON = 256 };

static const struct option ls_opts[] = {
	{ "all", no_argument, NULL, 'a' },
	{ "label", required_argument, NULL, 'l' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "json", no_argument, NULL, OPT_JSON },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Seconds since the epoch of an RFC 3339 UTC time, or -1. */
static time_t parse_time(const char *s)
{
	struct tm tm = { 0 };
	const char *end = s && *s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	if (!end)
		return -1;
	return timegm(&tm);
}

/* "12s", "5m", "3h", "2d" */
static void span(char *buf, size_t n, long long secs)
{
	if (secs < 0)
		secs = 0;
	if (secs < 60)
		snprintf(buf, n, "%llds", secs);
	else if (secs < 3600)
		snprintf(buf, n, "%lldm", secs / 60);
	else if (secs < 86400 * 2)
		snprintf(buf, n, "%lldh", secs / 3600);
	else
		snprintf(buf, n, "%lldd", secs / 86400);
}

struct row {
	char *cols[5];
};

static char *created_col(json_t *sb, time_t now)
{
	time_t t = parse_time(client_str(sb, "created_at"));
	char d[32], *out;
	if (t < 0)
		return strdup("?");
	span(d, sizeof(d), (long long)(now - t));
	return asprintf(&out, "%s ago", d) < 0 ? NULL : out;
}

static char *expires_col(json_t *sb, time_t now)
{
	const char *state = client_str(sb, "state");
	if (*state && strcmp(state, "running") != 0) {
		time_t t = parse_time(client_str(sb, "ended_at"));
		char d[32], *out;
		if (t < 0)
			return strdup("-");
		span(d, sizeof(d), (long long)(now - t));
		return asprintf(&out, "ended %s ago", d) < 0 ? NULL : out;
	}
	time_t t = parse_time(client_str(sb, "expires_at"));
	char d[32], *out;
	if (t < 0)
		return strdup("-");
	span(d, sizeof(d), (long long)(t - now));
	return asprintf(&out, "in %s", d) < 0 ? NULL : out;
}

static char *state_col(json_t *sb)
{
	const char *state = client_str(sb, "state");
	const char *reason = client_str(sb, "end_reason");
	char *out;
	if (*reason && strcmp(reason, state) != 0)
		return asprintf(&out, "%s (%s)", state, reason) < 0 ? NULL : out;
	return strdup(*state ? state : "?");
}

static char *labels_col(json_t *sb)
{
	json_t *md = json_object_get(sb, "metadata");
	size_t size = 0;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &size);
	if (!f)
		return NULL;
	const char *k;
	json_t *v;
	int first = 1;
	json_object_foreach(md, k, v) {
		fprintf(f, "%s%s=%s", first ? "" : ",", k, json_is_string(v) ? json_string_value(v) : "?");
		first = 0;
	}
	fclose(f);
	return buf;
}

static int print_table(json_t *list)
{
	static const char *head[5] = { "ID", "STATE", "CREATED", "EXPIRES", "LABELS" };
	size_t n = json_array_size(list);
	struct row *rows = calloc(n ? n : 1, sizeof(*rows));
	size_t w[5];
	time_t now = time(NULL);
	if (!rows)
		return EXIT_SANDLOT;
	for (int k = 0; k < 5; k++)
		w[k] = strlen(head[k]);
	for (size_t i = 0; i < n; i++) {
		json_t *sb = json_array_get(list, i);
		rows[i].cols[0] = strdup(client_str(sb, "id"));
		rows[i].cols[1] = state_col(sb);
		rows[i].cols[2] = created_col(sb, now);
		rows[i].cols[3] = expires_col(sb, now);
		rows[i].cols[4] = labels_col(sb);
		for (int k = 0; k < 5; k++) {
			if (!rows[i].cols[k])
				rows[i].cols[k] = strdup("");
			size_t l = rows[i].cols[k] ? strlen(rows[i].cols[k]) : 0;
			if (l > w[k])
				w[k] = l;
		}
	}
	printf("%-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], head[0], (int)w[1], head[1],
	       (int)w[2], head[2], (int)w[3], head[3], head[4]);
	for (size_t i = 0; i < n; i++) {
		char **c = rows[i].cols;
		printf("%-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], c[0] ? c[0] : "", (int)w[1],
		       c[1] ? c[1] : "", (int)w[2], c[2] ? c[2] : "", (int)w[3], c[3] ? c[3] : "",
		       c[4] ? c[4] : "");
		for (int k = 0; k < 5; k++)
			free(c[k]);
	}
	free(rows);
	return 0;
}

static int ls_run(const char *query, int json, int quiet, const char *host, const char *token_file)
{
	struct client c;
	int rc = client_init(&c, "ls", host, token_file);
	if (rc)
		return rc;
	cleanup_free char *path = NULL;
	if (asprintf(&path, "/v1/sandboxes%s", query) < 0) {
		client_free(&c);
		return EXIT_SANDLOT;
	}
	struct client_req req = { .method = "GET", .path = path };
	client_perform(&c, &req);
	if (req.status != 200) {
		rc = client_report(&c, &req, NULL);
	} else {
		json_t *list = json_object_get(req.reply, "sandboxes");
		if (json) {
			char *text = json_dumps(req.reply, JSON_COMPACT);
			if (text)
				puts(text);
			free(text);
		} else if (quiet) {
			size_t i;
			json_t *sb;
			json_array_foreach(list, i, sb)
				puts(client_str(sb, "id"));
		} else {
			rc = print_table(list);
		}
	}
	if (fflush(stdout) != 0 && rc == 0)
		rc = EXIT_SANDLOT;
	client_req_free(&req);
	client_free(&c);
	return rc;
}

/* ---- SANDBOX:PATH: a directory's entries ------------------------------------ */

static const char *type_word(const char *t)
{
	return !strcmp(t, "directory") ? "dir" : !strcmp(t, "symlink") ? "link" : t;
}

static int print_entries(json_t *entries)
{
	static const char *head[6] = { "TYPE", "MODE", "SIZE", "ON-DISK", "MODIFIED", "NAME" };
	size_t n = json_array_size(entries);
	char *(*rows)[6] = calloc(n ? n : 1, sizeof(*rows));
	if (!rows)
		return EXIT_SANDLOT;
	size_t w[6];
	for (int k = 0; k < 6; k++)
		w[k] = strlen(head[k]);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(entries, i);
		char *c[6] = { 0 };
		c[0] = strdup(type_word(client_str(e, "type")));
		c[1] = strdup(client_str(e, "mode"));
		if (asprintf(&c[2], "%lld", (long long)json_integer_value(json_object_get(e, "size"))) < 0)
			c[2] = NULL;
		if (asprintf(&c[3], "%lld",
			     (long long)json_integer_value(json_object_get(e, "allocated"))) < 0)
			c[3] = NULL;
		/* "2026-11-24T10:33:00.123Z" → "2026-11-24 10:33" */
		const char *m = client_str(e, "modified_at");
		c[4] = strlen(m) >= 16 ? strndup(m, 16) : strdup(m);
		if (c[4] && strlen(c[4]) > 10 && c[4][10] == 'T')
			c[4][10] = ' ';
		c[5] = strdup(client_str(e, "name"));
		for (int k = 0; k < 6; k++) {
			rows[i][k] = c[k] ? c[k] : strdup("");
			size_t l = rows[i][k] ? strlen(rows[i][k]) : 0;
			if (k < 5 && l > w[k])
				w[k] = l;
		}
	}
	/* Sizes right-aligned, the rest left-aligned; the name last. */
	printf("%-*s  %-*s  %*s  %*s  %-*s  %s\n", (int)w[0], head[0], (int)w[1], head[1],
	       (int)w[2], head[2], (int)w[3], head[3], (int)w[4], head[4], head[5]);
	for (size_t i = 0; i < n; i++) {
		char **c = rows[i];
		printf("%-*s  %-*s  %*s  %*s  %-*s  %s\n", (int)w[0], c[0] ? c[0] : "", (int)w[1],
		       c[1] ? c[1] : "", (int)w[2], c[2] ? c[2] : "", (int)w[3], c[3] ? c[3] : "",
		       (int)w[4], c[4] ? c[4] : "", c[5] ? c[5] : "");
		for (int k = 0; k < 6; k++)
			free(c[k]);
	}
	free(rows);
	return 0;
}

static int ls_dir(const char *spec, int json, int quiet, const char *host, const char *token_file)
{
	const char *colon = strchr(spec, ':');
	cleanup_free char *raw_id = strndup(spec, (size_t)(colon - spec));
	cleanup_free char *id = raw_id ? client_escape(raw_id) : NULL;
	cleanup_free char *dir = client_escape(colon[1] ? colon + 1 : "/home/user");
	cleanup_free char *path = NULL;
	if (!id || !dir || asprintf(&path, "/v1/sandboxes/%s/files/list?path=%s", id, dir) < 0)
		return EXIT_SANDLOT;
	struct client c;
	int rc = client_init(&c, "ls", host, token_file);
	if (rc)
		return rc;
	struct client_req req = { .method = "GET", .path = path };
	client_perform(&c, &req);
	if (req.status != 200) {
		rc = client_report(&c, &req, spec);
	} else {
		json_t *entries = json_object_get(req.reply, "entries");
		if (json) {
			char *text = json_dumps(req.reply, JSON_COMPACT);
			if (text)
				puts(text);
			free(text);
		} else if (quiet) {
			size_t i;
			json_t *e;
			json_array_foreach(entries, i, e)
				puts(client_str(e, "name"));
		} else {
			rc = print_entries(entries);
		}
	}
	if (fflush(stdout) != 0 && rc == 0)
		rc = EXIT_SANDLOT;
	client_req_free(&req);
	client_free(&c);
	return rc;
}

int cmd_ls(int argc, char **argv)
{
	const char *host = NULL, *token_file = NULL;
	int all = 0, json = 0, quiet = 0, rc = EXIT_USAGE;
	size_t qsize = 0;
	char *query = NULL;
	FILE *q = open_memstream(&query, &qsize);
	if (!q)
		return EXIT_SANDLOT;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:al:qH:h", ls_opts, NULL)) != -1) {
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 'a':
			all = 1;
			break;
		case 'l': {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg) {
				rc = cli_usage_error("ls", "invalid --label \"%s\": expected KEY=VALUE", optarg);
				goto out;
			}
			cleanup_free char *e = client_escape(optarg);
			if (!e) {
				rc = EXIT_SANDLOT;
				goto out;
			}
			fprintf(q, "%clabel=%s", ftell(q) ? '&' : '?', e);
			break;
		}
		case 'q':
			quiet = 1;
			break;
		case OPT_JSON:
			json = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(ls_help, stdout);
			rc = 0;
			goto out;
		default:
			rc = cli_option_error("ls", c, argv);
			goto out;
		}
	}
	const char *dir = NULL;
	if (optind < argc) {
		const char *colon = strchr(argv[optind], ':');
		if (!colon || colon == argv[optind] || optind + 1 < argc) {
			rc = cli_usage_error("ls", "unexpected argument \"%s\" (to list files: "
						   "SANDBOX:PATH)", argv[optind]);
			goto out;
		}
		dir = argv[optind];
		if (all || ftell(q)) {
			rc = cli_usage_error("ls", "--all and --label list sandboxes, not files");
			goto out;
		}
	}
	if (dir) {
		rc = ls_dir(dir, json, quiet, host, token_file);
		goto out;
	}
	if (all)
		fprintf(q, "%cstate=all", ftell(q) ? '&' : '?');
	fclose(q);
	q = NULL;
	rc = ls_run(query, json, quiet, host, token_file);
out:
	if (q)
		fclose(q);
	free(query);
	return rc;
}
