#!/usr/bin/env python3
"""Validates deploy/k8s offline: every object against the strict Kubernetes schema vendored in
deploy/k8s/schema/k8s-strict.json (python3-jsonschema; a misspelled or misplaced field fails), the
Secrets made by curve-secrets.sh from a real `tessera keys` set included; then what a schema cannot
see: selectors, Services and StatefulSets that fit, every flag and config key known to its program
(docs/configuration.md), every address a Service (or a StatefulSet pod) with that port, probes,
resources and preStop everywhere, grace periods longer than the drains, each role's Secret holding
exactly the key files docs/security.md gives that role.

usage: k8s_manifests_test.py SOURCE_DIR BIN_DIR      (exit 77: python3-yaml/jsonschema missing)
"""
import copy
import glob
import os
import re
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import yaml
except ImportError as e:  # pragma: no cover
    print("SKIPPED: %s (Debian: python3-yaml python3-jsonschema)" % e)
    sys.exit(77)

SRC, BIN = sys.argv[1], sys.argv[2]
K8S = os.path.join(SRC, "deploy", "k8s")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


# ---- load ----
kust = yaml.safe_load(open(os.path.join(K8S, "kustomization.yaml")))
files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(K8S, "*.yaml")) if not p.endswith("kustomization.yaml"))
check(sorted(kust["resources"]) == files, "kustomization.yaml resources %s != the manifests %s" % (kust["resources"], files))
docs = []
for f in files:
    for d in yaml.safe_load_all(open(os.path.join(K8S, f))):
        if d is not None:
            docs.append((f, d))

with tempfile.TemporaryDirectory() as tmp:
    keys = os.path.join(tmp, "keys")
    subprocess.run([os.path.join(BIN, "tessera"), "keys", keys], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(["sh", os.path.join(K8S, "curve-secrets.sh"), keys], check=True, capture_output=True, text=True).stdout
    for d in yaml.safe_load_all(out):
        if d is not None:
            docs.append(("curve-secrets.sh", d))
    key_files = {f: open(os.path.join(keys, f), "rb").read() for f in os.listdir(keys) if os.path.isfile(os.path.join(keys, f))}
    check("router.key" in out, "the scheduler's Secret has no router.key although the set has one")
    # A set whose router key was added per peer (router.d/r1.key, as docs/security.md says for
    # sets made before the router role): not shippable in a Secret, and the script says so.
    old_set = os.path.join(tmp, "old")
    subprocess.run([os.path.join(BIN, "tessera"), "keys", old_set], check=True, stdout=subprocess.DEVNULL)
    os.remove(os.path.join(old_set, "router.key"))
    os.remove(os.path.join(old_set, "router.key_secret"))
    subprocess.run([os.path.join(BIN, "tessera"), "keys", old_set, "--role", "router", "--name", "r1"], check=True,
                   stdout=subprocess.DEVNULL)
    r = subprocess.run(["sh", os.path.join(K8S, "curve-secrets.sh"), old_set], check=True, capture_output=True, text=True)
    check("router.key" not in r.stdout, "a set without router.key shipped one")
    check(os.path.join(old_set, "router.d", "r1.key") in r.stderr and "copy it to " + os.path.join(old_set, "router.key") in r.stderr,
          "curve-secrets.sh did not say that router.d/r1.key is not shipped: %r" % r.stderr)
    # A per-host worker key beside the set's own worker.key: named as not shipped, but copying it
    # over worker.key (whose secret half the worker pods hold) is never advised.
    subprocess.run([os.path.join(BIN, "tessera"), "keys", keys, "--role", "worker", "--name", "h1"], check=True,
                   stdout=subprocess.DEVNULL)
    r = subprocess.run(["sh", os.path.join(K8S, "curve-secrets.sh"), keys], check=True, capture_output=True, text=True)
    check(os.path.join(keys, "worker.d", "h1.key") in r.stderr and "copy it to" not in r.stderr,
          "curve-secrets.sh on a set with worker.key and worker.d/h1.key: %r" % r.stderr)

# ---- schema ----
root = yaml.safe_load(open(os.path.join(K8S, "schema", "k8s-strict.json")))


def validator(api, kind):
    key = api + "/" + kind
    if key not in root["kinds"]:
        return None
    schema = dict(root)
    schema.update(root["kinds"][key])
    return jsonschema.Draft7Validator(schema)


def schema_errors(d):
    v = validator(d.get("apiVersion", ""), d.get("kind", ""))
    if v is None:
        return ["no schema for %s %s (add it to deploy/k8s/schema/generate.py)" % (d.get("apiVersion"), d.get("kind"))]
    return ["/".join(str(p) for p in e.absolute_path) + ": " + e.message for e in v.iter_errors(d)]


for f, d in docs:
    for e in schema_errors(d):
        fail("%s %s/%s: %s" % (f, d.get("kind"), d.get("metadata", {}).get("name"), e))

# The validator is strict: a misspelled field, a wrong type and a missing required field fail.
dep = next(d for _, d in docs if d["kind"] == "Deployment")
bad = copy.deepcopy(dep)
c0 = bad["spec"]["template"]["spec"]["containers"][0]
c0["readinesProbe"] = c0.pop("readinessProbe")
check(schema_errors(bad), "the schema accepted a misspelled field (readinesProbe)")
bad = copy.deepcopy(dep)
bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
check(schema_errors(bad), "the schema accepted a string containerPort")
bad = copy.deepcopy(dep)
del bad["spec"]["selector"]
check(schema_errors(bad), "the schema accepted a Deployment without selector")

# ---- what a schema cannot see ----
by_kind = {}
for f, d in docs:
    name = d["metadata"]["name"]
    check(name not in by_kind.setdefault(d["kind"], {}), "two %s named %s" % (d["kind"], name))
    by_kind[d["kind"]][name] = d
services = by_kind.get("Service", {})
workloads = dict(by_kind.get("Deployment", {}), **by_kind.get("StatefulSet", {}))
secrets = dict(by_kind.get("Secret", {}))
EXTERNAL_SECRETS = {"tessera-kvstore-hmac": {"hmac-secret"}}  # made with kubectl (docs/deploy.md)


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


# docs/configuration.md: the options of each program.
options = {}
section = None
for line in open(os.path.join(SRC, "docs", "configuration.md")):
    m = re.match(r"^## (tessera-[a-z]+)\s*$", line)
    if m:
        section = m.group(1)
        options[section] = set()
        continue
    if line.startswith("## "):
        section = None
    m = re.match(r"^\| `--([a-z0-9-]+)`", line)
    if section and m:
        options[section].add(m.group(1))
for prog in ("tessera-frontend", "tessera-scheduler", "tessera-worker", "tessera-kvstore"):
    check(options.get(prog), "docs/configuration.md has no options for " + prog)
    options.setdefault(prog, set()).add("config")  # every program's --config FILE

# The ConfigMap's tessera.conf: each [section]'s keys are options of that program.
conf = by_kind["ConfigMap"]["tessera-config"]["data"]["tessera.conf"]
section = None
for line in conf.splitlines():
    line = line.split("#")[0].strip()
    if not line:
        continue
    m = re.match(r"^\[([a-z]+)\]$", line)
    if m:
        section = "tessera-" + m.group(1)
        check(section in options, "tessera.conf: unknown section [%s]" % m.group(1))
        continue
    key = line.split("=")[0].strip()
    check(section is not None, "tessera.conf: key %s before any [section] applies to every program" % key)
    check(key in options.get(section, ()), "tessera.conf [%s]: %s is not an option of %s" % (section, key, section))

# Files each role reads from its --curve-dir (docs/security.md, "Keys").
# (The scheduler's also has router.key, the K/V event subscribers' public key, which `tessera keys`
# makes and --kv-events-endpoint needs.)
ROLE_KEYS = {"scheduler": {"scheduler.key_secret", "frontend.key", "worker.key", "router.key"},
             "worker": {"worker.key_secret", "scheduler.key", "kvstore.key"},
             "frontend": {"frontend.key_secret", "scheduler.key", "kvstore.key", "client.key"},
             "kvstore": {"kvstore.key_secret", "frontend.key", "worker.key"}}


def endpoint_ok(host, port, where):
    """host:port is a Service with that port, or <statefulset>-<i>.<service> with i < replicas."""
    if host in ("0.0.0.0", "::", "*"):
        return
    m = re.fullmatch(r"([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)", host)
    svc_name = m.group(3) if m else host
    svc = services.get(svc_name)
    if not check(svc is not None, "%s: %s is no Service" % (where, host)):
        return
    check(port in [p["port"] for p in svc["spec"]["ports"]], "%s: Service %s has no port %d" % (where, svc_name, port))
    if m:
        sts = by_kind.get("StatefulSet", {}).get(m.group(1))
        if check(sts is not None and sts["spec"]["serviceName"] == svc_name,
                 "%s: %s is not a pod of a StatefulSet served by %s" % (where, host, svc_name)):
            check(int(m.group(2)) < sts["spec"]["replicas"], "%s: %s beyond the replicas of %s" % (where, host, m.group(1)))


for name, w in workloads.items():
    where = "%s %s" % (w["kind"], name)
    spec, tmpl = w["spec"], w["spec"]["template"]
    labels = tmpl["metadata"].get("labels", {})
    check(labels_match(spec["selector"]["matchLabels"], labels), where + ": selector does not match the pod labels")
    if w["kind"] == "StatefulSet":
        svc = services.get(spec["serviceName"])
        if check(svc is not None, where + ": serviceName %s is no Service" % spec["serviceName"]):
            check(svc["spec"].get("clusterIP") == "None", where + ": Service %s is not headless" % spec["serviceName"])
            check(labels_match(svc["spec"]["selector"], labels), where + ": its Service does not select its pods")
    pod = tmpl["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for v in volumes.values():
        if "secret" in v:
            check(v["secret"]["secretName"] in secrets, where + ": Secret %s is not made by curve-secrets.sh" % v["secret"]["secretName"])
        if "configMap" in v:
            check(v["configMap"]["name"] in by_kind["ConfigMap"], where + ": no ConfigMap " + v["configMap"]["name"])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    for c in pod["containers"]:
        cw = "%s container %s" % (where, c["name"])
        for probe in ("readinessProbe", "livenessProbe"):
            check(probe in c, cw + ": no " + probe)
        res = c.get("resources", {})
        check({"cpu", "memory"} <= set(res.get("requests", {})), cw + ": requests need cpu and memory")
        check("memory" in res.get("limits", {}), cw + ": no memory limit")
        pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        check(pre[:1] == ["sleep"], cw + ": no preStop pause")
        port_names = {p.get("name") for p in c.get("ports", [])}
        port_numbers = {p["containerPort"] for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            p = c.get(probe, {})
            port = p.get("httpGet", p.get("tcpSocket", {})).get("port")
            if port is not None:
                check(port in port_names or port in port_numbers, cw + ": %s on undeclared port %s" % (probe, port))
        scrape = tmpl["metadata"].get("annotations", {}).get("prometheus.io/port")
        if scrape:
            check(int(scrape) in {p["containerPort"] for cc in pod["containers"] for p in cc.get("ports", [])},
                  where + ": prometheus.io/port %s is no container port" % scrape)
        for m in c.get("volumeMounts", []):
            check(m["name"] in volumes, cw + ": mounts unknown volume " + m["name"])
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                have = EXTERNAL_SECRETS.get(ref["name"], set(secrets.get(ref["name"], {}).get("data", {})))
                check(ref["key"] in have, cw + ": Secret %s has no key %s" % (ref["name"], ref["key"]))
        argv = [str(a) for a in c.get("command", []) + c.get("args", [])]
        prog = os.path.basename(argv[0]) if argv else ""
        if prog not in options:
            continue
        role = prog[len("tessera-"):]
        flags = {}
        for i, a in enumerate(argv[1:], 1):
            if a.startswith("--"):
                flag = a[2:]
                check(flag in options[prog], cw + ": --%s is not an option of %s" % (flag, prog))
                flags[flag] = argv[i + 1] if i + 1 < len(argv) else ""
        for flag in ("schedulers", "scheduler", "kvstore", "redis"):
            for ep in filter(None, flags.get(flag, "").split(",")):
                d = re.fullmatch(r"dns:([a-z0-9.-]+):(\d+)", ep)
                if d and flag in ("schedulers", "scheduler"):  # every address of a headless Service
                    svc = services.get(d.group(1))
                    if check(svc is not None, cw + ": --%s %s names no Service" % (flag, ep)):
                        check(svc["spec"].get("clusterIP") == "None", cw + ": --%s %s: Service %s is not headless (one "
                              "address, not one per pod)" % (flag, ep, d.group(1)))
                    endpoint_ok(d.group(1), int(d.group(2)), cw + " --" + flag)
                    continue
                m = re.fullmatch(r"(?:tcp://)?([a-z0-9.-]+):(\d+)", ep)
                if check(m, cw + ": --%s %s is not host:port" % (flag, ep)):
                    endpoint_ok(m.group(1), int(m.group(2)), cw + " --" + flag)
        # Frontends and workers find every scheduler from the StatefulSet's headless Service
        # (dns:SERVICE:PORT, re-resolved while running), never one fixed scheduler: its port for
        # frontends, its port for workers.
        sched_port = {"frontend": ("schedulers", "frontends"), "worker": ("scheduler", "workers")}.get(role)
        if sched_port:
            flag, port_name = sched_port
            sts = by_kind["StatefulSet"]["tessera-scheduler"]
            svc = services.get(sts["spec"]["serviceName"], {"spec": {"ports": []}})
            ports = [p["port"] for p in svc["spec"]["ports"] if p.get("name") == port_name]
            want = "dns:%s:%s" % (sts["spec"]["serviceName"], ports[0] if ports else "?")
            check(flags.get(flag) == want, cw + ": --%s must be %s (every scheduler pod, from the headless Service), "
                  "not %r" % (flag, want, flags.get(flag)))
        if "drain-timeout-s" in flags:
            pause = int(pre[1]) if len(pre) > 1 else 0
            check(grace > pause + int(flags["drain-timeout-s"]),
                  where + ": terminationGracePeriodSeconds %d <= preStop %d + drain %s" % (grace, pause, flags["drain-timeout-s"]))
        # Its Secret: exactly the key files of its role, secret keys only its own.
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vol = volumes.get(mounts.get(env.get("TESSERA_CURVE_DIR", "")), {})
        if check("secret" in vol, cw + ": TESSERA_CURVE_DIR is not a mounted Secret"):
            data = secrets.get(vol["secret"]["secretName"], {}).get("data", {})
            check(set(data) == ROLE_KEYS[role], cw + ": its Secret holds %s, the %s role needs %s" % (sorted(data), role, sorted(ROLE_KEYS[role])))
            check(vol["secret"].get("defaultMode") == 0o400, cw + ": key files should be mode 0400")

# The Secrets carry the key files themselves.
import base64  # noqa: E402
for name, s in secrets.items():
    for f, b64 in s.get("data", {}).items():
        check(base64.b64decode(b64) == key_files.get(f), "Secret %s: %s differs from the tessera keys file" % (name, f))

# Every Service selects some workload's pods.
for name, svc in services.items():
    check(any(labels_match(svc["spec"]["selector"], w["spec"]["template"]["metadata"].get("labels", {})) for w in workloads.values()),
          "Service %s selects no pods" % name)

n = len(docs)
if failures:
    print("%d of the checks failed over %d objects" % (len(failures), n))
    sys.exit(1)
print("deploy/k8s: %d objects valid (strict schema %s) and consistent" % (n, root["description"].split("client ")[1].split(" ")[0]))
