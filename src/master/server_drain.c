/*
 * master/server_drain.c - drain jobs on the admin server (spec store.md
 * 1.14, 7.1), upstream's paths and JSON:
 *   POST /api/v1/drain_jobs           {"segments":[..], "target_segments":[..],
 *                                      "max_concurrency":4} -> job_id, CREATED
 *   GET  /api/v1/drain_jobs/query?job_id=A-B   the job's progress
 *   POST /api/v1/drain_jobs/cancel?job_id=A-B  stop it
 * The work is the master's (master/tasks.c, mc_master_drain_*), under the
 * daemon's lock like every other call into it; this file only parses and
 * answers.  Bodies are outside bytes: every field is type-checked, and a
 * body that is not such an object is a 400 with the cause.
 */
#define MC_LOG_MODULE "master"
#include "master/server_drain.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"
#include "master/server_priv.h"

#define DRAIN_MAX_SEGMENTS 1024

static bool job_id_parse(const char *s, struct mc_store_uuid *out)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return false;
	out->first = strtoull(s, &end, 10);
	if (*end != '-' || end[1] < '0' || end[1] > '9')
		return false;
	out->second = strtoull(end + 1, &end, 10);
	return *end == '\0';
}

static json_t *job_id_json(const struct mc_store_uuid *id)
{
	char b[48];

	snprintf(b, sizeof(b), "%" PRIu64 "-%" PRIu64, id->first, id->second);
	return json_string(b);
}

static json_t *info_json(const struct mc_master_drain_info *i)
{
	json_t *segs = json_array();

	for (uint32_t k = 0; segs && k < i->nsegments; k++)
		json_array_append_new(segs, json_string(i->segments[k]));
	return json_pack("{s:b, s:o, s:i, s:s, s:i, s:s, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, "
			 "s:s}",
			 "success", 1, "job_id", job_id_json(&i->id), "type", 0, "type_name",
			 "DRAIN", "status", i->status, "status_name",
			 mc_master_job_status_name(i->status), "created_at_ms_epoch",
			 (json_int_t)i->created_at_ms, "last_updated_at_ms_epoch",
			 (json_int_t)i->updated_at_ms, "segments", segs ? segs : json_array(),
			 "succeeded_units", (json_int_t)i->succeeded_units, "failed_units",
			 (json_int_t)i->failed_units, "blocked_units", (json_int_t)i->blocked_units,
			 "active_units", (json_int_t)i->active_units, "migrated_bytes",
			 (json_int_t)i->migrated_bytes, "message", i->message ? i->message : "");
}

/* A JSON array of names into v (borrowed from the document); -1: bad. */
static int names_of(json_t *a, const char **v, uint32_t cap, uint32_t *n)
{
	size_t i;
	json_t *e;

	*n = 0;
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > cap)
		return -1;
	json_array_foreach(a, i, e)
	{
		if (!json_is_string(e) || json_string_length(e) == 0)
			return -1;
		v[(*n)++] = json_string_value(e);
	}
	return 0;
}

static enum MHD_Result create(struct mc_master_server *s, struct MHD_Connection *conn,
			      const struct mc_http_request *req)
{
	json_error_t jerr;
	json_t *doc, *conc;
	uint32_t nsegs, ntgts, max_conc = 0;
	struct mc_store_uuid id;
	char err[320] = "";
	mc_status st;
	const char **sv, **tv;

	doc = req->body ? json_loadb(req->body, req->body_len, 0, &jerr) : NULL;
	if (!doc || !json_is_object(doc)) {
		json_decref(doc);
		return mc_master_http_api_error(conn, MC_ERR_INVALID_PARAMS,
						"the body must be a JSON object");
	}
	sv = calloc(DRAIN_MAX_SEGMENTS, sizeof(*sv));
	tv = calloc(DRAIN_MAX_SEGMENTS, sizeof(*tv));
	if (!sv || !tv) {
		free(sv);
		free(tv);
		json_decref(doc);
		return mc_master_http_api_error(conn, MC_ERR_NOMEM, NULL);
	}
	conc = json_object_get(doc, "max_concurrency");
	if (names_of(json_object_get(doc, "segments"), sv, DRAIN_MAX_SEGMENTS, &nsegs) < 0 ||
	    names_of(json_object_get(doc, "target_segments"), tv, DRAIN_MAX_SEGMENTS, &ntgts) < 0 ||
	    (conc && (!json_is_integer(conc) || json_integer_value(conc) < 1 ||
		      json_integer_value(conc) > 4096))) {
		st = MC_ERR_INVALID_PARAMS;
		snprintf(err, sizeof(err),
			 "segments and target_segments must be lists of segment names (at most "
			 "%d), max_concurrency an int in [1, 4096]",
			 DRAIN_MAX_SEGMENTS);
	} else {
		uint64_t epoch;

		if (conc)
			max_conc = (uint32_t)json_integer_value(conc);
		pthread_mutex_lock(&s->lock);
		epoch = __atomic_load_n(&s->wal_fail_epoch, __ATOMIC_ACQUIRE);
		if (s->wal_broken)
			st = MC_ERR_FILE_WRITE_FAIL; /* a job is logged state (tasks_wal.c) */
		else
			st = mc_master_drain_create(s->master, sv, nsegs, tv, ntgts, max_conc,
						    mc_now_ms(), &id, err, sizeof(err));
		mc_master_server_unlock(s);
		if (st == MC_OK && __atomic_load_n(&s->wal_fail_epoch, __ATOMIC_ACQUIRE) != epoch)
			st = MC_ERR_FILE_WRITE_FAIL; /* its record did not reach the log */
		if (st == MC_ERR_FILE_WRITE_FAIL)
			snprintf(err, sizeof(err),
				 "the master's log cannot be written: no change is taken until a "
				 "restart");
	}
	free(sv);
	free(tv);
	json_decref(doc);
	if (st != MC_OK)
		return mc_master_http_api_error(conn, st, err[0] ? err : NULL);
	return mc_master_http_json(conn, 200,
				   json_pack("{s:b, s:o, s:s, s:i, s:s}", "success", 1, "job_id",
					     job_id_json(&id), "status", "CREATED", "error_code", 0,
					     "error_message", ""));
}

static enum MHD_Result query_or_cancel(struct mc_master_server *s, struct MHD_Connection *conn,
				       bool cancel)
{
	const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "job_id");
	struct mc_master_drain_info info;
	struct mc_store_uuid id;
	json_t *j = NULL;
	mc_status st;

	if (!q || !*q)
		return mc_master_http_api_error(conn, MC_ERR_INVALID_PARAMS,
						"missing query parameter: job_id");
	if (!job_id_parse(q, &id))
		return mc_master_http_api_error(conn, MC_ERR_INVALID_PARAMS,
						"job_id must be <first>-<second>");
	pthread_mutex_lock(&s->lock);
	st = cancel ? mc_master_drain_cancel(s->master, &id, mc_now_ms(), &info)
		    : mc_master_drain_query(s->master, &id, &info);
	if (st == MC_OK)
		j = info_json(&info); /* its strings are the master's: copied under the lock */
	mc_master_server_unlock(s);
	if (st != MC_OK)
		return mc_master_http_api_error(conn, st, NULL);
	return mc_master_http_json(conn, 200, j);
}

enum MHD_Result mc_master_page_drain_jobs(void *arg, struct MHD_Connection *conn,
					  const struct mc_http_request *req)
{
	struct mc_master_server *s = arg;
	bool post = req->method_bit == MC_HTTP_POST;

	if (strcmp(req->url, "/api/v1/drain_jobs") == 0 && post)
		return create(s, conn, req);
	if (strcmp(req->url, "/api/v1/drain_jobs/query") == 0 &&
	    (req->method_bit & (MC_HTTP_GET | MC_HTTP_HEAD)))
		return query_or_cancel(s, conn, false);
	if (strcmp(req->url, "/api/v1/drain_jobs/cancel") == 0 && post)
		return query_or_cancel(s, conn, true);
	if (strcmp(req->url, "/api/v1/drain_jobs") == 0 ||
	    strcmp(req->url, "/api/v1/drain_jobs/query") == 0 ||
	    strcmp(req->url, "/api/v1/drain_jobs/cancel") == 0)
		return mc_http_respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed",
					    "text/plain; charset=utf-8");
	return mc_http_respond_text(conn, MHD_HTTP_NOT_FOUND, "Not Found",
				    "text/plain; charset=utf-8");
}
