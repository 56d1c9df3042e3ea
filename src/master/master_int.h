/*
 * master/master_int.h - the master's private tables, shared by master.c
 * (the request handlers) and objects.c (tables, eviction, tick, queries).
 * Nothing outside src/master/master*.c and objects.c includes this.
 *
 * The byte budget of an object and the reasons for each layout choice are
 * written at the top of objects.c.
 */
#ifndef MC_MASTER_MASTER_INT_H
#define MC_MASTER_MASTER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/alloc.h"
#include "master/master.h"
#include "store/proto.h"

#define MC_MASTER_MIN_ALIGN	64u   /* allocation unit inside a segment */
#define MC_MASTER_MAX_REPLICAS	255u  /* obj.nrep is a u8 */
#define MC_MASTER_MAX_TENANTS	4096u /* tenant ids are u16; lookups scan the list */
#define MC_MASTER_MAX_PREFERRED 64u   /* preferred segment names honoured per put */
#define MC_MASTER_NO_CLIENT	UINT32_MAX
#define MC_MASTER_NO_AUX	UINT32_MAX

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

/* Replicas beyond the first, and the checksum; allocated only when needed. */
struct mc_obj_ext {
	uint64_t checksum;
	struct mc_rep reps[]; /* obj.nrep - 1 entries */
};

enum mc_obj_flags {
	MC_OBJ_PROC = 1u << 0,	    /* being written: replicas PROCESSING */
	MC_OBJ_HARD = 1u << 1,	    /* hard-pinned: never evicted */
	MC_OBJ_SOFT = 1u << 2,	    /* soft-pinned: deadline in m->pins (PROC: kept in m->proc) */
	MC_OBJ_PIN_SET = 1u << 3,   /* PROC: commit "soft pin for mc_proc.pin ms" at End */
	MC_OBJ_PIN_CLEAR = 1u << 4, /* PROC: commit "no soft pin" at End */
	MC_OBJ_CKSUM = 1u << 5,	    /* ext->checksum is valid */
	MC_OBJ_MARK = 1u << 6,	    /* eviction: chosen in this round */
};

struct mc_obj {
	uint64_t t;		/* COMPLETE: lease deadline (ms); PROC: PutStart time (ms) */
	struct mc_rep r0;	/* first replica, inline */
	struct mc_obj_ext *ext; /* NULL unless nrep > 1 or a checksum is stored */
	uint32_t aux;		/* PROC: index in m->proc; SOFT: index in m->pins;
				 * otherwise the writer's client slot (mc_master_obj_writer) */
	uint32_t group;		/* group slot + 1; 0 = no group */
	uint32_t size_lo;	/* value length in bytes: 48 bits, size_lo | size_hi << 32 */
	uint16_t size_hi;
	uint16_t tenant;
	uint16_t key_len;
	uint8_t flags; /* enum mc_obj_flags */
	uint8_t nrep;
	char key[]; /* key_len bytes, not NUL-terminated */
};

#define MC_MASTER_MAX_VALUE ((1ull << 48) - 1)

static inline uint64_t mc_obj_size(const struct mc_obj *o)
{
	return (uint64_t)o->size_lo | (uint64_t)o->size_hi << 32;
}

static inline void mc_obj_set_size(struct mc_obj *o, uint64_t v)
{
	o->size_lo = (uint32_t)v;
	o->size_hi = (uint16_t)(v >> 32);
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
	uint64_t used;	   /* requested bytes of live replicas here */
	uint64_t deadline; /* GRACEFUL: unmount at this time (ms) */
	uint64_t mount_seq;
	uint32_t gen;
	uint32_t client; /* client slot */
	int state;	 /* enum mc_seg_state */
};

struct mc_client {
	struct mc_store_uuid id;
	uint64_t expiry; /* alive: expires at this time (ms) */
	uint32_t nproc;	 /* objects it is writing */
	uint32_t nobjs;	 /* objects whose writer it is (in flight or complete) */
	uint32_t nsegs;	 /* segments it has mounted */
	bool used;	 /* slot in use */
	bool alive;	 /* in the alive set (mounted or remounted, not expired) */
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

/* PutStart space parked after a pre-emption, released at release_at. */
struct mc_discarded {
	uint64_t addr;
	uint64_t size;
	uint64_t release_at;
	uint32_t seg;
	uint32_t gen;
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

	/* in-flight puts (MC_OBJ_PROC objects), obj.aux is the index */
	struct mc_proc *proc;
	uint32_t nproc, proc_cap;

	/* soft pins: min-heap on deadline, obj.aux is the index */
	struct mc_pin *pins;
	uint32_t npins, pins_cap;

	struct mc_discarded *disc;
	uint32_t disc_head, ndisc, disc_cap; /* live entries: [disc_head, ndisc) */
	uint64_t disc_bytes;

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
	bool need_sweep;
	uint64_t last_proc_scan;
	uint32_t ncursors; /* open scan cursors: the table does not shrink */

	struct mc_master_metrics met;
};

/* ---- objects.c: tables ---- */

uint16_t mc_master_tenant_find(struct mc_master *m, const char *name, size_t len, bool *found_out);
mc_status mc_master_tenant_intern(struct mc_master *m, const char *name, size_t len,
				  uint16_t *id_out);
struct mc_obj *mc_master_obj_find(struct mc_master *m, uint16_t tenant, const char *key,
				  size_t len);
mc_status mc_master_obj_insert(struct mc_master *m, struct mc_obj *o);
/* Unlink o from every index (table, proc, pins, group) and free it; its
 * replicas must already be released or parked. */
void mc_master_obj_erase(struct mc_master *m, struct mc_obj *o);
struct mc_rep *mc_master_obj_rep(struct mc_obj *o, uint32_t i);
bool mc_master_rep_live(const struct mc_master *m, const struct mc_rep *r);
/* Give the blocks of o back to their allocators at once. */
void mc_master_obj_release_reps(struct mc_master *m, struct mc_obj *o);
/* Release o's live replicas on the segment called name (len bytes) and
 * drop them from its list; returns how many went. */
uint32_t mc_master_obj_drop_seg_reps(struct mc_master *m, struct mc_obj *o, const char *name,
				     size_t len);
/* Park the blocks of o in the discarded list (released after the timeout). */
void mc_master_obj_discard_reps(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
/* Readable = COMPLETE with at least one replica on a mounted segment. */
bool mc_master_obj_readable(const struct mc_master *m, const struct mc_obj *o);
void mc_master_grant_lease(struct mc_master *m, struct mc_obj *o, uint64_t now_ms);
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
/* Drop dead replicas everywhere and erase objects left without any. */
void mc_master_sweep(struct mc_master *m);
mc_status mc_master_targets(struct mc_master *m);
/* Remove (tenant, object) as Remove does: status of the attempt. */
mc_status mc_master_remove_obj(struct mc_master *m, struct mc_obj *o, bool force, uint64_t now_ms);
/* Finish a resize in progress; full scans call it first. */
void mc_master_table_settle(struct mc_master *m);

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
/* Iterate slot i of the table (after mc_master_table_settle): the object
 * there or NULL. */
static inline struct mc_obj *mc_master_slot_obj(const struct mc_master *m, uint64_t i)
{
	return (struct mc_obj *)(uintptr_t)(m->slots[i] & ((1ull << 48) - 1));
}
/* Grow a scratch area to at least n bytes. */
void *mc_master_scratch(struct mc_master *m, size_t n);
mc_status mc_master_rscratch(struct mc_master *m, uint32_t n);
/* Room for n more in-flight puts (so mc_master_proc_add cannot fail). */
bool mc_master_proc_reserve(struct mc_master *m, uint32_t n);

#endif
