/*
 * tools/p2p_store_example.c - upstream's p2p-store-example, on our C API.
 *
 *   p2p_store_example --cmd=trainer    --metadata_server=127.0.0.1:2379 \
 *                     --local_server_name=10.0.0.1:12345 --file_size_mb=2048
 *   p2p_store_example --cmd=inferencer --metadata_server=127.0.0.1:2379 \
 *                     --local_server_name=10.0.0.2:12346 --file_size_mb=2048
 *
 * The trainer fills a buffer with a known pattern, registers it as "foo/bar"
 * (force_create, as upstream), lists prefix "foo", prints "ready", and holds
 * it until stdin closes or --wait_sec passes (upstream sleeps 100 s), then
 * unregisters.  The inferencer pulls it with get_replica, prints the time
 * and GB/s, checks every byte against the pattern, and deletes its replica.
 * Exit status 0 on success, 1 on any failure (with the reason).
 *
 * Upstream's --device_name and --nic_priority_matrix select RDMA NICs; this
 * example runs the engine over --protocol (tcp by default) and refuses them
 * by name rather than ignoring them.  --p2p_handshake runs the engine in
 * P2PHANDSHAKE mode (its name becomes host:rpc_port; the catalog still lives
 * in etcd).  Public API only (libmooncake.so).
 */
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/mooncake.h>
#include <mooncake/p2p_store.h>

static uint8_t byte_at(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, mc_status st)
{
	fprintf(stderr, "%s: %s (%s)\n", what, mc_strerror(st), mc_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"cmd", required_argument, NULL, 'c'},
		{"metadata_server", required_argument, NULL, 'm'},
		{"local_server_name", required_argument, NULL, 'l'},
		{"file_size_mb", required_argument, NULL, 'f'},
		{"shard_size_mb", required_argument, NULL, 's'},
		{"name", required_argument, NULL, 'n'},
		{"wait_sec", required_argument, NULL, 'w'},
		{"protocol", required_argument, NULL, 'p'},
		{"p2p_handshake", no_argument, NULL, 'P'},
		{"device_name", required_argument, NULL, 'D'},
		{"nic_priority_matrix", required_argument, NULL, 'N'},
		{NULL, 0, NULL, 0},
	};
	const char *cmd = "trainer", *name = "foo/bar";
	struct mc_p2p_params p = {.metadata_uri = "localhost:2379",
				  .local_server_name = "localhost:12345"};
	uint64_t size = 2048ull << 20, shard = 64ull << 20;
	long wait_sec = 100;
	struct mc_p2p_store *s;
	uint8_t *buf;
	mc_status st;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			cmd = optarg;
			break;
		case 'm':
			p.metadata_uri = optarg;
			break;
		case 'l':
			p.local_server_name = optarg;
			break;
		case 'f':
			size = strtoull(optarg, NULL, 10) << 20;
			break;
		case 's':
			shard = strtoull(optarg, NULL, 10) << 20;
			break;
		case 'n':
			name = optarg;
			break;
		case 'w':
			wait_sec = strtol(optarg, NULL, 10);
			break;
		case 'p':
			p.protocol = optarg;
			break;
		case 'P':
			p.te_metadata_uri = "P2PHANDSHAKE";
			break;
		case 'D':
		case 'N':
			fprintf(stderr,
				"--%s is not supported: this example runs over --protocol "
				"(tcp by default)\n",
				c == 'D' ? "device_name" : "nic_priority_matrix");
			return 2;
		default:
			return 2;
		}
	}
	if (strcmp(cmd, "trainer") != 0 && strcmp(cmd, "inferencer") != 0) {
		fprintf(stderr, "--cmd must be trainer or inferencer, not %s\n", cmd);
		return 2;
	}
	if (!size) {
		fprintf(stderr, "--file_size_mb must be at least 1\n");
		return 2;
	}
	buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	st = mc_p2p_store_new(&p, &s);
	if (st)
		return fail("new", st);
	printf("local server name %s\n", mc_p2p_store_local_name(s));
	if (strcmp(cmd, "trainer") == 0) {
		struct mc_p2p_info *infos;
		size_t n;
		struct pollfd pfd = {.fd = 0, .events = POLLIN};
		char sink[256];

		for (uint64_t i = 0; i < size; i++)
			buf[i] = byte_at(i);
		st = mc_p2p_register(s, name, (void *const[]){buf}, (const uint64_t[]){size}, 1,
				     shard, "cpu:0", true);
		if (st) {
			rc = fail("register", st);
			goto out;
		}
		st = mc_p2p_list(s, "foo", &infos, &n);
		if (st) {
			rc = fail("list", st);
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			printf("listed %s: %llu bytes, shards of %llu\n", infos[i].name,
			       (unsigned long long)infos[i].total_size,
			       (unsigned long long)infos[i].max_shard_size);
		mc_p2p_infos_free(infos, n);
		printf("ready\n");
		fflush(stdout);
		/* hold it until stdin closes (or says anything) or the wait ends */
		if (poll(&pfd, 1, wait_sec < 0 ? -1 : (int)(wait_sec * 1000)) > 0)
			(void)!read(0, sink, sizeof(sink));
		st = mc_p2p_unregister(s, name);
		if (st)
			rc = fail("unregister", st);
	} else {
		double t0 = now_s(), dt;

		st = mc_p2p_get_replica(s, name, (void *const[]){buf}, (const uint64_t[]){size}, 1);
		if (st) {
			rc = fail("get_replica", st);
			goto out;
		}
		dt = now_s() - t0;
		printf("get_replica %s: %.1f ms, %.2f GB/s\n", name, dt * 1e3,
		       (double)size / dt / 1e9);
		for (uint64_t i = 0; i < size; i++) {
			if (buf[i] != byte_at(i)) {
				fprintf(stderr, "byte %llu differs\n", (unsigned long long)i);
				rc = 1;
				break;
			}
		}
		if (!rc)
			printf("verified %llu bytes\n", (unsigned long long)size);
		st = mc_p2p_delete_replica(s, name);
		if (st)
			rc = fail("delete_replica", st);
	}
	fflush(stdout);
out:
	mc_p2p_store_free(s);
	munmap(buf, size);
	return rc;
}
