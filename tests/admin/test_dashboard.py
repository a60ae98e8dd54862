"""The web dashboard in a real headless Chromium against a real broker process.

Skipped when selenium, chromium or chromedriver is missing; scripts/test.sh
installs them, so CI runs these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.admin import browser
from tests.admin.conftest import AdminBroker, publish, qname

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    why = browser.missing()
    if why is not None:
        pytest.skip(why)
    d = browser.make_driver()
    yield d
    d.quit()


@pytest.fixture
def dash(driver: Any, admin_broker: AdminBroker) -> Iterator[Any]:
    """A logged-in dashboard; the test fails if the page logged an error."""
    browser.log_in(driver, admin_broker.admin_url)
    yield driver
    assert browser.console_errors(driver) == []


def by_css(css: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def test_static_files_are_public_typed_and_cached(admin_broker: AdminBroker) -> None:
    with httpx.Client(base_url=admin_broker.admin_url, timeout=10) as c:
        index = c.get("/")
        assert index.status_code == 200
        assert index.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in index.headers["content-security-policy"]
        assert index.headers["x-content-type-options"] == "nosniff"
        assert '<script type="module" src="/static/app.js">' in index.text
        js = c.get("/static/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert c.get("/static/app.css").headers["content-type"].startswith("text/css")
        etag = js.headers["etag"]
        again = c.get("/static/app.js", headers={"if-none-match": etag})
        assert again.status_code == 304 and again.content == b""
        assert c.head("/").status_code == 200
        # only files of the static directory exist; the API still needs a login
        for path in ("/static/../static.py", "/static/%2e%2e/static.py", "/static/",
                     "/static/nope.js", "/static/..%2fhttp.py", "/static//etc/passwd"):
            assert c.get(path).status_code == 404, path
        assert c.get("/api/overview").status_code == 401
        assert c.post("/").status_code in (404, 405)


def test_login_failure_is_reported(driver: Any, admin_broker: AdminBroker) -> None:
    browser.submit_login(browser.login_form(driver, admin_broker.admin_url), "guest", "wrong")
    browser.wait(driver, lambda d: "Login failed" in browser.text_of("#login-error")(d),
                 "the login error")
    # the refused API call is the only error the browser logged
    errors = browser.console_errors(driver)
    assert errors and all("401" in e for e in errors), errors


def test_overview_shows_the_version_and_every_page_loads(dash: Any,
                                                          admin_broker: AdminBroker) -> None:
    with admin_broker.api() as api:
        version = api.get("/api/overview").json()["product_version"]
    browser.open_page(dash, "", "overview")
    assert browser.wait(dash, lambda d: browser.text_of("#version")(d),
                        "the version") == f"amqplite {version}"
    assert dash.find_element(*by_css("canvas.chart")).size["height"] > 100
    assert int(dash.find_element(*by_css("figure.chart")).get_attribute("data-points")) >= 1
    for page in ("connections", "channels", "exchanges", "queues", "bindings", "policies"):
        browser.open_page(dash, page, page)
    browser.open_page(dash, "", "overview")


def test_a_missing_queue_says_so(dash: Any) -> None:
    browser.open_page(dash, "queue/%2F/no-such-queue", "not-found")
    assert "no-such-queue" in browser.text_of("#main")(dash)
    # the 404 answer is the only error logged
    errors = browser.console_errors(dash)
    assert errors and all("404" in e for e in errors), errors


def test_publish_from_the_exchange_page_shows_in_queue_depth(dash: Any,
                                                              admin_broker: AdminBroker) -> None:
    q = qname("dash-pub")
    with admin_broker.api() as api:
        assert api.put(f"/api/queues/%2F/{q}", json={"durable": True}).status_code == 201
    browser.open_page(dash, "exchange/%2F/amq.default", "exchange")
    form = dash.find_element(*by_css("#publish-form"))
    form.find_element(*by_css("[name=routing_key]")).send_keys(q)
    form.find_element(*by_css("[name=payload]")).send_keys("hello from the dashboard")
    form.find_element(*by_css("button[type=submit]")).click()
    browser.wait(dash, lambda d: "routed" in browser.text_of("#publish-result")(d),
                 "the publish result")
    browser.open_page(dash, "queues", "queues")
    row = f'tr[data-queue="{q}"]'
    assert browser.wait(dash, lambda d: browser.text_of(f"{row} td.ready")(d) == "1",
                        "the queue depth")
    assert browser.text_of(f"{row} td.paged-out")(dash) == "0"
    # the queue page peeks at it without taking it
    browser.open_page(dash, f"queue/%2F/{quote(q)}", "queue")
    dash.find_element(*by_css("#peek-form button")).click()
    browser.wait(dash, lambda d: "hello from the dashboard" in browser.text_of("#messages")(d),
                 "the peeked message")
    assert browser.text_of("#q-ready")(dash) == "1"


def test_dead_letter_replay_from_the_queue_page(dash: Any, admin_broker: AdminBroker,
                                                 channel: Any) -> None:
    work, dlq = qname("dash-work"), qname("dash-dlq")
    channel.queue_declare(dlq, durable=True)
    channel.queue_declare(work, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    publish(channel, work, b"poison", message_id=f"m-{work}")
    method, _, _ = channel.basic_get(work)
    assert method is not None
    channel.basic_reject(method.delivery_tag, requeue=False)

    browser.open_page(dash, f"queue/%2F/{quote(dlq)}", "queue")
    browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "1", "the dead letter")
    dash.find_element(*by_css("#replay")).click()
    browser.wait(dash, lambda d: "moved 1" in browser.text_of("#op-result")(d),
                 "the replay result")
    browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "0", "the emptied queue")
    browser.open_page(dash, f"queue/%2F/{quote(work)}", "queue")
    assert browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "1",
                        "the message back in its queue")

    # its whole story on the trace page
    browser.open_page(dash, f"trace/{quote('m-' + work)}", "trace")
    events = [e.text for e in dash.find_elements(*by_css("#trace-result td.event"))]
    assert events[0] == "published" and "dead_lettered" in events, events


def test_purge_and_move_from_the_queue_page(dash: Any, admin_broker: AdminBroker,
                                            channel: Any) -> None:
    src, dst = qname("dash-src"), qname("dash-dst")
    for q in (src, dst):
        channel.queue_declare(q, durable=True)
    for i in range(3):
        publish(channel, src, b"m%d" % i)
    browser.open_page(dash, f"queue/%2F/{quote(src)}", "queue")
    form = dash.find_element(*by_css("#move-form"))
    form.find_element(*by_css("[name=limit]")).send_keys("2")
    form.find_element(*by_css("[name=target]")).send_keys(dst)
    form.find_element(*by_css("button[type=submit]")).click()
    browser.wait(dash, lambda d: "moved 2" in browser.text_of("#op-result")(d), "the move")
    purge = dash.find_element(*by_css("#purge"))
    purge.click()  # asks first
    browser.wait(dash, lambda d: "Confirm" in d.find_element(*by_css("#purge")).text,
                 "the purge confirmation")
    dash.find_element(*by_css("#purge")).click()
    browser.wait(dash, lambda d: "purged 1" in browser.text_of("#op-result")(d), "the purge")
    with admin_broker.api() as api:
        assert api.get(f"/api/queues/%2F/{src}").json()["messages_ready"] == 0
        assert api.get(f"/api/queues/%2F/{dst}").json()["messages_ready"] == 2


def test_the_static_files_ship_in_the_wheel() -> None:
    """setup.cfg's package data globs static/* (not recursive): keep the directory flat."""
    from pathlib import Path

    import amqplite.admin.static as static

    root = static.ROOT
    assert (root / "index.html").is_file()
    assert [p.name for p in root.iterdir() if p.is_dir()] == []
    assert {p.suffix for p in root.iterdir()} <= set(static.TYPES)
    cfg = (Path(__file__).resolve().parents[2] / "setup.cfg").read_text()
    assert "amqplite.admin = static/*" in cfg


def test_policy_added_and_deleted_on_the_policies_page(dash: Any,
                                                       admin_broker: AdminBroker) -> None:
    name = qname("dash-pol")
    browser.open_page(dash, "policies", "policies")
    form = dash.find_element(*by_css("#policy-form"))
    form.find_element(*by_css("[name=name]")).send_keys(name)
    form.find_element(*by_css("[name=pattern]")).send_keys(f"^{name}$")
    form.find_element(*by_css("[name=definition]")).send_keys('{"max-length": 7}')
    form.find_element(*by_css("button[type=submit]")).click()
    row = f'tr[data-policy="{name}"]'
    browser.wait(dash, lambda d: "max-length" in browser.text_of(row)(d), "the new policy")
    with admin_broker.api() as api:
        got = api.get(f"/api/policies/%2F/{name}").json()
    assert got["definition"] == {"max-length": 7} and got["apply-to"] == "queues"
    # Edit puts it into the form; submitting replaces it
    dash.find_element(*by_css(f"{row} button.edit")).click()
    assert dash.find_element(*by_css("#policy-form [name=name]")).get_attribute("value") == name
    browser.fill(dash, "#policy-form", {"definition": '{"max-length": 9}', "apply-to": "all"})
    browser.wait(dash, lambda d: '"max-length":9' in browser.text_of(row)(d), "the edited policy")
    with admin_broker.api() as api:
        got = api.get(f"/api/policies/%2F/{name}").json()
    assert got["definition"] == {"max-length": 9} and got["apply-to"] == "all"
    assert got["pattern"] == f"^{name}$"
    browser.click_twice(dash, f"{row} button.delete")
    browser.wait(dash, lambda d: not d.find_elements(*by_css(row)), "the policy to go")
    with admin_broker.api() as api:
        assert api.get(f"/api/policies/%2F/{name}").status_code == 404


def test_exchange_page_shows_and_clears_retained_messages(dash: Any, admin_broker: AdminBroker,
                                                          channel: Any) -> None:
    import pika

    x = qname("dash-lvc")
    channel.exchange_declare(x, "x-lvc", durable=True)
    for key, body in (("eur", b"1.08"), ("usd", b"1.00")):
        channel.basic_publish(x, key, body, pika.BasicProperties(delivery_mode=2))
    browser.open_page(dash, f"exchange/%2F/{quote(x)}", "exchange")
    browser.wait(dash, lambda d: "2 messages" in browser.text_of("#x-retained")(d),
                 "the retained count")
    assert "1.08" in browser.text_of('#retained tr[data-key="eur"]')(dash)
    assert "1.00" in browser.text_of('#retained tr[data-key="usd"]')(dash)
    button = dash.find_element(*by_css("#clear-retained"))
    button.click()  # arms
    dash.find_element(*by_css("#clear-retained")).click()  # confirms
    browser.wait(dash, lambda d: "Nothing retained." in browser.text_of("#retained")(d),
                 "the cleared retained list", timeout=20)
    with admin_broker.api() as api:
        assert api.get(f"/api/exchanges/%2F/{x}").json()["retained"]["messages"] == 0
    channel.exchange_delete(x)


def test_a_refused_permission_keeps_the_login(driver: Any, admin_broker: AdminBroker,
                                              channel: Any) -> None:
    """A 401 that refuses one operation (the user's AMQP permissions, as RabbitMQ
    answers) is shown as an error; only a 401 that refuses the login logs out."""
    q = qname("dash-refused")
    channel.queue_declare(q, durable=True)
    user = qname("dash-noread")
    with admin_broker.api() as api:
        assert api.put(f"/api/users/{user}", json={"password": "pw",
                                                   "tags": "administrator"}).status_code == 201
        assert api.put(f"/api/permissions/%2F/{user}", json={
            "configure": "", "write": "", "read": ""}).status_code == 201
    try:
        browser.log_in(driver, admin_broker.admin_url, user, "pw")
        browser.open_page(driver, f"queue/%2F/{quote(q)}", "queue")
        driver.find_element(*by_css("#peek-form button[type=submit]")).click()
        browser.wait(driver, lambda d: "ACCESS_REFUSED" in browser.text_of("#flash")(d),
                     "the refusal shown")
        assert driver.find_element(*by_css("#nav")).is_displayed()
        assert not driver.find_element(*by_css("#login")).is_displayed()
        assert driver.execute_script("return sessionStorage.length") == 1  # still logged in
    finally:
        with admin_broker.api() as api:
            api.delete(f"/api/users/{user}")


# ------------------------------------------------------------ issue 26: the dashboard
def main_text_nodes(driver: Any) -> list[str]:
    """Bare text directly under #main (a page's parts are all elements)."""
    return driver.execute_script(
        "return [...document.getElementById('main').childNodes]"
        ".filter(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim())"
        ".map(n => n.textContent)")


def test_list_pages_print_nothing_under_their_heading(dash: Any) -> None:
    """The list pages without a form above the table printed a literal "null"."""
    for page in ("connections", "channels", "exchanges", "bindings", "policies", "users"):
        browser.open_page(dash, page, page)
        assert main_text_nodes(dash) == [], page
        heading = dash.find_element(*by_css("#main h1"))
        after = dash.execute_script("return arguments[0].nextSibling.textContent", heading)
        assert not after.startswith("null"), (page, after[:40])


def test_overview_message_total_includes_streams(dash: Any, admin_broker: AdminBroker,
                                                 channel: Any) -> None:
    """/api/overview's queue_totals (and a vhost's) counted a stream's undelivered
    messages (none), not its entries: 100 where the queues add up to 140."""
    vh = qname("dash-totals")
    with admin_broker.api() as api:
        assert api.put(f"/api/vhosts/{vh}").status_code == 201
        try:
            for q, args in (("s", {"x-queue-type": "stream"}), ("c", {})):
                assert api.put(f"/api/queues/{vh}/{q}", json={
                    "durable": True, "arguments": args}).status_code == 201
            for q, n in (("s", 4), ("c", 3)):
                for i in range(n):
                    r = api.post(f"/api/exchanges/{vh}/amq.default/publish", json={
                        "routing_key": q, "payload": f"m{i}", "payload_encoding": "string",
                        "properties": {}})
                    assert r.json()["routed"] is True
            queues = api.get(f"/api/queues/{vh}").json()
            assert sorted(q["messages"] for q in queues) == [3, 4]
            one = api.get(f"/api/vhosts/{vh}").json()
            assert (one["messages"], one["messages_ready"]) == (7, 7)
            listed = {v["name"]: v for v in api.get("/api/vhosts").json()}[vh]
            assert listed["messages"] == 7
            everything = sum(q["messages"] for q in api.get("/api/queues").json())
            totals = api.get("/api/overview").json()["queue_totals"]
            assert totals["messages"] == everything
            # the overview page shows the API's total
            browser.open_page(dash, "", "overview")
            assert browser.wait(dash, lambda d: browser.text_of("#total-messages")(d),
                                "the total") == f"{everything:,}"
        finally:
            assert api.delete(f"/api/vhosts/{vh}").status_code == 204


def test_overview_shows_node_and_store_figures(dash: Any, admin_broker: AdminBroker) -> None:
    with admin_broker.api() as api:
        node = api.get("/api/nodes").json()[0]
    browser.open_page(dash, "", "overview")
    browser.wait(dash, lambda d: d.find_element(*by_css("#node-memory")), "the node cards")
    text = browser.text_of("#node")(dash)
    assert "watermark" in text and "limit" in text, text
    assert browser.text_of("#node-fds")(dash).endswith(f"/ {node['fd_total']:,}")
    assert browser.text_of("#node-sockets")(dash).endswith(f"/ {node['sockets_total']:,}")
    assert browser.text_of("#node-disk")(dash).endswith(("B", "KiB", "MiB", "GiB", "TiB"))
    assert "ops" in browser.text_of("#node-backlog")(dash)
    assert "commits" in text and "batches" in text, text
    commit = browser.text_of("#node-commit")(dash)
    assert commit == "no commits" or commit.endswith(" ms"), commit


def test_stream_page_reads_entries_and_offers_no_get(dash: Any, admin_broker: AdminBroker,
                                                     channel: Any) -> None:
    s = qname("dash-stream")
    channel.queue_declare(s, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(30):
        publish(channel, s, b"entry %d" % i)
    try:
        browser.open_page(dash, f"queue/%2F/{quote(s)}", "queue")
        assert browser.text_of("#q-ready")(dash) == "30"
        offsets = lambda d: [e.text for e in d.find_elements(*by_css("#entries td.offset"))]  # noqa: E731
        assert browser.wait(dash, offsets, "the first entries") == [str(i) for i in range(20)]
        assert "entry 0" in browser.text_of('#entries tr[data-offset="0"]')(dash)
        # get, move, replay, purge and peek do not apply to a stream
        for css in ("#get-form", "#move-form", "#replay-form", "#purge", "#peek-form"):
            assert not dash.find_element(*by_css(css)).is_displayed(), css
        dash.find_element(*by_css("#entries-next")).click()
        browser.wait(dash, lambda d: offsets(d) == [str(i) for i in range(20, 30)], "the rest")
        browser.fill(dash, "#entries-form", {"from": "25", "count": "2"})
        browser.wait(dash, lambda d: offsets(d) == ["25", "26"], "entries from offset 25")
        # nothing was consumed
        with admin_broker.api() as api:
            assert api.get(f"/api/queues/%2F/{s}").json()["messages"] == 30
    finally:
        channel.queue_delete(s)


def test_classic_queue_page_offers_its_operations_not_stream_entries(
        dash: Any, admin_broker: AdminBroker, channel: Any) -> None:
    q = qname("dash-classic")
    channel.queue_declare(q, durable=True)
    browser.open_page(dash, f"queue/%2F/{quote(q)}", "queue")
    for css in ("#get-form", "#move-form", "#replay-form", "#purge", "#peek-form"):
        assert dash.find_element(*by_css(css)).is_displayed(), css
    assert not dash.find_element(*by_css("#entries-form")).is_displayed()
    channel.queue_delete(q)


def test_publish_from_the_queue_page(dash: Any, admin_broker: AdminBroker,
                                     channel: Any) -> None:
    q = qname("dash-qpub")
    channel.queue_declare(q, durable=True)
    browser.open_page(dash, f"queue/%2F/{quote(q)}", "queue")
    form = dash.find_element(*by_css("#publish-form"))
    assert form.find_element(*by_css("[name=routing_key]")).get_attribute("value") == q
    browser.fill(dash, "#publish-form", {"payload": "straight into the queue",
                                         "message_id": f"id-{q}"})
    browser.wait(dash, lambda d: "routed" in browser.text_of("#publish-result")(d),
                 "the publish result")
    browser.wait(dash, lambda d: browser.text_of("#q-ready")(d) == "1", "the queue depth")
    method, props, body = channel.basic_get(q, auto_ack=True)
    assert method is not None and body == b"straight into the queue"
    assert method.exchange == "" and method.routing_key == q
    assert props.message_id == f"id-{q}" and props.delivery_mode == 2
    channel.queue_delete(q)


def test_vhost_selector_narrows_every_list(dash: Any, admin_broker: AdminBroker) -> None:
    vh = qname("dash-vh")
    with admin_broker.api() as api:
        assert api.put(f"/api/vhosts/{vh}").status_code == 201
        # a queue in "/" too: "all vhosts" must show both, whatever ran before
        assert api.put(f"/api/queues/%2F/{vh}-root", json={"durable": False}).status_code == 201
        assert api.put(f"/api/queues/{vh}/only-here", json={"durable": True}).status_code == 201
        assert api.put(f"/api/exchanges/{vh}/x-here", json={"type": "fanout"}).status_code == 201
        assert api.put(f"/api/policies/{vh}/pol-here", json={
            "pattern": "^only", "definition": {"max-length": 1}}).status_code == 201
    try:
        browser.open_page(dash, "queues", "queues")
        dash.refresh()  # the selector lists the vhosts there are at login
        browser.wait(dash, lambda d: d.find_element(*by_css("#vhost")).is_displayed(),
                     "the vhost selector")
        browser.choose_vhost(dash, vh)
        browser.wait(dash, lambda d: d.find_element(*by_css("#main")).get_attribute(
            "data-loaded") == "queues", "the queues of the vhost")
        rows = dash.find_elements(*by_css("tr[data-queue]"))
        assert [(r.get_attribute("data-vhost"), r.get_attribute("data-queue")) for r in rows] == [
            (vh, "only-here")]
        for page in ("exchanges", "bindings", "policies", "connections", "channels",
                     "permissions"):
            browser.open_page(dash, page, page)
            vhosts = set(dash.execute_script(
                "return [...document.querySelectorAll('#main tbody tr')].map("
                "r => r.querySelector('td').textContent)"))
            if page == "exchanges":
                assert vh in vhosts and vhosts == {vh}, (page, vhosts)
                assert "x-here" in browser.text_of("#main table")(dash)
            elif page == "policies":
                assert vhosts == {vh}, (page, vhosts)
            elif page == "permissions":
                assert "guest" in vhosts  # its creator got permissions there
                assert {r.get_attribute("data-vhost") for r in dash.find_elements(
                    *by_css("tr[data-vhost]"))} == {vh}
            else:
                assert vhosts <= {vh}, (page, vhosts)
        browser.choose_vhost(dash, "")
        browser.open_page(dash, "queues", "queues")
        # "/" may hold more than a page of other tests' queues: narrow by name to the
        # two this test made ("{vh}-root" in "/", "only-here" in vh)
        # set at once (typed key by key, "^(" would be a refused regex and a console error)
        dash.execute_script(
            "const b = document.querySelector('#main .toolbar input[name=\"name\"]');"
            "b.value = arguments[0]; b.dispatchEvent(new Event('input'));",
            f"^({vh}-root|only-here)$")
        browser.wait(dash, lambda d: {r.get_attribute("data-vhost") for r in d.find_elements(
            *by_css("tr[data-queue]"))} >= {"/", vh}, "the queues of every vhost")
    finally:
        browser.choose_vhost(dash, "")
        with admin_broker.api() as api:
            assert api.delete(f"/api/vhosts/{vh}").status_code == 204
            assert api.delete(f"/api/queues/%2F/{vh}-root").status_code == 204


def test_administrator_creates_a_user_and_a_vhost_and_the_user_logs_in(
        driver: Any, admin_broker: AdminBroker) -> None:
    user, vh = qname("dash-user"), qname("dash-vhost")
    browser.log_in(driver, admin_broker.admin_url)
    try:
        browser.open_page(driver, "vhosts", "vhosts")
        browser.fill(driver, "#vhost-form", {"name": vh, "description": "made in the browser"})
        browser.wait(driver, lambda d: d.find_elements(*by_css(f'tr[data-vhost="{vh}"]')),
                     "the new vhost")
        assert "made in the browser" in browser.text_of(f'tr[data-vhost="{vh}"]')(driver)
        assert "no vhost limits" in browser.text_of("#vhost-limits-note")(driver)

        browser.open_page(driver, "users", "users")
        browser.fill(driver, "#user-form", {"name": user, "password": "first-pw",
                                            "tags": "management"})
        row = f'tr[data-user="{user}"]'
        browser.wait(driver, lambda d: "management" in browser.text_of(row)(d), "the new user")

        browser.open_page(driver, "permissions", "permissions")
        browser.fill(driver, "#permission-form", {"user": user, "vhost": vh,
                                                  "configure": "", "write": "^w", "read": ".*"})
        prow = f'tr[data-user="{user}"][data-vhost="{vh}"]'
        browser.wait(driver, lambda d: "^w" in browser.text_of(prow)(d), "the permission")
        assert "Topic permissions" in browser.text_of("#topic-permissions-note")(driver)
        with admin_broker.api() as api:
            assert api.get(f"/api/permissions/{vh}/{user}").json() == {
                "user": user, "vhost": vh, "configure": "", "write": "^w", "read": ".*"}
            assert api.get(f"/api/users/{user}").json()["tags"] == ["management"]

        # change the password and the tags: Edit fills the form
        browser.open_page(driver, "users", "users")
        driver.find_element(*by_css(f"{row} button.edit")).click()
        browser.fill(driver, "#user-form", {"password": "second-pw",
                                            "tags": "management,policymaker"})
        browser.wait(driver, lambda d: "policymaker" in browser.text_of(row)(d), "the new tags")
        assert browser.console_errors(driver) == []

        # the new user logs in with the new password and sees its vhost, no admin pages
        browser.submit_login(browser.login_form(driver, admin_broker.admin_url), user, "first-pw")
        browser.wait(driver, lambda d: "Login failed" in browser.text_of("#login-error")(d),
                     "the old password refused")
        browser.console_errors(driver)  # the refused login's 401
        browser.log_in(driver, admin_broker.admin_url, user, "second-pw")
        # not read-only: its write and read permissions let it publish and get
        assert browser.text_of("#who")(driver) == user
        assert not driver.find_element(*by_css('nav a[data-page="users"]')).is_displayed()
        browser.open_page(driver, "", "overview")
        options = [o.get_attribute("value") for o in driver.find_elements(*by_css("#vhost option"))]
        assert options == ["", vh]
        # without the monitoring tag the node figures are not asked for, and say why
        assert "monitoring tag" in browser.wait(
            driver, lambda d: browser.text_of("#node-hidden")(d), "the node note")
        assert "ops" in browser.text_of("#node-backlog")(driver)
        assert browser.console_errors(driver) == []

        # back as the administrator: delete the user and the vhost
        browser.log_in(driver, admin_broker.admin_url)
        browser.open_page(driver, "users", "users")
        browser.click_twice(driver, f"{row} button.delete")
        browser.wait(driver, lambda d: not d.find_elements(*by_css(row)), "the user to go")
        browser.open_page(driver, "vhosts", "vhosts")
        browser.click_twice(driver, f'tr[data-vhost="{vh}"] button.delete')
        browser.wait(driver, lambda d: not d.find_elements(*by_css(f'tr[data-vhost="{vh}"]')),
                     "the vhost to go")
        with admin_broker.api() as api:
            assert api.get(f"/api/users/{user}").status_code == 404
            assert api.get(f"/api/vhosts/{vh}").status_code == 404
    finally:
        with admin_broker.api() as api:
            api.delete(f"/api/users/{user}")
            api.delete(f"/api/vhosts/{vh}")


# Holds the answer to a queue list asked with an empty name filter until
# window.__release() is called; its text() resolves as a microtask, so once
# __heldDone is set, one macrotask later every continuation of it has run.
HOLD_UNFILTERED = """
const real = window.fetch;
window.__heldDone = false;
window.fetch = async (url, opts) => {
  const resp = await real(url, opts);
  if (!String(url).includes("/api/queues?") || !String(url).includes("name=&")) return resp;
  const text = await resp.text();
  await new Promise((r) => { window.__release = r; });
  window.fetch = real;
  return { ok: resp.ok, status: resp.status, headers: resp.headers,
           text: () => { window.__heldDone = true; return Promise.resolve(text); } };
};
"""


def test_a_late_answer_to_an_older_refresh_does_not_overwrite_a_newer_one(
        dash: Any, admin_broker: AdminBroker) -> None:
    """The periodic refresh and a filter's refresh overlap; the older answer arriving
    last must not draw over the newer (the list showed the unfiltered queues)."""
    name = qname("late")
    with admin_broker.api() as api:
        for q in (name, f"{name}-other"):
            assert api.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    set_filter = ("const b = document.querySelector('#main .toolbar input[name=\"name\"]');"
                  "b.value = arguments[0]; b.dispatchEvent(new Event('input'));")
    try:
        browser.open_page(dash, "queues", "queues")
        dash.execute_script(HOLD_UNFILTERED)
        dash.execute_script(set_filter, "")  # asks, unfiltered: held
        browser.wait(dash, lambda d: d.execute_script("return !!window.__release"),
                     "the unfiltered answer to be held")
        dash.execute_script(set_filter, f"^{name}$")  # asks again, filtered: drawn
        rows = lambda d: [r.get_attribute("data-queue")  # noqa: E731
                          for r in d.find_elements(*by_css("tr[data-queue]"))]
        browser.wait(dash, lambda d: rows(d) == [name], "the filtered list")
        dash.execute_script("window.__release()")
        browser.wait(dash, lambda d: d.execute_script("return window.__heldDone"),
                     "the held answer to be read")
        dash.execute_async_script("setTimeout(arguments[0], 0)")  # its continuations ran
        assert rows(dash) == [name]
    finally:
        with admin_broker.api() as api:
            for q in (name, f"{name}-other"):
                api.delete(f"/api/queues/%2F/{q}")


def test_topic_permissions_set_and_cleared_in_the_browser(
        dash: Any, admin_broker: AdminBroker) -> None:
    """The permissions page lists topic permissions, sets one through its form and
    clears it with the row's button; the API agrees at each step."""
    user = qname("dash-tp")
    with admin_broker.api() as api:
        assert api.put(f"/api/users/{user}", json={"password": "pw"}).status_code == 201
    try:
        browser.open_page(dash, "permissions", "permissions")
        browser.wait(dash, lambda d: "No topic permissions" in browser.text_of(
            "#topic-permissions")(d) or d.find_elements(*by_css("#topic-permissions tr")),
            "the topic permission list")
        browser.fill(dash, "#topic-permission-form", {"user": user, "vhost": "/",
                                                      "exchange": "amq.topic",
                                                      "write": "^w\\.", "read": "^r"})
        row = f'#topic-permissions tr[data-user="{user}"][data-exchange="amq.topic"]'
        browser.wait(dash, lambda d: "^w\\." in browser.text_of(row)(d), "the topic permission")
        with admin_broker.api() as api:
            assert api.get(f"/api/topic-permissions/%2F/{user}").json() == [
                {"user": user, "vhost": "/", "exchange": "amq.topic", "write": "^w\\.",
                 "read": "^r"}]
        browser.click_twice(dash, f"{row} button.delete")
        browser.wait(dash, lambda d: not d.find_elements(*by_css(row)), "the row to go")
        with admin_broker.api() as api:
            assert api.get(f"/api/topic-permissions/%2F/{user}").status_code == 404
    finally:
        with admin_broker.api() as api:
            api.delete(f"/api/users/{user}")
