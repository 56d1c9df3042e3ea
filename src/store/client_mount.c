/*
 * store/client_mount.c - extra segments of a store client (spec store.md
 * 9.3: mount_segment, allocate_and_mount_segment, unmount_and_free_segment,
 * unmount_local_disk_segment).
 *
 * Each extra segment is memory this client offers beside its global
 * segment: a MAP_SHARED window of a file (tmpfs, /dev/shm) or anonymous
 * memory from mem/hostmem.  It is registered with the engine first (a
 * peer may write into it as soon as the master hands it out), then
 * mounted at the master under its own random segment id and the client's
 * segment name, so replicas in it read and write through the engine like
 * any other.  The heartbeat's remount after a master restart sends every
 * extra segment still mounted (mc_store_xsegs_mounted).
 *
 * Threads: xseg_lock guards the list and every entry's flags; a call that
 * frees an entry marks it `freeing`, drops the lock for the master calls
 * and the grace period, and takes it out at the end, so the remount and
 * other calls never see memory being unmapped.  A copy task whose source
 * lies in an extra segment holds it (`busy`) for its transfer; the free
 * waits on xseg_idle until no task reads from it.
 *
 * Unmounted memory leaves the engine (docs/design.md, "Gets without the
 * master"): an unmount, of an extra segment or of the global one
 * (client_tasks.c), deregisters the segment's memory before it returns
 * (grace 0), or at its send time + the grace period, by the heartbeat
 * (mc_store_unmounted_dereg: before the master's own grace ends, which it
 * counts from later); the memory stays mapped until freed.  A reader's
 * location cache may still name a block there, intact: its read is now
 * refused by this engine's address check and it asks the master.
 *
 * Never: map past a file's end (a read there is SIGBUS), unmap memory the
 * engine still has registered, or free the global segment here.
 */
#define MC_LOG_MODULE "store"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "mem/hostmem.h"
#include "store/client_int.h"
#include "store/dummy_proto.h"
#include "store/master_conn.h"
#include "te/engine.h"

#define GRACE_MAX_MS (3600ull * 1000) /* the calls wait it out: at most an hour */

void mc_store_xsegs_init(struct mc_store *s)
{
	pthread_mutex_init(&s->xseg_lock, NULL);
	atomic_init(&s->dereg_due, UINT64_MAX);
	s->seg_dereg_at = 0;
	pthread_cond_init(&s->xseg_idle, NULL);
	pthread_mutex_init(&s->remount_lock, NULL);
	s->xsegs = NULL;
	s->n_xsegs = 0;
}

static mc_status logged(mc_status rc)
{
	if (rc != MC_OK)
		mc_warn("%s", mc_last_error());
	return rc;
}

static void id_str(const struct mc_store_uuid *id, char *out)
{
	snprintf(out, MC_STORE_SEGMENT_ID_MAX, "%" PRIu64 "-%" PRIu64, id->first, id->second);
}

static void fill_segment(struct mc_store *s, const struct mc_store_xseg *x,
			 struct mc_store_segment *seg)
{
	memset(seg, 0, sizeof(*seg));
	seg->id = x->id;
	seg->name = mc_proto_str_c(s->name);
	seg->base = (uint64_t)(uintptr_t)x->base;
	seg->size = x->size;
	seg->te_endpoint = mc_proto_str_c(s->name);
	seg->protocol = mc_proto_str_c(s->protocol);
	seg->host_id = mc_proto_str_c(s->host_id);
}

static void release_memory(struct mc_store *s, struct mc_store_xseg *x, bool registered)
{
	if (registered && x->registered && mc_te_deregister(s->te, x->base) != MC_OK)
		mc_warn("deregistering segment memory %p: %s", x->base, mc_last_error());
	if (x->map)
		munmap(x->map, x->map_len);
	mc_hostmem_unmap(x->mem);
	mc_free(x->location);
	x->map = NULL;
	x->mem = NULL;
	x->location = NULL;
}

static mc_status check_args(struct mc_store *s, const char *what, const char *protocol,
			    char *id_out)
{
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!id_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL id_out", what);
	if (protocol && *protocol && strcmp(protocol, s->protocol) != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "%s: protocol '%s' is not this client's engine's ('%s')", what,
				    protocol, s->protocol);
	return MC_OK;
}

/* Register x's memory, mount it, add it to the list; on failure frees it. */
static mc_status add_segment(struct mc_store *s, struct mc_store_xseg *x, const char *location,
			     char *id_out)
{
	struct mc_store_mount_req req;
	struct mc_store_msg resp;
	struct mc_store_xseg *v;
	mc_status rc;

	rc = mc_te_register(s->te, x->base, x->size, location && *location ? location : NULL, true);
	if (rc != MC_OK) {
		release_memory(s, x, false);
		return rc;
	}
	x->registered = true;
	if (location && *location && !(x->location = mc_strdup(location))) {
		release_memory(s, x, true);
		return MC_ERR_NOMEM;
	}
	x->id = mc_store_random_uuid();
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	fill_segment(s, x, &req.segment);
	rc = mc_master_conn_call(s->conn, MC_STORE_MOUNT_SEGMENT, &req, &resp);
	if (rc != MC_OK) {
		release_memory(s, x, true);
		return rc;
	}
	mc_store_msg_release(&resp);
	pthread_mutex_lock(&s->xseg_lock);
	v = mc_realloc(s->xsegs, (s->n_xsegs + 1) * sizeof(*v));
	if (v) {
		s->xsegs = v;
		v[s->n_xsegs++] = *x;
	}
	pthread_mutex_unlock(&s->xseg_lock);
	if (!v) {
		(void)mc_store_master_unmount(s, &x->id, 0);
		release_memory(s, x, true);
		return MC_ERR_NOMEM;
	}
	id_str(&x->id, id_out);
	mc_info("mounted extra segment %s: %" PRIu64 " bytes at %p", id_out, x->size, x->base);
	return MC_OK;
}

static mc_status do_mount_segment(struct mc_store *s, const char *path, uint64_t size,
				  uint64_t offset, const char *protocol, const char *location,
				  char *id_out)
{
	struct mc_store_xseg x;
	struct stat st;
	long page = sysconf(_SC_PAGESIZE);
	mc_status rc = check_args(s, "mount_segment", protocol, id_out);
	void *p;
	int fd, e;

	if (rc != MC_OK)
		return rc;
	if (!path || !*path)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "mount_segment: empty path");
	if (size == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "mount_segment: size 0");
	if (offset % (uint64_t)page)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "mount_segment: offset %" PRIu64
				    " is not a multiple of the page size (%ld)",
				    offset, page);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "mount_segment: cannot open %s: %s",
				    path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "mount_segment: %s is not a regular file", path);
	}
	if (offset > (uint64_t)st.st_size || size > (uint64_t)st.st_size - offset) {
		close(fd);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "mount_segment: [%" PRIu64 ", +%" PRIu64
				    ") runs past the end of %s (%" PRIu64 " bytes)",
				    offset, size, path, (uint64_t)st.st_size);
	}
	p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
	e = errno;
	close(fd);
	if (p == MAP_FAILED)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "mount_segment: cannot map %s: %s", path,
				    strerror(e));
	memset(&x, 0, sizeof(x));
	x.base = p;
	x.size = size;
	x.map = p;
	x.map_len = (size_t)size;
	return add_segment(s, &x, location, id_out);
}

static mc_status do_allocate_and_mount_segment(struct mc_store *s, uint64_t size,
					       const char *protocol, const char *location,
					       char *id_out, uint64_t *allocated_out)
{
	struct mc_hostmem_config hc;
	struct mc_store_xseg x;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	mc_status rc = check_args(s, "allocate_and_mount_segment", protocol, id_out);

	if (rc != MC_OK)
		return rc;
	if (size == 0 || size > UINT64_MAX - page)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "allocate_and_mount_segment: bad size %" PRIu64, size);
	memset(&x, 0, sizeof(x));
	x.size = (size + page - 1) / page * page;
	mc_hostmem_config_load(&hc);
	rc = mc_hostmem_map(x.size, 0, &hc, "extra segment", &x.mem);
	mc_config_entry_release(mc_hostmem_config_table, mc_hostmem_config_table_len, &hc);
	if (rc != MC_OK)
		return rc;
	x.base = mc_hostmem_addr(x.mem);
	rc = add_segment(s, &x, location, id_out);
	if (rc == MC_OK && allocated_out)
		*allocated_out = x.size;
	return rc;
}

static struct mc_store_xseg *find(struct mc_store *s, const struct mc_store_uuid *id)
{
	for (size_t i = 0; i < s->n_xsegs; i++)
		if (s->xsegs[i].id.first == id->first && s->xsegs[i].id.second == id->second)
			return &s->xsegs[i];
	return NULL;
}

mc_status mc_store_xseg_unmount(struct mc_store *s, const struct mc_store_uuid *id,
				uint64_t grace_period_ms)
{
	struct mc_store_xseg *x;
	uint64_t sent;
	mc_status rc;

	pthread_mutex_lock(&s->remount_lock);
	pthread_mutex_lock(&s->xseg_lock);
	x = find(s, id);
	if (!x || x->unmounted || x->freeing) {
		pthread_mutex_unlock(&s->xseg_lock);
		pthread_mutex_unlock(&s->remount_lock);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_segment: %" PRIu64 "-%" PRIu64
				    " is not a segment this client has mounted",
				    id->first, id->second);
	}
	x->unmounted = true; /* the remount leaves it out from now */
	pthread_mutex_unlock(&s->xseg_lock);
	sent = mc_now_ms();
	rc = mc_store_master_unmount(s, id, grace_period_ms);
	pthread_mutex_lock(&s->xseg_lock);
	x = find(s, id);
	if (x && rc != MC_OK)
		x->unmounted = false;
	else if (x && !x->freeing)
		mc_store_unmounted_locked(s, x, sent, grace_period_ms);
	pthread_mutex_unlock(&s->xseg_lock);
	pthread_mutex_unlock(&s->remount_lock);
	return rc;
}

static void dereg_locked(struct mc_store *s, void *base, bool *registered)
{
	if (*registered && mc_te_deregister(s->te, base) != MC_OK)
		mc_warn("deregistering unmounted segment memory %p: %s", base, mc_last_error());
	*registered = false;
}

void mc_store_unmounted_locked(struct mc_store *s, struct mc_store_xseg *x, uint64_t sent_ms,
			       uint64_t grace_period_ms)
{
	uint64_t at = sent_ms + grace_period_ms;

	if (grace_period_ms == 0) {
		if (x)
			dereg_locked(s, x->base, &x->registered);
		else
			dereg_locked(s, s->seg, &s->seg_registered);
		return;
	}
	if (x)
		x->dereg_at = at;
	else
		s->seg_dereg_at = at;
	if (at < atomic_load(&s->dereg_due)) {
		atomic_store(&s->dereg_due, at);
		pthread_mutex_lock(&s->hb_lock); /* wake the heartbeat to wait for it */
		pthread_cond_broadcast(&s->hb_cond);
		pthread_mutex_unlock(&s->hb_lock);
	}
}

uint64_t mc_store_unmounted_dereg(struct mc_store *s)
{
	uint64_t now = mc_now_ms(), next = UINT64_MAX;

	if (atomic_load(&s->dereg_due) > now)
		return atomic_load(&s->dereg_due);
	pthread_mutex_lock(&s->xseg_lock);
	if (s->seg_dereg_at && s->seg_dereg_at <= now) {
		dereg_locked(s, s->seg, &s->seg_registered);
		s->seg_dereg_at = 0;
	}
	if (s->seg_dereg_at)
		next = s->seg_dereg_at;
	for (size_t i = 0; i < s->n_xsegs; i++) {
		struct mc_store_xseg *x = &s->xsegs[i];

		if (x->dereg_at && x->dereg_at <= now && !x->freeing) {
			dereg_locked(s, x->base, &x->registered);
			x->dereg_at = 0;
		}
		if (x->dereg_at && x->dereg_at < next)
			next = x->dereg_at;
	}
	atomic_store(&s->dereg_due, next);
	pthread_mutex_unlock(&s->xseg_lock);
	return next;
}

static void wait_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static mc_status do_unmount_and_free_segment(struct mc_store *s, const char *segment_id,
					     uint64_t grace_period_ms)
{
	struct mc_store_uuid id;
	struct mc_store_xseg *x, copy;
	uint64_t sent = 0;
	bool was_mounted;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!mc_store_parse_seg_id(segment_id, &id))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_and_free_segment: '%s' is not a segment id "
				    "(<first>-<second>)",
				    segment_id ? segment_id : "(null)");
	if (grace_period_ms > GRACE_MAX_MS)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_and_free_segment: grace period above an hour");
	pthread_mutex_lock(&s->remount_lock);
	pthread_mutex_lock(&s->xseg_lock);
	x = find(s, &id);
	if (!x || x->freeing) {
		pthread_mutex_unlock(&s->xseg_lock);
		pthread_mutex_unlock(&s->remount_lock);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_and_free_segment: %s is not an extra segment of this "
				    "client (mount_segment, allocate_and_mount_segment)",
				    segment_id);
	}
	x->freeing = true;
	was_mounted = !x->unmounted;
	x->unmounted = true;
	pthread_mutex_unlock(&s->xseg_lock);
	sent = mc_now_ms();
	if (was_mounted)
		rc = mc_store_master_unmount(s, &id, grace_period_ms);
	if (rc != MC_OK) {
		pthread_mutex_lock(&s->xseg_lock);
		x = find(s, &id);
		x->freeing = false;
		x->unmounted = false;
		pthread_mutex_unlock(&s->xseg_lock);
	}
	pthread_mutex_unlock(&s->remount_lock);
	if (rc != MC_OK)
		return rc;
	if (was_mounted) {
		uint64_t now = mc_now_ms();

		if (grace_period_ms && now < sent + grace_period_ms)
			wait_ms(sent + grace_period_ms - now); /* readable until then */
		/* out of the engine first (a cached location is refused from
		 * now), then out of the master now, not at its next sweep: no
		 * replica list may name it once it is unmapped (an unknown id
		 * is no error) */
		pthread_mutex_lock(&s->xseg_lock);
		while ((x = find(s, &id))->busy) /* a task still reads it */
			pthread_cond_wait(&s->xseg_idle, &s->xseg_lock);
		dereg_locked(s, x->base, &x->registered);
		pthread_mutex_unlock(&s->xseg_lock);
		if (grace_period_ms)
			(void)mc_store_master_unmount(s, &id, 0);
	}
	pthread_mutex_lock(&s->xseg_lock);
	while ((x = find(s, &id))->busy)
		pthread_cond_wait(&s->xseg_idle, &s->xseg_lock); /* a task still reads it */
	copy = *x;
	*x = s->xsegs[--s->n_xsegs];
	pthread_mutex_unlock(&s->xseg_lock);
	release_memory(s, &copy, true);
	mc_info("freed extra segment %s", segment_id);
	return MC_OK;
}

bool mc_store_xseg_hold(struct mc_store *s, uint64_t addr, uint64_t len, struct mc_store_uuid *id)
{
	bool found = false;

	pthread_mutex_lock(&s->xseg_lock);
	for (size_t i = 0; i < s->n_xsegs && !found; i++) {
		struct mc_store_xseg *x = &s->xsegs[i];
		uint64_t base = (uint64_t)(uintptr_t)x->base;

		if (x->unmounted || x->freeing || addr < base || len > x->size ||
		    addr - base > x->size - len)
			continue;
		x->busy++;
		*id = x->id;
		found = true;
	}
	pthread_mutex_unlock(&s->xseg_lock);
	return found;
}

void mc_store_xseg_release(struct mc_store *s, const struct mc_store_uuid *id)
{
	struct mc_store_xseg *x;

	pthread_mutex_lock(&s->xseg_lock);
	x = find(s, id);
	if (x && --x->busy == 0)
		pthread_cond_broadcast(&s->xseg_idle);
	pthread_mutex_unlock(&s->xseg_lock);
}

size_t mc_store_xsegs_mounted(struct mc_store *s, struct mc_store_segment **out)
{
	size_t n = 0;

	*out = NULL;
	pthread_mutex_lock(&s->xseg_lock);
	if (s->n_xsegs)
		*out = mc_calloc(s->n_xsegs, sizeof(**out));
	for (size_t i = 0; *out && i < s->n_xsegs; i++)
		if (!s->xsegs[i].unmounted)
			fill_segment(s, &s->xsegs[i], &(*out)[n++]);
	pthread_mutex_unlock(&s->xseg_lock);
	return n;
}

void mc_store_xsegs_free(struct mc_store *s)
{
	/* close: no other call runs (mc_store_close's contract) */
	for (size_t i = 0; i < s->n_xsegs; i++) {
		struct mc_store_xseg *x = &s->xsegs[i];

		if (!x->unmounted && s->conn && mc_store_master_unmount(s, &x->id, 0) != MC_OK)
			mc_warn("unmount of an extra segment failed: %s", mc_last_error());
		release_memory(s, x, true);
	}
	mc_free(s->xsegs);
	s->xsegs = NULL;
	s->n_xsegs = 0;
}

static mc_status do_unmount_local_disk_segment(struct mc_store *s, uint64_t grace_period_ms)
{
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (grace_period_ms > GRACE_MAX_MS)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_local_disk_segment: grace period above an hour");
	rc = mc_store_offload_withdraw(s);
	if (rc == MC_OK)
		wait_ms(grace_period_ms);
	return rc;
}

/* ---- the public calls: a refusal is logged (these are operators' calls) ---- */

mc_status mc_store_mount_segment(struct mc_store *s, const char *path, uint64_t size,
				 uint64_t offset, const char *protocol, const char *location,
				 char *id_out)
{
	if (s && s->dummy)
		return mc_store_dummy_segment(s, MC_DUMMY_MSG_MOUNT_SEGMENT, path, size, offset,
					      protocol, location, id_out, NULL);
	return logged(do_mount_segment(s, path, size, offset, protocol, location, id_out));
}

mc_status mc_store_allocate_and_mount_segment(struct mc_store *s, uint64_t size,
					      const char *protocol, const char *location,
					      char *id_out, uint64_t *allocated_out)
{
	if (s && s->dummy)
		return mc_store_dummy_segment(s, MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT, NULL, size, 0,
					      protocol, location, id_out, allocated_out);
	return logged(
		do_allocate_and_mount_segment(s, size, protocol, location, id_out, allocated_out));
}

mc_status mc_store_unmount_and_free_segment(struct mc_store *s, const char *segment_id,
					    uint64_t grace_period_ms)
{
	if (s && s->dummy)
		return mc_store_dummy_segment(s, MC_DUMMY_MSG_UNMOUNT_FREE_SEGMENT, segment_id,
					      grace_period_ms, 0, NULL, NULL, NULL, NULL);
	return logged(do_unmount_and_free_segment(s, segment_id, grace_period_ms));
}

mc_status mc_store_unmount_local_disk_segment(struct mc_store *s, uint64_t grace_period_ms)
{
	if (s && s->dummy)
		return mc_store_dummy_segment(s, MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK, NULL,
					      grace_period_ms, 0, NULL, NULL, NULL, NULL);
	return logged(do_unmount_local_disk_segment(s, grace_period_ms));
}
