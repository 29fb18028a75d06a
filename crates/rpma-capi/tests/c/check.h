/* SPDX-License-Identifier: BSD-3-Clause */
/* The assertions of the C tests: a librpma call that must return 0, a condition that must hold. */
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

#endif
