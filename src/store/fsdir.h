/*
 * store/fsdir.h - the legacy shared-filesystem DISK tier (spec store.md
 * 5.1): where an object's file lies under <root_fs_dir>/<cluster_id>, and
 * the file's format.
 *
 * Path: <fsdir>/<c1>/<c2>/<name>.  c1 and c2 are letters 'a'..'p' from the
 * low 4 and the next 4 bits of XXH3-64 of the key (the spec says "a hash of
 * the key" without naming it; upstream's paths are therefore not ours
 * byte for byte).  <name> is the key with / \ : * ? " < > | and NUL turned
 * into '_', as upstream does, but where that could name two objects' files
 * alike (a key the sanitising changed, a tenant other than the default
 * one, "." and "..", a name over MC_FSDIR_NAME_KEEP bytes) the name is the
 * first MC_FSDIR_NAME_KEEP sanitised bytes, '.', and 16 hex digits of a
 * hash of the tenant and the key.  A name never holds ':', so the writer's
 * temporary files, ":<16 hex>.tmp" in the same directory, never meet one.
 *
 * File: a 64-byte header, the tenant, the key, the value; integers
 * little-endian:
 *    0 u32 magic "MCFD"          32 u32 key length (1..4096)
 *    4 u16 version (1)           36 u32 tenant length (0..65536)
 *    6 u16 reserved (0)          40 u64 XXH3 of the tenant then the key
 *    8 u64 replica id            48 u64 reserved (0)
 *   16 u64 value length          56 u64 XXH3 of bytes 0..55
 *   24 u64 XXH3 of the value
 * The replica id is the DISK replica's id in the master's descriptor: a
 * reader takes a file only when it names the object and the very write
 * the master listed (a file of an older or a colliding object is "not
 * found"), and the value only when its checksum holds.  Files are written
 * to a temporary name, fsynced, renamed into place and the directory
 * fsynced, so a file at its final name is whole.
 */
#ifndef MC_STORE_FSDIR_H
#define MC_STORE_FSDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mooncake/status.h"

#define MC_FSDIR_HDR_SIZE   64u
#define MC_FSDIR_NAME_KEEP  200u /* sanitised bytes kept in a hashed name */
#define MC_FSDIR_KEY_MAX    4096u
#define MC_FSDIR_TENANT_MAX 65536u

struct mc_fsdir_hdr {
	uint64_t replica_id;
	uint64_t value_len;
	uint64_t value_sum; /* XXH3-64 of the value */
	uint64_t name_sum;  /* XXH3-64 of the tenant then the key */
	uint32_t key_len;
	uint32_t tenant_len;
};

/* The two directory letters of key. */
void mc_fsdir_letters(const char *key, size_t klen, char out[2]);

/* Write the path of (tenant, key) under fsdir into out (cap bytes, NUL
 * terminated when it fits); returns its length, so a return >= cap says
 * how much room it needs.  tenant "" and "default" are the same tenant. */
size_t mc_fsdir_path(char *out, size_t cap, const char *fsdir, size_t dlen, const char *tenant,
		     size_t tlen, const char *key, size_t klen);

/* XXH3-64 of the tenant then the key (the header's name_sum). */
uint64_t mc_fsdir_name_sum(const char *tenant, size_t tlen, const char *key, size_t klen);

void mc_fsdir_hdr_encode(const struct mc_fsdir_hdr *h, uint8_t out[MC_FSDIR_HDR_SIZE]);
/* Decode and check a header read from a file (n bytes available):
 * MC_ERR_CHECKSUM_MISMATCH or MC_ERR_FILE_READ_FAIL with the reason. */
mc_status mc_fsdir_hdr_decode(const void *p, size_t n, struct mc_fsdir_hdr *h);

/* Write the value (parts, len bytes in all) of (tenant, key) as the file
 * of replica_id at path, atomically (temporary name, fsync, rename, fsync
 * of the directory), creating the two directories when missing.
 * MC_ERR_FILE_WRITE_FAIL / MC_ERR_FILE_OPEN_FAIL with the cause. */
mc_status mc_fsdir_write(const char *path, const char *tenant, size_t tlen, const char *key,
			 size_t klen, uint64_t replica_id, const struct iovec *parts, size_t nparts,
			 uint64_t len);

/* Read the value of replica_id of (tenant, key), len bytes, into dst.
 * MC_ERR_FILE_NOT_FOUND: no file there, or the file of another object or
 * write; MC_ERR_FILE_READ_FAIL: short or malformed; CHECKSUM_MISMATCH. */
mc_status mc_fsdir_read(const char *path, const char *tenant, size_t tlen, const char *key,
			size_t klen, uint64_t replica_id, void *dst, uint64_t len);

/* Delete the file at path if it is replica_id's (a file of a newer write
 * stays).  true when a file was deleted. */
bool mc_fsdir_unlink(const char *path, uint64_t replica_id);
/* Delete the temporary file of the write of replica_id to path (a writer
 * killed before its rename leaves it), if there is one. */
void mc_fsdir_unlink_tmp(const char *path, uint64_t replica_id);

#endif
