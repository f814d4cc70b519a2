/* The sandlot command-line tool: one file per verb. */
#ifndef SANDLOT_CLI_H
#define SANDLOT_CLI_H

#include <stdio.h>

#include "sandlot.h"
#include "common/lines.h"

/* Exit statuses of our own (the command's status is passed through). */
#define EXIT_USAGE 2        /* bad arguments: sizes, durations, paths, options */
#define EXIT_SANDLOT 125    /* sandlot itself failed (as `docker run` does) */
#define EXIT_TIMEOUT 124    /* as timeout(1) */

/* Print "sandlot: <message>" to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print a usage error and a hint, return EXIT_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Report a getopt_long() failure (c is ':' for a missing value, '?' for an
 * unknown option) and return EXIT_USAGE. */
int cli_option_error(const char *verb, int c, char **argv);

/* Read all of fd (a FILE or stdin; `what` names it in messages), at most
 * max bytes, into a malloc'd *out, NUL-terminated (*outlen bytes before the NUL).  0, or an exit status after printing
 * why (2 for an unreadable or too large input). */
int cli_read_all(const char *verb, int fd, const char *what, size_t max, char **out, size_t *outlen);

/* -H/--host and --token-file given before the verb (main.c), or NULL:
 * defaults for the verb's own options. */
extern const char *cli_host, *cli_token_file;

#ifdef SANDLOT_CLI_STATIC
/* The static (musl) `sandlot` cannot load shared libraries: run
 * `sandlot-glibc`, the same program linked against glibc, with our whole
 * command line in our place (src/cli/meson.build).  Returns only after a
 * failure, with EXIT_SANDLOT after saying why. */
int cli_run_dynamic(void);
#endif

/* Options of every verb that talks to sandlotd (client.h). */
enum { OPT_HOST = 1000, OPT_TOKEN_FILE };
#define CLI_CLIENT_OPTIONS                                              \
	{ "host", required_argument, NULL, 'H' },                       \
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE }
/* The sandbox options of `create` and `mcp` (create.c): --memory (-m),
 * --cpus, --pids, --disk, --env (-e), --ttl, --idle-timeout, --image,
 * --port (-p, repeatable). */
enum { OPT_CPUS = 1100, OPT_PIDS, OPT_DISK, OPT_TTL, OPT_IDLE, OPT_IMAGE, OPT_ISOLATION };
#define CLI_SANDBOX_OPTIONS                                             \
	{ "memory", required_argument, NULL, 'm' },                     \
	{ "cpus", required_argument, NULL, OPT_CPUS },                  \
	{ "pids", required_argument, NULL, OPT_PIDS },                  \
	{ "disk", required_argument, NULL, OPT_DISK },                  \
	{ "env", required_argument, NULL, 'e' },                        \
	{ "ttl", required_argument, NULL, OPT_TTL },                    \
	{ "idle-timeout", required_argument, NULL, OPT_IDLE },          \
	{ "image", required_argument, NULL, OPT_IMAGE },                \
	{ "isolation", required_argument, NULL, OPT_ISOLATION },        \
	{ "port", required_argument, NULL, 'p' },                       \
	CLI_NET_OPTIONS,                                                \
	CLI_PACKAGE_OPTIONS
/* --net, --allow-host, --deny-host, and --pip, --npm (netopt.c; also
 * `run`, `install`, `network`). */
enum { OPT_NET = 1200, OPT_ALLOW_HOST, OPT_DENY_HOST, OPT_PIP, OPT_NPM };
#define CLI_NET_OPTIONS                                                 \
	{ "net", required_argument, NULL, OPT_NET },                    \
	{ "allow-host", required_argument, NULL, OPT_ALLOW_HOST },      \
	{ "deny-host", required_argument, NULL, OPT_DENY_HOST }
#define CLI_PACKAGE_OPTIONS                                             \
	{ "pip", required_argument, NULL, OPT_PIP },                    \
	{ "npm", required_argument, NULL, OPT_NPM }
#define CLI_PACKAGE_OPTIONS_HELP                                                          \
	"        --pip SPEC          install a pip package, e.g. pandas==2.2.0\n"           \
	"                            (repeatable; docs/network.md)\n"                      \
	"        --npm SPEC          install an npm package, e.g. lodash@4\n"               \
	"                            (repeatable)\n"
#define CLI_NET_OPTIONS_HELP                                                              \
	"        --net MODE          network: none (the default: loopback only), open\n"   \
	"                            (the public internet) or allowlist (see\n"           \
	"                            --allow-host); docs/network.md\n"                      \
	"        --allow-host RULE   allow a host name, *.SUFFIX (its subdomains) or\n"    \
	"                            an IPv4 range (repeatable; implies --net\n"          \
	"                            allowlist)\n"                                          \
	"        --deny-host RULE    deny one, even if allowed otherwise (repeatable)\n"
struct json_t;
/* Network option c with value arg into body["network"] (--pip and --npm
 * into body["packages"]): 0 stored, 1 not one of these, EXIT_USAGE after
 * saying why. */
int cli_net_option(const char *verb, int c, const char *arg, struct json_t *body);
/* After the options: infer the mode from --allow-host, and refuse
 * combinations that mean nothing.  0 or EXIT_USAGE. */
int cli_net_finish(const char *verb, struct json_t *body);
/* The policy of body["network"] (after cli_net_finish) into opts, for
 * `run`; *allow and *deny are arrays the caller frees.  0, or -1 out of
 * memory. */
int cli_net_policy(struct json_t *body, sandlot_options_t *opts, const char ***allow,
		   const char ***deny);
/* Put sandbox option c (getopt's code) with value arg into a create
 * request's body (--env pairs into env).  0 when stored; 1 when c is not a
 * sandbox option; EXIT_USAGE after saying why the value is bad. */
int cli_sandbox_option(const char *verb, int c, const char *arg, struct json_t *body,
		       struct json_t *env);

/* Their cases in a verb's getopt_long() switch: store the values in the
 * lvalues host and token_file. */
#define CLI_CLIENT_OPTION_CASES(host, token_file)                        \
	case 'H':                                                        \
		(host) = optarg;                                         \
		break;                                                   \
	case OPT_TOKEN_FILE:                                             \
		(token_file) = optarg;                                   \
		break
#define CLI_CLIENT_OPTIONS_HELP                                                        \
	"    -H, --host HOST        the sandlotd to talk to: unix:PATH, tcp:HOST:PORT\n"   \
	"                           or http://HOST:PORT (default: $SANDLOT_HOST, else\n"  \
	"                           unix:/run/sandlot/sandlot.sock)\n"                     \
	"        --token-file FILE  bearer token for TCP, first line of FILE (default:\n" \
	"                           $SANDLOT_TOKEN, else the file $SANDLOT_TOKEN_FILE)\n"

int cmd_run(int argc, char **argv);
int cmd_drain(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_changes(int argc, char **argv);
int cmd_code(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_port(int argc, char **argv);
/* "8000" → 8000: a whole number from 1 to 65535, else 0. */
unsigned cli_parse_port(const char *s);
int cmd_install(int argc, char **argv);
int cmd_network(int argc, char **argv);

/* NDJSON exec event stream (exec.c; also used by logs.c): writes stdout and
 * stderr data to fds 1 and 2 as they arrive and keeps the exit event. */
struct exec_stream {
	const char *verb;
	struct sl_lines lines;   /* a partial NDJSON line */
	int base64;              /* data fields are base64 (we asked for it) */
	int broken_pipe;         /* our stdout or stderr is gone */
	int bad;                 /* a line that is not an event: message printed */
	char exec_id[64];        /* from the start event */
	struct json_t *result;   /* the exit event's result (owned) */
};
/* A client_sink_fn for the stream (ud = struct exec_stream *). */
int exec_stream_sink(void *ud, const char *data, size_t len);
void exec_stream_free(struct exec_stream *s);
/* Exit status for an ExecResult, printing why on stderr when the command
 * did not simply exit (timeout, signal, out of memory, failed to start). */
int exec_result_status(const char *verb, struct json_t *result);

#endif
