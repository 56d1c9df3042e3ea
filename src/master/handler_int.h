/*
 * master/handler_int.h - what the request handlers of master.c and put.c
 * share with each other, with the jobs of jobs.c (the regex scans and
 * RemoveAll, run in slices), the ReportCorrupt handler (corrupt.c) and the
 * validators (validate.c): the handler context, the error-text helpers,
 * the job entry points and the validators.  Nothing outside those files
 * includes this.
 */
#ifndef MC_MASTER_HANDLER_INT_H
#define MC_MASTER_HANDLER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "master/master_int.h"
#include "store/proto.h"

#define ERR_LEN	 320
#define KEY_SHOW 80 /* key bytes quoted in error texts */

/* One request being handled. */
struct ctx {
	struct mc_master *m;
	uint64_t now;
	uint64_t id;
	struct mc_buf *out;
	char *err;
	struct mc_master_job **job; /* a handler that leaves work puts it here */
};

#define FAIL(c, st, ...) (snprintf((c)->err, ERR_LEN, __VA_ARGS__), (st))

static inline int show(uint32_t len)
{
	return (int)(len < KEY_SHOW ? len : KEY_SHOW);
}

static inline const char *sp(const struct mc_proto_str *s)
{
	return s->ptr ? s->ptr : "";
}

/* The request a job answers, set by mc_master_handle_start. */
struct mc_master_job_origin {
	uint16_t type;
	uint64_t req_id;
	size_t counter; /* in struct mc_master_metrics, or NO_COUNTER */
};

struct mc_master_job_origin *mc_master_job_origin(struct mc_master_job *j);

/* GetReplicaListByRegex (remove false) or RemoveByRegex: puts a new job in
 * *c->job and returns MC_INPROGRESS, or fails with the cause in c->err. */
mc_status mc_master_job_new(struct ctx *c, const struct mc_proto_str *tenant,
			    const struct mc_proto_str *pat, bool remove, bool force);

/* One slice of j until end_us (mc_now_us clock); MC_INPROGRESS while more
 * is left, else the response is in c->out or the failure in c->err. */
mc_status mc_master_job_work(struct ctx *c, struct mc_master_job *j, uint64_t end_us);

/* ReportCorrupt (corrupt.c): drop the replicas a reader found corrupt. */
mc_status mc_master_h_report_corrupt(struct ctx *c, const struct mc_store_msg *q);
/* PutCredit (credit.c), and what it takes from put.c: one block of len
 * bytes placed as a one-replica put's preferring segment ("": none),
 * accounted as used; the value-size histogram. */
mc_status mc_master_h_put_credit(struct ctx *c, const struct mc_store_msg *q);
/* SpoilDone (spoil.c) */
mc_status mc_master_h_spoil_done(struct ctx *c, const struct mc_store_msg *q);
bool mc_master_v_put_credit(const struct mc_store_msg *q);
mc_status mc_master_place_block(struct ctx *c, uint64_t len, const struct mc_proto_str *segment,
				struct mc_rep *out);
void mc_master_observe_size(struct mc_master *m, uint64_t len);
bool mc_master_v_report_corrupt(const struct mc_store_msg *q);

/* The validators of master.c's command table (validate.c): true when every
 * string and list of the body may be trusted by its handler. */
bool mc_master_v_hello(const struct mc_store_msg *q);
bool mc_master_v_mount(const struct mc_store_msg *q);
bool mc_master_v_remount(const struct mc_store_msg *q);
bool mc_master_v_key(const struct mc_store_msg *q);
bool mc_master_v_keys(const struct mc_store_msg *q);
bool mc_master_v_unreachable(const struct mc_store_msg *q);
bool mc_master_v_regex(const struct mc_store_msg *q);
bool mc_master_v_put_start(const struct mc_store_msg *q);
bool mc_master_v_batch_put_start(const struct mc_store_msg *q);
bool mc_master_v_put_end(const struct mc_store_msg *q);
bool mc_master_v_batch_put_end(const struct mc_store_msg *q);
bool mc_master_v_put_revoke(const struct mc_store_msg *q);
bool mc_master_v_batch_put_revoke(const struct mc_store_msg *q);
bool mc_master_v_remove(const struct mc_store_msg *q);
bool mc_master_v_remove_regex(const struct mc_store_msg *q);
bool mc_master_v_remove_all(const struct mc_store_msg *q);
bool mc_master_v_batch_remove(const struct mc_store_msg *q);
bool mc_master_v_replica_clear(const struct mc_store_msg *q);
bool mc_master_v_copy_task(const struct mc_store_msg *q);
bool mc_master_v_change_replica(const struct mc_store_msg *q);
bool mc_master_v_move_task(const struct mc_store_msg *q);
bool mc_master_v_task_done(const struct mc_store_msg *q);

/* The replica list of a readable object, its descriptors appended to the
 * master's rscratch at *pos (room reserved by the caller). */
void mc_master_list_fill(struct mc_master *m, struct mc_obj *o, struct mc_store_replica_list *l,
			 uint32_t *pos);
/* o's live replicas with status into rscratch at *pos, memory first; their count (master.c). */
uint32_t mc_master_reps_out(struct mc_master *m, struct mc_obj *o, uint8_t status, uint32_t *pos,
			    uint64_t *nocache);
/* Count a batch of n items, nfail of them failed, in bc (master.c). */
void mc_master_batch_count(struct mc_master_batch_counter *bc, uint32_t n, uint32_t nfail);
/* Room for one status per entry of list (n long, named what in the error) (master.c). */
mc_status mc_master_status_list(struct ctx *c, uint32_t n, const void *list, const char *what,
				int32_t **out);

/* The put handlers (put.c): PutStart and UpsertStart, their batch forms,
 * then End and Revoke, single and batch, of a put or an upsert. */
mc_status mc_master_h_put_start(struct ctx *c, const struct mc_store_msg *q);
mc_status mc_master_h_batch_put_start(struct ctx *c, const struct mc_store_msg *q);
mc_status mc_master_h_put_end(struct ctx *c, const struct mc_store_msg *q);
mc_status mc_master_h_put_revoke(struct ctx *c, const struct mc_store_msg *q);
mc_status mc_master_h_batch_put_end(struct ctx *c, const struct mc_store_msg *q);
mc_status mc_master_h_batch_put_revoke(struct ctx *c, const struct mc_store_msg *q);

#endif
