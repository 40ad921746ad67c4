/* evict-policy.c - see evict-policy.h */
#include <errno.h>

#include "evict-policy.h"
#include "log.h"
#include "meta.h"

uint64_t evict_policy_min_free(const struct evict_limits *l, uint64_t fs_size)
{
	uint64_t pct = l->min_free_pct ? fs_size / 100 * l->min_free_pct : 0;

	return l->min_free > pct ? l->min_free : pct;
}

uint64_t evict_policy_deficit(const struct evict_limits *l, const struct evict_figures *f,
			      uint64_t need, bool slack)
{
	uint64_t d = 0, keep;

	if (l->max) {
		uint64_t low = l->max, gap = l->max / 10;

		if (gap < l->chunk)
			gap = l->chunk;
		if (slack)
			low = l->max > gap ? l->max - gap : 0;
		if (f->used + f->reserved + need > low)
			d = f->used + f->reserved + need - low;
	}
	if (evict_policy_watches_free(l)) {
		keep = evict_policy_min_free(l, f->fs_size) + f->reserved + need;
		if (slack)
			keep += l->chunk;
		if (f->fs_avail < keep && keep - f->fs_avail > d)
			d = keep - f->fs_avail;
	}
	return d;
}

int evict_policy_eligible(const struct evict_facts *f, bool by_name)
{
	if (f->dirty || f->pinned || f->filling || f->changing || f->evicting ||
	    f->passthrough)
		return -EBUSY;
	if (f->open && (by_name || !f->tracked))
		return -EBUSY;
	if (f->open && f->reading)
		return EVICT_WAIT_READS;
	return 0;
}

void evict_policy_open_spans(uint64_t hot_lo, uint64_t hot_hi, uint64_t size,
			     struct range ret[2], unsigned *ret_n)
{
	unsigned n = 0;

	if (hot_lo)
		ret[n++] = (struct range){ 0, hot_lo };
	if (hot_hi && hot_hi < size)
		ret[n++] = (struct range){ hot_hi, size };
	*ret_n = n;
}

/*
 * Uses at open and close reach the database lazily, so its list can be
 * out of order: a file used since is passed over (w->on->evict says
 * -EAGAIN) and its time written.  If the end of the list comes first,
 * the list is read again, in the order now written, and this time what
 * was passed over is taken (on a full filesystem the times may not even
 * be written).
 */
void evict_walk_start(struct evict_walk *w, const struct evict_handlers *on,
		      struct meta *meta)
{
	*w = (struct evict_walk){ .on = on, .meta = meta, .in_order = true };
	w->on->sync();
}

bool evict_walk_next(struct evict_walk *w, uint64_t *ret_got)
{
	*ret_got = 0;
	for (;;) {
		if (w->i < w->n) {
			uint64_t got = 0;
			int res = w->on->evict(&w->v[w->i++], w->in_order, &got);

			/* its log's own room spent (see meta.c): nothing can go */
			if (res == -ENOSPC && !w->full_said) {
				log_warn("cannot record evictions: the store's filesystem is full "
					 "and so is the database's log");
				w->full_said = true;
			}
			if (res == -EAGAIN)
				w->reordered = true;
			if (res || !got) {
				w->skipped++;
				continue;
			}
			*ret_got = got;
			return true;
		}
		if (w->v) {
			evict_walk_end(w);
			return true; /* a batch ended */
		}
		if (meta_lru(w->meta, EVICT_BATCH, w->skipped, &w->v, &w->n) || !w->n) {
			evict_walk_end(w);
			if (!w->reordered || !w->in_order)
				return false;
			w->on->sync();
			w->in_order = false;
			w->skipped = 0;
			return true; /* the list is read again */
		}
		w->i = 0;
	}
}

void evict_walk_end(struct evict_walk *w)
{
	meta_victims_free(w->v, w->n);
	w->v = NULL;
	w->n = w->i = 0;
}
