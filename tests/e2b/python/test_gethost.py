"""get_host(port) with E2B's own Python SDK (PyPI `e2b`, pinned in
tests/e2b/requirements.txt): the host the SDK builds from create's `domain`
(PORT-SANDBOXID.localhost:PORT of sandlotd's TCP listener) reaches that port
of the sandbox through sandlotd.  Requests go to sandlotd's address with the
Host header the SDK built, as `curl --resolve` or a wildcard DNS name
would send them."""
import http.client
import json

from e2b import Sandbox


def get(e2bd, host, path="/", headers=None):
    """GET http://HOST/path sent to sandlotd's listener: (status, body, json or None)."""
    c = http.client.HTTPConnection("127.0.0.1", e2bd.port, timeout=30)
    try:
        c.request("GET", path, headers={"Host": host, **(headers or {})})
        r = c.getresponse()
        body = r.read().decode()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        return r.status, body, parsed
    finally:
        c.close()


def serve(sbx, port, text):
    """python3 -m http.server PORT in the background through the SDK,
    serving text as /; returns once it says it serves."""
    sbx.files.write(f"/home/user/site{port}/index.html", text)
    handle = sbx.commands.run(f"python3 -u -m http.server {port} -d /home/user/site{port}",
                              background=True)
    seen = ""
    for out, err, _ in handle:
        seen += (out or "") + (err or "")
        if "Serving HTTP" in seen:
            break
    assert "Serving HTTP" in seen, seen
    return handle


def test_get_host_reaches_a_server_in_the_sandbox(e2bd):
    sbx = Sandbox.create("base", **e2bd.opts())
    try:
        serve(sbx, 8000, "hello from python")
        host = sbx.get_host(8000)
        assert host == f"8000-{sbx.sandbox_id}.localhost:{e2bd.port}"
        token = sbx.traffic_access_token
        assert token
        assert get(e2bd, host, headers={"e2b-traffic-access-token": token})[:2] == \
            (200, "hello from python")
        st, _, o = get(e2bd, host)
        assert st == 401 and o["code"] == 401 and "token" in o["message"], o
        st, _, o = get(e2bd, sbx.get_host(8001), headers={"e2b-traffic-access-token": token})
        assert st == 502 and "nothing is listening on port 8001" in o["message"], o
        for port in (0, 65536):
            st, _, o = get(e2bd, sbx.get_host(port), headers={"X-API-KEY": e2bd.token})
            assert st == 400 and "from 1 to 65535" in o["message"], (port, o)
        st, _, o = get(e2bd, f"8000-sb-nosuchsandboxnosuchsandboxx.localhost:{e2bd.port}",
                       headers={"X-API-KEY": e2bd.token})
        assert st == 404 and "not found" in o["message"], o
        again = Sandbox.connect(sbx.sandbox_id, **e2bd.opts())
        assert again.get_host(8000) == host
    finally:
        sbx.kill()


def test_public_traffic(e2bd):
    pub = Sandbox.create("base", network={"allow_public_traffic": True}, **e2bd.opts())
    closed = Sandbox.create("base", network={"allow_public_traffic": False}, **e2bd.opts())
    try:
        serve(pub, 3000, "public")
        serve(closed, 3000, "private")
        assert get(e2bd, pub.get_host(3000))[:2] == (200, "public")
        assert get(e2bd, closed.get_host(3000))[0] == 401
        assert get(e2bd, closed.get_host(3000),
                   headers={"e2b-traffic-access-token": closed.traffic_access_token})[:2] == \
            (200, "private")
        assert get(e2bd, closed.get_host(3000),
                   headers={"e2b-traffic-access-token": pub.traffic_access_token})[0] == 401
        assert pub.get_info().network["allow_public_traffic"] is True
    finally:
        pub.kill()
        closed.kill()
