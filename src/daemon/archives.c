/* Archives: moving a paused sandbox between nodes through a store
 * (archives.h has the layout, the protocol and the errors).
 *
 * Two stores behind one small interface (get, put, delete of an object
 * by key): a directory (file://), and S3 through libcurl, which signs
 * every request with SigV4 itself (CURLOPT_AWS_SIGV4).  libcurl 7.88
 * (Debian 12) does not add the x-amz-content-sha256 header S3 wants, so
 * every request carries it: the sha256 of the body we send (known: the
 * workspace's tar is hashed before the upload), or of the empty body.
 *
 * Integrity: meta.json records the tar's size and sha256; a download is
 * hashed as it is written to a temporary file and compared before a byte
 * of it is unpacked (archive_corrupt otherwise).
 *
 * Fencing (archives.h): the generation of every sandbox this node archived
 * or restored is in the registry database (table `archives`), with the
 * node it moved to once it is fenced.  owner.json in the store is the
 * authority; this node's copy is current only while owner.json names this
 * data directory's instance and this generation.
 *
 * Concurrency: an archive or a restore of one sandbox holds its
 * s->copying (no resume or snapshot copy meanwhile); two nodes restoring
 * the same sandbox at once both claim owner.json, the last writer wins,
 * and the other sees it when it reads owner.json back and backs out.
 * Moves are explicit operations, meant to be made one at a time.
 */
#include "daemon/archives.h"
#include "daemon/archive_parse.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/sbid.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "daemon/http.h"

#define OWNER_MAX (64u << 10)       /* owner.json, meta.json: small objects */
#define CONNECT_TIMEOUT_S 5L
#define STALL_TIMEOUT_S 30L         /* a transfer below 1 byte/s this long fails */
#define SMALL_TIMEOUT_S 30L         /* whole request, small objects */
#define SETTLE_WAIT_MS 30000
#define COPY_BUF (64u << 10)         /* read and write in pieces of this size */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum store_kind { STORE_FILE, STORE_S3 };

struct archives {
	enum store_kind kind;
	char *url;             /* as given, for messages and logs */
	char *base;            /* where keys start: "file:///DIR/" or "s3://BUCKET/PREFIX" */
	char *dir;             /* file:// */
	char *endpoint;        /* s3: scheme://host[:port], no trailing slash */
	char *bucket, *prefix; /* prefix "" or ending in "/" */
	char *region;
	char *userpwd;         /* "KEY:SECRET" */
	char *session_token;
	char *sigv4;           /* "aws:amz:REGION:s3" */
	char instance[33];     /* this data directory's random name (hex) */
	pthread_mutex_t lock;  /* one archive or restore per sandbox id at a time (coarse) */
};

/* ---- small helpers ------------------------------------------------------------- */

static int key_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == '/';
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

/* sha256 (hex) and size of what fd holds from its start; leaves the
 * offset at the end. */
static int hash_fd(int fd, char out[65], uint64_t *size, sandlot_error_t **err)
{
	struct sha256_ctx c;
	sha256_init(&c);
	uint64_t total = 0;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return sandlot__error_errno(err, errno, "rewind the archive file");
	cleanup_free uint8_t *buf = malloc(COPY_BUF);
	if (!buf)
		return sandlot__error(err, ENOMEM, "out of memory");
	for (;;) {
		ssize_t n = read(fd, buf, COPY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sandlot__error_errno(err, errno, "read the archive file");
		if (n == 0)
			break;
		sha256_update(&c, (size_t)n, buf);
		total += (uint64_t)n;
	}
	uint8_t d[SHA256_DIGEST_SIZE];
	sha256_digest(&c, sizeof(d), d);
	hex(d, sizeof(d), out);
	*size = total;
	return 0;
}

static void sha256_hex(const void *data, size_t len, char out[65])
{
	struct sha256_ctx c;
	sha256_init(&c);
	sha256_update(&c, len, data);
	uint8_t d[SHA256_DIGEST_SIZE];
	sha256_digest(&c, sizeof(d), d);
	hex(d, sizeof(d), out);
}

/* An unlinked temporary file under the data directory (never /tmp: a
 * workspace can be large). */
static int temp_file(struct daemon *d, sandlot_error_t **err)
{
	char dir[4200];
	if (snprintf(dir, sizeof(dir), "%s/archive-tmp", d->cfg.data_dir) >= (int)sizeof(dir))
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	if (sandlot__mkdir_p(dir, 0700) < 0)
		return sandlot__error_errno(err, errno, "create %s", dir);
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "create a temporary file in %s", dir);
	return fd;
}

/* ---- the directory store ----------------------------------------------------------- */

static int file_path(struct archives *a, const char *key, char *out, size_t n,
		     sandlot_error_t **err)
{
	if (snprintf(out, n, "%s/%s", a->dir, key) >= (int)n)
		return sandlot__error(err, ENAMETOOLONG, "archive path too long");
	return 0;
}

/* The store's root must exist: an unmounted NFS share must not look like
 * an empty store. */
static int file_root_ok(struct archives *a, sandlot_error_t **err)
{
	struct stat st;
	if (stat(a->dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return sandlot__error(err, ARCHIVE_EUNAVAILABLE,
				      "archive store %s is unavailable: directory %s: %s", a->url, a->dir,
				      errno ? strerror(errno) : "not a directory");
	return 0;
}

static int file_errno(struct archives *a, int e, const char *what, const char *key,
		      sandlot_error_t **err)
{
	if (e == EACCES || e == EPERM || e == EROFS)
		return sandlot__error(err, ARCHIVE_EREFUSED, "archive store %s refused to %s %s: %s",
				      a->url, what, key, strerror(e));
	return sandlot__error(err, e, "archive store %s: %s %s: %s", a->url, what, key, strerror(e));
}

static int file_put(struct archives *a, const char *key, int fd, const void *mem, size_t len,
		    sandlot_error_t **err)
{
	if (file_root_ok(a, err) < 0)
		return -1;
	char path[4400], tmp[4500];
	if (file_path(a, key, path, sizeof(path), err) < 0)
		return -1;
	char *slash = strrchr(path, '/');
	*slash = '\0';
	int mk = sandlot__mkdir_p(path, 0755);
	int mk_errno = errno;
	*slash = '/';
	if (mk < 0)
		return file_errno(a, mk_errno, "create the directory of", key, err);
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d-%lx", path, (int)getpid(),
		 (unsigned long)pthread_self());
	cleanup_close int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out < 0)
		return file_errno(a, errno, "write", key, err);
	int rc = 0;
	if (fd >= 0) {
		if (lseek(fd, 0, SEEK_SET) < 0)
			rc = -errno;
		cleanup_free char *buf = malloc(COPY_BUF);
		if (!buf)
			rc = -ENOMEM;
		for (;;) {
			if (rc)
				break;
			ssize_t n = read(fd, buf, COPY_BUF);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				rc = n < 0 ? -errno : 0;
				break;
			}
			if (sandlot__write_all(out, buf, (size_t)n) < 0)
				rc = -errno;
		}
	} else if (sandlot__write_all(out, mem, len) < 0) {
		rc = -errno;
	}
	if (rc == 0 && fsync(out) < 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return file_errno(a, -rc, "write", key, err);
	}
	return 0;
}

/* Into fd (its offset at the end) or, with mem, a new NUL-terminated
 * buffer of at most max bytes. */
static int file_get(struct archives *a, const char *key, int fd, char **mem, size_t *len,
		    size_t max, sandlot_error_t **err)
{
	if (file_root_ok(a, err) < 0)
		return -1;
	char path[4400];
	if (file_path(a, key, path, sizeof(path), err) < 0)
		return -1;
	cleanup_close int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0 && errno == ENOENT)
		return sandlot__error(err, ENOENT, "archive store %s has no %s", a->url, key);
	if (in < 0)
		return file_errno(a, errno, "read", key, err);
	if (mem) {
		struct stat st;
		if (fstat(in, &st) < 0)
			return file_errno(a, errno, "read", key, err);
		if ((uint64_t)st.st_size > max)
			return sandlot__error(err, ARCHIVE_ECORRUPT, "archive store %s: %s is too big "
					      "(%lld bytes)", a->url, key, (long long)st.st_size);
		char *b = malloc((size_t)st.st_size + 1);
		if (!b)
			return sandlot__error(err, ENOMEM, "out of memory");
		size_t got = 0;
		while (got < (size_t)st.st_size) {
			ssize_t n = read(in, b + got, (size_t)st.st_size - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				int e = errno;
				free(b);
				return file_errno(a, e, "read", key, err);
			}
			if (n == 0)
				break;
			got += (size_t)n;
		}
		b[got] = '\0';
		*mem = b;
		*len = got;
		return 0;
	}
	cleanup_free char *buf = malloc(COPY_BUF);
	if (!buf)
		return sandlot__error(err, ENOMEM, "out of memory");
	for (;;) {
		ssize_t n = read(in, buf, COPY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return file_errno(a, errno, "read", key, err);
		if (n == 0)
			return 0;
		if (sandlot__write_all(fd, buf, (size_t)n) < 0)
			return sandlot__error_errno(err, errno, "write a temporary file");
	}
}

static int file_del(struct archives *a, const char *key, sandlot_error_t **err)
{
	char path[4400];
	if (file_path(a, key, path, sizeof(path), err) < 0)
		return -1;
	if (unlink(path) < 0 && errno != ENOENT)
		return file_errno(a, errno, "delete", key, err);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	rmdir(path); /* a generation's directory, once empty */
	return 0;
}

/* ---- the S3 store ----------------------------------------------------------------- */

struct s3_io {
	int in_fd;              /* upload source, or -1 */
	const char *mem;        /* or this buffer */
	size_t mem_len, mem_off;
	int out_fd;             /* download target, or -1 */
	char *body;             /* else the answer (bounded), NUL-terminated */
	size_t body_len, body_max;
	int write_errno;
};

static size_t s3_read(char *buf, size_t size, size_t n, void *p)
{
	struct s3_io *io = p;
	size_t want = size * n;
	if (io->in_fd >= 0) {
		for (;;) {
			ssize_t r = read(io->in_fd, buf, want);
			if (r < 0 && errno == EINTR)
				continue;
			return r < 0 ? CURL_READFUNC_ABORT : (size_t)r;
		}
	}
	size_t left = io->mem_len - io->mem_off;
	size_t take = left < want ? left : want;
	memcpy(buf, io->mem + io->mem_off, take);
	io->mem_off += take;
	return take;
}

static size_t s3_write(char *buf, size_t size, size_t n, void *p)
{
	struct s3_io *io = p;
	size_t got = size * n;
	if (io->out_fd >= 0) {
		if (sandlot__write_all(io->out_fd, buf, got) < 0) {
			io->write_errno = errno;
			return 0;
		}
		return got;
	}
	if (io->body_len + got > io->body_max) {
		io->write_errno = EFBIG;
		return 0;
	}
	char *b = realloc(io->body, io->body_len + got + 1);
	if (!b) {
		io->write_errno = ENOMEM;
		return 0;
	}
	memcpy(b + io->body_len, buf, got);
	io->body = b;
	io->body_len += got;
	b[io->body_len] = '\0';
	return got;
}

/* One request.  method "GET", "PUT" or "DELETE"; for PUT the body is
 * in_fd (of in_len bytes, from its start) or mem/len, sha its sha256 hex;
 * for GET the answer goes to out_fd, or into *mem (at most max bytes). */
static int s3_request(struct archives *a, const char *method, const char *key, int in_fd,
		      uint64_t in_len, const char *in_mem, size_t in_mem_len, const char *sha,
		      int out_fd, char **mem, size_t *len, size_t max, sandlot_error_t **err)
{
	CURL *c = curl_easy_init();
	if (!c)
		return sandlot__error(err, ENOMEM, "out of memory (curl)");
	char url[6000];
	snprintf(url, sizeof(url), "%s/%s/%s%s", a->endpoint, a->bucket, a->prefix, key);
	struct s3_io io = { .in_fd = in_fd, .mem = in_mem, .mem_len = in_mem_len, .out_fd = out_fd,
			    .body_max = mem ? max : 64u << 10 };
	char h_sha[128];
	snprintf(h_sha, sizeof(h_sha), "x-amz-content-sha256: %s", sha ? sha : EMPTY_SHA256);
	struct curl_slist *hdrs = curl_slist_append(NULL, h_sha);
	char *h_tok = NULL;
	if (a->session_token && asprintf(&h_tok, "x-amz-security-token: %s", a->session_token) > 0)
		hdrs = curl_slist_append(hdrs, h_tok);
	hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_AWS_SIGV4, a->sigv4);
	curl_easy_setopt(c, CURLOPT_USERPWD, a->userpwd);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, STALL_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s3_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &io);
	if (strcmp(method, "PUT") == 0) {
		if (in_fd >= 0 && lseek(in_fd, 0, SEEK_SET) < 0) {
			curl_slist_free_all(hdrs);
			free(h_tok);
			curl_easy_cleanup(c);
			return sandlot__error_errno(err, errno, "rewind the archive file");
		}
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, s3_read);
		curl_easy_setopt(c, CURLOPT_READDATA, &io);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(in_fd >= 0 ? in_len : in_mem_len));
	} else if (strcmp(method, "DELETE") == 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	if (in_fd < 0 && out_fd < 0)
		curl_easy_setopt(c, CURLOPT_TIMEOUT, SMALL_TIMEOUT_S);
	CURLcode cr = curl_easy_perform(c);
	long http = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
	curl_slist_free_all(hdrs);
	free(h_tok);
	curl_easy_cleanup(c);

	int rc = 0;
	char code[64];
	archive__s3_code(http >= 300 ? io.body : NULL, io.body_len, code, sizeof(code));
	if (cr != CURLE_OK && !(cr == CURLE_WRITE_ERROR && http >= 300)) {
		if (io.write_errno == EFBIG)
			rc = sandlot__error(err, ARCHIVE_ECORRUPT, "archive store %s: %s is too big",
					    a->url, key);
		else if (io.write_errno)
			rc = sandlot__error(err, io.write_errno, "write a temporary file: %s",
					    strerror(io.write_errno));
		else
			rc = sandlot__error(err, ARCHIVE_EUNAVAILABLE,
					    "archive store %s is unavailable: %s %s: %s", a->url,
					    method, key, curl_easy_strerror(cr));
	} else if (http == 404) {
		rc = sandlot__error(err, ENOENT, "archive store %s has no %s", a->url, key);
	} else if (http == 401 || http == 403) {
		rc = sandlot__error(err, ARCHIVE_EREFUSED,
				    "archive store %s refused %s %s (HTTP %ld%s%s): check the "
				    "credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the "
				    "bucket's permissions", a->url, method, key, http, code[0] ? " " : "",
				    code);
	} else if (http >= 500) {
		rc = sandlot__error(err, ARCHIVE_EUNAVAILABLE,
				    "archive store %s is unavailable: %s %s answered HTTP %ld%s%s",
				    a->url, method, key, http, code[0] ? " " : "", code);
	} else if (http < 200 || http >= 300) {
		rc = sandlot__error(err, EIO, "archive store %s: %s %s answered HTTP %ld%s%s", a->url,
				    method, key, http, code[0] ? " " : "", code);
	}
	if (rc == 0 && mem) {
		*mem = io.body ? io.body : strdup("");
		*len = io.body_len;
		io.body = NULL;
		if (!*mem)
			rc = sandlot__error(err, ENOMEM, "out of memory");
	}
	free(io.body);
	return rc;
}

/* ---- the store's interface ----------------------------------------------------------- */

static int store_put_fd(struct archives *a, const char *key, int fd, uint64_t len, const char *sha,
			sandlot_error_t **err)
{
	if (a->kind == STORE_FILE)
		return file_put(a, key, fd, NULL, 0, err);
	return s3_request(a, "PUT", key, fd, len, NULL, 0, sha, -1, NULL, NULL, 0, err);
}

static int store_put_json(struct archives *a, const char *key, json_t *j, sandlot_error_t **err)
{
	char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text)
		return sandlot__error(err, ENOMEM, "out of memory");
	size_t len = strlen(text);
	int rc;
	if (a->kind == STORE_FILE) {
		rc = file_put(a, key, -1, text, len, err);
	} else {
		char sha[65];
		sha256_hex(text, len, sha);
		rc = s3_request(a, "PUT", key, -1, 0, text, len, sha, -1, NULL, NULL, 0, err);
	}
	free(text);
	return rc;
}

static int store_get_fd(struct archives *a, const char *key, int fd, sandlot_error_t **err)
{
	if (a->kind == STORE_FILE)
		return file_get(a, key, fd, NULL, NULL, 0, err);
	return s3_request(a, "GET", key, -1, 0, NULL, 0, NULL, fd, NULL, NULL, 0, err);
}

/* A small object's text (NUL-terminated, to free), or NULL with err
 * (ENOENT when there is none). */
static char *store_get_text(struct archives *a, const char *key, size_t *len,
			    sandlot_error_t **err)
{
	char *text = NULL;
	int rc = a->kind == STORE_FILE
			 ? file_get(a, key, -1, &text, len, OWNER_MAX, err)
			 : s3_request(a, "GET", key, -1, 0, NULL, 0, NULL, -1, &text, len, OWNER_MAX,
				      err);
	return rc < 0 ? NULL : text;
}

static int store_del(struct archives *a, const char *key, sandlot_error_t **err)
{
	if (a->kind == STORE_FILE)
		return file_del(a, key, err);
	return s3_request(a, "DELETE", key, -1, 0, NULL, 0, NULL, -1, NULL, NULL, 0, err);
}

/* ---- configuration ----------------------------------------------------------------- */

/* The value of query parameter `name` in q ("a=1&b=2"), a new string or
 * NULL. */
static char *query_param(const char *q, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = q; p && *p;) {
		const char *end = strchr(p, '&');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len > n && strncmp(p, name, n) == 0 && p[n] == '=')
			return strndup(p + n + 1, len - n - 1);
		p = end ? end + 1 : NULL;
	}
	return NULL;
}

static int query_known(const char *q, sandlot_error_t **err)
{
	static const char *const known[] = { "endpoint", "region" };
	for (const char *p = q; p && *p;) {
		const char *end = strchr(p, '&');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int ok = 0;
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(known); i++) {
			size_t k = strlen(known[i]);
			ok |= len > k && strncmp(p, known[i], k) == 0 && p[k] == '=';
		}
		if (!ok)
			return sandlot__error(err, EINVAL, "--archive: unknown parameter \"%.*s\" "
					      "(known: endpoint, region)", (int)len, p);
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static int configure_s3(struct archives *a, const char *rest, sandlot_error_t **err)
{
	const char *q = strchr(rest, '?');
	size_t path_len = q ? (size_t)(q - rest) : strlen(rest);
	if (q && query_known(q + 1, err) < 0)
		return -1;
	const char *slash = memchr(rest, '/', path_len);
	size_t blen = slash ? (size_t)(slash - rest) : path_len;
	if (blen == 0 || blen > 63)
		return sandlot__error(err, EINVAL, "--archive s3://BUCKET[/PREFIX]: missing or too "
				      "long bucket name");
	a->bucket = strndup(rest, blen);
	const char *pfx = slash ? slash + 1 : rest + path_len;
	size_t plen = slash ? path_len - blen - 1 : 0;
	while (plen && pfx[plen - 1] == '/')
		plen--;
	for (size_t i = 0; i < blen; i++)
		if (!key_char_ok(rest[i]) || rest[i] == '/')
			return sandlot__error(err, EINVAL, "--archive: invalid bucket name \"%s\"",
					      a->bucket);
	for (size_t i = 0; i < plen; i++)
		if (!key_char_ok(pfx[i]))
			return sandlot__error(err, EINVAL, "--archive: the prefix may only have "
					      "[A-Za-z0-9._/-]");
	if (asprintf(&a->prefix, "%.*s%s", (int)plen, pfx, plen ? "/" : "") < 0)
		return sandlot__error(err, ENOMEM, "out of memory");
	a->region = q ? query_param(q + 1, "region") : NULL;
	if (!a->region)
		a->region = strdup("us-east-1");
	char *ep = q ? query_param(q + 1, "endpoint") : NULL;
	if (ep) {
		if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) {
			free(ep);
			return sandlot__error(err, EINVAL, "--archive: endpoint must be an http:// or "
					      "https:// URL");
		}
		size_t n = strlen(ep);
		while (n && ep[n - 1] == '/')
			ep[--n] = '\0';
		a->endpoint = ep;
	} else if (asprintf(&a->endpoint, "https://s3.%s.amazonaws.com", a->region) < 0) {
		return sandlot__error(err, ENOMEM, "out of memory");
	}
	for (const char *p = a->region; *p; p++)
		if (!key_char_ok(*p) || *p == '/')
			return sandlot__error(err, EINVAL, "--archive: invalid region");
	const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
	if (!key || !*key || !secret || !*secret)
		return sandlot__error(err, EINVAL, "--archive %s: set AWS_ACCESS_KEY_ID and "
				      "AWS_SECRET_ACCESS_KEY in sandlotd's environment", a->url);
	if (strchr(key, ':'))
		return sandlot__error(err, EINVAL, "AWS_ACCESS_KEY_ID must not contain ':'");
	const char *tok = getenv("AWS_SESSION_TOKEN");
	if (tok && *tok)
		a->session_token = strdup(tok);
	if (asprintf(&a->userpwd, "%s:%s", key, secret) < 0 ||
	    asprintf(&a->sigv4, "aws:amz:%s:s3", a->region) < 0)
		return sandlot__error(err, ENOMEM, "out of memory");
	return 0;
}

int archive_configure(struct daemon *d, const char *url, sandlot_error_t **err)
{
	struct archives *a = calloc(1, sizeof(*a));
	if (!a)
		return sandlot__error(err, ENOMEM, "out of memory");
	pthread_mutex_init(&a->lock, NULL);
	a->url = strdup(url);
	int rc;
	if (strncmp(url, "file://", 7) == 0) {
		a->kind = STORE_FILE;
		const char *p = url + 7;
		size_t n = strlen(p);
		while (n > 1 && p[n - 1] == '/')
			n--;
		if (p[0] != '/' || n < 2)
			rc = sandlot__error(err, EINVAL, "--archive file:///DIR: an absolute "
					    "directory is needed (got \"%s\")", url);
		else if (!(a->dir = strndup(p, n)))
			rc = sandlot__error(err, ENOMEM, "out of memory");
		else
			rc = 0;
	} else if (strncmp(url, "s3://", 5) == 0) {
		a->kind = STORE_S3;
		rc = configure_s3(a, url + 5, err);
		if (rc == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			rc = sandlot__error(err, EIO, "libcurl did not initialise");
	} else {
		rc = sandlot__error(err, EINVAL, "--archive \"%s\": expected file:///DIR or "
				    "s3://BUCKET[/PREFIX][?endpoint=URL&region=R]", url);
	}
	if (rc == 0 && a->kind == STORE_FILE && asprintf(&a->base, "file://%s/", a->dir) < 0)
		rc = sandlot__error(err, ENOMEM, "out of memory");
	if (rc == 0 && a->kind == STORE_S3 && asprintf(&a->base, "s3://%s/%s", a->bucket, a->prefix) < 0)
		rc = sandlot__error(err, ENOMEM, "out of memory");
	d->archives = a;
	if (rc < 0) {
		archive_free(d);
		return -1;
	}
	return 0;
}

void archive_free(struct daemon *d)
{
	struct archives *a = d->archives;
	if (!a)
		return;
	if (a->kind == STORE_S3 && a->sigv4)
		curl_global_cleanup();
	if (a->userpwd)
		explicit_bzero(a->userpwd, strlen(a->userpwd));
	free(a->url);
	free(a->base);
	free(a->dir);
	free(a->endpoint);
	free(a->bucket);
	free(a->prefix);
	free(a->region);
	free(a->userpwd);
	free(a->session_token);
	free(a->sigv4);
	pthread_mutex_destroy(&a->lock);
	free(a);
	d->archives = NULL;
}

static char host_name[256];

static void host_name_init(void)
{
	if (gethostname(host_name, sizeof(host_name) - 1) < 0 || !host_name[0])
		snprintf(host_name, sizeof(host_name), "localhost");
}

const char *archive_node_name(struct daemon *d)
{
	const char *node = sandlot__node_id(); /* --node-id */
	(void)d;
	if (node)
		return node;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, host_name_init);
	return host_name;
}

/* ---- the archives table --------------------------------------------------------------- */

static int db_exec(struct daemon *d, const char *sql)
{
	char *msg = NULL;
	pthread_mutex_lock(&d->db_lock);
	int rc = sqlite3_exec(d->db, sql, NULL, NULL, &msg);
	pthread_mutex_unlock(&d->db_lock);
	if (rc != SQLITE_OK) {
		daemon_log("archive_db_error", "level=error msg=\"%s\"", msg ? msg : "?");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

/* generation and moved_to of id (moved_to: a new string or NULL). */
static uint64_t db_get(struct daemon *d, const char *id, char **moved_to)
{
	if (moved_to)
		*moved_to = NULL;
	uint64_t gen = 0;
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db, "SELECT generation, moved_to FROM archives WHERE id = ?1", -1,
			       &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) == SQLITE_ROW) {
			gen = (uint64_t)sqlite3_column_int64(st, 0);
			const char *m = (const char *)sqlite3_column_text(st, 1);
			if (moved_to && m)
				*moved_to = strdup(m);
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return gen;
}

static int db_set(struct daemon *d, const char *id, uint64_t gen, const char *moved_to)
{
	int rc = -1;
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db,
			       "INSERT INTO archives (id, generation, moved_to) VALUES (?1, ?2, ?3)"
			       " ON CONFLICT(id) DO UPDATE SET generation = ?2, moved_to = ?3",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)gen);
		if (moved_to)
			sqlite3_bind_text(st, 3, moved_to, -1, SQLITE_TRANSIENT);
		else
			sqlite3_bind_null(st, 3);
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
	}
	if (rc < 0)
		daemon_log("archive_db_error", "level=error sandbox=%s msg=\"%s\"", id,
			   sqlite3_errmsg(d->db));
	sqlite3_finalize(st);
	pthread_mutex_unlock(&d->db_lock);
	return rc;
}

uint64_t archive_generation(struct daemon *d, const char *id)
{
	return d->db ? db_get(d, id, NULL) : 0;
}

int archive_moved_error(struct daemon *d, const char *id, sandlot_error_t **err)
{
	if (!d->db)
		return 0;
	char *to = NULL;
	uint64_t gen = db_get(d, id, &to);
	if (!to)
		return 0;
	sandlot__error(err, ARCHIVE_EMOVED, "sandbox %s has moved to node %s (archive generation "
		       "%llu); this node no longer holds it", id, to, (unsigned long long)gen);
	sandlot__error_detail(err, "node", to);
	free(to);
	return 1;
}

#define MOVED_PREFIX "moved to node "

int archive_moved_reason(const char *id, const char *end_reason, sandlot_error_t **err)
{
	if (!end_reason || strncmp(end_reason, MOVED_PREFIX, strlen(MOVED_PREFIX)) != 0)
		return 0;
	const char *node = end_reason + strlen(MOVED_PREFIX);
	size_t n = strcspn(node, " ");
	sandlot__error(err, ARCHIVE_EMOVED, "sandbox %s has %s; this node no longer holds it", id,
		       end_reason);
	char *copy = strndup(node, n);
	sandlot__error_detail(err, "node", copy);
	free(copy);
	return 1;
}

/* ---- keys, owner.json -------------------------------------------------------------------- */

static void key_of(char *out, size_t n, const char *id, uint64_t gen, const char *name)
{
	if (gen)
		snprintf(out, n, "sandboxes/%s/%llu/%s", id, (unsigned long long)gen, name);
	else
		snprintf(out, n, "sandboxes/%s/%s", id, name);
}

/* owner.json of id: 1 with o filled, 0 when there is none, -1 with err.
 * (*j is set to NULL: the parsed fields are copies.) */
static int owner_get(struct archives *a, const char *id, json_t **j, struct archive_owner *o,
		     sandlot_error_t **err)
{
	char key[256];
	key_of(key, sizeof(key), id, 0, "owner.json");
	*j = NULL;
	sandlot_error_t *e = NULL;
	size_t len = 0;
	char *text = store_get_text(a, key, &len, &e);
	if (!text) {
		if (sandlot_error_status(e) == ENOENT) {
			sandlot_error_free(e);
			return 0;
		}
		if (err)
			*err = e;
		else
			sandlot_error_free(e);
		return -1;
	}
	int rc = archive__owner_parse(text, len, id, o);
	free(text);
	if (rc < 0)
		return sandlot__error(err, ARCHIVE_ECORRUPT, "archive store %s: %s is not one sandlot "
				      "wrote", a->url, key);
	return 1;
}

static int owner_put(struct daemon *d, const char *id, uint64_t gen, uint64_t archived,
		     const char *state, sandlot_error_t **err)
{
	char key[256];
	key_of(key, sizeof(key), id, 0, "owner.json");
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I}", "sandbox", id, "node",
			      archive_node_name(d), "instance", d->archives->instance, "generation",
			      (json_int_t)gen, "archive_generation", (json_int_t)archived, "state",
			      state, "changed_ms", (json_int_t)daemon_now_ms());
	if (!j)
		return sandlot__error(err, ENOMEM, "out of memory");
	int rc = store_put_json(d->archives, key, j, err);
	json_decref(j);
	return rc;
}

/* ---- fencing ------------------------------------------------------------------------------ */

/* s's copy here is stale (owner.json names `node`, generation `gen`):
 * delete it and remember where it went.  Returns -1 with ARCHIVE_EMOVED. */
static int fence(struct daemon *d, struct dsb *s, const char *node, uint64_t gen,
		 sandlot_error_t **err)
{
	char reason[512];
	snprintf(reason, sizeof(reason), MOVED_PREFIX "%.200s (archive generation %llu)", node,
		 (unsigned long long)gen);
	db_set(d, s->id, gen, node);
	pthread_mutex_lock(&s->lock);
	enum dsb_state st = s->state;
	pthread_mutex_unlock(&s->lock);
	if (dsb_state_live(st)) {
		/* Resumed here meanwhile: it must not go on. */
		dsb_end(d, s, DSB_DELETED, reason);
	} else {
		pthread_mutex_lock(&s->lock);
		if (s->state == DSB_PAUSED) {
			s->state = DSB_DELETED;
			s->ended_ms = daemon_now_ms();
			__atomic_add_fetch(&d->m.sandboxes_ended, 1, __ATOMIC_RELAXED);
		}
		s->paused_ms = 0;
		s->workspace_kept = 0;
		free(s->end_reason);
		s->end_reason = strdup(reason);
		registry_save(d, s);
		pthread_mutex_unlock(&s->lock);
	}
	dsb_changes_release(d, s);
	workspace_remove(d, s->id);
	daemon_log("sandbox_moved", "sandbox=%s node=\"%s\" generation=%llu msg=\"stale copy "
		   "deleted\"", s->id, node, (unsigned long long)gen);
	archive_moved_reason(s->id, reason, err);
	return -1;
}

static int fence_check(struct daemon *d, struct dsb *s, int claim, sandlot_error_t **err)
{
	uint64_t gen = archive_generation(d, s->id);
	if (!gen)
		return 0;
	struct archives *a = d->archives;
	if (!a)
		return sandlot__error(err, ARCHIVE_EUNAVAILABLE,
				      "sandbox %s was archived (generation %llu) and this daemon has "
				      "no --archive store to check that no other node holds it now",
				      s->id, (unsigned long long)gen);
	json_t *j = NULL;
	struct archive_owner o;
	int have = owner_get(a, s->id, &j, &o, err);
	if (have < 0)
		return sandlot__error_wrap(err, "cannot check that sandbox %s has not moved", s->id);
	int rc = 0;
	if (!have) {
		/* The archive was removed from the store: nobody else claims it. */
	} else if (strcmp(o.instance, a->instance) == 0 && o.generation >= gen) {
		if (o.generation > gen)
			db_set(d, s->id, o.generation, NULL);
		/* Resumed here: from now on its archive is not its newest state,
		 * and no other node may take it. */
		if (claim && !o.claimed &&
		    owner_put(d, s->id, o.generation, o.archived, "claimed", err) < 0)
			rc = sandlot__error_wrap(err, "cannot claim sandbox %s in the archive store",
						 s->id);
	} else if (strcmp(o.instance, a->instance) == 0) {
		daemon_log("archive_owner_older", "level=warn sandbox=%s generation=%llu store=%llu",
			   s->id, (unsigned long long)gen, (unsigned long long)o.generation);
	} else {
		rc = fence(d, s, o.node, o.generation, err);
	}
	json_decref(j);
	return rc;
}

int archive_fence_check(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	return fence_check(d, s, 1, err);
}

/* ---- archive ------------------------------------------------------------------------------- */

static int no_store(sandlot_error_t **err)
{
	return sandlot__error(err, ENOTSUP, "this daemon has no archive store: start sandlotd with "
			      "--archive file:///DIR or --archive s3://BUCKET[/PREFIX]");
}

/* Claim s for a copy of its workspace (paused, settled): 0, or -1 with
 * err (running, ended, in transition). */
static int hold_paused(struct daemon *d, struct dsb *s, sandlot_error_t **err)
{
	(void)d;
	pthread_mutex_lock(&s->lock);
	int rc = 0;
	if (dsb_settle_locked(s, 0) < 0) {
		rc = sandlot__error(err, EBUSY, "a pause or resume of sandbox %s is still in progress",
				    s->id);
	} else if (dsb_state_live(s->state)) {
		rc = sandlot__error(err, EBUSY, "sandbox %s is running: pause it first (POST "
				    "/v1/sandboxes/%s/pause), then archive it", s->id, s->id);
	} else if (s->state != DSB_PAUSED) {
		if (!archive_moved_reason(s->id, s->end_reason, err)) {
			sandlot__error(err, DOMAIN_EENDED, "sandbox %s has ended (%s): only a paused "
				       "sandbox can be archived", s->id, dsb_state_name(s->state));
			sandlot__error_detail(err, "state", dsb_state_name(s->state));
		}
		rc = -1;
	} else {
		json_t *iso = json_object_get(s->options, "isolation");
		if (json_is_string(iso) && strcmp(json_string_value(iso), "ns") != 0)
			rc = sandlot__error(err, ENOTSUP, "sandbox %s: archives are of ns sandboxes' "
					    "workspaces; the %s backend's cannot be archived yet", s->id,
					    json_string_value(iso));
		else
			s->copying++;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static void unhold(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	s->copying--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* The options a sandbox keeps across a move: all but env, whose values
 * (often secrets) never go to the store. */
static json_t *portable_options(json_t *options)
{
	json_t *o = json_deep_copy(options);
	if (o)
		json_object_del(o, "env");
	return o;
}

static json_t *write_archive(struct daemon *d, struct dsb *s, uint64_t gen, sandlot_error_t **err)
{
	struct archives *a = d->archives;
	sandlot_options_t so;
	sandlot_options_init(&so);
	so.data_dir = d->cfg.data_dir;
	cleanup_close int fd = temp_file(d, err);
	if (fd < 0)
		return NULL;
	uint64_t t0 = sandlot__now_ns(), disk = 0, bytes = 0;
	char sha[65];
	if (sandlot_workspace_size(&so, s->id, &disk, err) < 0 ||
	    sandlot_workspace_export(&so, s->id, fd, err) < 0 || hash_fd(fd, sha, &bytes, err) < 0)
		return NULL;
	char key[256];
	key_of(key, sizeof(key), s->id, gen, "workspace.tar");
	if (store_put_fd(a, key, fd, bytes, sha, err) < 0)
		return NULL;
	pthread_mutex_lock(&s->lock);
	json_t *meta = json_pack("{s:s, s:I, s:s, s:s, s:s, s:I, s:I, s:o, s:O, s:I, s:I, s:I, s:I, "
				 "s:b, s:I}",
				 "sandbox", s->id, "generation", (json_int_t)gen, "node",
				 archive_node_name(d), "instance", a->instance, "sha256", sha,
				 "bytes", (json_int_t)bytes, "disk_bytes", (json_int_t)disk,
				 "options", portable_options(s->options), "metadata", s->metadata,
				 "created_ms", (json_int_t)s->created_ms, "archived_ms",
				 (json_int_t)daemon_now_ms(), "ttl_seconds", (json_int_t)s->ttl_seconds,
				 "idle_timeout_seconds", (json_int_t)s->idle_timeout_seconds,
				 "auto_resume", s->auto_resume, "paused_retention_seconds",
				 (json_int_t)s->paused_retention_seconds);
	pthread_mutex_unlock(&s->lock);
	if (!meta) {
		sandlot__error(err, ENOMEM, "out of memory");
		return NULL;
	}
	key_of(key, sizeof(key), s->id, gen, "meta.json");
	if (store_put_json(a, key, meta, err) < 0 || owner_put(d, s->id, gen, gen, "archived", err) < 0) {
		json_decref(meta);
		return NULL;
	}
	db_set(d, s->id, gen, NULL);
	char url[600];
	key_of(key, sizeof(key), s->id, gen, "workspace.tar");
	snprintf(url, sizeof(url), "%s%s", a->base, key);
	json_t *out = json_pack("{s:I, s:s, s:I, s:s, s:s}", "generation", (json_int_t)gen, "sha256",
				sha, "bytes", (json_int_t)bytes, "url", url, "node",
				archive_node_name(d));
	json_decref(meta);
	daemon_log("archived", "sandbox=%s generation=%llu bytes=%llu ms=%.1f", s->id,
		   (unsigned long long)gen, (unsigned long long)bytes,
		   (double)(sandlot__now_ns() - t0) / 1e6);
	return out;
}

/* Best effort: the objects of a generation no node needs any more. */
static void drop_generation(struct archives *a, const char *id, uint64_t gen)
{
	static const char *const names[] = { "workspace.tar", "meta.json" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(names); i++) {
		char key[256];
		key_of(key, sizeof(key), id, gen, names[i]);
		sandlot_error_t *e = NULL;
		if (store_del(a, key, &e) < 0 && sandlot_error_status(e) != ENOENT)
			daemon_log("archive_cleanup_failed", "level=warn key=\"%s\"", key);
		sandlot_error_free(e);
	}
}

json_t *domain_sandbox_archive(struct daemon *d, const char *id, sandlot_error_t **err)
{
	struct archives *a = d->archives;
	if (!a) {
		no_store(err);
		return NULL;
	}
	struct dsb *s = domain_sandbox_find(d, id, err);
	if (!s)
		return NULL;
	json_t *out = NULL, *j = NULL;
	if (hold_paused(d, s, err) < 0) {
		dsb_release(d, s);
		return NULL;
	}
	pthread_mutex_lock(&a->lock);
	uint64_t mine = archive_generation(d, id);
	struct archive_owner o;
	int have = mine ? 0 : owner_get(a, id, &j, &o, err);
	if (have < 0)
		goto out;
	if (have) {
		/* Never archived from here, yet the store has it. */
		sandlot__error(err, EEXIST, "archive store %s already holds sandbox %s (node %s, "
			       "generation %llu); this node never archived it", a->url, id, o.node,
			       (unsigned long long)o.generation);
		goto out;
	}
	uint64_t prev = mine, prev_archived = 0;
	if (mine) {
		unhold(s); /* the check may fence it */
		int rc = fence_check(d, s, 0, err);
		if (rc == 0 && hold_paused(d, s, err) < 0)
			goto out_unheld;
		if (rc < 0)
			goto out_unheld;
		prev = archive_generation(d, id);
		have = owner_get(a, id, &j, &o, err);
		if (have < 0)
			goto out;
		if (have) {
			prev = o.generation > prev ? o.generation : prev;
			prev_archived = o.archived;
		}
	}
	json_t *info = write_archive(d, s, prev + 1, err);
	if (info) {
		if (prev_archived)
			drop_generation(a, id, prev_archived);
		out = dsb_to_json(s);
		json_object_set_new(out, "archive", info);
	}
out:
	unhold(s);
out_unheld:
	pthread_mutex_unlock(&a->lock);
	json_decref(j);
	dsb_release(d, s);
	return out;
}

/* ---- restore --------------------------------------------------------------------------------- */

static uint32_t u32_of(json_t *m, const char *k)
{
	json_t *v = json_object_get(m, k);
	return json_is_integer(v) && json_integer_value(v) >= 0 &&
			       json_integer_value(v) <= UINT32_MAX
		       ? (uint32_t)json_integer_value(v)
		       : 0;
}

/* Make s (new, or an ended one of this id) the paused sandbox meta
 * describes, its workspace in place. */
static void install(struct daemon *d, struct dsb *s, json_t *m, int is_new)
{
	int64_t now = daemon_now_ms();
	if (!is_new)
		registry_forget(d, s->id); /* the row of its former life */
	pthread_mutex_lock(&s->lock);
	s->state = DSB_PAUSED;
	json_t *c = json_object_get(m, "created_ms");
	s->created_ms = json_is_integer(c) ? json_integer_value(c) : now;
	s->ended_ms = 0;
	s->expires_ms = 0;
	s->last_active_ms = now;
	s->paused_ms = now;
	s->ttl_seconds = u32_of(m, "ttl_seconds");
	s->idle_timeout_seconds = u32_of(m, "idle_timeout_seconds");
	s->auto_resume = json_is_true(json_object_get(m, "auto_resume"));
	s->paused_retention_seconds = u32_of(m, "paused_retention_seconds");
	free(s->end_reason);
	s->end_reason = NULL;
	json_decref(s->options);
	s->options = json_deep_copy(json_object_get(m, "options"));
	json_t *md = json_object_get(m, "metadata");
	json_decref(s->metadata);
	s->metadata = json_is_object(md) ? json_deep_copy(md) : json_object();
	s->has_workspace = 1;
	s->workspace_kept = 1;
	ports_load_locked(s);
	registry_save(d, s);
	pthread_mutex_unlock(&s->lock);
	if (is_new)
		dsb_table_add(d, s);
}

/* Bring sandbox id from the store into this node, paused.  0, or -1 with
 * err and nothing of it left here. */
static int restore(struct daemon *d, const char *id, struct dsb *old, sandlot_error_t **err)
{
	struct archives *a = d->archives;
	json_t *oj = NULL, *m = NULL;
	struct archive_owner o;
	int imported = 0, rc = -1;
	cleanup_close int fd = -1;
	int have = owner_get(a, id, &oj, &o, err);
	if (have == 0)
		sandlot__error(err, ENOENT, "archive store %s has no archive of sandbox %s", a->url,
			       id);
	if (have <= 0)
		return -1;
	if (strcmp(o.instance, a->instance) != 0 && o.claimed) {
		sandlot__error(err, EBUSY, "sandbox %s is held by node %s, which resumed it after its "
			       "archive (generation %llu): pause and archive it there first", id,
			       o.node, (unsigned long long)o.archived);
		sandlot__error_detail(err, "node", o.node);
		json_decref(oj);
		return -1;
	}
	uint64_t gen = o.archived, t0 = sandlot__now_ns();
	char key[256];
	key_of(key, sizeof(key), id, gen, "meta.json");
	size_t mlen = 0;
	char *mtext = store_get_text(a, key, &mlen, err);
	if (!mtext)
		goto out;
	m = archive__meta_parse(mtext, mlen, id, gen);
	free(mtext);
	if (!m) {
		sandlot__error(err, ARCHIVE_ECORRUPT, "archive store %s: the meta.json of sandbox %s "
			       "generation %llu is not one sandlot wrote", a->url, id,
			       (unsigned long long)gen);
		goto out;
	}
	if ((fd = temp_file(d, err)) < 0)
		goto out;
	key_of(key, sizeof(key), id, gen, "workspace.tar");
	if (store_get_fd(a, key, fd, err) < 0)
		goto out;
	char sha[65];
	uint64_t bytes;
	if (hash_fd(fd, sha, &bytes, err) < 0)
		goto out;
	const char *want = json_string_value(json_object_get(m, "sha256"));
	uint64_t want_bytes = (uint64_t)json_integer_value(json_object_get(m, "bytes"));
	if (bytes != want_bytes || strcmp(sha, want) != 0) {
		sandlot__error(err, ARCHIVE_ECORRUPT, "the archive of sandbox %s (generation %llu) "
			       "is corrupt: %llu bytes with sha256 %s, meta.json says %llu bytes "
			       "with sha256 %s", id, (unsigned long long)gen,
			       (unsigned long long)bytes, sha, (unsigned long long)want_bytes, want);
		goto out;
	}
	if (old && workspace_exists(d, id))
		workspace_remove(d, id); /* an ended sandbox's kept files: the archive is newer */
	sandlot_options_t so;
	sandlot_options_init(&so);
	so.data_dir = d->cfg.data_dir;
	so.disk_overcommit = d->cfg.disk_overcommit;
	if (lseek(fd, 0, SEEK_SET) < 0) {
		sandlot__error_errno(err, errno, "rewind the archive file");
		goto out;
	}
	uint64_t disk = (uint64_t)json_integer_value(json_object_get(m, "disk_bytes"));
	sandlot_error_t *ie = NULL;
	if (sandlot_workspace_import_tar(&so, id, disk, fd, &ie) < 0) {
		/* tar refused what the archive holds (a member outside home/ and
		 * tmp/, "..", a link out): not an archive sandlot wrote. */
		if (sandlot_error_status(ie) == EIO)
			sandlot__error(err, ARCHIVE_ECORRUPT, "the archive of sandbox %s (generation "
				       "%llu) does not unpack: %s", id, (unsigned long long)gen,
				       sandlot_error_message(ie));
		else if (err)
			*err = ie, ie = NULL;
		sandlot_error_free(ie);
		goto out;
	}
	imported = 1;
	/* Claim it, then read the claim back: of two nodes restoring at once,
	 * the one whose claim did not stick backs out. */
	json_t *cj = NULL;
	struct archive_owner c;
	uint64_t claim = o.generation + 1;
	int back = -1;
	if (owner_put(d, id, claim, gen, "claimed", err) < 0 ||
	    (back = owner_get(a, id, &cj, &c, err)) < 0)
		goto out;
	int won = back == 1 && strcmp(c.instance, a->instance) == 0 && c.generation == claim;
	json_decref(cj);
	if (!won) {
		sandlot__error(err, EBUSY, "another node claimed sandbox %s at the same time", id);
		goto out;
	}
	db_set(d, id, claim, NULL);
	struct dsb *s = old ? old : dsb_alloc(id);
	if (!s) {
		sandlot__error(err, ENOMEM, "out of memory");
		goto out;
	}
	install(d, s, m, !old);
	daemon_log("restored", "sandbox=%s generation=%llu from_node=\"%s\" bytes=%llu ms=%.1f", id,
		   (unsigned long long)gen, o.node, (unsigned long long)bytes,
		   (double)(sandlot__now_ns() - t0) / 1e6);
	rc = 0;
out:
	if (rc < 0 && imported)
		workspace_remove(d, id);
	json_decref(m);
	json_decref(oj);
	return rc;
}

json_t *domain_sandbox_restore(struct daemon *d, const char *id, const uint32_t *ttl,
			       sandlot_error_t **err)
{
	struct archives *a = d->archives;
	if (!a) {
		no_store(err);
		return NULL;
	}
	/* The id names the store's keys and the workspace. */
	if (!sandlot__sbid_parse(id, strlen(id), NULL)) {
		sandlot__error(err, ENOENT, "invalid sandbox id \"%.64s\": " SANDLOT_SBID_EXPECTED, id);
		return NULL;
	}
	pthread_mutex_lock(&a->lock);
	struct dsb *s = dsb_find(d, id);
	int here = 0;
	if (s) {
		pthread_mutex_lock(&s->lock);
		if (dsb_settle_locked(s, 1) == 0)
			here = !dsb_state_ended(s->state) || s->transition || s->copying;
		else
			here = 1; /* busy: the resume below says so */
		pthread_mutex_unlock(&s->lock);
	}
	int rc = 0;
	if (here && archive_generation(d, id)) {
		/* A copy here that may be stale: fenced, it is taken anew from
		 * the store. */
		sandlot_error_t *fe = NULL;
		rc = fence_check(d, s, 0, &fe);
		if (rc < 0 && sandlot_error_status(fe) == ARCHIVE_EMOVED) {
			here = 0;
			rc = 0;
			sandlot_error_free(fe);
		} else if (rc < 0 && err) {
			*err = fe;
		} else {
			sandlot_error_free(fe);
		}
	}
	if (rc == 0 && !here)
		rc = restore(d, id, s, err);
	pthread_mutex_unlock(&a->lock);
	if (s)
		dsb_release(d, s);
	if (rc < 0)
		return NULL;
	/* Paused here now (or it was): a resume as any other, which checks
	 * once more that the store says it is ours. */
	return domain_sandbox_resume(d, id, ttl, err);
}

/* ---- start-up ------------------------------------------------------------------------------- */

static void load_instance(struct daemon *d)
{
	struct archives *a = d->archives;
	char inst[64] = "";
	pthread_mutex_lock(&d->db_lock);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(d->db, "SELECT value FROM settings WHERE key = 'archive_instance'", -1,
			       &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		snprintf(inst, sizeof(inst), "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	st = NULL;
	if (!inst[0]) {
		sandlot__new_id("", inst);
		if (sqlite3_prepare_v2(d->db, "INSERT INTO settings (key, value) VALUES "
				       "('archive_instance', ?1)", -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_text(st, 1, inst, -1, SQLITE_TRANSIENT);
			sqlite3_step(st);
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&d->db_lock);
	snprintf(a->instance, sizeof(a->instance), "%s", inst);
}

void archive_start(struct daemon *d)
{
	if (db_exec(d, "CREATE TABLE IF NOT EXISTS archives (id TEXT PRIMARY KEY,"
		       " generation INTEGER NOT NULL, moved_to TEXT);") < 0)
		return;
	struct archives *a = d->archives;
	if (!a)
		return;
	load_instance(d);
	/* The paused sandboxes this node archived or restored: is each still
	 * ours? */
	pthread_mutex_lock(&d->lock);
	size_t n = 0;
	char (*ids)[sizeof(((struct dsb *)0)->id)] = calloc(d->nsbs + 1, sizeof(*ids));
	for (size_t i = 0; ids && i < d->nsbs; i++) {
		struct dsb *s = d->sbs[i];
		pthread_mutex_lock(&s->lock);
		if (s->state == DSB_PAUSED)
			memcpy(ids[n++], s->id, sizeof(ids[0]));
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&d->lock);
	size_t checked = 0, fenced = 0;
	for (size_t i = 0; i < n; i++) {
		if (!archive_generation(d, ids[i]))
			continue;
		struct dsb *s = dsb_find(d, ids[i]);
		if (!s)
			continue;
		sandlot_error_t *e = NULL;
		int rc = fence_check(d, s, 0, &e); /* no claim: it stays as it is */
		dsb_release(d, s);
		checked++;
		int st = rc < 0 ? sandlot_error_status(e) : 0;
		if (st == ARCHIVE_EMOVED) {
			fenced++;
		} else if (rc < 0) {
			char msg[600];
			snprintf(msg, sizeof(msg), "%s", sandlot_error_message(e));
			daemon_log_quote(msg);
			daemon_log("archive_check_failed", "level=warn sandbox=%s error=\"%s\" msg=\"each "
				   "is checked again before its resume\"", ids[i], msg);
			sandlot_error_free(e);
			if (st == ARCHIVE_EUNAVAILABLE || st == ARCHIVE_EREFUSED)
				break; /* not once per sandbox */
			continue;
		}
		sandlot_error_free(e);
	}
	free(ids);
	daemon_log("archive", "store=\"%s\" node=\"%s\" instance=%s checked=%zu fenced=%zu", a->url,
		   archive_node_name(d), a->instance, checked, fenced);
}

/* ---- routes --------------------------------------------------------------------------------- */

static int archive_route(struct http_req *req)
{
	if (req->json && json_object_size(req->json) > 0) {
		const char *k = json_object_iter_key(json_object_iter(req->json));
		return http_error(req, 400, "bad_request", "unknown field \"%.64s\" (known: none)", k);
	}
	sandlot_error_t *err = NULL;
	json_t *o = domain_sandbox_archive(req->d, req->params[0], &err);
	if (o)
		return http_json(req, 200, o);
	http_error_from(req, err);
	sandlot_error_free(err);
	return 0;
}

const struct http_route archive_routes[] = {
	{ "POST", "/v1/sandboxes/{}/archive", HTTP_JSON, archive_route, NULL, NULL, NULL },
	{ 0 },
};
