/*
 * tests/support/etcd_cluster.c - start, kill and restart etcd members.
 *
 * Each member is a child process (fork + execvp "etcd") with its output in
 * <dir>/<name>.log.  Readiness is polled: GET /health every 50 ms until it
 * says {"health":"true"} or the deadline passes; a member that exits early
 * fails the wait at once with its log's tail on stderr.
 */
#include "etcd_cluster.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

struct member {
	char name[16];
	char data_dir[240];
	char log[240];
	char endpoint[32]; /* 127.0.0.1:P */
	uint16_t client_port;
	uint16_t peer_port;
	pid_t pid; /* 0 when not running */
};

struct mc_etcd_cluster {
	char dir[200];
	char initial[512]; /* --initial-cluster */
	char token[64];
	char uri[512];
	int n;
	struct member m[MC_ETCD_MAX_MEMBERS];
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

bool mc_etcd_available(void)
{
	const char *path = getenv("PATH");
	char buf[512];

	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");
		snprintf(buf, sizeof(buf), "%.*s/etcd", (int)n, path);
		if (access(buf, X_OK) == 0)
			return true;
		path += n;
		if (*path)
			path++;
	}
	return false;
}

static size_t sink(char *p, size_t sz, size_t n, void *arg)
{
	char *buf = arg;
	size_t have = strlen(buf), take = sz * n;

	if (take > 127 - have)
		take = 127 - have;
	memcpy(buf + have, p, take);
	buf[have + take] = '\0';
	return sz * n;
}

bool mc_etcd_member_healthy(const struct mc_etcd_cluster *c, int i)
{
	char url[64], body[128] = "";
	long code = 0;
	CURL *h = curl_easy_init();
	CURLcode rc;

	if (!h)
		return false;
	snprintf(url, sizeof(url), "http://%s/health", c->m[i].endpoint);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(h);
	return rc == CURLE_OK && code == 200 && strstr(body, "\"health\":\"true\"");
}

static void log_tail(const struct member *m)
{
	char buf[2048];
	ssize_t n;
	off_t size;
	int fd = open(m->log, O_RDONLY);

	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	lseek(fd, size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		fprintf(stderr, "--- tail of %s ---\n%s\n", m->log, buf);
	}
}

static int member_spawn(struct mc_etcd_cluster *c, int i)
{
	struct member *m = &c->m[i];
	char client[64], peer[64];
	pid_t parent = getpid(), pid;

	snprintf(client, sizeof(client), "http://127.0.0.1:%u", m->client_port);
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", m->peer_port);
	pid = fork();
	if (pid < 0) {
		perror("etcd_cluster: fork");
		return -1;
	}
	if (pid == 0) {
		int fd = open(m->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execlp("etcd", "etcd", "--name", m->name, "--data-dir", m->data_dir,
		       "--listen-client-urls", client, "--advertise-client-urls", client,
		       "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		       "--initial-cluster", c->initial, "--initial-cluster-token", c->token,
		       "--initial-cluster-state", "new", "--logger", "zap", "--log-level", "warn",
		       (char *)NULL);
		_exit(127);
	}
	m->pid = pid;
	return 0;
}

/* Wait until every running member is healthy. */
static int wait_healthy(struct mc_etcd_cluster *c, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		int healthy = 0, running = 0;
		for (int i = 0; i < c->n; i++) {
			int st;
			if (!c->m[i].pid)
				continue;
			if (waitpid(c->m[i].pid, &st, WNOHANG) == c->m[i].pid) {
				fprintf(stderr, "etcd_cluster: %s exited early (status %d)\n",
					c->m[i].name, st);
				c->m[i].pid = 0;
				log_tail(&c->m[i]);
				return -1;
			}
			running++;
			healthy += mc_etcd_member_healthy(c, i);
		}
		if (healthy == running)
			return 0;
		if (now_ms() >= deadline)
			break;
		nap_ms(50); /* poll interval */
	}
	fprintf(stderr, "etcd_cluster: members not healthy after %d ms\n", timeout_ms);
	for (int i = 0; i < c->n; i++)
		if (c->m[i].pid)
			log_tail(&c->m[i]);
	return -1;
}

int mc_etcd_cluster_start(int n, int timeout_ms, struct mc_etcd_cluster **out)
{
	struct mc_etcd_cluster *c;
	const char *tmp = getenv("TMPDIR");
	size_t off = 0, uoff = 0;

	if (n < 1 || n > MC_ETCD_MAX_MEMBERS)
		return -1;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -1;
	c->n = n;
	snprintf(c->dir, sizeof(c->dir), "%s/mc-etcd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(c->dir)) {
		perror("etcd_cluster: mkdtemp");
		free(c);
		return -1;
	}
	snprintf(c->token, sizeof(c->token), "mc-test-%d-%llu", (int)getpid(),
		 (unsigned long long)now_ms());
	uoff = (size_t)snprintf(c->uri, sizeof(c->uri), "etcd://");
	for (int i = 0; i < n; i++) {
		struct member *m = &c->m[i];
		snprintf(m->name, sizeof(m->name), "m%d", i);
		snprintf(m->data_dir, sizeof(m->data_dir), "%s/%s.data", c->dir, m->name);
		snprintf(m->log, sizeof(m->log), "%s/%s.log", c->dir, m->name);
		do {
			m->client_port = mc_test_free_port();
			m->peer_port = mc_test_free_port();
		} while (!m->client_port || !m->peer_port || m->client_port == m->peer_port);
		snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%u", m->client_port);
		off += (size_t)snprintf(c->initial + off, sizeof(c->initial) - off,
					"%s%s=http://127.0.0.1:%u", i ? "," : "", m->name,
					m->peer_port);
		uoff += (size_t)snprintf(c->uri + uoff, sizeof(c->uri) - uoff, "%s%s", i ? "," : "",
					 m->endpoint);
	}
	for (int i = 0; i < n; i++) {
		if (member_spawn(c, i) != 0)
			goto err_stop;
	}
	if (wait_healthy(c, timeout_ms) != 0)
		goto err_stop;
	*out = c;
	return 0;

err_stop:
	mc_etcd_cluster_stop(c);
	return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void mc_etcd_cluster_stop(struct mc_etcd_cluster *c)
{
	const char *keep = getenv("MC_TEST_KEEP_ETCD");

	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		mc_etcd_member_kill(c, i);
	if (keep && *keep && strcmp(keep, "0") != 0)
		fprintf(stderr, "etcd_cluster: keeping %s\n", c->dir);
	else
		nftw(c->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(c);
}

const char *mc_etcd_cluster_uri(const struct mc_etcd_cluster *c)
{
	return c->uri;
}

const char *mc_etcd_member_endpoint(const struct mc_etcd_cluster *c, int i)
{
	return c->m[i].endpoint;
}

void mc_etcd_member_kill(struct mc_etcd_cluster *c, int i)
{
	struct member *m = &c->m[i];

	if (!m->pid)
		return;
	kill(m->pid, SIGKILL);
	while (waitpid(m->pid, NULL, 0) < 0 && errno == EINTR)
		;
	m->pid = 0;
}

int mc_etcd_member_restart(struct mc_etcd_cluster *c, int i, bool wipe, int timeout_ms)
{
	mc_etcd_member_kill(c, i);
	if (wipe)
		nftw(c->m[i].data_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (member_spawn(c, i) != 0)
		return -1;
	return wait_healthy(c, timeout_ms);
}
