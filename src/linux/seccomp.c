/* Policy compiler (spec/seccomp-policy.txt → libseccomp) and the cached,
 * sealed program memfd whose bytes go to sandlot-init in CONFIG.
 *
 * The language is documented at the top of the policy file; this file
 * explains how it maps onto libseccomp and why:
 *
 *  - libseccomp builds one decision tree per system call.  When two rules for
 *    the same call overlap and their actions differ, which one wins is not
 *    specified, and an unconditional rule silently swallows every
 *    conditional rule for that call.  So the compiler rejects an
 *    unconditional rule next to any other rule for the same call, and the
 *    policy keeps conditional rules with different actions disjoint (each
 *    such group says so in a comment; the unit tests check the edges).
 *
 *  - libseccomp has no "masked not-equal" and allows one comparison per
 *    argument per rule.  `argN & M != V` (and several such on the same
 *    argument, same mask: "not any of these") is therefore compiled into a
 *    set of masked-equal rules that together match exactly the values whose
 *    masked bits differ from every excluded value: walk the mask's bits from
 *    the top; wherever no excluded value agrees with the prefix chosen so
 *    far, that prefix is one rule.  This is how `ioctl` can be allowed for
 *    every request except TIOCSTI while comparing only the low 32 bits —
 *    the kernel reads the request as an unsigned int, so a deny written as a
 *    64-bit comparison could be bypassed by setting high bits.
 *
 *  - A rule whose action is the default action only documents a decision
 *    (libseccomp refuses such rules with EACCES); it is checked like any
 *    other rule and then left out.
 */
#include "linux/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

/* Newer than the build headers (linux-libc-dev 6.1, glibc 2.36) may be. */
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#endif
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_GET_MDWE
#define PR_GET_MDWE 66
#endif

/* ---- names the policy may use ------------------------------------------ */

struct named {
	const char *name;
	uint64_t value;
};

#define C(x) { #x, (uint64_t)(x) }

/* Constants for argument values.  Taken from the system headers so they are
 * right by construction; add one here before using it in the policy. */
static const struct named constants[] = {
	/* clone / unshare flags */
	C(CLONE_VM), C(CLONE_FS), C(CLONE_FILES), C(CLONE_SIGHAND), C(CLONE_PIDFD),
	C(CLONE_PTRACE), C(CLONE_VFORK), C(CLONE_PARENT), C(CLONE_THREAD),
	C(CLONE_NEWNS), C(CLONE_SYSVSEM), C(CLONE_SETTLS), C(CLONE_PARENT_SETTID),
	C(CLONE_CHILD_CLEARTID), C(CLONE_DETACHED), C(CLONE_UNTRACED),
	C(CLONE_CHILD_SETTID), C(CLONE_NEWCGROUP), C(CLONE_NEWUTS), C(CLONE_NEWIPC),
	C(CLONE_NEWUSER), C(CLONE_NEWPID), C(CLONE_NEWNET), C(CLONE_IO),
	C(CLONE_NEWTIME),
	/* socket families, types, protocols */
	C(AF_UNSPEC), C(AF_UNIX), C(AF_LOCAL), C(AF_INET), C(AF_INET6), C(AF_NETLINK),
	C(AF_PACKET), C(AF_ALG), C(AF_VSOCK), C(AF_KEY), C(AF_BLUETOOTH), C(AF_CAN),
	C(AF_RDS), C(AF_TIPC), C(AF_XDP),
	C(SOCK_STREAM), C(SOCK_DGRAM), C(SOCK_RAW), C(SOCK_RDM), C(SOCK_SEQPACKET),
	C(SOCK_PACKET), C(SOCK_NONBLOCK), C(SOCK_CLOEXEC),
	C(NETLINK_ROUTE),
	/* ioctl requests */
	C(TIOCSTI), C(TIOCLINUX), C(TIOCSETD), C(TIOCCONS), C(TIOCGWINSZ), C(TIOCSWINSZ),
	C(FIONREAD), C(FIONBIO), C(TCGETS), C(TCSETS),
	/* file types (mknod) */
	C(S_IFMT), C(S_IFIFO), C(S_IFCHR), C(S_IFDIR), C(S_IFBLK), C(S_IFREG), C(S_IFLNK),
	C(S_IFSOCK),
	/* personality */
	C(PER_LINUX), C(PER_LINUX32), C(UNAME26), C(ADDR_NO_RANDOMIZE), C(READ_IMPLIES_EXEC),
	/* prctl options */
	C(PR_SET_PDEATHSIG), C(PR_GET_PDEATHSIG), C(PR_GET_DUMPABLE), C(PR_SET_DUMPABLE),
	C(PR_GET_KEEPCAPS), C(PR_SET_KEEPCAPS), C(PR_SET_NAME), C(PR_GET_NAME),
	C(PR_GET_SECCOMP), C(PR_SET_SECCOMP), C(PR_CAPBSET_READ), C(PR_GET_SECUREBITS),
	C(PR_GET_TIMERSLACK), C(PR_SET_TIMERSLACK), C(PR_SET_CHILD_SUBREAPER),
	C(PR_GET_CHILD_SUBREAPER), C(PR_SET_NO_NEW_PRIVS), C(PR_GET_NO_NEW_PRIVS),
	C(PR_GET_TID_ADDRESS), C(PR_SET_THP_DISABLE), C(PR_GET_THP_DISABLE),
	C(PR_CAP_AMBIENT), C(PR_GET_SPECULATION_CTRL), C(PR_SET_SPECULATION_CTRL),
	C(PR_SET_VMA), C(PR_SET_MDWE), C(PR_GET_MDWE), C(PR_SET_MM), C(PR_SET_PTRACER),
};

#define E(x) { #x, (uint64_t)(x) }

static const struct named errno_names[] = {
	E(EPERM), E(ENOENT), E(EACCES), E(EINVAL), E(ENOSYS), E(ENOTTY), E(EOPNOTSUPP),
	E(EAFNOSUPPORT), E(EPROTONOSUPPORT), E(ESOCKTNOSUPPORT),
};

static const struct named *find_named(const struct named *tab, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(tab[i].name, name) == 0)
			return &tab[i];
	return NULL;
}

/* ---- compiler state ------------------------------------------------------ */

#define NAME_MAX_LEN 64
#define MAX_DEFINES 64
#define MAX_CONDS 6            /* per rule, before expansion */
#define MAX_EXCLUDED 16        /* "!=" values sharing one argument */
#define MAX_EXPANSION 256      /* libseccomp rules one policy line may become */
#define NARGS 6

struct define {
	char name[NAME_MAX_LEN];
	uint64_t value;
};

/* What the compiler has seen for one system call (to reject an
 * unconditional rule next to other rules for the same call). */
struct seen {
	int nr;
	unsigned line;
	bool unconditional;
};

struct policy {
	scmp_filter_ctx ctx;
	uint32_t default_action;
	unsigned line;
	int nrules;
	struct define defines[MAX_DEFINES];
	size_t ndefines;
	struct seen *seen;
	size_t nseen, capseen;
	sandlot_error_t **err;
};

static int line_error(struct policy *pol, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int line_error(struct policy *pol, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return sandlot__error(pol->err, EINVAL, "seccomp policy line %u: %s", pol->line, msg);
}

/* ---- tokens -------------------------------------------------------------- */

enum tok_kind { TOK_END, TOK_WORD, TOK_NUMBER, TOK_OP };

struct token {
	enum tok_kind kind;
	char text[NAME_MAX_LEN]; /* word, number or operator as written */
	uint64_t number;
};

struct lexer {
	const char *p, *end; /* the rule part of one line (before '#') */
	struct token tok;    /* current token */
};

static bool is_word_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_word_char(char c)
{
	return is_word_start(c) || (c >= '0' && c <= '9');
}

/* Advance to the next token.  0, or -1 with the error set. */
static int lex(struct policy *pol, struct lexer *lx)
{
	struct token *t = &lx->tok;
	while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r'))
		lx->p++;
	memset(t, 0, sizeof(*t));
	if (lx->p >= lx->end) {
		t->kind = TOK_END;
		strcpy(t->text, "end of rule");
		return 0;
	}
	const char *s = lx->p;
	char c = *s;
	size_t len;
	if (is_word_start(c) || (c >= '0' && c <= '9')) {
		while (lx->p < lx->end && is_word_char(*lx->p))
			lx->p++;
		len = (size_t)(lx->p - s);
		if (len >= sizeof(t->text))
			return line_error(pol, "'%.20s...' is too long", s);
		memcpy(t->text, s, len);
		if (!is_word_start(c)) {
			/* Numbers as in C: decimal, 0x hex, 0 octal. */
			char *endp;
			errno = 0;
			t->number = strtoull(t->text, &endp, 0);
			if (errno || *endp)
				return line_error(pol, "bad number '%s'", t->text);
			t->kind = TOK_NUMBER;
		} else {
			t->kind = TOK_WORD;
		}
		return 0;
	}
	static const char *const ops[] = { "==", "!=", "<=", ">=", "<", ">", "&", "|" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(ops); i++) {
		len = strlen(ops[i]);
		if ((size_t)(lx->end - s) >= len && memcmp(s, ops[i], len) == 0) {
			lx->p += len;
			t->kind = TOK_OP;
			strcpy(t->text, ops[i]);
			return 0;
		}
	}
	return line_error(pol, "unexpected character '%c'", c);
}

static bool tok_is(const struct lexer *lx, enum tok_kind kind, const char *text)
{
	return lx->tok.kind == kind && strcmp(lx->tok.text, text) == 0;
}

/* ---- values, actions, conditions ---------------------------------------- */

/* value := term { "|" term };  term := number | constant | defined name */
static int parse_value(struct policy *pol, struct lexer *lx, uint64_t *out)
{
	uint64_t v = 0;
	for (;;) {
		if (lx->tok.kind == TOK_NUMBER) {
			v |= lx->tok.number;
		} else if (lx->tok.kind == TOK_WORD) {
			const struct named *c = NULL;
			bool found = false;
			for (size_t i = 0; i < pol->ndefines; i++) {
				if (strcmp(pol->defines[i].name, lx->tok.text) == 0) {
					v |= pol->defines[i].value;
					found = true;
					break;
				}
			}
			if (!found) {
				c = find_named(constants, SANDLOT_ARRAY_SIZE(constants), lx->tok.text);
				if (!c)
					return line_error(pol, "unknown constant '%s'", lx->tok.text);
				v |= c->value;
			}
		} else {
			return line_error(pol, "expected a value, found '%s'", lx->tok.text);
		}
		if (lex(pol, lx) < 0)
			return -1;
		if (!tok_is(lx, TOK_OP, "|"))
			break;
		if (lex(pol, lx) < 0)
			return -1;
	}
	*out = v;
	return 0;
}

/* action := "allow" | "deny" | "errno" (NAME | number) | "kill".  The current
 * token is the action word; on return it is the token after the action. */
static int parse_action(struct policy *pol, struct lexer *lx, uint32_t *out)
{
	if (tok_is(lx, TOK_WORD, "allow")) {
		*out = SCMP_ACT_ALLOW;
	} else if (tok_is(lx, TOK_WORD, "deny")) {
		*out = SCMP_ACT_ERRNO(EPERM);
	} else if (tok_is(lx, TOK_WORD, "kill")) {
		*out = SCMP_ACT_KILL_PROCESS;
	} else if (tok_is(lx, TOK_WORD, "errno")) {
		if (lex(pol, lx) < 0)
			return -1;
		uint64_t e;
		if (lx->tok.kind == TOK_NUMBER) {
			e = lx->tok.number;
		} else {
			const struct named *n = lx->tok.kind == TOK_WORD
				? find_named(errno_names, SANDLOT_ARRAY_SIZE(errno_names), lx->tok.text)
				: NULL;
			if (!n)
				return line_error(pol, "unknown errno '%s'", lx->tok.text);
			e = n->value;
		}
		if (e > 4095) /* the kernel caps SECCOMP_RET_ERRNO data at MAX_ERRNO */
			return line_error(pol, "errno %llu is out of range", (unsigned long long)e);
		*out = SCMP_ACT_ERRNO((uint32_t)e);
	} else {
		return line_error(pol, "expected allow, deny, errno or kill, found '%s'", lx->tok.text);
	}
	return lex(pol, lx);
}

enum cmp_op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

struct cond {
	unsigned arg;
	enum cmp_op op;
	bool masked;
	uint64_t mask;  /* all ones when !masked */
	uint64_t value;
};

static int parse_op(struct policy *pol, struct lexer *lx, bool masked, enum cmp_op *out)
{
	static const struct { const char *text; enum cmp_op op; } tab[] = {
		{ "==", OP_EQ }, { "!=", OP_NE }, { "<", OP_LT },
		{ "<=", OP_LE }, { ">", OP_GT }, { ">=", OP_GE },
	};
	if (lx->tok.kind == TOK_OP) {
		for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(tab); i++) {
			if (strcmp(lx->tok.text, tab[i].text) != 0)
				continue;
			if (masked && tab[i].op != OP_EQ && tab[i].op != OP_NE)
				return line_error(pol, "after '&' only == and != compare");
			*out = tab[i].op;
			return lex(pol, lx);
		}
	}
	return line_error(pol, "expected a comparison (== != < <= > >=), found '%s'", lx->tok.text);
}

/* cond := "arg"N op value | "arg"N "&" value ("==" | "!=") value */
static int parse_cond(struct policy *pol, struct lexer *lx, struct cond *c)
{
	const char *w = lx->tok.text;
	if (lx->tok.kind != TOK_WORD || strncmp(w, "arg", 3) != 0 || w[3] < '0' || w[3] > '5' ||
	    w[4] != '\0')
		return line_error(pol, "expected arg0 .. arg5, found '%s'", w);
	memset(c, 0, sizeof(*c));
	c->arg = (unsigned)(w[3] - '0');
	c->mask = UINT64_MAX;
	if (lex(pol, lx) < 0)
		return -1;
	if (tok_is(lx, TOK_OP, "&")) {
		if (lex(pol, lx) < 0 || parse_value(pol, lx, &c->mask) < 0)
			return -1;
		if (c->mask == 0)
			return line_error(pol, "mask is 0");
		c->masked = true;
	}
	if (parse_op(pol, lx, c->masked, &c->op) < 0 || parse_value(pol, lx, &c->value) < 0)
		return -1;
	if (c->masked && (c->value & ~c->mask))
		return line_error(pol, "value 0x%llx has bits outside the mask 0x%llx",
				  (unsigned long long)c->value, (unsigned long long)c->mask);
	return 0;
}

/* ---- expansion into libseccomp rules ------------------------------------ */

struct alts {
	struct scmp_arg_cmp v[MAX_EXPANSION];
	size_t n;
};

static int push_alt(struct policy *pol, struct alts *a, unsigned arg, enum scmp_compare op,
		    uint64_t da, uint64_t db)
{
	if (a->n >= MAX_EXPANSION)
		return line_error(pol, "conditions expand to more than %d rules", MAX_EXPANSION);
	a->v[a->n++] = (struct scmp_arg_cmp){ .arg = arg, .op = op, .datum_a = da, .datum_b = db };
	return 0;
}

/* Emit masked-equal comparisons that together match exactly the values x
 * with (x & mask) not in ex[].  pm/pv: the bits fixed so far and their
 * values; ex[]: the excluded values that agree with that prefix. */
static int cover(struct policy *pol, struct alts *a, unsigned arg, uint64_t mask,
		 const uint64_t *ex, size_t nex, uint64_t pm, uint64_t pv, int bit)
{
	if (nex == 0)
		return push_alt(pol, a, arg, SCMP_CMP_MASKED_EQ, pm, pv);
	while (bit >= 0 && !((mask >> bit) & 1))
		bit--;
	if (bit < 0)
		return 0; /* the prefix is an excluded value: nothing to allow here */
	uint64_t b = UINT64_C(1) << bit;
	for (int side = 0; side < 2; side++) {
		uint64_t want = side ? b : 0, sub[MAX_EXCLUDED];
		size_t n = 0;
		for (size_t i = 0; i < nex; i++)
			if ((ex[i] & b) == want)
				sub[n++] = ex[i];
		if (cover(pol, a, arg, mask, sub, n, pm | b, pv | want, bit - 1) < 0)
			return -1;
	}
	return 0;
}

/* The alternatives for one argument: one native comparison, or the
 * masked-equal cover of a group of "!=" comparisons. */
static int arg_alternatives(struct policy *pol, unsigned arg, const struct cond *conds,
			    size_t nconds, struct alts *a)
{
	const struct cond *mine[MAX_CONDS];
	size_t n = 0;
	a->n = 0;
	for (size_t i = 0; i < nconds; i++)
		if (conds[i].arg == arg)
			mine[n++] = &conds[i];
	if (n == 0)
		return 0;
	bool all_ne = true;
	for (size_t i = 0; i < n; i++)
		all_ne = all_ne && mine[i]->op == OP_NE;
	if (n > 1 && !all_ne)
		return line_error(pol, "arg%u is compared more than once (only several != may share "
				  "an argument)", arg);
	const struct cond *c = mine[0];
	if (n == 1 && !(c->op == OP_NE && c->masked)) {
		static const enum scmp_compare native[] = {
			[OP_EQ] = SCMP_CMP_EQ, [OP_NE] = SCMP_CMP_NE, [OP_LT] = SCMP_CMP_LT,
			[OP_LE] = SCMP_CMP_LE, [OP_GT] = SCMP_CMP_GT, [OP_GE] = SCMP_CMP_GE,
		};
		if (c->masked)
			return push_alt(pol, a, arg, SCMP_CMP_MASKED_EQ, c->mask, c->value);
		return push_alt(pol, a, arg, native[c->op], c->value, 0);
	}
	uint64_t ex[MAX_EXCLUDED];
	size_t nex = 0;
	for (size_t i = 0; i < n; i++) {
		if (mine[i]->mask != c->mask)
			return line_error(pol, "the != comparisons of arg%u must use the same mask", arg);
		if (nex >= MAX_EXCLUDED)
			return line_error(pol, "more than %d != comparisons on arg%u", MAX_EXCLUDED, arg);
		ex[nex++] = mine[i]->value;
	}
	return cover(pol, a, arg, c->mask, ex, nex, 0, 0, 63);
}

/* Add the rule for `nr` with these conditions: the cartesian product of each
 * argument's alternatives, one libseccomp rule per combination. */
static int add_rules(struct policy *pol, uint32_t action, int nr, const char *name,
		     const struct cond *conds, size_t nconds)
{
	cleanup_free struct alts *alts = calloc(NARGS, sizeof(*alts)); /* ~36 KiB: not on the stack */
	if (!alts)
		return sandlot__error(pol->err, ENOMEM, "seccomp policy: out of memory");
	size_t total = 1;
	for (unsigned arg = 0; arg < NARGS; arg++) {
		if (arg_alternatives(pol, arg, conds, nconds, &alts[arg]) < 0)
			return -1;
		if (alts[arg].n)
			total *= alts[arg].n;
		if (total > MAX_EXPANSION)
			return line_error(pol, "conditions expand to more than %d rules", MAX_EXPANSION);
	}
	if (action == pol->default_action)
		return 0; /* documents the default; libseccomp would refuse it */
	size_t idx[NARGS] = { 0 };
	for (size_t k = 0; k < total; k++) {
		struct scmp_arg_cmp cmp[NARGS];
		unsigned n = 0;
		for (unsigned arg = 0; arg < NARGS; arg++)
			if (alts[arg].n)
				cmp[n++] = alts[arg].v[idx[arg]];
		int rc = seccomp_rule_add_exact_array(pol->ctx, action, nr, n, cmp);
		if (rc < 0)
			return line_error(pol, "libseccomp refused the rule for '%s': %s", name,
					  strerror(-rc));
		for (unsigned arg = 0; arg < NARGS; arg++) { /* odometer over the alternatives */
			if (!alts[arg].n)
				continue;
			if (++idx[arg] < alts[arg].n)
				break;
			idx[arg] = 0;
		}
	}
	return 0;
}

/* Reject an unconditional rule next to any other rule for the same call. */
static int note_syscall(struct policy *pol, int nr, const char *name, bool unconditional)
{
	for (size_t i = 0; i < pol->nseen; i++) {
		struct seen *s = &pol->seen[i];
		if (s->nr != nr)
			continue;
		if (s->unconditional || unconditional)
			return line_error(pol, "'%s' already has a rule at line %u; a rule without "
					  "conditions must be the only rule for its system call",
					  name, s->line);
		return 0;
	}
	if (pol->nseen == pol->capseen) {
		size_t cap = pol->capseen ? pol->capseen * 2 : 64;
		struct seen *p = realloc(pol->seen, cap * sizeof(*p));
		if (!p)
			return sandlot__error(pol->err, ENOMEM, "seccomp policy: out of memory");
		pol->seen = p;
		pol->capseen = cap;
	}
	pol->seen[pol->nseen++] = (struct seen){ nr, pol->line, unconditional };
	return 0;
}

/* ---- directives ---------------------------------------------------------- */

static bool is_reserved(const char *w)
{
	static const char *const words[] = { "allow", "deny", "errno", "kill", "default",
					      "define", "if", "and" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(words); i++)
		if (strcmp(words[i], w) == 0)
			return true;
	return strncmp(w, "arg", 3) == 0;
}

static int parse_default(struct policy *pol, struct lexer *lx)
{
	if (pol->ctx)
		return line_error(pol, "second 'default' line");
	if (lex(pol, lx) < 0)
		return -1;
	if (tok_is(lx, TOK_WORD, "allow"))
		return line_error(pol, "'default allow' is not accepted: the policy is an allowlist");
	uint32_t action;
	if (parse_action(pol, lx, &action) < 0)
		return -1;
	if (lx->tok.kind != TOK_END)
		return line_error(pol, "unexpected '%s' after the default action", lx->tok.text);
	pol->ctx = seccomp_init(action);
	if (!pol->ctx)
		return line_error(pol, "seccomp_init failed");
	pol->default_action = action;
	/* Any architecture but the native one (i386 via int $0x80; x32 numbers
	 * on x86_64, which libseccomp checks as part of the native arch) is not
	 * what the policy was written for: kill the whole process. */
	int rc = seccomp_attr_set(pol->ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	/* A binary tree over system call numbers instead of a linear chain: a
	 * few comparisons per call instead of up to one per listed call. */
	if (rc == 0)
		rc = seccomp_attr_set(pol->ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (rc < 0)
		return line_error(pol, "seccomp_attr_set: %s", strerror(-rc));
	return 0;
}

static int parse_define(struct policy *pol, struct lexer *lx)
{
	if (lex(pol, lx) < 0)
		return -1;
	if (lx->tok.kind != TOK_WORD || is_reserved(lx->tok.text))
		return line_error(pol, "expected a name to define, found '%s'", lx->tok.text);
	if (find_named(constants, SANDLOT_ARRAY_SIZE(constants), lx->tok.text))
		return line_error(pol, "'%s' is a built-in constant", lx->tok.text);
	for (size_t i = 0; i < pol->ndefines; i++)
		if (strcmp(pol->defines[i].name, lx->tok.text) == 0)
			return line_error(pol, "'%s' is already defined", lx->tok.text);
	if (pol->ndefines == MAX_DEFINES)
		return line_error(pol, "more than %d defines", MAX_DEFINES);
	struct define *d = &pol->defines[pol->ndefines];
	strcpy(d->name, lx->tok.text);
	if (lex(pol, lx) < 0 || parse_value(pol, lx, &d->value) < 0)
		return -1;
	if (lx->tok.kind != TOK_END)
		return line_error(pol, "unexpected '%s' after the value", lx->tok.text);
	pol->ndefines++;
	return 0;
}

/* rule := action SYSCALL [ "if" cond { "and" cond } ] */
static int parse_rule(struct policy *pol, struct lexer *lx)
{
	if (!pol->ctx)
		return line_error(pol, "rule before the 'default' line");
	uint32_t action;
	if (parse_action(pol, lx, &action) < 0)
		return -1;
	if (lx->tok.kind != TOK_WORD)
		return line_error(pol, "expected a system call name, found '%s'", lx->tok.text);
	char name[NAME_MAX_LEN];
	strcpy(name, lx->tok.text);
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return line_error(pol, "unknown system call '%s'", name);
	if (nr < 0)
		return line_error(pol, "'%s' is not a system call on this architecture", name);
	if (lex(pol, lx) < 0)
		return -1;
	struct cond conds[MAX_CONDS];
	size_t nconds = 0;
	if (tok_is(lx, TOK_WORD, "if")) {
		do {
			if (nconds == MAX_CONDS)
				return line_error(pol, "more than %d conditions", MAX_CONDS);
			if (lex(pol, lx) < 0 || parse_cond(pol, lx, &conds[nconds++]) < 0)
				return -1;
		} while (tok_is(lx, TOK_WORD, "and"));
	}
	if (lx->tok.kind != TOK_END)
		return line_error(pol, "unexpected '%s' (conditions start with 'if' and are joined "
				  "with 'and')", lx->tok.text);
	if (note_syscall(pol, nr, name, nconds == 0) < 0)
		return -1;
	if (add_rules(pol, action, nr, name, conds, nconds) < 0)
		return -1;
	pol->nrules++;
	return 0;
}

static int parse_line(struct policy *pol, const char *s, const char *end)
{
	const char *hash = memchr(s, '#', (size_t)(end - s));
	const char *code_end = hash ? hash : end;
	struct lexer lx = { .p = s, .end = code_end };
	if (lex(pol, &lx) < 0)
		return -1;
	if (lx.tok.kind == TOK_END)
		return 0; /* blank or comment-only line */
	/* Every directive carries its reason after '#'. */
	bool reason = false;
	for (const char *r = hash ? hash + 1 : end; r < end; r++)
		if (*r != ' ' && *r != '\t' && *r != '\r')
			reason = true;
	if (!reason)
		return line_error(pol, "no reason given (write '# why' after the rule)");
	if (tok_is(&lx, TOK_WORD, "default"))
		return parse_default(pol, &lx);
	if (tok_is(&lx, TOK_WORD, "define"))
		return parse_define(pol, &lx);
	return parse_rule(pol, &lx);
}

int sandlot__seccomp_compile(const char *policy_text, scmp_filter_ctx *out, sandlot_error_t **err)
{
	struct policy pol = { .err = err };
	int rc = 0;

	const char *s = policy_text;
	while (*s) {
		const char *nl = strchr(s, '\n');
		const char *end = nl ? nl : s + strlen(s);
		pol.line++;
		if (parse_line(&pol, s, end) < 0) {
			rc = -1;
			break;
		}
		s = nl ? nl + 1 : end;
	}

	free(pol.seen);
	if (rc == 0 && !pol.ctx)
		rc = sandlot__error(err, EINVAL, "seccomp policy: no 'default' line");
	if (rc < 0) {
		if (pol.ctx)
			seccomp_release(pol.ctx);
		return -1;
	}
	*out = pol.ctx;
	return pol.nrules;
}

/* ---- the program memfd --------------------------------------------------- */

static void release_ctx(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int build_program(sandlot_error_t **err)
{
	__attribute__((cleanup(release_ctx))) scmp_filter_ctx ctx = NULL;
	if (sandlot__seccomp_compile(sandlot__seccomp_policy_text, &ctx, err) < 0)
		return -1;

	cleanup_close int fd = memfd_create("sandlot-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "memfd_create");
	int rc = seccomp_export_bpf(ctx, fd);
	if (rc < 0)
		return sandlot__error_errno(err, rc < -4095 ? EIO : -rc, "seccomp_export_bpf");

	/* The kernel takes at most BPF_MAXINSNS instructions; say so here rather
	 * than as EINVAL from prctl() in every sandbox. */
	struct stat st;
	if (fstat(fd, &st) < 0)
		return sandlot__error_errno(err, errno, "fstat seccomp memfd");
	size_t len = (size_t)st.st_size;
	if (len == 0 || len % sizeof(struct sock_filter) != 0 ||
	    len / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return sandlot__error(err, E2BIG, "seccomp program has a bad size (%zu bytes, at most "
				      "%d instructions allowed)", len, BPF_MAXINSNS);

	/* Sealed, the program can be shared with every sandbox without anyone
	 * (a compromised sandbox holding a dup included) changing it. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return sandlot__error_errno(err, errno, "seal seccomp memfd");
	return steal_fd(&fd);
}

static pthread_mutex_t program_lock = PTHREAD_MUTEX_INITIALIZER;
static int program_fd = -1;

/* The compiled program depends only on the policy text and libseccomp;
 * compiling costs milliseconds, so it is kept in <cache_dir> under a name
 * derived from both (FNV-1a 64 of the text and then of the library version:
 * the text's part was hashed at build time, src/linux/meson.build). */
static void cache_path(const char *cache_dir, char *out, size_t len)
{
	uint64_t h = sandlot__seccomp_policy_fnv;
	const struct scmp_version *v = seccomp_version();
	char ver[64];
	snprintf(ver, sizeof(ver), "|%u.%u.%u|%zu", v ? v->major : 0, v ? v->minor : 0,
		 v ? v->micro : 0, sizeof(struct sock_filter));
	for (const char *p = ver; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	snprintf(out, len, "%s/seccomp-%016llx.bpf", cache_dir, (unsigned long long)h);
}

/* A sealed memfd holding the cached program, or -1 if there is no valid one. */
static int load_cached(const char *path)
{
	cleanup_close int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return -1;
	struct sock_filter prog[BPF_MAXINSNS];
	ssize_t n = sandlot__read_full(in, prog, sizeof(prog));
	if (n <= 0 || (size_t)n % sizeof(struct sock_filter) != 0 || (size_t)n == sizeof(prog))
		return -1;
	cleanup_close int fd = memfd_create("sandlot-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || sandlot__write_all(fd, prog, (size_t)n) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -1;
	return steal_fd(&fd);
}

/* Best effort: a cache that cannot be written only costs time. */
static void store_cached(const char *path, int memfd)
{
	char tmp[4300];
	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp))
		return;
	cleanup_close int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return;
	struct sock_filter prog[BPF_MAXINSNS];
	ssize_t n = pread(memfd, prog, sizeof(prog), 0);
	if (n <= 0 || sandlot__write_all(out, prog, (size_t)n) < 0 || rename(tmp, path) < 0)
		unlink(tmp);
}

int sandlot__seccomp_program_fd(const char *cache_dir, sandlot_error_t **err)
{
	pthread_mutex_lock(&program_lock);
	if (program_fd < 0 && cache_dir) {
		char path[4200];
		cache_path(cache_dir, path, sizeof(path));
		program_fd = load_cached(path);
		if (program_fd < 0) {
			program_fd = build_program(err);
			if (program_fd >= 0 && sandlot__mkdir_p(cache_dir, 0700) == 0)
				store_cached(path, program_fd);
		}
	} else if (program_fd < 0) {
		program_fd = build_program(err);
	}
	if (program_fd < 0)
		sandlot__error_wrap(err, "build seccomp program");
	int fd = program_fd;
	pthread_mutex_unlock(&program_lock);
	return fd;
}

/* The program's bytes, read once out of the memfd (under program_lock). */
static struct sock_filter *program_bytes;
static size_t program_len;

int sandlot__seccomp_program(const char *cache_dir, const void **prog, size_t *len,
			     sandlot_error_t **err)
{
	int fd = sandlot__seccomp_program_fd(cache_dir, err);
	if (fd < 0)
		return -1;
	pthread_mutex_lock(&program_lock);
	if (!program_bytes) {
		struct stat st;
		struct sock_filter *p = NULL;
		if (fstat(fd, &st) < 0 || !(p = malloc((size_t)st.st_size ? (size_t)st.st_size : 1)) ||
		    pread(fd, p, (size_t)st.st_size, 0) != (ssize_t)st.st_size) {
			int e = errno ? errno : EIO;
			free(p);
			pthread_mutex_unlock(&program_lock);
			return sandlot__error_errno(err, e, "read the seccomp program");
		}
		program_len = (size_t)st.st_size;
		program_bytes = p;
	}
	*prog = program_bytes;
	*len = program_len;
	pthread_mutex_unlock(&program_lock);
	return 0;
}
