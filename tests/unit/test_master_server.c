/*
 * tests/unit/test_master_server.c - mooncake_master's flags, config file
 * and RPC framing, in process (master/server.h).
 *
 * The parser cases check upstream's defaults, the duration units, the
 * refusal of features this build lacks, the config file forms and the
 * precedence of command-line flags over the file.  The server cases start
 * a real server on 127.0.0.1 with free ports and talk to it over a socket
 * with the protocol codec: a request is answered, a malformed frame
 * closes only its own connection, a port in use is refused by name.
 * tests/integration/test_master_daemon.py does the same against the
 * mooncake_master binary.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../support/support.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "master/server.h"
#include "mooncake/status.h"
#include "store/proto.h"

static char err[512];

static mc_status set(struct mc_master_server_config *c, const char *name, const char *value)
{
	return mc_master_server_config_set(c, name, value, err, sizeof(err));
}

static mc_status load(struct mc_master_server_config *c, const char *text)
{
	return mc_master_server_config_load_buffer(c, text, strlen(text), err, sizeof(err));
}

/* ---- flags ------------------------------------------------------------------ */

static void defaults_are_upstreams(void **state)
{
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	assert_int_equal(c.rpc_port, 0);
	assert_int_equal(c.port, 50051);
	assert_false(c.rpc_port_explicit);
	assert_int_equal(c.metrics_port, 9003);
	assert_int_equal(c.http_metadata_server_port, 8080);
	assert_false(c.enable_http_metadata_server);
	assert_true(c.enable_metric_reporting);
	assert_true(c.rpc_enable_tcp_no_delay);
	assert_int_equal(c.rpc_conn_timeout_seconds, 0);
	assert_string_equal(c.rpc_address, "0.0.0.0");
	assert_string_equal(c.metrics_host, "0.0.0.0");
	assert_string_equal(c.cluster_id, "mooncake_cluster");
	assert_string_equal(c.memory_allocator, "offset");
	assert_string_equal(c.allocation_strategy, "random");
	assert_int_equal(c.master.default_kv_lease_ttl_ms, 10000);
	assert_int_equal(c.master.default_kv_soft_pin_ttl_ms, 1800000);
	assert_int_equal(c.master.max_kv_soft_pin_ttl_ms, 86400000);
	assert_int_equal(c.master.client_ttl_ms, 10000);
	assert_int_equal(c.master.put_start_discard_timeout_ms, 30000);
	assert_int_equal(c.master.put_start_release_timeout_ms, 600000);
	assert_true(c.master.eviction_ratio == 0.05);
	assert_true(c.master.eviction_high_watermark_ratio == 0.90);
	assert_true(c.master.allow_evict_soft_pinned_objects);
	mc_master_server_config_release(&c);
}

static void durations_take_units(void **state)
{
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	assert_int_equal(set(&c, "default_kv_lease_ttl", "5s"), MC_OK);
	assert_int_equal(c.master.default_kv_lease_ttl_ms, 5000);
	assert_int_equal(set(&c, "default_kv_lease_ttl", "250"), MC_OK); /* bare: ms */
	assert_int_equal(c.master.default_kv_lease_ttl_ms, 250);
	assert_int_equal(set(&c, "default_kv_soft_pin_ttl", "2m"), MC_OK);
	assert_int_equal(c.master.default_kv_soft_pin_ttl_ms, 120000);
	assert_int_equal(set(&c, "client_ttl", "30"), MC_OK); /* bare: seconds */
	assert_int_equal(c.master.client_ttl_ms, 30000);
	assert_int_equal(set(&c, "client_ttl", "1500ms"), MC_OK);
	assert_int_equal(c.master.client_ttl_ms, 1500);
	assert_int_equal(set(&c, "put_start_release_timeout_sec", "1h"), MC_OK);
	assert_int_equal(c.master.put_start_release_timeout_ms, 3600000);
	assert_int_equal(set(&c, "rpc_conn_timeout_seconds", "1500ms"), MC_OK); /* rounds up */
	assert_int_equal(c.rpc_conn_timeout_seconds, 2);

	assert_int_equal(set(&c, "client_ttl", "5x"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(err, "client_ttl"));
	assert_int_equal(set(&c, "client_ttl", "-1"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "client_ttl", "0"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "default_kv_lease_ttl", ""), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "default_kv_lease_ttl", "99999999999999999999h"),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(c.master.client_ttl_ms, 1500); /* failures change nothing */
	mc_master_server_config_release(&c);
}

static void values_are_checked(void **state)
{
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	assert_int_equal(set(&c, "eviction_ratio", "0.25"), MC_OK);
	assert_true(c.master.eviction_ratio == 0.25);
	assert_int_equal(set(&c, "eviction_ratio", "1.5"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "eviction_ratio", "nan"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "metrics_port", "65536"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "rpc_enable_tcp_no_delay", "maybe"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "allocation_strategy", "free_ratio_first"), MC_OK);
	assert_int_equal(c.master.strategy, MC_ALLOC_FREE_RATIO_FIRST);
	assert_string_equal(c.allocation_strategy, "free_ratio_first");
	assert_int_equal(set(&c, "allocation_strategy", "Random"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "cluster_id", "a b"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "no_such_flag", "1"), MC_ERR_NOT_FOUND);
	assert_int_equal(set(&c, "config_path", "x"), MC_ERR_NOT_FOUND); /* argv only */
	assert_int_equal(set(&c, "client_live_ttl_sec", "60"), MC_OK);	 /* file alias */
	assert_int_equal(c.master.client_ttl_ms, 60000);
	assert_int_equal(set(&c, "rpc_port", "0"), MC_OK);
	assert_true(c.rpc_port_explicit);
	mc_master_server_config_release(&c);
}

static void missing_features_refuse_anything_but_the_default(void **state)
{
	static const char *const refused[][2] = {
		{"enable_oplog", "yes"},
		{"ha_backend_type", "k8s"},
		{"enable_cxl", "true"},
		{"enable_kv_events", "true"},
		{"enable_metadata_cleanup_on_timeout", "true"},
		{"memory_allocator", "cachelib"},
		{"allocation_strategy", "cxl"},
	};
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		assert_int_equal(set(&c, refused[i][0], refused[i][1]), MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(err, "not supported in this build"));
	}
	/* their defaults, and flags without an effect, are accepted */
	assert_int_equal(set(&c, "enable_ha", "false"), MC_OK);
	assert_int_equal(set(&c, "enable_ha", "true"), MC_OK); /* master/ha.c */
	assert_false(set(&c, "ha_lease_ttl_seconds", "0") == MC_OK);
	assert_int_equal(set(&c, "dynamic_replication_mode", "off"), MC_OK);
	assert_int_equal(set(&c, "etcd_endpoints", "http://localhost:2379"), MC_OK);
	assert_int_equal(set(&c, "rpc_thread_num", "16"), MC_OK);
	assert_int_equal(set(&c, "ha_backend_type", "redis"), MC_OK);
	assert_int_equal(set(&c, "ha_backend_type", "zookeeper"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "cxl_size", "16g"), MC_OK);
	/* snapshots are local files: the other stores are refused */
	assert_int_equal(set(&c, "snapshot_object_store_type", "local"), MC_OK);
	assert_int_equal(set(&c, "snapshot_object_store_type", "s3"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(err, "not supported in this build"));
	assert_int_equal(set(&c, "snapshot_catalog_store_type", "redis"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(set(&c, "snapshot_backup_dir", "/x"), MC_ERR_INVALID_PARAMS);
	/* and the snapshot flags are used */
	assert_int_equal(set(&c, "enable_snapshot", "true"), MC_OK);
	assert_true(c.enable_snapshot);
	assert_int_equal(set(&c, "snapshot_interval_seconds", "5"), MC_OK);
	assert_int_equal(c.snapshot_interval_seconds, 5);
	assert_int_equal(set(&c, "snapshot_retention_count", "0"), MC_ERR_INVALID_PARAMS);
	assert_string_equal(c.snapshot_local_path, "");
	mc_master_server_config_release(&c);
	/* upstream's variable names the snapshot directory */
	setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "/tmp/snaps", 1);
	mc_master_server_config_defaults(&c);
	unsetenv("MOONCAKE_SNAPSHOT_LOCAL_PATH");
	assert_string_equal(c.snapshot_local_path, "/tmp/snaps");
	mc_master_server_config_release(&c);
}

/* ---- config files ------------------------------------------------------------ */

static void yaml_file(void **state)
{
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	assert_int_equal(load(&c, "# comment\n"
				  "---\n"
				  "rpc_port: 50052\n"
				  "rpc_address: \"127.0.0.1\"  # trailing comment\n"
				  "metrics_host: '::1'\n"
				  "rpc_interface: eth#0\n" /* '#' not after a blank: data */
				  "client_live_ttl_sec: 60\r\n"
				  "eviction_ratio: 0.1\n"
				  "pod_name:\n" /* null */
				  "tenant_eviction_high_watermark_ratio: 0.9\n"),
			 MC_OK);
	assert_int_equal(c.rpc_port, 50052);
	assert_string_equal(c.rpc_address, "127.0.0.1");
	assert_string_equal(c.metrics_host, "::1");
	assert_string_equal(c.rpc_interface, "eth#0");
	assert_int_equal(c.master.client_ttl_ms, 60000);
	assert_true(c.master.eviction_ratio == 0.1);

	assert_int_equal(load(&c, "enable_oplog: true\n"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(err, "line 1"));
	assert_int_equal(load(&c, "rpc_port: 1\nnested:\n  a: 1\n"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(err, "nested"));
	assert_int_equal(load(&c, "just text\n"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(load(&c, "rpc_address: \"open\n"), MC_ERR_INVALID_PARAMS);
	mc_master_server_config_release(&c);
}

static void json_file(void **state)
{
	struct mc_master_server_config c;

	mc_master_server_config_defaults(&c);
	assert_int_equal(load(&c, "{\"rpc_port\": 50053, \"enable_metric_reporting\": false,"
				  " \"eviction_high_watermark_ratio\": 1.0,"
				  " \"default_kv_lease_ttl\": \"2s\", \"client_live_ttl_sec\": 60,"
				  " \"newer_upstream_key\": {\"x\": 1}, \"pod_name\": null}"),
			 MC_OK);
	assert_int_equal(c.rpc_port, 50053);
	assert_false(c.enable_metric_reporting);
	assert_true(c.master.eviction_high_watermark_ratio == 1.0);
	assert_int_equal(c.master.default_kv_lease_ttl_ms, 2000);
	assert_int_equal(c.master.client_ttl_ms, 60000);

	assert_int_equal(load(&c, "{\"rpc_port\": 1,"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(err, "JSON"));
	assert_int_equal(load(&c, "{\"rpc_port\": 1, \"rpc_port\": 2}"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(load(&c, "{\"rpc_port\": [1]}"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(load(&c, "{\"eviction_ratio\": 7}"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(load(&c, "  [1, 2]"), MC_ERR_INVALID_PARAMS); /* YAML: no colon */
	mc_master_server_config_release(&c);
}

/* ---- argv ---------------------------------------------------------------------- */

/* parse(c, &code, &text_or_NULL, "--flag", ...): argv after the program name. */
#define parse(c, code, out_text, ...) \
	parse_argv((c), (code), (out_text), (const char *[]){__VA_ARGS__, NULL})

static mc_status parse_argv(struct mc_master_server_config *c, int *code, char **out_text,
			    const char **args)
{
	char *argv[16] = {"mooncake_master"};
	int argc = 1;
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	mc_status st;

	for (; *args && argc < 15; args++)
		argv[argc++] = (char *)*args;
	st = mc_master_server_config_parse(c, argc, argv, out, code);
	fclose(out);
	if (out_text)
		*out_text = buf;
	else
		free(buf);
	return st;
}

static void argv_forms_and_precedence(void **state)
{
	struct mc_master_server_config c;
	char path[] = "/tmp/mc_master_cfg_XXXXXX";
	int fd = mkstemp(path), code = -1;
	char flag[64];
	const char text[] = "metrics_port: 1111\neviction_ratio: 0.2\nrpc_port: 2222\n";

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
	close(fd);
	snprintf(flag, sizeof(flag), "--config_path=%s", path);

	/* a flag before --config_path still overrides the file */
	mc_master_server_config_defaults(&c);
	assert_int_equal(parse(&c, &code, NULL, "--metrics_port=3333", flag, "-rpc_address",
			       "127.0.0.1", "--noenable_metric_reporting",
			       "--rpc_enable_tcp_no_delay"),
			 MC_OK);
	assert_int_equal(code, 0);
	assert_int_equal(c.metrics_port, 3333);
	assert_int_equal(c.rpc_port, 2222);
	assert_true(c.master.eviction_ratio == 0.2);
	assert_string_equal(c.rpc_address, "127.0.0.1");
	assert_false(c.enable_metric_reporting);
	assert_true(c.rpc_enable_tcp_no_delay);
	mc_master_server_config_release(&c);
	unlink(path);

	mc_master_server_config_defaults(&c);
	assert_int_not_equal(parse(&c, &code, NULL, flag), MC_OK); /* file gone */
	assert_int_equal(code, 2);
	assert_int_not_equal(parse(&c, &code, NULL, "--nosuch"), MC_OK);
	assert_int_equal(code, 2);
	assert_int_not_equal(parse(&c, &code, NULL, "--noeviction_ratio"), MC_OK);
	assert_int_equal(code, 2);
	assert_int_not_equal(parse(&c, &code, NULL, "--port"), MC_OK);
	assert_int_equal(code, 2);
	assert_int_not_equal(parse(&c, &code, NULL, "--default_kv_soft_pin_ttl=2d"), MC_OK);
	assert_int_equal(code, 2);
	mc_master_server_config_release(&c);
	/* the legacy DISK tier, alone; never with the SSD tier (spec 5.1) */
	mc_master_server_config_defaults(&c);
	assert_int_equal(parse(&c, &code, NULL, "--root_fs_dir=/mnt/shared", "--cluster_id=c1"),
			 MC_OK);
	assert_string_equal(c.root_fs_dir, "/mnt/shared");
	mc_master_server_config_release(&c);
	mc_master_server_config_defaults(&c);
	assert_int_not_equal(
		parse(&c, &code, NULL, "--root_fs_dir=/mnt/shared", "--enable_offload"), MC_OK);
	assert_int_equal(code, 2);
	mc_master_server_config_release(&c);
}

static void help_and_version_exit_0(void **state)
{
	struct mc_master_server_config c;
	char *text = NULL;
	int code = -1;

	mc_master_server_config_defaults(&c);
	assert_int_not_equal(parse(&c, &code, &text, "--rpc_port=1", "--help"), MC_OK);
	assert_int_equal(code, 0);
	assert_non_null(strstr(text, "--rpc_port=0"));
	assert_non_null(strstr(text, "--enable_ha=false"));
	assert_non_null(strstr(text, "accepted, no effect in this build"));
	free(text);
	assert_int_not_equal(parse(&c, &code, &text, "--version"), MC_OK);
	assert_int_equal(code, 0);
	assert_non_null(strstr(text, " (git: "));
	free(text);
	mc_master_server_config_release(&c);
}

/* ---- the running server ---------------------------------------------------------- */

static struct mc_master_server *start_local(uint16_t rpc_port)
{
	struct mc_master_server_config c;
	struct mc_master_server *s = NULL;
	mc_status st;

	mc_master_server_config_defaults(&c);
	assert_int_equal(set(&c, "rpc_address", "127.0.0.1"), MC_OK);
	assert_int_equal(set(&c, "metrics_host", "127.0.0.1"), MC_OK);
	assert_int_equal(set(&c, "metrics_port", "0"), MC_OK);
	assert_int_equal(set(&c, "enable_metric_reporting", "false"), MC_OK);
	c.rpc_port = rpc_port;
	c.rpc_port_explicit = true;
	st = mc_master_server_start(&c, &s);
	mc_master_server_config_release(&c);
	return st == MC_OK ? s : NULL;
}

/* Send one frame; read one back.  Returns the decode status. */
static mc_status round_trip(int fd, const struct mc_buf *req, struct mc_store_msg *resp)
{
	uint8_t buf[4096];
	size_t len = 0, flen;
	struct mc_proto_hdr h;

	assert_int_equal(mc_sock_write_full(fd, req->data, req->len, mc_now_ms() + 5000), MC_OK);
	for (;;) {
		mc_status st = mc_proto_frame_peek(buf, len, sizeof(buf), &h, &flen);
		if (st == MC_OK)
			return mc_store_msg_decode(buf, flen, sizeof(buf), resp);
		if (st != MC_INPROGRESS)
			return st;
		ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (n <= 0)
			return MC_ERR_CONN_CLOSED;
		len += (size_t)n;
	}
}

static void ping(int fd, uint64_t id)
{
	struct mc_store_client_req req = {.client_id = {1, 2}};
	struct mc_store_msg resp;
	struct mc_buf b;

	mc_buf_init(&b);
	assert_int_equal(mc_store_ping_request_encode(&b, id, &req), MC_OK);
	assert_int_equal(round_trip(fd, &b, &resp), MC_OK);
	assert_int_equal(resp.hdr.type, MC_STORE_PING);
	assert_true(resp.hdr.flags & MC_PROTO_F_RESPONSE);
	assert_int_equal(resp.hdr.req_id, id);
	assert_int_equal(resp.hdr.status, 0);
	assert_int_equal(resp.body.ping_resp.client_status, MC_STORE_CLIENT_NEED_REMOUNT);
	mc_store_msg_release(&resp);
	mc_buf_release(&b);
}

static void server_answers_and_drops_only_bad_connections(void **state)
{
	struct mc_master_server *s = start_local(0);
	struct mc_store_msg resp;
	struct mc_buf b;
	uint8_t junk[64];
	int good, bad;

	assert_non_null(s);
	assert_int_not_equal(mc_master_server_rpc_port(s), 0);
	assert_int_not_equal(mc_master_server_metrics_port(s), 0);
	assert_int_equal(mc_master_server_metadata_port(s), 0);
	good = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	bad = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	assert_true(good >= 0 && bad >= 0);
	ping(good, 1);

	/* an unknown type is refused and the connection goes on */
	mc_buf_init(&b);
	assert_int_equal(mc_store_error_encode(&b, 4000, 9, MC_ERR_INTERNAL, "x"), MC_OK);
	b.data[8] = 0; /* make it a request: clear the RESPONSE flag, status 0 */
	memset(b.data + 12, 0, 4);
	assert_int_equal(round_trip(good, &b, &resp), MC_OK);
	assert_int_equal(resp.hdr.status, MC_ERR_NOT_SUPPORTED);
	assert_int_equal(resp.hdr.req_id, 9);
	mc_store_msg_release(&resp);
	mc_buf_release(&b);
	ping(good, 2);

	/* garbage: that connection is closed, the other one is served */
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(mc_sock_write_full(bad, junk, sizeof(junk), mc_now_ms() + 5000), MC_OK);
	assert_true(recv(bad, junk, sizeof(junk), 0) <= 0);
	ping(good, 3);

	close(bad);
	close(good);
	mc_master_server_stop(s);
}

/*
 * A forked child (the snapshot writer, an HA snapshot sender) holds
 * duplicates of every socket of the master.  A connection the master
 * closes meanwhile stays in its epoll set, as epoll forgets a socket only
 * when its last descriptor closes: its peer's EOF kept being reported for
 * the freed connection, which the master then freed again (the general
 * protection faults in conn_free of session 14).  The master must stop
 * watching a connection before it frees it.
 */
static void conn_closed_while_a_child_holds_its_socket(void **state)
{
	struct mc_master_server *s = start_local(0);
	struct timeval tv = {.tv_sec = 10};
	uint8_t junk[64];
	int a, b, bad, wst;
	ssize_t n;
	pid_t pid;

	assert_non_null(s);
	a = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	b = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	bad = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	assert_true(a >= 0 && b >= 0 && bad >= 0);
	ping(a, 1); /* all accepted and watched */
	ping(b, 2);
	ping(bad, 3);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(a); /* the client's ends are the parent's */
		close(b);
		close(bad);
		close(STDOUT_FILENO); /* the test runner waits for these to close */
		close(STDERR_FILENO);
		alarm(60); /* should the test die first */
		for (;;)
			pause(); /* holds the master's sockets until killed */
	}
	close(a);
	/* the master frees a's connection on the EOF; the loop's next rounds
	 * (driven by b's requests) must not see a again */
	for (uint64_t i = 4; i < 10; i++)
		ping(b, i);
	/* a connection the master closes is closed for its client at once,
	 * not when the child exits */
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(mc_sock_write_full(bad, junk, sizeof(junk), mc_now_ms() + 5000), MC_OK);
	assert_int_equal(setsockopt(bad, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	errno = 0;
	n = recv(bad, junk, sizeof(junk), 0);
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	ping(b, 10);
	close(bad);
	close(b);
	mc_master_server_stop(s);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &wst, 0), pid);
}

static void port_in_use_is_named(void **state)
{
	struct mc_master_server *a = start_local(0), *b;
	char port[16];

	assert_non_null(a);
	b = start_local(mc_master_server_rpc_port(a));
	assert_null(b);
	snprintf(port, sizeof(port), "%u", mc_master_server_rpc_port(a));
	assert_non_null(strstr(mc_last_error(), port));
	mc_master_server_stop(a);
}

/* ---- the write-ahead log refuses to acknowledge what it could not write ---------- */

static struct mc_master_server *start_wal(const char *dir)
{
	struct mc_master_server_config c;
	struct mc_master_server *s = NULL;
	mc_status st;

	mc_master_server_config_defaults(&c);
	assert_int_equal(set(&c, "rpc_address", "127.0.0.1"), MC_OK);
	assert_int_equal(set(&c, "metrics_host", "127.0.0.1"), MC_OK);
	assert_int_equal(set(&c, "metrics_port", "0"), MC_OK);
	assert_int_equal(set(&c, "enable_metric_reporting", "false"), MC_OK);
	assert_int_equal(set(&c, "mount_probe", "false"), MC_OK);
	assert_int_equal(set(&c, "wal_dir", dir), MC_OK);
	assert_int_equal(set(&c, "wal_fsync", "always"), MC_OK);
	c.rpc_port = 0;
	c.rpc_port_explicit = true;
	st = mc_master_server_start(&c, &s);
	mc_master_server_config_release(&c);
	assert_int_equal(st, MC_OK);
	return s;
}

static mc_status mount(int fd, uint64_t id, uint64_t seg, uint64_t base)
{
	struct mc_store_mount_req req = {
		.client_id = {1, 2},
		.segment = {.id = {7, seg},
			    .name = mc_proto_str_c("s"),
			    .base = base,
			    .size = 1 << 20,
			    .te_endpoint = mc_proto_str_c("127.0.0.1:1"),
			    .protocol = mc_proto_str_c("tcp"),
			    .host_id = mc_proto_str_c("h")},
	};
	struct mc_store_msg resp;
	struct mc_buf b;
	mc_status st;

	mc_buf_init(&b);
	assert_int_equal(mc_store_request_encode(&b, MC_STORE_MOUNT_SEGMENT, id, &req), MC_OK);
	st = round_trip(fd, &b, &resp);
	mc_buf_release(&b);
	if (st != MC_OK)
		return st;
	assert_int_equal(resp.hdr.req_id, id);
	st = resp.hdr.status;
	mc_store_msg_release(&resp);
	return st;
}

/* Bytes in the log's files under dir. */
static off_t wal_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	off_t n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[600];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (strncmp(e->d_name, "wal-", 4) == 0 && stat(path, &st) == 0)
			n += st.st_size;
	}
	closedir(d);
	return n;
}

/* POST body to path on the admin port: the response's first bytes. */
static void http_post(struct mc_master_server *s, const char *path, const char *body, char *out,
		      size_t cap)
{
	char req[512];
	int fd = mc_sock_connect("127.0.0.1", mc_master_server_metrics_port(s), 5000, false);
	size_t got = 0;
	ssize_t n;

	assert_true(fd >= 0);
	snprintf(req, sizeof(req),
		 "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		 path, strlen(body), body);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while (got + 1 < cap && (n = read(fd, out + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fd);
}

static void failed_log_write_is_never_acknowledged(void **state)
{
	char dir[256];
	struct mc_master_server *s;
	struct rlimit old, lim;
	int fd;
	(void)state;
	assert_true(mc_test_tmpdir(NULL, "srvwal", dir, sizeof(dir)));
	s = start_wal(dir);
	fd = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	assert_true(fd >= 0);
	assert_int_equal(mount(fd, 1, 1, 0x10000000), MC_OK);
	assert_true(wal_bytes(dir) > 32); /* header + the mount's record */

	/* the file cannot grow: the next commit fails with EFBIG */
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)wal_bytes(dir);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	assert_int_equal(mount(fd, 2, 2, 0x20000000), MC_ERR_CONN_CLOSED); /* no ack */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	close(fd);

	/* from then on changes are refused with an error, reads still work */
	fd = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	assert_true(fd >= 0);
	{
		struct mc_store_client_req req = {.client_id = {1, 2}};
		struct mc_store_msg resp;
		struct mc_buf b;

		mc_buf_init(&b);
		assert_int_equal(mc_store_ping_request_encode(&b, 3, &req), MC_OK);
		assert_int_equal(round_trip(fd, &b, &resp), MC_OK);
		assert_int_equal(resp.hdr.status, 0);
		mc_store_msg_release(&resp);
		mc_buf_release(&b);
	}
	assert_int_equal(mount(fd, 4, 3, 0x30000000), MC_ERR_FILE_WRITE_FAIL);
	/* a task is logged state too (tasks_wal.c): refused before any check */
	{
		struct mc_proto_str tg = mc_proto_str_c("x:1");
		struct mc_store_copy_task_req req = {mc_proto_str_c(""), mc_proto_str_c("k"), 1,
						     &tg};
		struct mc_store_msg resp;
		struct mc_buf b;

		mc_buf_init(&b);
		assert_int_equal(mc_store_request_encode(&b, MC_STORE_CREATE_COPY_TASK, 5, &req),
				 MC_OK);
		assert_int_equal(round_trip(fd, &b, &resp), MC_OK);
		assert_int_equal(resp.hdr.status, MC_ERR_FILE_WRITE_FAIL);
		mc_store_msg_release(&resp);
		mc_buf_release(&b);
	}
	/* and so is a drain job (the admin API): refused, not created */
	{
		char out[2048];

		http_post(s, "/api/v1/drain_jobs", "{\"segments\": [\"s\"]}", out, sizeof(out));
		assert_null(strstr(out, "\"job_id\""));
		assert_non_null(strstr(out, "log cannot be written"));
	}
	close(fd);
	mc_master_server_stop(s);

	/* a restart goes back to the log, which is whole: it takes changes again */
	s = start_wal(dir);
	fd = mc_sock_connect("127.0.0.1", mc_master_server_rpc_port(s), 5000, false);
	assert_true(fd >= 0);
	assert_int_equal(mount(fd, 5, 4, 0x40000000), MC_OK);
	close(fd);
	mc_master_server_stop(s);
	mc_test_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_upstreams),
		cmocka_unit_test(durations_take_units),
		cmocka_unit_test(values_are_checked),
		cmocka_unit_test(missing_features_refuse_anything_but_the_default),
		cmocka_unit_test(yaml_file),
		cmocka_unit_test(json_file),
		cmocka_unit_test(argv_forms_and_precedence),
		cmocka_unit_test(help_and_version_exit_0),
		cmocka_unit_test(server_answers_and_drops_only_bad_connections),
		cmocka_unit_test(conn_closed_while_a_child_holds_its_socket),
		cmocka_unit_test(port_in_use_is_named),
		cmocka_unit_test(failed_log_write_is_never_acknowledged),
	};

	mc_log_set_level(MC_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
