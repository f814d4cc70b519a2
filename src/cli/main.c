#include "cli.h"

#include <stdarg.h>
#include <string.h>

static const char main_help[] =
	"NAME\n"
	"    sandlot - run untrusted code in a locked-down Linux sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot run [OPTIONS] -- COMMAND [ARG...]\n"
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
	"\n"
	"ENVIRONMENT\n"
	"    SANDLOT_DATA_DIR   where storage templates and locks live\n"
	"                       (default /var/lib/sandlot)\n"
	"    SANDLOT_INIT       path of sandlot-init (default: next to sandlot)\n"
	"    SANDLOT_STORAGE    \"tmpfs\" to keep workspaces in memory instead of\n"
	"                       loop-mounted ext4 images\n"
	"\n"
	"EXIT STATUS\n"
	"    run exits with the command's status; 124 if it timed out, 128+N if a\n"
	"    signal N killed it, 125 if sandlot itself failed, 126/127 if the\n"
	"    command could not be run or found, 2 for bad arguments.\n"
	"\n"
	"SEE ALSO\n"
	"    sandlot run --help; README.md; SECURITY.md for the threat model.\n";

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

int main(int argc, char **argv)
{
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
	if (!strcmp(verb, "run"))
		return cmd_run(argc - 1, argv + 1);
	return cli_usage_error(NULL, "unknown command \"%s\"", verb);
}
