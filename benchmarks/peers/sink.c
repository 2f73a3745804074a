/*
 * sink: an AMQP 1.0 peer that takes messages as fast as the Qpid Proton C engine can, and keeps none of them.
 *
 * Usage: sink HOST PORT   (PORT 0: a free port; the first line printed is "listening on PORT")
 *
 * It accepts every connection, session and link; on each link where the client sends, it keeps CREDIT credits
 * topped up, reads each message's bytes into one reused buffer as they arrive (so nothing piles up), and
 * accepts and settles each message once it is complete. It runs until killed.
 *
 * Why: the benchmarks' other native peers do more than take messages in (the C broker example stores them, the
 * direct example prints them), and for 1 MiB messages that work, not the client, sets the pace. Against this
 * peer the client is what is measured, and every client meets the same peer.
 *
 * Built by benchmarks/_peers.py with: gcc -O2 sink.c -o sink -lqpid-proton
 */

#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/terminus.h>

#include <stdio.h>
#include <stdlib.h>

#define CREDIT 64

static char discard[1 << 16];

static void on_link_opening(pn_link_t *link) {
  /* Echo the client's terminus, as a node that exists for whatever address it names. */
  pn_terminus_copy(pn_link_source(link), pn_link_remote_source(link));
  pn_terminus_copy(pn_link_target(link), pn_link_remote_target(link));
  pn_link_open(link);
  if (pn_link_is_receiver(link)) {
    pn_link_flow(link, CREDIT);
  }
}

static void on_delivery(pn_delivery_t *delivery) {
  pn_link_t *link = pn_delivery_link(delivery);
  if (!pn_link_is_receiver(link)) {
    return;
  }
  while (pn_link_recv(link, discard, sizeof discard) > 0) {
    /* read and dropped */
  }
  if (pn_delivery_partial(delivery)) {
    return; /* more frames of it to come */
  }
  pn_link_advance(link);
  pn_delivery_update(delivery, PN_ACCEPTED);
  pn_delivery_settle(delivery);
  int credit = pn_link_credit(link);
  if (credit < CREDIT / 2) {
    pn_link_flow(link, CREDIT - credit);
  }
}

int main(int argc, char **argv) {
  const char *host = argc > 1 ? argv[1] : "127.0.0.1";
  const char *port = argc > 2 ? argv[2] : "0";
  char address[PN_MAX_ADDR];
  pn_proactor_t *proactor = pn_proactor();
  pn_proactor_addr(address, sizeof address, host, port);
  pn_proactor_listen(proactor, pn_listener(), address, 16);
  for (;;) {
    pn_event_batch_t *batch = pn_proactor_wait(proactor);
    pn_event_t *event;
    while ((event = pn_event_batch_next(batch)) != NULL) {
      switch (pn_event_type(event)) {
        case PN_LISTENER_OPEN: {
          char listening[PN_MAX_ADDR];
          pn_netaddr_host_port(pn_listener_addr(pn_event_listener(event)), NULL, 0, listening, sizeof listening);
          printf("listening on %s\n", listening);
          fflush(stdout);
          break;
        }
        case PN_LISTENER_CLOSE:
          fprintf(stderr, "sink: the listener closed\n");
          return 1;
        case PN_LISTENER_ACCEPT:
          pn_listener_accept2(pn_event_listener(event), NULL, NULL);
          break;
        case PN_CONNECTION_REMOTE_OPEN:
          pn_connection_open(pn_event_connection(event));
          break;
        case PN_SESSION_REMOTE_OPEN:
          pn_session_open(pn_event_session(event));
          break;
        case PN_LINK_REMOTE_OPEN:
          on_link_opening(pn_event_link(event));
          break;
        case PN_DELIVERY:
          on_delivery(pn_event_delivery(event));
          break;
        case PN_LINK_REMOTE_CLOSE:
          pn_link_close(pn_event_link(event));
          break;
        case PN_SESSION_REMOTE_CLOSE:
          pn_session_close(pn_event_session(event));
          break;
        case PN_CONNECTION_REMOTE_CLOSE:
          pn_connection_close(pn_event_connection(event));
          break;
        default:
          break;
      }
    }
    pn_proactor_done(proactor, batch);
  }
}
