#!/usr/bin/env python3
"""Writes the instance-type catalogues of upstream's fake cloud provider (sigs.k8s.io/karpenter
pkg/cloudprovider/fake: NewInstanceType's defaults, the provider's default set, InstanceTypes(n)) as kwok
instance-type JSON for `simulate --instance-types` (also InstanceTypesAssorted()), into bins/karpenter-controller/tests/fixtures/upstream-specs/.

The facts reproduced (read from upstream, not copied): a type defaults to 4 CPU, 4Gi memory and 5 pods; amd64;
linux, windows and darwin; five offerings (spot in test-zone-1/2, on-demand in test-zone-1/2/3), all available,
all priced 0.1 per CPU + 0.1 per GB (1e9 bytes) of memory + 1.0 per fake GPU resource named; labels `size`
(`large` with `special: optional` when CPU > 4 and memory > 8Gi, else `small` and no `special`) and `integer`
(the CPU count). Run from the workspace root: python3 tools/upstream-fake-instance-types.py
"""
import json
import os

OUT = "bins/karpenter-controller/tests/fixtures/upstream-specs"
GIB = 1 << 30
GPU_RESOURCES = ("fake.com/vendor-a", "fake.com/vendor-b")
DEFAULT_OFFERINGS = [("spot", "test-zone-1"), ("spot", "test-zone-2"), ("on-demand", "test-zone-1"),
                     ("on-demand", "test-zone-2"), ("on-demand", "test-zone-3")]


def mem_bytes(q):
    assert q.endswith("Gi"), q
    return int(q[:-2]) * GIB


def fake_type(name, resources=None, arch="amd64", oses=("linux", "windows", "darwin"), offerings=None):
    res = {"cpu": "4", "memory": "4Gi", "pods": "5"}
    res.update(resources or {})
    cpu, mem = int(res["cpu"]), mem_bytes(res["memory"])
    price = 0.1 * cpu + 0.1 * mem / 1e9 + sum(1.0 for r in GPU_RESOURCES if r in res)
    offerings = offerings or [(ct, z, price) for ct, z in DEFAULT_OFFERINGS]
    large = cpu > 4 and mem > 8 * GIB
    reqs = [{"key": "size", "operator": "In", "values": ["large" if large else "small"]},
            {"key": "integer", "operator": "In", "values": [str(cpu)]}]
    reqs.append({"key": "special", "operator": "In", "values": ["optional"]} if large
                else {"key": "special", "operator": "DoesNotExist"})
    return {
        "name": name,
        "offerings": [{"Price": p, "Available": True, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ct]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}]} for ct, z, p in offerings],
        "architecture": arch,
        "operatingSystems": sorted(oses),
        "resources": res,
        "requirements": reqs,
    }


def default_set():
    return [
        fake_type("default-instance-type"),
        fake_type("small-instance-type", {"cpu": "2", "memory": "2Gi"}),
        fake_type("gpu-vendor-instance-type", {"fake.com/vendor-a": "2"}),
        fake_type("gpu-vendor-b-instance-type", {"fake.com/vendor-b": "2"}),
        fake_type("arm-instance-type", {"cpu": "16", "memory": "128Gi"}, arch="arm64",
                  oses=("ios", "linux", "windows", "darwin")),
        fake_type("single-pod-instance-type", {"pods": "1"}),
    ]


def incrementing(total):
    """InstanceTypes(total): fake-it-i with i+1 CPU, 2(i+1)Gi memory, 10(i+1) pods."""
    return [fake_type(f"fake-it-{i}", {"cpu": str(i + 1), "memory": f"{(i + 1) * 2}Gi", "pods": str((i + 1) * 10)})
            for i in range(total)]


def assorted():
    """InstanceTypesAssorted(): every CPU x memory x zone x capacity type x OS x arch, one offering each."""
    out = []
    for cpu in (1, 2, 4, 8, 16, 32, 64):
        for mem in (1, 2, 4, 8, 16, 32, 64, 128):
            for zone in ("test-zone-1", "test-zone-2", "test-zone-3"):
                for ct in ("spot", "on-demand"):
                    for os_ in ("linux", "windows"):
                        for arch in ("amd64", "arm64"):
                            price = 0.1 * cpu + 0.1 * mem * GIB / 1e9
                            out.append(fake_type(f"{cpu}-cpu-{mem}-mem-{arch}-{os_}-{zone}-{ct}",
                                                 {"cpu": str(cpu), "memory": f"{mem}Gi"}, arch=arch, oses=(os_,),
                                                 offerings=[(ct, zone, price)]))
    return out


def reserved_set(small_reservations=()):
    """The three types of the scheduling suite's `Reserved Instance Types`: large (6 CPU, 6Gi), medium (3, 3Gi) and
    small (2, 2Gi), medium and small each with one instance in a reservation `r-<name>` in test-zone-1, priced at a
    hundred-thousandth of the type's price. `small_reservations` adds (id, instances) reservations to small, as
    specs that add a second reservation (or give another NodePool its own) do."""
    types = [fake_type("large-instance-type", {"cpu": "6", "memory": "6Gi"}),
             fake_type("medium-instance-type", {"cpu": "3", "memory": "3Gi"}),
             fake_type("small-instance-type", {"cpu": "2", "memory": "2Gi"})]
    for t in types[1:]:
        reservations = [(f"r-{t['name']}", 1)]
        if t["name"] == "small-instance-type":
            reservations += list(small_reservations)
        price = t["offerings"][0]["Price"] / 100_000.0
        for rid, instances in reservations:
            t["offerings"].append({"Price": price, "Available": True, "ReservationCapacity": instances, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1"]},
                {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": [rid]}]})
    return types


def write(name, types, compact=False):
    with open(os.path.join(OUT, name), "w") as f:
        if compact:
            # One entry per line: 1344 entries stay reviewable as line diffs.
            f.write("[\n" + ",\n".join(json.dumps(t, separators=(",", ":")) for t in types) + "\n]\n")
        else:
            json.dump(types, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    write("fake-instance-types.json", default_set())
    write("fake-instance-types-5.json", incrementing(5))
    write("fake-instance-types-assorted.json", assorted(), compact=True)
    write("scheduling/reserved-instance-types.json", reserved_set())
    # A second reservation of small with two instances.
    write("scheduling/reserved-second-small-reservation.json", reserved_set([("r-small-instance-type-2", 2)]))
    # Another NodePool's own reservation of small (upstream gives that pool its own instance types; here the
    # pools split the reservations by requirement).
    write("scheduling/reserved-distinct-instance-types.json", reserved_set([("r-distinct", 1)]))
    write("scheduling/reserved-fallback-instance-types.json", reserved_set([("r-fallback", 1)]))
