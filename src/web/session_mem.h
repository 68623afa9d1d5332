/* Internals of the in-memory session store, for tests. */
#ifndef FLARE_WEB_SESSION_MEM_H
#define FLARE_WEB_SESSION_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Entries examined by every save, and by a save into a full shard: the
 * most any call does under a shard's lock. */
#define FLARE__SESSION_SWEEP_STEP 2
#define FLARE__SESSION_SWEEP_FULL 32

/* self: the store's flare_session_store_t.self. *count: sessions held
 * (expired ones not yet swept included); *visited: entries examined by the
 * expiry sweeps since the store was made. */
void flare__session_mem_stats(void *self, size_t *count, uint64_t *visited);

/* The bound of one shard (16 shards; a session goes to one by its id). */
size_t flare__session_mem_max_per_shard(void *self);

#endif
