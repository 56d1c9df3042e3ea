/*
 * base/sock.c - socket helpers; see sock.h.
 */
#define MC_LOG_MODULE "sock"
#include "base/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"
#include "mooncake/status.h"

bool mc_sock_split_hostport(const char *s, char *host, size_t host_len, uint16_t *port,
			    uint16_t def_port)
{
	const char *h = s, *colon = NULL;
	size_t hl;
	char *end;
	unsigned long p;

	*port = def_port;
	if (!s)
		return false;
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb)
			return false;
		h = s + 1;
		hl = (size_t)(rb - h);
		if (rb[1] == ':')
			colon = rb + 1;
	} else {
		const char *first = strchr(s, ':');
		const char *last = strrchr(s, ':');
		if (first && first != last) {
			/* bare IPv6 literal without brackets: no port */
			hl = strlen(s);
		} else {
			colon = last;
			hl = colon ? (size_t)(colon - s) : strlen(s);
		}
	}
	if (hl + 1 > host_len)
		return false;
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (colon && colon[1]) {
		errno = 0;
		p = strtoul(colon + 1, &end, 10);
		if (!errno && !*end && p > 0 && p <= 65535)
			*port = (uint16_t)p;
	}
	return true;
}

mc_status mc_sock_set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return MC_ERR_SOCKET;
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	return fcntl(fd, F_SETFL, fl) < 0 ? MC_ERR_SOCKET : MC_OK;
}

mc_status mc_sock_set_nodelay(int fd)
{
	int one = 1;
	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ? MC_ERR_SOCKET
									       : MC_OK;
}

void mc_sock_quickack(int fd)
{
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

static char cc_allowed_list[256];

static void cc_read_allowed(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_allowed_congestion_control", "re");
	size_t n = 0;

	if (f) {
		n = fread(cc_allowed_list, 1, sizeof(cc_allowed_list) - 1, f);
		fclose(f);
	}
	cc_allowed_list[n] = '\0';
	if (n && cc_allowed_list[n - 1] == '\n')
		cc_allowed_list[n - 1] = '\0';
}

/* Whether name is in the kernel's list of congestion controls that any
 * process may choose (read once; empty when the file cannot be read). */
static bool cc_allowed(const char *name)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const char *list = cc_allowed_list;
	size_t n = strlen(name);

	pthread_once(&once, cc_read_allowed);
	for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

static atomic_bool cc_warned;

void mc_sock_restart_cc(int fd)
{
	char name[17] = ""; /* the kernel's TCP_CA_NAME_MAX is 16 */
	socklen_t l = sizeof(name) - 1;

	if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &l) < 0 || !name[0] ||
	    !strcmp(name, "reno") || !cc_allowed(name) || !cc_allowed("reno"))
		return;
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) < 0)
		return;
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) < 0 &&
	    !atomic_exchange(&cc_warned, true))
		mc_warn("a connection stays on reno: cannot set its congestion control back to "
			"%s: %s",
			name, strerror(errno));
}

mc_status mc_sock_set_bufsize(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) < 0)
		return MC_ERR_SOCKET;
	return MC_OK;
}

/* A listening socket bound to *ss (its port replaced by port), or -errno. */
static int listen_addr(const struct sockaddr_storage *addr, socklen_t sl, uint16_t port,
		       int backlog)
{
	struct sockaddr_storage ss = *addr;
	int fd, one = 1;

	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		int zero = 0;
		if (IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr)) /* [::] also takes IPv4 */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		a->sin6_port = htons(port);
	} else {
		((struct sockaddr_in *)&ss)->sin_port = htons(port);
	}
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, backlog) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Every interface: dual-stack [::], or 0.0.0.0 where IPv6 is off. */
static int listen_any(uint16_t port, int backlog)
{
	struct sockaddr_storage ss;
	int fd;

	memset(&ss, 0, sizeof(ss));
	((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
	((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
	fd = listen_addr(&ss, sizeof(struct sockaddr_in6), port, backlog);
	if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL) {
		memset(&ss, 0, sizeof(ss));
		((struct sockaddr_in *)&ss)->sin_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
		fd = listen_addr(&ss, sizeof(struct sockaddr_in), port, backlog);
	}
	return fd;
}

bool mc_sock_host_is_any(const char *host)
{
	return !host || !*host || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
	       strcmp(host, "[::]") == 0;
}

mc_status mc_sock_resolve(const char *host, struct sockaddr_storage *ss_out, socklen_t *len_out)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res, *ai, *pick = NULL;
	char h[256];
	size_t n = host ? strlen(host) : 0;
	int rc;

	if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(h)) {
		memcpy(h, host + 1, n - 2); /* [v6] as written in host:port names */
		h[n - 2] = '\0';
	} else {
		snprintf(h, sizeof(h), "%s", host ? host : "");
	}
	rc = getaddrinfo(h, NULL, &hints, &res);
	if (rc)
		return mc_set_error(MC_ERR_DNS, "cannot resolve %s: %s", h, gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		if (!pick || (pick->ai_family != AF_INET && ai->ai_family == AF_INET))
			pick = ai; /* IPv4 first: "localhost" is 127.0.0.1 */
	}
	if (!pick) {
		freeaddrinfo(res);
		return mc_set_error(MC_ERR_DNS, "no IP address for %s", h);
	}
	memset(ss_out, 0, sizeof(*ss_out));
	memcpy(ss_out, pick->ai_addr, pick->ai_addrlen);
	*len_out = pick->ai_addrlen;
	freeaddrinfo(res);
	return MC_OK;
}

bool mc_sock_addr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

int mc_sock_listen_on(const char *host, uint16_t port, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	mc_status rc;
	int fd;

	if (mc_sock_host_is_any(host)) {
		fd = listen_any(port, backlog);
		if (fd < 0)
			return mc_set_error(MC_ERR_SOCKET, "cannot listen on port %u: %s", port,
					    strerror(-fd));
		return fd;
	}
	rc = mc_sock_resolve(host, &ss, &sl);
	if (rc != MC_OK)
		return mc_set_error(MC_ERR_SOCKET, "cannot listen on %s: %s", host,
				    mc_last_error());
	fd = listen_addr(&ss, sl, port, backlog);
	if (fd < 0)
		return mc_set_error(MC_ERR_SOCKET, "cannot listen on %s port %u: %s", host, port,
				    strerror(-fd));
	return fd;
}

int mc_sock_listen(uint16_t port, int backlog)
{
	return mc_sock_listen_on(NULL, port, backlog);
}

int mc_sock_listen_range_on(const char *host, uint16_t min, uint16_t max, int tries, int backlog)
{
	unsigned span = (unsigned)max - min + 1;
	unsigned seed = (unsigned)(mc_now_ns() ^ (uint64_t)getpid() << 16);
	bool any = mc_sock_host_is_any(host);
	struct sockaddr_storage ss;
	socklen_t sl = 0;

	if (!any && mc_sock_resolve(host, &ss, &sl) != MC_OK)
		return mc_set_error(MC_ERR_SOCKET, "cannot listen on %s: %s", host,
				    mc_last_error());
	for (int i = 0; i < tries; i++) {
		uint16_t port = (uint16_t)(min + rand_r(&seed) % span);
		int fd = any ? listen_any(port, backlog) : listen_addr(&ss, sl, port, backlog);
		if (fd >= 0)
			return fd;
		if (fd == -EADDRNOTAVAIL || fd == -EAFNOSUPPORT || fd == -EACCES)
			return mc_set_error(MC_ERR_SOCKET, "cannot listen on %s: %s",
					    any ? "all interfaces" : host, strerror(-fd));
	}
	return mc_set_error(MC_ERR_SOCKET, "no free port in [%u, %u]%s%s after %d tries", min, max,
			    any ? "" : " on ", any ? "" : host, tries);
}

int mc_sock_listen_range(uint16_t min, uint16_t max, int tries, int backlog)
{
	return mc_sock_listen_range_on(NULL, min, max, tries, backlog);
}

uint16_t mc_sock_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return 0;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static mc_status wait_fd(int fd, short events, uint64_t deadline_ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		int timeout = -1, r;
		if (deadline_ms) {
			uint64_t now = mc_now_ms();
			if (now >= deadline_ms)
				return MC_ERR_TIMEOUT;
			timeout = (int)MC_MIN(deadline_ms - now, (uint64_t)INT32_MAX);
		}
		r = poll(&p, 1, timeout);
		if (r > 0)
			return MC_OK;
		if (r == 0)
			return MC_ERR_TIMEOUT;
		if (errno != EINTR)
			return MC_ERR_SOCKET;
	}
}

mc_status mc_sock_wait(int fd, short events, uint64_t deadline_ms)
{
	return wait_fd(fd, events, deadline_ms);
}

int mc_sock_connect(const char *host, uint16_t port, int timeout_ms, bool nonblock)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	char portstr[8];
	int rc, fd = -1, last = MC_ERR_CONN_REFUSED, last_errno = 0;
	uint64_t deadline = mc_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 5000);

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%u", port);
	rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc != 0)
		return mc_set_error(MC_ERR_DNS, "cannot resolve %s: %s", host, gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			int err = 0;
			socklen_t el = sizeof(err);
			rc = wait_fd(fd, POLLOUT, deadline);
			if (rc == MC_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
			    err == 0)
				break;
			last = rc == MC_ERR_TIMEOUT ? MC_ERR_TIMEOUT : MC_ERR_CONN_REFUSED;
			last_errno = rc == MC_ERR_TIMEOUT ? ETIMEDOUT : err;
		} else {
			last_errno = errno;
		}
		close(fd);
		fd = -1;
		if (mc_now_ms() >= deadline) {
			last = MC_ERR_TIMEOUT;
			break;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return mc_set_error(last, "cannot connect to %s:%u: %s", host, port,
				    strerror(last_errno ? last_errno : ECONNREFUSED));
	mc_sock_set_nodelay(fd);
	if (!nonblock)
		mc_sock_set_nonblock(fd, false);
	return fd;
}

mc_status mc_sock_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			mc_status rc = wait_fd(fd, POLLOUT, deadline_ms);
			if (rc != MC_OK)
				return rc;
			continue;
		}
		return (errno == EPIPE || errno == ECONNRESET) ? MC_ERR_CONN_CLOSED : MC_ERR_SOCKET;
	}
	return MC_OK;
}

mc_status mc_sock_read_full(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
	char *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return MC_ERR_CONN_CLOSED;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			mc_status rc = wait_fd(fd, POLLIN, deadline_ms);
			if (rc != MC_OK)
				return rc;
			continue;
		}
		return errno == ECONNRESET ? MC_ERR_CONN_CLOSED : MC_ERR_SOCKET;
	}
	return MC_OK;
}

void mc_sock_local_ip(char *buf, size_t len)
{
	struct ifaddrs *ifs, *i;
	snprintf(buf, len, "127.0.0.1");
	if (getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP) ||
		    !(i->ifa_flags & IFF_RUNNING))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf,
			  (socklen_t)len);
		break;
	}
	freeifaddrs(ifs);
}
