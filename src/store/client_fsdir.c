/*
 * store/client_fsdir.c - the store client's side of the legacy
 * shared-filesystem DISK tier (spec store.md 5.1; the master's side is
 * master/fs_tier.c, the path layout and file format store/fsdir.h).
 *
 * Write: a PutStart answered with a DISK replica (the master runs with
 * --root_fs_dir) is finished in two steps.  The caller writes the memory
 * replicas, copies the value into a job, ends the memory part with
 * PutEnd(MEMORY) and hands the job to this client's file writer, one
 * thread started with the first job: it writes the file atomically
 * (fsdir.c: temporary name, fsync, rename, fsync of the directory) and
 * reports PutEnd(DISK), or PutRevoke(DISK) when the write failed (one
 * logged line; memory stays).  A report the master refuses (the object was
 * removed or rewritten meanwhile) deletes the file if it is still this
 * write's.  The jobs queued hold at most MC_STORE_FS_QUEUE_BYTES of copied
 * values; a put beyond that waits for room, so the writer never falls
 * behind without bound and nothing is dropped.  Close drains the queue
 * before the master connection goes.
 *
 * Read: a replica list whose only readable replica is DISK (memory
 * evicted or its segment gone) is read from the file by path, by any
 * client that sees the directory; the file must be the one the master
 * listed (its replica id), of the object, whole, with its checksum
 * (fsdir.c), else the read fails with FILE_NOT_FOUND, FILE_READ_FAIL or
 * CHECKSUM_MISMATCH: never other bytes.
 *
 * The files record the key and the replica id but no tenant: the master's
 * path already tells tenants apart, and a master without multi-tenancy
 * maps every client's tenant name to one, so writer and reader may name
 * their tenants differently and still share the object.
 *
 * Threads: the queue is under fs->lock; the writer thread is the only one
 * that pops; any caller pushes.
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "store/client_int.h"
#include "store/fsdir.h"
#include "store/master_conn.h"

#define MC_STORE_FS_QUEUE_BYTES (256ull << 20)

struct mc_store_fs_job {
	struct mc_store_fs_job *next;
	char *path;
	char *key;
	uint64_t replica_id;
	uint64_t len;
	bool upsert;
	char *data;
};

struct mc_store_fs {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* work for the writer, room for a caller, idle */
	struct mc_store_fs_job *head, *tail;
	uint64_t bytes; /* queued and in flight */
	uint32_t busy;	/* jobs in flight in the writer */
	bool stop;
	bool started;
	pthread_t thr;
};

static void job_free(struct mc_store_fs_job *j)
{
	if (!j)
		return;
	mc_free(j->path);
	mc_free(j->key);
	mc_free(j->data);
	mc_free(j);
}

const struct mc_store_replica *mc_store_fs_replica(const struct mc_store_replica *reps, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (reps[i].type == MC_STORE_REPLICA_DISK)
			return &reps[i];
	}
	return NULL;
}

struct mc_store_fs_job *mc_store_fs_job_new(const struct mc_store_io *io,
					    const struct mc_store_replica *r, bool upsert)
{
	struct mc_store_fs_job *j = mc_calloc(1, sizeof(*j));
	uint64_t off = 0;

	if (!j)
		return NULL;
	j->path = mc_strndup(r->file_path.ptr ? r->file_path.ptr : "", r->file_path.len);
	j->key = mc_strndup(io->key.ptr ? io->key.ptr : "", io->key.len);
	j->data = mc_malloc(io->len ? io->len : 1);
	if (!j->path || !j->key || !j->data || io->len > SIZE_MAX) {
		job_free(j);
		return NULL;
	}
	for (size_t b = 0; b < io->nbufs && off < io->len; b++) {
		uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - off);

		memcpy(j->data + off, io->bufs[b], n);
		off += n;
	}
	j->replica_id = r->id;
	j->len = io->len;
	j->upsert = upsert;
	return j;
}

/* PutEnd (end) or PutRevoke of the DISK replica of key. */
mc_status mc_store_fs_report(struct mc_store *s, const char *key, bool upsert, bool end,
			     uint64_t replica_id)
{
	struct mc_proto_opt_u64 id = {replica_id != 0 && mc_master_conn_peer_minor(s->conn) >= 4,
				      replica_id};
	struct mc_store_msg resp;
	mc_status rc;

	if (end) {
		struct mc_store_put_end_req e = {
			.client_id = s->client_id,
			.tenant = mc_store_tenant(s),
			.replica_type = MC_STORE_REPLICA_DISK,
			.key = mc_proto_str_c(key),
			.replica_id = id,
		};
		rc = mc_master_conn_call(s->conn, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END,
					 &e, &resp);
	} else {
		struct mc_store_put_revoke_req r = {
			.client_id = s->client_id,
			.tenant = mc_store_tenant(s),
			.replica_type = MC_STORE_REPLICA_DISK,
			.key = mc_proto_str_c(key),
			.replica_id = id,
		};
		rc = mc_master_conn_call(s->conn, MC_STORE_PUT_REVOKE, &r, &resp);
	}
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

static void job_run(struct mc_store *s, struct mc_store_fs_job *j)
{
	struct iovec part = {j->data, (size_t)j->len};
	const char *t = ""; /* the master's path holds the tenant; see the essay */
	mc_status rc = mc_fsdir_write(j->path, t, strlen(t), j->key, strlen(j->key), j->replica_id,
				      &part, 1, j->len);

	if (rc != MC_OK) {
		mc_error("DISK replica of %s not written (memory stays): %s", j->key,
			 mc_last_error());
		if (mc_store_fs_report(s, j->key, j->upsert, false, j->replica_id) != MC_OK)
			mc_debug("revoke of the DISK replica of %s: %s", j->key, mc_last_error());
		return;
	}
	rc = mc_store_fs_report(s, j->key, j->upsert, true, j->replica_id);
	if (rc != MC_OK) {
		/* removed or rewritten meanwhile: the file is nobody's */
		mc_debug("DISK replica of %s not taken (%s); deleting its file", j->key,
			 mc_last_error());
		(void)mc_fsdir_unlink(j->path, j->replica_id);
	}
}

static void *writer_main(void *arg)
{
	struct mc_store *s = arg;
	struct mc_store_fs *fs = s->fs;

	pthread_mutex_lock(&fs->lock);
	for (;;) {
		struct mc_store_fs_job *j = fs->head;

		if (!j) {
			if (fs->stop)
				break;
			pthread_cond_wait(&fs->cond, &fs->lock);
			continue;
		}
		fs->head = j->next;
		if (!fs->head)
			fs->tail = NULL;
		fs->busy++;
		pthread_mutex_unlock(&fs->lock);
		job_run(s, j);
		pthread_mutex_lock(&fs->lock);
		fs->busy--;
		fs->bytes -= j->len;
		job_free(j);
		pthread_cond_broadcast(&fs->cond);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

/* s->fs, made on first use (set-up and close never race with puts). */
static struct mc_store_fs *fs_get(struct mc_store *s)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	struct mc_store_fs *fs;

	pthread_mutex_lock(&once);
	fs = s->fs;
	if (!fs && (fs = mc_calloc(1, sizeof(*fs)))) {
		pthread_mutex_init(&fs->lock, NULL);
		pthread_cond_init(&fs->cond, NULL);
		s->fs = fs;
	}
	pthread_mutex_unlock(&once);
	return fs;
}

mc_status mc_store_fs_submit(struct mc_store *s, struct mc_store_fs_job *j)
{
	struct mc_store_fs *fs = fs_get(s);

	if (!fs) {
		job_free(j);
		return mc_set_error(MC_ERR_NOMEM, "no memory for the DISK writer");
	}
	pthread_mutex_lock(&fs->lock);
	if (!fs->started) {
		if (pthread_create(&fs->thr, NULL, writer_main, s) != 0) {
			pthread_mutex_unlock(&fs->lock);
			job_free(j);
			return mc_set_error(MC_ERR_NOMEM, "cannot start the DISK writer");
		}
		fs->started = true;
	}
	/* room: a value larger than the cap waits for an empty queue */
	while (fs->bytes && fs->bytes + j->len > MC_STORE_FS_QUEUE_BYTES)
		pthread_cond_wait(&fs->cond, &fs->lock);
	fs->bytes += j->len;
	if (fs->tail)
		fs->tail->next = j;
	else
		fs->head = j;
	fs->tail = j;
	pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	return MC_OK;
}

void mc_store_fs_job_drop(struct mc_store *s, struct mc_store_fs_job *j, bool revoke)
{
	if (revoke && j && mc_store_fs_report(s, j->key, j->upsert, false, j->replica_id) != MC_OK)
		mc_debug("revoke of the DISK replica of %s: %s", j->key, mc_last_error());
	job_free(j);
}

void mc_store_fs_flush(struct mc_store *s)
{
	struct mc_store_fs *fs = s->fs;

	if (!fs)
		return;
	pthread_mutex_lock(&fs->lock);
	while (fs->head || fs->busy)
		pthread_cond_wait(&fs->cond, &fs->lock);
	pthread_mutex_unlock(&fs->lock);
}

void mc_store_fs_stop(struct mc_store *s)
{
	struct mc_store_fs *fs = s->fs;

	if (!fs)
		return;
	pthread_mutex_lock(&fs->lock);
	fs->stop = true;
	pthread_cond_broadcast(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	if (fs->started)
		pthread_join(fs->thr, NULL); /* drains the queue first */
	pthread_cond_destroy(&fs->cond);
	pthread_mutex_destroy(&fs->lock);
	mc_free(fs);
	s->fs = NULL;
}

/* ---- reads ---- */

void mc_store_fs_read(struct mc_store *s, struct mc_store_io *io)
{
	const struct mc_store_replica *r = &io->reps[0];
	const char *t = ""; /* as the writer's */
	char *path = mc_strndup(r->file_path.ptr ? r->file_path.ptr : "", r->file_path.len);
	char *key = mc_strndup(io->key.ptr ? io->key.ptr : "", io->key.len);
	uint64_t off = r->address; /* a range's start (mc_store_ranges_add) */
	bool direct = off == 0 && io->len == r->size && io->nbufs >= 1 && io->lens[0] >= io->len;
	char *tmp = NULL;
	mc_status rc;

	if (!path || !key || !mc_store_range_inside(off, io->len, r->size) ||
	    (!direct && !(tmp = mc_malloc(r->size ? r->size : 1)))) {
		io->status =
			mc_set_error(path && key ? MC_ERR_INVALID_PARAMS : MC_ERR_NOMEM,
				     "DISK read of %s: no memory or a bad range", key ? key : "?");
		goto out;
	}
	rc = mc_fsdir_read(path, t, strlen(t), key, strlen(key), r->id, direct ? io->bufs[0] : tmp,
			   r->size);
	if (rc == MC_OK && !direct) {
		uint64_t done = 0;

		for (size_t b = 0; b < io->nbufs && done < io->len; b++) {
			uint64_t n = MC_MIN((uint64_t)io->lens[b], io->len - done);

			memcpy(io->bufs[b], tmp + off + done, n);
			done += n;
		}
	}
	io->status = rc;
	if (rc == MC_OK)
		atomic_fetch_add(&s->fs_reads, 1);
out:
	mc_free(tmp);
	mc_free(path);
	mc_free(key);
}
