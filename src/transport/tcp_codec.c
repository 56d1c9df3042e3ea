/*
 * transport/tcp_codec.c - the 24-byte request header and the 8-byte status
 * frame of the TCP data protocol (spec transfer-engine.md 4.2).  Fields are
 * little-endian whatever the host; the 7 padding bytes are sent as zeros
 * and ignored on receipt.  Our extension: the checksum bit of the opcode
 * and the 8-byte checksum trailer (docs/design.md, "Transfer checksums").
 */
#include "transport/transport.h"

#include <string.h>

#include "mooncake/status.h"

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void mc_tcp_hdr_encode(const struct mc_tcp_hdr *h, uint8_t out[MC_TCP_HDR_LEN])
{
	memset(out, 0, MC_TCP_HDR_LEN);
	put_le64(out, h->size);
	put_le64(out + 8, h->addr);
	out[16] = h->opcode;
}

void mc_tcp_hdr_decode(const uint8_t in[MC_TCP_HDR_LEN], struct mc_tcp_hdr *h)
{
	h->size = get_le64(in);
	h->addr = get_le64(in + 8);
	h->opcode = in[16];
}

mc_status mc_tcp_status_decode(const uint8_t in[8], uint32_t *code_out)
{
	uint64_t v = get_le64(in);
	if ((uint32_t)(v >> 32) != MC_TCP_STATUS_MAGIC)
		return MC_ERR_PROTOCOL;
	*code_out = (uint32_t)v;
	return MC_OK;
}

struct mc_tcp_op mc_tcp_op_parse(uint8_t opcode)
{
	return (struct mc_tcp_op){
		.write = (opcode & (uint8_t) ~(MC_TCP_OP_V2 | MC_TCP_OP_SUM)) == MC_TCP_OP_WRITE,
		.v2 = (opcode & MC_TCP_OP_V2) != 0,
		.sum = (opcode & MC_TCP_OP_SUM) != 0,
	};
}

void mc_tcp_sum_encode(uint64_t sum, uint8_t out[MC_TCP_SUM_LEN])
{
	put_le64(out, sum);
}

uint64_t mc_tcp_sum_decode(const uint8_t in[MC_TCP_SUM_LEN])
{
	return get_le64(in);
}

void mc_tcp_status_encode(uint32_t code, uint8_t out[8])
{
	put_le64(out, ((uint64_t)MC_TCP_STATUS_MAGIC << 32) | code);
}
