/*
 * master/master_int.h - the master's private tables, shared by master.c
 * and put.c (the request handlers), jobs.c (the requests run in slices),
 * objects.c (tables, queries), tick.c (eviction, the tick) and ssd.c (the
 * SSD tier).  Nothing outside src/master/ includes this.
 *
 * The byte budget of an object and the reasons for each layout choice are
 * written at the top of objects.c.
 */
#ifndef MC_MASTER_MASTER_INT_H
#define MC_MASTER_MASTER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "master/alloc.h"
#include "master/master.h"
#include "store/proto.h"

#define MC_MASTER_MIN_ALIGN	64u   /* allocation unit inside a segment */
#define MC_MASTER_MAX_REPLICAS	255u  /* obj.nrep is a u8 */
#define MC_MASTER_MAX_TENANTS	4096u /* tenant ids are u16; lookups scan the list */
#define MC_MASTER_MAX_PREFERRED 64u   /* preferred segment names honoured per put */
#define MC_MASTER_NO_CLIENT	UINT32_MAX
#define MC_MASTER_NO_AUX	UINT32_MAX
/* the object table's fewest slots (objects.c, tick.c) */
#define MC_MASTER_MIN_SLOTS 1024u

/* No user-space mapping ends above 2^57 (x86-64 with 5-level paging; 2^52 on arm64). */
#define MC_MASTER_MAX_USER_ADDR (1ull << 57)

/* One memory replica: a block in the allocator of segment slot seg, valid
 * while that slot's generation is still gen (a weak reference: unmounting
 * bumps the generation, so every replica on it dies at once). */
struct mc_rep {
	uint64_t addr;
	uint32_t seg;
	uint32_t gen;
};

/* Replicas beyond the first, and the checksums; allocated only when needed.
 * The chunk checksums (MC_STORE_CHUNK, valid with MC_OBJ_CKSUM) come
 * before the replicas, so that resizing the replicas (mc_master_obj_ext_fit,
 * a realloc) keeps them in place. */
struct mc_obj_ext {
	uint64_t checksum;
	uint32_t nchunks; /* 0 or mc_store_chunk_count(size) */
	uint32_t unused;
	uint64_t tail[]; /* nchunks checksums, then obj.nrep - 1 struct mc_rep */
};

enum mc_obj_flags {
	MC_OBJ_PROC = 1u << 0,	    /* being written: replicas PROCESSING */
	MC_OBJ_HARD = 1u << 1,	    /* hard-pinned: never evicted */
	MC_OBJ_SOFT = 1u << 2,	    /* soft-pinned: deadline in m->pins (PROC: kept in m->proc) */
	MC_OBJ_PIN_SET = 1u << 3,   /* PROC: commit "soft pin for mc_proc.pin ms" at End */
	MC_OBJ_PIN_CLEAR = 1u << 4, /* PROC: commit "no soft pin" at End */
	MC_OBJ_CKSUM = 1u << 5,	    /* ext->checksum is valid */
	MC_OBJ_MARK = 1u << 6,	    /* eviction: chosen in this round */
	MC_OBJ_OFFL = 1u << 7,	    /* an offload is queued or in flight (m->offl, ssd.c) */
};

struct mc_obj {
	uint64_t t;		/* COMPLETE: lease deadline (ms); PROC: PutStart time (ms) */
	struct mc_rep r0;	/* first replica, inline */
	struct mc_obj_ext *ext; /* NULL unless nrep > 1 or a checksum is stored */
	uint32_t aux;		/* PROC: index in m->proc; SOFT: index in m->pins;
				 * otherwise the writer's client slot (mc_master_obj_writer) */
	uint32_t group;		/* group slot + 1; 0 = no group */
	uint32_t size_lo;	/* bytes allocated per replica: 47 bits, size_lo | size_hi << 32 */
	uint16_t size_hi;	/* top bit: MC_OBJ_HI_TRAILER */
	uint16_t tenant;
	uint16_t key_len;
	uint8_t flags; /* enum mc_obj_flags */
	uint8_t nrep;
	char key[]; /* key_len bytes, not NUL-terminated */
};

#define MC_MASTER_MAX_VALUE ((1ull << 47) - 1)

/*
 * The object's replicas are value + trailer (minor 10, proto.h "Chunk-sum
 * trailers"): mc_obj_size, what every replica holds and what copies,
 * moves, repairs, the allocator, the log and the accounting use, counts
 * the trailer; mc_obj_vsize, what readers and writers are told, does
 * not.  With MC_OBJ_CKSUM the object's checksum is the trailer's hash.
 * A bit of size_hi (values stay below 2^47), as flags is full.
 */
#define MC_OBJ_HI_TRAILER 0x8000u

static inline uint64_t mc_obj_size(const struct mc_obj *o)
{
	return (uint64_t)o->size_lo | (uint64_t)(o->size_hi & ~MC_OBJ_HI_TRAILER) << 32;
}

static inline bool mc_obj_trailer(const struct mc_obj *o)
{
	return o->size_hi & MC_OBJ_HI_TRAILER;
}

static inline uint64_t mc_obj_vsize(const struct mc_obj *o)
{
	return mc_obj_trailer(o) ? mc_store_untrailer(mc_obj_size(o)) : mc_obj_size(o);
}

/* Set the bytes of each replica (v < 2^47) and whether they end in a trailer. */
static inline void mc_obj_set_alloc(struct mc_obj *o, uint64_t v, bool trailer)
{
	o->size_lo = (uint32_t)v;
	o->size_hi = (uint16_t)((v >> 32) | (trailer ? MC_OBJ_HI_TRAILER : 0));
}

static inline void mc_obj_set_size(struct mc_obj *o, uint64_t v)
{
	mc_obj_set_alloc(o, v, false);
}

/* An in-flight put: what is only needed while the object is PROC. */
struct mc_proc {
	struct mc_obj *o;
	uint64_t pin;	 /* pending soft-pin TTL (PIN_SET), or the kept deadline (SOFT) */
	uint32_t writer; /* client slot of the PutStart caller */
};

/* A soft pin: the heap is ordered on deadline. */
struct mc_pin {
	uint64_t deadline;
	struct mc_obj *o;
	uint32_t writer; /* the object's writer while its aux is the heap index */
};

enum mc_seg_state {
	MC_SEG_FREE = 0, /* slot unused */
	MC_SEG_MOUNTED = MC_SEGMENT_OK,
	MC_SEG_GRACEFUL = MC_SEGMENT_GRACEFULLY_UNMOUNTING,
	MC_SEG_DRAINING = MC_SEGMENT_DRAINING, /* a drain job empties it: readable, no placement */
	MC_SEG_DISK = 100, /* a client's local-disk segment: no allocator, no placement */
	MC_SEG_WAIT = 101, /* from the log (wal_log.c): not mounted again yet; no allocator */
};

struct mc_seg {
	struct mc_store_uuid id;
	char *name;
	char *te_endpoint;
	char *protocol;
	char *host_id;
	uint32_t name_len, te_len, proto_len;
	uint64_t base, size;
	struct mc_offset_alloc *alloc;
	uint64_t used;		 /* requested bytes of live replicas here */
	uint64_t deadline;	 /* GRACEFUL: unmount at this time (ms) */
	uint64_t grace_epoch_ms; /* GRACEFUL (or WAIT, was): deadline, Unix ms (0: none) */
	uint64_t mount_seq;
	uint32_t gen;
	uint32_t client;  /* client slot */
	int state;	  /* enum mc_seg_state */
	bool unreachable; /* a peer could not read it (ReportUnreachable): neither listed
			   * nor allocated until its owner pings again */
	/* WAIT: the replicas replayed onto it, in replay order, so that its
	 * remount binds them without walking the table (wal_log.c) */
	struct mc_wait_ref *wl;
	uint64_t wl_n, wl_cap;
};

/* One replica replayed onto a waiting segment: its address and object (an
 * object erased while any segment waits is kept, emptied, until none does:
 * mc_master_wal_keep_dead). */
struct mc_wait_ref {
	uint64_t addr;
	struct mc_obj *o;
};

/* A key remembered for a disk owner (removes to deliver, offloads gone). */
struct mc_dkey {
	uint16_t tenant;
	uint16_t len;
	char key[];
};

/* A FIFO ring of object pointers (may hold stale ones: checked on pop). */
struct mc_ring {
	struct mc_obj **v;
	uint32_t head, len, cap;
};

/*
 * The SSD tier of one client (ssd.c): its local-disk segment slot (whose
 * generation every LOCAL_DISK replica there names), the offloads queued
 * for it, and what it must delete.
 */
struct mc_disk {
	uint32_t seg;	      /* segment slot, state MC_SEG_DISK */
	bool offloading;      /* the client takes offload work */
	bool remove_all;      /* deliver "wipe your store" at the next heartbeat */
	uint64_t total;	      /* ReportSsdCapacity, bytes */
	uint64_t used;	      /* ReportSsdCapacity, bytes */
	struct mc_ring q;     /* objects queued for offload */
	struct mc_ring pq;    /* objects queued for promotion */
	uint32_t nflight;     /* its offload entries in m->offl: queued or handed out */
	bool backfill;	      /* some of its objects missed their offload: a lap is due */
	uint64_t bf_after;    /* ms: no lap before (the backoff after failed offloads) */
	uint32_t fail_streak; /* notify rounds in a row with failed offloads, none done */
	struct mc_dkey **rm;  /* disk copies to delete, not yet delivered */
	uint32_t nrm, rm_cap;
	struct mc_dkey **dead; /* handed out, then the object went away */
	uint32_t ndead, dead_cap;
};

/* An offload queued or handed out, keyed by object in m->offl. */
enum mc_offl_kind {
	MC_OFFL_OFFLOAD = 0, /* memory -> the owner's disk */
	MC_OFFL_PROMOTE = 1, /* the owner's disk -> memory (dst) */
};

/* An offload or promotion queued or handed out, keyed by object in m->offl. */
struct mc_offl {
	struct mc_obj *o;  /* NULL: empty slot */
	uint64_t deadline; /* cancelled at this time (ms) unless reported */
	struct mc_rep dst; /* PROMOTE, handed: the PROCESSING memory block */
	uint32_t client;   /* the disk owner's slot */
	uint8_t kind;	   /* enum mc_offl_kind */
	bool handed;	   /* given out by a heartbeat, awaiting its report */
};

/* A put credit (credit.c): a block reserved for one client's puts. */
struct mc_credit {
	uint64_t id;
	uint64_t size;
	uint64_t expire_at; /* ms: parked when still unused then */
	struct mc_rep rep;
};

struct mc_client {
	struct mc_store_uuid id;
	struct mc_credit *credits; /* its unused put credits (credit.c) */
	uint32_t ncredits, credits_cap;
	struct mc_disk *disk; /* NULL: no local-disk segment mounted */
	uint64_t expiry;      /* alive: expires at this time (ms) */
	uint32_t nproc;	      /* objects it is writing */
	uint32_t nobjs;	      /* objects whose writer it is (in flight or complete) */
	uint32_t nsegs;	      /* segments it has mounted */
	bool used;	      /* slot in use */
	bool alive;	      /* in the alive set (mounted or remounted, not expired) */
	bool unreachable;     /* some segment of its is marked unreachable */
	uint8_t minor;	      /* the highest protocol minor of its pings and mounts */
	/* blocks of its segments for it to spoil (hspoil.c, minor 15), listed
	 * in its next Ping answers: [hq_head, nhq); size is the value's */
	struct mc_spoiled *hq;
	uint32_t hq_head, nhq, hq_cap;
};

struct mc_group {
	struct mc_group *next; /* hash chain */
	uint64_t hash;
	uint32_t slot;
	uint16_t tenant;
	uint32_t nmem, cap;
	struct mc_obj **mem;
	uint32_t name_len;
	char name[];
};

/* A block a force remove parked for its remover to spoil (spoil.c). */
struct mc_spoiled {
	uint64_t id;
	uint64_t addr;
	uint64_t size;
	uint64_t release_at;
	uint32_t seg;
	uint32_t gen;
};

/* PutStart space parked after a pre-emption, released at release_at. */
struct mc_discarded {
	uint64_t addr;
	uint64_t size;
	uint64_t release_at;
	uint32_t seg;
	uint32_t gen;
};

/*
 * A scan of the object table in steps, with other requests (inserts,
 * removals, resizes) between the steps (objects.c, "scan cursor").  Step
 * by step it visits every object whose hash falls in the next part of the
 * hash space, so an object present for the whole scan is visited exactly
 * once, whatever the table did in between; one added or removed during the
 * scan may or may not be.  The table does not shrink while a cursor is
 * open.
 */
struct mc_master_cursor {
	uint64_t unit; /* slots of the smallest table when the scan began */
	uint64_t pos;  /* home slots [0, pos) (mod unit) are done */
};

struct mc_master {
	struct mc_master_config cfg;
	char *version;
	uint64_t rng;
	uint64_t hash_seed;

	/* objects: open addressing, linear probing, tagged pointers */
	uint64_t *slots;
	uint64_t mask;	/* capacity - 1 */
	uint64_t nobjs; /* in both tables */
	uint64_t *old;	/* while resizing: the table being drained, else NULL */
	uint64_t old_mask, old_cursor, old_left;
	/* big blocks given back a piece a tick: drained tables, unmounted
	 * segments' allocator arrays (mc_master_free_later) */
	struct mc_free_later big_free[8];

	/* in-flight puts (MC_OBJ_PROC objects), obj.aux is the index */
	struct mc_proc *proc;
	uint32_t nproc, proc_cap;

	/* soft pins: min-heap on deadline, obj.aux is the index */
	struct mc_pin *pins;
	uint32_t npins, pins_cap;

	struct mc_discarded *disc;
	uint32_t disc_head, ndisc, disc_cap; /* live entries: [disc_head, ndisc) */
	uint64_t disc_bytes;

	/* spoil lists (spoil.c, minor 13): while a handler of an override
	 * runs for a writer that spoils (spoil_on), the memory blocks of
	 * leased objects it parked, for its answer */
	bool spoil_on;
	struct mc_store_replica *spoil;
	uint32_t nspoil, spoil_cap;
	uint64_t spoil_until; /* the earliest release_at of those */
	/* a force remove's parked blocks, until SpoilDone names them or
	 * their release_at (the lease's end) passes (mc_master_spoil_tick) */
	struct mc_spoiled *spoiled;
	uint32_t nspoiled, spoiled_cap;
	uint64_t spoil_seq; /* the last id handed out */

	char **tenants; /* tenants[0] = "default" */
	uint32_t *tenant_lens;
	uint32_t ntenants;

	struct mc_group **gbuckets;
	uint32_t gmask;
	uint64_t group_seed;
	struct mc_group **gslots; /* slot -> group; NULL = free slot */
	uint32_t ngslots, gslots_cap, ngroups;
	uint32_t *gfree; /* free slots */
	uint32_t ngfree, gfree_cap;

	struct mc_seg *segs;
	uint32_t nsegs_slots, segs_cap;
	uint64_t mount_seq;

	struct mc_client *clients;
	uint32_t nclient_slots, clients_cap;
	uint32_t last_client; /* lookup cache */

	/* placement targets, rebuilt when segments change */
	bool targets_dirty;
	struct mc_alloc_target *targets;
	struct mc_offset_alloc **tallocs;
	uint32_t *tsegs;			  /* segment slot per entry of tallocs */
	uint32_t *tstart;			  /* first tallocs index of each target */
	uint32_t ntargets, ntallocs, targets_cap; /* all four arrays have targets_cap entries */
	struct mc_alloc_placement *place;
	uint32_t place_cap;

	/* scratch for responses (reused, never shrunk) */
	struct mc_store_replica *rscratch;
	uint32_t rscratch_cap;
	void *iscratch;
	size_t iscratch_cap;

	uint64_t allocated_bytes;
	uint64_t capacity_bytes;
	bool need_evict;
	uint64_t evict_idle_until; /* no watermark round before this (ms) */
	struct mc_lru_cache *lru;  /* per segment slot: preferred_segment_lru (objects.c) */
	uint32_t nlru;
	uint64_t last_proc_scan;
	uint64_t credit_seq;	   /* the last put credit id given */
	uint64_t ncredits;	   /* unused put credits, all clients */
	uint64_t last_credit_scan; /* ms */
	uint32_t ncursors;	   /* open scan cursors: the table does not shrink */

	/* the unmount sweep (objects.c), run in slices by the tick and the daemon */
	bool need_sweep;	       /* a generation died since the running lap began */
	bool sweep_again;	       /* one more lap after this one */
	struct mc_master_cursor sweep; /* unit 0: no lap running */
	uint64_t sweep_step;	       /* table slots per cursor step, adapted */
	struct mc_obj **sweep_gone;    /* one step's objects to erase */
	uint32_t nsweep_gone, sweep_gone_cap;

	/* offloads queued or in flight: open addressing on the object pointer */
	struct mc_offl *offl;
	uint32_t offl_mask, noffl; /* offl_mask + 1 slots (0: none yet) */
	uint32_t npromo;	   /* entries of kind PROMOTE */
	uint64_t last_offl_scan;   /* deadline scan, once a second */
	uint32_t *cms;		   /* promotion admission: count-min sketch (ssd.c) */
	uint64_t cms_adds;
	struct mc_master_cursor bf; /* the offload backfill lap (ssd.c); unit 0: none */
	uint32_t bf_wait;	    /* slot + 1 of the client whose full queue paused it */

	/* the write-ahead log (wal_log.c); NULL: none */
	struct mc_wal *wal;
	struct mc_buf walbuf;	   /* one record's payload being encoded */
	bool wal_err;		   /* an append failed since the daemon last asked */
	uint64_t wal_view;	   /* the view of the last VIEW record (0: none) */
	char wal_view_leader[256]; /* its leader's address (a snapshot's VIEW entry) */
	uint32_t nwait;		   /* segments in MC_SEG_WAIT */
	uint64_t lease_floor_ms;   /* every object leased until (mc_master_lease_all) */
	/* the end of the leases granted before the latest client expiry (ms;
	 * 0: none expired): a fenced client remounts after it (tick.c, h_ping) */
	uint64_t expired_leases_end;
	struct mc_obj **wdead; /* erased objects a wait list may still name */
	uint64_t nwdead, wdead_cap;
	uint64_t nwl;	    /* entries in every waiting segment's list */
	bool wl_off;	    /* a list could not grow: remounts walk the table */
	bool bulk;	    /* a snapshot loads into an empty table: no lookups */
	uint32_t wait_hint; /* the waiting slot last found by id */

	/* the legacy shared-FS DISK tier (fs_tier.c); fs_seg UINT32_MAX: off */
	uint32_t fs_seg;
	uint64_t fs_seq;
	char *fsdir; /* <root_fs_dir>/<cluster_id>, no trailing '/' */
	size_t fsdir_len;
	struct mc_master_fs_gone *fs_gone; /* files to delete, for the daemon */
	uint32_t nfs_gone, fs_gone_cap;
	char **fs_blocks; /* descriptor paths of the current request */
	size_t *fs_block_size;
	uint32_t nfs_blocks, fs_blocks_cap, fs_sizes_cap;
	size_t fs_pos;

	/* copy and move tasks, replica repair, drain jobs (tasks.c) */
	struct mc_tasks *tasks;

	struct mc_master_metrics met;
};

/* ---- objects.c: tables ---- */

uint16_t mc_master_tenant_find(struct mc_master *m, const char *name, size_t len, bool *found_out);
mc_status mc_master_tenant_intern(struct mc_master *m, const char *name, size_t len,
				  uint16_t *id_out);
struct mc_obj *mc_master_obj_find(struct mc_master *m, uint16_t tenant, const char *key,
				  size_t len);
/* Prefetch the home slot of (tenant, key): a replay hints the records it
 * will apply next (mc_master_wal_hint), so their table misses overlap. */
void mc_master_obj_prefetch(const struct mc_master *m, uint16_t tenant, const char *key,
			    size_t len);
/* mc_master_obj_find of each of keys[n] into out[n], with the cache misses
 * of several keys overlapped; a key of length 0 or over MC_STORE_KEY_MAX
 * gets NULL. */
void mc_master_obj_find_many(struct mc_master *m, uint16_t tenant, const struct mc_proto_str *keys,
			     uint32_t n, struct mc_obj **out);
mc_status mc_master_obj_insert(struct mc_master *m, struct mc_obj *o);
/* Unlink o from every index (table, proc, pins, group) and free it; its
 * replicas must already be released or parked. */
void mc_master_obj_erase(struct mc_master *m, struct mc_obj *o);
struct mc_rep *mc_master_obj_rep(struct mc_obj *o, uint32_t i);
/* A free segment slot (its generation kept), or UINT32_MAX. */
uint32_t mc_master_seg_slot_new(struct mc_master *m);

/* ---- wal_log.c: the write-ahead log's records (no-ops without a log) ---- */

/* o completed (PutEnd): its memory replicas. */
void mc_master_wal_put(struct mc_master *m, struct mc_obj *o);
/* o is being erased. */
void mc_master_wal_del(struct mc_master *m, const struct mc_obj *o);
void mc_master_wal_mount(struct mc_master *m, uint32_t slot);
void mc_master_wal_unmount(struct mc_master *m, uint32_t slot);
/* The segment in slot turned GRACEFUL (its deadline, ms of now_ms's clock). */
void mc_master_wal_graceful(struct mc_master *m, uint32_t slot, uint64_t now_ms);
/* A waiting slot that was GRACEFUL (grace_epoch_ms) was mounted again:
 * GRACEFUL again with what is left of its grace period. */
void mc_master_wal_graceful_restore(struct mc_master *m, uint32_t slot, uint64_t grace_epoch_ms,
				    uint64_t now_ms);
/* The waiting (replayed) segment a mount of in takes over: same name,
 * base and size; UINT32_MAX if none. */
uint32_t mc_master_wal_waiting(const struct mc_master *m, const struct mc_store_segment *in);
/* slot took over a waiting segment: claim its replicas' ranges. */
void mc_master_wal_rebind(struct mc_master *m, uint32_t slot);
/* o is being erased: true when a wait list may name it, and it was kept
 * (emptied) to be freed when no segment waits any more; false: free it. */
bool mc_master_wal_keep_dead(struct mc_master *m, struct mc_obj *o);
/* Free slot's wait list (the slot leaves MC_SEG_WAIT without a rebind). */
void mc_master_wal_list_drop(struct mc_master *m, uint32_t slot);
/* Free every wait list and kept object (mc_master_free). */
void mc_master_wal_lists_free(struct mc_master *m);
/* Drop the waiting segments past their deadline (the tick). */
void mc_master_wal_expire(struct mc_master *m, uint64_t now_ms);
bool mc_master_rep_live(const struct mc_master *m, const struct mc_rep *r);
/* r names a local-disk segment (a LOCAL_DISK replica; addr unused). */
static inline bool mc_master_rep_disk(const struct mc_master *m, const struct mc_rep *r)
{
	return r->seg < m->nsegs_slots && m->segs[r->seg].state == MC_SEG_DISK;
}
/* Make o->ext hold n - 1 extra replicas (keeping the checksums). */
bool mc_master_obj_ext_fit(struct mc_obj *o, uint32_t n);
/* Set o's checksums (MC_OBJ_CKSUM) from a PutEnd or a log record: cksum
 * absent clears both; nchunks sums (NULL: none; sums may be unaligned
 * little-endian bytes when le is set) must be mc_store_chunk_count(size)
 * or 0.  False: no memory (o unchanged but without checksums). */
bool mc_master_obj_set_sums(struct mc_obj *o, bool has_cksum, uint64_t cksum, const void *sums,
			    uint32_t nchunks, bool le);
/* o's chunk checksums (count in *n; NULL and 0 when none). */
const uint64_t *mc_master_obj_chunks(const struct mc_obj *o, uint32_t *n);
/* Release o's memory replicas only; returns how many (disk ones) are left. */
uint32_t mc_master_obj_release_mem_reps(struct mc_master *m, struct mc_obj *o);
/* Give the blocks of o back to their allocators at once. */
void mc_master_obj_release_reps(struct mc_master *m, struct mc_obj *o);
/* Release o's live replicas on the segment called name (len bytes) and
 * drop them from its list; returns how many went. */
uint32_t mc_master_obj_drop_seg_reps(struct mc_master *m, struct mc_obj *o, const char *name,
				     size_t len);
/* Park the blocks of o in the discarded list (released after the timeout). */
void mc_master_obj_discard_reps(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* A memory block of size bytes at r (no object holds it): released now,
 * or parked until put_start_release_timeout (a late writer may still be
 * writing it); nothing when r is not live. */
void mc_master_block_release(struct mc_master *m, const struct mc_rep *r, uint64_t size);
void mc_master_block_park(struct mc_master *m, const struct mc_rep *r, uint64_t size,
			  uint64_t now_ms);
/* The same, parked until release_at. */
void mc_master_block_park_until(struct mc_master *m, const struct mc_rep *r, uint64_t size,
				uint64_t release_at);
/* Spoil lists (spoil.c; proto.h "Spoil tails"): begin one for a request of
 * the sender's minor (on only from 13); park: o, under a lease and
 * overridden (force removed, upserted to another size) while one is on,
 * has its memory replicas parked until its lease ends (and not before
 * min_release) and listed, and taken off its list (any other replica stays
 * for the caller); out: the list for the answer (until the next begin),
 * spoil_ms from now; end: off. */
void mc_master_spoil_begin(struct mc_master *m, unsigned minor);
void mc_master_spoil_park(struct mc_master *m, struct mc_obj *o, uint64_t min_release,
			  uint64_t now_ms);
void mc_master_spoil_out(struct mc_master *m, uint64_t now_ms, uint32_t *n,
			 struct mc_store_replica **list, struct mc_proto_opt_u64 *spoil_ms);
void mc_master_spoil_free(struct mc_master *m);
/* Release the force removes' parked blocks whose time is over. */
void mc_master_spoil_tick(struct mc_master *m, uint64_t now_ms);
/* Park r's block in m->spoiled under a new id (m->spoil_seq) until
 * until; false: no memory (spoil.c). */
bool mc_master_spoil_keep(struct mc_master *m, const struct mc_rep *r, uint64_t size,
			  uint64_t until);
/* Holders spoil (hspoil.c, minor 15): an override of the leased, checked o
 * by a writer that spoils nothing parks the blocks whose owners spoil
 * (minor 15) and queues them for those owners; the others stay o's for
 * the caller to release as before. */
void mc_master_hspoil_park(struct mc_master *m, struct mc_obj *o, uint64_t min_release,
			   uint64_t until);
/* A request of client (a slot) was of this minor. */
void mc_master_client_minor(struct mc_master *m, uint32_t client, unsigned minor);
/* r's owner neither fences nor spoils (older than minor 15, or unknown):
 * a reader must not cache r. */
bool mc_master_rep_nocache(const struct mc_master *m, const struct mc_rep *r);
/* The next blocks queued for client to spoil, into its Ping answer. */
void mc_master_hspoil_out(struct mc_master *m, uint32_t client, uint64_t now_ms,
			  struct mc_store_ping_resp *resp);
void mc_master_hspoil_client_free(struct mc_client *cl);
/* Put credits (credit.c): park the unused ones past their time (every
 * 100 ms), or all of client's (it expired); free the lists at the end. */
void mc_master_credits_tick(struct mc_master *m, uint64_t now_ms);
void mc_master_credits_drop(struct mc_master *m, uint32_t client, uint64_t now_ms);
/* Drop o's replica i (a memory block parked as above, a LOCAL_DISK copy
 * left to its owner to delete); the later ones move down. */
void mc_master_obj_drop_rep(struct mc_master *m, struct mc_obj *o, uint32_t i, uint64_t now_ms);

/* A replica's id in replica lists: stable for the life of the block and
 * unique among live ones (for a LOCAL_DISK replica, r's addr is the
 * object's address, as master.c lists it). */
static inline uint64_t mc_master_rep_id(const struct mc_rep *r)
{
	uint64_t x = r->addr ^ ((uint64_t)r->seg << 40) ^ ((uint64_t)r->gen << 20);

	x ^= x >> 31;
	x *= 0x9E3779B97F4A7C15ull;
	return (x ^ (x >> 29)) | 1;
}
/*
 * The id o's replica r has in replica lists and ReportCorrupt: r's own
 * id mixed with o's checksum, so that a rewrite of the object in place
 * (an upsert of the same size keeps its blocks) gives its replicas new
 * ids, and a report of a read of the earlier bytes (torn by the rewrite,
 * or late) names no replica of the new ones (corrupt.c).
 */
static inline uint64_t mc_master_listed_rep_id(const struct mc_obj *o, const struct mc_rep *r)
{
	uint64_t id = mc_master_rep_id(r);

	if ((o->flags & MC_OBJ_CKSUM) && o->ext)
		id = (id ^ (o->ext->checksum * 0xC2B2AE3D27D4EB4Full)) | 1;
	return id;
}
/* d := a MEMORY replica descriptor of the block at addr on segment seg
 * (every field but the id, which each caller derives its own way). */
static inline void mc_master_mem_desc(const struct mc_master *m, uint32_t seg, uint64_t addr,
				      uint64_t size, uint8_t status, struct mc_store_replica *d)
{
	const struct mc_seg *s = &m->segs[seg];

	memset(d, 0, sizeof(*d));
	d->status = status;
	d->type = MC_STORE_REPLICA_MEMORY;
	d->size = size;
	d->address = addr;
	d->segment_name = (struct mc_proto_str){.ptr = s->name, .len = s->name_len};
	d->transport_endpoint = (struct mc_proto_str){.ptr = s->te_endpoint, .len = s->te_len};
	d->protocol = (struct mc_proto_str){.ptr = s->protocol, .len = s->proto_len};
}
/* Readable = COMPLETE with at least one replica on a mounted segment. */
bool mc_master_obj_readable(const struct mc_master *m, const struct mc_obj *o);
/*
 * Dead replicas (their segment slot's generation moved on: unmount, client
 * expiry, a wipe) stay in an object until the unmount sweep reaches it or
 * a request that changes it drops them.  An object with no live replica
 * left is "gone": the sweep erases it, and until then every request treats
 * it as absent.
 */
bool mc_master_obj_gone(const struct mc_master *m, const struct mc_obj *o);
/* Drop o's dead replicas (nothing is written when none is dead); returns
 * how many are left. */
uint32_t mc_master_obj_prune(struct mc_master *m, struct mc_obj *o);
/* mc_master_obj_find for a request that changes or completes what it
 * finds (the End rule): the object's dead replicas are dropped first, and
 * one left with none is erased, as the sweep would have, and not found. */
struct mc_obj *mc_master_obj_find_live(struct mc_master *m, uint16_t tenant, const char *key,
				       size_t len);
void mc_master_grant_lease(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* Does a reader's lease hold complete object o at now_ms: its own, or the
 * one every object has for a while after a take-over (mc_master_lease_all)? */
static inline bool mc_master_leased(const struct mc_master *m, const struct mc_obj *o,
				    uint64_t now_ms)
{
	return o->t > now_ms || now_ms < m->lease_floor_ms;
}
/* o may be evicted now: complete, unleased, not pinned (soft pins
 * included), memory to free, no disk copy owed (tick.c). */
bool mc_master_obj_evictable(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms);
/* Per-segment LRU (lru.c): drop the want least recently used evictable
 * objects' replicas on target t (never keep's); returns how many went. */
uint32_t mc_master_evict_target(struct mc_master *m, uint32_t t, uint32_t want,
				const struct mc_obj *keep, uint64_t now_ms);
void mc_master_lru_free(struct mc_master *m);
/* o becomes PROC, written by client slot writer; pin as struct mc_proc. */
void mc_master_proc_add(struct mc_master *m, struct mc_obj *o, uint32_t writer, uint64_t pin);
void mc_master_proc_del(struct mc_master *m, struct mc_obj *o);
static inline struct mc_proc *mc_master_proc_of(struct mc_master *m, const struct mc_obj *o)
{
	return &m->proc[o->aux];
}
/* The client slot of the last PutStart/UpsertStart caller of o, or
 * MC_MASTER_NO_CLIENT.  A slot stays taken while it writes any object. */
static inline uint32_t mc_master_obj_writer(const struct mc_master *m, const struct mc_obj *o)
{
	if (o->flags & MC_OBJ_PROC)
		return m->proc[o->aux].writer;
	if (o->flags & MC_OBJ_SOFT)
		return m->pins[o->aux].writer;
	return o->aux;
}
/* o (complete) becomes soft-pinned until deadline. */
void mc_master_pin_add(struct mc_master *m, struct mc_obj *o, uint64_t deadline);
void mc_master_pin_del(struct mc_master *m, struct mc_obj *o);
static inline uint64_t mc_master_pin_deadline(const struct mc_master *m, const struct mc_obj *o)
{
	return m->pins[o->aux].deadline;
}
mc_status mc_master_group_join(struct mc_master *m, uint16_t tenant, const char *name, size_t len,
			       struct mc_obj *o);
struct mc_group *mc_master_group_of(const struct mc_master *m, const struct mc_obj *o);

struct mc_client *mc_master_client_find(struct mc_master *m, const struct mc_store_uuid *id,
					uint32_t *slot_out);
mc_status mc_master_client_intern(struct mc_master *m, const struct mc_store_uuid *id,
				  uint32_t *slot_out);
struct mc_seg *mc_master_seg_find(struct mc_master *m, const struct mc_store_uuid *id,
				  uint32_t *slot_out);
mc_status mc_master_seg_mount(struct mc_master *m, uint32_t client,
			      const struct mc_store_segment *s, uint64_t now_ms);
void mc_master_seg_unmount(struct mc_master *m, uint32_t slot);
/*
 * The unmount sweep: drop dead replicas everywhere and erase the objects
 * left without any, one cursor step at a time (objects.c, "sweep").  An
 * unmount only sets need_sweep; mc_master_sweep_run (master.h) does the
 * work.
 */
mc_status mc_master_targets(struct mc_master *m);
/* Remove (tenant, object) as Remove does: status of the attempt. */
mc_status mc_master_remove_obj(struct mc_master *m, struct mc_obj *o, bool force, uint64_t now_ms);
/* Mount a local-disk segment slot for client (endpoint: its offload RPC). */
mc_status mc_master_seg_mount_disk(struct mc_master *m, uint32_t client, const char *endpoint,
				   size_t len, uint32_t *slot_out);
/* Finish a resize in progress (before another starts, and at free). */
void mc_master_table_settle(struct mc_master *m);
/* table.c internals for objects.c: move up to budget old slots (resizing),
 * start a resize to nslots, delete o's slot. */
void mc_master_table_migrate(struct mc_master *m, uint64_t budget);
/* Free p (len bytes) over the next ticks (FREE_TICK_BYTES a tick) when it
 * is big, at once otherwise.  Its free_big signature: ctx is the master. */
void mc_master_free_later(void *m, void *p, size_t len);
/* huge: back the new table with huge pages (restart sizing only; see table.c) */
mc_status mc_master_table_resize(struct mc_master *m, uint64_t nslots, bool huge);
void mc_master_table_delete(struct mc_master *m, const struct mc_obj *o);

/* A scan of the object table in steps: see struct mc_master_cursor above. */
/* Return false to end the step early (the cursor still moves past it). */
typedef bool (*mc_master_obj_fn)(void *arg, struct mc_obj *o);
void mc_master_cursor_open(struct mc_master *m, struct mc_master_cursor *cur);
void mc_master_cursor_close(struct mc_master *m, struct mc_master_cursor *cur);
static inline bool mc_master_cursor_done(const struct mc_master_cursor *cur)
{
	return cur->pos >= cur->unit;
}
/* One step: about slots table slots (at least one home slot of unit); fn
 * must not add or erase objects.  false when fn ended it. */
bool mc_master_cursor_step(struct mc_master *m, struct mc_master_cursor *cur, uint64_t slots,
			   mc_master_obj_fn fn, void *arg);
/* A walk of every object (or a sample of them, eviction), with nothing
 * changing in between and no settle first (a settle is O(table) of moves, and in a forked
 * snapshot child it would copy both tables page by page): i runs over
 * [0, mc_master_table_span(m)), the new table's slots then, during a
 * resize, the old one's; each object is in exactly one of them. */
static inline uint64_t mc_master_table_span(const struct mc_master *m)
{
	return m->mask + 1 + (m->old ? m->old_mask + 1 : 0);
}
static inline struct mc_obj *mc_master_table_at(const struct mc_master *m, uint64_t i)
{
	uint64_t s = i <= m->mask ? m->slots[i] : m->old[i - m->mask - 1];

	return (struct mc_obj *)(uintptr_t)(s & ((1ull << 48) - 1));
}
/* Grow a scratch area to at least n bytes. */
/* Make *arr (of elem-byte entries, *cap of them) hold at least need,
 * doubling; false (nothing changed) when memory or the u32 count runs out. */
bool mc_master_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem);
void *mc_master_scratch(struct mc_master *m, size_t n);
mc_status mc_master_rscratch(struct mc_master *m, uint32_t n);
/* Room for n more in-flight puts (so mc_master_proc_add cannot fail). */
bool mc_master_proc_reserve(struct mc_master *m, uint32_t n);

/* ---- tasks.c: copy and move tasks, replica repair, drain jobs ---- */

mc_status mc_master_tasks_init(struct mc_master *m);
void mc_master_tasks_free(struct mc_master *m);
/* The task RPCs (CreateCopyTask .. MarkTaskToComplete); err as FAIL's. */
mc_status mc_master_tasks_handle(struct mc_master *m, const struct mc_store_msg *q, uint64_t now_ms,
				 struct mc_buf *out, char *err, size_t err_len);
/* Timeouts, repair scheduling, drain jobs' progress. */
void mc_master_tasks_tick(struct mc_master *m, uint64_t now_ms);
/* For a request that removes or rewrites o: an operator's copy or move
 * task holds o (Remove and Upsert answer OBJECT_HAS_REPLICATION_TASK).
 * Otherwise the master's own tasks on o (repair, drain) let it go: they
 * fail at their report, and o is the caller's. */
bool mc_master_task_busy(struct mc_master *m, struct mc_obj *o);
/* o is being erased: its tasks lose it (they fail, their blocks go back). */
void mc_master_task_obj_gone(struct mc_master *m, struct mc_obj *o);
/* o lost lost memory replicas to a dead segment (mc_master_obj_prune):
 * queue it for repair up to its former count. */
void mc_master_repair_note(struct mc_master *m, struct mc_obj *o, uint32_t lost);
/* A segment mounted: repairs parked for want of room are queued again. */
void mc_master_repair_wake(struct mc_master *m);
/* The segment in slot mounted (again, as after a restart): a drain job
 * still running that names it drains it (state DRAINING, a new lap). */
void mc_master_drain_seg_mounted(struct mc_master *m, uint32_t slot);
/* A get of o (GetReplicaList and its batch form): counts towards its heat
 * (--dynamic_replication_mode); a key that turns hot gets one more copy. */
void mc_master_heat_hit(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);

/* ---- fs_tier.c: the legacy shared-FS DISK tier ---- */

/* r is a DISK replica (its file under the master's fsdir). */
static inline bool mc_master_rep_fs(const struct mc_master *m, const struct mc_rep *r)
{
	return r->seg == m->fs_seg;
}
/* A DISK replica whose writer has not reported the file yet. */
static inline bool mc_master_rep_fs_pending(const struct mc_master *m, const struct mc_rep *r)
{
	return mc_master_rep_fs(m, r) && !(r->addr & 1);
}
/* Set up the tier when cfg.fsdir is set (its segment slot). */
mc_status mc_master_fs_init(struct mc_master *m);
void mc_master_fs_free(struct mc_master *m);
/* End of a request: the descriptor paths handed out go. */
void mc_master_fs_reset(struct mc_master *m);
/* Fill a DISK descriptor for r of o; false without memory for the path. */
bool mc_master_fs_fill(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r,
		       struct mc_store_replica *d);
/* A write of o begins (PutStart, UpsertStart): a fresh PROCESSING DISK replica. */
void mc_master_fs_begin(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* o has a DISK replica being written, for less than the release timeout:
 * its memory must stay. */
bool mc_master_fs_pending(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms);
/* Eviction must leave o's memory alone: mc_master_fs_pending, or (ssd.c)
 * o waits for the eager offload backfill to give it a disk copy. */
bool mc_master_tier_pending(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms);
/* Drop o's DISK replica if still unwritten (its writer never reported,
 * or ended with ALL: it writes no file); returns o->nrep. */
uint32_t mc_master_fs_drop_pending(struct mc_master *m, struct mc_obj *o, bool quiet);
/* The master drops the DISK replica r of o: its file is to be deleted. */
void mc_master_fs_rep_gone(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r);
/* PutEnd (end) or PutRevoke of o's DISK replica by client slot client;
 * id (NULL or absent: any, as from a sender of minor version < 4) must
 * name the replica now being written, so a report of an older write of
 * the key ends nothing; the cause of a failure in err.  A revoke may
 * erase o. */
mc_status mc_master_fs_end(struct mc_master *m, uint32_t client, struct mc_obj *o, bool end,
			   const struct mc_proto_opt_u64 *id, char *err, size_t err_len);

/* ---- ssd.c: the SSD tier ---- */

/* The handlers of messages 64..69: answer into out (typed response) or
 * return an error with its cause in err (err_len bytes). */
mc_status mc_master_ssd_handle(struct mc_master *m, const struct mc_store_msg *q, uint64_t now_ms,
			       struct mc_buf *out, char *err, size_t err_len);
/* o became complete (PutEnd): queue its eager offload if one applies. */
void mc_master_ssd_put_end(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* Offload-on-evict: queue o instead of evicting it.  MC_OK queued;
 * otherwise it could not be. */
mc_status mc_master_ssd_queue(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* A get found o readable only from disk: count it toward promotion. */
void mc_master_ssd_hit(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* Cancel offloads and promotions past their deadline (once a second). */
void mc_master_ssd_tick(struct mc_master *m, uint64_t now_ms);
/* o, flagged MC_OBJ_OFFL, is being erased: forget its offload. */
void mc_master_ssd_obj_gone(struct mc_master *m, struct mc_obj *o);
/* A live LOCAL_DISK replica r of o is dropped by the master: its owner
 * must delete the copy. */
void mc_master_ssd_rep_gone(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r);
/* Drop o's LOCAL_DISK replicas (the owners delete them); returns how many. */
uint32_t mc_master_ssd_drop_disk_reps(struct mc_master *m, struct mc_obj *o);
/* RemoveAll of every tenant: every disk owner wipes its store; every
 * LOCAL_DISK replica dies at once. */
void mc_master_ssd_wipe_all(struct mc_master *m);
/* The client's SSD tier goes (unmount, expiry): offloads cancelled,
 * queues dropped, its LOCAL_DISK replicas dead. */
void mc_master_ssd_client_gone(struct mc_master *m, uint32_t client);
void mc_master_ssd_free(struct mc_master *m);

#endif
