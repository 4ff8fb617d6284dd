"""bench/dashboard_overhead/scrape.py PORT — fetches /metrics and /api/jobs of the head's HTTP
endpoint on 127.0.0.1:PORT once a second, on a fixed schedule (a slow fetch does not push the
next one later; a round missed is skipped), until killed; prints a line per round whose fetches both answered 200."""
import sys
import time
import urllib.request

port = int(sys.argv[1])
t = time.monotonic()
while True:
    ok = True
    for path in ("/metrics", "/api/jobs"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                r.read()
                ok = ok and r.status == 200
        except OSError:
            ok = False
    if ok:
        print("ok", flush=True)
    # the next whole second of the schedule; rounds missed while the machine was busy are
    # skipped, not caught up in a burst
    t += 1.0
    now = time.monotonic()
    if t < now:
        t += float(int(now - t) + 1)
    time.sleep(t - now)
