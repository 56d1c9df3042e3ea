/*
 * store/dummy_client.c - a dummy client: a struct mc_store whose calls go
 * to a mooncake_client daemon on this host (store/dummy_client.h;
 * docs/design.md, "Dummy clients"), and the shared-memory regions
 * (mc_store_shm_alloc) such a client can register.
 *
 * The dummy's memory is memfd-backed and sealed against shrinking; the
 * daemon maps each region it is sent, so a zero-copy call sends only
 * (region, offset, length) and the engine in the daemon moves the bytes
 * between these very pages and the pool.  The copy-based calls stage in
 * the local buffer (region 0), which this side allocates from: the memory
 * is the dummy's, and nothing of the daemon's is left behind when the
 * dummy dies.
 *
 * One mutex (`lock`) covers the socket, the request ids and the region
 * table: a request and its answer are one critical section, and a
 * reconnect (the pinger's) re-sends every region under the same lock, so
 * no call sees a half-restored daemon.  With a cluster secret, each
 * connect (the first and the pinger's) proves it before the HELLO
 * (base/auth_hs.h, channel "dummy").  With MC_DUMMY_BUSY_POLL_US set, a
 * caller waiting for its answer sleeps until shortly before the time it
 * predicts and polls through a short window (store/dummy_wait.h), so the
 * answer of a long call finds it awake; by default it sleeps until the
 * answer wakes it.  What this file must never do: send
 * one of its own pointers to the daemon, or keep going on a socket after
 * one failed read or write (the framing is unknown then: close, and let
 * the pinger reconnect).
 */
#define MC_LOG_MODULE "dummy"
#include "store/dummy_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/auth.h"
#include "base/auth_hs.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/version.h"
#include "store/client_config.h"
#include "store/dummy_proto.h"
#include "store/dummy_server.h"
#include "store/dummy_wait.h"

#define DEFAULT_PORT 50052
#define NO_REGION    UINT64_MAX /* names no region: the daemon refuses that key */
#define ALIGN	     64u

/* ---- shared-memory regions (process-wide) ---- */

struct shm_block {
	void *addr;
	size_t len;
	int fd;
};

static pthread_mutex_t shm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_block *shm_blocks;
static size_t shm_n, shm_cap;

static mc_status memfd_region(size_t len, void **addr_out, int *fd_out)
{
	int fd = memfd_create("mooncake-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	if (fd < 0)
		return mc_set_error(MC_ERR_NOMEM, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)len) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
		mc_status rc =
			mc_set_error(MC_ERR_NOMEM, "memfd of %zu bytes: %s", len, strerror(errno));
		close(fd);
		return rc;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return mc_set_error(MC_ERR_NOMEM, "mmap of %zu bytes: %s", len, strerror(errno));
	}
	*addr_out = p;
	*fd_out = fd;
	return MC_OK;
}

mc_status mc_store_shm_alloc(size_t size, void **out)
{
	void *p;
	int fd;
	mc_status rc;

	if (!out || size == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "shm_alloc: size 0 or NULL out");
	*out = NULL;
	rc = memfd_region(size, &p, &fd);
	if (rc != MC_OK)
		return rc;
	pthread_mutex_lock(&shm_lock);
	if (shm_n == shm_cap) {
		size_t ncap = shm_cap ? 2 * shm_cap : 16;
		struct shm_block *v = realloc(shm_blocks, ncap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&shm_lock);
			munmap(p, size);
			close(fd);
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
		shm_blocks = v;
		shm_cap = ncap;
	}
	shm_blocks[shm_n++] = (struct shm_block){p, size, fd};
	pthread_mutex_unlock(&shm_lock);
	*out = p;
	return MC_OK;
}

mc_status mc_store_shm_free(void *addr)
{
	pthread_mutex_lock(&shm_lock);
	for (size_t i = 0; i < shm_n; i++) {
		if (shm_blocks[i].addr != addr)
			continue;
		munmap(addr, shm_blocks[i].len);
		close(shm_blocks[i].fd);
		shm_blocks[i] = shm_blocks[--shm_n];
		pthread_mutex_unlock(&shm_lock);
		return MC_OK;
	}
	pthread_mutex_unlock(&shm_lock);
	return mc_set_error(MC_ERR_INVALID_PARAMS, "shm_free: %p is not from shm_alloc", addr);
}

/* A duplicate of the descriptor behind [addr, addr+len) when that is
 * exactly a region from mc_store_shm_alloc, else -1. */
static int shm_dup(void *addr, size_t len)
{
	int fd = -1;
	pthread_mutex_lock(&shm_lock);
	for (size_t i = 0; i < shm_n; i++)
		if (shm_blocks[i].addr == addr && shm_blocks[i].len == len)
			fd = fcntl(shm_blocks[i].fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&shm_lock);
	return fd;
}

/* ---- the client ---- */

struct dregion {
	uint64_t id;
	char *base;
	size_t len;
	int fd; /* ours (a duplicate), re-sent on reconnect */
};

struct extent {
	size_t off, len;
};

struct mc_dummy {
	pthread_mutex_t lock; /* fd, next_id, regions, hostname */
	int fd;		      /* -1 while the daemon is unreachable */
	uint16_t port;
	uint64_t next_id;
	uint64_t next_region;
	char hostname[256];
	struct mc_auth_secret auth; /* the cluster secret: proved on every connect */
	struct dregion *regions;    /* regions[0]: the local buffer, when there is one */
	size_t nregions, cap;
	struct mc_buf out;
	struct mc_buf in;	   /* the answer being read */
	struct mc_dummy_wait wait; /* when to poll for an answer (dummy_wait.h) */

	/* the local buffer's allocator */
	pthread_mutex_t alloc_lock;
	struct extent *used; /* sorted by offset */
	size_t nused, capused;
	char *lb;
	size_t lb_len;
	size_t get_hint[4]; /* sizes of the last copy-based gets (alloc_lock) */
	unsigned get_hint_at;

	pthread_t pinger;
	bool pinger_started;
	bool stop; /* under stop_lock */
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
};

static void drop_conn_locked(struct mc_dummy *d, const char *why)
{
	if (d->fd < 0)
		return;
	mc_warn("dummy: lost the daemon on port %u: %s", d->port, why);
	close(d->fd);
	d->fd = -1;
}

/* The calling thread's timer slack (50 us by default): a timed sleep ends
 * up to this late, so the sleep before the window is shortened by it. */
static uint64_t timer_slack_us(void)
{
	static __thread int64_t slack_us = -1;
	if (slack_us < 0) {
		int ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
		slack_us = ns > 0 ? (ns + 999) / 1000 : 0;
	}
	return (uint64_t)slack_us;
}

/* Wait for the first bytes of the answer the way plan says (dummy_wait.h):
 * sleep until its window, poll the socket without sleeping through the
 * window, then sleep until the answer wakes this thread or the deadline
 * passes.  *phase says where it was found.  Nothing is read here. */
static mc_status wait_answer_locked(struct mc_dummy *d, const struct mc_dummy_wait_plan *plan,
				    uint64_t deadline, enum mc_dummy_wait_phase *phase)
{
	struct pollfd p = {.fd = d->fd, .events = POLLIN};
	uint64_t now = mc_now_us();

	if (plan->poll_from_us == plan->poll_until_us) { /* no window: off, or unknown */
		*phase = MC_DUMMY_WAIT_LATE;
		return mc_sock_wait(d->fd, POLLIN, deadline);
	}
	if (now + timer_slack_us() < plan->poll_from_us) {
		uint64_t us = plan->poll_from_us - now - timer_slack_us();
		struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
				      .tv_nsec = (long)(us % 1000000) * 1000};
		int r = ppoll(&p, 1, &ts, NULL);
		if (r > 0) {
			*phase = MC_DUMMY_WAIT_SLEEPING;
			return MC_OK;
		}
		if (r < 0 && errno != EINTR)
			return mc_set_error(MC_ERR_SOCKET, "ppoll: %s", strerror(errno));
	}
	*phase = MC_DUMMY_WAIT_POLLING;
	for (;;) {
		p.revents = 0;
		if (poll(&p, 1, 0) > 0)
			return MC_OK;
		if (mc_now_us() >= plan->poll_until_us)
			break;
		sched_yield(); /* keep the CPU awake, not away from others */
	}
	*phase = MC_DUMMY_WAIT_LATE;
	return mc_sock_wait(d->fd, POLLIN, deadline);
}

/* Read one answer frame into d->in: wait for the socket (as plan says),
 * then take the header and the payload in as few reads as they arrive in
 * (one, as a rule: the daemon writes a frame at once), and learn when the
 * answer came.  Only one request is ever outstanding, so nothing beyond
 * this frame can arrive: more is a protocol error. */
static mc_status read_answer_locked(struct mc_dummy *d, const struct mc_dummy_wait_plan *plan,
				    uint64_t deadline, struct mc_proto_hdr *h)
{
	struct mc_buf *b = &d->in;
	size_t want = 0; /* the whole frame, once the header is in */
	enum mc_dummy_wait_phase phase;
	mc_status rc;

	mc_buf_reset(b);
	if (mc_buf_reserve(b, 4096) != MC_OK)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	rc = wait_answer_locked(d, plan, deadline, &phase);
	if (rc != MC_OK)
		return mc_set_error(rc, "no answer: %s", mc_status_name(rc));
	mc_dummy_wait_learn(&d->wait, plan, mc_now_us(), phase);
	for (;;) {
		size_t room = want ? want - b->len : b->cap - b->len;
		ssize_t n = recv(d->fd, b->data + b->len, room, MSG_DONTWAIT);

		if (n == 0)
			return mc_set_error(MC_ERR_CONN_CLOSED, "the daemon hung up");
		if (n < 0) {
			if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
				return mc_set_error(MC_ERR_SOCKET, "recv: %s", strerror(errno));
			n = 0;
		}
		b->len += (size_t)n;
		if (want == 0 && b->len >= MC_PROTO_HDR_LEN) {
			rc = mc_proto_hdr_decode(b->data, MC_DUMMY_MAX_PAYLOAD, h);
			if (rc != MC_OK)
				return rc;
			want = MC_PROTO_HDR_LEN + (size_t)h->payload_len;
			if (b->len > want)
				return mc_set_error(MC_ERR_PROTOCOL,
						    "%zu bytes beyond the answer's frame",
						    b->len - want);
			if (mc_buf_reserve(b, want - b->len) != MC_OK)
				return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
		if (want && b->len == want)
			return MC_OK;
		if (n == 0) { /* the rest is on its way */
			rc = mc_sock_wait(d->fd, POLLIN, deadline);
			if (rc != MC_OK)
				return mc_set_error(rc, "no answer: %s", mc_status_name(rc));
		}
	}
}

/* The bytes a request moves (its buffers' lengths): its size class. */
static uint64_t req_bytes(const struct mc_dummy_req *q)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < q->n_items; i++)
		for (uint32_t j = 0; j < q->items[i].nbufs; j++)
			n += q->items[i].bufs[j].len;
	return n;
}

/* Send one request (with fd beside its first byte when >= 0) and read its
 * answer.  The call's status, with mc_last_error from the daemon's text. */
static mc_status call_locked(struct mc_dummy *d, const struct mc_dummy_req *q, int fd,
			     struct mc_dummy_resp *resp)
{
	struct mc_proto_hdr h;
	uint64_t id = ++d->next_id;
	uint64_t deadline = mc_now_ms() + MC_DUMMY_CALL_TIMEOUT_MS;
	struct mc_dummy_wait_plan plan;
	mc_status rc;
	ssize_t n;

	memset(resp, 0, sizeof(*resp));
	if (d->fd < 0)
		return mc_set_error(MC_ERR_RPC_FAIL,
				    "the mooncake_client daemon on port %u is "
				    "unreachable",
				    d->port);
	mc_buf_reset(&d->out);
	rc = mc_dummy_req_encode(&d->out, id, q);
	if (rc != MC_OK)
		return rc;
	{
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} ctl;
		struct iovec iov = {d->out.data, d->out.len};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
		if (fd >= 0) {
			struct cmsghdr *cm;
			memset(&ctl, 0, sizeof(ctl));
			m.msg_control = ctl.buf;
			m.msg_controllen = sizeof(ctl.buf);
			cm = CMSG_FIRSTHDR(&m);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fd, sizeof(int));
		}
		mc_dummy_wait_plan(&d->wait, q->type, req_bytes(q), mc_now_us(), &plan);
		do
			n = sendmsg(d->fd, &m, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0 || (n < (ssize_t)d->out.len &&
			      mc_sock_write_full(d->fd, d->out.data + n, d->out.len - (size_t)n,
						 deadline) != MC_OK)) {
			drop_conn_locked(d, "send failed");
			return mc_set_error(MC_ERR_RPC_FAIL,
					    "the mooncake_client daemon on port %u "
					    "is unreachable",
					    d->port);
		}
	}
	rc = read_answer_locked(d, &plan, deadline, &h);
	if (rc == MC_OK &&
	    (!(h.flags & MC_PROTO_F_RESPONSE) || h.req_id != id || h.type != q->type))
		rc = mc_set_error(MC_ERR_PROTOCOL, "an answer that is not to request %llu",
				  (unsigned long long)id);
	if (rc == MC_OK)
		rc = mc_dummy_resp_decode(d->in.data + MC_PROTO_HDR_LEN, h.payload_len, resp);
	if (rc != MC_OK) {
		drop_conn_locked(d, mc_last_error());
		return mc_set_error(MC_ERR_RPC_FAIL, "the mooncake_client daemon on port %u: %s",
				    d->port, mc_status_name(rc));
	}
	if (h.status != MC_OK)
		mc_set_error((mc_status)h.status, "%s", resp->text.ptr ? resp->text.ptr : "");
	return (mc_status)h.status;
}

static mc_status call(struct mc_dummy *d, const struct mc_dummy_req *q, struct mc_dummy_resp *r)
{
	mc_status rc;
	pthread_mutex_lock(&d->lock);
	rc = call_locked(d, q, -1, r);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

static mc_status send_region_locked(struct mc_dummy *d, const struct dregion *r)
{
	struct mc_dummy_req q = {.type = MC_DUMMY_MSG_MAP_REGION, .a = r->id, .b = r->len};
	struct mc_dummy_resp resp;
	mc_status rc = call_locked(d, &q, r->fd, &resp);
	mc_dummy_resp_release(&resp);
	return rc;
}

static mc_status connect_locked(struct mc_dummy *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char name[64];
	struct mc_dummy_req hello = {.type = MC_DUMMY_MSG_HELLO,
				     .a = (uint64_t)getpid(),
				     .text = mc_proto_str_c(MC_VERSION_STRING)};
	struct mc_dummy_resp resp;
	socklen_t len;
	mc_status rc;
	int fd;

	mc_dummy_socket_name(d->port, name, sizeof(name));
	memcpy(sa.sun_path + 1, name, strlen(name));
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) != 0) {
		rc = mc_set_error(MC_ERR_RPC_FAIL, "no mooncake_client daemon on @%s: %s", name,
				  strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if (mc_auth_on(&d->auth)) {
		rc = mc_auth_hs_run(fd, &d->auth, MC_AUTH_CLIENT, "dummy",
				    MC_DUMMY_AUTH_TIMEOUT_MS);
		if (rc != MC_OK) {
			atomic_fetch_add(&mc_auth_refused_total, 1);
			rc = mc_set_error(rc, "the mooncake_client daemon on @%s: %s", name,
					  mc_last_error());
			close(fd);
			return rc;
		}
	}
	d->fd = fd;
	rc = call_locked(d, &hello, -1, &resp);
	if (rc == MC_OK)
		snprintf(d->hostname, sizeof(d->hostname), "%s",
			 resp.text.ptr ? resp.text.ptr : "");
	mc_dummy_resp_release(&resp);
	for (size_t i = 0; i < d->nregions && rc == MC_OK; i++)
		rc = send_region_locked(d, &d->regions[i]);
	if (rc != MC_OK) {
		drop_conn_locked(d, mc_last_error());
		return mc_set_error(MC_ERR_RPC_FAIL, "attaching to the daemon on port %u failed",
				    d->port);
	}
	mc_info("dummy: attached to %s on @%s", d->hostname, name);
	return MC_OK;
}

static void *pinger_main(void *arg)
{
	struct mc_dummy *d = arg;
	for (;;) {
		struct timespec ts;
		struct mc_dummy_req q = {.type = MC_DUMMY_MSG_PING};
		struct mc_dummy_resp r;
		bool stop;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_mutex_lock(&d->stop_lock);
		while (!d->stop &&
		       pthread_cond_timedwait(&d->stop_cond, &d->stop_lock, &ts) != ETIMEDOUT)
			;
		stop = d->stop;
		pthread_mutex_unlock(&d->stop_lock);
		if (stop)
			break;
		pthread_mutex_lock(&d->lock);
		if (d->fd < 0) {
			connect_locked(d);
		} else {
			call_locked(d, &q, -1, &r);
			mc_dummy_resp_release(&r);
		}
		pthread_mutex_unlock(&d->lock);
	}
	return NULL;
}

/* Is host an address of this machine?  (Bind to it and see.) */
static bool host_is_local(const char *host)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd;
	bool ok;

	if (!*host || strcmp(host, "localhost") == 0 || mc_sock_host_is_any(host))
		return true;
	if (mc_sock_resolve(host, &ss, &len) != MC_OK)
		return false;
	if (mc_sock_addr_is_loopback(&ss))
		return true;
	((struct sockaddr_in *)(void *)&ss)->sin_port = 0; /* same offset for IPv6 */
	fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ok = fd >= 0 && bind(fd, (struct sockaddr *)&ss, len) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

mc_status mc_dummy_open(const char *server_address, uint64_t local_buffer_size,
			struct mc_dummy **out)
{
	char host[256];
	uint16_t port = 0;
	struct mc_dummy *d;
	mc_status rc;
	pthread_condattr_t a;

	*out = NULL;
	if (!server_address ||
	    !mc_sock_split_hostport(server_address, host, sizeof(host), &port, DEFAULT_PORT) ||
	    port == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup_dummy: bad server address '%s'",
				    server_address ? server_address : "(null)");
	if (!host_is_local(host))
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"setup_dummy: %s is not this host: a dummy client shares memory "
			"with its daemon, so it must run on the daemon's host",
			host);
	if (local_buffer_size > (1ull << 40))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "setup_dummy: local buffer over 1 TiB");
	d = calloc(1, sizeof(*d));
	if (!d)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	d->fd = -1;
	d->port = port;
	d->next_region = 1;
	{
		struct mc_store_client_env e;
		mc_store_client_env_load(&e);
		d->wait.window_us = (uint32_t)e.dummy_busy_poll_us;
		mc_store_client_env_release(&e);
	}
	mc_buf_init(&d->out);
	mc_buf_init(&d->in);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->alloc_lock, NULL);
	pthread_mutex_init(&d->stop_lock, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&d->stop_cond, &a);
	pthread_condattr_destroy(&a);
	d->regions = calloc(16, sizeof(*d->regions));
	d->cap = 16;
	if (!d->regions) {
		rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if (local_buffer_size) {
		void *p;
		int fd;
		rc = memfd_region(local_buffer_size, &p, &fd);
		if (rc != MC_OK)
			goto fail;
		d->lb = p;
		d->lb_len = local_buffer_size;
		d->regions[d->nregions++] = (struct dregion){0, p, local_buffer_size, fd};
	}
	rc = mc_auth_secret_load(NULL, &d->auth);
	if (rc != MC_OK)
		goto fail;
	pthread_mutex_lock(&d->lock);
	rc = connect_locked(d);
	pthread_mutex_unlock(&d->lock);
	if (rc != MC_OK)
		goto fail;
	if (pthread_create(&d->pinger, NULL, pinger_main, d) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "setup_dummy: pthread_create failed");
		goto fail;
	}
	d->pinger_started = true;
	pthread_setname_np(d->pinger, "mc-dummy-ping");
	*out = d;
	return MC_OK;
fail:
	mc_dummy_close(d);
	return rc;
}

void mc_dummy_close(struct mc_dummy *d)
{
	if (!d)
		return;
	if (d->pinger_started) {
		pthread_mutex_lock(&d->stop_lock);
		d->stop = true;
		pthread_cond_broadcast(&d->stop_cond);
		pthread_mutex_unlock(&d->stop_lock);
		pthread_join(d->pinger, NULL);
	}
	if (d->fd >= 0)
		close(d->fd);
	for (size_t i = 0; i < d->nregions; i++)
		close(d->regions[i].fd);
	if (d->lb)
		munmap(d->lb, d->lb_len);
	free(d->regions);
	free(d->used);
	mc_buf_release(&d->out);
	mc_buf_release(&d->in);
	mc_auth_secret_release(&d->auth);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->alloc_lock);
	pthread_mutex_destroy(&d->stop_lock);
	pthread_cond_destroy(&d->stop_cond);
	free(d);
}

int mc_dummy_health(struct mc_dummy *d)
{
	int h;
	pthread_mutex_lock(&d->lock);
	h = d->fd >= 0 ? 0 : 2;
	pthread_mutex_unlock(&d->lock);
	return h;
}

const char *mc_dummy_hostname(struct mc_dummy *d)
{
	return d->hostname;
}

/* ---- regions ---- */

mc_status mc_dummy_register(struct mc_dummy *d, void *addr, size_t len)
{
	int fd;
	struct dregion r;
	mc_status rc;

	if (!addr || !len)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register_buffer: NULL or empty");
	fd = shm_dup(addr, len);
	if (fd < 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "register_buffer on a dummy client: %p+%zu is not a whole "
				    "region from MooncakeHostMemAllocator (mc_store_shm_alloc)",
				    addr, len);
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nregions; i++)
		if (d->regions[i].base == addr) {
			pthread_mutex_unlock(&d->lock);
			close(fd);
			return mc_set_error(MC_ERR_ADDRESS_OVERLAPPED,
					    "register_buffer: %p is "
					    "registered already",
					    addr);
		}
	if (d->nregions == d->cap) {
		struct dregion *v = realloc(d->regions, 2 * d->cap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&d->lock);
			close(fd);
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
		d->regions = v;
		d->cap *= 2;
	}
	r = (struct dregion){d->next_region++, addr, len, fd};
	rc = send_region_locked(d, &r);
	if (rc == MC_OK)
		d->regions[d->nregions++] = r;
	else
		close(fd);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

mc_status mc_dummy_unregister(struct mc_dummy *d, void *addr)
{
	mc_status rc = mc_set_error(MC_ERR_ADDRESS_NOT_REGISTERED, "unregister_buffer: %p", addr);
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nregions; i++) {
		struct dregion r = d->regions[i];
		struct mc_dummy_req q = {.type = MC_DUMMY_MSG_UNMAP_REGION, .a = r.id};
		struct mc_dummy_resp resp;
		if (r.base != addr || (d->lb && r.base == d->lb))
			continue;
		rc = call_locked(d, &q, -1, &resp);
		mc_dummy_resp_release(&resp);
		if (rc == MC_ERR_RPC_FAIL)
			rc = MC_OK; /* the daemon is gone, and with it its mapping */
		close(r.fd);
		d->regions[i] = d->regions[--d->nregions];
		break;
	}
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* The region holding [p, p+len), as a wire buffer; region NO_REGION if none. */
static struct mc_dummy_buf locate_locked(struct mc_dummy *d, const void *p, size_t len)
{
	const char *c = p;
	for (size_t i = 0; i < d->nregions; i++) {
		const struct dregion *r = &d->regions[i];
		if (c >= r->base && c <= r->base + r->len && len <= (size_t)(r->base + r->len - c))
			return (struct mc_dummy_buf){r->id, (uint64_t)(c - r->base), len};
	}
	return (struct mc_dummy_buf){NO_REGION, 0, len};
}

mc_status mc_dummy_check(struct mc_dummy *d, const void *buf, size_t len)
{
	struct mc_dummy_buf b;
	if (!len)
		return MC_OK;
	pthread_mutex_lock(&d->lock);
	b = locate_locked(d, buf, len);
	pthread_mutex_unlock(&d->lock);
	if (b.region == NO_REGION)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "buffer %p+%zu is not inside one registered shared region", buf,
				    len);
	return MC_OK;
}

/* ---- transfers ---- */

static void config_to_wire(const struct mc_store_config *c, struct mc_dummy_config *w,
			   struct mc_proto_str *pref, struct mc_proto_str *gids)
{
	memset(w, 0, sizeof(*w));
	if (!c) {
		w->replica_num = 1;
		return;
	}
	w->replica_num = c->replica_num;
	w->with_soft_pin = c->with_soft_pin;
	w->soft_pin_ttl_ms = c->soft_pin_ttl_ms;
	w->with_hard_pin = c->with_hard_pin;
	w->prefer_alloc_in_same_node = c->prefer_alloc_in_same_node;
	w->preferred_segment = mc_proto_str_c(c->preferred_segment);
	for (size_t i = 0; i < c->n_preferred_segments; i++)
		pref[i] = mc_proto_str_c(c->preferred_segments[i]);
	w->n_preferred_segments = (uint32_t)c->n_preferred_segments;
	w->preferred_segments = pref;
	w->group_id = mc_proto_str_c(c->group_id);
	for (size_t i = 0; i < c->n_group_ids; i++)
		gids[i] = mc_proto_str_c(c->group_ids[i]);
	w->n_group_ids = (uint32_t)c->n_group_ids;
	w->group_ids = gids;
}

/* Items for n keys with their buffers located (under d->lock); free with free_items. */
static mc_status build_items_locked(struct mc_dummy *d, const char *const *keys,
				    void *const *const *bufs, const size_t *const *lens,
				    const size_t *nbufs, size_t n, struct mc_dummy_item **out)
{
	struct mc_dummy_item *it = calloc(n + 1, sizeof(*it));
	if (!it)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (!keys[i] || !*keys[i]) {
			for (size_t j = 0; j < i; j++)
				free(it[j].bufs);
			free(it);
			return mc_set_error(MC_ERR_INVALID_PARAMS, "empty key");
		}
		it[i].key = mc_proto_str_c(keys[i]);
		it[i].nbufs = (uint32_t)(nbufs ? nbufs[i] : 1);
		it[i].bufs = calloc(it[i].nbufs + 1, sizeof(*it[i].bufs));
		if (!it[i].bufs) {
			for (size_t j = 0; j < i; j++)
				free(it[j].bufs);
			free(it);
			return mc_set_error(MC_ERR_NOMEM, "out of memory");
		}
		for (uint32_t j = 0; j < it[i].nbufs; j++)
			it[i].bufs[j] = locate_locked(d, bufs[i][j], lens[i][j]);
	}
	*out = it;
	return MC_OK;
}

static void free_items(struct mc_dummy_item *it, size_t n)
{
	for (size_t i = 0; it && i < n; i++)
		free(it[i].bufs);
	free(it);
}

static mc_status xfer(struct mc_dummy *d, uint16_t type, const char *const *keys,
		      void *const *const *bufs, const size_t *const *lens, const size_t *nbufs,
		      size_t n, const struct mc_store_config *cfg, bool upsert, int64_t *res)
{
	size_t np = cfg ? cfg->n_preferred_segments : 0, ng = cfg ? cfg->n_group_ids : 0;
	struct mc_proto_str *pref = calloc(np + 1, sizeof(*pref));
	struct mc_proto_str *gids = calloc(ng + 1, sizeof(*gids));
	struct mc_dummy_req q = {.type = type, .flags = upsert ? MC_DUMMY_F_UPSERT : 0};
	struct mc_dummy_resp r;
	mc_status rc;

	if (!pref || !gids) {
		free(pref);
		free(gids);
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	config_to_wire(cfg, &q.config, pref, gids);
	pthread_mutex_lock(&d->lock);
	rc = build_items_locked(d, keys, bufs, lens, nbufs, n, &q.items);
	if (rc == MC_OK) {
		q.n_items = (uint32_t)n;
		rc = call_locked(d, &q, -1, &r);
		for (size_t i = 0; i < n; i++)
			res[i] = i < r.n_results ? r.results[i] : rc;
		mc_dummy_resp_release(&r);
	}
	pthread_mutex_unlock(&d->lock);
	free_items(q.items, n);
	free(pref);
	free(gids);
	return rc;
}

mc_status mc_dummy_put_multi(struct mc_dummy *d, const char *const *keys, void *const *const *bufs,
			     const size_t *const *lens, const size_t *nbufs, size_t n,
			     const struct mc_store_config *cfg, bool upsert, mc_status *results)
{
	int64_t *r = calloc(n + 1, sizeof(*r));
	mc_status rc;
	if (!r)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	rc = xfer(d, MC_DUMMY_MSG_PUT, keys, bufs, lens, nbufs, n, cfg, upsert, r);
	for (size_t i = 0; results && i < n; i++)
		results[i] = (mc_status)r[i];
	free(r);
	return rc;
}

mc_status mc_dummy_get_multi(struct mc_dummy *d, const char *const *keys, void *const *const *bufs,
			     const size_t *const *lens, const size_t *nbufs, size_t n,
			     int64_t *results)
{
	return xfer(d, MC_DUMMY_MSG_GET, keys, bufs, lens, nbufs, n, NULL, false, results);
}

/* ---- the local buffer ---- */

static mc_status lb_alloc(struct mc_dummy *d, size_t len, size_t *off_out)
{
	size_t at = 0, i;
	len = (len + ALIGN - 1) & ~(size_t)(ALIGN - 1);
	pthread_mutex_lock(&d->alloc_lock);
	for (i = 0; i < d->nused; i++) {
		if (d->used[i].off - at >= len)
			break; /* the gap before extent i */
		at = d->used[i].off + d->used[i].len;
	}
	if (i == d->nused && (at > d->lb_len || d->lb_len - at < len))
		goto full;
	if (d->nused == d->capused) {
		size_t ncap = d->capused ? 2 * d->capused : 16;
		struct extent *v = realloc(d->used, ncap * sizeof(*v));
		if (!v)
			goto full;
		d->used = v;
		d->capused = ncap;
	}
	memmove(&d->used[i + 1], &d->used[i], (d->nused - i) * sizeof(*d->used));
	d->used[i] = (struct extent){at, len};
	d->nused++;
	pthread_mutex_unlock(&d->alloc_lock);
	*off_out = at;
	return MC_OK;
full:
	pthread_mutex_unlock(&d->alloc_lock);
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "%zu bytes do not fit in the dummy's free local buffer (%zu bytes in "
			    "all)",
			    len, d->lb_len);
}

static void lb_free(struct mc_dummy *d, size_t off)
{
	pthread_mutex_lock(&d->alloc_lock);
	for (size_t i = 0; i < d->nused; i++)
		if (d->used[i].off == off) {
			memmove(&d->used[i], &d->used[i + 1],
				(d->nused - i - 1) * sizeof(*d->used));
			d->nused--;
			break;
		}
	pthread_mutex_unlock(&d->alloc_lock);
}

mc_status mc_dummy_put_copy(struct mc_dummy *d, const char *key, const void *const *parts,
			    const size_t *lens, size_t nparts, const struct mc_store_config *cfg,
			    bool upsert)
{
	size_t len = 0, off, at = 0;
	mc_status rc, res;
	void *buf;
	size_t one = 1;

	for (size_t i = 0; i < nparts; i++) {
		if (lens[i] && !parts[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS, "NULL part with a length");
		len += lens[i];
	}
	if (len == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "put of an empty value");
	if (!d->lb)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "a dummy client without a local buffer cannot put a value");
	rc = lb_alloc(d, len, &off);
	if (rc != MC_OK)
		return rc;
	for (size_t i = 0; i < nparts; i++) {
		memcpy(d->lb + off + at, parts[i], lens[i]);
		at += lens[i];
	}
	buf = d->lb + off;
	{
		void *const bv[1] = {buf};
		void *const *bufs[1] = {bv};
		const size_t *lp[1] = {&len};
		rc = mc_dummy_put_multi(d, &key, bufs, lp, &one, 1, cfg, upsert, &res);
	}
	lb_free(d, off);
	return rc;
}

static mc_status keys_call(struct mc_dummy *d, uint16_t type, const char *const *keys, size_t n,
			   bool force, int64_t *results)
{
	struct mc_dummy_req q = {.type = type, .flags = force ? MC_DUMMY_F_FORCE : 0};
	struct mc_dummy_resp r;
	mc_status rc;

	q.items = calloc(n + 1, sizeof(*q.items));
	if (!q.items)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (!keys[i] || !*keys[i]) {
			free(q.items);
			return mc_set_error(MC_ERR_INVALID_PARAMS, "empty key");
		}
		q.items[i].key = mc_proto_str_c(keys[i]);
	}
	q.n_items = (uint32_t)n;
	rc = call(d, &q, &r);
	for (size_t i = 0; i < n; i++)
		results[i] = i < r.n_results ? r.results[i] : rc;
	mc_dummy_resp_release(&r);
	free(q.items);
	return rc;
}

mc_status mc_dummy_keys(struct mc_dummy *d, uint16_t type, const char *const *keys, size_t n,
			bool force, int64_t *results)
{
	return keys_call(d, type, keys, n, force, results);
}

/* The largest of the last few copy-based gets' sizes (0: none yet). */
static size_t get_hint(struct mc_dummy *d)
{
	size_t h = 0;
	pthread_mutex_lock(&d->alloc_lock);
	for (size_t i = 0; i < sizeof(d->get_hint) / sizeof(d->get_hint[0]); i++)
		h = d->get_hint[i] > h ? d->get_hint[i] : h;
	pthread_mutex_unlock(&d->alloc_lock);
	return h;
}

static void note_get(struct mc_dummy *d, size_t size)
{
	pthread_mutex_lock(&d->alloc_lock);
	d->get_hint[d->get_hint_at++ % (sizeof(d->get_hint) / sizeof(d->get_hint[0]))] = size;
	pthread_mutex_unlock(&d->alloc_lock);
}

/* One GET of key into the local buffer at off (cap bytes); *got its size. */
static mc_status get_at(struct mc_dummy *d, const char *key, size_t off, size_t cap, int64_t *got)
{
	void *const bv[1] = {d->lb + off};
	void *const *bufs[1] = {bv};
	const size_t *lp[1] = {&cap};
	size_t one = 1;
	return mc_dummy_get_multi(d, &key, bufs, lp, &one, 1, got);
}

/* Hand got bytes at off to alloc's memory, and free the extent. */
static int64_t copy_out(struct mc_dummy *d, size_t off, int64_t got, mc_store_alloc_fn alloc,
			void *ctx)
{
	void *dst = alloc(ctx, (size_t)got);
	if (!dst && got) {
		lb_free(d, off);
		return mc_set_error(MC_ERR_NOMEM, "get: allocation of %lld bytes failed",
				    (long long)got);
	}
	if (got)
		memcpy(dst, d->lb + off, (size_t)got);
	lb_free(d, off);
	note_get(d, (size_t)got);
	return got;
}

int64_t mc_dummy_get_copy(struct mc_dummy *d, const char *key, mc_store_alloc_fn alloc, void *ctx)
{
	size_t hint = d->lb ? get_hint(d) : 0, off;

	/* One request where the object fits the room of the last gets: the
	 * daemon refuses a buffer too small (-600) after its replica lookup,
	 * and only then is the size asked for. */
	if (hint && lb_alloc(d, hint, &off) == MC_OK) {
		int64_t got = 0;
		mc_status rc = get_at(d, key, off, hint, &got);
		if (rc == MC_OK)
			return copy_out(d, off, got, alloc, ctx);
		lb_free(d, off);
		if (rc != MC_ERR_INVALID_PARAMS)
			return rc;
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		int64_t size = 0, got = 0;
		size_t cap;
		mc_status rc = keys_call(d, MC_DUMMY_MSG_GET_SIZE, &key, 1, false, &size);

		if (rc != MC_OK)
			return rc;
		if (!d->lb)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "a dummy client without a local buffer cannot get a "
					    "value");
		cap = (size_t)size;
		rc = lb_alloc(d, cap ? cap : 1, &off);
		if (rc != MC_OK)
			return rc;
		rc = get_at(d, key, off, cap, &got);
		if (rc == MC_ERR_INVALID_PARAMS && attempt == 0) {
			lb_free(d, off); /* it grew between the two calls: once more */
			continue;
		}
		if (rc != MC_OK) {
			lb_free(d, off);
			return rc;
		}
		return copy_out(d, off, got, alloc, ctx);
	}
	return mc_set_error(MC_ERR_INVALID_PARAMS, "get: the object kept growing");
}

mc_status mc_dummy_call(struct mc_dummy *d, const struct mc_dummy_req *q,
			struct mc_dummy_resp *resp)
{
	return call(d, q, resp);
}

mc_status mc_dummy_call_cfg(struct mc_dummy *d, struct mc_dummy_req *q,
			    const struct mc_store_config *cfg, struct mc_dummy_resp *resp)
{
	size_t np = cfg ? cfg->n_preferred_segments : 0, ng = cfg ? cfg->n_group_ids : 0;
	struct mc_proto_str *pref = calloc(np + 1, sizeof(*pref));
	struct mc_proto_str *gids = calloc(ng + 1, sizeof(*gids));
	mc_status rc;

	memset(resp, 0, sizeof(*resp));
	if (!pref || !gids) {
		free(pref);
		free(gids);
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	}
	config_to_wire(cfg, &q->config, pref, gids);
	rc = call(d, q, resp);
	memset(&q->config, 0, sizeof(q->config));
	free(pref);
	free(gids);
	return rc;
}

mc_status mc_dummy_call_bufs(struct mc_dummy *d, struct mc_dummy_req *q, const char *const *keys,
			     void *const *const *bufs, const size_t *const *lens,
			     const size_t *nbufs, size_t n, struct mc_dummy_resp *resp)
{
	mc_status rc;
	memset(resp, 0, sizeof(*resp));
	pthread_mutex_lock(&d->lock);
	rc = build_items_locked(d, keys, bufs, lens, nbufs, n, &q->items);
	if (rc == MC_OK) {
		q->n_items = (uint32_t)n;
		rc = call_locked(d, q, -1, resp);
	}
	pthread_mutex_unlock(&d->lock);
	free_items(q->items, n);
	q->items = NULL;
	q->n_items = 0;
	return rc;
}

/* ---- copy-based batches: as few requests as the local buffer allows ---- */

struct chunk {
	size_t m;	   /* keys in this chunk */
	size_t *idx;	   /* their index in the call */
	size_t *off;	   /* their extent in the local buffer */
	const char **keys; /* the rest as one-buffer lists for put/get_multi */
	void **buf;
	size_t *len;
	void *const **bl;
	const size_t **ll;
	size_t *nb;
	const char **gids;
	int64_t *res;
};

static mc_status chunk_init(struct chunk *c, size_t n)
{
	memset(c, 0, sizeof(*c));
	c->idx = calloc(n + 1, sizeof(*c->idx));
	c->off = calloc(n + 1, sizeof(*c->off));
	c->keys = calloc(n + 1, sizeof(*c->keys));
	c->buf = calloc(n + 1, sizeof(*c->buf));
	c->len = calloc(n + 1, sizeof(*c->len));
	c->bl = calloc(n + 1, sizeof(*c->bl));
	c->ll = calloc(n + 1, sizeof(*c->ll));
	c->nb = calloc(n + 1, sizeof(*c->nb));
	c->gids = calloc(n + 1, sizeof(*c->gids));
	c->res = calloc(n + 1, sizeof(*c->res));
	if (!c->idx || !c->off || !c->keys || !c->buf || !c->len || !c->bl || !c->ll || !c->nb ||
	    !c->gids || !c->res)
		return mc_set_error(MC_ERR_NOMEM, "out of memory");
	return MC_OK;
}

static void chunk_release(struct chunk *c)
{
	free(c->idx);
	free(c->off);
	free(c->keys);
	free(c->buf);
	free(c->len);
	free(c->bl);
	free(c->ll);
	free(c->nb);
	free(c->gids);
	free(c->res);
}

/* Take key i of len bytes into the chunk: false when the local buffer is
 * full (the chunk goes first) or, for an empty chunk, when it never fits
 * (*err set). */
static bool chunk_add(struct mc_dummy *d, struct chunk *c, size_t i, const char *key, size_t len,
		      mc_status *err)
{
	size_t m = c->m;
	*err = lb_alloc(d, len ? len : 1, &c->off[m]);
	if (*err != MC_OK)
		return false;
	c->idx[m] = i;
	c->keys[m] = key;
	c->buf[m] = d->lb + c->off[m];
	c->len[m] = len;
	c->bl[m] = &c->buf[m];
	c->ll[m] = &c->len[m];
	c->nb[m] = 1;
	c->m++;
	return true;
}

static void chunk_free_extents(struct mc_dummy *d, struct chunk *c)
{
	for (size_t k = 0; k < c->m; k++)
		lb_free(d, c->off[k]);
	c->m = 0;
}

mc_status mc_dummy_put_copy_batch(struct mc_dummy *d, const char *const *keys,
				  const void *const *values, const size_t *lens, size_t n,
				  const struct mc_store_config *cfg, bool upsert,
				  mc_status *results)
{
	struct chunk c;
	mc_status rc = chunk_init(&c, n), first = MC_OK;
	size_t i = 0;

	if (rc == MC_OK && !d->lb)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "a dummy client without a local buffer cannot put a value");
	while (rc == MC_OK && i < n) {
		struct mc_store_config one =
			cfg ? *cfg : (struct mc_store_config){.replica_num = 1};
		mc_status err;
		while (i < n) {
			if (!lens[i] || !values[i]) {
				results[i] = mc_set_error(MC_ERR_INVALID_PARAMS,
							  "put of an empty value");
				i++;
			} else if (chunk_add(d, &c, i, keys[i], lens[i], &err)) {
				memcpy(c.buf[c.m - 1], values[i], lens[i]);
				i++;
			} else if (c.m == 0) {
				results[i++] = err; /* larger than the whole local buffer */
			} else {
				break;
			}
		}
		if (c.m == 0)
			break;
		if (cfg && cfg->n_group_ids == n && n > 1) {
			for (size_t k = 0; k < c.m; k++)
				c.gids[k] = cfg->group_ids[c.idx[k]];
			one.group_ids = c.gids;
			one.n_group_ids = c.m;
		}
		err = xfer(d, MC_DUMMY_MSG_PUT, c.keys, c.bl, c.ll, c.nb, c.m, &one, upsert, c.res);
		for (size_t k = 0; k < c.m; k++)
			results[c.idx[k]] = (mc_status)c.res[k];
		(void)err;
		chunk_free_extents(d, &c);
	}
	for (size_t k = 0; rc != MC_OK && k < n; k++)
		results[k] = rc;
	for (size_t k = 0; k < n && first == MC_OK; k++)
		first = results[k];
	chunk_release(&c);
	return first;
}

struct one_of {
	mc_store_batch_alloc_fn alloc;
	void *ctx;
	size_t i;
};

static void *alloc_one_of(void *ctx, size_t size)
{
	struct one_of *a = ctx;
	return a->alloc(a->ctx, a->i, size);
}

mc_status mc_dummy_get_copy_batch(struct mc_dummy *d, const char *const *keys, size_t n,
				  mc_store_batch_alloc_fn alloc, void *ctx, int64_t *results)
{
	struct chunk c;
	int64_t *sizes = calloc(n + 1, sizeof(*sizes));
	mc_status rc = chunk_init(&c, n), first = MC_OK;
	size_t i = 0;

	if (rc == MC_OK && !sizes)
		rc = mc_set_error(MC_ERR_NOMEM, "out of memory");
	if (rc == MC_OK && !d->lb)
		rc = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "a dummy client without a local buffer cannot get a value");
	if (rc == MC_OK) /* one request for every size, then as few gets as fit */
		rc = keys_call(d, MC_DUMMY_MSG_GET_SIZE, keys, n, false, sizes);
	while (rc == MC_OK && i < n) {
		mc_status err;
		while (i < n) {
			if (sizes[i] < 0) {
				results[i] = sizes[i];
				i++;
			} else if (chunk_add(d, &c, i, keys[i], (size_t)sizes[i], &err)) {
				i++;
			} else if (c.m == 0) {
				results[i++] = err;
			} else {
				break;
			}
		}
		if (c.m == 0)
			break;
		xfer(d, MC_DUMMY_MSG_GET, c.keys, c.bl, c.ll, c.nb, c.m, NULL, false, c.res);
		for (size_t k = 0; k < c.m; k++) {
			size_t at = c.idx[k];
			int64_t got = c.res[k];
			void *dst;
			if (got == MC_ERR_INVALID_PARAMS) { /* it grew since GetSize: alone */
				struct one_of a = {alloc, ctx, at};
				results[at] = mc_dummy_get_copy(d, keys[at], alloc_one_of, &a);
				continue;
			}
			if (got < 0) {
				results[at] = got;
				continue;
			}
			dst = alloc(ctx, at, (size_t)got);
			if (!dst && got) {
				results[at] = mc_set_error(MC_ERR_NOMEM,
							   "get: allocation of %lld bytes failed",
							   (long long)got);
				continue;
			}
			if (got)
				memcpy(dst, c.buf[k], (size_t)got);
			results[at] = got;
		}
		chunk_free_extents(d, &c);
	}
	for (size_t k = 0; rc != MC_OK && k < n; k++)
		results[k] = rc;
	for (size_t k = 0; k < n && first == MC_OK; k++)
		if (results[k] < 0)
			first = (mc_status)results[k];
	chunk_release(&c);
	free(sizes);
	return first;
}

int64_t mc_dummy_remove_many(struct mc_dummy *d, const char *pattern, bool force)
{
	struct mc_dummy_req q = {.type = pattern ? MC_DUMMY_MSG_REMOVE_REGEX
						 : MC_DUMMY_MSG_REMOVE_ALL,
				 .flags = force ? MC_DUMMY_F_FORCE : 0,
				 .text = mc_proto_str_c(pattern)};
	struct mc_dummy_resp r;
	mc_status rc = call(d, &q, &r);
	int64_t v = rc == MC_OK && r.n_results ? r.results[0] : rc;
	mc_dummy_resp_release(&r);
	return v;
}
