/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The assertions of the C tests: a librpma call that must return 0, a condition that must hold;
 * the address and port to use; and a peer on the device of an address.
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

/* the address of the test: RPMA_TEST_ADDR (a device's, on verbs), else 127.0.0.1 (the mock) */
static inline const char *test_addr(void)
{
	const char *a = getenv("RPMA_TEST_ADDR");
	return a && *a ? a : "127.0.0.1";
}

/* the port of the test: RPMA_TEST_PORT (distinct per run on a device), else `dflt` */
static inline const char *test_port(const char *dflt)
{
	const char *p = getenv("RPMA_TEST_PORT");
	return p && *p ? p : dflt;
}

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
