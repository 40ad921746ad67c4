/* readbuf.c - see readbuf.h */
#include <pthread.h>
#include <stdlib.h>

#include "readbuf.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *free_list; /* a free buffer's first bytes link the next; under lock */

char *readbuf_take(void)
{
	void *b;

	pthread_mutex_lock(&lock);
	b = free_list;
	if (b)
		free_list = *(void **)b;
	pthread_mutex_unlock(&lock);
	if (!b && posix_memalign(&b, 4096, READBUF_SIZE))
		b = NULL;
	return b;
}

void readbuf_put(char *b)
{
	pthread_mutex_lock(&lock);
	*(void **)b = free_list;
	free_list = b;
	pthread_mutex_unlock(&lock);
}

void readbuf_shutdown(void)
{
	while (free_list) {
		void *b = free_list;

		free_list = *(void **)b;
		free(b);
	}
}
