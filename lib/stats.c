/* stats.c - see stats.h */
#include <stdio.h>

#include "stats.h"

int stats_json(const struct stats_snapshot *s, char *buf, size_t size)
{
	const char *sep = "{";
	size_t n = 0;

#define STATS_JSON_(owner, key, show, row, what)                                    \
	n += (size_t)snprintf(n < size ? buf + n : NULL, n < size ? size - n : 0,   \
			      "%s\"" #key "\": %llu", sep,                         \
			      (unsigned long long)s->owner.key);                   \
	sep = ", ";
	STATS_FIELDS(STATS_JSON_)
#undef STATS_JSON_
	n += (size_t)snprintf(n < size ? buf + n : NULL, n < size ? size - n : 0, "}\n");
	return (int)n;
}

#define STATS_ROW_(owner, key, show, row, what) [(row) - 1] = { #key, show, what },
const struct stats_row stats_rows[STATS_NFIELDS] = { STATS_FIELDS(STATS_ROW_) };
#undef STATS_ROW_
