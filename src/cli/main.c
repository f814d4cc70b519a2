#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <stdarg.h>
#include <string.h>

static const char main_help[] =
	"NAME\n"
	"    sandlot - run untrusted code in a locked-down Linux sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot run [OPTIONS] -- COMMAND [ARG...]\n"
	"    sandlot [-H HOST] create | exec | code | cp | ls | rm | logs | changes | port |\n"
	"                      install | network [OPTIONS] ...\n"
	"    sandlot [-H HOST] mcp [OPTIONS]\n"
	"    sandlot image build | ls | inspect | rm [OPTIONS] ...\n"
	"    sandlot COMMAND --help\n"
	"    sandlot --version\n"
	"\n"
	"DESCRIPTION\n"
	"    sandlot creates sandboxes for code written by AI agents: new user, pid,\n"
	"    mount, network, ipc, uts and cgroup namespaces, a read-only root, a\n"
	"    private writable workspace with a disk quota, no capabilities, a seccomp\n"
	"    allowlist, and cgroup limits on memory, CPU and processes.  A sandbox\n"
	"    starts in milliseconds and leaves nothing behind when it ends.\n"
	"\n"
	"COMMANDS\n"
	"    run       Create a sandbox, run one command in it with live output,\n"
	"              copy files in and out, destroy it.  Needs no daemon.\n"
	"    drain     Remove what run keeps ready for the next run.\n"
	"\n"
	"    These talk to sandlotd, the daemon that keeps sandboxes alive between\n"
	"    commands; -H/--host HOST and --token-file FILE may come before or\n"
	"    after the command's name (see ENVIRONMENT):\n"
	"    create    Create a sandbox and print its id.\n"
	"    exec      Run a command in a sandbox, output streamed live; exits\n"
	"              with the command's status.\n"
	"    code      Run Python, JavaScript or bash code in an interpreter that\n"
	"              keeps its variables between calls (a notebook-like context).\n"
	"    cp        Copy files or directories between the host and a sandbox\n"
	"              (ID:PATH on one side, as docker cp).\n"
	"    ls        List sandboxes.\n"
	"    rm        Destroy sandboxes.\n"
	"    logs      Output of a background exec (--follow to stream it).\n"
	"    changes   Files created, modified and deleted in a sandbox.\n"
	"    port      List, add and remove a sandbox's exposed ports: servers\n"
	"              inside reachable at a URL on the host (create --port).\n"
	"    install   Install pip or npm packages into a sandbox.\n"
	"    network   Show or change a sandbox's network policy, or its network\n"
	"              log (docs/network.md).\n"
	"    mcp       Serve the Model Context Protocol on stdin/stdout for MCP\n"
	"              hosts: tools to run commands and code and move files in\n"
	"              one sandbox per session (docs/mcp.md).\n"
	"\n"
	"    Images (no daemon needed; see sandlot image --help, docs/images.md):\n"
	"    image     build a Debian root filesystem from a recipe with debootstrap\n"
	"              and apt; ls, inspect, rm the built images.  Select one with\n"
	"              --image NAME (run, create) or \"image\" in sandlotd's API.\n"
	"\n"
	"ENVIRONMENT\n"
	"    SANDLOT_HOST       the sandlotd of the client commands: unix:PATH,\n"
	"                       tcp:HOST:PORT or http://HOST:PORT (default\n"
	"                       unix:/run/sandlot/sandlot.sock); --host overrides\n"
	"    SANDLOT_TOKEN      bearer token for a TCP sandlotd (or\n"
	"                       SANDLOT_TOKEN_FILE, a file holding it)\n"
	"    SANDLOT_DATA_DIR   where images, the storage pool and locks live\n"
	"                       (default /var/lib/sandlot)\n"
	"    SANDLOT_CACHE_DIR  image build cache: packages, base trees\n"
	"                       (default /var/cache/sandlot)\n"
	"    SANDLOT_INIT       path of sandlot-init (default: next to sandlot)\n"
	"    SANDLOT_STORAGE    \"tmpfs\" to keep workspaces in memory instead of\n"
	"                       in the data dir's storage pool\n"
	"    SANDLOT_DISK_OVERCOMMIT\n"
	"                       how far the --disk quotas of the sandboxes of a\n"
	"                       data dir may add up beyond its storage pool's\n"
	"                       space, e.g. 2 (default 1: every quota reserved)\n"
	"\n"
	"EXIT STATUS\n"
	"    run and exec exit with the command's status; 124 if it timed out,\n"
	"    128+N if a signal N killed it, 125 if sandlot itself failed or\n"
	"    sandlotd could not be reached, 126/127 if the command could not be\n"
	"    run or found, 2 for bad arguments.  The other commands exit 0 on\n"
	"    success, 1 if sandlotd refused (no such sandbox, no such file), 125\n"
	"    if sandlotd could not be reached, 2 for bad arguments.\n"
	"\n"
	"SEE ALSO\n"
	"    sandlot run --help (and so on for each command); docs/cli.md;\n"
	"    docs/mcp.md; README.md; SECURITY.md for the threat model.\n";

void cli_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandlot: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int cli_usage_error(const char *verb, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "sandlot%s%s: ", verb ? " " : "", verb ? verb : "");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, " (see 'sandlot%s%s --help')\n", verb ? " " : "", verb ? verb : "");
	va_end(ap);
	return EXIT_USAGE;
}

int cli_option_error(const char *verb, int c, char **argv)
{
	/* The option as typed is argv[optind - 1] (one before when getopt took
	 * a "--" as its value), except that musl's getopt (the static
	 * `sandlot`) leaves optind one further than glibc's after a short
	 * option missing its value at the end of the command line: there
	 * argv[optind - 1] is the NULL after the last argument. */
	int i = optind - 1 - (c == ':' && optarg && !strcmp(optarg, "--"));
	if (i > 1 && !argv[i])
		i--;
	if (c == ':')
		return cli_usage_error(verb, "option %s needs a value", argv[i]);
	if (optopt && optopt < 256 && argv[i][1] != '-')
		return cli_usage_error(verb, "unknown option -%c", optopt);
	return cli_usage_error(verb, "unknown option %s", argv[i]);
}

/* `sandlot` itself holds `run` (libsandlot only, so it starts fast); the
 * verbs that talk to sandlotd live in `sandlot-client` (libcurl and
 * libarchive, with some forty shared libraries behind them), which
 * `sandlot` runs in its place with the same arguments.  A NULL function
 * means "not in this binary". */
static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} verbs[] = {
#ifdef SANDLOT_CLI_CLIENT
	{ "run", NULL },
	{ "drain", NULL },
	{ "create", cmd_create },
	{ "exec", cmd_exec },
	{ "cp", cmd_cp },
	{ "ls", cmd_ls },
	{ "rm", cmd_rm },
	{ "logs", cmd_logs },
	{ "changes", cmd_changes },
	{ "code", cmd_code },
	{ "mcp", cmd_mcp },
	{ "image", cmd_image },
	{ "port", cmd_port },
	{ "install", cmd_install },
	{ "network", cmd_network },
#else
	{ "run", cmd_run },
	{ "drain", cmd_drain },
	{ "create", NULL },
	{ "exec", NULL },
	{ "cp", NULL },
	{ "ls", NULL },
	{ "rm", NULL },
	{ "logs", NULL },
	{ "changes", NULL },
	{ "code", NULL },
	{ "mcp", NULL },
	{ "image", NULL },
	{ "port", NULL },
	{ "install", NULL },
	{ "network", NULL },
#endif
};

const char *cli_host, *cli_token_file;

/* Options before the verb, as `docker -H`: sandlot [-H HOST]
 * [--token-file FILE] VERB ....  Returns how many argv entries they took,
 * or -1 after a usage error. */
static int global_options(int argc, char **argv)
{
	int i = 1;
	while (i < argc) {
		const char *a = argv[i], **dst = NULL, *val = NULL;
		size_t n = 0;
		if (!strcmp(a, "-H") || !strcmp(a, "--host"))
			dst = &cli_host;
		else if (!strcmp(a, "--token-file"))
			dst = &cli_token_file;
		else if (!strncmp(a, "--host=", n = 7) || !strncmp(a, "--token-file=", n = 13))
			val = a + n, dst = n == 7 ? &cli_host : &cli_token_file;
		else if (!strncmp(a, "-H", 2) && a[2])
			val = a + 2, dst = &cli_host;
		else
			break;
		if (!val) {
			if (i + 1 >= argc || !strcmp(argv[i + 1], "--")) {
				cli_usage_error(NULL, "option %s needs a value", a);
				return -1;
			}
			val = argv[++i];
		}
		*dst = val;
		i++;
	}
	return i - 1;
}

/* The whole command line, global options included: what a program run in
 * our place gets. */
static char **cli_argv;

/* Exec `other`, found next to this program (or where an install puts it),
 * with our arguments.  Returns only after a failure, with EXIT_SANDLOT
 * after saying why. */
static int exec_beside(const char *other, char **argv)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			static const char *const rel[] = { "", "/../libexec/sandlot", "/../bin" };
			for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
				char cand[PATH_MAX + 64];
				snprintf(cand, sizeof(cand), "%s%s/%s", self, rel[i], other);
				if (access(cand, X_OK) == 0) {
					execv(cand, argv);
					break;
				}
			}
		}
	}
	cli_err("cannot run %s (it belongs next to this program): %s", other, strerror(errno ? errno : ENOENT));
	return EXIT_SANDLOT;
}

/* Run the other half of the CLI (see verbs[]) with our arguments. */
static int delegate(void)
{
#ifdef SANDLOT_CLI_CLIENT
	return exec_beside("sandlot", cli_argv);
#else
	return exec_beside("sandlot-client", cli_argv);
#endif
}

#ifdef SANDLOT_CLI_STATIC
int cli_run_dynamic(void)
{
	return exec_beside("sandlot-glibc", cli_argv);
}
#endif

int main(int argc, char **argv)
{
	cli_argv = argv;
	int shift = global_options(argc, argv);
	if (shift < 0)
		return EXIT_USAGE;
	argc -= shift;
	argv += shift;
	if (argc < 2) {
		fputs(main_help, stderr);
		return EXIT_USAGE;
	}
	const char *verb = argv[1];
	if (!strcmp(verb, "--help") || !strcmp(verb, "-h") || !strcmp(verb, "help")) {
		fputs(main_help, stdout);
		return 0;
	}
	if (!strcmp(verb, "--version") || !strcmp(verb, "version")) {
		printf("sandlot 0.1.0\n");
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		if (strcmp(verb, verbs[i].name) != 0)
			continue;
		if (verbs[i].fn)
			return verbs[i].fn(argc - 1, argv + 1);
		return delegate();
	}
	return cli_usage_error(NULL, "unknown command \"%s\"", verb);
}
