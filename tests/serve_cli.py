"""Helpers of tests/serve_cli.sh (each is one python start: they do a lot per call).

  serve_cli.py snap LOG FORMAT OUT   checks every line of capstore serve's log (logfmt or json); OUT gets
                                     shell assignments E_<event>_<key>=VALUE (the last such event) and
                                     N_<event>=COUNT; exit 2 naming the first line that does not parse
  serve_cli.py json FILE OUT         OUT gets J_<key>[_<key>...]=VALUE for FILE's JSON object (bools as
                                     true/false); exit 2 when FILE is not a JSON object
  serve_cli.py http PORT DIR         the endpoint's requests (below): DIR/<name>.status, .headers, .body;
                                     DIR/status.sh flattens /status as `json` does; then /metrics latency
"""
import http.client
import json
import re
import shlex
import statistics
import sys
import time

# key=value, the value bare (no space, quote, '=' or backslash) or quoted with JSON's escapes.
TOKEN = re.compile(r'([a-z0-9_]+)=("(?:[^"\\]|\\.)*"|[^\s"=\\]+)(?: |$)')
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def parse_logfmt(line):
    fields, pos = {}, 0
    while pos < len(line):
        m = TOKEN.match(line, pos)
        if m is None:
            raise ValueError("logfmt: cannot parse at column %d" % pos)
        value = m.group(2)
        fields[m.group(1)] = json.loads(value) if value.startswith('"') else value
        pos = m.end()
    return fields


def text(v):
    return json.dumps(v) if isinstance(v, bool) else str(v)


def parse_line(line, fmt):
    if fmt == "json":
        d = json.loads(line)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        return {k: text(v) for k, v in d.items()}
    return parse_logfmt(line)


def log_events(path, fmt):
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        raise ValueError("the last line has no newline")
    out = []
    for n, raw in enumerate(data.split(b"\n")[:-1], 1):
        try:
            d = parse_line(raw.decode("utf-8"), fmt)  # a line that is not UTF-8 fails here too
            missing = [k for k in ("ts", "level", "event") if k not in d]
            if missing or list(d)[:3] != ["ts", "level", "event"]:
                raise ValueError("ts, level and event are not the first fields")
            if not TS.fullmatch(d["ts"]):
                raise ValueError("ts %r" % d["ts"])
        except ValueError as e:
            raise ValueError("line %d: %s: %r" % (n, e, raw)) from None
        out.append(d)
    return out


def assignments(prefix, flat):
    return "".join("%s_%s=%s\n" % (prefix, k, shlex.quote(v)) for k, v in flat.items())


def cmd_snap(path, fmt, out):
    try:
        events = log_events(path, fmt)
    except (OSError, ValueError) as e:
        print("%s: %s" % (path, e), file=sys.stderr)
        sys.exit(2)
    last, counts = {}, {}
    for d in events:
        counts[d["event"]] = counts.get(d["event"], 0) + 1
        for k, v in d.items():
            last["%s_%s" % (d["event"], k)] = v
    with open(out, "w") as f:
        f.write(assignments("E", last) + assignments("N", {k: str(v) for k, v in counts.items()}))


def flatten(doc, prefix=""):
    flat = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            flat.update(flatten(v, prefix + k + "_"))
        else:
            flat[prefix + k] = text(v).lower() if isinstance(v, bool) else text(v)
    return flat


def write_json_flat(text_bytes, out, prefix):
    doc = json.loads(text_bytes)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    with open(out, "w") as f:
        f.write(assignments(prefix, flatten(doc)))


def cmd_json(path, out):
    try:
        with open(path, "rb") as f:
            write_json_flat(f.read(), out, "J")
    except ValueError as e:
        print("%s: %s" % (path, e), file=sys.stderr)
        sys.exit(2)


REQUESTS = [("metrics", "GET", "/metrics"), ("status", "GET", "/status"), ("healthz", "GET", "/healthz"),
            ("healthz_head", "HEAD", "/healthz"), ("nope", "GET", "/nope"), ("post", "POST", "/metrics"),
            ("delete", "DELETE", "/status")]


def request(port, method, path):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    c.request(method, path, body=b"x" if method == "POST" else None)
    r = c.getresponse()
    return r.status, r.getheaders(), r.read()


def latency(port, path, n):
    kept, fresh = [], []
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", path)
        c.getresponse().read()
        kept.append(time.perf_counter() - t)
    for _ in range(n):
        t = time.perf_counter()
        request(port, "GET", path)
        fresh.append(time.perf_counter() - t)

    def ms(xs):
        xs = sorted(xs)
        return "median %.2f ms, p99 %.2f ms" % (statistics.median(xs) * 1e3, xs[int(len(xs) * 0.99) - 1] * 1e3)

    return "GET %s x%d: kept-alive %s; a new connection each %s" % (path, n, ms(kept), ms(fresh))


def cmd_http(port, out):
    for name, method, path in REQUESTS:
        status, headers, body = request(port, method, path)
        with open("%s/%s.status" % (out, name), "w") as f:
            f.write("%d\n" % status)
        with open("%s/%s.headers" % (out, name), "w") as f:
            f.write("".join("%s: %s\n" % (k.lower(), v) for k, v in headers))
        with open("%s/%s.body" % (out, name), "wb") as f:
            f.write(body)
        if name == "status":
            try:
                write_json_flat(body, out + "/status.sh", "S")
            except ValueError as e:
                print("/status: %s" % e, file=sys.stderr)
    print(latency(port, "/metrics", 200))


if __name__ == "__main__":
    {"snap": cmd_snap, "json": cmd_json, "http": cmd_http}[sys.argv[1]](*sys.argv[2:])
