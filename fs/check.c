/* check.c - see check.h */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "fault.h"
#include "log.h"
#include "meta.h"
#include "store.h"

struct row {
	uint64_t ino, gen, size;
	uint32_t state;
	bool seen;
};

static struct {
	pthread_t thread;
	bool running;
	atomic_bool stop;
	int root_fd;
	struct meta *m;
	struct row *rows;
	size_t n, cap;
	uint64_t *keep;    /* rows left to a resent removal */
	size_t nkeep;
	unsigned gone, reset, changed, kept;
} C;

/* renames and links through the mount begun and ended (check_move_begin()) */
static atomic_uint_fast64_t moves_begun, moves_ended;

void check_move_begin(void)
{
	atomic_fetch_add(&moves_begun, 1);
}

void check_move_end(void)
{
	atomic_fetch_add(&moves_ended, 1);
}

static bool kept(uint64_t ino)
{
	for (size_t i = 0; i < C.nkeep; i++)
		if (C.keep[i] == ino)
			return true;
	return false;
}

bool check_was_clean(int state_fd)
{
	return unlinkat(state_fd, CHECK_CLEAN_FILE, 0) == 0;
}

void check_mark_clean(int state_fd)
{
	int fd = openat(state_fd, CHECK_CLEAN_FILE, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

static int collect(void *arg, uint64_t ino, uint64_t gen, uint64_t size, uint32_t state)
{
	if (C.n == C.cap) {
		size_t cap = C.cap ? 2 * C.cap : 1024;
		struct row *r = realloc(C.rows, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		C.rows = r;
		C.cap = cap;
	}
	C.rows[C.n++] = (struct row){ ino, gen, size, state, false };
	return 0;
}

static struct row *find(uint64_t ino)
{
	size_t lo = 0, hi = C.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (C.rows[mid].ino < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < C.n && C.rows[lo].ino == ino ? &C.rows[lo] : NULL;
}

static void check_file(int dfd, const char *name, const struct stat *st)
{
	struct row *r = find(st->st_ino);
	struct meta_file f;

	if (!r || r->seen)
		return; /* not ours, or looked at by an earlier walk */
	r->seen = true;
	if ((uint64_t)st->st_size == r->size || r->state == META_DIRTY)
		return;
	/* changed outside hsmfs */
	if (meta_get(C.m, r->ino, &f))
		return;
	if (f.gen == r->gen) {
		int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		bool marked = fd >= 0 && fgetxattr(fd, STORE_MARKER_XATTR, NULL, 0) >= 0;

		if (fd >= 0)
			close(fd);
		if (marked) {
			rs_clear(&f.present);
			f.size = st->st_size;
			f.state = META_PLACEHOLDER;
			if (!meta_put(C.m, &f))
				C.reset++;
		} else {
			/*
			 * All its bytes here: a user's change whose record the
			 * crash lost (a truncate done, its claim not yet made;
			 * its request, resent, records it again).  Kept as a
			 * change on the mount, with its object: dropping the
			 * row would forget where the origin has the file, and
			 * its later moves and removal would not reach it.
			 */
			rs_clear(&f.present);
			f.size = st->st_size;
			f.state = META_DIRTY;
			if (!rs_add(&f.present, 0, f.size) && !meta_put(C.m, &f)) {
				log_warn("consistency check: '%s' (inode %llu, %s) is %lld bytes, its row says %llu: kept as changed on the mount",
					 name, (unsigned long long)r->ino, meta_state_name(r->state),
					 (long long)st->st_size, (unsigned long long)r->size);
				C.changed++;
			}
		}
	}
	meta_file_free(&f);
}

static void walk(int dfd, int depth, bool is_root)
{
	DIR *d;
	struct dirent *de;
	int fd;

	if (depth > 4096 || atomic_load(&C.stop))
		return;
	fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while (!atomic_load(&C.stop) && (de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (is_root && !strcmp(de->d_name, STORE_STATE_DIR)))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			struct row *r = find(st.st_ino);
			int sub;

			if (r)
				r->seen = true; /* a lazy directory's row */
			sub = openat(dirfd(d), de->d_name,
					 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				walk(sub, depth + 1, false);
				close(sub);
			}
			fault_delay(FAULT_CHECK_DIR);
		} else if (S_ISREG(st.st_mode)) {
			check_file(dirfd(d), de->d_name, &st);
		}
	}
	closedir(d);
}

/*
 * One walk of the store, marking the rows it finds: true if no rename
 * or link through the mount overlapped it (none was in flight when it
 * began, none began until it ended), so that a row it did not find has
 * no file.  Counters read in this order: ended == begun when read means
 * every move begun by then had ended; begun unchanged at the end means
 * none began since.
 */
static bool walk_alone(void)
{
	uint64_t begun = atomic_load(&moves_begun);
	bool quiet = atomic_load(&moves_ended) == begun;

	walk(C.root_fd, 0, true);
	return quiet && atomic_load(&moves_begun) == begun;
}

/* Rows no walk found yet, each looked for at its recorded path first: how many. */
static size_t unseen(void)
{
	size_t left = 0;

	for (size_t i = 0; i < C.n; i++) {
		struct row *r = &C.rows[i];
		struct meta_file f;
		struct stat st;

		if (r->seen || kept(r->ino))
			continue;
		if (!meta_get(C.m, r->ino, &f)) {
			r->seen = f.path && f.path[0] &&
				  !fstatat(C.root_fd, f.path, &st, AT_SYMLINK_NOFOLLOW) &&
				  st.st_ino == r->ino;
			meta_file_free(&f);
			if (r->seen)
				continue;
		}
		left++;
	}
	return left;
}

#define CHECK_PAUSE_MAX_MS 10000 /* between walks while users keep moving names */

static void *check_main(void *arg)
{
	unsigned walks = 0, pause_ms = 0;
	size_t i;

	(void)arg;
	if (meta_list(C.m, collect, NULL)) {
		log_err("consistency check after an unclean stop: cannot list the database: %s",
			meta_errmsg(C.m));
		return NULL;
	}
	{
		struct stat st;
		struct row *r;

		/* the root's own row (a lazy root) is not an entry of any walk */
		if (fstat(C.root_fd, &st) == 0 && (r = find(st.st_ino)))
			r->seen = true;
	}
	/*
	 * Walk until a walk no move overlapped has been made with rows still
	 * unfound: those have no file.  After an overlapped one, the rows it
	 * missed are looked for where their rows say they are, and if any is
	 * not found there, the store is walked again.
	 */
	for (;;) {
		bool alone = walk_alone();

		walks++;
		if (atomic_load(&C.stop))
			return NULL; /* unmounted meanwhile: the next mount checks again */
		if (alone || !unseen())
			break;
		if (walks == 2)
			log_info("consistency check: names moved during its walks of the store; "
				 "it walks again until one is not overlapped");
		for (unsigned ms = 0; ms < pause_ms && !atomic_load(&C.stop); ms += 50)
			usleep(50000);
		pause_ms = pause_ms ? pause_ms * 2 : 100;
		if (pause_ms > CHECK_PAUSE_MAX_MS)
			pause_ms = CHECK_PAUSE_MAX_MS;
	}
	for (i = 0; i < C.n; i++) {
		if (C.rows[i].seen)
			continue;
		if (kept(C.rows[i].ino))
			C.kept++;
		else if (!meta_delete_gen(C.m, C.rows[i].ino, C.rows[i].gen))
			C.gone++;
	}
	/* the walks are said only when names moved during one (tools parse the rest) */
	log_warn("consistency check after an unclean stop: %zu files, %u gone, %u changed and fetched again, %u kept as changed on the mount, %u left to a removal resent%s",
		 C.n, C.gone, C.reset, C.changed, C.kept,
		 walks > 1 ? " (walked again: names moved during a walk)" : "");
	return NULL;
}

int check_start(int root_fd, struct meta *m, const uint64_t *keep, size_t nkeep)
{
	C.root_fd = root_fd;
	C.m = m;
	if (nkeep) {
		C.keep = malloc(nkeep * sizeof(*keep));
		if (!C.keep)
			return -ENOMEM;
		memcpy(C.keep, keep, nkeep * sizeof(*keep));
		C.nkeep = nkeep;
	}
	if (pthread_create(&C.thread, NULL, check_main, NULL)) {
		free(C.keep);
		C.keep = NULL;
		return -EAGAIN;
	}
	C.running = true;
	return 0;
}

void check_stop(void)
{
	if (!C.running)
		return;
	atomic_store(&C.stop, true);
	pthread_join(C.thread, NULL);
	C.running = false;
	free(C.rows);
	C.rows = NULL;
	free(C.keep);
	C.keep = NULL;
}
