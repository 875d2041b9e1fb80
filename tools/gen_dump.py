#!/usr/bin/env python3
"""A kubectl-style dump of N pods spread over Deployments (with their ReplicaSets), bound to nodes or pending,
as `kubectl get ... -A -o yaml|json` prints it (List documents, status, managedFields trimmed)."""
import json, sys, random
n = int(sys.argv[1]); fmt = sys.argv[2]; out = sys.argv[3]
random.seed(7)
cpu = ["100m", "250m", "500m", "1", "1500m"]; mem = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"]
items = []
items.append({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
  "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
    "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}}}})
deploys = max(1, n // 500)
for d in range(deploys):
    name = f"app-{d}"
    # A pod-template-hash as Kubernetes writes it: 10 characters of its safe alphabet (no vowels, no 0/1/3), so
    # no YAML reader takes it for a number (hex digits did: `00000000e0` is a float to a YAML 1.2 reader).
    safe = "bcdfghjklmnpqrstvwxz2456789"
    h = "".join(safe[(d * 7919 + i * 104729) % len(safe)] for i in range(10))
    items.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default", "uid": f"d-{d}"},
      "spec": {"replicas": 500, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
          "resources": {"requests": {"cpu": cpu[d % 5], "memory": mem[d // 5 % 5]}}}]}}}})
    items.append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": f"{name}-{h}", "namespace": "default", "uid": f"rs-{d}",
      "labels": {"app": name, "pod-template-hash": h},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": f"d-{d}", "controller": True}]},
      "spec": {"replicas": 500, "selector": {"matchLabels": {"app": name, "pod-template-hash": h}},
        "template": {"metadata": {"labels": {"app": name, "pod-template-hash": h}}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
          "resources": {"requests": {"cpu": cpu[d % 5], "memory": mem[d // 5 % 5]}}}]}}}})
    for i in range(500):
        if d * 500 + i >= n: break
        pn = f"{name}-{h}-{i:05d}"
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pn, "namespace": "default", "uid": f"p-{d}-{i}",
          "labels": {"app": name, "pod-template-hash": h}, "creationTimestamp": "2026-11-01T00:00:00Z",
          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-{h}", "uid": f"rs-{d}", "controller": True, "blockOwnerDeletion": True}]},
          "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9", "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": cpu[d % 5], "memory": mem[d // 5 % 5]}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": True}]}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
            "restartPolicy": "Always", "schedulerName": "default-scheduler", "securityContext": {}, "serviceAccount": "default",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
              {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}}]}}]},
          "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "lastTransitionTime": "2026-11-01T00:00:01Z", "message": "0/3 nodes are available"}]}})
doc = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
if fmt == "json":
    json.dump(doc, open(out, "w"), indent=4)
else:
    import yaml
    yaml.safe_dump(doc, open(out, "w"), default_flow_style=False, sort_keys=True)
