#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compares what 'nelssactl topology --json' said in the CXL guest with what
'cxl list -vvv' and 'daxctl list' said about the same objects (the blocks
topology-init printed, one file each in BLOCKDIR).  Prints one line per
check, "ok - NAME" or "not ok - NAME", with "# " lines saying what differs;
topology.sh numbers them.

    topology-compare.py BLOCKDIR
"""
import json
import os
import sys

blocks = sys.argv[1]
results = []


def check(name, problems):
    """problems: a list of strings, empty when the check holds."""
    if problems:
        print("not ok - " + name)
        for p in problems[:20]:
            print("# " + p)
    else:
        print("ok - " + name)
    results.append(not problems)


def text(tag):
    try:
        with open(os.path.join(blocks, tag)) as f:
            return f.read()
    except OSError:
        return None


def load(tag):
    t = text(tag)
    if t is None:
        raise ValueError("block %s missing" % tag)
    return json.loads(t)


def as_buses(listing):
    """'cxl list' prints an array of buses, or one bus object unwrapped."""
    if isinstance(listing, dict):
        return [listing]
    return [b for b in listing if isinstance(b, dict) and isinstance(b.get("bus"), str)]


def walk(o, fn, owner=None):
    """Calls fn(obj, owner) on every dict, owner being the key it hangs from."""
    if isinstance(o, dict):
        fn(o, owner)
        for k, v in o.items():
            walk(v, fn, k)
    elif isinstance(o, list):
        for v in o:
            walk(v, fn, owner)


def objects(listing, key):
    """Every object of a 'cxl list' whose identity field is `key` (a string)."""
    found = []
    walk(listing, lambda o, owner: found.append(o) if isinstance(o.get(key), str) else None)
    return found


def decoders_by_owner(listing):
    """{decoder name: (owning port, object)} from the "decoders:OWNER" arrays."""
    found = {}

    def fn(o, owner):
        for k, v in o.items():
            if k.startswith("decoders:") and isinstance(v, list):
                for d in v:
                    found[d["decoder"]] = (k.split(":", 1)[1], d)
    walk(listing, fn)
    return found


def same(what, theirs, mine):
    """Every field 'cxl list' printed for an object has the same value in ours."""
    if mine is None:
        return ["%s: missing in nelssactl's output" % what]
    if not isinstance(mine, dict):
        return ["%s: not an object in nelssactl's output" % what]
    problems = []
    for k, v in theirs.items():
        if k in ("targets", "mappings"):
            mv = mine.get(k)
            if not isinstance(mv, list) or len(mv) != len(v):
                problems.append("%s.%s: cxl list %r, nelssactl %r" % (what, k, v, mv))
                continue
            for i, (a, b) in enumerate(zip(v, mv)):
                problems += same("%s.%s[%d]" % (what, k, i), a, b)
        elif isinstance(v, (dict, list)):
            continue    # nested objects are compared as objects of their own
        elif mine.get(k) != v:
            problems.append("%s.%s: cxl list %r, nelssactl %r" % (what, k, v, mine.get(k)))
    return problems


def device(topo, name):
    for d in topo.get("devices", []):
        if d.get("device") == name:
            return d
    return None


def path_parts(p):
    return [c for c in p.split("/") if c]


def compare_path(label, dev, listing, filtered, memdev_name=None, card_path=None):
    """The bus, host bridge, root port, endpoint, memdev and decoders of one device."""
    buses = as_buses(filtered)
    problems = []
    if len(buses) != 1:
        return check(label + ": one CXL bus in cxl list", ["cxl list shows %d buses" % len(buses)])
    bus = buses[0]
    check(label + ": bus agrees with cxl list", same("bus", bus, dev.get("bus")))

    # The host bridge: the bus's dport on the device's path, and the port below it.
    if card_path:
        hb_dports = [d for d in bus.get("dports", []) if d.get("alias", d["dport"]) in path_parts(card_path)]
    else:
        hb_dports = bus.get("dports", [])     # filtered by memdev: the one that maps it
    problems = []
    if len(hb_dports) != 1:
        problems.append("cxl list: %d host-bridge dports on the path" % len(hb_dports))
    else:
        problems += same("host_bridge_dport", hb_dports[0], dev.get("host_bridge_dport"))
    ports = [p for p in objects(filtered, "port") if p.get("host") == (hb_dports[0]["dport"] if hb_dports else None)]
    if len(ports) != 1:
        problems.append("cxl list: %d ports hosted by the host bridge" % len(ports))
    else:
        problems += same("host_bridge", ports[0], dev.get("host_bridge"))
    check(label + ": host bridge (port and bus dport) agrees with cxl list", problems)

    problems = []
    if ports:
        if card_path:
            parent = path_parts(card_path)[-2]     # the PCI bridge above the card
            rps = [d for d in ports[0].get("dports", []) if d["dport"] == parent]
        else:
            rps = ports[0].get("dports", [])     # filtered by memdev
        if len(rps) != 1:
            problems.append("cxl list: %d root-port dports on the path" % len(rps))
        else:
            problems += same("root_port", rps[0], dev.get("root_port"))
    check(label + ": root port agrees with cxl list", problems)

    eps = objects(filtered, "endpoint")
    if memdev_name:
        eps = [e for e in eps if e.get("host") == memdev_name]
        problems = ["cxl list: %d endpoints for %s" % (len(eps), memdev_name)] if len(eps) != 1 else \
            same("endpoint", eps[0], dev.get("endpoint"))
        mds = [m for m in objects(filtered, "memdev") if m["memdev"] == memdev_name and "host" in m]
        problems += ["cxl list: no memdev %s" % memdev_name] if not mds else \
            same("memdev", mds[0], dev.get("memdev"))
        check(label + ": endpoint and memdev agree with cxl list", problems)
    else:
        check(label + ": no endpoint and no memdev (not a CXL.mem device on this kernel)",
              [] if dev.get("endpoint") is None and dev.get("memdev") is None and dev.get("note")
              else ["endpoint %r, memdev %r, note %r" % (dev.get("endpoint"), dev.get("memdev"), dev.get("note"))])

    # HDM decoders: every decoder of the ports on the path, as the unfiltered listing shows them.
    owners = set([bus["bus"]] + [p["port"] for p in ports])
    if memdev_name and len(eps) == 1:
        owners.add(eps[0]["endpoint"])
    theirs = {n: d for n, (o, d) in decoders_by_owner(listing).items() if o in owners}
    mine = {d["decoder"]: d for d in dev.get("decoders", [])}
    problems = []
    if set(theirs) != set(mine):
        problems.append("decoders: cxl list %s, nelssactl %s" % (sorted(theirs), sorted(mine)))
    for n in sorted(theirs):
        problems += same(n, theirs[n], mine.get(n))
        if n in mine and mine[n].get("port") not in owners:
            problems.append("%s: port %r" % (n, mine[n].get("port")))
    # And the filtered listing's decoders (those that map the memdev) are among them.
    for n in decoders_by_owner(filtered) if memdev_name else ():
        if n not in mine:
            problems.append("%s (cxl list -m) missing" % n)
    check(label + ": HDM decoders on the path agree with cxl list (%d)" % len(theirs), problems)

    # routes_here: the decoder targets the dport of the path at its port.
    problems = []
    via = {bus["bus"]: dev.get("host_bridge_dport") or {}}
    if ports:
        via[ports[0]["port"]] = dev.get("root_port") or {}
    for n, d in mine.items():
        if d.get("port") in via:
            want = any(t.get("target") == via[d["port"]].get("dport") for t in d.get("targets", []))
            if d.get("routes_here") != want:
                problems.append("%s: routes_here %r, targets say %r" % (n, d.get("routes_here"), want))
    check(label + ": routes_here follows each decoder's targets", problems)
    return None


def compare_regions(label, dev, listing, memdev_name):
    theirs = [r for r in objects(listing, "region") if "decode_state" in r and any(m.get("memdev") == memdev_name for m in r.get("mappings", []))]
    mine = dev.get("regions", [])
    problems = []
    if sorted(r["region"] for r in theirs) != sorted(r.get("region") for r in mine):
        problems.append("regions: cxl list %s, nelssactl %s" %
                        ([r["region"] for r in theirs], [r.get("region") for r in mine]))
    for r in theirs:
        problems += same(r["region"], r, next((m for m in mine if m.get("region") == r["region"]), None))
    check(label + ": regions mapping %s agree with cxl list (%d)" % (memdev_name, len(theirs)), problems)
    problems = []
    hpa = [(m["start"], m["size"]) for m in dev.get("memory", []) if m.get("kind") == "hpa"]
    for r in theirs:
        if (r.get("resource"), r.get("size")) not in hpa:
            problems.append("no HPA range for %s in memory: %r" % (r["region"], hpa))
    check(label + ": memory lists the HPA range of each region", problems)


def dax_devices(daxlist, under=None):
    """(chardev, size, mode) of daxctl's devices; with `under`, only regions below that path."""
    regions = daxlist if isinstance(daxlist, list) else [daxlist]
    found = []
    for r in regions:
        if under is not None and not ("/sys/devices" + r.get("path", "") + "/").startswith(under + "/"):
            continue
        for d in r.get("devices", []):
            if d.get("size"):
                found.append((d["chardev"], d["size"], d.get("mode")))
    return sorted(found)


def main():
    card_path = (text("card-path") or "").strip()
    card_pci = os.path.basename(card_path)
    check("the guest printed the card's PCI path", [] if card_path.startswith("/sys/devices/pci") else
          ["card-path block: %r" % card_path])

    for phase in ("1", "2"):
        try:
            listing = load("cxl-list-" + phase)
            filtered = load("cxl-list-mem0-" + phase)
            topo = load("topo-" + phase)
        except ValueError as e:
            check("phase %s: the guest's JSON blocks parse" % phase, [str(e)])
            continue
        tag = "phase %s (%s)" % (phase, "enumerated" if phase == "1" else "region + devdax")
        check(tag + ": topology --json says there is a CXL bus, with the buses of cxl list",
              [] if topo.get("cxl_bus") is True and
              sorted((b["bus"], b["provider"]) for b in topo.get("buses", [])) ==
              sorted((b["bus"], b["provider"]) for b in as_buses(listing))
              else ["cxl_bus %r, buses %r" % (topo.get("cxl_bus"), topo.get("buses"))])

        mem0 = device(topo, "mem0")
        check(tag + ": mem0 listed as a cxl-memdev",
              [] if mem0 and mem0.get("kind") == "cxl-memdev" else ["devices: %r" % [d.get("device") for d in topo.get("devices", [])]])
        if mem0:
            compare_path(tag + " mem0", mem0, listing, filtered, memdev_name="mem0")
            pmem = [m for m in mem0.get("memory", []) if m.get("kind") == "pmem"]
            check(tag + " mem0: memory lists its pmem partition",
                  [] if len(pmem) == 1 and pmem[0]["size"] == mem0["memdev"]["pmem_size"]
                  else ["memory %r" % mem0.get("memory")])

        card = device(topo, "/dev/nelssa_pnm0")
        check(tag + ": the card listed as a nelssa-card at its PCI address",
              [] if card and card.get("kind") == "nelssa-card" and card.get("pci") == card_pci
              else ["card %r (PCI %s)" % (card, card_pci)])
        if card:
            compare_path(tag + " card", card, listing, listing, card_path=card_path)
            bars = [m for m in card.get("memory", []) if m.get("kind") == "pci-bar"]
            check(tag + " card: memory lists its BARs, BAR2 the device memory (64 MiB)",
                  [] if any(b["bar"] == 2 and b["size"] == 64 << 20 for b in bars)
                  else ["memory %r" % card.get("memory")])

        if phase == "1":
            try:
                one = load("topo-card-1")["devices"]
                check("topology /dev/nelssa_pnm0 gives the card's entry of the full listing",
                      [] if one == [card] else ["%r" % one])
                one = load("topo-pci-1")["devices"]
                strip = lambda d: {k: v for k, v in d.items() if k not in ("device", "kind")}
                check("topology %s (by PCI name) places it the same" % card_pci,
                      [] if len(one) == 1 and one[0]["kind"] == "pci-device" and strip(one[0]) == strip(card)
                      else ["%r" % one])
            except (ValueError, TypeError, KeyError) as e:
                check("topology of one device parses", [str(e)])
            txt = text("topo-text-1") or ""
            want = ["/dev/nelssa_pnm0: nelssa-card, PCI " + card_pci,
                    "  root port    %s " % path_parts(card_path)[-2],
                    "mem0: cxl-memdev", "  dax          none"]
            check("human output names the card, its root port and mem0",
                  ["missing %r" % w for w in want if w not in txt])
            err = (text("topo-nodev.err") or "").strip().splitlines()
            check("no such device: one line on stderr naming it",
                  [] if len(err) == 1 and "mem9" in err[0] else ["stderr %r" % err])
            for d in (mem0, card):
                if d:
                    check(tag + " %s: no dax device before any carve-out or region" % d["device"],
                          [] if d.get("dax") == [] else ["dax %r" % d.get("dax")])
        else:
            if mem0:
                compare_regions(tag + " mem0", mem0, listing, "mem0")
                try:
                    dax = load("daxctl-2")
                    want = dax_devices(dax)
                    got = sorted((d["chardev"], d["size"], d["mode"]) for d in mem0.get("dax", []))
                    check(tag + " mem0: dax device of its region agrees with daxctl list (%s)" %
                          ", ".join(w[0] for w in want),
                          [] if want and got == want else ["daxctl %r, nelssactl %r" % (want, got)])
                    if card:
                        want = dax_devices(dax, under=card_path)
                        got = sorted((d["chardev"], d["size"], d["mode"]) for d in card.get("dax", []))
                        check(tag + " card: dax devices below its node agree with daxctl list (%s)" %
                              (", ".join(w[0] for w in want) or "none"),
                              [] if got == want else ["daxctl %r, nelssactl %r" % (want, got)])
                except (ValueError, KeyError) as e:
                    check("daxctl list parses", [str(e)])
                one = load("topo-mem0-2")["devices"]
                check("topology mem0 gives mem0's entry of the full listing",
                      [] if one == [mem0] else ["%r" % one])
            txt = text("topo-text-2") or ""
            check("human output shows the region and the dax device",
                  [] if "region0" in txt and "dax0." in txt else ["output:\n" + txt])
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
