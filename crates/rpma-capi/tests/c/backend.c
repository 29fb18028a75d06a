/* SPDX-License-Identifier: BSD-3-Clause */
/* Prints the result of the first call that needs a backend (RPMA_BACKEND decides). */
#include <stdio.h>
#include <stdlib.h>

#include <librpma.h>

int main(void)
{
	const char *addr = getenv("RPMA_TEST_ADDR");
	if (!addr || !*addr)
		addr = "127.0.0.1";
	struct ibv_context *ctx = (struct ibv_context *)0x1;
	int ret = rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx);
	/* twice: the choice is made once, and fails the same way every time */
	int ret2 = rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx);
	printf("%d %d %s\n", ret, ret2, ctx == (struct ibv_context *)0x1 ? "untouched" : "set");
	return 0;
}
