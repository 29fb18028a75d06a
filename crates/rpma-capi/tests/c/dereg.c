/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rpma_mr_dereg of a region an operation in flight still holds (a posted receive) is
 * RPMA_E_PROVIDER and leaves the handle valid and non-NULL (the caller must not free the
 * memory yet); once the receive completed (the peer sent), it is 0 and NULLs the handle.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7319")

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening, posted;

static struct ibv_wc next_wc(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	for (;;) {
		int n = 0;
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == 0)
			return wc;
		EXPECT(ret == RPMA_E_NO_COMPLETION);
		CHECK(rpma_cq_wait(cq));
	}
}

static void *client(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	struct rpma_peer *peer = peer_at(ADDR);
	char *msg = aligned_alloc(4096, 4096);
	EXPECT(msg);
	strcpy(msg, "hi");
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(peer, msg, 4096, RPMA_MR_USAGE_SEND, &mr));
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	/* send once the server's receive is posted and its dereg was refused */
	pthread_mutex_lock(&lock);
	while (!posted)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));
	CHECK(rpma_send(conn, mr, 0, 3, RPMA_F_COMPLETION_ALWAYS, (void *)1));
	struct ibv_wc wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1);
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_dereg(&mr));
	EXPECT(mr == NULL);
	CHECK(rpma_peer_delete(&peer));
	free(msg);
	return NULL;
}

int main(void)
{
	pthread_t c;
	struct rpma_peer *peer = peer_at(ADDR);
	char *inbox = aligned_alloc(4096, 4096);
	EXPECT(inbox);
	memset(inbox, 0, 4096);
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(peer, inbox, 4096, RPMA_MR_USAGE_RECV, &mr));
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
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	CHECK(rpma_recv(conn, mr, 0, 64, (void *)0x55));
	/* the receive is in flight: the region may not go, and the handle stays */
	struct rpma_mr_local *held = mr;
	int r = rpma_mr_dereg(&mr);
	if (r != RPMA_E_PROVIDER)
		fprintf(stderr, "dereg in use: %d\n", r);
	EXPECT(r == RPMA_E_PROVIDER);
	EXPECT(mr == held);
	void *p = NULL;
	CHECK(rpma_mr_get_ptr(mr, &p));
	EXPECT(p == inbox);
	pthread_mutex_lock(&lock);
	posted = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);

	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));
	struct ibv_wc wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x55 && wc.opcode == IBV_WC_RECV);
	EXPECT(memcmp(inbox, "hi", 3) == 0);

	CHECK(rpma_mr_dereg(&mr));
	EXPECT(mr == NULL);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	EXPECT(pthread_join(c, NULL) == 0);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&peer));
	free(inbox);
	printf("dereg: OK\n");
	return 0;
}
