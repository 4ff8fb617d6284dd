/* common/host.c — the address this host's links listen on, for peers to dial: the collective's
 * TCP ring and the pipeline's stage links. $CT_COMM_HOST when set, else the first non-loopback
 * IPv4 address that is up, else 127.0.0.1. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>

#include "common/common.h"
#include "common/env.h"

void ct__listen_host(char *out, size_t cap)
{
    const char *env = ct__env(CT__ENV_COMM_HOST);
    snprintf(out, cap, "127.0.0.1");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)cap);
            break;
        }
    freeifaddrs(ifs);
}
