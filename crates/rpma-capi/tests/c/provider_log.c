/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A failed provider call is logged as librpma logs it: at ERROR level, through the
 * log function, "<call>() failed: <strerror(errno)>", from the librpma function that made it.
 * - an address no device owns: rpma_utils_get_ibv_context fails (RPMA_E_PROVIDER) and says why;
 * - with PROVIDER_LOG_ADVISE=fails (a device without ibv_advise_mr, e.g. rxe): rpma_mr_advise
 *   fails (RPMA_E_NOSUPP) and logs "ibv_advise_mr() failed: Operation not supported\n" (the
 *   message ends with a newline, as every message of librpma).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

static char last_msg[512], last_fn[128];
static int errors;

static void log_fn(enum rpma_log_level level, const char *file_name, const int line_no,
		   const char *function_name, const char *message_format, ...)
{
	(void)file_name;
	(void)line_no;
	if (level != RPMA_LOG_LEVEL_ERROR)
		return;
	va_list ap;
	va_start(ap, message_format);
	vsnprintf(last_msg, sizeof(last_msg), message_format, ap);
	va_end(ap);
	snprintf(last_fn, sizeof(last_fn), "%s", function_name ? function_name : "");
	errors++;
	printf("provider_log: *ERROR* %s: %s", last_fn, last_msg);
}

int main(void)
{
	CHECK(rpma_log_set_function(log_fn));

	/* an address no device owns (TEST-NET-3, never a test device's) */
	struct ibv_context *ctx = NULL;
	int ret = rpma_utils_get_ibv_context("203.0.113.77", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx);
	EXPECT(ret == RPMA_E_PROVIDER);
	EXPECT(errors == 1);
	/* the mock: "rdma_bind_addr() failed: No such device"; rxe (6.1): "... Cannot assign
	 * requested address" */
	EXPECT(strstr(last_msg, "() failed: ") != NULL);
	EXPECT(strcmp(last_fn, "rpma_utils_get_ibv_context") == 0);

	const char *advise = getenv("PROVIDER_LOG_ADVISE");
	if (advise && strcmp(advise, "fails") == 0) {
		struct rpma_peer *peer = peer_at(test_addr());
		static char buf[4096];
		struct rpma_mr_local *mr = NULL;
		CHECK(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_READ_DST, &mr));
		ret = rpma_mr_advise(mr, 0, sizeof(buf), IBV_ADVISE_MR_ADVICE_PREFETCH, 0);
		EXPECT(ret == RPMA_E_NOSUPP);
		EXPECT(errors == 2);
		/* the message ends with a newline, as librpma's */
		EXPECT(strcmp(last_msg, "ibv_advise_mr() failed: Operation not supported\n") == 0);
		EXPECT(strcmp(last_fn, "rpma_mr_advise") == 0);
		CHECK(rpma_mr_dereg(&mr));
		CHECK(rpma_peer_delete(&peer));
	}
	printf("provider_log: OK\n");
	return 0;
}
