/* HTTP client for sandlotd: see client.h for the contract. */
#include "client.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "common/cleanup.h"

#define ERROR_BODY_MAX (64u << 10)

/* ---- set-up ------------------------------------------------------------- */

/* Fill c->unix_path / c->base_url from a --host value.  -1 if malformed. */
static int parse_host(struct client *c, const char *host)
{
	if (!strncmp(host, "unix:", 5) || host[0] == '/') {
		const char *path = host[0] == '/' ? host : host + 5;
		if (!*path)
			return -1;
		c->unix_path = strdup(path);
		c->base_url = strdup("http://localhost");
		return c->unix_path && c->base_url ? 0 : -1;
	}
	const char *hp = NULL;
	if (!strncmp(host, "tcp:", 4))
		hp = host + 4;
	else if (!strncmp(host, "http://", 7))
		hp = host + 7;
	if (hp) {
		/* HOST:PORT with a numeric port; [v6]:PORT allowed. */
		size_t n = strlen(hp);
		while (n > 0 && hp[n - 1] == '/')
			n--;
		const char *colon = memrchr(hp, ':', n);
		if (!colon || colon == hp || colon + 1 == hp + n)
			return -1;
		for (const char *p = colon + 1; p < hp + n; p++)
			if (!isdigit((unsigned char)*p))
				return -1;
		for (const char *p = hp; p < colon; p++)
			if (*p == '/' || *p == '@' || *p == '?' || *p == '#' || isspace((unsigned char)*p))
				return -1;
		if (asprintf(&c->base_url, "http://%.*s", (int)n, hp) < 0) {
			c->base_url = NULL;
			return -1;
		}
		return 0;
	}
	if (!strncmp(host, "https://", 8) && host[8]) {
		/* Behind a TLS-terminating proxy. */
		size_t n = strlen(host);
		while (n > 8 && host[n - 1] == '/')
			n--;
		c->base_url = strndup(host, n);
		return c->base_url ? 0 : -1;
	}
	return -1;
}

/* The curl library is set up once per process, from whichever thread first
 * opens a client (sandlotd opens them from several). */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_setup(void)
{
	curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

int client_open(struct client *c, const char *verb, const char *host, const char *token)
{
	memset(c, 0, sizeof(*c));
	c->verb = verb;
	/* Messages name the host as unix:PATH, tcp:HOST:PORT or the URL. */
	if (host[0] == '/' ? asprintf(&c->host, "unix:%s", host) < 0 : !(c->host = strdup(host)))
		c->host = NULL;
	if (!c->host) {
		errno = ENOMEM;
		return -1;
	}
	if (parse_host(c, host) < 0) {
		client_free(c);
		errno = EINVAL;
		return -1;
	}
	if (token) {
		if (strpbrk(token, "\r\n")) {
			client_free(c);
			errno = EBADMSG;
			return -1;
		}
		if (asprintf(&c->auth, "Authorization: Bearer %s", token) < 0) {
			c->auth = NULL;
			client_free(c);
			errno = ENOMEM;
			return -1;
		}
	}
	pthread_once(&curl_once, curl_setup);
	c->multi = curl_ok ? curl_multi_init() : NULL;
	if (!c->multi) {
		client_free(c);
		errno = ENOTSUP;
		return -1;
	}
	return 0;
}

void client_free(struct client *c)
{
	if (c->multi)
		curl_multi_cleanup(c->multi);
	free(c->host);
	free(c->unix_path);
	free(c->base_url);
	if (c->auth) {
		/* The token does not linger in freed memory. */
		explicit_bzero(c->auth, strlen(c->auth));
		free(c->auth);
	}
	memset(c, 0, sizeof(*c));
}

/* ---- callbacks ---------------------------------------------------------- */

static int is_success(long status)
{
	return status >= 200 && status < 300;
}

static int buf_append(struct client_req *r, const char *data, size_t len, size_t max)
{
	if (r->len + len > max)
		return -1;
	if (r->len + len + 1 > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < r->len + len + 1)
			cap *= 2;
		char *nb = realloc(r->buf, cap);
		if (!nb)
			return -1;
		r->buf = nb;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, len);
	r->len += len;
	r->buf[r->len] = '\0';
	return 0;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
	struct client_req *r = ud;
	size_t len = size * nmemb;
	long status = 0;
	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
	if (is_success(status) && r->sink) {
		r->sink_started = 1;
		int rc = r->sink(r->sink_ud, data, len);
		if (rc < 0) {
			r->aborted = 1;
			return 0;   /* CURLE_WRITE_ERROR ends the transfer */
		}
		if (rc > 0)
			return CURL_WRITEFUNC_PAUSE;
		return len;
	}
	if (is_success(status)) {
		if (buf_append(r, data, len, CLIENT_MAX_JSON) < 0) {
			free(r->err_msg);
			r->err_msg = strdup("the answer from sandlotd is too large");
			return 0;
		}
		return len;
	}
	/* An error body: keep the start, drop the rest. */
	if (r->len < ERROR_BODY_MAX)
		buf_append(r, data, len < ERROR_BODY_MAX - r->len ? len : ERROR_BODY_MAX - r->len,
			   ERROR_BODY_MAX);
	return len;
}

static size_t read_cb(char *buf, size_t size, size_t nmemb, void *ud)
{
	struct client_req *r = ud;
	size_t max = size * nmemb;
	if (r->source) {
		ssize_t n = r->source(r->source_ud, buf, max);
		if (n < 0) {
			r->aborted = 1;
			return CURL_READFUNC_ABORT;
		}
		return (size_t)n;
	}
	size_t left = r->body_len - r->body_off;
	size_t n = left < max ? left : max;
	memcpy(buf, r->body + r->body_off, n);
	r->body_off += n;
	return n;
}

/* ---- requests ----------------------------------------------------------- */

static int add_header(struct client_req *r, const char *h)
{
	struct curl_slist *n = curl_slist_append(r->headers, h);
	if (!n)
		return -1;
	r->headers = n;
	return 0;
}

static void fail_early(struct client_req *r, const char *msg)
{
	r->transport = 1;
	r->finished = 1;
	free(r->err_msg);
	r->err_msg = strdup(msg);
}

int client_start(struct client *c, struct client_req *r)
{
	r->c = c;
	r->status = 0;
	r->finished = 0;
	r->h = curl_easy_init();
	if (!r->h) {
		fail_early(r, "cannot create a curl handle");
		return -1;
	}
	cleanup_free char *url = NULL;
	if (asprintf(&url, "%s%s", c->base_url, r->path) < 0) {
		url = NULL;
		fail_early(r, "out of memory");
		return -1;
	}
	CURL *h = r->h;
	int ok = 1;
#define SET(opt, val) ok &= curl_easy_setopt(h, opt, val) == CURLE_OK
	SET(CURLOPT_URL, url);
	if (c->unix_path)
		SET(CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	SET(CURLOPT_ERRORBUFFER, r->curl_err);
	SET(CURLOPT_PRIVATE, r);
	SET(CURLOPT_WRITEFUNCTION, write_cb);
	SET(CURLOPT_WRITEDATA, r);
	SET(CURLOPT_USERAGENT, "sandlot/0.1.0");
	/* Big reads: output and downloads come in large bursts. */
	SET(CURLOPT_BUFFERSIZE, 256L * 1024);
	/* Answers are never compressed or redirected; a proxy from the
	 * environment must not see a unix-socket request either. */
	SET(CURLOPT_NOPROXY, "*");

	if (r->json) {
		r->json_text = json_dumps(r->json, JSON_COMPACT);
		if (!r->json_text) {
			fail_early(r, "cannot encode the request");
			return -1;
		}
		r->body = r->json_text;
		r->body_len = strlen(r->json_text);
		ok &= add_header(r, "Content-Type: application/json") == 0;
	}
	int has_body = r->json || r->body || r->source;
	if (r->source || (r->body && !r->json)) {
		cleanup_free char *ct = NULL;
		if (asprintf(&ct, "Content-Type: %s",
			     r->content_type ? r->content_type : "application/octet-stream") < 0) {
			ct = NULL;
			ok = 0;
		} else {
			ok &= add_header(r, ct) == 0;
		}
	}
	if (has_body) {
		/* Stream the body through read_cb; curl sends Content-Length when
		 * it is known and chunks otherwise. */
		r->body_off = 0;
		SET(CURLOPT_UPLOAD, 1L);
		SET(CURLOPT_READFUNCTION, read_cb);
		SET(CURLOPT_READDATA, r);
		int64_t len = r->source ? r->source_len : (int64_t)r->body_len;
		SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
		SET(CURLOPT_CUSTOMREQUEST, r->method);
		/* Small bodies go at once instead of waiting for 100 Continue. */
		if (!r->source)
			ok &= add_header(r, "Expect:") == 0;
	} else if (!strcmp(r->method, "POST")) {
		SET(CURLOPT_POST, 1L);
		SET(CURLOPT_POSTFIELDS, "");
		SET(CURLOPT_POSTFIELDSIZE, 0L);
	} else if (strcmp(r->method, "GET") != 0) {
		SET(CURLOPT_CUSTOMREQUEST, r->method);
	}
	if (r->accept) {
		cleanup_free char *a = NULL;
		if (asprintf(&a, "Accept: %s", r->accept) < 0) {
			a = NULL;
			ok = 0;
		} else {
			ok &= add_header(r, a) == 0;
		}
	}
	if (c->auth)
		ok &= add_header(r, c->auth) == 0;
	SET(CURLOPT_HTTPHEADER, r->headers);
#undef SET
	if (!ok) {
		fail_early(r, "cannot set up the request (libcurl)");
		return -1;
	}
	if (curl_multi_add_handle(c->multi, h) != CURLM_OK) {
		fail_early(r, "cannot start the request (libcurl)");
		return -1;
	}
	c->active++;
	return 0;
}

/* Turn the collected body of a finished request into reply / err_*. */
static void parse_answer(struct client_req *r)
{
	if (is_success(r->status)) {
		if (r->sink || r->len == 0)
			return;
		json_error_t je;
		r->reply = json_loadb(r->buf, r->len, 0, &je);
		if (!r->reply) {
			r->transport = 1;
			free(r->err_msg);
			r->err_msg = strdup("sandlotd sent an answer that is not valid JSON");
		}
		return;
	}
	json_t *body = r->len ? json_loadb(r->buf, r->len, 0, NULL) : NULL;
	json_t *e = body ? json_object_get(body, "error") : NULL;
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	free(r->err_code);
	free(r->err_msg);
	r->err_code = strdup(code ? code : "");
	if (msg && *msg) {
		r->err_msg = strdup(msg);
	} else {
		/* Not one of ours (a proxy?): status and the start of the body. */
		char snippet[200] = "";
		if (r->len) {
			size_t n = 0;
			for (size_t i = 0; i < r->len && n < sizeof(snippet) - 1; i++)
				snippet[n++] = isprint((unsigned char)r->buf[i]) ? r->buf[i] : ' ';
			snippet[n] = '\0';
		}
		if (asprintf(&r->err_msg, "HTTP %ld%s%s", r->status,
			     snippet[0] ? ": " : "", snippet) < 0)
			r->err_msg = NULL;
	}
	json_decref(body);
}

/* A finished transfer: record the outcome, release the handle. */
static void finish(struct client *c, struct client_req *r, CURLcode rc)
{
	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
	long os_errno = 0;
	curl_easy_getinfo(r->h, CURLINFO_OS_ERRNO, &os_errno);
	if (rc == CURLE_OK || (r->status >= 400 && !r->sink_started && r->len > 0)) {
		/* An early error answer (say 404 to an upload whose body the
		 * daemon did not read) counts as the daemon's answer even if the
		 * connection then broke. */
		parse_answer(r);
	} else if (r->aborted) {
		/* the sink or source said why */
	} else {
		r->transport = 1;
		r->unreachable = (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
				  (rc == CURLE_OPERATION_TIMEDOUT && r->status == 0));
		if (r->unreachable && os_errno) {
			free(r->err_msg);
			r->err_msg = strdup(strerror((int)os_errno));
		} else if (!r->err_msg) {
			/* (write_cb may have said why already: answer too large) */
			r->err_msg = strdup(r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
		}
	}
	curl_multi_remove_handle(c->multi, r->h);
	curl_easy_cleanup(r->h);
	r->h = NULL;
	r->finished = 1;
	c->active--;
}

int client_poll(struct client *c, struct pollfd *fds, unsigned nfds, int timeout_ms)
{
	struct curl_waitfd wfds[8];
	if (nfds > SANDLOT_ARRAY_SIZE(wfds))
		nfds = SANDLOT_ARRAY_SIZE(wfds);
	unsigned nw = 0;
	for (unsigned i = 0; i < nfds; i++) {
		fds[i].revents = 0;
		if (fds[i].fd < 0)
			continue;
		wfds[nw].fd = fds[i].fd;
		wfds[nw].events = (short)(fds[i].events & (POLLIN | POLLOUT | POLLPRI));
		wfds[nw].revents = 0;
		nw++;
	}
	int numfds = 0;
	if (timeout_ms < 0)
		timeout_ms = 1000000;
	CURLMcode mc = curl_multi_poll(c->multi, wfds, nw, timeout_ms, &numfds);
	if (mc != CURLM_OK) {
		/* Should not happen; keep the transfers moving by polling the
		 * caller's fds briefly and letting curl_multi_perform() look. */
		struct pollfd pf[8];
		for (unsigned i = 0; i < nw; i++)
			pf[i] = (struct pollfd){ .fd = wfds[i].fd, .events = (short)wfds[i].events };
		if (poll(pf, nw, timeout_ms < 10 ? timeout_ms : 10) < 0 && errno != EINTR)
			return -1;
		for (unsigned i = 0; i < nw; i++)
			wfds[i].revents = pf[i].revents;
	}
	int running = 0;
	curl_multi_perform(c->multi, &running);
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(c->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		struct client_req *r = NULL;
		CURLcode rc = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
		if (r)
			finish(c, r, rc);
	}
	int ready = 0;
	nw = 0;
	for (unsigned i = 0; i < nfds; i++) {
		if (fds[i].fd < 0)
			continue;
		short ev = wfds[nw++].revents;
		fds[i].revents = ev;
		if (ev)
			ready++;
	}
	return ready;
}

int client_cut(const struct client_req *r)
{
	return r->transport && r->sink_started && r->status >= 200 && r->status < 300;
}

int client_done(struct client_req *r)
{
	return r->finished;
}

void client_cancel(struct client_req *r)
{
	if (!r->h || r->finished)
		return;
	/* Removing the handle closes its connection: the daemon sees the
	 * client gone (and kills a streamed exec). */
	curl_easy_setopt(r->h, CURLOPT_FORBID_REUSE, 1L);
	curl_multi_remove_handle(r->c->multi, r->h);
	curl_easy_cleanup(r->h);
	r->h = NULL;
	r->finished = 1;
	r->aborted = 1;
	r->c->active--;
}

void client_unpause(struct client_req *r)
{
	if (r->h && !r->finished)
		curl_easy_pause(r->h, CURLPAUSE_CONT);
}

long client_perform(struct client *c, struct client_req *r)
{
	if (client_start(c, r) < 0)
		return 0;
	while (!client_done(r)) {
		if (client_poll(c, NULL, 0, 1000) < 0) {
			client_cancel(r);
			r->aborted = 0;
			fail_early(r, "waiting for sandlotd failed");
			break;
		}
	}
	return r->status;
}

void client_req_free(struct client_req *r)
{
	if (r->h && !r->finished)
		client_cancel(r);
	curl_slist_free_all(r->headers);
	r->headers = NULL;
	json_decref(r->reply);
	r->reply = NULL;
	free(r->json_text);
	r->json_text = NULL;
	free(r->buf);
	r->buf = NULL;
	r->len = r->cap = 0;
	free(r->err_code);
	free(r->err_msg);
	r->err_code = r->err_msg = NULL;
}

/* ---- reporting ---------------------------------------------------------- */

int client_report(struct client *c, const struct client_req *r, const char *what)
{
	const char *msg = r->err_msg ? r->err_msg : "unknown error";
	if (r->transport && r->unreachable) {
		const char *hint = strstr(msg, "ermission denied")
			? "run as root or as a member of the socket's group"
			: "is it running? start it with: sandlotd";
		fprintf(stderr, "sandlot: cannot reach sandlotd at %s: %s (%s)\n", c->host, msg, hint);
		return EXIT_SANDLOT;
	}
	if (r->transport) {
		fprintf(stderr, "sandlot %s: talking to sandlotd at %s: %s\n", c->verb, c->host, msg);
		return EXIT_SANDLOT;
	}
	if (r->status == 401) {
		/* The daemon's message speaks HTTP; say it in the CLI's terms. */
		if (c->auth)
			fprintf(stderr, "sandlot %s: sandlotd at %s refused the token (check "
				"SANDLOT_TOKEN, SANDLOT_TOKEN_FILE or --token-file)\n", c->verb, c->host);
		else
			fprintf(stderr, "sandlot %s: sandlotd at %s needs a token: set SANDLOT_TOKEN "
				"or use --token-file\n", c->verb, c->host);
		return 1;
	}
	/* No "sb-x: sandbox sb-x has ended": the context only when the
	 * daemon's message does not name it already. */
	if (what && strstr(msg, what))
		what = NULL;
	fprintf(stderr, "sandlot %s: %s%s%s\n", c->verb, what ? what : "", what ? ": " : "", msg);
	return 1;
}

/* ---- helpers ------------------------------------------------------------ */

char *client_escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, (int)strlen(s));
	if (!e)
		return NULL;
	char *copy = strdup(e);
	curl_free(e);
	return copy;
}

const char *client_str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

int client_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- NDJSON lines, signals ------------------------------------------------- */

int client_signalfd(void)
{
	signal(SIGPIPE, SIG_IGN);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	return signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
}

int client_take_signal(int sigfd)
{
	struct signalfd_siginfo si;
	if (read(sigfd, &si, sizeof(si)) == sizeof(si))
		return (int)si.ssi_signo;
	return 0;
}
