/* saved.c - see saved.h */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "saved.h"

/* The region: the head, then each array at a page boundary. */
#define PAGE 4096u
#define ROUND(x) (((x) + PAGE - 1) / PAGE * PAGE)
#define OFF_NODES ROUND(sizeof(struct saved_head))
#define OFF_NAMES (OFF_NODES + ROUND((size_t)SAVED_NODES_MAX * sizeof(struct saved_node)))
#define OFF_OPENS (OFF_NAMES + ROUND((size_t)SAVED_NAMES_MAX * SAVED_NAME_CELL))
#define OFF_JOURNAL (OFF_OPENS + ROUND((size_t)SAVED_OPENS_MAX * sizeof(struct saved_open)))
#define OFF_CLAIMS (OFF_JOURNAL + ROUND((size_t)SAVED_JOURNAL * sizeof(struct saved_op)))
#define OFF_HOOKS (OFF_CLAIMS + ROUND((size_t)SAVED_CLAIMS * sizeof(struct saved_claim)))
#define OFF_FAN (OFF_HOOKS + ROUND((size_t)SAVED_HOOKS * sizeof(struct saved_hook)))
#define REGION (OFF_FAN + ROUND((size_t)SAVED_FAN_MAX * sizeof(struct saved_fan_event)))

static char *R;

int saved_make(void)
{
	int fd = memfd_create("hsmfs-saved", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)REGION) < 0) {
		int res = -errno;

		close(fd);
		return res;
	}
	return fd;
}

int saved_open_region(int fd, bool *ret_fresh)
{
	void *p;

	if (fd >= 0)
		p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	else
		p = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	R = p;
	*ret_fresh = saved_head()->magic != SAVED_MAGIC;
	if (*ret_fresh) {
		memset(R, 0, sizeof(struct saved_head));
		saved_head()->size = REGION;
		saved_head()->magic = SAVED_MAGIC;
	} else if (saved_head()->size != REGION) {
		munmap(R, REGION);
		R = NULL;
		return -EPROTO; /* another build's layout: cannot take over */
	}
	return 0;
}

void saved_close_region(void)
{
	if (R)
		munmap(R, REGION);
	R = NULL;
}

struct saved_head *saved_head(void)
{
	return (struct saved_head *)R;
}

struct saved_node *saved_node(uint32_t id)
{
	return id < SAVED_NODES_MAX ? (struct saved_node *)(R + OFF_NODES) + id : NULL;
}

char *saved_name_cell(uint32_t cell)
{
	return cell < SAVED_NAMES_MAX ? R + OFF_NAMES + (size_t)cell * SAVED_NAME_CELL : NULL;
}

struct saved_open *saved_open_rec(int fd)
{
	return fd >= 0 && (unsigned)fd < SAVED_OPENS_MAX ?
		       (struct saved_open *)(R + OFF_OPENS) + fd : NULL;
}

void saved_open_set(struct saved_open *r, int fd, uint8_t kind)
{
	uint32_t *hwm = &saved_head()->opens_hwm;
	uint32_t want = (uint32_t)fd + 1, cur = __atomic_load_n(hwm, __ATOMIC_RELAXED);

	/* the opens of other threads set it too */
	while (kind != SAVED_OPEN_FREE && cur < want &&
	       !__atomic_compare_exchange_n(hwm, &cur, want, true, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED))
		;
	__atomic_store_n(&r->kind, kind, __ATOMIC_RELEASE);
}

struct saved_claim *saved_claim(uint64_t i)
{
	return (struct saved_claim *)(R + OFF_CLAIMS) + i % SAVED_CLAIMS;
}

struct saved_hook *saved_hooks(void)
{
	return R ? (struct saved_hook *)(R + OFF_HOOKS) : NULL; /* no region: an engine alone */
}

struct saved_op *saved_journal(void)
{
	return (struct saved_op *)(R + OFF_JOURNAL);
}

void saved_daemon_started(uint32_t pid)
{
	struct saved_head *h = saved_head();

	h->pids[h->pids_next++ % SAVED_PIDS] = pid;
	h->serving_pid = pid;
}

bool saved_daemon_pid(uint32_t pid)
{
	const struct saved_head *h = saved_head();

	if (!h || !pid)
		return false;
	if (pid == h->keeper_pid)
		return true;
	for (unsigned i = 0; i < SAVED_PIDS; i++)
		if (h->pids[i] == pid)
			return true;
	return false;
}

struct saved_fan_event *saved_fan_event(int fd)
{
	return R && fd >= 0 && (unsigned)fd < SAVED_FAN_MAX ?
		       (struct saved_fan_event *)(R + OFF_FAN) + fd : NULL;
}

size_t saved_node_name(const struct saved_node *r, char *buf)
{
	const char *src = r->long_name ? saved_name_cell(r->long_name) : r->name;
	size_t cap = r->long_name ? SAVED_NAME_CELL - 1 : SAVED_NAME_INLINE;
	size_t n = src ? r->name_len : 0;

	if (n > cap)
		n = cap; /* torn: the open after it finds the wrong file, or none */
	memcpy(buf, src ? src : "", n);
	buf[n] = '\0';
	return n;
}

int saved_reserve(void)
{
	struct saved_head *h = saved_head();
	uint32_t top = h->opens_hwm > h->fan_hwm ? h->opens_hwm : h->fan_hwm;
	int ph, n = 0;

	/* a directory: a read of a handle left so fails (EISDIR), a write too */
	ph = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ph >= 0 && (unsigned)ph < top) {
		int high = fcntl(ph, F_DUPFD_CLOEXEC, (int)top);

		close(ph);
		ph = high;
	}
	if (ph < 0)
		return -errno;
	for (uint32_t fd = 0; fd < h->opens_hwm && fd < SAVED_OPENS_MAX; fd++) {
		struct saved_open *r = saved_open_rec((int)fd);

		if (r->kind == SAVED_OPEN_FREE)
			continue;
		if (fcntl((int)fd, F_GETFD) >= 0 || dup3(ph, (int)fd, O_CLOEXEC) < 0)
			r->kind = SAVED_OPEN_FREE; /* taken already: cannot be kept */
		else
			n++;
	}
	for (uint32_t fd = 0; fd < h->fan_hwm && fd < SAVED_FAN_MAX; fd++) {
		struct saved_fan_event *e = saved_fan_event((int)fd);

		if (e->state != SAVED_FAN_READ)
			continue;
		/* taken already: the event is denied (fan.c finds its number taken) */
		if (fcntl((int)fd, F_GETFD) >= 0 || dup3(ph, (int)fd, O_CLOEXEC) < 0) {
			e->handle_bytes = 0;
			e->handle_type = SAVED_FAN_NOT_KEPT;
		} else {
			n++;
		}
	}
	close(ph);
	return n;
}
