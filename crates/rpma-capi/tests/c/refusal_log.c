/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The arguments librpma refuses with a log line, and its INFO lines, are logged as librpma
 * logs them: the same level, message and function, through the log function, once per call.
 * RPMA_BACKEND=mock or verbs, one thread; the same program runs on Debian's librpma.
 * - rpma_peer_cfg_from_descriptor: a descriptor too short (ERROR); the peer's direct write to
 *   PMem, supported or not (INFO);
 * - rpma_mr_remote_from_descriptor: a descriptor too short, a usage of 0 (ERROR);
 * - rpma_conn_req_new: a shared completion channel with a shared RQ that has its own receive
 *   CQ (ERROR);
 * - rpma_flush: persistent without the peer's direct write to PMem, persistent or visibility
 *   to a region registered without that flush (ERROR, RPMA_E_NOSUPP).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

#define RET(expr, code)                                                                  \
	do {                                                                             \
		int ret_ = (expr);                                                       \
		if (ret_ != (code)) {                                                    \
			fprintf(stderr, "%s:%d: %s = %d (%s), expected %s\n", __FILE__,  \
				__LINE__, #expr, ret_, rpma_err_2str(ret_), #code);      \
			exit(1);                                                         \
		}                                                                        \
	} while (0)
#define OK(expr) RET(expr, 0)

#define ADDR test_addr()
#define PORT test_port("7316")

#define MAX_LINES 32
static struct line {
	enum rpma_log_level level;
	char fn[96];
	char msg[256];
} lines[MAX_LINES];
static int n_lines;

static void log_fn(enum rpma_log_level level, const char *file_name, const int line_no,
		   const char *function_name, const char *message_format, ...)
{
	(void)file_name;
	(void)line_no;
	if (n_lines == MAX_LINES)
		return;
	struct line *l = &lines[n_lines++];
	l->level = level;
	snprintf(l->fn, sizeof(l->fn), "%s", function_name ? function_name : "");
	va_list ap;
	va_start(ap, message_format);
	vsnprintf(l->msg, sizeof(l->msg), message_format, ap);
	va_end(ap);
}

/* forgets the lines logged so far */
static void forget(void)
{
	n_lines = 0;
}

/*
 * exactly one line at ERROR or INFO level was logged since forget(), and it is `msg` and a
 * newline (librpma's macros end every message with one) at `level` from `fn` (librpma logs from
 * its function or one it calls: the name must start with `fn`)
 */
static void expect_one(int src_line, enum rpma_log_level level, const char *fn, const char *msg)
{
	int found = 0, loud = 0;
	for (int i = 0; i < n_lines; i++) {
		struct line *l = &lines[i];
		if (l->level != RPMA_LOG_LEVEL_ERROR && l->level != RPMA_LOG_LEVEL_INFO)
			continue;
		loud++;
		size_t n = strlen(msg);
		if (l->level == level && strncmp(l->fn, fn, strlen(fn)) == 0 &&
		    strncmp(l->msg, msg, n) == 0 && strcmp(l->msg + n, "\n") == 0)
			found++;
	}
	if (found != 1 || loud != 1) {
		fprintf(stderr, "refusal_log.c:%d: expected one line (level %d, %s): %s\n", src_line,
			level, fn, msg);
		for (int i = 0; i < n_lines; i++)
			fprintf(stderr, "  logged: level %d, %s: %s", lines[i].level, lines[i].fn,
				lines[i].msg);
		exit(1);
	}
	printf("refusal_log: %s: %s\n", fn, msg);
}
#define EXPECT_ONE(level, fn, msg) expect_one(__LINE__, RPMA_LOG_LEVEL_##level, fn, msg)

static struct rpma_conn *established(struct rpma_conn *conn)
{
	enum rpma_conn_event ev;
	OK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	return conn;
}

int main(void)
{
	OK(rpma_log_set_function(log_fn));
	OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO));

	/* the peer's configuration from its descriptor */
	struct rpma_peer_cfg *pcfg = NULL;
	uint8_t pdesc = 1;
	forget();
	RET(rpma_peer_cfg_from_descriptor(&pdesc, 0, &pcfg), RPMA_E_INVAL);
	EXPECT_ONE(ERROR, "rpma_peer_cfg_from_descriptor",
		   "incorrect size of the descriptor: 0 bytes (should be at least 1 bytes)");
	forget();
	OK(rpma_peer_cfg_from_descriptor(&pdesc, sizeof(pdesc), &pcfg));
	EXPECT_ONE(INFO, "rpma_peer_cfg_from_descriptor", "INFO: Direct Write To PMem is supported");
	OK(rpma_peer_cfg_delete(&pcfg));
	pdesc = 0;
	forget();
	OK(rpma_peer_cfg_from_descriptor(&pdesc, sizeof(pdesc), &pcfg));
	EXPECT_ONE(INFO, "rpma_peer_cfg_from_descriptor",
		   "INFO: Direct Write To PMem is unsupported");
	OK(rpma_peer_cfg_delete(&pcfg));

	/* a region without flush usages, and its descriptor */
	struct rpma_peer *peer = peer_at(ADDR);
	static char buf[4096];
	struct rpma_mr_local *mr = NULL;
	OK(rpma_mr_reg(peer, buf, sizeof(buf),
		       RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC |
			       RPMA_MR_USAGE_WRITE_DST,
		       &mr));
	size_t size = 0;
	OK(rpma_mr_get_descriptor_size(mr, &size));
	EXPECT(size == 21);
	char desc[21];
	OK(rpma_mr_get_descriptor(mr, desc));
	struct rpma_mr_remote *rmr = NULL;
	forget();
	RET(rpma_mr_remote_from_descriptor(desc, 20, &rmr), RPMA_E_INVAL);
	EXPECT_ONE(ERROR, "rpma_mr_remote_from_descriptor",
		   "incorrect size of the descriptor: 20 bytes (should be at least: 21 bytes)");
	char no_usage[21];
	memcpy(no_usage, desc, sizeof(no_usage));
	no_usage[20] = 0;
	forget();
	RET(rpma_mr_remote_from_descriptor(no_usage, sizeof(no_usage), &rmr), RPMA_E_INVAL);
	EXPECT_ONE(ERROR, "rpma_mr_remote_from_descriptor", "usage type of memory is not set");
	OK(rpma_mr_remote_from_descriptor(desc, sizeof(desc), &rmr));

	/* a shared completion channel with a shared RQ that has its own receive CQ */
	struct rpma_srq *srq = NULL;
	OK(rpma_srq_new(peer, NULL, &srq)); /* the defaults: a receive CQ of 20 */
	struct rpma_conn_cfg *cfg = NULL;
	OK(rpma_conn_cfg_new(&cfg));
	OK(rpma_conn_cfg_set_srq(cfg, srq));
	OK(rpma_conn_cfg_set_compl_channel(cfg, true));
	struct rpma_conn_req *req = NULL;
	forget();
	RET(rpma_conn_req_new(peer, ADDR, PORT, cfg, &req), RPMA_E_INVAL);
	EXPECT_ONE(ERROR, "rpma_conn_req",
		   "connection shared completion channel cannot be used when the shared RQ has its own RCQ");
	EXPECT(req == NULL);
	OK(rpma_conn_cfg_delete(&cfg));
	OK(rpma_srq_delete(&srq));

	/* a connection to this process */
	struct rpma_ep *ep = NULL;
	struct rpma_conn_req *sreq = NULL;
	struct rpma_conn *conn = NULL, *sconn = NULL;
	OK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	OK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	OK(rpma_conn_req_connect(&req, NULL, &conn));
	OK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	OK(rpma_conn_req_connect(&sreq, NULL, &sconn));
	established(conn);
	established(sconn);

	/* flushes refused before anything is posted */
	forget();
	RET(rpma_flush(conn, rmr, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL),
	    RPMA_E_NOSUPP);
	EXPECT_ONE(ERROR, "rpma_flush",
		   "Connection does not support flush to persistency. Check if the remote node supports direct write to persistent memory.");
	pdesc = 1;
	OK(rpma_peer_cfg_from_descriptor(&pdesc, sizeof(pdesc), &pcfg));
	OK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	OK(rpma_peer_cfg_delete(&pcfg));
	forget();
	RET(rpma_flush(conn, rmr, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL),
	    RPMA_E_NOSUPP);
	EXPECT_ONE(ERROR, "rpma_flush",
		   "The remote memory region does not support flushing to persistency");
	forget();
	RET(rpma_flush(conn, rmr, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL),
	    RPMA_E_NOSUPP);
	EXPECT_ONE(ERROR, "rpma_flush",
		   "The remote memory region does not support flushing to global visibility");

	enum rpma_conn_event ev;
	OK(rpma_conn_disconnect(conn));
	OK(rpma_conn_next_event(sconn, &ev));
	OK(rpma_conn_disconnect(sconn));
	OK(rpma_conn_next_event(conn, &ev));
	OK(rpma_conn_delete(&conn));
	OK(rpma_conn_delete(&sconn));
	OK(rpma_ep_shutdown(&ep));
	OK(rpma_mr_remote_delete(&rmr));
	OK(rpma_mr_dereg(&mr));
	OK(rpma_peer_delete(&peer));
	printf("refusal_log: OK\n");
	return 0;
}
