/* sandlot run: create a sandbox, run one command, tear it down. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common/cleanup.h"
#include "common/parse.h"
#include "common/error.h"
#include "common/json.h"
#include "common/util.h"
#include "transfer.h"

static const char run_help[] =
	"NAME\n"
	"    sandlot run - run one command in a fresh sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot run [OPTIONS] -- COMMAND [ARG...]\n"
	"    sandlot run [OPTIONS] --lang LANG (-c CODE | FILE | -) [ARG...]\n"
	"\n"
	"DESCRIPTION\n"
	"    Creates a sandbox, uploads files, runs COMMAND (an argv, not a shell\n"
	"    string: use `sh -c '...'` for shell syntax) with its output streamed\n"
	"    live, downloads files, destroys the sandbox, and exits with the\n"
	"    command's status.  COMMAND runs as an unprivileged user in\n"
	"    /home/user (its HOME) with a read-only view of the host's /usr, no\n"
	"    network but loopback (unless --net or --allow-host says otherwise),\n"
	"    and a private writable /home/user and /tmp.\n"
	"    No daemon is needed.  Must run as root.\n"
	"\n"
	"OPTIONS\n"
	"    -m, --memory SIZE      memory limit including swap (default 512M)\n"
	"        --cpus N           CPU quota, e.g. 0.5 or 2 (default: no quota)\n"
	"        --pids N           maximum number of processes (default 256)\n"
	"        --disk SIZE        size of /home/user + /tmp together (default 1G);\n"
	"                           writes past it fail (EDQUOT); it is reserved in\n"
	"                           the data dir's storage pool, and a size that\n"
	"                           cannot be reserved fails the run (status 125)\n"
	"    -t, --timeout DURATION kill the command and exit 124 after DURATION,\n"
	"                           e.g. 500ms, 30s, 2m, 1h (default 5m; 0 = none)\n"
	"    -e, --env KEY=VALUE    set an environment variable (repeatable)\n"
	"    -w, --workdir DIR      working directory (default /home/user;\n"
	"                           relative paths are under /home/user)\n"
	"    -u, --upload LOCAL[:REMOTE]\n"
	"                           copy a file or directory in before the command\n"
	"                           (repeatable); REMOTE defaults to LOCAL's name in\n"
	"                           /home/user, a REMOTE ending in / is a directory\n"
	"    -d, --download REMOTE[:LOCAL]\n"
	"                           copy a file or directory out after the command\n"
	"                           (repeatable); LOCAL defaults to REMOTE's name in\n"
	"                           the current directory; a missing REMOTE is an error\n"
	"    -i, --interactive      pass this program's stdin to the command\n"
	"                           (default: the command's stdin is /dev/null)\n"
	"        --json             do not stream; print one JSON object at the end:\n"
	"                           exit_code, signal, timed_out, oom_killed,\n"
	"                           pids_limited, truncated, duration_ms, stdout,\n"
	"                           stderr, changes (files created, modified or\n"
	"                           deleted under /home/user; at most 8M of paths,\n"
	"                           \"changes_truncated\" says when some were left\n"
	"                           out), sandbox_id\n"
	"        --output-limit SIZE\n"
	"                           with --json, keep at most SIZE of each output\n"
	"                           stream (default 1M); the rest is dropped and\n"
	"                           \"truncated\" is true\n"
	"        --nofile N         open-file limit for the command (default 1024)\n"
	"        --hostname NAME    hostname inside the sandbox (default sandlot)\n"
	"        --image NAME       root filesystem image: host (the default: the host's\n"
	"                           /usr) or one built with sandlot image build, by\n"
	"                           name or digest (sandlot image ls)\n"
	"        --isolation ns|vm  ns (the default): namespaces, a cgroup and seccomp\n"
	"                           around the command; vm: a QEMU microVM with its\n"
	"                           own kernel (KVM where it works, else emulated and\n"
	"                           slow: seconds to start); docs/vm.md\n"
	"        --storage pool|tmpfs\n"
	"                           where /home/user and /tmp live: pool (default) is\n"
	"                           a directory with a disk quota in the data dir's\n"
	"                           storage pool; tmpfs keeps files in memory, where\n"
	"                           they count against --memory\n"
	"        --net MODE         network: none (the default: loopback only), open\n"
	"                           (the public internet) or allowlist; DNS comes\n"
	"                           from the host's resolv.conf, or $SANDLOT_RESOLVER\n"
	"                           (ADDR[:PORT]); docs/network.md\n"
	"        --allow-host RULE  allow a host name, *.SUFFIX (its subdomains) or\n"
	"                           an IPv4 range (repeatable; implies --net\n"
	"                           allowlist)\n"
	"        --deny-host RULE   deny one, even if allowed otherwise (repeatable)\n"
	"        --pip SPEC         install a pip package before the command, e.g.\n"
	"                           pandas==2.2.0 (repeatable; from $SANDLOT_PIP_INDEX,\n"
	"                           default PyPI, reachable only for the install;\n"
	"                           docs/network.md)\n"
	"        --npm SPEC         install an npm package, e.g. lodash@4, into\n"
	"                           /home/user/node_modules (repeatable)\n"
	"    -l, --lang LANG        run code instead of COMMAND, one-shot: python\n"
	"                           (python3), javascript (node) or bash, with the\n"
	"                           code from -c CODE, from FILE (uploaded to\n"
	"                           /home/user first) or from standard input (-);\n"
	"                           ARGs go to the program (sys.argv[1:], ...).  For\n"
	"                           state kept between runs see `sandlot code`\n"
	"    -c, --code CODE        the code for --lang\n"
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    The command's exit status; 124 if it timed out; 128+N if signal N\n"
	"    killed it (an out-of-memory kill is 137 and reported on stderr);\n"
	"    127 if it was not found, 126 if it could not be executed; 125 if\n"
	"    sandlot itself failed (including a failed --upload or --download);\n"
	"    2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot run -- python3 -c 'print(6 * 7)'\n"
	"    sandlot run --memory 256M --timeout 10s -u data.csv -d out.png:plot.png \\\n"
	"        -- python3 analyse.py\n"
	"    sandlot run --json -- sh -c 'echo hi > note.txt'\n"
	"    sandlot run --lang python -c 'import sys; print(sys.version)'\n"
	"    sandlot run --allow-host pypi.org -- curl -sI https://pypi.org/simple/\n"
	"    sandlot run --lang python -u data.csv analyse.py --verbose\n"
	"    echo 'console.log(6 * 7)' | sandlot run --lang js -\n";

/* OPT_CPUS, OPT_PIDS, OPT_DISK and OPT_IMAGE come from cli.h. */
enum { OPT_JSON = 256, OPT_OUTPUT_LIMIT, OPT_NOFILE, OPT_HOSTNAME, OPT_STORAGE };

/* --lang: the interpreter, how it takes code inline, and a file suffix. */
static const struct lang {
	const char *name, *alias1, *alias2;
	const char *prog, *inline_flag, *suffix;
} langs[] = {
	{ "python", "py", "python3", "python3", "-c", ".py" },
	{ "javascript", "js", "node", "node", "-e", ".js" },
	{ "bash", "sh", "shell", "bash", "-c", ".sh" },
};

/* Code up to this size travels as an argument (Linux caps one at 128 KiB);
 * larger code is uploaded as a file. */
#define INLINE_CODE_MAX (100u << 10)
#define CODE_MAX (64u << 20)

static const struct option run_opts[] = {
	{ "memory", required_argument, NULL, 'm' },
	{ "cpus", required_argument, NULL, OPT_CPUS },
	{ "pids", required_argument, NULL, OPT_PIDS },
	{ "disk", required_argument, NULL, OPT_DISK },
	{ "timeout", required_argument, NULL, 't' },
	{ "env", required_argument, NULL, 'e' },
	{ "workdir", required_argument, NULL, 'w' },
	{ "upload", required_argument, NULL, 'u' },
	{ "download", required_argument, NULL, 'd' },
	{ "interactive", no_argument, NULL, 'i' },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT },
	{ "nofile", required_argument, NULL, OPT_NOFILE },
	{ "hostname", required_argument, NULL, OPT_HOSTNAME },
	{ "image", required_argument, NULL, OPT_IMAGE },
	{ "storage", required_argument, NULL, OPT_STORAGE },
	{ "isolation", required_argument, NULL, OPT_ISOLATION },
	{ "lang", required_argument, NULL, 'l' },
	{ "language", required_argument, NULL, 'l' },
	{ "code", required_argument, NULL, 'c' },
	CLI_NET_OPTIONS,
	CLI_PACKAGE_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Output collected in --json mode, capped. */
struct capture {
	char *buf;
	size_t len, cap, limit;
	int truncated;
};

struct run_state {
	int json;
	struct capture out, err;
	int exit_pipe[2];   /* written by on_exit so the main thread wakes up */
};

static int capture_add(struct capture *c, const void *data, size_t len)
{
	size_t room = c->limit > c->len ? c->limit - c->len : 0;
	if (len > room) {
		c->truncated = 1;
		len = room;
	}
	if (len == 0)
		return 0;
	if (c->len + len > c->cap) {
		size_t cap = c->cap ? c->cap : 4096;
		while (cap < c->len + len)
			cap *= 2;
		char *nb = realloc(c->buf, cap);
		if (!nb) {
			c->truncated = 1;
			return 0;
		}
		c->buf = nb;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	return 0;
}

static int on_output(void *ud, sandlot_stream_t stream, const void *data, size_t len)
{
	struct run_state *st = ud;
	if (st->json)
		return capture_add(stream == SANDLOT_STDOUT ? &st->out : &st->err, data, len);
	/* Live output; a closed terminal just drops it. */
	sandlot__write_all(stream == SANDLOT_STDOUT ? 1 : 2, data, len);
	return 0;
}

static void on_exit_cb(void *ud, const sandlot_exit_t *ex)
{
	struct run_state *st = ud;
	if (write(st->exit_pipe[1], "x", 1) < 0) {
		/* the main thread also wakes up on its own deadline */
	}
}

static int parse_count(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || v == 0 || v > max || s[0] == '-')
		return cli_usage_error("run", "invalid %s \"%s\": expected a whole number from 1 to %llu",
				       opt, s, (unsigned long long)max);
	*out = v;
	return 0;
}

static void print_json(const char *id, const sandlot_exit_t *ex, const struct run_state *st,
		       const sandlot_changes_t *ch, json_t *errors)
{
	json_t *o = json_object();
	json_object_set_new(o, "sandbox_id", json_string(id));
	json_object_set_new(o, "exit_code", ex->signal ? json_null() : json_integer(ex->exit_code));
	json_object_set_new(o, "signal", ex->signal ? json_integer(ex->signal) : json_null());
	json_object_set_new(o, "timed_out", json_boolean(ex->timed_out));
	json_object_set_new(o, "oom_killed", json_boolean(ex->oom_killed));
	json_object_set_new(o, "pids_limited", json_boolean(ex->pids_limited));
	json_object_set_new(o, "truncated", json_boolean(st->out.truncated || st->err.truncated));
	json_object_set_new(o, "duration_ms", json_integer((json_int_t)ex->duration_ms));
	json_object_set_new(o, "stdout", json_text(st->out.buf, st->out.len));
	json_object_set_new(o, "stderr", json_text(st->err.buf, st->err.len));
	json_t *arr = json_array();
	for (size_t i = 0; ch && i < ch->count; i++) {
		json_t *c = json_object();
		json_object_set_new(c, "path", json_text(ch->items[i].path, strlen(ch->items[i].path)));
		json_object_set_new(c, "kind", json_string(json_change_kind((char)ch->items[i].kind)));
		json_object_set_new(c, "type", json_string(json_file_type((char)ch->items[i].type)));
		json_object_set_new(c, "size", json_integer((json_int_t)ch->items[i].size));
		json_array_append_new(arr, c);
	}
	json_object_set_new(o, "changes", arr);
	json_object_set_new(o, "changes_truncated", json_boolean(ch && ch->truncated));
	if (ex->start_error)
		json_object_set_new(o, "error", json_string(ex->error));
	json_object_set(o, "errors", errors);
	char *text = json_dumps(o, JSON_COMPACT);
	if (text) {
		puts(text);
		free(text);
	}
	json_decref(o);
}

static int exit_status(const sandlot_exit_t *ex)
{
	if (ex->timed_out)
		return EXIT_TIMEOUT;
	if (ex->signal)
		return 128 + ex->signal;
	return ex->exit_code;
}

/* Wait for the command while relaying our own stdin (with -i) and turning
 * SIGINT/SIGTERM/SIGHUP into signals for the command; a second signal
 * kills it for good. */
static void supervise(sandlot_proc_t *p, struct run_state *st, int interactive, int sigfd)
{
	int stdin_open = interactive;
	int signals = 0;
	char buf[65536];
	for (;;) {
		struct pollfd fds[3] = {
			{ .fd = st->exit_pipe[0], .events = POLLIN },
			{ .fd = sigfd, .events = POLLIN },
			{ .fd = stdin_open ? 0 : -1, .events = POLLIN },
		};
		if (poll(fds, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].revents)
			break;
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
				signals++;
				sandlot_proc_kill(p, signals > 1 ? SIGKILL : (int)si.ssi_signo, NULL);
			}
		}
		if (fds[2].revents) {
			ssize_t n = read(0, buf, sizeof(buf));
			if (n <= 0 || sandlot_proc_write_stdin(p, buf, (size_t)n, NULL) < 0) {
				sandlot_proc_close_stdin(p, NULL);
				stdin_open = 0;
			}
		}
	}
}

/* The command for --lang: `python3 -c CODE ARG...` for small inline code;
 * a FILE is uploaded to /home/user and run by name; large inline code (or
 * code from stdin past INLINE_CODE_MAX) is uploaded from a memfd.  Adds at
 * most one upload (*up, *nup).  *cmd is malloc'd.  0 or an exit status. */
static int lang_command(const struct lang *lang, const char **code, size_t *code_len,
			char **code_buf, int argc, char **argv, int *optind_, int interactive,
			struct transfer *up, size_t *nup, int *code_fd, char *code_remote,
			const char ***cmd)
{
	int i = *optind_;
	if (i < argc && !strcmp(argv[i], "--"))
		i++;
	const char *file = NULL;
	if (!*code) {
		if (i >= argc) {
			if (isatty(0))
				return cli_usage_error("run", "--lang %s needs code: -c CODE, a FILE, or - "
						       "for standard input", lang->name);
			file = "-";
		} else {
			file = argv[i++];
		}
		if (!strcmp(file, "-")) {
			if (interactive)
				return cli_usage_error("run", "-i cannot be used with code read from "
						       "standard input");
			int rc = cli_read_all("run", 0, "standard input", CODE_MAX, code_buf, code_len);
			if (rc != 0)
				return rc;
			*code = *code_buf;
			file = NULL;
		} else {
			struct stat st;
			if (stat(file, &st) < 0)
				return cli_usage_error("run", "%s: %s", file, strerror(errno));
			if (!S_ISREG(st.st_mode) || access(file, R_OK) < 0)
				return cli_usage_error("run", "%s: not a readable file", file);
		}
	}
	if (*code && memchr(*code, '\0', *code_len))
		return cli_usage_error("run", "the code contains a NUL byte");
	size_t nargs = (size_t)(argc - i);
	const char **v = calloc(nargs + 5, sizeof(*v));
	if (!v)
		return EXIT_SANDLOT;
	size_t n = 0;
	v[n++] = lang->prog;
	if (*code && *code_len <= INLINE_CODE_MAX) {
		v[n++] = lang->inline_flag;
		v[n++] = *code;
		if (!strcmp(lang->prog, "bash"))
			v[n++] = "bash";   /* $0; the ARGs are $1... */
	} else {
		if (*code) {
			/* Too long for an argument: a file, from memory, written
			 * into the sandbox after the uploads (cmd_run). */
			*code_fd = memfd_create("sandlot-code", MFD_CLOEXEC);
			if (*code_fd < 0 || write(*code_fd, *code, *code_len) != (ssize_t)*code_len ||
			    lseek(*code_fd, 0, SEEK_SET) != 0) {
				cli_err("run: memfd: %s", strerror(errno));
				free(v);
				return EXIT_SANDLOT;
			}
			snprintf(code_remote, 64, "/tmp/sandlot-code%s", lang->suffix);
			v[n++] = code_remote;
			goto args;
		} else {
			const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
			up->local = strdup(file);
			if (asprintf(&up->remote, "/home/user/%s", base) < 0)
				up->remote = NULL;
			v[n++] = up->remote;
		}
		if (!up->local || !up->remote) {
			free(v);
			return EXIT_SANDLOT;
		}
		(*nup)++;
	}
args:
	for (; i < argc; i++)
		v[n++] = argv[i];
	*optind_ = argc;
	*cmd = v;
	return 0;
}

int cmd_run(int argc, char **argv)
{
	sandlot_options_t opts;
	sandlot_options_init(&opts);
	uint64_t timeout_ms = 5 * 60 * 1000, output_limit = 1 << 20, v;
	const char *workdir = NULL;
	int json = 0, interactive = 0;
	size_t nenv = 0, nup = 0, ndown = 0;
	cleanup_free const char **env = calloc((size_t)argc + 1, sizeof(char *));
	cleanup_free struct transfer *up = calloc((size_t)argc + 1, sizeof(struct transfer));
	cleanup_free struct transfer *down = calloc((size_t)argc + 1, sizeof(struct transfer));
	sandlot_error_t *err = NULL;
	cleanup_close int sigfd = -1;
	int rc = EXIT_SANDLOT;
	const struct lang *lang = NULL;
	const char *code = NULL;
	size_t code_len = 0;
	cleanup_free char *code_buf = NULL;
	cleanup_close int code_fd = -1;
	char code_remote[64] = "";
	const char **cmd = NULL;
	json_t *net = json_object(); /* {"network": {...}} from the network options */
	cleanup_free const char **pip = calloc((size_t)argc + 1, sizeof(char *));
	cleanup_free const char **npm = calloc((size_t)argc + 1, sizeof(char *));
	size_t npip = 0, nnpm = 0;
	const char **net_allow = NULL, **net_deny = NULL;
	if (!env || !up || !down || !net || !pip || !npm) {
		json_decref(net);
		return EXIT_SANDLOT;
	}

#define USAGE_FROM_ERR(opt)                                                          \
	do {                                                                         \
		rc = cli_usage_error("run", "%s: %s", opt, sandlot_error_message(err)); \
		sandlot_error_free(err);                                             \
		goto out;                                                            \
	} while (0)

	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:m:t:e:w:u:d:il:c:h", run_opts, NULL)) != -1) {
		/* `--memory -- cmd`: getopt took the separator as the value. */
		if (optarg && strcmp(optarg, "--") == 0)
			c = ':';
		switch (c) {
		case 'm':
			if (sandlot__parse_size(optarg, 0, &opts.memory_bytes, &err) < 0)
				USAGE_FROM_ERR("--memory");
			break;
		case OPT_CPUS:
			if (sandlot__parse_cpus(optarg, &opts.cpus_milli, &err) < 0)
				USAGE_FROM_ERR("--cpus");
			break;
		case OPT_PIDS:
			if (parse_count("--pids", optarg, 1u << 22, &v) != 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			if (v < 2) {
				rc = cli_usage_error("run", "--pids must be at least 2 (init and the command)");
				goto out;
			}
			opts.pids = (uint32_t)v;
			break;
		case OPT_DISK:
			if (sandlot__parse_size(optarg, 0, &opts.disk_bytes, &err) < 0)
				USAGE_FROM_ERR("--disk");
			break;
		case 't':
			if (sandlot__parse_duration(optarg, &timeout_ms, &err) < 0)
				USAGE_FROM_ERR("--timeout");
			break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=') {
				rc = cli_usage_error("run", "invalid --env \"%s\": expected KEY=VALUE", optarg);
				goto out;
			}
			env[nenv++] = optarg;
			break;
		case 'w':
			workdir = optarg;
			break;
		case 'u':
		case 'd':
			if (transfer_parse(optarg, c == 'u', c == 'u' ? &up[nup] : &down[ndown]) < 0) {
				rc = cli_usage_error("run", "invalid --%s \"%s\": expected %s",
						     c == 'u' ? "upload" : "download", optarg,
						     c == 'u' ? "LOCAL[:REMOTE]" : "REMOTE[:LOCAL]");
				goto out;
			}
			if (c == 'u')
				nup++;
			else
				ndown++;
			break;
		case 'i':
			interactive = 1;
			break;
		case OPT_JSON:
			json = 1;
			break;
		case OPT_OUTPUT_LIMIT:
			if (sandlot__parse_size(optarg, 1, &output_limit, &err) < 0)
				USAGE_FROM_ERR("--output-limit");
			break;
		case OPT_NOFILE:
			if (parse_count("--nofile", optarg, 1u << 20, &opts.nofile) != 0) {
				rc = EXIT_USAGE;
				goto out;
			}
			break;
		case OPT_HOSTNAME:
			opts.hostname = optarg;
			break;
		case OPT_IMAGE:
			opts.image = optarg;
			break;
		case OPT_STORAGE:
			/* "ext4": the former name of the default, still accepted. */
			if (!strcmp(optarg, "pool") || !strcmp(optarg, "ext4")) {
				opts.storage = SANDLOT_STORAGE_POOL;
			} else if (!strcmp(optarg, "tmpfs")) {
				opts.storage = SANDLOT_STORAGE_TMPFS;
			} else {
				rc = cli_usage_error("run", "invalid --storage \"%s\": expected pool or tmpfs",
						     optarg);
				goto out;
			}
			break;
		case OPT_ISOLATION:
			if (!strcmp(optarg, "ns")) {
				opts.isolation = SANDLOT_ISOLATION_NS;
			} else if (!strcmp(optarg, "vm")) {
				opts.isolation = SANDLOT_ISOLATION_VM;
			} else {
				rc = cli_usage_error("run", "invalid --isolation \"%s\": expected ns or vm",
						     optarg);
				goto out;
			}
			break;
		case 'l':
			lang = NULL;
			for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++)
				if (!strcmp(optarg, langs[i].name) || !strcmp(optarg, langs[i].alias1) ||
				    !strcmp(optarg, langs[i].alias2))
					lang = &langs[i];
			if (!lang) {
				rc = cli_usage_error("run", "unknown --lang \"%s\": expected python, javascript or bash",
						     optarg);
				goto out;
			}
			break;
		case 'c':
			code = optarg;
			code_len = strlen(optarg);
			break;
		case 'h':
			fputs(run_help, stdout);
			rc = 0;
			goto out;
		case ':':
			rc = cli_option_error("run", c, argv);
			goto out;
		case OPT_PIP:
			pip[npip++] = optarg;
			break;
		case OPT_NPM:
			npm[nnpm++] = optarg;
			break;
		case OPT_NET:
		case OPT_ALLOW_HOST:
		case OPT_DENY_HOST:
			if ((rc = cli_net_option("run", c, optarg, net)) != 0)
				goto out;
			rc = EXIT_SANDLOT;
			break;
		case '?':
		default:
			rc = cli_option_error("run", '?', argv);
			goto out;
		}
	}
	if (code && !lang) {
		rc = cli_usage_error("run", "-c needs --lang (python, javascript or bash)");
		goto out;
	}
	if ((rc = cli_net_finish("run", net)) != 0)
		goto out;
	sandlot_packages_t packages = { .size = sizeof(packages),
					.pip = npip ? pip : NULL, .npm = nnpm ? npm : NULL };
	if (sandlot_packages_validate(&packages, &err) < 0)
		USAGE_FROM_ERR(npip && strstr(sandlot_error_message(err), "pip") ? "--pip" : "--npm");
	rc = EXIT_SANDLOT;
	if (cli_net_policy(net, &opts, &net_allow, &net_deny) < 0)
		goto out;
#ifdef SANDLOT_CLI_STATIC
	/* What loads libnftables or c-ares (the egress engine: a network
	 * policy, a package install) cannot run in this static program; a vm
	 * goes there too (its boot takes seconds, not a millisecond less).
	 * Before anything is read from stdin: the other program reads it. */
	if (opts.network != SANDLOT_NET_NONE || npip || nnpm ||
	    opts.isolation == SANDLOT_ISOLATION_VM) {
		rc = cli_run_dynamic();
		goto out;
	}
#endif
	if (lang) {
		rc = lang_command(lang, &code, &code_len, &code_buf, argc, argv, &optind, interactive,
				  &up[nup], &nup, &code_fd, code_remote, &cmd);
		if (rc != 0)
			goto out;
	} else if (optind >= argc) {
		rc = cli_usage_error("run", "no command given: sandlot run [OPTIONS] -- COMMAND [ARG...]");
		goto out;
	} else {
		cmd = (const char **)argv + optind;
	}
	if (geteuid() != 0) {
		cli_err("run: sandlot needs root to create sandboxes (uid maps, cgroups, loop storage)");
		rc = EXIT_SANDLOT;
		goto out;
	}
	/* Check local paths before spending anything on a sandbox. */
	for (size_t i = 0; i < nup; i++) {
		if (access(up[i].local, R_OK) < 0) {
			rc = cli_usage_error("run", "--upload %s: %s", up[i].local, strerror(errno));
			goto out;
		}
	}
	for (size_t i = 0; i < ndown; i++) {
		cleanup_free char *dir = strdup(down[i].local);
		char *slash = dir ? strrchr(dir, '/') : NULL;
		const char *parent = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
		struct stat pst;
		if (stat(parent, &pst) < 0 || !S_ISDIR(pst.st_mode) || access(parent, W_OK) < 0) {
			rc = cli_usage_error("run", "--download %s: cannot write into %s%s%s",
					     down[i].local, parent, errno ? ": " : "",
					     errno ? strerror(errno) : "");
			goto out;
		}
	}
	opts.env = env;
	/* Exit as soon as the command is done: a helper process finishes the
	 * teardown (and does it too if we are killed). */
	opts.cleanup_helper = 1;
	opts.start_nowait = 1;
	if (sandlot_options_validate(&opts, &err) < 0) {
		rc = cli_usage_error("run", "%s", sandlot_error_message(err));
		sandlot_error_free(err);
		goto out;
	}

	/* Signals arrive through a signalfd; the library's I/O thread blocks
	 * them all.  SIGPIPE is ignored: a closed terminal is not our death. */
	signal(SIGPIPE, SIG_IGN);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGQUIT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sigfd = signalfd(-1, &sigs, SFD_CLOEXEC);

	sandlot__trace(NULL);
	sandlot_t *sb = sandlot_create(&opts, &err);
	if (!sb) {
		cli_err("%s", sandlot_error_message(err));
		sandlot_error_free(err);
		rc = EXIT_SANDLOT;
		goto out;
	}
	/* With nothing to put in first, the command goes to init while it
	 * still sets itself up (start_nowait): init starts it as soon as it is
	 * ready, and this process does not wait for that in between.  Not for
	 * a vm sandbox: the command's clock (--timeout, duration_ms) starts
	 * when it is sent, and a boot takes seconds (a 500 ms timeout killed
	 * the command before the guest had started it). */
	int early = nup == 0 && code_fd < 0 && opts.isolation != SANDLOT_ISOLATION_VM;
	if (!early && sandlot_wait_ready(sb, &err) < 0) {
		cli_err("%s", sandlot_error_message(err));
		sandlot_error_free(err);
		sandlot_destroy_nowait(sb);
		rc = EXIT_SANDLOT;
		goto out;
	}
	for (size_t i = 0; i < nup; i++) {
		if (transfer_upload(sb, &up[i], &err) < 0) {
			cli_err("--upload %s: %s", up[i].local, sandlot_error_message(err));
			sandlot_error_free(err);
			sandlot_destroy_nowait(sb);
			rc = EXIT_SANDLOT;
			goto out;
		}
	}
	if (npip || nnpm) {
		sandlot_install_result_t ir = { .size = sizeof(ir) };
		int r = sandlot_install_packages(sb, &packages, &ir, &err);
		/* The installers' output goes with the command's errors: stderr
		 * (in --json mode, only when they fail). */
		if (r < 0 || !json)
			sandlot__write_all(2, ir.output, strlen(ir.output));
		free(ir.output);
		if (r < 0) {
			cli_err("installing packages: %s", sandlot_error_message(err));
			sandlot_error_free(err);
			sandlot_destroy(sb);
			rc = EXIT_SANDLOT;
			goto out;
		}
	}
	if (code_fd >= 0 &&
	    sandlot_file_write_fd(sb, code_remote, 0644, SANDLOT_WRITE_MKDIRS, code_fd, &err) < 0) {
		cli_err("writing the code to %s: %s", code_remote, sandlot_error_message(err));
		sandlot_error_free(err);
		sandlot_destroy_nowait(sb);
		rc = EXIT_SANDLOT;
		goto out;
	}
	/* The command's changes are measured from here, uploads excluded
	 * (without uploads, from the baseline init took when it started). */
	sandlot_changes_t ch = { .size = sizeof(ch) };
	if (json && !early && sandlot_changes_scan(sb, &ch, NULL) == 0)
		sandlot_changes_free(&ch);

	struct run_state st = { .json = json };
	st.out.limit = st.err.limit = output_limit;
	if (pipe2(st.exit_pipe, O_CLOEXEC) < 0) {
		cli_err("pipe: %s", strerror(errno));
		sandlot_destroy_nowait(sb);
		goto out;
	}
	sandlot_exec_spec_t spec = {
		.size = sizeof(spec), .argv = (const char *const *)cmd,
		.cwd = workdir,
		.stdin_pipe = interactive,
		.timeout_ms = timeout_ms,
		/* Nothing runs after it: init readies no spare process. */
		.last = 1,
	};
	sandlot_exec_callbacks_t cb = { .size = sizeof(cb),
					.on_output = on_output, .on_exit = on_exit_cb, .userdata = &st };
	sandlot_proc_t *p = sandlot_exec(sb, &spec, &cb, &err);
	sandlot_exit_t ex = { .size = sizeof(ex), .exit_code = -1 };
	if (!p || (early && sandlot_wait_ready(sb, &err) < 0)) {
		/* (A failed set-up ends the command as killed: its own error
		 * is the one to show.) */
		cli_err("%s", sandlot_error_message(err));
		sandlot_error_free(err);
		sandlot_proc_free(p);
		sandlot_destroy_nowait(sb);
		goto out_pipe;
	}
	sandlot__trace("exec start");
	supervise(p, &st, interactive, sigfd);
	sandlot__trace("exec done");
	sandlot_proc_wait(p, &ex, NULL);
	sandlot_proc_free(p);

	json_t *errors = json_array();
	int transfer_failed = 0;
	if (json && !ex.start_error) {
		if (sandlot_changes_scan(sb, &ch, &err) < 0) {
			json_array_append_new(errors, json_string(sandlot_error_message(err)));
			sandlot_error_free(err);
			err = NULL;
		}
	}
	for (size_t i = 0; i < ndown; i++) {
		if (transfer_download(sb, &down[i], &err) < 0) {
			cli_err("--download %s: %s", down[i].remote, sandlot_error_message(err));
			json_array_append_new(errors, json_string(sandlot_error_message(err)));
			sandlot_error_free(err);
			err = NULL;
			transfer_failed = 1;
		}
	}
	if (json)
		print_json(sandlot_id(sb), &ex, &st, &ch, errors);
	json_decref(errors);
	sandlot_changes_free(&ch);
	sandlot_destroy_nowait(sb);

	if (ex.start_error) {
		if (!json)
			cli_err("%s", ex.error);
		rc = ex.exit_code;
	} else {
		if (!json && ex.timed_out)
			cli_err("command timed out and was killed");
		else if (!json && ex.oom_killed)
			cli_err("command ran out of memory (limit %llu bytes); the kernel killed it",
				(unsigned long long)opts.memory_bytes);
		else if (!json && ex.pids_limited)
			cli_err("warning: the process limit (%u) refused a fork", opts.pids);
		rc = exit_status(&ex);
		if (transfer_failed)
			rc = EXIT_SANDLOT;
	}
	free(st.out.buf);
	free(st.err.buf);
out_pipe:
	close(st.exit_pipe[0]);
	close(st.exit_pipe[1]);
out:
	if (lang)
		free(cmd);
	for (size_t i = 0; i < nup; i++)
		transfer_free(&up[i]);
	for (size_t i = 0; i < ndown; i++)
		transfer_free(&down[i]);
	free(net_allow);
	free(net_deny);
	json_decref(net);
	return rc;
}
