/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The assertions of the C tests: a librpma call that must return 0, a condition that must hold;
 * and a peer on the device of an address.
 */
#ifndef RPMA_CAPI_TEST_CHECK_H
#define RPMA_CAPI_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <librpma.h>

#define CHECK(expr)                                                                      \
	do {                                                                             \
		int ret_ = (expr);                                                       \
		if (ret_ != 0) {                                                         \
			fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #expr, ret_, \
				rpma_err_2str(ret_));                                    \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

#define EXPECT(cond)                                                                     \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

/* a peer on the device that owns `addr` */
static inline struct rpma_peer *peer_at(const char *addr)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	CHECK(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));
	return peer;
}

#endif
