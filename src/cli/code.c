/* sandlot code: run a cell of code in a code context of a sandbox
 * (POST /v1/sandboxes/{id}/code, streamed as NDJSON). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/base64.h"
#include "common/cleanup.h"
#include "common/parse.h"

static const char code_help[] =
	"NAME\n"
	"    sandlot code - run code in a long-lived interpreter of a sandbox\n"
	"\n"
	"SYNOPSIS\n"
	"    sandlot code [OPTIONS] ID -c CODE\n"
	"    sandlot code [OPTIONS] ID FILE\n"
	"    sandlot code [OPTIONS] ID [-]          (the code from standard input)\n"
	"\n"
	"DESCRIPTION\n"
	"    Runs the code as one cell in a code context of the sandbox ID: a\n"
	"    python3, node or bash interpreter that lives in the sandbox between\n"
	"    calls, so variables, imports, functions (and for bash the working\n"
	"    directory) stay from one call to the next, as in a notebook.  Without\n"
	"    --context the language's default context is used, started on first\n"
	"    use.  Output arrives live; then the value of the cell's last\n"
	"    expression is printed (Python and JavaScript), and an error's\n"
	"    traceback goes to standard error.  Figures the code displays\n"
	"    (matplotlib) are saved with --save-images, else just announced.\n"
	"\n"
	"    Ctrl-C interrupts the cell (KeyboardInterrupt for Python) and keeps\n"
	"    the context's state; a second Ctrl-C stops waiting.\n"
	"\n"
	"OPTIONS\n"
	"    -l, --lang LANG        python (default), javascript (or js), bash\n"
	"    -c, --code CODE        the code to run\n"
	"        --context CTX      a context made with POST .../contexts (its\n"
	"                           language is its own; --lang is then ignored)\n"
	"    -t, --timeout DURATION interrupt the cell after DURATION (500ms, 30s, 2m);\n"
	"                           the context keeps its state\n"
	"        --save-images DIR  write the images the cell displays to DIR\n"
	"                           (created if missing) as cell-N-M.png\n"
	"        --json             print the whole result as one line of JSON\n"
	"                           (nothing streamed) and exit 0 if it came back\n"
	CLI_CLIENT_OPTIONS_HELP
	"    -h, --help             show this help\n"
	"\n"
	"EXIT STATUS\n"
	"    0 if the cell ran without error (bash: the cell's own status); 1 if it\n"
	"    raised an error or its interpreter died (the next cell starts a fresh\n"
	"    one); 124 if it timed out; 130 if it was interrupted; 125 if sandlotd\n"
	"    could not be reached or refused (no such sandbox or context, context\n"
	"    busy); 2 for bad arguments.\n"
	"\n"
	"EXAMPLES\n"
	"    sandlot code sb-7x2k... -c 'import pandas as pd; df = pd.read_csv(\"data.csv\")'\n"
	"    sandlot code sb-7x2k... -c 'df.describe()'\n"
	"    sandlot code --lang js sb-7x2k... -c 'let n = 41; n + 1'\n"
	"    sandlot code --save-images plots sb-7x2k... analysis.py\n";

enum { OPT_CONTEXT = 2000, OPT_SAVE_IMAGES, OPT_JSON };

static const struct option code_opts[] = {
	{ "lang", required_argument, NULL, 'l' },
	{ "language", required_argument, NULL, 'l' },
	{ "code", required_argument, NULL, 'c' },
	{ "context", required_argument, NULL, OPT_CONTEXT },
	{ "timeout", required_argument, NULL, 't' },
	{ "save-images", required_argument, NULL, OPT_SAVE_IMAGES },
	{ "json", no_argument, NULL, OPT_JSON },
	CLI_CLIENT_OPTIONS,
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

#define CODE_MAX (64u << 20)        /* largest cell we send */
#define LINE_MAX_BYTES (256u << 20) /* largest event we accept */

struct code_args {
	const char *id;
	const char *lang;
	const char *context;
	const char *code;            /* -c, or read from FILE / stdin */
	char *code_buf;              /* owned when read */
	size_t code_len;
	int has_timeout;
	uint64_t timeout_ms;
	const char *save_dir;
	int json;
};

struct code_stream {
	struct sl_lines lines;
	int broken_pipe;
	int bad;
	unsigned images;             /* images seen */
	int save_failed;
	const struct code_args *a;
	json_t *result;
};

/* ---- output ---------------------------------------------------------- */

static void out_text(struct code_stream *s, int fd, const char *text, size_t len)
{
	if (s->broken_pipe || !text)
		return;
	if (client_write_all(fd, text, len) < 0)
		s->broken_pipe = 1;
}

/* An image from a display event (or the last expression's mime bundle). */
static void show_image(struct code_stream *s, const char *mime, const char *b64, json_t *count)
{
	unsigned n = ++s->images;
	size_t len = strlen(b64);
	if (!s->a->save_dir) {
		char msg[256];
		int m = snprintf(msg, sizeof(msg), "[%s, %zu bytes: use --save-images DIR to keep it]\n",
				 mime, len / 4 * 3);
		out_text(s, 2, msg, (size_t)m);
		return;
	}
	unsigned char *raw = malloc(sandlot__base64_decoded_max(len));
	ssize_t rl = raw ? sandlot__base64_decode(b64, len, raw) : -1;
	if (rl < 0) {
		fprintf(stderr, "sandlot code: an image from sandlotd is not base64\n");
		free(raw);
		s->save_failed = 1;
		return;
	}
	const char *ext = !strcmp(mime, "image/png") ? "png" : !strcmp(mime, "image/jpeg") ? "jpg"
		: !strcmp(mime, "image/svg+xml") ? "svg" : "bin";
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cell-%lld-%u.%s", s->a->save_dir,
		 json_is_integer(count) ? (long long)json_integer_value(count) : 0LL, n, ext);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || client_write_all(fd, raw, (size_t)rl) < 0) {
		fprintf(stderr, "sandlot code: cannot write %s: %s\n", path, strerror(errno));
		s->save_failed = 1;
	} else {
		char msg[PATH_MAX + 64];
		int m = snprintf(msg, sizeof(msg), "[%s saved to %s]\n", mime, path);
		out_text(s, 2, msg, (size_t)m);
	}
	if (fd >= 0)
		close(fd);
	free(raw);
}

/* A mime bundle: the first image it holds, else its text/plain. */
static void show_bundle(struct code_stream *s, json_t *data, json_t *count)
{
	static const char *const images[] = { "image/png", "image/jpeg", "image/svg+xml" };
	for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++) {
		const char *b64 = json_string_value(json_object_get(data, images[i]));
		if (b64) {
			if (!strcmp(images[i], "image/svg+xml") && !s->a->save_dir) {
				/* SVG is text: shown as it is when not saved */
				break;
			}
			show_image(s, images[i], b64, count);
			return;
		}
	}
	const char *text = json_string_value(json_object_get(data, "text/plain"));
	if (text) {
		out_text(s, 1, text, strlen(text));
		out_text(s, 1, "\n", 1);
	}
}

static int handle_line(struct code_stream *s, const char *line, size_t len)
{
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0)
		return 0;
	json_error_t je;
	json_t *ev = json_loadb(line, len, 0, &je);
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!ev || !type) {
		json_decref(ev);
		fprintf(stderr, "sandlot code: sandlotd sent a malformed event\n");
		s->bad = 1;
		return -1;
	}
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		json_t *d = json_object_get(ev, "data");
		out_text(s, type[3] == 'o' ? 1 : 2, json_string_value(d), json_string_length(d));
	} else if (!strcmp(type, "display")) {
		show_bundle(s, json_object_get(ev, "data"), NULL);
	} else if (!strcmp(type, "result")) {
		json_decref(s->result);
		s->result = json_incref(ev);
	} else if (!strcmp(type, "error")) {
		const char *msg = json_string_value(json_object_get(ev, "message"));
		fprintf(stderr, "sandlot code: %s\n", msg ? msg : "sandlotd reported an error");
		s->bad = 1;
	}
	json_decref(ev);
	return 0;
}

static int on_line(void *ud, const char *line, size_t len)
{
	return handle_line(ud, line, len);
}

static int stream_sink(void *ud, const char *data, size_t len)
{
	struct code_stream *s = ud;
	int rc = sl_lines_feed(&s->lines, data, len, LINE_MAX_BYTES, on_line, s);
	if (rc == -2) {
		fprintf(stderr, "sandlot code: an event from sandlotd is too large\n");
		s->bad = 1;
	}
	return rc < 0 ? -1 : 0;
}

/* Print the end of a cell (value, error, notes) and return the exit status. */
static int finish(struct code_stream *s, json_t *r)
{
	const char *status = json_string_value(json_object_get(r, "status"));
	json_t *count = json_object_get(r, "execution_count");
	json_t *data = json_object_get(r, "data");
	const char *value = json_string_value(json_object_get(r, "value"));
	if (json_is_object(data) && (json_object_get(data, "image/png") ||
				     json_object_get(data, "image/jpeg")))
		show_bundle(s, data, count);
	else if (value) {
		out_text(s, 1, value, strlen(value));
		out_text(s, 1, "\n", 1);
	}
	json_t *err = json_object_get(r, "error");
	json_t *ec = json_object_get(r, "exit_code");
	const char *ename = json_string_value(json_object_get(err, "name"));
	if (json_is_integer(ec) && ename && !strcmp(ename, "ExitStatus")) {
		/* bash: a cell whose last command failed; its status says it */
		err = NULL;
		status = "ok";
	}
	if (json_is_object(err)) {
		json_t *tb = json_object_get(err, "traceback");
		size_t i;
		json_t *ln;
		int printed = 0;
		json_array_foreach(tb, i, ln) {
			const char *t = json_string_value(ln);
			if (!t)
				continue;
			size_t n = strlen(t);
			out_text(s, 2, t, n);
			if (n == 0 || t[n - 1] != '\n')
				out_text(s, 2, "\n", 1);
			printed = 1;
		}
		if (!printed) {
			const char *name = json_string_value(json_object_get(err, "name"));
			const char *val = json_string_value(json_object_get(err, "value"));
			fprintf(stderr, "%s: %s\n", name ? name : "Error", val ? val : "");
		}
	}
	if (json_is_true(json_object_get(r, "state_lost")))
		fprintf(stderr, "sandlot code: the interpreter's state was lost (variables and imports "
			"of earlier cells are gone); the next cell starts a fresh one\n");
	if (s->broken_pipe)
		return 128 + SIGPIPE;
	if (s->save_failed)
		return EXIT_SANDLOT;
	if (!status)
		return EXIT_SANDLOT;
	if (!strcmp(status, "timeout"))
		return EXIT_TIMEOUT;
	if (!strcmp(status, "interrupted"))
		return 128 + SIGINT;
	if (!strcmp(status, "error"))
		return 1;
	if (json_is_integer(ec))
		return (int)(json_integer_value(ec) & 255);
	return 0;
}

/* ---- the request ------------------------------------------------------ */

static json_t *code_body(const struct code_args *a)
{
	json_t *code = json_stringn(a->code, a->code_len);
	if (!code)
		return NULL;
	json_t *body = json_object();
	json_object_set_new(body, "code", code);
	if (a->context)
		json_object_set_new(body, "context", json_string(a->context));
	else
		json_object_set_new(body, "language", json_string(a->lang));
	if (a->has_timeout)
		json_object_set_new(body, "timeout_ms", json_integer((json_int_t)a->timeout_ms));
	return body;
}

static int code_run(const struct code_args *a, const char *host, const char *token_file)
{
	struct client cl;
	int rc = client_init(&cl, "code", host, token_file);
	if (rc != 0)
		return rc;
	cleanup_free char *id = client_escape(a->id);
	cleanup_free char *path = NULL, *intr_path = NULL;
	if (!id || asprintf(&path, "/v1/sandboxes/%s/code", id) < 0 ||
	    asprintf(&intr_path, "/v1/sandboxes/%s/code/interrupt", id) < 0) {
		client_free(&cl);
		return EXIT_SANDLOT;
	}
	cleanup_close int sigfd = client_signalfd();
	if (sigfd < 0) {
		fprintf(stderr, "sandlot code: signalfd: %s\n", strerror(errno));
		client_free(&cl);
		return EXIT_SANDLOT;
	}

	json_t *body = code_body(a);
	if (!body) {
		client_free(&cl);
		return cli_usage_error("code", "the code is not valid UTF-8");
	}
	struct code_stream st = { .a = a };
	struct client_req req = { .method = "POST", .path = path, .json = body };
	if (!a->json) {
		req.accept = "application/x-ndjson";
		req.sink = stream_sink;
		req.sink_ud = &st;
	}
	json_t *intr_body = a->context ? json_pack("{s:s}", "context", a->context)
				       : json_pack("{s:s}", "language", a->lang);
	struct client_req intr = { 0 };
	int interrupting = 0, sig = 0;
	if (client_start(&cl, &req) == 0) {
		while (!client_done(&req)) {
			struct pollfd pfd = { .fd = sigfd, .events = POLLIN };
			if (client_poll(&cl, &pfd, 1, -1) < 0)
				break;
			if (interrupting && client_done(&intr)) {
				client_req_free(&intr);
				interrupting = 0;
			}
			int s = pfd.revents ? client_take_signal(sigfd) : 0;
			if (!s)
				continue;
			if (sig || s != SIGINT) {
				/* A second signal, or one that means "go away": stop
				 * waiting.  Closing the stream interrupts the cell. */
				sig = s;
				client_cancel(&req);
				break;
			}
			sig = s;
			if (!interrupting) {
				fprintf(stderr, "sandlot code: interrupting the cell (Ctrl-C again to stop waiting)\n");
				intr = (struct client_req){ .method = "POST", .path = intr_path,
							    .json = intr_body };
				client_start(&cl, &intr);
				interrupting = 1;
			}
		}
	}
	while (interrupting && !client_done(&intr))
		client_poll(&cl, NULL, 0, 1000);
	client_req_free(&intr);

	if (client_done(&req) && !a->json)
		sl_lines_flush(&st.lines, on_line, &st); /* a last event without its newline */
	if (!client_done(&req)) {
		rc = 128 + sig;
	} else if (req.transport || req.status == 0 || req.status >= 300) {
		rc = client_report(&cl, &req, NULL);
		if (rc == 1)
			rc = EXIT_SANDLOT;
	} else if (a->json) {
		char *text = json_dumps(req.reply, JSON_COMPACT);
		if (text) {
			puts(text);
			free(text);
			rc = fflush(stdout) == 0 ? 0 : EXIT_SANDLOT;
		} else {
			rc = EXIT_SANDLOT;
		}
	} else if (st.result) {
		rc = finish(&st, st.result);
	} else {
		if (!st.bad)
			fprintf(stderr, "sandlot code: the stream from sandlotd ended before the cell did\n");
		rc = EXIT_SANDLOT;
	}
	client_req_free(&req);
	json_decref(body);
	json_decref(intr_body);
	json_decref(st.result);
	sl_lines_free(&st.lines);
	client_free(&cl);
	return rc;
}

/* Read the whole of fd (a file or stdin) as the cell's code. */
static int read_code(int fd, const char *what, struct code_args *a)
{
	int rc = cli_read_all("code", fd, what, CODE_MAX, &a->code_buf, &a->code_len);
	if (rc == 0)
		a->code = a->code_buf;
	return rc;
}

static int valid_lang(const char **lang)
{
	if (!strcmp(*lang, "js") || !strcmp(*lang, "node"))
		*lang = "javascript";
	else if (!strcmp(*lang, "py") || !strcmp(*lang, "python3"))
		*lang = "python";
	else if (!strcmp(*lang, "sh"))
		*lang = "bash";
	return !strcmp(*lang, "python") || !strcmp(*lang, "javascript") || !strcmp(*lang, "bash");
}

int cmd_code(int argc, char **argv)
{
	struct code_args a = { .lang = "python" };
	const char *host = NULL, *token_file = NULL;
	sandlot_error_t *err = NULL;
	int rc = EXIT_USAGE;

	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":l:c:t:H:h", code_opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			a.lang = optarg;
			if (!valid_lang(&a.lang)) {
				rc = cli_usage_error("code", "unknown language \"%s\": use python, javascript or bash",
						     optarg);
				goto out;
			}
			break;
		case 'c':
			a.code = optarg;
			a.code_len = strlen(optarg);
			break;
		case OPT_CONTEXT:
			if (!*optarg) {
				rc = cli_usage_error("code", "--context needs a context id");
				goto out;
			}
			a.context = optarg;
			break;
		case 't':
			if (sandlot__parse_duration(optarg, &a.timeout_ms, &err) < 0) {
				rc = cli_usage_error("code", "--timeout: %s", sandlot_error_message(err));
				sandlot_error_free(err);
				goto out;
			}
			if (a.timeout_ms == 0) {
				rc = cli_usage_error("code", "--timeout must be more than 0");
				goto out;
			}
			a.has_timeout = 1;
			break;
		case OPT_SAVE_IMAGES:
			a.save_dir = optarg;
			break;
		case OPT_JSON:
			a.json = 1;
			break;
		CLI_CLIENT_OPTION_CASES(host, token_file);
		case 'h':
			fputs(code_help, stdout);
			rc = 0;
			goto out;
		default:
			rc = cli_option_error("code", c, argv);
			goto out;
		}
	}
	if (optind >= argc) {
		rc = cli_usage_error("code", "no sandbox given: sandlot code [OPTIONS] ID -c CODE");
		goto out;
	}
	a.id = argv[optind++];
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind + 1 < argc) {
		rc = cli_usage_error("code", "too many arguments: one FILE at most");
		goto out;
	}
	if (a.code && optind < argc) {
		rc = cli_usage_error("code", "give the code with -c or as FILE, not both");
		goto out;
	}
	if (!a.code) {
		const char *file = optind < argc ? argv[optind] : "-";
		if (!strcmp(file, "-")) {
			if (isatty(0)) {
				rc = cli_usage_error("code", "no code given: use -c CODE, a FILE, or pipe it in");
				goto out;
			}
			if ((rc = read_code(0, "standard input", &a)) != 0)
				goto out;
		} else {
			int fd = open(file, O_RDONLY | O_CLOEXEC);
			struct stat sb;
			if (fd < 0) {
				rc = cli_usage_error("code", "cannot open %s: %s", file, strerror(errno));
				goto out;
			}
			if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
				close(fd);
				rc = cli_usage_error("code", "%s is a directory", file);
				goto out;
			}
			rc = read_code(fd, file, &a);
			close(fd);
			if (rc != 0)
				goto out;
		}
	}
	if (a.code_len > CODE_MAX) {
		rc = cli_usage_error("code", "the code is larger than %u MiB", CODE_MAX >> 20);
		goto out;
	}
	if (memchr(a.code, '\0', a.code_len)) {
		rc = cli_usage_error("code", "the code contains a NUL byte");
		goto out;
	}
	if (a.save_dir && mkdir(a.save_dir, 0755) < 0 && errno != EEXIST) {
		rc = cli_usage_error("code", "--save-images %s: %s", a.save_dir, strerror(errno));
		goto out;
	}
	rc = code_run(&a, host, token_file);
out:
	free(a.code_buf);
	return rc;
}
