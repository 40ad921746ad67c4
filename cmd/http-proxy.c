/* http-proxy.c - hsmfs-http's chain of proxies: see http-proxy.h */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-proxy.h"

struct member {
	char *url;          /* "" for DIRECT */
	unsigned group;
	uint64_t rank;      /* this host's rendezvous hash with the member */
	uint64_t skip_until; /* monotonic ms; 0: not skipped */
	uint64_t failed_at;
	uint64_t requests, failures, bytes, hit_bytes;
};

struct proxy_chain {
	pthread_mutex_t lock;
	unsigned n, ngroups;
	struct member m[PROXY_MAX];
	uint64_t skip_ms, reset_ms;
	unsigned cur;       /* the group in use */
	uint64_t moved_at;  /* when the chain left group 0 */
	uint64_t switches;
};

static uint64_t rank_of(const char *host, const char *url)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = host; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	h = (h ^ 0xff) * 0x100000001b3ull; /* between the two: "ab"+"c" is not "a"+"bc" */
	for (const char *p = url; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	/* FNV's low bits mix poorly: finish as splitmix64 does */
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	return h ^ (h >> 31);
}

struct proxy_chain *proxy_chain_new(const char *spec, const char *host, uint64_t skip_ms,
				    uint64_t reset_ms, char *err, size_t errlen)
{
	struct proxy_chain *pc = calloc(1, sizeof(*pc));
	const char *p = spec;
	unsigned group = 0;

	if (!pc) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&pc->lock, NULL);
	pc->skip_ms = skip_ms;
	pc->reset_ms = reset_ms;
	for (;;) {
		size_t len = strcspn(p, "|;");
		struct member *m;

		if (!len || strspn(p, " \t") == len) {
			snprintf(err, errlen, "'%s': an empty member at offset %zu", spec,
				 (size_t)(p - spec));
			goto fail;
		}
		if (memchr(p, ' ', len) || memchr(p, '\t', len)) {
			snprintf(err, errlen, "'%s': a member with a space in it", spec);
			goto fail;
		}
		if (pc->n == PROXY_MAX) {
			snprintf(err, errlen, "'%s': more than %d members", spec, PROXY_MAX);
			goto fail;
		}
		m = &pc->m[pc->n];
		if (len == 6 && !strncmp(p, "DIRECT", 6))
			m->url = strdup("");
		else
			m->url = strndup(p, len);
		if (!m->url) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		pc->n++;
		m->group = group;
		m->rank = rank_of(host ? host : "", m->url);
		p += len;
		if (!*p)
			break;
		if (*p == ';')
			group++;
		p++;
	}
	pc->ngroups = group + 1;
	return pc;
fail:
	proxy_chain_free(pc);
	return NULL;
}

void proxy_chain_free(struct proxy_chain *pc)
{
	if (!pc)
		return;
	for (unsigned i = 0; i < pc->n; i++)
		free(pc->m[i].url);
	pthread_mutex_destroy(&pc->lock);
	free(pc);
}

unsigned proxy_count(const struct proxy_chain *pc)
{
	return pc->n;
}

const char *proxy_url(const struct proxy_chain *pc, int i)
{
	return pc->m[i].url;
}

/* The best member of group g not in tried, skipped ones only with all. Under lock. */
static int best_in(const struct proxy_chain *pc, unsigned g, uint64_t tried, uint64_t now,
		   bool all)
{
	int best = -1;

	for (unsigned i = 0; i < pc->n; i++) {
		const struct member *m = &pc->m[i];

		if (m->group != g || (tried >> i & 1) || (!all && m->skip_until > now))
			continue;
		if (best < 0 || m->rank > pc->m[best].rank)
			best = (int)i;
	}
	return best;
}

int proxy_pick(struct proxy_chain *pc, uint64_t tried, uint64_t now_ms)
{
	int pick = -1;

	pthread_mutex_lock(&pc->lock);
	if (pc->cur && now_ms - pc->moved_at >= pc->reset_ms) {
		pc->cur = 0; /* back to the site's first choice */
		pc->switches++;
	}
	/* the group in use and those after it, then those before it */
	for (unsigned k = 0; k < pc->ngroups && pick < 0; k++) {
		unsigned g = (pc->cur + k) % pc->ngroups;

		pick = best_in(pc, g, tried, now_ms, false);
		if (pick >= 0 && g != pc->cur) {
			if (!pc->cur)
				pc->moved_at = now_ms;
			pc->cur = g;
			pc->switches++;
		}
	}
	if (pick < 0) {
		/* every member untried is skipped: the one skipped longest */
		for (unsigned i = 0; i < pc->n; i++)
			if (!(tried >> i & 1) && (pick < 0 || pc->m[i].failed_at < pc->m[pick].failed_at))
				pick = (int)i;
	}
	pthread_mutex_unlock(&pc->lock);
	return pick;
}

bool proxy_done(struct proxy_chain *pc, int i, bool ok, uint64_t bytes, uint64_t hit_bytes,
		uint64_t now_ms)
{
	struct member *m = &pc->m[i];
	bool was;

	pthread_mutex_lock(&pc->lock);
	was = m->skip_until > now_ms;
	m->requests++;
	m->bytes += bytes;
	m->hit_bytes += hit_bytes;
	if (ok) {
		m->skip_until = 0;
		if (m->group < pc->cur) {
			/* a group before the one in use works again */
			pc->cur = m->group;
			pc->switches++;
		}
	} else {
		m->failures++;
		m->failed_at = now_ms;
		m->skip_until = now_ms + pc->skip_ms;
		if (!m->skip_until)
			m->skip_until = 1;
	}
	pthread_mutex_unlock(&pc->lock);
	return was == ok;
}

unsigned proxy_stats(struct proxy_chain *pc, struct proxy_stat *out, unsigned max,
		     uint64_t now_ms)
{
	unsigned k = 0;

	pthread_mutex_lock(&pc->lock);
	for (unsigned i = 0; i < pc->n && k < max; i++, k++) {
		const struct member *m = &pc->m[i];
		struct proxy_stat *s = &out[k];

		snprintf(s->url, sizeof(s->url), "%s", m->url[0] ? m->url : "DIRECT");
		s->group = m->group;
		s->skipped = m->skip_until > now_ms;
		s->current = m->group == pc->cur;
		s->requests = m->requests;
		s->failures = m->failures;
		s->bytes = m->bytes;
		s->hit_bytes = m->hit_bytes;
		s->switches = pc->switches;
	}
	pthread_mutex_unlock(&pc->lock);
	return k;
}
