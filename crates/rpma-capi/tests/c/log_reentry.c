/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A log function that calls back into the connection whose call is logging:
 * rpma_conn_disconnect and rpma_conn_next_event log at NOTICE level; the log function then
 * calls rpma_conn_get_qp_num, rpma_conn_get_private_data and rpma_conn_get_event_fd on the same
 * connection. Each call returns (no deadlock on the connection's lock: the library calls the
 * log function after releasing it); an alarm ends a hung program.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7323")

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening;

/* the connection the log function calls into, and how often it did */
static struct rpma_conn *_Atomic watched;
static atomic_int reentered, reentry_failed;

static void log_fn(enum rpma_log_level level, const char *file_name, const int line_no,
		   const char *function_name, const char *message_format, ...)
{
	(void)level;
	(void)file_name;
	(void)line_no;
	(void)function_name;
	char msg[512];
	va_list ap;
	va_start(ap, message_format);
	vsnprintf(msg, sizeof(msg), message_format, ap);
	va_end(ap);
	struct rpma_conn *conn = atomic_load(&watched);
	if (!conn)
		return;
	uint32_t qp = 0;
	struct rpma_conn_private_data pdata;
	int fd = -1;
	if (rpma_conn_get_qp_num(conn, &qp) || rpma_conn_get_private_data(conn, &pdata) ||
	    rpma_conn_get_event_fd(conn, &fd)) {
		atomic_fetch_add(&reentry_failed, 1);
		return;
	}
	printf("log_reentry: called back into the connection (qp %u) from \"%s\"\n", qp, msg);
	atomic_fetch_add(&reentered, 1);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "log_reentry: HANG: a call did not return within 30 s\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	_exit(2);
}

static void *client(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	struct rpma_peer *peer = peer_at(ADDR);
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_peer_delete(&peer));
	return NULL;
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(30);
	CHECK(rpma_log_set_function(log_fn));
	CHECK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_NOTICE));

	pthread_t c;
	struct rpma_peer *peer = peer_at(ADDR);
	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	EXPECT(pthread_create(&c, NULL, client, NULL) == 0);
	pthread_mutex_lock(&lock);
	listening = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);

	struct rpma_conn_req *req = NULL;
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	atomic_store(&watched, conn);
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	/* logs the event ("Connection established") */
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	int before = atomic_load(&reentered);
	EXPECT(before >= 1);
	/* logs "Requesting for disconnection" */
	CHECK(rpma_conn_disconnect(conn));
	EXPECT(atomic_load(&reentered) > before);
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	atomic_store(&watched, NULL);
	CHECK(rpma_conn_delete(&conn));
	EXPECT(pthread_join(c, NULL) == 0);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&peer));
	EXPECT(atomic_load(&reentry_failed) == 0);
	printf("log_reentry: %d calls back: OK\n", atomic_load(&reentered));
	return 0;
}
