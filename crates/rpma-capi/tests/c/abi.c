/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Compiled against Debian's librpma-dev header (/usr/include/librpma.h), linked with
 * -lrpma against rpma-rs's librpma.so and run on RPMA_BACKEND=mock (and on verbs, crates/rpma-capi/tests/c_verbs.rs): a connection, a write
 * and a read through the same bytes, teardown. Proves the ABI, not just the API.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

/*
 * rpma_cq_get_wc writes rpma_core::Wc entries into the caller's struct ibv_wc array: the
 * layouts must agree (rpma_core::WC_LAYOUT, checked by its own unit test).
 */
_Static_assert(sizeof(struct ibv_wc) == 48, "struct ibv_wc is 48 bytes, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, wr_id) == 0, "ibv_wc.wr_id at 0, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, status) == 8, "ibv_wc.status at 8, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, opcode) == 12, "ibv_wc.opcode at 12, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, vendor_err) == 16, "ibv_wc.vendor_err at 16");
_Static_assert(offsetof(struct ibv_wc, byte_len) == 20, "ibv_wc.byte_len at 20, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, imm_data) == 24, "ibv_wc.imm_data at 24, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, qp_num) == 28, "ibv_wc.qp_num at 28, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, src_qp) == 32, "ibv_wc.src_qp at 32, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, wc_flags) == 36, "ibv_wc.wc_flags at 36, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, pkey_index) == 40, "ibv_wc.pkey_index at 40");
_Static_assert(offsetof(struct ibv_wc, slid) == 42, "ibv_wc.slid at 42, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, sl) == 44, "ibv_wc.sl at 44, as rpma_core::Wc");
_Static_assert(offsetof(struct ibv_wc, dlid_path_bits) == 45, "ibv_wc.dlid_path_bits at 45");

#define CHECK(expr)                                                                      \
	do {                                                                             \
		int ret_ = (expr);                                                       \
		if (ret_ != 0) {                                                         \
			fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #expr, ret_); \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

/* RPMA_TEST_ADDR (a device's, on verbs), else 127.0.0.1 (the mock); RPMA_TEST_PORT, else 7313 */
static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static struct ibv_wc wait_wc(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	int ret;
	while ((ret = rpma_cq_get_wc(cq, 1, &wc, NULL)) == RPMA_E_NO_COMPLETION)
		CHECK(rpma_cq_wait(cq));
	CHECK(ret);
	return wc;
}

int main(void)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	CHECK(rpma_utils_get_ibv_context(env_or("RPMA_TEST_ADDR", "127.0.0.1"), RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));

	static char target[4096], local[4096];
	struct rpma_mr_local *target_mr = NULL, *local_mr = NULL;
	CHECK(rpma_mr_reg(peer, target, sizeof(target), RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC,
		&target_mr));
	CHECK(rpma_mr_reg(peer, local, sizeof(local), RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST,
		&local_mr));
	char desc[21];
	CHECK(rpma_mr_get_descriptor(target_mr, desc));

	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(peer, env_or("RPMA_TEST_ADDR", "127.0.0.1"), env_or("RPMA_TEST_PORT", "7313"), &ep));
	struct rpma_conn_req *req = NULL, *sreq = NULL;
	struct rpma_conn *conn = NULL, *sconn = NULL;
	CHECK(rpma_conn_req_new(peer, env_or("RPMA_TEST_ADDR", "127.0.0.1"), env_or("RPMA_TEST_PORT", "7313"), NULL, &req));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	CHECK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	struct rpma_conn_private_data pdata = {desc, sizeof(desc)};
	CHECK(rpma_conn_req_connect(&sreq, &pdata, &sconn));
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != RPMA_CONN_ESTABLISHED)
		return 2;
	CHECK(rpma_conn_next_event(sconn, &ev));

	struct rpma_conn_private_data got;
	CHECK(rpma_conn_get_private_data(conn, &got));
	struct rpma_mr_remote *remote = NULL;
	CHECK(rpma_mr_remote_from_descriptor(got.ptr, got.len, &remote));
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));

	strcpy(local, "abi");
	CHECK(rpma_write(conn, remote, 100, local_mr, 0, 4, RPMA_F_COMPLETION_ALWAYS, (void *)1));
	struct ibv_wc wc = wait_wc(cq);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 1 || strcmp(target + 100, "abi") != 0)
		return 3;
	CHECK(rpma_read(conn, local_mr, 200, remote, 100, 4, RPMA_F_COMPLETION_ALWAYS, (void *)2));
	wc = wait_wc(cq);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 2 ||
		strcmp(local + 200, "abi") != 0)
		return 4;

	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(sconn, &ev));
	CHECK(rpma_conn_disconnect(sconn));
	CHECK(rpma_conn_next_event(conn, &ev));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_conn_delete(&sconn));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_remote_delete(&remote));
	CHECK(rpma_mr_dereg(&target_mr));
	CHECK(rpma_mr_dereg(&local_mr));
	CHECK(rpma_peer_delete(&peer));
	printf("abi: OK\n");
	return 0;
}
