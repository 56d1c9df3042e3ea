/*
 * master/tasks_int.h - the task manager's tables (master/tasks.c), shared
 * with the drain jobs (master/drain.c) and their write-ahead log records
 * (master/tasks_wal.c) and nothing else: the rest of the master reaches
 * tasks through master_int.h.
 */
#ifndef MC_MASTER_TASKS_INT_H
#define MC_MASTER_TASKS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "master/master_int.h"
#include "master/wal_rec.h"

struct mc_snap_writer;

#define TASK_MSG  160
#define HEAT_ROWS 4    /* dynamic replication's count-min sketch */
#define HEAT_COLS 4096 /* 32 KiB of u16 counters */

/* an error's status, with its text in err (err_len bytes) */
#define FAILT(st, ...) (snprintf(err, err_len, __VA_ARGS__), (st))

enum { DYNREP_OFF, DYNREP_OBSERVE, DYNREP_ENFORCE };

struct mc_task {
	struct mc_store_uuid id;
	uint8_t type;	/* enum mc_store_task_type */
	uint8_t status; /* enum mc_store_task_status */
	bool repair;	/* made by replica repair */
	uint8_t want;	/* repair: memory replicas the object should have */
	uint32_t job;	/* drain job index + 1; 0: none */
	uint16_t tenant;
	uint16_t key_len;
	char *key;
	struct mc_obj *o;	   /* NULL: the object went */
	struct mc_rep src;	   /* the source replica */
	uint32_t client;	   /* slot of the source's owner */
	struct mc_store_uuid cid;  /* its id, for QueryTask */
	uint32_t nt;		   /* targets */
	char **tname;		   /* segment names */
	struct mc_rep *dst;	   /* handed out: the blocks (addr 0: none) */
	uint64_t size;		   /* the object's, at creation */
	uint64_t created, updated; /* ms */
	uint32_t tries;		   /* hand-outs that found no space */
	char msg[TASK_MSG];
};

struct mc_repair_ent {
	uint64_t not_before;
	uint64_t size; /* the object's when queued: the byte budget's unit */
	uint16_t tenant;
	uint8_t want;
	uint8_t tries;
	uint16_t key_len;
	char key[];
};

struct mc_drain_job {
	struct mc_store_uuid id;
	int status;
	uint64_t created, updated;
	char **segs;
	uint32_t nsegs;
	char **targets;
	uint32_t ntargets, next_target;
	uint32_t max_conc;
	struct mc_master_cursor cur; /* unit 0: no lap running */
	uint32_t laps;
	uint64_t next_lap;	      /* ms: a lap that passed something over waits until then */
	bool skipped;		      /* this lap passed over a busy object */
	struct mc_repair_ent **units; /* objects found, not started yet: [uhead, nunits) */
	uint32_t uhead, nunits, units_cap;
	uint64_t succeeded, failed, blocked, active, bytes;
	char msg[TASK_MSG];
};

struct mc_tasks {
	struct mc_task **active; /* pending and handed out, in creation order */
	uint32_t nactive, active_cap;
	struct mc_task **done; /* finished: a FIFO ring of max_total_finished_tasks */
	uint32_t done_head, ndone, done_cap;
	uint32_t npending, nprocessing;
	uint64_t id_hi, seq;
	uint64_t last_scan;
	/* repair */
	struct mc_repair_ent **rq; /* FIFO: [rq_head, nrq) */
	uint32_t rq_head, nrq, rq_cap;
	/* dynamic replication: gets per key in the current window (NULL: off) */
	uint16_t (*heat)[HEAT_COLS];
	uint64_t heat_start; /* ms: the window began */
	uint64_t heat_seed;
	uint32_t heat_need;	       /* gets in a window that make a key hot */
	int dynrep;		       /* DYNREP_* */
	struct mc_repair_ent **parked; /* out of tries: back in the queue at the next mount */
	uint32_t nparked, parked_cap;
	uint32_t repair_inflight;
	double tokens;
	uint64_t last_refill;
	/* drain jobs, never forgotten (few) */
	struct mc_drain_job **jobs;
	uint32_t njobs, jobs_cap;
	struct mc_obj **found; /* a cursor step's objects */
	uint32_t nfound, found_cap;
	struct mc_drain_job *scan_job;
};
/* ---- tasks.c, for tasks_wal.c ---- */

void mc_master_task_free(struct mc_task *t);
/* Take the task at index i off the active list, keeping the counters. */
void mc_master_task_active_drop(struct mc_master *m, uint32_t i);
/* t (finished) into the ring of finished tasks, which owns it now. */
void mc_master_task_done_push(struct mc_master *m, struct mc_task *t);
/* The task of id, active (*active_idx its index) or finished
 * (*active_idx UINT32_MAX); NULL when none. */
struct mc_task *mc_master_task_find(struct mc_master *m, const struct mc_store_uuid *id,
				    uint32_t *active_idx);
/* A task made by an operator (CreateCopyTask, CreateMoveTask,
 * ChangeReplica), which the log keeps; not replica repair's or a drain's. */
static inline bool mc_master_task_logged(const struct mc_task *t)
{
	return !t->repair && !t->job;
}

/* ---- tasks.c, for drain.c ---- */

bool mc_master_uuid_same(const struct mc_store_uuid *a, const struct mc_store_uuid *b);
bool mc_master_seg_named(const struct mc_seg *s, const char *name, size_t len);
/* A memory replica on a segment still mounted (any state but gone). */
bool mc_master_rep_mem_live(const struct mc_master *m, const struct mc_rep *r);
/* o has a live memory replica on a segment called name. */
struct mc_rep *mc_master_rep_on(const struct mc_master *m, struct mc_obj *o, const char *name,
				size_t len);
/* A segment called name that takes new replicas (mounted, reachable). */
bool mc_master_seg_name_allocatable(const struct mc_master *m, const char *name, size_t len);
/* The value bytes t moved (t->size less the object's chunk-sum trailer). */
uint64_t mc_master_task_value_bytes(const struct mc_task *t);
/* A new pending task of type on o for ntargets targets; NULL: no memory. */
struct mc_task *mc_master_task_new(struct mc_master *m, uint8_t type, struct mc_obj *o,
				   uint32_t ntargets, uint64_t now);
bool mc_master_task_add_target(struct mc_task *t, const char *name, size_t len);
void mc_master_task_set_source(struct mc_master *m, struct mc_task *t, const struct mc_rep *r);
/* t onto the active list, pending. */
void mc_master_task_push(struct mc_master *m, struct mc_task *t);
/* Any task (an operator's, a repair, a drain's move) holds o. */
bool mc_master_task_any(const struct mc_master *m, const struct mc_obj *o);
/* A segment to copy o to (mounted, reachable, with room, holding none of
 * o's replicas); NULL when there is none. */
const struct mc_seg *mc_master_repair_target(struct mc_master *m, struct mc_obj *o);

/* ---- drain.c: drain jobs ---- */

void mc_master_drain_job_free(struct mc_drain_job *j);
/* The drain job of id, or NULL. */
struct mc_drain_job *mc_master_drain_job_find(struct mc_master *m, const struct mc_store_uuid *id);
/* A drain's move task t finished with st: the job's counters. */
void mc_master_drain_unit_done(struct mc_master *m, struct mc_task *t, mc_status st);
/* j's share of the tick: collect, start moves, conclude. */
void mc_master_drain_step(struct mc_master *m, struct mc_drain_job *j, uint64_t now);

/* ---- tasks_wal.c: tasks and drain jobs in the log and snapshots ---- */

/* t was created or changed (status, tries, source): its TASK record, or
 * for a task of the master's own a TASK_SEQ of its id.  No-op without a log. */
void mc_master_wal_task(struct mc_master *m, const struct mc_task *t);
/* j was created or changed (status, counters): its JOB record. */
void mc_master_wal_job(struct mc_master *m, const struct mc_drain_job *j);
/* Apply a decoded TASK, JOB or TASK_SEQ record (replay, a snapshot's load,
 * a standby's stream). */
mc_status mc_master_tasks_replay(struct mc_master *m, const struct mc_walrec *r, uint64_t now_ms);
/* A snapshot's tasks: every drain job, the operators' tasks (active, then
 * finished, oldest first) and the id sequence. */
mc_status mc_master_tasks_snap_dump(struct mc_master *m, struct mc_snap_writer *w);

/* ---- wal_log.c, for tasks_wal.c ---- */

/* Append r to the log (an error sets m->wal_err). */
void mc_master_wal_append(struct mc_master *m, const struct mc_walrec *r);
/* r as a snapshot entry. */
mc_status mc_master_snap_add(struct mc_master *m, struct mc_snap_writer *w,
			     const struct mc_walrec *r);
/* The slot of the segment id waiting for its remount, or UINT32_MAX. */
uint32_t mc_master_wal_wait_find(struct mc_master *m, const struct mc_store_uuid *id);

#endif
