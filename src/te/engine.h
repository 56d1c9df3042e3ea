/*
 * te/engine.h - the engine's internal structures, shared by the engine's
 * files (engine.c, batch.c, stage.c) and the tests that look inside.  The
 * transports below never see them (transport/transport.h).
 */
#ifndef MC_TE_ENGINE_H
#define MC_TE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/auth.h"
#include "base/config.h"
#include "base/list.h"
#include "mem/devmem.h"
#include "mem/memreg.h"
#include "meta/desc.h"
#include "mooncake/te.h"
#include "transport/slice.h"
#include "transport/transport.h"

struct mc_meta;
struct mc_rpc_server;
struct mc_stager;

/* Engine configuration, filled from mc_te_config_table (env MC_*) then
 * params.  Each transport has its own table, in its own file. */
struct mc_te_config {
	int64_t min_rpc_port;
	int64_t max_rpc_port;
	int64_t handshake_port;
	uint64_t handshake_max_length;
	int64_t handshake_connect_timeout_s;
	int64_t rpc_io_timeout_ms;
	int64_t rpc_recv_timeout_ms;
	int64_t rpc_max_conns;
	int64_t deregister_wait_ms;
	int64_t checksum; /* MC_TE_CHECKSUM: 1 = new batches are checksummed */
	bool disable_metacache;
	bool legacy_rpc_port_binding;
	char *tcp_bind_address; /* the engine's advertised host (upstream's name) */
	char *metadata_server;	/* when mc_te_open is given no connection string */
	char *filters;		/* devices, when mc_te_params names none */
	/* not in the table: from mc_te_params, 0 = the transports' own */
	unsigned workers;
	unsigned conns_per_peer;
};

extern const struct mc_config_entry mc_te_config_table[];
extern const size_t mc_te_config_table_len;

/* ---- tasks and slices -------------------------------------------------- */

struct mc_batch;

/* Told that task `task` of a batch ended with `status`, before anyone can
 * see it end (mc_te_batch_on_task_end). */
typedef void (*mc_task_end_cb)(void *arg, size_t task, mc_status status);
/* Told, on the staging thread (te/stage.c), that bytes [off, off + len) of
 * task `task`'s request, a read into device memory, are in the pinned
 * buffer at host and about to be copied to the device
 * (mc_te_batch_on_task_staged). */
typedef void (*mc_task_staged_cb)(void *arg, size_t task, uint64_t off, const void *host,
				  uint64_t len);

struct mc_task {
	struct mc_batch *batch;
	atomic_int state; /* enum mc_xfer_state */
	atomic_int error; /* first mc_status error */
	atomic_uint slices_left;
	atomic_uint_fast64_t bytes;
	uint64_t length;
	mc_segment_id target;
	struct mc_slice first;	/* most requests need exactly one slice */
	struct mc_slice *extra; /* further slices of a split request */
	unsigned nslices;
	/* the registration holding the local buffer, referenced while the
	 * task runs so deregistration waits for it (mem/memreg.h); NULL for
	 * an unregistered buffer (mc_te_submit_unchecked) */
	struct mc_memreg_entry *local_ent;
};

struct mc_batch {
	uint64_t id;
	struct mc_te *te;
	size_t capacity;
	size_t ntasks;
	struct mc_task *tasks;
	atomic_uint inflight; /* tasks not yet terminal; futex word */
	atomic_uint sleepers; /* waiters in (or entering) a futex wait on inflight */
	atomic_bool discard;  /* free when inflight reaches 0 */
	atomic_bool freed;
	atomic_uint busy; /* completers still touching the batch */
	/* mc_te_batch_on_task_end: run on the thread that ends each task */
	mc_task_end_cb task_end;
	void *task_end_arg;
	/* mc_te_batch_on_task_staged: run on the staging thread for each
	 * chunk of a device-memory read, before its copy to the device */
	mc_task_staged_cb task_staged;
	void *task_staged_arg;
	char *notify_name;
	char *notify_msg;
	mc_segment_id notify_target;
	atomic_bool notify_sent;
	bool checksum; /* the engine's setting when allocated (mc_te_set_checksum) */
};

/* ---- segments ---------------------------------------------------------- */

struct mc_segment {
	mc_segment_id id;
	char *name;
	struct mc_seg_desc *desc;
	char host[256]; /* where its RPC and data ports live */
	uint16_t rpc_port;
	struct mc_peer *peer; /* the first transport that reaches it, or NULL */
	atomic_bool stale;    /* refetch the descriptor before next use */
	/* when a refetch last found another descriptor (mc_now_ms; 0: never) */
	_Atomic uint64_t renewed_ms;
};

/* ---- the engine -------------------------------------------------------- */

struct mc_te {
	struct mc_te_config cfg;
	char *name;
	char host[256];
	char bind_host[256];	    /* where the RPC and data ports listen; "" = every interface */
	struct mc_auth_secret auth; /* the cluster secret, or none (base/auth.h) */
	uint16_t rpc_port;
	atomic_bool checksum; /* new batches check their bytes (mc_te_set_checksum) */
	bool p2p;
	char *metadata_uri;
	char *devices; /* mc_te_params.devices or cfg.filters; NULL = all */
	struct mc_meta *meta;
	struct mc_rpc_server *rpc;
	/* by registry row (transport/registry.c); NULL: off or unavailable */
	struct mc_transport *tps[MC_TRANSPORT_MAX];
	struct mc_transport *local_tp; /* the row with caps.local */
	struct mc_memreg memreg;
	const struct mc_devmem_ops *devmem; /* device memory backend, or NULL */
	struct mc_devmem_config stage_cfg;  /* MC_GPU_STAGE_* */
	struct mc_stager *stager;	    /* initiator-side staging; NULL without devmem */
	char host_id[64];
	bool published; /* our keys are in the metadata store */

	pthread_mutex_t publish_lock;

	pthread_rwlock_t seg_lock;
	struct mc_segment **segs; /* index = id; [0] unused (local) */
	size_t nsegs, segs_cap;

	pthread_mutex_t batch_lock;
	struct mc_batch **batches; /* slot table */
	uint32_t *batch_gen;
	size_t nbatch_slots;
	uint32_t *batch_free; /* free slot stack */
	size_t nbatch_free;

	pthread_mutex_t notify_lock;
	struct mc_te_notify *notifs;
	size_t nnotifs, notifs_cap;
};

/* The device of local memory at [p, p+len) (registered at a cuda:N
 * location, or a device pointer by the backend), -1 for host memory: a
 * device index, not a status, hence int. */
int mc_te_local_device(struct mc_te *te, const void *p, uint64_t len);
/* [p, p+len) lies inside one range registered with te (len 0: true). */
bool mc_te_local_registered(struct mc_te *te, const void *p, uint64_t len);
/* The same, and not registered read-only: bytes may land there. */
bool mc_te_local_writable(struct mc_te *te, const void *p, uint64_t len);
/* As mc_te_submit, without the check that each request's local range is
 * registered: for the store, which checks the buffers of its zero-copy
 * calls itself (once per buffer, before asking the master anything) and
 * hands its value calls' memory (the caller's value, its own allocations)
 * to the engine unregistered. */
mc_status mc_te_submit_unchecked(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs,
				 size_t n);
/* Have cb(arg, task, status) run as each task of batch id ends, on the
 * thread that ends it (a transport's worker, or the submitting thread for
 * a task that ends at once), before the task shows its end state and
 * before mc_te_batch_wait can return: the store hashes the bytes of a read
 * there, while they are still in that core's cache.  Set before the first
 * submit; cb must be short and must not call into the engine. */
mc_status mc_te_batch_on_task_end(struct mc_te *te, mc_batch_id id, mc_task_end_cb cb, void *arg);
/* Have cb(arg, task, off, host, len) run for each chunk of a read into
 * device memory that moves through the pinned staging buffers (te/stage.c),
 * on the staging thread, once its bytes are in the pinned buffer and
 * before they are copied to the device: the store hashes them there.
 * Chunks of one task may come in any order; each is seen once, and all of
 * them before the task ends.  A read the transport moves into device
 * memory itself (the local transport) is not staged, so not seen.  Set
 * before the first submit; cb must be short and must not call into the
 * engine. */
mc_status mc_te_batch_on_task_staged(struct mc_te *te, mc_batch_id id, mc_task_staged_cb cb,
				     void *arg);

/* ---- te/segment.c --------------------------------------------------------- */

/* Borrowed (entries live as long as the engine); NULL for an unknown id. */
struct mc_segment *mc_te_segment_get(struct mc_te *te, mc_segment_id id);
/* Refetch seg's descriptor, swap it in and pick its peer again. */
mc_status mc_te_segment_refresh(struct mc_te *te, struct mc_segment *seg);
/* After a transfer to the segment called name failed: whether its
 * descriptor was found changed (endpoint or publication time: its owner
 * restarted under the same name, or published again) at or after since_ms
 * (mc_now_ms), refetching it first when its peer has failed; that is
 * whether running the transfer again may succeed.  false for a segment
 * not open. */
bool mc_te_segment_renewed(struct mc_te *te, const char *name, uint64_t since_ms);
/* Where the segment called name has its RPC listener (rpc_meta record). */
mc_status mc_te_rpc_meta_lookup(struct mc_te *te, const char *name, char *host, size_t host_len,
				uint16_t *port);

/* The engine's open transport named name, or NULL (tests, tools). */
struct mc_transport *mc_te_transport(struct mc_te *te, const char *name);

/* Publish the local segment descriptor (after a registration change). */
mc_status mc_te_publish(struct mc_te *te);
/* Put back, now, the engine's metadata entries (descriptor, rpc_meta) that
 * its metadata service lost, e.g. when a restarted master that embeds the
 * HTTP metadata server asks the store client to remount; blocks for the
 * requests that takes.  Nothing in P2P mode. */
void mc_te_meta_resync(struct mc_te *te);
/* Build the local descriptor (caller frees). */
mc_status mc_te_local_desc(struct mc_te *te, struct mc_seg_desc **out);

#endif
