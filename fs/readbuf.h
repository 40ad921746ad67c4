/*
 * readbuf.h - the pool of reply buffers for reads.
 *
 * A read's reply of more than READBUF_SPLICE_MAX bytes (and at most
 * READBUF_SIZE) is copied from the store into a buffer of this pool and
 * sent from there; smaller ones go libfuse's own way (fuse_reply_data).
 * libfuse would splice a reply from the store descriptor, but gives
 * splicing up for good after the first EAGAIN of a non-blocking splice
 * from a file (which a page being written back gives), and cannot
 * splice the kernel's largest reads (its pipe would have to grow past
 * fs.pipe-max-size); its fallback mallocs a buffer per reply, which
 * glibc maps and unmaps each time: the page faults and TLB shootdowns
 * cost more than the copy.
 *
 * A pool, not a buffer per thread: replies also come from the engine's
 * threads (parked reads), which come and go with hook connections, and
 * a thread-specific destructor deadlocks ThreadSanitizer's own thread
 * exit.  The pool holds at most as many buffers as replies ever ran at
 * once; when no buffer can be allocated, readbuf_take() says so and the
 * reply goes libfuse's own way.
 *
 * Locks: one mutex of this module's, a leaf, held only to link or
 * unlink a free buffer.
 */
#ifndef HSMFS_READBUF_H
#define HSMFS_READBUF_H

#define READBUF_SIZE (1U << 20) /* the kernel's largest read (max_pages 256) */
#define READBUF_SPLICE_MAX 8192 /* smaller replies: libfuse's own way */

/*
 * A buffer of READBUF_SIZE bytes, 4096-aligned, or NULL (no memory): the
 * caller's until it gives it back with readbuf_put().
 */
char *readbuf_take(void);
/* Give b (from readbuf_take()) back to the pool. */
void readbuf_put(char *b);
/* Free the pool's buffers: at exit, with no reply in flight. */
void readbuf_shutdown(void);

#endif
