/* One HTTP call from the gateway to a node, with libcurl (gateway.h). */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/gateway.h"

#define ANSWER_MAX (64u << 20) /* a node's answer the gateway holds (a long list) */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct gw_answer *a = ud;
	size_t len = size * n;
	if (a->len + len > ANSWER_MAX)
		return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
	char *nb = realloc(a->body, a->len + len + 1);
	if (!nb)
		return 0;
	memcpy(nb + a->len, p, len);
	a->body = nb;
	a->len += len;
	a->body[a->len] = '\0';
	return len;
}

static void copy_value(char *dst, size_t cap, const char *v, size_t len)
{
	while (len && (*v == ' ' || *v == '\t'))
		v++, len--;
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
		len--;
	if (len >= cap)
		len = cap - 1;
	memcpy(dst, v, len);
	dst[len] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct gw_answer *a = ud;
	size_t len = size * n;
	static const char ct[] = "content-type:", ra[] = "retry-after:";
	if (len > sizeof ct - 1 && !strncasecmp(p, ct, sizeof ct - 1))
		copy_value(a->content_type, sizeof a->content_type, p + sizeof ct - 1, len - (sizeof ct - 1));
	else if (len > sizeof ra - 1 && !strncasecmp(p, ra, sizeof ra - 1))
		copy_value(a->retry_after, sizeof a->retry_after, p + sizeof ra - 1, len - (sizeof ra - 1));
	/* Hop-by-hop and framing headers are the gateway's own to send. */
	static const char *const skip[] = { "content-length:", "transfer-encoding:", "connection:",
					    "keep-alive:", "date:", "http/", "content-type:" };
	int keep = memchr(p, ':', len) != NULL && a->nheaders < sizeof a->headers / sizeof a->headers[0];
	for (size_t i = 0; keep && i < sizeof skip / sizeof skip[0]; i++)
		if (len >= strlen(skip[i]) && !strncasecmp(p, skip[i], strlen(skip[i])))
			keep = 0;
	if (keep) {
		char *h = malloc(len + 1);
		if (h) {
			copy_value(h, len + 1, p, len);
			a->headers[a->nheaders++] = h;
		}
	}
	return len;
}

/* One connection cache for every thread's calls: a create or a poll
 * reuses a kept-alive connection to its node instead of a new TCP
 * connection (and a pass through the node's front door) each time. */
static CURLSH *share;
static pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
static pthread_once_t share_once = PTHREAD_ONCE_INIT;

static void share_lock(CURL *c, curl_lock_data data, curl_lock_access access, void *ud)
{
	(void)c;
	(void)access;
	(void)ud;
	pthread_mutex_lock(&share_locks[data]);
}

static void share_unlock(CURL *c, curl_lock_data data, void *ud)
{
	(void)c;
	(void)ud;
	pthread_mutex_unlock(&share_locks[data]);
}

static void share_init(void)
{
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&share_locks[i], NULL);
	share = curl_share_init();
	if (share) {
		curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock);
		curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock);
		curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	}
}

void gw_call_cleanup(void)
{
	if (share)
		curl_share_cleanup(share);
	share = NULL;
}

int gw_call(const char *method, const char *url, const char *const *headers, const char *body,
	    size_t body_len, unsigned timeout_ms, struct gw_answer *a)
{
	memset(a, 0, sizeof *a);
	pthread_once(&share_once, share_init);
	CURL *c = curl_easy_init();
	if (!c) {
		snprintf(a->curl_error, sizeof a->curl_error, "out of memory");
		return -1;
	}
	struct curl_slist *hl = NULL;
	for (size_t i = 0; headers && headers[i]; i++)
		hl = curl_slist_append(hl, headers[i]);
	/* No "Expect: 100-continue" round trip for a create's small body. */
	hl = curl_slist_append(hl, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_ms < 2000 ? timeout_ms : 2000));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	if (share)
		curl_easy_setopt(c, CURLOPT_SHARE, share);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	}
	CURLcode rc = curl_easy_perform(c);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
	} else {
		snprintf(a->curl_error, sizeof a->curl_error, "%s", curl_easy_strerror(rc));
		gw_answer_free(a);
		a->status = 0;
	}
	curl_slist_free_all(hl);
	curl_easy_cleanup(c);
	return rc == CURLE_OK ? 0 : -1;
}

void gw_answer_free(struct gw_answer *a)
{
	for (size_t i = 0; i < a->nheaders; i++)
		free(a->headers[i]);
	a->nheaders = 0;
	free(a->body);
	a->body = NULL;
	a->len = 0;
}

const char *gw_auth_header(void)
{
	return g.auth_header;
}
