"""Topology: the wiring as a directed graph, a click on a queue opens it, and 200 queues
are laid out quickly without overlapping."""

from __future__ import annotations

import time

from engine.message import Message
from tests.browser.conftest import make_queue, publish, topology_layout, unique
from tests.web.conftest import wait_for

READY = "() => document.getElementById('cy').dataset.ready === 'yes'"


def selector(relay, queue, action, target, **more):
    relay.call("selector_create", queue=queue, when="always", action=action, target=target,
               enabled=True, **more)  # fmt: skip


def click_node(page, node_id: str) -> None:
    """Click where cytoscape draws the node (its rendered position inside the canvas)."""
    x, y = page.evaluate(
        "id => { const p = window.xumpTopology.getElementById(id).renderedPosition();"
        " return [p.x, p.y]; }",
        node_id,
    )
    box = page.locator("#cy").bounding_box()
    page.mouse.click(box["x"] + x, box["y"] + y)


def orders_to_billing(relay) -> tuple[str, str, str]:
    """orders copies to an audit queue and moves to billing, which delivers to an invoicer."""
    orders = make_queue(relay, unique("orders"))
    audit_copy, billing = make_queue(relay), make_queue(relay, unique("billing"))
    selector(relay, orders, "copy", audit_copy)
    selector(relay, orders, "move", billing)
    selector(relay, billing, "deliver", unique("invoicer"))
    return orders, audit_copy, billing


def test_edges_drawn_by_action_and_a_click_opens_the_queue(page, relay):
    orders, _, billing = orders_to_billing(relay)
    page.goto("/topology/")
    page.wait_for_function(READY)
    styles = page.evaluate(
        "q => window.xumpTopology.getElementById('q:' + q).outgoers('edge').map(e =>"
        " [e.data('action'), e.style('line-style'), e.style('line-color')])",
        orders,
    )
    assert sorted(styles) == [["copy", "dashed", "rgb(31,111,235)"],
                              ["move", "solid", "rgb(36,41,47)"]]  # fmt: skip
    # traffic makes the edges leaving the queue thicker, live: for as long as its rate
    # shows (a snapshot or two), so the page notes the moment it happens, however briefly.
    # First the page must know the queue's counters from before the traffic: its label
    # shows a rate (0/s) once a live frame (or a second poll of the snapshot) has it.
    page.wait_for_function(
        "q => window.xumpTopology.getElementById('q:' + q).data('label').endsWith('/s')",
        arg=orders,
        timeout=15_000,
    )
    page.evaluate(
        "q => { const cy = window.xumpTopology; window.wide = false;"
        " cy.on('data', 'edge', () => { if (cy.getElementById('q:' + q).outgoers('edge')"
        ".every(e => e.data('w') > 2)) window.wide = true; }); }",
        orders,
    )
    publish(relay, orders, *[Message(address="o", body=b"x") for _ in range(50)])
    page.wait_for_function("() => window.wide", timeout=15_000)
    # find the queue (it centres and zooms), then click its node
    page.get_by_label("Find a queue").fill(billing)
    page.get_by_role("button", name="Show").click()
    page.wait_for_function("() => !window.xumpTopology.animated()")
    page.wait_for_function(
        "q => window.xumpTopology.getElementById('q:' + q).selected()", arg=billing
    )
    click_node(page, f"q:{billing}")
    page.wait_for_url(f"**/queues/{billing}/")
    assert page.get_by_role("heading", name=f"Queue {billing}").is_visible()
    assert not page.errors


def test_two_hundred_queues_are_laid_out_apart(page, console):
    """A realistic fan-out: 1 ingress, 9 topic routers, 190 consumer queues delivering."""
    prefix = unique("big")
    ingress, routers = f"{prefix}-ingress", [f"{prefix}-r{r}" for r in range(9)]
    consumers = [f"{prefix}-r{c % 9}-c{c}" for c in range(190)]
    names = [ingress, *routers, *consumers]

    # wired as an operator would load a network this size: one definitions import
    selectors = [{"queue": ingress, "when": "match", "action": "copy", "target": router,
                  "match": {"operator": "topic", "pattern": f"{router}.#"}, "enabled": True}
                 for router in routers]  # fmt: skip
    for consumer in consumers:
        number = int(consumer.rsplit("-c", 1)[1])
        selectors.append({"queue": routers[number % 9], "when": "always",
                          "action": "move" if number % 3 else "copy", "target": consumer,
                          "enabled": True})  # fmt: skip
        selectors.append({"queue": consumer, "when": "always", "action": "deliver",
                          "target": f"app{number % 7}", "enabled": True})  # fmt: skip
    document = {"xump_definitions": 1, "queues": [{"name": name} for name in names],
                "selectors": selectors}  # fmt: skip
    with console.client() as http:
        answer = http.post("/api/definitions", json=document)
        assert answer.status_code in (200, 202), answer.text
        if answer.status_code == 202:  # a big import goes in steps: follow it to the end
            follow = answer.json()["follow"]
            state = wait_for(lambda: (found := http.get(follow).json())["state"] != "running"
                             and found, within=120)  # fmt: skip
            assert state and state["state"] == "done", state
    assert len(names) == 200
    started = time.monotonic()
    page.goto("/topology/")
    page.wait_for_function(READY, timeout=30_000)
    loaded = time.monotonic() - started
    found = topology_layout(page, names, labels=False)
    assert found["shown"] == 200
    assert found["overlaps"] == 0
    # how long it took is printed, not asserted: a busy machine is slower, not wrong (the
    # wait above allows 30 s)
    # readable: zoomed onto one queue its label is drawn at a legible size
    page.get_by_label("Find a queue").fill(names[57])
    page.get_by_role("button", name="Show").click()
    page.wait_for_function("() => !window.xumpTopology.animated()")
    assert page.evaluate("() => window.xumpTopology.zoom()") >= 1.2
    print(f"200 queues: layout {found['ms']} ms, page ready in {loaded:.1f} s")
    assert not page.errors


def test_a_messages_path_is_drawn_over_the_topology(page, relay, console):
    orders, audit_copy, billing = orders_to_billing(relay)
    other = make_queue(relay)
    selector(relay, other, "copy", audit_copy)
    # billing is a worker queue (fed by a MOVE, delivering only): with nobody reading its
    # destination, the router holds the MOVE (work waits for a worker that is present), so
    # the invoicer reads it, as a worker would
    [invoicer] = [found["target"] for found in relay.call("selectors", queue=billing)]
    relay.deliveries(invoicer, count=1, wait=0.1)  # present from now on
    [mid] = publish(relay, orders, Message(address="o", body=b"x"))
    expected = sorted([f"s:{orders}#1", f"s:{orders}#2", f"s:{billing}#1"])
    # the journal reaches Redis with the routing step that made it: wait for the steps (the
    # delivery at billing is the last), then draw them
    with console.client() as http:

        def delivered() -> list:
            relay.deliveries(invoicer, count=1, wait=0.1)  # and stays present
            steps = http.get(f"/api/messages/{mid}/trace").json().get("steps", [])
            return steps if any(step["kind"] == "deliver" for step in steps) else []

        steps = wait_for(delivered, within=120)
        assert steps, http.get(f"/api/messages/{mid}/trace").text
    page.goto(f"/topology/?mid={mid}")
    page.wait_for_function(READY)
    traced = page.evaluate(
        "() => window.xumpTopology.edges('[traced = \"yes\"]').map(e => e.id()).sort()"
    )
    assert traced == expected, (steps, page.locator("#topology-trace").inner_text())
    nodes = page.evaluate("() => window.xumpTopology.nodes('[traced = \"yes\"]').map(n => n.id())")
    assert f"q:{other}" not in nodes and f"q:{billing}" in nodes
    line = page.evaluate(
        "id => window.xumpTopology.getElementById(id).style('line-color')", expected[0]
    )
    assert line == "rgb(191,135,0)"
    page.get_by_role("link", name="Its steps").click()
    page.wait_for_url("**/messages/trace/?mid=*")
    page.locator("#trace-on-topology").wait_for()
    assert not page.errors
