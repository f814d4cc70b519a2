/* Best-of-K placement (gateway.h, docs/fleet.md).
 *
 * Sample K distinct nodes at random among those that can take a sandbox
 * (ready: not full, draining, unreachable or never heard from) and take
 * the one with the most free capacity, after counting the creates this
 * gateway has in flight to it.  Sampling rather than always taking the
 * emptiest node keeps several gateways (and one gateway's concurrent
 * creates) from all piling onto the same node between two polls; E2B's
 * orchestrator places the same way.  The in-flight count corrects for the
 * creates that the last poll could not see yet.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "gateway/gateway.h"

static unsigned rnd(void)
{
	unsigned r = 0;
	if (getrandom(&r, sizeof r, 0) != sizeof r)
		r = (unsigned)rand();
	return r;
}

/* Free capacity after the creates in flight: each one takes a slot. */
static double effective_free(const struct node *nd)
{
	double f = nd->free;
	if (nd->max_sandboxes > 0)
		f -= (double)nd->inflight / (double)nd->max_sandboxes;
	else
		f -= 0.01 * nd->inflight;
	return f;
}

struct node *gw_place(struct node *const *tried, size_t ntried)
{
	struct node *cand[GW_MAX_NODES];
	size_t n = 0;
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < g.n; i++) {
		struct node *nd = g.nodes[i];
		if (nd->state != NODE_READY)
			continue;
		int skip = 0;
		for (size_t t = 0; t < ntried; t++)
			if (tried[t] == nd)
				skip = 1;
		if (!skip)
			cand[n++] = nd;
	}
	struct node *best = NULL;
	double best_free = 0;
	size_t k = g.cfg.k < n ? g.cfg.k : n;
	for (size_t i = 0; i < k; i++) {
		/* A partial Fisher-Yates shuffle: cand[0..k) is a uniform sample. */
		size_t j = i + rnd() % (n - i);
		struct node *t = cand[i];
		cand[i] = cand[j];
		cand[j] = t;
		double f = effective_free(cand[i]);
		if (!best || f > best_free) {
			best = cand[i];
			best_free = f;
		}
	}
	if (best)
		best->inflight++;
	pthread_mutex_unlock(&g.lock);
	return best;
}

void gw_place_done(struct node *nd)
{
	pthread_mutex_lock(&g.lock);
	nd->inflight--;
	pthread_mutex_unlock(&g.lock);
}
