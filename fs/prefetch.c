/* prefetch.c - see prefetch.h */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events.h"
#include "inode.h"
#include "prefetch.h"
#include "store.h"

struct held {
	struct inode *in;      /* one lookup reference of ours */
	uint64_t bytes;        /* asked for it */
};

/* One directory a reader walks: the thread's own, no lock. */
struct stream {
	struct inode *dir;     /* referenced; NULL: a free slot */
	char **names;          /* its regular files, readdir order */
	uint32_t n;
	uint32_t *sorted;      /* indices of names, sorted by name */
	bool listed;
	char *last;            /* the name opened last */
	uint32_t at_r, at_s;   /* its place in each order */
	bool placed;           /* at_r and at_s are known */
	bool sorted_order;     /* the reader follows names sorted */
	bool cold;             /* gave up: only an ordered walk starts again */
	unsigned run;          /* opens in a row in this directory */
	unsigned ordered;      /* of which next to the one before, in a row */
	unsigned misses;       /* opens since one that was prefetched */
	struct held *held;     /* P.window places */
	unsigned nheld;
	uint64_t used;         /* LRU among streams */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool running, stopping;
	unsigned window;
	struct inode *queue[PREFETCH_QUEUE]; /* referenced */
	unsigned qhead, qlen;
	struct prefetch_stats st;
	/* the thread's own */
	struct stream streams[PREFETCH_DIRS];
	uint64_t tick;
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void *prefetch_main(void *arg);

int prefetch_init(unsigned window)
{
	P.window = window;
	if (!window)
		return 0;
	for (unsigned i = 0; i < PREFETCH_DIRS; i++) {
		P.streams[i].held = calloc(window, sizeof(struct held));
		if (!P.streams[i].held)
			return -ENOMEM;
	}
	if (pthread_create(&P.thread, NULL, prefetch_main, NULL))
		return -EAGAIN;
	P.running = true;
	return 0;
}

bool prefetch_enabled(void)
{
	return P.window; /* set before the session starts, never after */
}

void prefetch_opened(struct inode *in)
{
	pthread_mutex_lock(&P.lock);
	if (P.qlen < PREFETCH_QUEUE && !P.stopping) {
		P.queue[(P.qhead + P.qlen++) % PREFETCH_QUEUE] = in;
		in = NULL;
		pthread_cond_signal(&P.cond);
	}
	pthread_mutex_unlock(&P.lock);
	if (in)
		inode_release(in); /* a hint dropped */
}

void prefetch_stats(struct prefetch_stats *ret)
{
	pthread_mutex_lock(&P.lock);
	*ret = P.st;
	pthread_mutex_unlock(&P.lock);
}

/* ------------------------------------------------------------ streams */

static void forget_listing(struct stream *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		free(s->names[i]);
	free(s->names);
	free(s->sorted);
	s->names = NULL;
	s->sorted = NULL;
	s->n = 0;
	s->listed = false;
}

/* Give up what s fetched and nobody opened: wasted. */
static void give_up(struct stream *s)
{
	uint64_t wasted = 0;

	for (unsigned i = 0; i < s->nheld; i++) {
		inode_flags_clear(s->held[i].in, INODE_PREFETCHED);
		inode_forget(s->held[i].in, 1);
		wasted += s->held[i].bytes;
	}
	s->nheld = 0;
	pthread_mutex_lock(&P.lock);
	P.st.prefetch_wasted_bytes += wasted;
	pthread_mutex_unlock(&P.lock);
}

static void stream_end(struct stream *s)
{
	if (!s->dir)
		return;
	give_up(s);
	forget_listing(s);
	free(s->last);
	s->last = NULL;
	inode_release(s->dir);
	s->dir = NULL;
}

/* The stream of dir, a new one (the least recently used one ended) if none. */
static struct stream *stream_of(struct inode *dir)
{
	struct stream *s, *lru = &P.streams[0];

	for (unsigned i = 0; i < PREFETCH_DIRS; i++) {
		s = &P.streams[i];
		if (s->dir == dir)
			goto found;
		if (!s->dir || (lru->dir && s->used < lru->used))
			lru = s;
	}
	s = lru;
	stream_end(s);
	inode_ref(dir);
	s->dir = dir;
	s->run = 0;
	s->ordered = 0;
	s->misses = 0;
	s->sorted_order = false;
	s->placed = false;
	s->cold = false;
found:
	s->used = ++P.tick;
	return s;
}

static int by_name(const void *a, const void *b, void *names)
{
	char **v = names;

	return strcmp(v[*(const uint32_t *)a], v[*(const uint32_t *)b]);
}

/* List s's directory (fd: an O_PATH descriptor of it) into s->names. */
static void list_dir(struct stream *s, int fd, bool root)
{
	uint32_t cap = 0;
	struct dirent *d;
	DIR *dir;
	int dfd;

	forget_listing(s);
	s->listed = true;
	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	dir = fdopendir(dfd);
	if (!dir) {
		close(dfd);
		return;
	}
	while ((d = readdir(dir))) {
		if (d->d_type != DT_REG && d->d_type != DT_UNKNOWN)
			continue;
		if (root && !strcmp(d->d_name, STORE_STATE_DIR))
			continue;
		if (s->n == PREFETCH_LIST_MAX) {
			forget_listing(s); /* too big to follow: listed, empty */
			s->listed = true;
			break;
		}
		if (s->n == cap) {
			char **v = realloc(s->names, (cap ? cap * 2 : 64) * sizeof(*v));

			if (!v)
				break;
			s->names = v;
			cap = cap ? cap * 2 : 64;
		}
		s->names[s->n] = strdup(d->d_name);
		if (!s->names[s->n])
			break;
		s->n++;
	}
	closedir(dir);
	s->sorted = s->n ? malloc(s->n * sizeof(*s->sorted)) : NULL;
	if (s->n && !s->sorted) {
		forget_listing(s);
		s->listed = true;
		return;
	}
	for (uint32_t i = 0; i < s->n; i++)
		s->sorted[i] = i;
	qsort_r(s->sorted, s->n, sizeof(*s->sorted), by_name, s->names);
}

/* name's place in s (readdir order, and sorted): false if not listed. */
static bool place(const struct stream *s, const char *name, uint32_t *r, uint32_t *so)
{
	uint32_t lo = 0, hi = s->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->names[s->sorted[mid]], name);

		if (!c) {
			*so = mid;
			*r = s->sorted[mid];
			return true;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static bool holds(const struct stream *s, const struct inode *in)
{
	for (unsigned i = 0; i < s->nheld; i++)
		if (s->held[i].in == in)
			return true;
	return false;
}

/* Ask for the files after the reader's place until window are held. */
static void fill_window(struct stream *s, struct inode *opened)
{
	unsigned scanned = 0;
	uint32_t k = s->sorted_order ? s->at_s : s->at_r;

	while (s->nheld < P.window && ++k < s->n && scanned++ < 4 * P.window) {
		const char *name = s->names[s->sorted_order ? s->sorted[k] : k];
		struct inode *in;
		struct stat st;
		uint64_t bytes;

		if (inode_lookup(s->dir, name, &st, &in))
			continue;
		if (!S_ISREG(st.st_mode) || in == opened || holds(s, in) ||
		    events_load(in) || !(inode_flags(in) & INODE_NONRESIDENT) ||
		    !(bytes = events_prefetch(in, PREFETCH_FILE_MAX))) {
			inode_forget(in, 1);
			continue;
		}
		inode_flags_set(in, INODE_PREFETCHED);
		s->held[s->nheld].in = in;
		s->held[s->nheld++].bytes = bytes;
		pthread_mutex_lock(&P.lock);
		P.st.prefetched_files++;
		P.st.prefetched_bytes += bytes;
		pthread_mutex_unlock(&P.lock);
	}
}

/* A reader opened in: follow its directory. */
static void opened(struct inode *in)
{
	struct inode *dir;
	struct stream *s;
	uint32_t r, so, pr, ps;
	bool hit = false, ordered;
	char *name, *prev;
	int fd;

	fd = inode_parent_fd_get(in, &dir, &name);
	if (fd < 0)
		return;
	/*
	 * Its names are read from the store's directory: only once a listing
	 * committed them with their rows.  An entry a listing made and has
	 * not recorded yet is no plain file (load_state()).
	 */
	if (!events_dir_listed(dir)) {
		inode_parent_fd_put(dir, name);
		return;
	}
	s = stream_of(dir);
	for (unsigned i = 0; i < s->nheld; i++) {
		if (s->held[i].in != in)
			continue;
		pthread_mutex_lock(&P.lock);
		P.st.prefetch_used_bytes += s->held[i].bytes;
		pthread_mutex_unlock(&P.lock);
		inode_forget(in, 1);
		s->held[i] = s->held[--s->nheld];
		hit = true;
		break;
	}
	inode_flags_clear(in, INODE_PREFETCHED);
	prev = NULL;
	if (s->last && !strcmp(s->last, name))
		goto out; /* the same file again */
	prev = s->last;
	s->last = strdup(name);
	s->run++;
	s->misses = hit ? 0 : s->misses + 1;
	if (s->nheld && s->misses >= P.window) {
		/* the reader does not come for them: a cold pattern */
		give_up(s);
		s->cold = true;
	}
	if (s->run < 2)
		goto out;
	if (!s->listed || !place(s, name, &r, &so)) {
		list_dir(s, fd, dir == inode_root());
		if (!place(s, name, &r, &so))
			goto out;
	}
	if (!s->placed && prev && place(s, prev, &pr, &ps)) {
		s->at_r = pr;
		s->at_s = ps;
		s->placed = true;
	}
	/* which order does it follow?  readdir's (cp -r, tar), or sorted (a glob) */
	ordered = s->placed && (r == s->at_r + 1 || so == s->at_s + 1);
	if (s->placed && so == s->at_s + 1 && r != s->at_r + 1)
		s->sorted_order = true;
	else if (s->placed && r == s->at_r + 1)
		s->sorted_order = false;
	s->at_r = r;
	s->at_s = so;
	s->placed = true;
	/*
	 * Two files in a row, next to each other in either order, start it;
	 * so do three in a row in any order.  Once cold, only an ordered
	 * walk of three files does (two neighbours come by chance).
	 */
	s->ordered = ordered ? s->ordered + 1 : 0;
	if (s->cold && s->ordered >= 2)
		s->cold = false;
	if (s->cold || (!s->ordered && s->run < 3))
		goto out;
	fill_window(s, in);
out:
	free(prev);
	inode_parent_fd_put(dir, name);
}

static void *prefetch_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&P.lock);
	for (;;) {
		struct inode *in;

		while (!P.qlen && !P.stopping)
			pthread_cond_wait(&P.cond, &P.lock);
		if (P.stopping)
			break;
		in = P.queue[P.qhead];
		P.qhead = (P.qhead + 1) % PREFETCH_QUEUE;
		P.qlen--;
		pthread_mutex_unlock(&P.lock);
		opened(in);
		inode_release(in);
		pthread_mutex_lock(&P.lock);
	}
	pthread_mutex_unlock(&P.lock);
	return NULL;
}

void prefetch_shutdown(void)
{
	if (!P.running)
		return;
	pthread_mutex_lock(&P.lock);
	P.stopping = true;
	pthread_cond_signal(&P.cond);
	pthread_mutex_unlock(&P.lock);
	pthread_join(P.thread, NULL);
	P.running = false;
	while (P.qlen) {
		inode_release(P.queue[P.qhead]);
		P.qhead = (P.qhead + 1) % PREFETCH_QUEUE;
		P.qlen--;
	}
	for (unsigned i = 0; i < PREFETCH_DIRS; i++) {
		stream_end(&P.streams[i]);
		free(P.streams[i].held);
		P.streams[i].held = NULL;
	}
}
