/* fuzz/fuzz_zmtp.c — libFuzzer target: the actor call port's ZMTP 3.0 reader (actor/zmtp.c,
 * ct__zconn_parse: greeting, handshake, commands, frames) on arbitrary bytes as a peer would
 * send them, and each complete message through the envelope decoder as the actor's server
 * does. The connection has no socket (fd -1): a PONG it writes is lost. Not the accept loop
 * (ct__zmtp_next), which needs a listening socket. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "actor/zmtp.h"
#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ct__zconn c;
    memset(&c, 0, sizeof c);
    c.fd = -1;
    c.buf = malloc(size ? size : 1);
    if (!c.buf)
        return 0;
    memcpy(c.buf, data, size);
    c.len = c.cap = size;
    for (;;) {
        const uint8_t *msg = NULL;
        size_t len = 0;
        int r = ct__zconn_parse(&c, &msg, &len);
        if (r <= 0)
            break;
        if (r == 1) {
            Ct__Envelope *e = NULL;
            ct__msg_decode(msg, len, &e, "fuzz");
            ct__msg_free(e);
        }
    }
    free(c.buf);
    return 0;
}
