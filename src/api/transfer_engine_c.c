/*
 * api/transfer_engine_c.c - upstream's C API (transfer_engine_c.h) over ours.
 *
 * Programs written for upstream Mooncake call createTransferEngine,
 * submitTransfer and friends; this file turns each call into mc_te_* calls
 * and nothing more, so it uses only the public headers, as the Python module
 * and the tools do.
 *
 * The handle given out is a small wrapper around struct mc_te: it carries
 * the address handed out as a transport_t and the engine's place in the
 * graceful-shutdown registry.
 *
 * Errors come back in upstream's two shapes: negative ERR_* integers from
 * most functions, and non-negative Status codes from submitTransfer,
 * submitTransferWithNotify, getTransferStatus and freeBatchID.  One table
 * maps each mc_status to both; whatever it does not list becomes -1 or 1
 * (invalid argument), which is also what upstream uses for generic failure.
 *
 * Differences from upstream, all in the direction of refusing less:
 *  - TCP is always on, so installTransport is not needed before a transfer,
 *    and "rdma" gives the TCP transport when no RDMA device is usable;
 *  - freeBatchID refuses (4) only while a task is in flight; upstream also
 *    refuses until every task was polled into a terminal state;
 *  - batch ids are checked, so a stale or forged one gives 1 instead of
 *    undefined behaviour;
 *  - removeLocalSegment only checks its argument: the engine refetches a
 *    descriptor by itself when a peer fails or the descriptor went stale.
 *
 * Graceful shutdown: the signal handler only writes the signal number into a
 * pipe (write() is async-signal-safe, freeing an engine is not); a helper
 * thread reads it, destroys the registered engines and calls _exit(128 +
 * signo).  An atexit hook destroys them on a normal exit.  Engines destroyed
 * that way keep their wrapper (the application may still hold the handle),
 * and a later destroyTransferEngine on it does nothing.
 */
#include "mooncake/transfer_engine_c.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/te.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct compat_transport {
	struct compat_engine *engine;
	const char *name;
};

struct compat_engine {
	struct mc_te *te;	     /* NULL once destroyed by the shutdown path */
	struct compat_transport tcp; /* handed out as the transport_t */
	struct compat_engine *next;  /* in the shutdown registry */
	bool registered;	     /* in the shutdown registry */
	bool reaped;		     /* destroyed by the shutdown path */
};

/* ---- status mapping ---------------------------------------------------------- */

static const struct {
	mc_status status;
	int err;  /* upstream's negative ERR_* */
	int code; /* upstream's non-negative Status code */
} status_map[] = {
	{MC_OK, 0, 0},
	{MC_ERR_INVALID_PARAMS, -1, 1},
	{MC_ERR_BATCH_NOT_FOUND, -1, 1},
	{MC_ERR_TOO_MANY_REQUESTS, -2, 2},
	{MC_ERR_ADDRESS_NOT_REGISTERED, -3, 3},
	{MC_ERR_REMOTE_REJECTED, -3, 3},
	{MC_ERR_BATCH_BUSY, -4, 4},
	{MC_ERR_DEVICE_NOT_FOUND, -6, 6},
	{MC_ERR_ADDRESS_OVERLAPPED, -7, 7},
	{MC_ERR_TRANSPORT_UNSUPPORTED, -1, 8}, /* no ERR_* for it upstream */
	{MC_ERR_DNS, -101, 101},
	{MC_ERR_SOCKET, -102, 102},
	{MC_ERR_CONN_REFUSED, -102, 102},
	{MC_ERR_CONN_CLOSED, -102, 102},
	{MC_ERR_MALFORMED_JSON, -103, 103},
	{MC_ERR_REJECT_HANDSHAKE, -104, 104},
	{MC_ERR_METADATA, -200, 200},
	{MC_ERR_SEGMENT_NOT_FOUND, -200, 200},
	{MC_ERR_ENDPOINT, -201, 201},
	{MC_ERR_CONTEXT, -202, 202},
	{MC_ERR_NOMEM, -302, 302},
	{MC_ERR_NOT_SUPPORTED, -303, 999},
};

/* mc_status -> upstream's negative ERR_* (0 for MC_OK). */
static int to_err(mc_status s)
{
	for (size_t i = 0; i < ARRAY_SIZE(status_map); i++)
		if (status_map[i].status == s)
			return status_map[i].err;
	return -1;
}

/* mc_status -> upstream's non-negative Status code (0 for MC_OK). */
static int to_code(mc_status s)
{
	for (size_t i = 0; i < ARRAY_SIZE(status_map); i++)
		if (status_map[i].status == s)
			return status_map[i].code;
	return 1;
}

static struct mc_te *te_of(transfer_engine_t engine)
{
	return engine ? ((struct compat_engine *)engine)->te : NULL;
}

/* ---- engine ------------------------------------------------------------------ */

transfer_engine_t createTransferEngine(const char *metadata_conn_string,
				       const char *local_server_name, const char *ip_or_host_name,
				       uint64_t rpc_port, int auto_discover)
{
	struct mc_te_params p = {
		.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME,
		.metadata_uri = metadata_conn_string,
		.local_name = local_server_name,
	};
	const char *legacy = getenv("MC_LEGACY_RPC_PORT_BINDING");
	struct compat_engine *e;

	(void)auto_discover; /* TCP is always there; nothing to discover */
	if (ip_or_host_name && *ip_or_host_name) {
		p.field_mask |= MC_TE_PARAM_HOST;
		p.host = ip_or_host_name;
	}
	if (legacy && rpc_port > 0 && rpc_port <= UINT16_MAX) {
		p.field_mask |= MC_TE_PARAM_RPC_PORT;
		p.rpc_port = (uint16_t)rpc_port;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	if (mc_te_new(&p, &e->te) != MC_OK) {
		free(e);
		return NULL;
	}
	e->tcp.engine = e;
	e->tcp.name = "tcp";
	return e;
}

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct compat_engine *registry;

void destroyTransferEngine(transfer_engine_t engine)
{
	struct compat_engine *e = engine, **pp;
	bool reaped;

	if (!e)
		return;
	pthread_mutex_lock(&registry_lock);
	reaped = e->reaped;
	if (!reaped && e->registered) {
		for (pp = &registry; *pp; pp = &(*pp)->next) {
			if (*pp == e) {
				*pp = e->next;
				break;
			}
		}
		e->registered = false;
	}
	pthread_mutex_unlock(&registry_lock);
	if (reaped)
		return; /* the shutdown path freed the engine and keeps the wrapper */
	mc_te_free(e->te);
	free(e);
}

int discoverTopology(transfer_engine_t engine)
{
	return te_of(engine) ? 0 : -1;
}

int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len)
{
	struct mc_te *te = te_of(engine);
	const char *host;

	if (!te || (!buf_out && buf_len))
		return -1;
	host = mc_te_local_host(te);
	if (strchr(host, ':'))
		(void)snprintf(buf_out, buf_len, "[%s]:%u", host, (unsigned)mc_te_rpc_port(te));
	else
		(void)snprintf(buf_out, buf_len, "%s:%u", host, (unsigned)mc_te_rpc_port(te));
	return 0;
}

transport_t installTransport(transfer_engine_t engine, const char *proto, void **args)
{
	struct compat_engine *e = engine;

	(void)args; /* a NIC priority matrix means nothing to TCP */
	if (!e || !e->te || !proto)
		return NULL;
	if (strcmp(proto, "tcp") != 0 && strcmp(proto, "rdma") != 0)
		return NULL;
	return &e->tcp;
}

int uninstallTransport(transfer_engine_t engine, const char *proto)
{
	(void)engine;
	(void)proto;
	return 0;
}

/* ---- segments ------------------------------------------------------------------ */

static segment_handle_t open_segment(transfer_engine_t engine, const char *name, bool nocache)
{
	struct mc_te *te = te_of(engine);
	mc_segment_id id;
	mc_status rc;

	if (!te || !name)
		return -1;
	rc = nocache ? mc_te_reopen_segment(te, name, &id) : mc_te_open_segment(te, name, &id);
	if (rc != MC_OK || id > INT32_MAX)
		return -1;
	return (segment_handle_t)id;
}

segment_handle_t openSegment(transfer_engine_t engine, const char *segment_name)
{
	return open_segment(engine, segment_name, false);
}

segment_handle_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name)
{
	return open_segment(engine, segment_name, true);
}

int closeSegment(transfer_engine_t engine, segment_handle_t segment_id)
{
	(void)engine;
	(void)segment_id;
	return 0;
}

int warmupEfaSegment(transfer_engine_t engine, const char *segment_name)
{
	(void)segment_name;
	return te_of(engine) ? 0 : -1;
}

int removeLocalSegment(transfer_engine_t engine, const char *segment_name)
{
	if (!te_of(engine) || !segment_name || !*segment_name)
		return -1;
	return 0;
}

int syncSegmentCache(transfer_engine_t engine)
{
	struct mc_te *te = te_of(engine);

	if (!te)
		return -1;
	/* upstream keeps a descriptor it cannot refetch and still says 0 */
	(void)mc_te_sync_segment_cache(te, NULL);
	return 0;
}

/* ---- memory ---------------------------------------------------------------------- */

int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length, const char *location,
			int remote_accessible)
{
	return to_err(
		mc_te_register(te_of(engine), addr, length, location, remote_accessible != 0));
}

int unregisterLocalMemory(transfer_engine_t engine, void *addr)
{
	return to_err(mc_te_deregister(te_of(engine), addr));
}

int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list,
			     size_t buffer_len, const char *location)
{
	struct mc_te_buffer *bufs;
	mc_status rc;

	if (!te_of(engine) || (!buffer_list && buffer_len))
		return -1;
	if (buffer_len == 0)
		return 0;
	bufs = calloc(buffer_len, sizeof(*bufs));
	if (!bufs)
		return -302;
	for (size_t i = 0; i < buffer_len; i++) {
		bufs[i].addr = buffer_list[i].addr;
		bufs[i].length = buffer_list[i].length;
	}
	rc = mc_te_register_batch(te_of(engine), bufs, buffer_len, location);
	free(bufs);
	return to_err(rc);
}

int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list, size_t addr_len)
{
	return to_err(mc_te_deregister_batch(te_of(engine), addr_list, addr_len));
}

/* ---- batches ---------------------------------------------------------------------- */

batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size)
{
	mc_batch_id id;

	if (mc_te_batch_new(te_of(engine), batch_size, &id) != MC_OK)
		return INVALID_BATCH;
	return id;
}

/* Requests carry a 32-bit target id here and a 64-bit one in te.h, so they
 * are copied; small submissions stay on the stack. */
static int submit(transfer_engine_t engine, batch_id_t batch_id,
		  const struct transfer_request *entries, size_t count, const notify_msg_t *notify)
{
	struct mc_xfer_req stack[64], *reqs = stack;
	struct mc_te *te = te_of(engine);
	mc_status rc;

	if (!te || (!entries && count))
		return 1;
	if (count > ARRAY_SIZE(stack)) {
		reqs = calloc(count, sizeof(*reqs));
		if (!reqs)
			return 302;
	}
	for (size_t i = 0; i < count; i++) {
		if (entries[i].target_id < 0) {
			rc = MC_ERR_INVALID_PARAMS; /* a failed openSegment's -1 */
			goto out;
		}
		reqs[i].opcode = entries[i].opcode;
		reqs[i].source = entries[i].source;
		reqs[i].target_id = (mc_segment_id)entries[i].target_id;
		reqs[i].target_offset = entries[i].target_offset;
		reqs[i].length = entries[i].length;
	}
	if (notify)
		rc = mc_te_submit_with_notify(te, batch_id, reqs, count, notify->name, notify->msg);
	else
		rc = mc_te_submit(te, batch_id, reqs, count);
out:
	if (reqs != stack)
		free(reqs);
	return to_code(rc);
}

int submitTransfer(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request *entries,
		   size_t count)
{
	return submit(engine, batch_id, entries, count, NULL);
}

int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
			     struct transfer_request *entries, size_t count,
			     notify_msg_t notify_msg)
{
	if (count == 0)
		return 1;
	return submit(engine, batch_id, entries, count, &notify_msg);
}

int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
		      struct transfer_status *status)
{
	struct mc_xfer_status st;
	mc_status rc;

	if (!status)
		return 1;
	rc = mc_te_task_status(te_of(engine), batch_id, task_id, &st);
	if (rc != MC_OK)
		return to_code(rc);
	status->status = st.state;
	status->transferred_bytes = st.transferred_bytes;
	return 0;
}

int freeBatchID(transfer_engine_t engine, batch_id_t batch_id)
{
	return to_code(mc_te_batch_free(te_of(engine), batch_id));
}

/* ---- notifications --------------------------------------------------------------- */

notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size)
{
	struct mc_te_notify *list = NULL;
	notify_msg_t *out = NULL;
	size_t n = 0, i;

	if (size)
		*size = 0;
	if (!size || mc_te_notify_recv(te_of(engine), &list, &n) != MC_OK || n == 0)
		return NULL;
	/* the caller frees with freeNotifsMsgBuf, hence plain malloc */
	if (n <= INT32_MAX)
		out = calloc(n, sizeof(*out));
	for (i = 0; out && i < n; i++) {
		out[i].name = strdup(list[i].name ? list[i].name : "");
		out[i].msg = strdup(list[i].msg ? list[i].msg : "");
		if (!out[i].name || !out[i].msg) {
			freeNotifsMsgBuf(out, (int)i + 1);
			out = NULL;
		}
	}
	mc_te_notify_free(list, n);
	if (out)
		*size = (int)n;
	return out;
}

int freeNotifsMsgBuf(notify_msg_t *msg, int size)
{
	for (int i = 0; msg && i < size; i++) {
		free(msg[i].name);
		free(msg[i].msg);
	}
	free(msg);
	return 0;
}

int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg)
{
	return to_err(mc_te_notify_send(te_of(engine), target_id, notify_msg.name, notify_msg.msg));
}

/* ---- diagnostics --------------------------------------------------------------------- */

int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, int *count)
{
	if (!te_of(engine) || !count || (!stats && *count > 0))
		return -1;
	*count = 0; /* TCP only: no NICs to report */
	return 0;
}

int showLinks(transfer_engine_t engine, char *buf, size_t len, int json)
{
	if (!te_of(engine) || !buf)
		return -1;
	(void)snprintf(buf, len, "%s", json ? "[]" : "");
	return 0;
}

/* ---- graceful shutdown ----------------------------------------------------------------- */

static int signal_pipe[2] = {-1, -1};

/* Destroy every registered engine, once. */
static void reap_registered(void)
{
	pthread_mutex_lock(&registry_lock);
	for (struct compat_engine *e = registry; e; e = e->next) {
		if (e->reaped)
			continue;
		e->reaped = true;
		mc_te_free(e->te);
		e->te = NULL;
	}
	pthread_mutex_unlock(&registry_lock);
}

static void on_signal(int signo)
{
	int saved = errno;
	unsigned char b = (unsigned char)signo;

	if (write(signal_pipe[1], &b, 1) < 0) {
		/* nothing safe to do here */
	}
	errno = saved;
}

static void *shutdown_thread(void *arg)
{
	unsigned char signo;
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* the handler runs elsewhere */
	for (;;) {
		ssize_t n = read(signal_pipe[0], &signo, 1);
		if (n == 1)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		return NULL;
	}
	reap_registered();
	_exit(128 + signo);
}

static void install_shutdown_hooks(void)
{
	struct sigaction sa;
	pthread_t tid;
	sigset_t all, old;
	int rc;

	(void)atexit(reap_registered); /* if it fails, signals still work */
	if (pipe2(signal_pipe, O_CLOEXEC) < 0)
		return;
	/* start the thread with signals blocked so it never runs the handler */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&tid, NULL, shutdown_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(signal_pipe[0]);
		close(signal_pipe[1]);
		return;
	}
	pthread_detach(tid);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

void enableGracefulShutdown(transfer_engine_t engine)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct compat_engine *e = engine;

	if (!e)
		return;
	pthread_once(&once, install_shutdown_hooks);
	pthread_mutex_lock(&registry_lock);
	if (!e->registered && !e->reaped) {
		e->next = registry;
		registry = e;
		e->registered = true;
	}
	pthread_mutex_unlock(&registry_lock);
}
