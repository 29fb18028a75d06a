/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On RPMA_BACKEND=verbs, on the device RPMA_TEST_DEVICE owning RPMA_TEST_ADDR: the
 * `struct ibv_context *` this librpma hands out is libibverbs' own (its device's name, a
 * device query and a PD of the program's own work on it); rpma_peer_new takes the contexts of
 * librdmacm's device list (rdma_get_devices), which are the same objects, and refuses one the
 * program opened itself with ibv_open_device (RPMA_E_INVAL). Linked with -libverbs -lrdmacm.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <librpma.h>

#include "check.h"

int main(void)
{
	const char *dev = getenv("RPMA_TEST_DEVICE");
	EXPECT(dev && *dev);

	/* first a context of librdmacm's list, before this librpma saw the device */
	int n = 0;
	struct ibv_context **list = rdma_get_devices(&n);
	EXPECT(list && n > 0);
	struct ibv_context *listed = NULL;
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]->device), dev) == 0)
			listed = list[i];
	EXPECT(listed != NULL);
	struct rpma_peer *peer = NULL;
	CHECK(rpma_peer_new(listed, &peer));
	CHECK(rpma_peer_delete(&peer));

	/* the context of the address: the same object, libibverbs' own */
	struct ibv_context *ctx = NULL;
	CHECK(rpma_utils_get_ibv_context(test_addr(), RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	EXPECT(ctx == listed);
	EXPECT(strcmp(ibv_get_device_name(ctx->device), dev) == 0);
	struct ibv_device_attr attr;
	EXPECT(ibv_query_device(ctx, &attr) == 0);
	EXPECT(attr.max_qp > 0 && attr.max_cqe > 0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	EXPECT(pd != NULL);
	EXPECT(ibv_dealloc_pd(pd) == 0);
	int odp = -1;
	CHECK(rpma_utils_ibv_context_is_odp_capable(ctx, &odp));
	EXPECT(odp == 0 || odp == 1);

	/* a peer on it registers memory: the rkey is the device's */
	CHECK(rpma_peer_new(ctx, &peer));
	static char buf[4096];
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_READ_SRC, &mr));
	CHECK(rpma_mr_dereg(&mr));

	/* a context of the program's own is not librdmacm's: refused */
	struct ibv_device **devs = ibv_get_device_list(&n);
	EXPECT(devs && n > 0);
	struct ibv_context *own = NULL;
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(devs[i]), dev) == 0)
			own = ibv_open_device(devs[i]);
	EXPECT(own != NULL && own != ctx);
	struct rpma_peer *refused = (struct rpma_peer *)0x1;
	EXPECT(rpma_peer_new(own, &refused) == RPMA_E_INVAL);
	EXPECT(refused == (struct rpma_peer *)0x1);
	EXPECT(rpma_utils_ibv_context_is_odp_capable(own, &odp) == RPMA_E_INVAL);
	EXPECT(ibv_close_device(own) == 0);
	ibv_free_device_list(devs);

	CHECK(rpma_peer_delete(&peer));
	rdma_free_devices(list);
	printf("verbs_ctx: OK\n");
	return 0;
}
