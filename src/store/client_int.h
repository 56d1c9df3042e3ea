/*
 * store/client_int.h - what the three files of the store client share:
 * client.c (set-up and close, the global segment, the heartbeat, the
 * metadata calls), client_xfer.c with client_get.c and client_calls.c
 * (the put and get paths and their batch and ranged forms) and
 * client_session.c (batch sessions).  Nothing outside those three files
 * includes this; the API is mooncake/store.h.
 *
 * struct mc_store is here because all three read it.  Its fields are set
 * by mc_store_setup and cleared by teardown (client.c), which never race
 * with other calls (store.h's contract); after set-up every other call
 * only reads them, except the session trees (under sess_lock, sessions)
 * and the heartbeat's own fields (hb_lock, ping_failed).
 */
#ifndef MC_STORE_CLIENT_INT_H
#define MC_STORE_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/list.h"
#include "base/log.h"
#include "mem/hostmem.h"
#include "mooncake/status.h"
#include "mooncake/store.h"
#include "mooncake/te.h" /* mc_batch_id */
#include "store/offload_server.h"
#include "store/proto.h"

struct mc_master_conn;
struct mc_offload_pool;

/* One extra segment: file-backed (map, map_len) or allocated (mem). */
struct mc_store_xseg {
	struct mc_store_uuid id;
	void *base;
	uint64_t size;
	void *map; /* munmap(map, map_len); NULL when mem */
	size_t map_len;
	struct mc_hostmem *mem;
	bool unmounted;	 /* taken off the master: the remount leaves it out */
	bool freeing;	 /* an unmount_and_free owns it */
	bool registered; /* with the engine (an unmount takes it out) */
	bool fenced;	 /* taken out by the fence (client_fence.c): put back with it */
	char *location;	 /* the engine's location it was registered with, or NULL */
	/* an unmount with a grace period: deregister at this mc_now_ms()
	 * (the heartbeat does, client_mount.c), 0: none */
	uint64_t dereg_at;
	unsigned busy; /* task batches reading from it (mc_store_xseg_hold) */
};
struct mc_client_metrics;
struct mc_http;
struct mc_dummy;

/* A put credit this client holds (client_credit.c): a block the master
 * reserved for its puts; rep's strings live in b's answer. */
struct mc_store_credit_batch;
struct mc_store_credit {
	struct mc_store_replica rep; /* id: the credit's; size: the block's */
	struct mc_store_credit_batch *b;
	uint64_t granted_ns;
};

struct mc_store_credits {
	pthread_mutex_t lock; /* everything below */
	uint32_t max;	      /* MC_STORE_PUT_CREDIT: credits held at most, 0 = off */
	uint64_t window_ns;   /* MC_STORE_PUT_CREDIT_MS: used within this of the ask */
	uint64_t views;	      /* mc_master_conn_epoch when they were granted */
	uint64_t none_until;  /* ns: the master granted none; ask again after this */
	struct mc_store_credit *v;
	uint32_t n;
	uint64_t *rel; /* ids to give back with the next PutCredit */
	uint32_t nrel, rel_cap;
};

struct mc_store {
	bool ready;
	struct mc_store_credits credits; /* put credits (client_credit.c) */
	struct mc_master_conn *conn;
	struct mc_te *te;
	bool own_te;
	char name[256];	   /* segment name: the engine's local name */
	char host_id[256]; /* "" = unknown */
	char protocol[16];
	char tenant[256];
	struct mc_store_uuid client_id;
	bool local_memcpy; /* own-segment replicas by memcpy (MC_STORE_MEMCPY) */
	bool verify;	   /* sign puts, check reads (MC_STORE_VERIFY; client_verify.c) */
	/* replica locations under lease (MC_STORE_LOCATION_CACHE,
	 * client_loccache.c); NULL when off */
	struct mc_store_loccache *loc;
	bool trailers; /* with verify, MC_STORE_CHUNK_TRAILERS and a minor-10 master:
			* puts write chunk-sum trailers (tests set it directly) */
	/* bytes per key that the master's answers of each kind decoded to,
	 * the most seen: the next answer's arena (mc_store_answer_arena) */
	atomic_size_t answer_per_key[2];

	/* global segment */
	void *seg;
	uint64_t seg_size;
	struct mc_hostmem *seg_mem; /* the mapping behind seg (mem/hostmem.h) */
	bool seg_registered;	    /* under xseg_lock once set up (an unmount clears it) */
	bool seg_fenced;	    /* the fence took it out (client_fence.c; xseg_lock) */
	uint64_t seg_dereg_at;	    /* as an extra segment's dereg_at (xseg_lock) */
	bool seg_mounted;
	atomic_bool seg_unmounted; /* mc_store_unmount_segment took it off (any thread) */
	struct mc_store_uuid seg_id;

	/* extra segments (client_mount.c): mount_segment and friends */
	pthread_mutex_t xseg_lock; /* xsegs, n_xsegs and every entry's flags */
	pthread_cond_t xseg_idle;  /* an entry's busy fell to 0 */
	/* held by the heartbeat's remount (its list and its call) and by an
	 * unmount (its flag and its call): a remount never mounts again a
	 * segment unmounted meanwhile */
	pthread_mutex_t remount_lock;
	struct mc_store_xseg *xsegs;
	size_t n_xsegs;
	/* the earliest dereg_at of any segment (UINT64_MAX: none): the
	 * heartbeat wakes then (client_mount.c, "Unmounted memory") */
	atomic_uint_fast64_t dereg_due;

	/* sessions (spec store.md 1.11): tsearch trees of struct session by key */
	pthread_mutex_t sess_lock; /* the trees and every session's users/detached */
	pthread_cond_t sess_cond;  /* a waited-for session lost its last user */
	void *get_sessions;
	void *put_sessions;

	/* heartbeat */
	pthread_t hb;
	bool hb_started;
	bool hb_stop; /* under hb_lock */
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	atomic_bool ping_failed;
	/* the remount on a new master leader (master_conn.c) ran while a mount
	 * or unmount was under way: the heartbeat remounts again */
	atomic_bool remount_again;
	/* the fence (client_fence.c): its thread, the send time of the last
	 * ping answered OK (0: none), the master's client_ttl (0: unknown, an
	 * older master: no fence), whether the segments are out (set under
	 * xseg_lock), how many times they went out */
	pthread_t fence_th;
	bool fence_started;
	atomic_uint_fast64_t ping_ok_ms;
	atomic_uint_fast64_t fence_ttl_ms;
	atomic_bool fenced;
	atomic_uint_fast64_t fences;
	atomic_bool pings_held; /* tests: the heartbeat sends no ping (a cut-off master) */
	/* holders spoil (client_hspoil.c): blocks of ours spoiled, counted
	 * once the SpoilDone naming them was answered (or none was due) */
	atomic_uint_fast64_t hspoils;

	/* SSD tier: readers of LOCAL_DISK replicas (client_disk_read.c) */
	struct mc_offload_pool *offload_pool;
	atomic_uint_fast64_t offload_reads; /* objects read through an offload RPC */
	atomic_uint_fast64_t read_retries;  /* reads run again from another replica */

	/* SSD tier: this client's disk copies (client_offload.c), with
	 * enable_ssd_offload; disk NULL when off */
	struct mc_offload_config offload_cfg;
	struct mc_disk_store *disk;
	struct mc_offload_server *osrv;
	char disk_path[512];
	bool disk_mounted; /* the local-disk segment is mounted (heartbeat thread) */
	atomic_bool disk_remount;
	bool promotion_off; /* the master answered promotion NOT_SUPPORTED (heartbeat thread) */
	bool no_tasks;	    /* the master answered FetchTasks NOT_SUPPORTED (heartbeat thread) */
	pthread_t ohb;
	bool ohb_started;
	bool ohb_stop;			 /* under hb_lock */
	pthread_cond_t ohb_cond;	 /* with hb_lock: the offload heartbeat's sleep */
	atomic_uint_fast64_t ohb_passes; /* offload heartbeat passes done (for tests) */
	/* the legacy shared-FS DISK tier (client_fsdir.c): the file writer,
	 * made with the first DISK replica to write */
	struct mc_store_fs *fs;
	atomic_uint_fast64_t fs_reads; /* objects read from a DISK file */
	/* observability: allocated by mc_store_new, read from any thread */
	struct mc_client_metrics *metrics;
	struct mc_http *http; /* the client HTTP server, or NULL (client_http.c) */
	/* a dummy client's connection to its daemon (dummy_client.c), or NULL */
	struct mc_dummy *dummy;
	/* ranged reads checked chunk by chunk (client_ranges.c): slots of
	 * MC_STORE_CHUNK bytes for the chunks a range covers in part, in one
	 * region registered with the engine at first use */
	pthread_mutex_t scratch_lock;
	char *scratch;
	uint32_t scratch_free; /* bit i: slot i is free */
	bool scratch_failed;   /* registering it failed: per-call buffers only */
	/* put sessions written out of order: bytes of chunks copied aside
	 * (client_verify.c, at most MC_STORE_SESSION_STAGE) */
	atomic_uint_fast64_t sess_staged;
};

/* One object's side of a transfer: its user buffers (scatter-gather) and
 * the replicas to write, or the one replica to read. */
struct mc_store_io {
	void *const *bufs;
	const size_t *lens;
	size_t nbufs;
	uint64_t len; /* bytes to move (read: the object size) */
	const struct mc_store_replica *reps;
	uint32_t nreps;
	struct mc_proto_str key; /* the object's (a LOCAL_DISK read asks the owner by key) */
	mc_status status;	 /* in: MC_OK to take part; out: result */
	/* reads (mc_store_io_alternates): every replica of the object, which a
	 * read that failed to transfer falls back to (client_xfer.c, "Retries") */
	const struct mc_store_replica *alts;
	uint32_t nalts;
	uint64_t alt_off;	     /* a range's offset in the object (reps moved by it) */
	uint64_t tried;		     /* bit i: alts[i] was read from */
	struct mc_store_replica cur; /* the alternate being read, moved by alt_off */
	/* integrity (client_verify.c): a write asks for its checksum (sign)
	 * and gets it in cksum (has_cksum); a read of a whole object whose
	 * list carries one is checked against it (check, cksum) */
	bool sign, has_cksum, check, checked;
	uint64_t cksum;
	/* a write's chunk checksums (sign; MC_STORE_CHUNK, mc_malloc'd, freed
	 * by mc_store_io_sums_free), when it has more than one chunk */
	uint64_t *chunk_sums;
	uint32_t nchunks;
	/* a read checked chunk by chunk (a range, client_ranges.c): io->len
	 * bytes from a chunk's start, chunk_want[i] the sum of its i-th chunk */
	const uint64_t *chunk_want;
	/* chunk-sum trailers (minor 10, client_verify.c "Trailers"): a write
	 * with tlen puts its trailer (tsums, from the sign) after its value in
	 * every memory replica; a read with tlen and check reads the object's
	 * trailer too (tlen bytes at tbl_at past where io starts, into tbl,
	 * which mc_store_run_transfers provides) and checks it against cksum
	 * and each MC_STORE_TCHUNK of io (io starts at chunk tbl_first)
	 * against its entry */
	uint64_t tlen, tbl_at, tbl_first;
	uint64_t *tsums;
	uint64_t tsigned; /* a write's chunks whose sums are in tsums so far */
	char *tbl;
	bool twritten;	       /* a write's trailer is written or queued */
	bool renew;	       /* run again: its holder restarted (client_xfer.c) */
	bool credit;	       /* a write into a put credit's block: never run again */
	uint64_t lease_ttl_ms; /* a read's lease, from its replica list */
	/* a read from a cached location (client_loccache.c): a mismatch
	 * means the location is stale, not the replica corrupt, so it is
	 * neither warned about nor counted */
	bool cached;
};

/*
 * Let io (a read of len bytes at offset off of its object, from
 * list->replicas[chosen]) fall back to the object's other complete
 * replicas when a transfer fails.  list must outlive the transfer.
 */
void mc_store_io_alternates(struct mc_store_io *io, const struct mc_store_replica_list *list,
			    const struct mc_store_replica *chosen, uint64_t off);

/* Object ranges as objects of their own (client_xfer.c, "Ranged calls"). */
struct mc_store_ranges {
	struct mc_store_io *ios;
	struct mc_store_replica *reps; /* moved copies, nreps per io */
	void **bufs;		       /* one per io */
	size_t *lens;		       /* one per io */
	size_t n, cap;
	size_t nreps, reps_cap;
};

/* ---- small helpers ---- */

/*
 * A read from r is thrown away (MC_ERR_LEASE_EXPIRED) if it finishes after
 * the lease GetReplicaList granted: the lease is what keeps a memory block
 * (and a DISK file) from being freed or rewritten under the read.  A
 * LOCAL_DISK read is not: the owner finds the copy by key and serves it
 * from a staging extent guarded by its own ttl (client_disk_read.c, whose
 * reads fail when they outlive it), so the lease does not apply to it and
 * a slow disk read is not failed for it.
 */
static inline bool mc_store_read_leased(const struct mc_store_replica *r)
{
	return r->type != MC_STORE_REPLICA_LOCAL_DISK;
}

static inline struct mc_proto_str mc_store_tenant(const struct mc_store *s)
{
	return mc_proto_str_c(s->tenant);
}

static inline mc_status mc_store_check_ready(const struct mc_store *s)
{
	if (s && s->dummy)
		return mc_set_error(MC_ERR_NOT_SUPPORTED,
				    "this call is not available on a dummy client yet (issue 15)");
	if (!s || !s->ready)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store client is not set up");
	return MC_OK;
}

static inline mc_status mc_store_check_key(const char *key)
{
	if (!key || !*key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "empty key");
	return MC_OK;
}

/* The first entry of results that is not MC_OK, else MC_OK. */
static inline mc_status mc_store_first_failure(const mc_status *results, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (results[i] != MC_OK)
			return results[i];
	return MC_OK;
}

/* The first negative entry (a status) of size-or-status results, else MC_OK. */
static inline mc_status mc_store_first_failure_i64(const int64_t *results, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (results[i] < 0)
			return (mc_status)results[i];
	return MC_OK;
}

/* [off, off + len) lies inside [0, size). */
/* mc_store_check_buffer for a read's destination: also refuses a buffer
 * registered read-only (MC_STORE_BUFFER_READ_ONLY). */
mc_status mc_store_check_dest(struct mc_store *s, const void *buf, size_t len);

static inline bool mc_store_range_inside(uint64_t off, uint64_t len, uint64_t size)
{
	return len <= size && off <= size - len;
}

/* ---- client_ranges.c ---- */

/* Deregister and free the scratch slots of ranged reads (mc_store_close). */
void mc_store_scratch_free(struct mc_store *s);

/*
 * Ranged reads checked chunk by chunk (get_into_ranges, get sessions):
 * _init for up to nios ranges; _add one range of object o into dst (as
 * mc_store_ranges_add, widened to the chunks it touches when o has chunk
 * sums; o->list, when set, gives it the object's other replicas); _ready
 * once all are added, before mc_store_run_transfers (scratch for the
 * partial chunks); _done for range k when its read succeeded (the asked
 * bytes of its partial chunks into its buffer); _release at the end.
 */
struct mc_store_chk_obj {
	struct mc_proto_str key;
	const struct mc_store_replica *rep;	  /* the replica read */
	const struct mc_store_replica_list *list; /* NULL: no fallback */
	bool has_cksum;
	uint64_t cksum;
	struct mc_store_chunk_sums sums; /* none: n = 0 */
	struct mc_proto_opt_u64 table;	 /* minor 10: the trailer's hash */
};
struct chunk_plan;
/* The scratch of one call: n slots of MC_STORE_CHUNK bytes, registered
 * with the engine: the client's pooled ones first, then slots of a buffer
 * of its own (registered for the call) when those run out.  _get (MC_OK
 * or MC_ERR_NOMEM), then _put in either case gives them back. */
struct mc_store_scratch {
	char **slots;
	size_t n, pooled, next;
	char *own; /* registered for the call, or NULL */
};
mc_status mc_store_scratch_get(struct mc_store *s, struct mc_store_scratch *sc, size_t n);
void mc_store_scratch_put(struct mc_store *s, struct mc_store_scratch *sc);
struct mc_store_chk {
	struct chunk_plan *plans; /* per range */
	struct mc_store_scratch *sc;
	size_t nslots;		    /* of MC_STORE_CHUNK (minor-9 plans) */
	size_t npieces, piece_next; /* of MC_STORE_TCHUNK (trailer plans), after them */
	size_t nplans, nwhole;	    /* plans; of them, disk copies read whole */
};
mc_status mc_store_chk_init(struct mc_store_chk *c, size_t nios);
size_t mc_store_chk_add(struct mc_store *s, struct mc_store_chk *c, struct mc_store_ranges *rs,
			const struct mc_store_chk_obj *o, void *dst, uint64_t off, uint64_t len);
mc_status mc_store_chk_ready(struct mc_store *s, struct mc_store_chk *c,
			     struct mc_store_ranges *rs);
/* After the reads: the ranges checked by a trailer that failed on every
 * memory replica are read once more, whole, from their object's disk copy
 * (which holds no trailer; client_verify.c checks a whole read of it). */
void mc_store_chk_from_disk(struct mc_store *s, struct mc_store_chk *c, struct mc_store_ranges *rs);
void mc_store_chk_done(const struct mc_store_chk *c, const struct mc_store_ranges *rs, size_t k);
void mc_store_chk_release(struct mc_store *s, struct mc_store_chk *c);

/* ---- client_xfer.c ---- */

/* Check a call's config; nkeys: the keys of the call, which group_ids must
 * match one to one; value_call: a single-buffer call, which refuses
 * prefer_alloc_in_same_node as upstream does. */
mc_status mc_store_check_config(const struct mc_store_config *cfg, bool value_call, size_t nkeys);

/*
 * Move every object in ios whose status is MC_OK: writes go to all its
 * replicas, reads come from reps[0].  Everything is submitted as one
 * engine batch so the transfers overlap.  Sets each status.  A read that
 * fails to transfer and has alternates (mc_store_io_alternates) is tried
 * again from its next complete replica on another segment, and the
 * master is told which segments could not be read (ReportUnreachable).
 */
void mc_store_run_transfers(struct mc_store *s, struct mc_store_io *ios, size_t n, int opcode);
/* The heartbeat's turn at copy and move tasks (client_tasks.c): true when
 * it stopped at its time budget with tasks still coming. */
bool mc_store_tasks_poll(struct mc_store *s);
/* "<first>-<second>" in decimal (client_tasks.c) */
bool mc_store_parse_seg_id(const char *str, struct mc_store_uuid *out);
/* UnmountSegment (grace 0) or GracefulUnmountSegment of segment id. */
mc_status mc_store_master_unmount(struct mc_store *s, const struct mc_store_uuid *id,
				  uint64_t grace_period_ms);

/* client_put.c: a put (upsert) of key from nbufs buffers, len bytes in
 * all: Start, the writes, End or Revoke, its cached location dropped
 * before and after. */
mc_status mc_store_put_one(struct mc_store *s, const char *key, void *const *bufs,
			   const size_t *lens, size_t nbufs, uint64_t len,
			   const struct mc_store_config *cfg, bool upsert);
/* The batch form: the keys whose results[i] is MC_OK on entry are put,
 * results[i] their outcome. */
void mc_store_put_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		       const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
		       size_t n, const struct mc_store_config *cfg, bool upsert,
		       mc_status *results);

/*
 * BatchPutStart (BatchUpsertStart when upsert) for keys[sent[j]], j < nsent,
 * of totals[sent[j]] bytes.  On MC_OK resp holds one item per sent key, in
 * order.  ahead (may be NULL): writes signed while the call is in flight
 * (mc_store_verify_ahead).
 */
struct mc_store_ahead;
mc_status mc_store_send_put_start(struct mc_store *s, const char *const *keys,
				  const uint64_t *totals, const uint64_t *trailers,
				  const uint32_t *sent, uint32_t nsent,
				  const struct mc_store_config *cfg, bool upsert,
				  struct mc_store_ahead *ahead, struct mc_store_msg *resp);
/* The chunk-sum trailer of the len bytes at p into out
 * (mc_store_trailer_len(len) bytes). */
void mc_store_trailer_build(const void *p, uint64_t len, void *out);
/* The trailer a put of len bytes writes (minor 10; 0: none). */
uint64_t mc_store_trailer_for(struct mc_store *s, uint64_t len);

/* BatchPutRevoke (BatchUpsertRevoke) of n keys; logs a failure.  On MC_OK
 * the caller releases resp. */
mc_status mc_store_send_put_revoke(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				   bool upsert, struct mc_store_msg *resp);

/* The replica to read: one in this client's own segment, else the first
 * memory replica, else the first complete LOCAL_DISK one (read through
 * its owner's offload RPC), else the first complete DISK one (its file,
 * client_fsdir.c); NULL if none is readable here.  Borrowed from l. */
const struct mc_store_replica *mc_store_choose_replica(const struct mc_store *s,
						       const struct mc_store_replica_list *l);

/* GetReplicaList of key (which grants a read lease); on MC_OK the caller
 * releases resp (client_get.c). */
mc_status mc_store_lookup(struct mc_store *s, const char *key, struct mc_store_msg *resp);

/* One BatchGetReplicaList for keys[0..n), decoded into a (NULL: malloc;
 * in use for the call only: the caller releases resp with
 * mc_store_msg_release_in(a, resp)); an answer that does not hold exactly
 * n items is released and refused (MC_ERR_PROTOCOL). */
mc_status mc_store_lookup_batch_in(struct mc_store *s, struct mc_store_decode_arena *a,
				   struct mc_proto_str *keys, uint32_t n,
				   struct mc_store_msg *resp);
/* mc_store_lookup_batch_in asking also for the chunk checksums (minor 9,
 * with verification on; no arena); resp's batch_replica_list.n_chunks is
 * n or 0. */
mc_status mc_store_lookup_chunks(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				 struct mc_store_msg *resp);
/* One key's read into bufs or alloc's buffer: its size or a status (client_get.c). */
int64_t mc_store_get_one(struct mc_store *s, const char *key, void *const *bufs, const size_t *lens,
			 size_t nbufs, uint64_t cap, mc_store_alloc_fn alloc, void *ctx);
/* Batch read of every key whose results[i] is MC_OK on entry (client_get.c). */
void mc_store_get_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		       const size_t *const *lens, const size_t *nbufs, size_t n,
		       mc_store_batch_alloc_fn alloc, void *actx, int64_t *results);

/*
 * The master's answer to a batch call decodes into one arena of its own
 * (proto.h) rather than a malloc per string and list (a PutCredit answer
 * holds three strings per credit, a BatchGetReplicaList three per replica):
 * mc_store_answer_arena sizes a for n keys from what answers of kind
 * decoded to before; mc_store_answer_learn records what this one took.
 * The answer is released with mc_store_msg_release_in(a, ..), then a freed
 * (mc_store_decode_arena_free).
 */
enum mc_store_answer_kind { MC_STORE_ANSWER_CREDIT, MC_STORE_ANSWER_LOOKUP };
void mc_store_answer_arena(struct mc_store *s, enum mc_store_answer_kind kind, uint32_t n,
			   struct mc_store_decode_arena *a);
void mc_store_answer_learn(struct mc_store *s, enum mc_store_answer_kind kind, uint32_t n,
			   const struct mc_store_decode_arena *a);

/* Room for nios ranges with nreps replica copies in all. */
mc_status mc_store_ranges_init(struct mc_store_ranges *rs, size_t nios, size_t nreps);
void mc_store_ranges_release(struct mc_store_ranges *rs);

/* Add bytes [off, off + len) of an object with replicas reps[0..nreps),
 * moved to or from buf (a read uses the first replica only); returns the
 * range's index in rs->ios.  The room was reserved by mc_store_ranges_init. */
size_t mc_store_ranges_add(struct mc_store_ranges *rs, void *buf, uint64_t off, uint64_t len,
			   const struct mc_store_replica *reps, uint32_t nreps);

/* mc_store_get_into_ranges without its metrics (client_ranges.c). */
mc_status mc_store_get_into_ranges_untimed(struct mc_store *s,
					   const struct mc_store_range_read *reads, size_t n);

/* A read that failed and may be tried from another replica. */
static inline bool mc_store_io_retryable(const struct mc_store_io *io)
{
	return (io->status == MC_ERR_TRANSFER_FAIL || io->status == MC_ERR_CHECKSUM_MISMATCH) &&
	       io->alts && io->nreps;
}

/* ---- client_loccache.c ---- */

/* One cached location: the replica a get read, its object's checksum,
 * until when the lease keeps it there.  Referenced while a read uses it. */
struct mc_store_loc {
	struct mc_store_loc *hnext;
	struct mc_list lru;
	atomic_uint refs;
	uint64_t hash;
	uint64_t deadline_ms; /* mc_now_ms(): usable before this */
	uint64_t conn_epoch;  /* the master connection it was learnt on */
	uint64_t cksum;
	bool table;		     /* cksum is the hash of the object's chunk-sum trailer */
	struct mc_store_replica rep; /* strings point into key[] */
	size_t key_len;
	char key[]; /* then the replica's strings */
};

/* What a get samples just before it sends its lookup. */
struct mc_store_loc_mark {
	uint64_t sent_ms;
	uint64_t wepoch;
	uint64_t conn_epoch;
};

/* s->loc for cap entries (0: off, s->loc NULL). */
mc_status mc_store_loc_init(struct mc_store *s, uint64_t cap);
void mc_store_loc_free_all(struct mc_store *s);
/* The part of a lease of ttl_ms that a cached location does not use. */
uint64_t mc_store_loc_margin_ms(uint64_t ttl_ms);
/* key's live entry, referenced (unref when done), or NULL. */
struct mc_store_loc *mc_store_loc_find(struct mc_store *s, const char *key, size_t len);
/* mc_store_loc_find of keys[0..n) but those whose skip[i] is not MC_OK
 * (skip may be NULL), under one lock and one clock reading per 64 keys:
 * out[i] the entry or NULL; returns how many were found. */
size_t mc_store_loc_find_many(struct mc_store *s, const char *const *keys, const int64_t *skip,
			      size_t n, struct mc_store_loc **out);
void mc_store_loc_unref(struct mc_store_loc *e);
void mc_store_loc_mark(struct mc_store *s, struct mc_store_loc_mark *mk);
/* Remember that key's object (list) was read from r, checked, with the
 * lookup marked mk; nothing when any condition for caching fails. */
void mc_store_loc_add(struct mc_store *s, const struct mc_store_loc_mark *mk, const char *key,
		      size_t len, const struct mc_store_replica_list *l,
		      const struct mc_store_replica *r);
/* An override's spoil tails (proto.h): spoil the listed blocks, a request
 * sent at sent_ms (client_loccache.c). */
void mc_store_spoil(struct mc_store *s, const struct mc_store_replica *list, uint32_t n,
		    const struct mc_proto_opt_u64 *spoil_ms, uint64_t sent_ms);
/* A Ping answer's holder spoil tails (minor 15, client_hspoil.c): spoil the
 * listed blocks of this client's own segments, the ping sent at sent_ms. */
void mc_store_holder_spoil(struct mc_store *s, uint64_t sent_ms,
			   const struct mc_store_ping_resp *p);
/* This client changes key (or keys, or every key): drop their entries. */
void mc_store_loc_forget(struct mc_store *s, const char *key, size_t len);
void mc_store_loc_forget_keys(struct mc_store *s, const char *const *keys, size_t n);
void mc_store_loc_forget_all(struct mc_store *s);
/* Entries held now (tests). */
uint64_t mc_store_loc_count(struct mc_store *s);

/* ---- client_verify.c ---- */

/* XXH3-64 of io's io->len bytes, across its buffers in order. */
uint64_t mc_store_io_hash(const struct mc_store_io *io);
/* Free a write's chunk checksums (mc_store_verify_sign). */
void mc_store_io_sums_free(struct mc_store_io *io);

/* Put credits (client_credit.c). */
void mc_store_credit_init(struct mc_store *s, int64_t max, int64_t window_ms);
/* Give every credit back (best effort) and free the pool: before the
 * connection goes. */
void mc_store_credit_fini(struct mc_store *s);
/* The heartbeat's: give back the credits too old to be used. */
void mc_store_credit_idle(struct mc_store *s);
/* Whether a put (upsert: an upsert) with cfg may go through credits. */
bool mc_store_credit_on(struct mc_store *s, const struct mc_store_config *cfg, bool upsert);
/* Put the keys of a batch whose results[i] is MC_OK through credits
 * (n = 1: one key; cfg's preferred_segment, if any, is where the credits
 * are asked for and taken from); those that must go the PutStart/PutEnd way instead get
 * results[i] = MC_OK and fallback[i] = true; the others their result. */
void mc_store_credit_put(struct mc_store *s, const char *const *keys, void *const *const *bufs,
			 const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
			 size_t n, const struct mc_store_config *cfg, mc_status *results,
			 bool *fallback);
/* Writes: the checksum of every io with status MC_OK that asked for one
 * (sign) and lies in host memory, when s->verify. */
void mc_store_verify_sign(struct mc_store *s, struct mc_store_io *ios, size_t n);
/* Signing ahead: the writes ios[0..n) (bufs, lens, nbufs, len, tlen,
 * sign, status set) hashed a piece per call of mc_store_verify_ahead
 * while their Start is in flight (mc_master_conn_call_working); what is
 * left, mc_store_verify_sign does. */
struct mc_store_ahead {
	struct mc_store *s;
	struct mc_store_io *ios;
	size_t n, next;
};
bool mc_store_verify_ahead(void *ahead);
/* Reads checked by a trailer: one buffer for all their trailers (each
 * io's tbl points into it; the caller frees it), or NULL when none is
 * (no memory: they are read unchecked). */
char *mc_store_verify_trailers(struct mc_store *s, struct mc_store_io *ios, size_t n);
/* Reads: every io with status MC_OK and check set, not checked yet, is
 * hashed; a mismatch sets MC_ERR_CHECKSUM_MISMATCH and is counted. */
void mc_store_verify_check(struct mc_store *s, struct mc_store_io *ios, size_t n);
/* A read of io reads its object's trailer (a range of an object with one);
 * a whole read does not: it is checked by the trailer its bytes make. */
bool mc_store_verify_reads_trailer(const struct mc_store_io *io);
/* io reads a copy on disk (LOCAL_DISK or DISK), which holds no trailer. */
bool mc_store_io_from_disk(const struct mc_store_io *io);
/* The longest request a read of io is queued in (UINT64_MAX: no limit):
 * a read to be checked comes in pieces so that they can be hashed as they
 * land (mc_store_verify_pass_new). */
uint64_t mc_store_verify_chunk(struct mc_store *s, const struct mc_store_io *io);
/* A read of io from this client's own segment at src, to be checked: the
 * bytes are copied piece by piece, each hashed while it is still in the
 * cache, then judged; returns io's status (MC_OK or
 * MC_ERR_CHECKSUM_MISMATCH). */
mc_status mc_store_verify_copy(struct mc_store *s, struct mc_store_io *io, const char *src);
/* Reads through the engine: the hashing of one batch's pieces, done by
 * whichever thread ends each piece (mc_te_batch_on_task_end) while the
 * bytes are still in its cache, in each io's order (requests reqs[0..nreq),
 * owner[k] the io of request k, each io's requests together and in order).
 * _new (NULL when no io is to be checked, or memory is short: the check
 * after the wait then hashes them) before the batch's submit, with
 * mc_store_verify_task_end as the batch's callback; _end after the wait
 * (and after the failed ios are marked): each io still MC_OK whose pieces
 * were all hashed is judged, once (checked), and vp is freed.
 * mc_store_verify_check after the pass does what is left: the ones that
 * moved without the engine. */
struct mc_store_vpass;
struct mc_store_vpass *mc_store_verify_pass_new(struct mc_store *s, struct mc_store_io *ios,
						size_t n, const struct mc_xfer_req *reqs,
						const uint32_t *owner, size_t nreq);
void mc_store_verify_task_end(void *vp, size_t task, mc_status status);
/* The pass has reads into device memory to be checked as the engine's
 * staging thread sees them: set mc_store_verify_task_staged as the batch's
 * staging callback (mc_te_batch_on_task_staged), with vp. */
bool mc_store_verify_pass_staged(const struct mc_store_vpass *vp);
void mc_store_verify_task_staged(void *vp, size_t task, uint64_t off, const void *host,
				 uint64_t len);
void mc_store_verify_pass_end(struct mc_store *s, struct mc_store_vpass *vp);

/*
 * A put session's object checksums (client_session.c), written in any
 * order: pieces that continue the bytes hashed so far are hashed as their
 * writes succeed (the whole hash and each chunk's); a piece out of order
 * gives the chunks it covers whole their sums from its source bytes (and
 * a host copy of them, "staged", within MC_STORE_SESSION_STAGE of the
 * client, so the whole hash can take them in order later); a chunk written
 * in parts, by a failed write, from device memory, or never, is read back
 * at the end (_complete).  NULL from _new when verification is off or
 * memory is short: the session then signs nothing.  _add is not
 * thread-safe: the caller serialises (sess_lock).
 */
#define MC_STORE_SESSION_STAGE (64ull << 20)
struct mc_store_seq_hash;
struct mc_store_seq_hash *mc_store_seq_hash_new(struct mc_store *s, uint64_t size);
void mc_store_seq_hash_add(struct mc_store *s, struct mc_store_seq_hash *h, uint64_t off,
			   const void *p, uint64_t len, bool ok);
/* At the session's end, with no write in flight: hash what was not hashed
 * as written, read back from reps[0] (key for the logs).  MC_OK: the sums
 * are complete (_done, _chunks); MC_ERR_CHECKSUM_MISMATCH: a chunk read
 * back differs from the bytes its write sent (the replica is bad); any
 * other status (the read failed, no memory): the object goes unsigned. */
mc_status mc_store_seq_hash_complete(struct mc_store *s, struct mc_store_seq_hash *h,
				     struct mc_proto_str key, const struct mc_store_replica *reps);
/* The object's checksum once _complete succeeded; absent otherwise. */
struct mc_proto_opt_u64 mc_store_seq_hash_done(const struct mc_store_seq_hash *h);
/* Its chunk sums (owned by h) once _complete succeeded, when it has more
 * than one chunk; n = 0 otherwise. */
struct mc_store_chunk_sums mc_store_seq_hash_chunks(const struct mc_store_seq_hash *h);
void mc_store_seq_hash_free(struct mc_store_seq_hash *h);

/* Replicas found corrupt by one call, reported together. */
#define MC_STORE_CORRUPT_MAX 16
struct mc_store_corrupt {
	struct mc_store_corrupt_item v[MC_STORE_CORRUPT_MAX];
	uint32_t n;
};
/* Remember io's replica (reps[0]) as corrupt (key borrowed from io),
 * unless the read, begun at t0 (mc_now_ms), may have outlived half its
 * lease. */
void mc_store_corrupt_add(struct mc_store_corrupt *c, const struct mc_store_io *io, uint64_t t0);
/* ReportCorrupt of what c holds; the master drops those replicas.  An
 * older master's NOT_SUPPORTED changes nothing. */
void mc_store_report_corrupt(struct mc_store *s, const struct mc_store_corrupt *c);

/* ---- client_disk_read.c ---- */

/*
 * Reads every io of ios[0..n) whose status is MC_OK and whose replica is
 * LOCAL_DISK: per owner endpoint, BatchGetOffloadObject, one engine batch
 * from the owner's staging buffer into the io's buffers, then
 * ReleaseOffloadBuffer; what the owner's buffer had no room for is asked
 * again after the release.  A LOCAL_DISK replica's address is the offset
 * of the io's bytes in the object (0, or a range's start) and its size the
 * whole object's.  Sets each status; counts the objects read in
 * s->offload_reads.
 */
void mc_store_disk_read(struct mc_store *s, struct mc_store_io *ios, size_t n);

/* ---- client_fsdir.c: the legacy shared-FS DISK tier ---- */

struct mc_store_fs;
struct mc_store_fs_job;
/* The DISK replica among reps[0..n), or NULL. */
const struct mc_store_replica *mc_store_fs_replica(const struct mc_store_replica *reps, uint32_t n);
/* A copy of io's value (io->key its key) to be written as the file of
 * DISK replica r; NULL without memory. */
struct mc_store_fs_job *mc_store_fs_job_new(const struct mc_store_io *io,
					    const struct mc_store_replica *r, bool upsert);
/* After PutEnd(MEMORY): hand j to the file writer (takes j; may wait for
 * room in the queue). */
mc_status mc_store_fs_submit(struct mc_store *s, struct mc_store_fs_job *j);
/* Free j unsubmitted (NULL is a no-op). */
void mc_store_fs_job_drop(struct mc_store *s, struct mc_store_fs_job *j, bool revoke);
/* PutEnd (end) or PutRevoke of key's DISK replica replica_id (0: not
 * named; named only to a master of minor version 4 or later). */
mc_status mc_store_fs_report(struct mc_store *s, const char *key, bool upsert, bool end,
			     uint64_t replica_id);
/* Read io (status MC_OK, reps[0] a DISK replica) from its file; sets
 * io->status. */
void mc_store_fs_read(struct mc_store *s, struct mc_store_io *io);
/* Wait until every file submitted is written and reported. */
void mc_store_fs_flush(struct mc_store *s);
/* Drain the queue, stop the writer (before the master connection goes). */
void mc_store_fs_stop(struct mc_store *s);

/* ---- client_offload.c ---- */

/* Opens the disk store in path (NULL or "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)
 * and starts the offload server (its staging buffer registered with the
 * engine); before the global segment is registered.  On failure nothing
 * is left. */
mc_status mc_store_offload_open(struct mc_store *s, const char *path);
/* After the segment is mounted: mounts the local-disk segment,
 * re-registers what is on disk, starts the heartbeat.  MC_OK also when the
 * master has no offload (logged; the tier is closed).  A no-op without
 * mc_store_offload_open.  On failure the tier is closed. */
mc_status mc_store_offload_start(struct mc_store *s);
/* Stops the heartbeat and the server, unmounts the local-disk segment,
 * closes the disk store; a no-op when the tier is off. */
void mc_store_offload_stop(struct mc_store *s);
/* The master forgot this client: mount and re-register again, soon. */
void mc_store_offload_remount(struct mc_store *s);
/* unmount_local_disk_segment: stop the heartbeat, unmount the local-disk
 * segment at the master; the server and disk store stay until close.
 * INVALID_PARAMS when the tier is off or already withdrawn. */
mc_status mc_store_offload_withdraw(struct mc_store *s);

/* ---- client_mount.c ---- */

/* a fresh random id (client.c) */
struct mc_store_uuid mc_store_random_uuid(void);

void mc_store_xsegs_init(struct mc_store *s);
/* close: unmount (best effort), deregister and unmap every extra segment. */
void mc_store_xsegs_free(struct mc_store *s);
/* The extra segments still mounted, as the remount sends them: *out
 * (mc_free it) holds n entries whose strings point into s. */
size_t mc_store_xsegs_mounted(struct mc_store *s, struct mc_store_segment **out);
/* A copy task's source [addr, addr+len) inside a mounted extra segment:
 * true, with that segment kept mapped (its id in *id) until
 * mc_store_xseg_release; false when no such segment holds all of it. */
bool mc_store_xseg_hold(struct mc_store *s, uint64_t addr, uint64_t len, struct mc_store_uuid *id);
void mc_store_xseg_release(struct mc_store *s, const struct mc_store_uuid *id);
/* An unmount of the global segment (x NULL) or extra segment x, answered
 * by the master, whose request was sent at sent_ms: its memory leaves the
 * engine now (grace 0) or at sent_ms + grace (mc_store_unmounted_dereg).
 * xseg_lock held. */
void mc_store_unmounted_locked(struct mc_store *s, struct mc_store_xseg *x, uint64_t sent_ms,
			       uint64_t grace_period_ms);
/* The heartbeat: deregister what is due; the next deadline (or UINT64_MAX). */
uint64_t mc_store_unmounted_dereg(struct mc_store *s);

/* The holder's fence (client_fence.c): its thread (stopped with the
 * heartbeat: hb_stop, hb_cond); a ping sent at sent_ms was answered r:
 * whether a NEED_REMOUNT may remount now (false: fenced, wait); a new
 * leader was reached: the memory goes back now. */
mc_status mc_store_fence_start(struct mc_store *s);
void mc_store_fence_join(struct mc_store *s);
bool mc_store_fence_answered(struct mc_store *s, uint64_t sent_ms,
			     const struct mc_store_ping_resp *r);
void mc_store_fence_lift(struct mc_store *s);
/* unmount_segment of an extra segment: INVALID_PARAMS when id is none. */
mc_status mc_store_xseg_unmount(struct mc_store *s, const struct mc_store_uuid *id,
				uint64_t grace_period_ms);

/* ---- client_session.c ---- */

/* close: revoke the open put sessions (best effort) and drop every
 * session.  No other call runs (mc_store_close's contract). */
void mc_store_sessions_drop_all(struct mc_store *s);

/* A dummy client's transfers (client_dummy.c): the checks, then the daemon. */
mc_status mc_store_dummy_put_copy(struct mc_store *s, const char *key, const void *const *parts,
				  const size_t *lens, size_t nparts,
				  const struct mc_store_config *cfg, bool upsert);
mc_status mc_store_dummy_put_one(struct mc_store *s, const char *key, const void *buf, size_t len,
				 const struct mc_store_config *cfg, bool upsert);
int64_t mc_store_dummy_get_one(struct mc_store *s, const char *key, void *buf, size_t cap);
mc_status mc_store_dummy_multi_check(const char *const *keys, void *const *const *bufs,
				     const size_t *const *lens, const size_t *nbufs, size_t n,
				     mc_status *sts, int64_t *r64);
mc_status mc_store_dummy_put_flat(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *lens, size_t n, const struct mc_store_config *cfg,
				  bool upsert, mc_status *results);
mc_status mc_store_dummy_get_flat(struct mc_store *s, const char *const *keys, void *const *bufs,
				  const size_t *caps, size_t n, int64_t *results);

mc_status mc_store_dummy_put_batch(struct mc_store *s, const char *const *keys,
				   const void *const *values, const size_t *lens, size_t n,
				   const struct mc_store_config *cfg, bool upsert,
				   mc_status *results);
mc_status mc_store_dummy_batch_get_alloc(struct mc_store *s, const char *const *keys, size_t n,
					 mc_store_batch_alloc_fn alloc, void *ctx,
					 int64_t *results);
/* Sessions (type GET_SESSION_START, GET_SESSION_END, PUT_SESSION_START
 * with sizes and cfg, PUT_SESSION_END, PUT_SESSION_REVOKE), ranges, replica
 * calls, tasks (ntargets SIZE_MAX: a move, targets = {source, target}) and
 * segment calls of a dummy client, through its daemon (client_dummy.c). */
mc_status mc_store_dummy_session_keys(struct mc_store *s, uint16_t type, const char *const *keys,
				      const uint64_t *sizes, size_t n,
				      const struct mc_store_config *cfg, mc_status *results);
mc_status mc_store_dummy_ranges(struct mc_store *s, bool put, const char *const *keys,
				void *const *const *bufs, const size_t *const *lens,
				const uint64_t *const *offsets, const size_t *nbufs, size_t n,
				int64_t *results);
mc_status mc_store_dummy_get_into_ranges(struct mc_store *s,
					 const struct mc_store_range_read *reads, size_t n);
int64_t mc_store_dummy_replica_desc(struct mc_store *s, const char *key,
				    struct mc_store_replica_desc *out, size_t cap);
int64_t mc_store_dummy_replica_clear(struct mc_store *s, const char *const *keys, size_t n,
				     const char *segment_name, bool *cleared);
mc_status mc_store_dummy_create_task(struct mc_store *s, const char *key,
				     const char *const *targets, size_t ntargets,
				     struct mc_store_task_uuid *id_out);
mc_status mc_store_dummy_query_task(struct mc_store *s, const struct mc_store_task_uuid *id,
				    struct mc_store_task_state *out);
mc_status mc_store_dummy_segment(struct mc_store *s, uint16_t type, const char *text, uint64_t a,
				 uint64_t b, const char *protocol, const char *location,
				 char *id_out, uint64_t *allocated_out);

#endif
