/* The egress rules, loaded through libnftables in this process or in a
 * helper process (netns.h says when and why). */
#include "linux/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nftables/libnftables.h>

#include "common/lazylib.h"
#include "common/util.h"
#include "linux/syscalls.h"

/* libnftables, loaded by the first sandbox with egress (lazylib.h): a
 * program that never loads egress rules never maps it. */
static struct {
	__typeof__(nft_ctx_new) *ctx_new;
	__typeof__(nft_ctx_free) *ctx_free;
	__typeof__(nft_ctx_buffer_output) *ctx_buffer_output;
	__typeof__(nft_ctx_buffer_error) *ctx_buffer_error;
	__typeof__(nft_run_cmd_from_buffer) *run_cmd_from_buffer;
	__typeof__(nft_ctx_get_error_buffer) *ctx_get_error_buffer;
} nft;
static const struct sandlot_lazysym nft_syms[] = {
	{ "nft_ctx_new", (void **)&nft.ctx_new },
	{ "nft_ctx_free", (void **)&nft.ctx_free },
	{ "nft_ctx_buffer_output", (void **)&nft.ctx_buffer_output },
	{ "nft_ctx_buffer_error", (void **)&nft.ctx_buffer_error },
	{ "nft_run_cmd_from_buffer", (void **)&nft.run_cmd_from_buffer },
	{ "nft_ctx_get_error_buffer", (void **)&nft.ctx_get_error_buffer },
};
static struct sandlot_lazylib nft_lib =
	SANDLOT_LAZYLIB("libnftables.so.1", "load the egress nftables rules", nft_syms);

/* One transaction: create-if-missing, delete, create.  Either the new
 * ruleset is in place or the old one still is. */
/* After the first "%s": replace what is there.  The first load needs no
 * "add, delete" (a new namespace has no table), and it is cheaper without. */
#define REPLACE "add table inet sandlot\ndelete table inet sandlot\n"
static const char ruleset_redirect[] =
	"%s"
	"table inet sandlot {\n"
	"  chain nat_out {\n"
	"    type nat hook output priority -100; policy accept;\n"
	/* loopback and the sandbox's own address: its local servers */
	"    fib daddr type local return\n"
	/* DNS over TLS: left to the filter, so it fails at connect() */
	"    tcp dport 853 return\n"
	"    meta l4proto { tcp, udp } th dport 53 redirect to :53\n"
	"    meta l4proto tcp redirect to :%d\n"
	"  }\n"
	"  chain filter_out {\n"
	"    type filter hook output priority 0; policy drop;\n"
	"    ct state established,related accept\n"
	/* redirected packets: not seen as going to a local address here */
	"    ct status dnat accept\n"
	"    fib daddr type local accept\n"
	/* a dropped SYN is retried for minutes; a reset fails connect() now */
	"    meta l4proto tcp reject with tcp reset\n"
	"  }\n"
	"}\n";

static const char ruleset_drop[] =
	"%s"
	"table inet sandlot {\n"
	"  chain filter_out {\n"
	"    type filter hook output priority 0; policy drop;\n"
	"    ct state established,related accept\n"
	"    fib daddr type local accept\n"
	"    meta l4proto tcp reject with tcp reset\n"
	"  }\n"
	"}\n";

/* A new socket must be below FD_SETSIZE, with room for descriptors other
 * threads of this process open meanwhile. */
#define NFT_FD_LIMIT (FD_SETSIZE - 64)

struct sandlot_nft {
	struct nft_ctx *ctx; /* made in this process, or NULL: */
	uint32_t id;         /* the helper's context of this number */
};

/* A context whose socket belongs to ns_fd's namespace.  It is kept for
 * the sandbox's life rather than made for each load because closing its
 * socket waits for RCU grace periods: 3 to 15 ms measured here, which
 * would double the cost of creating a sandbox with a network. */
static struct nft_ctx *ctx_new(int ns_fd, sandlot_error_t **err)
{
	/* Every other call below is on a context this made. */
	if (sandlot__lazylib_load(&nft_lib, err) < 0)
		return NULL;
	/* The socket takes the lowest free number: refuse while that is too
	 * close to the limit rather than abort in libnftables' select(). */
	int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (probe >= 0)
		close(probe);
	if (probe >= NFT_FD_LIMIT) {
		sandlot__error(err, EMFILE,
			       "load the egress nftables rules: descriptors 0 to %d are all in use, "
			       "and nftables cannot use a higher one", probe - 1);
		return NULL;
	}
	int saved;
	if (sandlot__netns_enter(ns_fd, &saved, err) < 0)
		return NULL;
	struct nft_ctx *ctx = nft.ctx_new(NFT_CTX_DEFAULT);
	sandlot__netns_leave(&saved);
	if (!ctx) {
		sandlot__error(err, ENOMEM, "create an nftables context");
		return NULL;
	}
	nft.ctx_buffer_output(ctx);
	nft.ctx_buffer_error(ctx);
	return ctx;
}

static int ctx_load(struct nft_ctx *ctx, int fresh, int redirect, sandlot_error_t **err)
{
	const char *replace = fresh ? "" : REPLACE;
	char text[sizeof(ruleset_redirect) + sizeof(REPLACE) + 16];
	if (redirect)
		snprintf(text, sizeof(text), ruleset_redirect, replace, SANDLOT_NETNS_PROXY_PORT);
	else
		snprintf(text, sizeof(text), ruleset_drop, replace);
	if (nft.run_cmd_from_buffer(ctx, text) == 0)
		return 0;
	const char *e = nft.ctx_get_error_buffer(ctx);
	char msg[300];
	snprintf(msg, sizeof(msg), "%s", e && *e ? e : "unknown error");
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	return sandlot__error(err, EIO, "load the egress nftables rules: %s", msg);
}

/* ---- the helper process --------------------------------------------------- */

enum { NFT_NEW = 1, NFT_LOAD, NFT_FREE };
struct nft_req {
	uint32_t op, id;
	int32_t redirect;
}; /* NFT_NEW comes with the namespace's descriptor */
struct nft_rep {
	int32_t status; /* 0, or the error's */
	uint32_t id;
	char msg[256];
};

static int helper_fd = -1; /* set before any other thread exists */
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;

static void helper_reply(int sock, sandlot_error_t *e, uint32_t id)
{
	struct nft_rep a = { .id = id };
	if (e) {
		a.status = sandlot_error_status(e) ? sandlot_error_status(e) : EIO;
		snprintf(a.msg, sizeof(a.msg), "%s", sandlot_error_message(e));
		sandlot_error_free(e);
	}
	send(sock, &a, sizeof(a), MSG_NOSIGNAL);
}

/* The helper: one request at a time, each answered but NFT_FREE, whose
 * slow close waits until no request does. */
__attribute__((noreturn)) static void helper_main(int sock, pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	prctl(PR_SET_NAME, "sandlot-nft");
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Nothing of the parent's but ours: not even its standard output and
	 * error, which its reader would otherwise see open after it ended. */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
		_exit(1);
	if (sock != 3 && (dup2(sock, 3) < 0 || (close(sock), 0)))
		_exit(1);
	sock = 3;
	sys_close_range(4, ~0U, 0);
	struct nft_ctx **ctxs = NULL, **frees = NULL;
	size_t nctx = 0, nfree = 0;
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		int r = poll(&p, 1, nfree ? 0 : -1);
		if (r == 0) {
			nft.ctx_free(frees[--nfree]);
			continue;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		struct nft_req q;
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} c;
		struct iovec iov = { .iov_base = &q, .iov_len = sizeof(q) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
		ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (n == 0)
			_exit(0); /* the parent is gone */
		if (n < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		int ns = -1;
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
		    h->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&ns, CMSG_DATA(h), sizeof(int));
		sandlot_error_t *e = NULL;
		uint32_t id = 0;
		int known = n == (ssize_t)sizeof(q) && q.id < nctx && ctxs[q.id];
		if (n != (ssize_t)sizeof(q)) {
			sandlot__error(&e, EINVAL, "nftables helper: a request of %zd bytes", n);
		} else if (q.op == NFT_NEW && ns >= 0) {
			struct nft_ctx *ctx = ctx_new(ns, &e);
			if (ctx && ctx_load(ctx, 1, q.redirect, &e) < 0) {
				nft.ctx_free(ctx);
				ctx = NULL;
			}
			while (ctx && id < nctx && ctxs[id])
				id++;
			if (ctx && id == nctx) {
				struct nft_ctx **grown = realloc(ctxs, (nctx + 64) * sizeof(*ctxs));
				struct nft_ctx **fgrown = grown ? realloc(frees, (nctx + 64) * sizeof(*frees))
							       : NULL;
				if (grown)
					ctxs = grown;
				if (fgrown)
					frees = fgrown;
				if (!grown || !fgrown) {
					nft.ctx_free(ctx);
					ctx = NULL;
					sandlot__error(&e, ENOMEM, "nftables helper: out of memory");
				} else {
					memset(ctxs + nctx, 0, 64 * sizeof(*ctxs));
					nctx += 64;
				}
			}
			if (ctx)
				ctxs[id] = ctx;
		} else if (q.op == NFT_LOAD && known) {
			ctx_load(ctxs[q.id], 0, q.redirect, &e);
			id = q.id;
		} else if (q.op == NFT_FREE && known) {
			frees[nfree++] = ctxs[q.id]; /* frees has room for every context */
			ctxs[q.id] = NULL;
		} else {
			sandlot__error(&e, EINVAL, "nftables helper: a bad request (%u, %u)", q.op, q.id);
		}
		if (ns >= 0)
			close(ns);
		if (n != (ssize_t)sizeof(q) || q.op != NFT_FREE)
			helper_reply(sock, e, id);
		else
			sandlot_error_free(e);
	}
}

int sandlot__nft_helper_start(sandlot_error_t **err)
{
	if (helper_fd >= 0)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return sandlot__error_errno(err, errno, "start the nftables helper: socketpair");
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(sv[0]);
		close(sv[1]);
		return sandlot__error_errno(err, e, "start the nftables helper: fork");
	}
	if (pid == 0) {
		close(sv[0]);
		helper_main(sv[1], parent);
	}
	close(sv[1]);
	helper_fd = sv[0];
	return 0;
}

/* One request (and its answer, but for NFT_FREE) at a time. */
static int helper_call(const struct nft_req *q, int ns_fd, struct nft_rep *a, sandlot_error_t **err)
{
	pthread_mutex_lock(&helper_lock);
	ssize_t n = sandlot__send_with_fd(helper_fd, q, sizeof(*q), ns_fd);
	if (n == (ssize_t)sizeof(*q) && q->op != NFT_FREE) {
		do
			n = recv(helper_fd, a, sizeof(*a), 0);
		while (n < 0 && errno == EINTR);
		if (n != (ssize_t)sizeof(*a))
			n = -1;
	}
	pthread_mutex_unlock(&helper_lock);
	if (n < 0 || (q->op == NFT_FREE && n != (ssize_t)sizeof(*q)))
		return sandlot__error(err, EIO, "load the egress nftables rules: the nftables helper "
				      "process has ended");
	if (q->op != NFT_FREE && a->status) {
		a->msg[sizeof(a->msg) - 1] = '\0';
		return sandlot__error(err, a->status, "%s", a->msg);
	}
	return 0;
}

/* ---- either way ----------------------------------------------------------- */

int sandlot__nft_load(int ns_fd, int redirect, struct sandlot_nft **pnft, sandlot_error_t **err)
{
	struct sandlot_nft *n = *pnft;
	if (n && n->ctx)
		return ctx_load(n->ctx, 0, redirect, err);
	if (n) {
		struct nft_req q = { .op = NFT_LOAD, .id = n->id, .redirect = redirect };
		struct nft_rep a;
		return helper_call(&q, -1, &a, err);
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return sandlot__error(err, ENOMEM, "load the egress nftables rules: out of memory");
	if (helper_fd >= 0) {
		struct nft_req q = { .op = NFT_NEW, .redirect = redirect };
		struct nft_rep a;
		if (helper_call(&q, ns_fd, &a, err) < 0) {
			free(n);
			return -1;
		}
		n->id = a.id;
	} else {
		n->ctx = ctx_new(ns_fd, err);
		if (!n->ctx || ctx_load(n->ctx, 1, redirect, err) < 0) {
			if (n->ctx)
				nft.ctx_free(n->ctx);
			free(n);
			return -1;
		}
	}
	*pnft = n;
	return 0;
}

void sandlot__nft_free(struct sandlot_nft *n)
{
	if (!n)
		return;
	if (n->ctx) {
		nft.ctx_free(n->ctx);
	} else {
		struct nft_req q = { .op = NFT_FREE, .id = n->id };
		helper_call(&q, -1, NULL, NULL);
	}
	free(n);
}
